"""Parquet with image bytes as a source (packer.source.parquet): a binary column or
`{bytes, path}` structs with Hugging Face's ClassLabel metadata, `datasets`' own
to_parquet and save_to_disk output, the Hub's folder of shards. Each converts to every
format with its bytes (or PIL's pixels for npy), labels and fields; verify compares the
cells; bad rows are rejects naming `FILE:row N`; resume works; pyarrow is an extra."""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from packer import ConvertOptions, FieldChoice, convert, formats
from packer.conversion.journal import ResumeRefused
from packer.core.index import INDEX_NAME, REJECTS_NAME, open_dataset
from packer.formats.base import ShardOptions
from packer.source import parquet_read
from packer.source.scan import scan
from tests.helpers import (
    FORMATS,
    assert_one_line_error,
    count_adds,
    jpeg_bytes,
    png_bytes,
    random_image,
    run_pack,
    tree_hashes,
)

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

ROWS = 10
WIDTH, HEIGHT = 16, 12
CLASSES = ("zebra", "ant", "cat")  # ClassLabel order, not sorted: the names come from it
SMALL = ConvertOptions(shards=ShardOptions(max_samples=3), workers=0)


def cells(count: int = ROWS) -> list[bytes]:
    """Small images, JPEG and PNG by turns, all WIDTH x HEIGHT."""
    return [(png_bytes if i % 2 else jpeg_bytes)(random_image(WIDTH, HEIGHT, seed=i))
            for i in range(count)]


def columns(count: int = ROWS) -> dict[str, list[Any]]:
    """The non-image columns: labels and fields (a null caption, float boxes)."""
    return {"label": [i % 3 for i in range(count)],
            "caption": [None if i == 4 else f"photo {i} é" for i in range(count)],
            "score": [i / 7 for i in range(count)],
            "boxes": [[[float(i), 0.5, 2.0, 3.25]] * (i % 3) for i in range(count)]}


def hf_metadata() -> dict[bytes, bytes]:
    features = {"image": {"_type": "Image"},
                "label": {"names": list(CLASSES), "_type": "ClassLabel"},
                "caption": {"dtype": "string", "_type": "Value"}}
    return {b"huggingface": json.dumps({"info": {"features": features}}).encode()}


def write_binary(path: Path, data: list[bytes], labels: list[Any] | None = None,
                 group: int = 4) -> Path:
    """A plain binary image column, string labels (class names), three fields."""
    extra = columns(len(data))
    table = pa.table({"image": pa.array(data, pa.binary()),
                      "label": labels if labels is not None
                      else [CLASSES[n] for n in extra["label"]],
                      **{k: v for k, v in extra.items() if k != "label"}})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=group)
    return path


def write_struct(path: Path, data: list[bytes], group: int = 3, start: int = 0) -> Path:
    """datasets' layout by hand: {bytes, path} structs, int labels, ClassLabel metadata;
    the labels and captions of rows `start`... of columns()."""
    extra = {name: values[start:] for name, values in columns(start + len(data)).items()}
    images = [{"bytes": b, "path": f"img{i}.png"} for i, b in enumerate(data)]
    table = pa.table({"image": images, "label": pa.array(extra["label"], pa.int64()),
                      "caption": extra["caption"]}).replace_schema_metadata(hf_metadata())
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=group)
    return path


def write_datasets(path: Path, data: list[bytes], saved: bool = False) -> Path:
    datasets = pytest.importorskip("datasets")
    extra = columns(len(data))
    ds = datasets.Dataset.from_dict({"image": [{"bytes": b, "path": None} for b in data],
                                     "label": extra["label"], "caption": extra["caption"]})
    ds = ds.cast_column("image", datasets.Image()) \
        .cast_column("label", datasets.ClassLabel(names=list(CLASSES)))
    if saved:
        ds.save_to_disk(str(path))
    else:
        ds.to_parquet(str(path))
    return path


def make_source(kind: str, root: Path) -> tuple[Path, list[tuple[str, bytes, str]]]:
    """A source of `kind` and its expected (key, image bytes, class name) in order."""
    data, labels = cells(), columns()["label"]
    names = [CLASSES[n] for n in labels]
    if kind == "binary":
        return write_binary(root / "b.parquet", data), \
            [(f"b/{i:08d}", data[i], names[i]) for i in range(ROWS)]
    if kind == "hub-folder":  # data/train-0000k-of-00002.parquet, one with 2 row groups
        write_struct(root / "hub" / "data" / "train-00000-of-00002.parquet", data[:6])
        write_struct(root / "hub" / "data" / "train-00001-of-00002.parquet", data[6:], start=6)
        keys = [f"data/train-00000-of-00002/{i:08d}" for i in range(6)] + \
            [f"data/train-00001-of-00002/{i:08d}" for i in range(4)]
        return root / "hub", list(zip(keys, data, names, strict=True))
    made = {"struct": lambda: write_struct(root / "s.parquet", data),
            "datasets": lambda: write_datasets(root / "d.parquet", data),
            "saved": lambda: write_datasets(root / "saved", data, saved=True)}[kind]()
    stem = "data-00000-of-00001" if kind == "saved" else made.stem
    return made, [(f"{stem}/{i:08d}", data[i], names[i]) for i in range(ROWS)]


