"""Format to format: a packed dataset is a source, so `pack convert ds.wds ds.lmdb` works.

Every pair of the four formats (same format included) keeps keys, labels and class
names; pass-through keeps the bytes (digests, extensions, and whole data files equal to
a conversion from the images); npy pixels become PNG for the encoded formats; resizing
and re-encoding happen when asked; a damaged source sample is a reject with the reason.
"""

from __future__ import annotations

import io
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from pack_cli import main
from packer import ConvertOptions, convert
from packer.api import verify
from packer.conversion.identity import fingerprint
from packer.core.index import INDEX_NAME, REJECTS_NAME, open_dataset, read_index
from packer.core.record import Record
from packer.encode import EncodeOptions, encode_batch
from packer.errors import BadInputError, SourceError
from packer.formats.base import ShardOptions
from packer.source.scan import scan
from packer.testing import make_sample_folder
from tests.helpers import FORMATS, ODD_NAMES, jpeg_bytes, png_bytes, random_image, tree_hashes
from tests.project import test_contract as contract

NPY_SIZE = (24, 32)
READERS = {"wds": contract.TestWds(), "lmdb": contract.TestLmdb(), "hdf5": contract.TestHdf5(),
           "npy": contract.TestNpy()}
PAIRS = [(a, b) for a in FORMATS for b in FORMATS]


def run(workers: int = 2) -> ConvertOptions:
    return ConvertOptions(shards=ShardOptions(max_samples=7), workers=workers)


def direct_options(fmt: str) -> EncodeOptions:
    return EncodeOptions(size=NPY_SIZE) if fmt == "npy" else EncodeOptions()


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """18 photos-like images in 3 classes, odd names, and one broken file (a reject)."""
    root = make_sample_folder(tmp_path_factory.mktemp("f2f") / "images", count=18, classes=3,
                              min_side=40, max_side=90, seed=3)
    for n, name in enumerate(ODD_NAMES[:9]):
        image = random_image(30 + n, 50 - n, seed=n)
        data = png_bytes(image) if name.endswith(".png") else jpeg_bytes(image)
        path = root / "class_01" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (root / "class_02" / "broken.jpg").write_text("not an image\n")
    return root


