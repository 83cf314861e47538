"""Archives as SRC: .tar, a tar of tars (ImageNet's layout) and .zip, read in place.

Converting an archive gives the dataset that converting its extracted folder gives
(every file byte for byte; index.json differs only in the job's fingerprints, which
hash the source listing and so its paths); bad members are rejects naming
`ARCHIVE:MEMBER`; a truncated archive is one error naming the last good member;
resume and `pack verify --source` work on archives, which are never modified.
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from packer import ConvertOptions, convert
from packer.conversion import job
from packer.core.index import INDEX_NAME, open_dataset
from packer.errors import SourceError
from packer.source import archive as archive_scan
from packer.source import tarheaders, zipdirectory
from packer.source.scan import scan
from packer.testing import make_sample_folder
from tests.archive_support import (
    MAKERS,
    WDS,
    make_tar,
    make_tar_of_tars,
    sha256,
    without_job,
)
from tests.helpers import tree_hashes


@pytest.mark.parametrize("fmt", ["wds", "lmdb", "hdf5"])
@pytest.mark.parametrize("kind", list(MAKERS))
def test_archive_converts_like_its_extracted_folder(src: Path, tmp_path: Path, kind: str,
                                                    fmt: str) -> None:
    maker, suffix = MAKERS[kind]
    archive = maker(src, tmp_path / f"train{suffix}")
    before = sha256(archive)
    convert(archive, tmp_path / "from-archive" / "ds", fmt, run=WDS)
    convert(src, tmp_path / "from-folder" / "ds", fmt, run=WDS)
    ours, theirs = (tree_hashes(tmp_path / side / "ds") for side in ("from-archive",
                                                                       "from-folder"))
    assert ours.pop(INDEX_NAME) != theirs.pop(INDEX_NAME)  # the job fingerprints only
    assert ours == theirs
    assert without_job(tmp_path / "from-archive" / "ds") == \
        without_job(tmp_path / "from-folder" / "ds")
    assert sha256(archive) == before  # the source is never modified


@pytest.mark.parametrize("kind", list(MAKERS))
def test_odd_member_names_convert_like_the_folder(odd_src: Path, tmp_path: Path,
                                                  kind: str) -> None:
    maker, suffix = MAKERS[kind]
    archive = maker(odd_src, tmp_path / f"odd{suffix}")
    convert(archive, tmp_path / "a" / "ds", "wds")
    convert(odd_src, tmp_path / "f" / "ds", "wds")
    ours, theirs = tree_hashes(tmp_path / "a" / "ds"), tree_hashes(tmp_path / "f" / "ds")
    del ours[INDEX_NAME], theirs[INDEX_NAME]
    assert ours == theirs
    assert without_job(tmp_path / "a" / "ds") == without_job(tmp_path / "f" / "ds")


@pytest.mark.parametrize("form", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
@pytest.mark.parametrize("nested", [False, True])
def test_header_reader_lists_what_tarfile_lists(odd_src: Path, mixed_src: Path,
                                                tmp_path: Path, form: int,
                                                nested: bool) -> None:
    """The fast header reader (tarheaders) against tarfile, member for member."""
    for n, folder in enumerate((odd_src, mixed_src)):
        archive = make_tar(folder, tmp_path / f"{n}.tar", form)
        if nested:
            archive = make_tar_of_tars(folder, tmp_path / f"{n}-nested.tar")
        size = archive.stat().st_size
        fd = os.open(archive, os.O_RDONLY)
        try:
            fast = list(tarheaders.tar_entries(fd, str(archive), size))
        finally:
            os.close(fd)
        slow = list(archive_scan._tar_entries(archive, size, "r:"))
        assert [(e.name.rstrip("/"), e.kind, e.offset, e.size) for e in fast] == \
            [(e.name.rstrip("/"), e.kind, e.offset, e.size) for e in slow]
        assert len(fast) > 10


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_zip_directory_reader_lists_what_zipfile_lists(odd_src: Path, tmp_path: Path,
                                                       compression: int) -> None:
    archive = tmp_path / "odd.zip"
    with open(archive, "wb") as handle:
        handle.write(b"#!prepended, as a self-extractor has\n")
        with zipfile.ZipFile(handle, "w", compression) as out:
            for path in sorted(odd_src.rglob("*")):
                out.write(path, path.relative_to(odd_src).as_posix())
            out.writestr("cls/secret.jpg", b"x")
            out.infolist()[-1].flag_bits |= 1  # flagged encrypted in the directory
    ours = list(zipdirectory.zip_entries(archive))
    with zipfile.ZipFile(archive) as reference:
        infos = reference.infolist()
    assert [e.name for e in ours] == [i.filename for i in infos]
    files = [(e.offset, e.size, e.method, e.crc) for e in ours if e.kind == "file"]
    assert files == [(i.header_offset, i.compress_size, i.compress_type, i.CRC)
                     for i in infos if not i.is_dir() and not i.flag_bits & 1]
    assert ours[-1].kind.startswith("encrypted")
    (shifted,) = [e for e in scan(archive).items if e.key == "cls/with space"]
    assert shifted.origin is not None and shifted.origin.read(shifted) == \
        (odd_src / "cls" / "with space.jpg").read_bytes()


@pytest.mark.skipif(shutil.which("zip") is None,
                    reason="needs Info-ZIP's zip (apt-get install zip)")
def test_a_zip_made_by_info_zip_keeps_its_non_ascii_names(tmp_path: Path) -> None:
    """Info-ZIP stores names as the file system gives them (UTF-8 here) without the zip's
    UTF-8 flag, and `unzip` extracts them so: the zip converts like the folder."""
    folder = make_sample_folder(tmp_path / "src", count=4, classes=2, min_side=16, max_side=24)
    for i, path in enumerate(sorted(folder.rglob("*.jpg"))):
        path.rename(path.with_name(f"{'éü'[i % 2]} {i}.jpg"))
    (folder / "class_00").rename(folder / "chat é")
    archive = tmp_path / "photos.zip"
    subprocess.run(["zip", "-qr", str(archive), "."], cwd=folder, check=True,
                   env={**os.environ, "LC_ALL": "C.UTF-8"})
    with zipfile.ZipFile(archive) as made:
        assert not any(info.flag_bits & 0x800 for info in made.infolist())  # as Info-ZIP does
    keys = {}
    for name, src in [("folder", folder), ("zip", archive)]:
        convert(src, tmp_path / f"{name}.lmdb", "lmdb", run=ConvertOptions(workers=0))
        index, table = open_dataset(tmp_path / f"{name}.lmdb")
        keys[name] = (index.class_names, list(table.keys()))
    assert keys["zip"] == keys["folder"]
    assert keys["zip"][0][0] == "chat é" and "chat é/é 0" in keys["zip"][1]


def test_zip64_member_count(tmp_path: Path) -> None:
    """Over 65,535 members: the counts live in the zip64 end record."""
    archive = tmp_path / "many.zip"
    with zipfile.ZipFile(archive, "w") as out:
        for i in range(0x10000 + 5):
            out.writestr(f"c/{i}.txt", b"")
    ours = list(zipdirectory.zip_entries(archive))
    with zipfile.ZipFile(archive) as reference:
        last = reference.infolist()[-1]
    assert len(ours) == 0x10000 + 5
    assert (ours[-1].name, ours[-1].offset) == (last.filename, last.header_offset)


def test_unusual_headers_fall_back_to_tarfile(src: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    archive = make_tar(src, tmp_path / "train.tar")
    fast = scan(archive)

    def unusual(*args: object) -> None:
        raise tarheaders._Unusual("test")

    monkeypatch.setattr(archive_scan, "tar_entries", unusual)
    slow = scan(archive)
    assert slow.archive is not None and fast.archive is not None
    assert slow.archive.fingerprint == fast.archive.fingerprint


@pytest.mark.parametrize(("name", "clean"), [
    ("a/b.jpg", "a/b.jpg"), ("./a/b.jpg", "a/b.jpg"), ("a//b.jpg", "a/b.jpg"), ("a/b/", "a/b"),
    ("a/.h/x.jpg", "a/.h/x.jpg"), ("a\\b.jpg", "a\\b.jpg"), ("../e.jpg", None),
    ("a/../b.jpg", None), ("a/b/..", None), ("..", None), ("/abs.jpg", None)])
def test_member_paths_are_cleaned_or_refused(name: str, clean: str | None) -> None:
    assert archive_scan.clean_name(name) == clean


def test_ray_executor_is_refused_for_an_archive(src: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(job, "check_executor", lambda *args: None)  # no cluster needed
    archive = make_tar(src, tmp_path / "train.tar")
    with pytest.raises(SourceError, match="SRC is read by the local executor only"):
        convert(archive, tmp_path / "out", "wds", run=ConvertOptions(executor="ray"))


def test_scan_names_members_and_classes(src: Path, tmp_path: Path) -> None:
    archive = make_tar_of_tars(src, tmp_path / "train.tar")
    source = scan(archive)
    folder = scan(src)
    assert source.class_names == folder.class_names
    assert [item.key for item in source.items] == [item.key for item in folder.items]
    assert [item.label for item in source.items] == [item.label for item in folder.items]
    first = source.items[0]
    assert first.path == f"{archive}:{first.key}{Path(folder.items[0].path).suffix}"
    restored = pickle.loads(pickle.dumps(source.items[3:5]))  # worker processes
    assert restored[0].origin is not None and restored[0].origin.read(restored[0]) == \
        Path(folder.items[3].path).read_bytes()


@pytest.mark.parametrize("kind", ["zip", "tgz"])
def test_threads_give_the_same_output(src: Path, tmp_path: Path, kind: str) -> None:
    maker, suffix = MAKERS[kind]
    archive = maker(src, tmp_path / f"train{suffix}")
    for workers in (0, 2):
        convert(archive, tmp_path / str(workers) / "ds", "wds",
                run=ConvertOptions(workers=workers))
    assert tree_hashes(tmp_path / "0" / "ds") == tree_hashes(tmp_path / "2" / "ds")


def test_memory_benchmark_archive_is_a_tar_of_tiny_images(tmp_path: Path) -> None:
    """devtools.bench.archive_memory measures tars like this one (10 classes, N images)."""
    from devtools.bench.archive_memory import write_tar

    source = scan(write_tar(tmp_path / "tiny.tar", 25))
    assert len(source.items) == 25 and len(source.class_names) == 10
    assert source.archive is not None and len(set(source.archive.table.sizes.tolist())) > 1