def read_back(dst: Path) -> tuple[list[str], list[int], list[bytes], list[dict[str, Any]]]:
    """Keys, labels, stored bytes and fields of every sample, by the format's reader."""
    index, table = open_dataset(dst)
    reader = formats.load(index.format).open_reader(dst, index, table)
    try:
        return ([table.key(i) for i in range(len(table))], table.labels.tolist(),
                [bytes(reader.read(i)) for i in range(len(table))],
                [reader.fields(i, None) for i in range(len(table))])
    finally:
        reader.close()


def pil_pixels(data: bytes) -> bytes:
    with Image.open(io.BytesIO(data)) as image:
        return image.convert("RGB").tobytes()


KINDS = ["binary", "struct", "hub-folder", "datasets", "saved"]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", KINDS)
def test_converts_to_every_format(kind: str, fmt: str, tmp_path: Path) -> None:
    src, want = make_source(kind, tmp_path)
    dst = tmp_path / f"out.{fmt}"
    size = ("--size", f"{HEIGHT}x{WIDTH}", "--fit", "stretch") if fmt == "npy" else ()
    shards = ("--shard-samples", "3") if fmt == "wds" else ()  # wds alone has shards
    result = run_pack("convert", src, dst, "--to", fmt, *shards, *size)
    assert result.exit_code == 0, result.output
    index, _ = open_dataset(dst)
    names = sorted(CLASSES) if kind == "binary" else list(CLASSES)
    assert list(index.class_names) == names
    keys, labels, stored, fields = read_back(dst)
    assert keys == [key for key, _, _ in want] or fmt == "npy"
    assert [index.class_names[n] for n in labels] == [name for _, _, name in want]
    for (_, data, _), got in zip(want, stored, strict=True):
        assert got == (pil_pixels(data) if fmt == "npy" else data)
    assert [f["caption"] for f in fields] == columns()["caption"]
    if kind == "binary":
        assert [f["score"] for f in fields] == columns()["score"]
        for got_boxes, boxes in zip((f["boxes"] for f in fields), columns()["boxes"],
                                    strict=True):
            assert np.array_equal(np.asarray(got_boxes).reshape(-1, 4),
                                  np.asarray(boxes, np.float32).reshape(-1, 4))
    verified = run_pack("verify", dst, "--source", src)
    assert verified.exit_code == 0, verified.output


def test_verify_catches_a_changed_cell(tmp_path: Path) -> None:
    data = cells()
    src = write_binary(tmp_path / "b.parquet", data)
    convert(src, tmp_path / "out", "lmdb", run=SMALL)
    data[3] = png_bytes(random_image(WIDTH, HEIGHT, seed=99))
    write_binary(src, data)
    result = run_pack("verify", tmp_path / "out", "--source", src)
    assert result.exit_code != 0
    assert "b.parquet:row 3" in result.output and "bytes differ" in result.output


def test_bad_rows_are_rejects_naming_the_row(tmp_path: Path) -> None:
    data: list[Any] = cells()
    data[2], data[5], data[7] = None, b"not an image at all", b""
    labels: list[Any] = [CLASSES[n] for n in columns()["label"]]
    labels[8] = None
    src = write_binary(tmp_path / "b.parquet", data, labels)
    index = convert(src, tmp_path / "out", "wds", run=SMALL)
    assert index.num_samples == ROWS - 4
    rejects = [json.loads(line) for line in
               (tmp_path / "out" / REJECTS_NAME).read_text().splitlines()]
    reasons = {r["path"].rsplit(":", 1)[1]: r["reason"] for r in rejects}
    assert set(reasons) == {"row 2", "row 5", "row 7", "row 8"}
    assert all(r["path"].startswith(str(src)) for r in rejects)
    assert "null" in reasons["row 2"] and "no label" in reasons["row 8"]
    assert "zero bytes" in reasons["row 7"] and "not an image" in reasons["row 5"]
    assert run_pack("verify", tmp_path / "out", "--source", src).exit_code == 0


def test_a_damaged_row_group_rejects_its_rows_only(tmp_path: Path) -> None:
    src = tmp_path / "crc.parquet"
    table = pa.table({"image": pa.array(cells(9), pa.binary()), "label": [0] * 9})
    pq.write_table(table, src, row_group_size=3, write_page_checksum=True, compression="none",
                   use_dictionary=False)
    chunk = pq.ParquetFile(src).metadata.row_group(1).column(0)
    damaged = bytearray(src.read_bytes())
    damaged[chunk.data_page_offset + chunk.total_compressed_size - 20] ^= 0xFF  # image bytes
    src.write_bytes(bytes(damaged))
    index = convert(src, tmp_path / "out", "hdf5", run=SMALL)
    rejects = [json.loads(line) for line in
               (tmp_path / "out" / REJECTS_NAME).read_text().splitlines()]
    assert index.num_samples == 6
    assert [r["path"] for r in rejects] == [f"{src}:row {row}" for row in (3, 4, 5)]
    assert all(r["reason"].startswith(f"unreadable row group 1 of {src}: ") and "CRC" in
               r["reason"] for r in rejects)