@pytest.fixture(scope="module")
def packed(images: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The images converted straight to every format (npy at 24x32)."""
    out = tmp_path_factory.mktemp("packed")
    for fmt in FORMATS:
        convert(images, out / f"ds.{fmt}", fmt, direct_options(fmt), run())
    return {fmt: out / f"ds.{fmt}" for fmt in FORMATS}


def pixels_of(data: bytes) -> bytes:
    with Image.open(io.BytesIO(data)) as image:
        assert image.format == "PNG"
        return image.convert("RGB").tobytes()


@pytest.mark.parametrize(("src_fmt", "dst_fmt"), PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_every_pair(src_fmt: str, dst_fmt: str, packed: dict[str, Path], images: Path,
                    tmp_path: Path) -> None:
    source = packed[src_fmt]
    before = tree_hashes(source)
    dst = tmp_path / "out"
    options = EncodeOptions(size=NPY_SIZE) if dst_fmt == "npy" and src_fmt != "npy" else None
    index = convert(source, dst, dst_fmt, options, run())
    assert tree_hashes(source) == before, "the source dataset was modified"
    src_index, src_table = open_dataset(source)
    _, table = open_dataset(dst)
    assert index.class_names == src_index.class_names
    assert table.keys() == src_table.keys()
    assert np.array_equal(table.labels, src_table.labels)
    assert index.num_rejected == src_index.num_rejected == 1  # inherited: broken.jpg
    assert index.extra["source"]["format"] == src_fmt
    direct = READERS[dst_fmt].stock_read(packed[dst_fmt])
    stored = READERS[dst_fmt].stock_read(dst)
    if src_fmt != "npy" or dst_fmt == "npy":  # bytes as they are, or the same pixels
        assert stored == direct
        assert np.array_equal(table.digests, open_dataset(packed[dst_fmt])[1].digests)
    else:  # npy pixels stored as lossless PNG
        assert index.encode["mode"] == "reencode" and index.encode["codec"] == "png"
        assert [s.ext for s in stored] == ["png"] * len(stored)
        pixels = READERS["npy"].stock_read(source)
        assert [pixels_of(s.data) for s in stored] == [p.data for p in pixels]
    if src_fmt == dst_fmt or "npy" not in (src_fmt, dst_fmt):
        assert np.array_equal(table.digests, src_table.digests)  # a byte copy
    report = verify(dst, source)
    assert report.ok, report.problem
    report = verify(dst, images)
    assert report.ok, report.problem


def test_output_does_not_depend_on_workers(packed: dict[str, Path], tmp_path: Path) -> None:
    for workers in (0, 1, 2):
        convert(packed["lmdb"], tmp_path / f"w{workers}" / "ds.wds", "wds", run=run(workers))
    assert tree_hashes(tmp_path / "w0" / "ds.wds") == tree_hashes(tmp_path / "w1" / "ds.wds") \
        == tree_hashes(tmp_path / "w2" / "ds.wds")
    direct = tree_hashes(packed["wds"])
    again = tree_hashes(tmp_path / "w2" / "ds.wds")
    for name in direct:  # the shards and tables of a conversion from the images
        if name.startswith("ds-") or name in ("samples.npy", "keys.npy", REJECTS_NAME):
            assert again[name] == direct[name], name


def test_resize_and_reencode_when_asked(packed: dict[str, Path], tmp_path: Path) -> None:
    options = EncodeOptions(resize=20, codec="webp", quality=80)
    index = convert(packed["wds"], tmp_path / "small", "hdf5", options, run())
    assert index.encode["mode"] == "reencode"
    stored = READERS["hdf5"].stock_read(tmp_path / "small")
    assert {s.ext for s in stored} == {"webp"}
    for sample in stored:
        with Image.open(io.BytesIO(sample.data)) as image:
            assert min(image.size) == 20
    assert verify(tmp_path / "small", packed["wds"]).ok  # keys and labels; bytes differ
    index = convert(packed["npy"], tmp_path / "npy", "npy", EncodeOptions(size=(16, 12)), run())
    assert index.image_size == (16, 12)
    assert np.load(tmp_path / "npy" / "images.npy").shape == (index.num_samples, 16, 12, 3)
    index = convert(packed["npy"], tmp_path / "jpeg", "lmdb", EncodeOptions(resize=12), run())
    assert index.encode["codec"] == "png"  # pixels: PNG unless --encode says otherwise
    with pytest.raises(ValueError, match="raw pixels"):
        convert(packed["npy"], tmp_path / "bad", "npy", EncodeOptions(resize=12), run())


def test_check_none_keeps_extensions(packed: dict[str, Path], tmp_path: Path) -> None:
    convert(packed["hdf5"], tmp_path / "out", "wds", EncodeOptions(check="none"), run())
    assert READERS["wds"].stock_read(tmp_path / "out") == READERS["wds"].stock_read(
        packed["wds"])


def damage_sample(folder: Path, sample: int) -> str:
    """Flip one byte in the middle of a wds sample; returns its key."""
    _, table = open_dataset(folder)
    index = read_index(folder)
    shard = folder / index.shards[index.shard_of(sample)].name
    offset = int(table.offsets[sample]) + int(table.sizes[sample]) // 2
    with open(shard, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))
    return table.key(sample)


def test_damaged_source_sample_is_a_reject(packed: dict[str, Path], tmp_path: Path) -> None:
    source = tmp_path / "damaged.wds"
    shutil.copytree(packed["wds"], source)
    key = damage_sample(source, 4)
    index = convert(source, tmp_path / "out", "lmdb", run=run())
    assert index.num_samples == read_index(source).num_samples - 1
    assert index.num_rejected == 2  # broken.jpg inherited, and the damaged sample
    lines = (tmp_path / "out" / REJECTS_NAME).read_text(encoding="utf-8")
    assert f"damaged.wds/{key}" in lines and "damaged in the source dataset" in lines
    report = verify(tmp_path / "out", source)
    assert report.ok, report.problem
    with pytest.raises(BadInputError, match="damaged in the source dataset"):
        convert(source, tmp_path / "fail", "lmdb", run=ConvertOptions(on_error="fail"))


def test_cli_convert_and_verify(packed: dict[str, Path], tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "cli.lmdb"
    result = runner.invoke(main, ["convert", str(packed["wds"]), str(out), "--to", "lmdb",
                                  "--quiet"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["verify", str(out), "--source", str(packed["wds"])])
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["convert", str(packed["wds"]), str(packed["wds"] / "x"),
                                  "--to", "lmdb"])
    assert result.exit_code == 1 and "inside the source" in result.output


def test_verify_compares_with_the_source_dataset(packed: dict[str, Path],
                                                 tmp_path: Path) -> None:
    source = tmp_path / "src.wds"
    shutil.copytree(packed["wds"], source)
    convert(source, tmp_path / "copy", "hdf5", run=run())
    convert(packed["lmdb"], tmp_path / "resized", "wds", EncodeOptions(resize=16), run())
    convert(packed["npy"], tmp_path / "pixels", "hdf5", run=run())
    for dst, src in (("copy", source), ("resized", source), ("copy", tmp_path / "resized"),
                     ("pixels", source)):
        report = verify(tmp_path / dst, src)  # bytes compared only where they must match
        assert report.ok, (dst, src, report.problem)
    rows = np.load(source / "samples.npy")
    rows["digest"][5] ^= 1  # the source now says sample 5 holds other bytes
    np.save(source / "samples.npy", rows)
    report = verify(tmp_path / "copy", source)
    assert not report.ok and "bytes differ from sample 5" in str(report.problem)
    assert verify(tmp_path / "resized", source).ok  # resized: keys and labels only
    rows["label"][2] = (rows["label"][2] + 1) % 3
    np.save(source / "samples.npy", rows)
    report = verify(tmp_path / "resized", source)
    assert not report.ok and "label" in str(report.problem)
    report = verify(tmp_path / "copy", packed["npy"].parent / "missing")
    assert not report.ok


def test_unfinished_source_is_refused(packed: dict[str, Path], tmp_path: Path) -> None:
    source = tmp_path / "unfinished.wds"
    shutil.copytree(packed["wds"], source)
    (source / INDEX_NAME).unlink()
    with pytest.raises(SourceError, match="did not finish"):
        convert(source, tmp_path / "out", "lmdb", run=run())


def test_pickled_batches_read_in_the_worker(packed: dict[str, Path]) -> None:
    """What a process or Ray worker gets: compact items; readers open where they read."""
    for fmt in FORMATS:
        items = scan(packed[fmt]).items
        batch = items[3:9]
        sent = pickle.loads(pickle.dumps(batch))
        assert len(pickle.dumps(batch)) < 4096
        options = EncodeOptions(codec="png") if fmt == "npy" else EncodeOptions()
        local, remote = encode_batch(batch, options), encode_batch(sent, options)
        assert [r.position for r in remote] == list(range(3, 9))
        assert all(isinstance(r, Record) for r in remote) and remote == local


def test_fingerprint_follows_the_source_dataset(packed: dict[str, Path],
                                                tmp_path: Path) -> None:
    source = tmp_path / "src.lmdb"
    shutil.copytree(packed["lmdb"], source)
    first = fingerprint(scan(source), {})
    assert fingerprint(scan(source), {}) == first
    convert(packed["wds"], source, "lmdb", EncodeOptions(resize=16),
            ConvertOptions(overwrite=True, workers=0))
    assert fingerprint(scan(source), {}) != first
