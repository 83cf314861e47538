"""wids reads our wds output through the shard index written beside the shards.

    wids.ShardListDataset("DST/<name>.wids.json")

Skipped when wids is missing (`pip install '.[frameworks]'`).
"""

from __future__ import annotations

import importlib
import json
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from click.testing import CliRunner

from pack_cli import main
from packer import ConvertOptions, convert
from packer.api import verify
from packer.core.index import INDEX_NAME, open_dataset, read_index
from packer.formats import _wids
from packer.formats.base import ShardOptions
from packer.testing import make_sample_folder
from readers import PackedDataset
from tests.helpers import jpeg_bytes, random_image, tree_hashes

wids = pytest.importorskip("wids")

RUN = ConvertOptions(shards=ShardOptions(max_samples=5), workers=0)


def wids_samples(index_file: Path, cache_dir: Path) -> list[tuple[str, int, bytes]]:
    """(key, label, image bytes) of every sample, as wids gives them."""
    ds = wids.ShardListDataset(str(index_file), cache_dir=str(cache_dir), transformations=[])
    out = []
    for i in range(len(ds)):
        sample = ds[i]
        images = [k for k in sample if not k.startswith("__") and k != ".cls"]
        assert len(images) == 1, sorted(sample)
        out.append((unquote(sample["__key__"]), int(sample[".cls"].read()),
                    sample[images[0]].read()))
    ds.close()
    return out


def ours(dst: Path) -> list[tuple[str, int, bytes]]:
    ds = PackedDataset(dst, decode="raw", with_keys=True)
    return [(key, int(label), bytes(data)) for data, label, key in ds]