def test_resume_after_interruption(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = write_struct(tmp_path / "s.parquet", cells())
    convert(src, tmp_path / "ref" / "out", "wds", run=SMALL)  # shards carry DST's name
    with pytest.raises(RuntimeError, match="injected"), \
            count_adds(monkeypatch, "wds", fail_after=7):
        convert(src, tmp_path / "out", "wds", run=SMALL)
    assert not (tmp_path / "out" / INDEX_NAME).exists()
    resume = ConvertOptions(shards=ShardOptions(max_samples=3), workers=0, resume=True)
    with count_adds(monkeypatch, "wds") as adds:
        convert(src, tmp_path / "out", "wds", run=resume)
    assert adds[0] == ROWS - 6  # two shards of 3 were durable
    assert tree_hashes(tmp_path / "out") == tree_hashes(tmp_path / "ref" / "out")


def test_resume_refuses_a_changed_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = write_struct(tmp_path / "s.parquet", cells())
    with pytest.raises(RuntimeError, match="injected"), \
            count_adds(monkeypatch, "wds", fail_after=4):
        convert(src, tmp_path / "out", "wds", run=SMALL)
    info = src.stat()
    os.utime(src, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000_000))
    with pytest.raises(ResumeRefused, match="source or the options changed"):
        convert(src, tmp_path / "out", "wds", run=ConvertOptions(
            shards=ShardOptions(max_samples=3), workers=0, resume=True))


def test_threads_read_each_row_group_once(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    src = write_binary(tmp_path / "b.parquet", cells(40), group=5)
    real = parquet_read.read_group
    reads: list[int] = []
    monkeypatch.setattr(parquet_read, "read_group",
                        lambda *args: reads.append(args[2]) or real(*args))
    convert(src, tmp_path / "one" / "out", "hdf5", run=ConvertOptions(workers=0))
    assert sorted(reads) == list(range(8))
    reads.clear()
    convert(src, tmp_path / "four" / "out", "hdf5", run=ConvertOptions(workers=4))
    assert sorted(reads) == list(range(8))
    assert tree_hashes(tmp_path / "one") == tree_hashes(tmp_path / "four")


def test_source_pickles_without_handles(tmp_path: Path) -> None:
    src = write_struct(tmp_path / "s.parquet", cells())
    items = scan(src).items
    assert items[4].origin is not None and items[4].origin.read(items[4]) == cells()[4]
    copy = pickle.loads(pickle.dumps(items[3:6]))
    assert [item.origin.read(item) for item in copy] == cells()[3:6]


def test_without_a_label_column_one_class(tmp_path: Path,
                                          caplog: pytest.LogCaptureFixture) -> None:
    src = tmp_path / "nolabel.parquet"
    pq.write_table(pa.table({"jpg": pa.array(cells(), pa.binary())}), src)
    index = convert(src, tmp_path / "out", "wds", run=SMALL)
    assert index.class_names == ("unlabelled",) and index.num_samples == ROWS
    assert "no label column" in caplog.text
    caplog.clear()
    quiet = replace(SMALL, fields=FieldChoice(label="none"))
    index = convert(src, tmp_path / "quiet", "wds", run=quiet)
    assert index.class_names == ("unlabelled",) and "no label column" not in caplog.text


def test_folder_of_two_splits_is_refused_and_a_glob_taken(tmp_path: Path) -> None:
    data = cells()
    write_struct(tmp_path / "hub" / "data" / "train-00000-of-00001.parquet", data[:6])
    write_struct(tmp_path / "hub" / "data" / "test-00000-of-00001.parquet", data[6:])
    assert_one_line_error(run_pack("convert", tmp_path / "hub", tmp_path / "o", "--to", "wds"),
                          1, "splits test, train", "-*.parquet")
    index = convert(tmp_path / "hub" / "data" / "train-*.parquet", tmp_path / "o", "wds")
    assert index.num_samples == 6


def test_missing_pyarrow_gives_the_install_hint(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    src = write_struct(tmp_path / "s.parquet", cells(2))
    for name in [name for name in sys.modules if name.split(".")[0] == "pyarrow"]:
        monkeypatch.setitem(sys.modules, name, None)
    result = run_pack("convert", src, tmp_path / "out", "--to", "wds")
    assert_one_line_error(result, 1, "s.parquet", "pip install 'packer-readers[parquet]'")


def test_an_image_folder_with_metadata_parquet_stays_a_folder(tmp_path: Path) -> None:
    folder = tmp_path / "imgs" / "cls"
    folder.mkdir(parents=True)
    (folder / "a.png").write_bytes(cells(2)[1])
    shutil.copy(write_struct(tmp_path / "s.parquet", cells(2)), tmp_path / "imgs" / "m.parquet")
    assert [item.key for item in scan(tmp_path / "imgs").items] == ["cls/a"]
