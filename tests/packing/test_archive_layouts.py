"""An archive is the folder it extracts to, however it was made: `tar cf X.tar -C dir .`
(members start with `./`), a tar of such class tars, sidecar fields, and an archive with
no images refused as the same folder is."""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from packer.core.index import read_index
from tests.helpers import assert_one_line_error, random_image, run_pack
from tests.packing.test_wds_source import stored_by_key


def photo_folder(root: Path) -> Path:
    """Two classes of three images; `cat/0` has a .txt and a .json sidecar, `dog/9.txt`
    is beside no image."""
    for label, name in enumerate(("cat", "dog")):
        (root / name).mkdir(parents=True)
        for i in range(3):
            random_image(16 + i, 12, seed=label * 10 + i).save(root / name / f"{i}.jpg")
    (root / "cat" / "0.txt").write_text("a cat")
    (root / "cat" / "0.json").write_text('{"boxes": [[1, 2, 3, 4]]}')
    (root / "dog" / "9.txt").write_text("no image beside me")
    return root


def dot_tar(folder: Path, out: Path) -> Path:
    """What `tar cf OUT -C FOLDER .` writes: every member name starts with `./`."""
    with tarfile.open(out, "w") as tar:
        tar.add(folder, arcname=".")
    return out


def dot_tar_of_tars(folder: Path, out: Path) -> Path:
    inner = out.parent / "inner"
    inner.mkdir()
    for entry in sorted(folder.iterdir()):
        dot_tar(entry, inner / f"{entry.name}.tar")
    return dot_tar(inner, out)


@pytest.mark.parametrize("make", [dot_tar, dot_tar_of_tars])
def test_dot_prefixed_archives_convert_like_the_folder(tmp_path: Path, make: object) -> None:
    folder = photo_folder(tmp_path / "photos")
    archive = make(folder, tmp_path / "photos.tar")  # type: ignore[operator]
    assert run_pack("convert", folder, tmp_path / "from-folder", "--to", "lmdb").exit_code == 0
    result = run_pack("convert", archive, tmp_path / "from-archive", "--to", "lmdb")
    assert result.exit_code == 0, result.output
    from_folder = stored_by_key(tmp_path / "from-folder")
    from_archive = stored_by_key(tmp_path / "from-archive")
    if make is dot_tar:  # sidecars ride along in a plain tar, as in the folder
        assert from_archive == from_folder
        assert from_archive["cat/0"][2] == {"txt": "a cat", "json": {"boxes": [[1, 2, 3, 4]]}}
    else:  # class tars are read as folders too
        assert {k: v[:2] for k, v in from_archive.items()} == \
            {k: v[:2] for k, v in from_folder.items()}
    index = read_index(tmp_path / "from-archive")
    assert index.class_names == ("cat", "dog")
    verified = run_pack("verify", tmp_path / "from-archive", "--source", archive)
    assert verified.exit_code == 0, verified.output


def test_gnu_tar_dot_archive_with_sidecars(tmp_path: Path) -> None:
    """The archive written by GNU tar itself, when it is installed."""
    folder = photo_folder(tmp_path / "photos")
    archive = tmp_path / "gnu.tar.gz"
    try:
        subprocess.run(["tar", "czf", str(archive), "-C", str(folder), "."], check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"GNU tar cannot run here ({exc})")
    result = run_pack("convert", archive, tmp_path / "out", "--to", "wds", "--fields", "txt")
    assert result.exit_code == 0, result.output
    got = stored_by_key(tmp_path / "out")
    assert got["cat/0"][2] == {"txt": "a cat"}
    assert got["cat/1"][2] == {"txt": None}
    assert run_pack("verify", tmp_path / "out", "--source", archive).exit_code == 0


@pytest.mark.parametrize("packed", ["archive", "folder"])
def test_a_bad_sidecar_is_a_reject_and_its_image_stays(tmp_path: Path, packed: str) -> None:
    folder = photo_folder(tmp_path / "photos")
    (folder / "cat" / "1.json").write_text("{not json")
    archive = dot_tar(folder, tmp_path / "photos.tar")
    src = archive if packed == "archive" else folder
    result = run_pack("convert", src, tmp_path / "out", "--to", "hdf5")
    assert result.exit_code == 0, result.output
    got = stored_by_key(tmp_path / "out")
    assert len(got) == 6 and got["cat/1"][2]["json"] is None
    assert got["cat/0"][2] == {"txt": "a cat", "json": {"boxes": [[1, 2, 3, 4]]}}
    rejects = [json.loads(line) for line in
               (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    where = f"{archive}:cat/1.json" if packed == "archive" else str(folder / "cat" / "1.json")
    assert [r["path"] for r in rejects] == [where]
    assert "not JSON" in rejects[0]["reason"] and "its image is packed" in rejects[0]["reason"]


def test_sidecars_with_upper_case_suffixes_are_fields_in_a_folder_as_in_its_tar(
        tmp_path: Path) -> None:
    folder = photo_folder(tmp_path / "photos")
    (folder / "cat" / "0.txt").rename(folder / "cat" / "0.TXT")
    (folder / "cat" / "0.json").rename(folder / "cat" / "0.Json")
    archive = dot_tar(folder, tmp_path / "photos.tar")
    for name, src in [("from-folder", folder), ("from-archive", archive)]:
        assert run_pack("convert", src, tmp_path / name, "--to", "lmdb").exit_code == 0
    from_folder = stored_by_key(tmp_path / "from-folder")
    assert from_folder == stored_by_key(tmp_path / "from-archive")
    assert from_folder["cat/0"][2] == {"txt": "a cat", "json": {"boxes": [[1, 2, 3, 4]]}}


def test_an_archive_without_images_is_refused_like_the_folder(tmp_path: Path) -> None:
    notes = tmp_path / "notes" / "a"
    notes.mkdir(parents=True)
    (notes / "x.md").write_text("hello")
    (notes / "y.md").write_text("hello")
    archive = dot_tar(tmp_path / "notes", tmp_path / "notes.tar")
    result = run_pack("convert", archive, tmp_path / "out", "--to", "wds")
    assert_one_line_error(result, 1, "no images found", ".md x2")
    assert not (tmp_path / "out").exists()
    flat = tmp_path / "flat.tar"
    with tarfile.open(flat, "w") as tar:
        tar.add(notes / "x.md", arcname="x.md")
    refused = run_pack("convert", flat, tmp_path / "out", "--to", "wds")
    assert_one_line_error(refused, 1, "no top-level class folders", "1 other member: .md")


def test_without_fields_sidecars_are_ignored_files_in_a_folder_as_in_its_tar(
        tmp_path: Path) -> None:
    folder = photo_folder(tmp_path / "photos")
    archive = dot_tar(folder, tmp_path / "photos.tar")
    ignored = []
    for name, src in [("from-folder", folder), ("from-archive", archive)]:
        result = run_pack("convert", src, tmp_path / name, "--to", "lmdb", "--no-fields")
        assert result.exit_code == 0, result.output
        ignored.append(read_index(tmp_path / name).num_ignored)
    assert ignored == [3, 3]  # cat/0.txt, cat/0.json and dog/9.txt