def test_wids_reads_every_sample(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "photos.wds"
    convert(src, dst, "wds", run=RUN)
    index = json.loads((dst / "photos.wids.json").read_text())
    assert index["__kind__"] == "wids-shard-index-v1" and index["wids_version"] == 1
    assert [s["url"] for s in index["shardlist"]] == [s.name for s in read_index(dst).shards]
    got = wids_samples(dst / "photos.wids.json", tmp_path / "cache")
    assert len(got) == 24
    assert got == ours(dst)  # keys, labels and the stored bytes, in index order


def test_a_moved_dataset_still_resolves_its_shards(src: Path, tmp_path: Path) -> None:
    """URLs in the index are relative to its folder."""
    convert(src, tmp_path / "photos.wds", "wds", run=RUN)
    moved = Path(shutil.move(tmp_path / "photos.wds", tmp_path / "elsewhere"))
    assert len(wids_samples(moved / "photos.wids.json", tmp_path / "cache")) == 24


def two_datasets(tmp_path: Path, legacy: bool) -> tuple[Path, Path]:
    run = ConvertOptions(shards=RUN.shards, workers=0, name="shard" if legacy else None)
    out = []
    for seed, name in ((1, "cats"), (2, "dogs")):
        src = make_sample_folder(tmp_path / f"src-{name}", count=12, classes=2, seed=seed,
                                 min_side=24, max_side=48)
        out.append(tmp_path / f"{name}.wds")
        convert(src, out[-1], "wds", run=run)
    return out[0], out[1]


def test_a_shared_cache_dir_keeps_datasets_apart(tmp_path: Path) -> None:
    cats, dogs = two_datasets(tmp_path, legacy=False)
    cache = tmp_path / "shared-cache"
    assert wids_samples(cats / "cats.wids.json", cache) == ours(cats)
    assert wids_samples(dogs / "dogs.wids.json", cache) == ours(dogs)


def test_legacy_names_collide_in_a_shared_cache_dir(tmp_path: Path) -> None:
    """Why shards carry the dataset's name: wids caches by base name, so two datasets
    with shard-00000.tar each get the first one's bytes."""
    cats, dogs = two_datasets(tmp_path, legacy=True)
    cache = tmp_path / "shared-cache"
    assert wids_samples(cats / "shard.wids.json", cache) == ours(cats)
    assert wids_samples(dogs / "shard.wids.json", cache) != ours(dogs)


def key_source(root: Path, names: list[str]) -> Path:
    for n, name in enumerate(names):
        path = root / "c" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(jpeg_bytes(random_image(20, 20, seed=n)))
    return root


# A member name is <encoded key>.<ext> in tar's 100-byte name field: with .jpg and .cls,
# 96 bytes of key fit ("c/" + 94).
FITS = "x" * 94 + ".jpg"


@pytest.mark.parametrize(("name", "why"), [
    ("x" * 95 + ".jpg", "over 96 bytes"),
    ("x" * 90 + "...jpg", "over 96 bytes"),  # dots are percent-encoded: 3 bytes each
    ("naïve.jpg", "not ASCII"),
    ("new\nline.jpg", "newline"),
])
def test_keys_wids_cannot_read_get_no_index(name: str, why: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    src = key_source(tmp_path / "src", ["a.jpg", FITS, name])
    dst = tmp_path / "photos.wds"
    result = CliRunner().invoke(main, ["convert", str(src), str(dst), "--to", "wds",
                                       "--workers", "0"])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "no wids index" in notes[0] and why in notes[0], notes
    assert repr(name.rsplit(".", 1)[0])[1:-1] in notes[0]  # it names the key
    index = read_index(dst)
    assert index.extra["wids_index"] is None and not (dst / "photos.wids.json").exists()
    assert verify(dst, src).ok
    # the reason: an index written anyway is misread
    monkeypatch.setattr(_wids, "unreadable_key", lambda *args: None)
    forced = tmp_path / "forced" / "photos.wds"
    convert(src, forced, "wds", run=RUN)
    try:
        got: Any = wids_samples(forced / "photos.wids.json", tmp_path / "cache")
    except Exception as exc:  # wids gives up on the shard
        got = exc
    assert got != ours(forced)


def test_the_longest_key_that_fits_is_read_right(tmp_path: Path) -> None:
    src = key_source(tmp_path / "src", ["a.jpg", FITS, "z.jpg"])
    dst = tmp_path / "photos.wds"
    convert(src, dst, "wds", run=RUN)
    assert read_index(dst).extra["wids_index"] == "photos.wids.json"
    assert wids_samples(dst / "photos.wids.json", tmp_path / "cache") == ours(dst)


def test_the_wids_index_is_written_before_index_json(src: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """index.json stays the completeness mark; --resume and --overwrite treat the wids
    index as ours."""
    convert_module = importlib.import_module("packer.conversion.job")

    dst = tmp_path / "out" / "photos.wds"
    with monkeypatch.context() as patch:
        def killed(*args: object) -> None:
            raise KeyboardInterrupt
        patch.setattr(convert_module, "write_index", killed)
        with pytest.raises(KeyboardInterrupt):
            convert(src, dst, "wds", run=RUN)
    assert (dst / "photos.wids.json").is_file() and not (dst / INDEX_NAME).exists()
    argv = ["convert", str(src), str(dst), "--to", "wds", "--shard-samples", "5",
            "--workers", "0"]
    assert "--resume" in CliRunner().invoke(main, argv).stderr
    assert CliRunner().invoke(main, [*argv, "--resume"]).exit_code == 0
    reference = tmp_path / "ref" / "photos.wds"
    convert(src, reference, "wds", run=RUN)
    assert tree_hashes(dst) == tree_hashes(reference)
    assert CliRunner().invoke(main, [*argv, "--overwrite"]).exit_code == 0
    assert tree_hashes(dst) == tree_hashes(reference)


@pytest.mark.parametrize("damage", ["delete", "edit"])
def test_verify_checks_the_wids_index(src: Path, tmp_path: Path, damage: str) -> None:
    dst = tmp_path / "photos.wds"
    convert(src, dst, "wds", run=RUN)
    path = dst / "photos.wids.json"
    if damage == "delete":
        path.unlink()
    else:
        data = json.loads(path.read_text())
        data["shardlist"][1]["nsamples"] += 1
        path.write_text(json.dumps(data))
    report = verify(dst)
    assert not report.ok and report.problem is not None
    assert str(path) in report.problem and "\n" not in report.problem
    table = open_dataset(dst)[1]
    assert len(table) == 24  # our readers never needed it
