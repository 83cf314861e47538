"""wds shard names carry the dataset's name; datasets with the old `shard-` names still
read, verify and resume (index.json names every shard, so nothing guesses names)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from pack_cli import main
from packer import ConvertOptions, append, convert
from packer.api import verify
from packer.core.index import INDEX_NAME, read_index
from packer.formats._wds_names import MAX_STEM, is_ours, name_of, shard_name, shard_stem
from packer.formats.base import ShardOptions
from packer.testing import make_sample_folder
from readers import PackedDataset, PackedIterableDataset
from readers.options import PartitionOptions
from tests.helpers import count_adds, tree_hashes

RUN = ConvertOptions(shards=ShardOptions(max_samples=5), workers=0)
LEGACY = ConvertOptions(shards=ShardOptions(max_samples=5), workers=0, name="shard")


@pytest.mark.parametrize(("dst", "stem"), [
    ("out/photos.wds", "photos"),
    ("out/photos.wds/", "photos"),
    ("photos", "photos"),
    ("s3://bucket/prefix/photos.wds/", "photos"),
    ("file:///data/train.v2.wds", "train_v2"),
    ("out/my photos (2024).wds", "my_photos_2024"),
    ("out/фото.wds", "shard"),
    ("out/.wds", "wds"),
    ("out/---.wds", "shard"),
])
def test_the_stem_is_dst_name_sanitised(dst: str, stem: str) -> None:
    assert shard_stem(name_of(dst)) == stem


@given(st.text(max_size=300))
def test_any_name_gives_a_safe_stem(name: str) -> None:
    stem = shard_stem(name)
    assert 0 < len(stem) <= MAX_STEM and stem.isascii()
    assert all(c.isalnum() or c in "_-" for c in stem)
    assert is_ours(shard_name(0, stem)) and is_ours(shard_name(123_456, stem) + ".partial")


def test_cli_names_shards_after_dst(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out" / "photos.wds"
    result = CliRunner().invoke(main, ["convert", str(src), str(dst), "--to", "wds",
                                       "--shard-samples", "10", "--workers", "0"])
    assert result.exit_code == 0, result.output
    names = sorted(path.name for path in dst.iterdir())
    assert names == [INDEX_NAME, "keys.npy", "photos-00000.tar", "photos-00001.tar",
                     "photos-00002.tar", "photos.wids.json", "rejects.jsonl", "samples.npy"]
    assert [shard.name for shard in read_index(dst).shards] == names[2:5]


def make_legacy(src: Path, dst: Path) -> Path:
    """A dataset as converted before shard names carried the dataset's name: shard-NNNNN.tar,
    no wids index, nothing about either in index.json."""
    convert(src, dst, "wds", run=LEGACY)
    (dst / "shard.wids.json").unlink()
    data = json.loads((dst / INDEX_NAME).read_text())
    for key in ("image_types", "wids_index"):
        del data["extra"][key]
    (dst / INDEX_NAME).write_text(json.dumps(data))
    return dst


def test_a_legacy_dataset_reads_and_verifies(src: Path, tmp_path: Path) -> None:
    old = make_legacy(src, tmp_path / "photos.wds")
    new = tmp_path / "new" / "photos.wds"
    convert(src, new, "wds", run=RUN)
    assert sorted(p.name for p in old.glob("*.tar")) == [f"shard-{i:05d}.tar" for i in range(5)]
    assert [bytes(x[0]) for x in PackedDataset(old, decode="raw")] == \
        [bytes(x[0]) for x in PackedDataset(new, decode="raw")]
    assert sum(1 for _ in PackedIterableDataset(old,
                                                partition=PartitionOptions(drop_last=False))) == 24
    report = verify(old, src)
    assert report.ok, report.problem
    assert "wids index" not in report.checked and "wids index" in verify(new).checked
    old_shards = {p.name.split("-")[1]: p.read_bytes() for p in old.glob("*.tar")}
    assert old_shards == {p.name.split("-")[1]: p.read_bytes() for p in new.glob("*.tar")}


def test_a_run_started_with_legacy_names_resumes_with_them(
        mixed_src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dst = tmp_path / "photos.wds"
    with pytest.raises(RuntimeError, match="injected"), \
            count_adds(monkeypatch, "wds", fail_after=13):
        convert(mixed_src, dst, "wds", run=LEGACY)
    assert (dst / "shard-00000.tar").is_file() and not (dst / INDEX_NAME).exists()
    convert(mixed_src, dst, "wds", run=ConvertOptions(shards=RUN.shards, workers=0,
                                                      resume=True))
    reference = tmp_path / "ref" / "photos.wds"
    convert(mixed_src, reference, "wds", run=LEGACY)
    assert tree_hashes(dst) == tree_hashes(reference)  # one name throughout: shard-
    assert verify(dst, mixed_src).ok


def test_resume_before_any_shard_ended_drops_the_old_partial(
        mixed_src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dst = tmp_path / "photos.wds"
    with pytest.raises(RuntimeError, match="injected"), \
            count_adds(monkeypatch, "wds", fail_after=2):
        convert(mixed_src, dst, "wds", run=LEGACY)
    (dst / "shard-00007.tar").write_bytes(b"committed, never journalled")
    assert {p.name for p in dst.glob("shard-*")} == {"shard-00000.tar.partial",
                                                     "shard-00007.tar"}
    convert(mixed_src, dst, "wds", run=ConvertOptions(shards=RUN.shards, workers=0,
                                                      resume=True))
    reference = tmp_path / "ref" / "photos.wds"
    convert(mixed_src, reference, "wds", run=RUN)
    assert tree_hashes(dst) == tree_hashes(reference)  # nothing stray; photos- names


def test_overwrite_of_a_renamed_dataset(src: Path, tmp_path: Path) -> None:
    convert(src, tmp_path / "a.wds", "wds", run=RUN)
    shutil.move(tmp_path / "a.wds", tmp_path / "b.wds")
    convert(src, tmp_path / "b.wds", "wds", run=ConvertOptions(shards=RUN.shards, workers=0,
                                                              overwrite=True))
    names = {p.name for p in (tmp_path / "b.wds").iterdir()}
    assert "b-00000.tar" in names and "b.wids.json" in names
    assert not [name for name in names if name.startswith("a")]



def test_an_append_to_a_dataset_without_shards_names_them_as_a_conversion_does(
        tmp_path: Path) -> None:
    """A wds dataset whose every input was rejected has no shard to take a stem from: the
    shards an append adds carry DST's name without its suffix, as a conversion's do."""
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "broken.jpg").write_bytes(b"not a jpeg")
    dst = tmp_path / "photos.wds"
    convert(src, dst, "wds", run=RUN)
    assert read_index(dst).shards == ()
    good = make_sample_folder(tmp_path / "good", count=6, classes=1, min_side=16, max_side=24)
    for path in (good / "class_00").iterdir():
        shutil.copy(path, src / "a" / path.name)
    append(src, dst, workers=0)
    assert [shard.name for shard in read_index(dst).shards] == ["photos-00000.tar",
                                                                "photos-00001.tar"]
    assert (dst / "photos.wids.json").is_file() and verify(dst).ok
