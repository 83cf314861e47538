"""COCO annotations with an archive SRC: `file_name`s are member paths, read in place,
and the dataset is the one converting the extracted folder gives, file for file."""

from __future__ import annotations

import json
import tarfile
import zipfile
from pathlib import Path

import pytest

from packer import ConvertOptions, FieldChoice, convert
from packer.core.index import INDEX_NAME, REJECTS_NAME
from packer.formats.base import ShardOptions
from tests.archive_support import MAKERS, add_member, sha256, without_job
from tests.helpers import png_bytes, random_image, run_pack, tree_hashes
from tests.packing.test_coco import EXPECTED, coco_folder, read_back

# Every image in a sub-folder, so that the tar of tars (one tar per top folder) holds them.
NAMES = ["n01/a.png", "n01/deep/b.png", "n02/c.png"]
KEYED = {f"n01/{key}" if key == "a" else "n01/deep/b" if key == "sub/b" else "n02/c": want
         for key, want in EXPECTED.items()}


def run(annotations: Path, workers: int = 0) -> ConvertOptions:
    return ConvertOptions(shards=ShardOptions(max_samples=2), workers=workers,
                          fields=FieldChoice(annotations=str(annotations)))


@pytest.mark.parametrize("kind", list(MAKERS))
def test_archive_converts_like_its_extracted_folder(tmp_path: Path, kind: str) -> None:
    folder, annotations = coco_folder(tmp_path, names=NAMES)
    maker, suffix = MAKERS[kind]
    archive = maker(folder, tmp_path / f"images{suffix}")  # extracts to images/
    before = sha256(archive)
    index = convert(archive, tmp_path / "a" / "ds", "wds", run=run(annotations, workers=2))
    convert(folder, tmp_path / "f" / "ds", "wds", run=run(annotations))
    assert index.num_samples == 3 and index.num_rejected == 0
    ours, theirs = tree_hashes(tmp_path / "a" / "ds"), tree_hashes(tmp_path / "f" / "ds")
    assert ours.pop(INDEX_NAME) != theirs.pop(INDEX_NAME)  # the job fingerprints only
    assert ours == theirs and "ds-00001.tar" in ours
    assert without_job(tmp_path / "a" / "ds") == without_job(tmp_path / "f" / "ds")
    assert read_back(tmp_path / "a" / "ds") == KEYED
    assert sha256(archive) == before  # the source is never modified


def test_names_relative_to_the_one_top_folder(tmp_path: Path) -> None:
    """COCO's train2017.zip holds train2017/<file_name>: it converts like train2017/."""
    folder, annotations = coco_folder(tmp_path, names=["a.png", "b.png", "c.png"],
                                      folder_name="train2017")
    archive = tmp_path / "downloaded.zip"
    with zipfile.ZipFile(archive, "w") as out:
        for path in sorted(folder.rglob("*")):
            out.write(path, path.relative_to(tmp_path).as_posix())
    convert(archive, tmp_path / "a" / "ds", "wds", run=run(annotations))
    convert(folder, tmp_path / "f" / "ds", "wds", run=run(annotations))
    assert without_job(tmp_path / "a" / "ds") == without_job(tmp_path / "f" / "ds")
    ours, theirs = tree_hashes(tmp_path / "a" / "ds"), tree_hashes(tmp_path / "f" / "ds")
    del ours[INDEX_NAME], theirs[INDEX_NAME]
    assert ours == theirs


def test_unusable_members_are_rejects_naming_the_image_id(tmp_path: Path) -> None:
    _, annotations = coco_folder(tmp_path, names=NAMES)
    good = png_bytes(random_image(8, 6, seed=0))
    archive = tmp_path / "images.tar"
    with tarfile.open(archive, "w") as tar:
        add_member(tar, "n01/a.png", good)
        add_member(tar, "n01/deep/b.png", b"", tarfile.SYMTYPE, "../a.png")
        add_member(tar, "n02/c.png", good)
        add_member(tar, "n02/c.png", good)
    data = json.loads(annotations.read_text())
    data["images"].append({"id": 4, "file_name": "n02/gone.png"})
    data["images"].append({"id": 5, "file_name": "../escape.png"})
    annotations.write_text(json.dumps(data))
    dst = tmp_path / "out.wds"
    index = convert(archive, dst, "wds", run=run(annotations))
    assert index.num_samples == 1 and index.num_rejected == 4
    reasons = {entry["path"]: entry["reason"] for entry in
               map(json.loads, (dst / REJECTS_NAME).read_text().splitlines())}
    prefix = f"{archive}:"
    assert "image id 2" in reasons[prefix + "n01/deep/b.png"]
    assert "links are not followed" in reasons[prefix + "n01/deep/b.png"]
    assert "two members of this name" in reasons[prefix + "n02/c.png"]
    assert "image id 4" in reasons[prefix + "n02/gone.png"]
    assert "not a member of" in reasons[prefix + "n02/gone.png"]
    assert "outside" in reasons[prefix + "../escape.png"]


def test_cli_resume_is_a_no_op_and_verify_reads_the_archive(tmp_path: Path) -> None:
    folder, annotations = coco_folder(tmp_path, names=NAMES)
    archive = MAKERS["zip"][0](folder, tmp_path / "images.zip")
    dst = tmp_path / "out.lmdb"
    args = ("convert", archive, dst, "--to", "lmdb", "--annotations", annotations)
    assert run_pack(*args).exit_code == 0
    before = tree_hashes(dst)
    again = run_pack(*args, "--resume")
    assert again.exit_code == 0, again.output
    assert tree_hashes(dst) == before
    ok = run_pack("verify", dst, "--source", archive, "--annotations", annotations)
    assert ok.exit_code == 0, ok.output
    data = json.loads(annotations.read_text())
    data["annotations"][0]["bbox"] = [1, 2, 3, 5]
    annotations.write_text(json.dumps(data))
    changed = run_pack("verify", dst, "--source", archive, "--annotations", annotations)
    assert changed.exit_code == 1
    assert f"{archive}:n01/a.png: fields (boxes," in changed.stderr, changed.stderr
