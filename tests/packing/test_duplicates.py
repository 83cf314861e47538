"""`pack dedup` (exact duplicates by digest, across splits) and `convert --drop-duplicates`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import packer
from packer.core.index import open_dataset
from packer.dataset.duplicates import exact_duplicates
from packer.dataset.splits import load_subset, split
from packer.testing import make_sample_folder
from tests.helpers import run_pack

# copies made in the source: (copied file, new names); keys sort the originals first
COPIES = {"class_00/img_000000.jpg": ["class_01/zz_copy.jpg", "class_00/zz_copy.jpg"],
          "class_01/img_000003.jpg": ["class_01/zz_other.jpg"]}
COPIED_IMAGE = "class_00/img_000004.jpg"  # copied many times: its group spans splits


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = make_sample_folder(tmp_path_factory.mktemp("dups") / "src", count=12, classes=2,
                              min_side=16, max_side=24)
    for original, names in COPIES.items():
        for name in names:
            shutil.copyfile(root / original, root / name)
    for k in range(10):
        shutil.copyfile(root / COPIED_IMAGE, root / f"class_{k % 2:02d}/many_{k}.jpg")
    return root


def convert(src: Path, dst: Path, fmt: str = "wds", **run: object) -> Path:
    options = packer.EncodeOptions(size=(8, 8)) if fmt == "npy" else None
    packer.convert(src, dst, fmt, options, packer.ConvertOptions(workers=0, **run))  # type: ignore[arg-type]
    return dst


def expected_groups() -> list[list[str]]:
    many = sorted([f"class_{k % 2:02d}/many_{k}" for k in range(10)] + [COPIED_IMAGE[:-4]])
    first = sorted(["class_00/img_000000", "class_01/zz_copy", "class_00/zz_copy"])
    return sorted([first, many, ["class_01/img_000003", "class_01/zz_other"]],
                  key=lambda keys: keys[0])


@pytest.mark.parametrize("fmt", ["wds", "npy"])
def test_exact_duplicates_are_grouped_by_key(src: Path, tmp_path: Path, fmt: str) -> None:
    report = exact_duplicates(convert(src, tmp_path / fmt, fmt))
    assert [list(group.keys) for group in report.groups] == expected_groups()
    assert report.num_duplicates == 2 + 10 + 1
    assert all(group.splits is None for group in report.groups)


def test_duplicates_across_train_and_val_are_flagged(src: Path, tmp_path: Path) -> None:
    dst = convert(src, tmp_path / "wds")
    split(dst, 0.5, seed=0)
    report = exact_duplicates(dst)
    index, _ = open_dataset(dst)
    split_of = {int(i): name for name in ("train", "val")
                for i in load_subset(dst, index, name)}
    for group in report.groups:
        assert group.splits == tuple(split_of[i] for i in group.indices)
    many = next(group for group in report.groups if len(group.keys) == 11)
    assert many.across_splits and set(many.splits or ()) == {"train", "val"}
    result = run_pack("dedup", dst)
    assert result.exit_code == 1, result.output  # a leak between splits fails the command
    assert "span splits" in result.output and "[val]" in result.output
    facts = json.loads(run_pack("dedup", dst, "--json").output)
    assert facts["num_across_splits"] == sum(g.across_splits for g in report.groups) >= 1
    assert facts["groups"][0]["keys"] == expected_groups()[0]


def test_stale_splits_are_named_not_used(src: Path, tmp_path: Path) -> None:
    dst = convert(src, tmp_path / "wds")
    split(dst, 0.5)
    small = convert(src, tmp_path / "small", drop_duplicates=True)
    shutil.copytree(dst / "splits", small / "splits")  # made for another table
    report = exact_duplicates(small)
    assert not report.groups and report.splits_note and "rerun `pack split" in report.splits_note


@pytest.mark.parametrize("fmt", ["wds", "lmdb"])
def test_drop_duplicates_keeps_the_first_by_key(src: Path, tmp_path: Path, fmt: str) -> None:
    result = run_pack("convert", src, tmp_path / fmt, "--to", fmt, "--workers", "0",
                      "--drop-duplicates", "--on-error", "fail")
    assert result.exit_code == 0, result.output  # a dropped duplicate is not an error
    assert "13 rejected inputs" in result.output
    dst = tmp_path / fmt
    assert not exact_duplicates(dst).groups
    _, table = open_dataset(dst)
    kept = set(table.keys())
    rejects = [json.loads(line) for line in (dst / "rejects.jsonl").read_text().splitlines()]
    assert len(rejects) == 13 == open_dataset(dst)[0].num_rejected
    for group in expected_groups():
        assert group[0] in kept and not set(group[1:]) & kept
    by_path = {Path(r["path"]).relative_to(src).with_suffix("").as_posix(): r["reason"]
               for r in rejects}
    assert by_path["class_01/zz_copy"] == "duplicate of 'class_00/img_000000' (the same " \
                                          "stored bytes)"
    assert len(table) + 13 == 12 + 3 + 10


def test_drop_duplicates_changes_the_job(src: Path, tmp_path: Path) -> None:
    dst = convert(src, tmp_path / "wds")
    result = run_pack("convert", src, dst, "--to", "wds", "--workers", "0", "--resume",
                      "--drop-duplicates")
    assert result.exit_code != 0 and "Traceback" not in result.output


def test_drop_duplicates_keeps_the_first_copy_that_is_stored(tmp_path: Path) -> None:
    """The first copy cannot be stored (hdf5 holds no NUL in a str field): it is a reject,
    and the next copy is the one kept, not a duplicate of a sample that is not there."""
    make_sample_folder(tmp_path / "photos", count=1, classes=1, min_side=16, max_side=24)
    image = next((tmp_path / "photos").rglob("*.jpg"))
    lines = []
    for name, caption in [("a", "has\u0000nul"), ("b", "fine"), ("c", "fine too")]:
        shutil.copy(image, tmp_path / f"{name}.jpg")
        lines.append(json.dumps({"path": f"{name}.jpg", "label": "x", "cap": caption}))
    (tmp_path / "m.jsonl").write_text("\n".join(lines) + "\n")
    dst = convert(tmp_path / "m.jsonl", tmp_path / "out.hdf5", "hdf5", drop_duplicates=True)
    assert list(open_dataset(dst)[1].keys()) == ["b"]
    reasons = [json.loads(line)["reason"] for line in (dst / "rejects.jsonl").open()]
    assert len(reasons) == 2 and "NUL" in reasons[0]
    assert reasons[1] == "duplicate of 'b' (the same stored bytes)"
