"""Archives as SRC: .tar, a tar of tars (ImageNet's layout) and .zip, read in place.

Converting an archive gives the dataset that converting its extracted folder gives
(every file byte for byte; index.json differs only in the job's fingerprints, which
hash the source listing and so its paths); bad members are rejects naming
`ARCHIVE:MEMBER`; a truncated archive is one error naming the last good member;
resume and `pack verify --source` work on archives, which are never modified.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import shutil
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from pack_cli import main
from packer import ConvertOptions, convert
from packer.api import verify
from packer.conversion import job
from packer.conversion.journal import ResumeRefused
from packer.core.index import INDEX_NAME, REJECTS_NAME, read_index
from packer.errors import SourceError
from packer.formats.base import ShardOptions
from packer.source import archive as archive_scan
from packer.source import tarheaders, zipdirectory
from packer.source.scan import scan
from tests.helpers import count_adds, jpeg_bytes, random_image, tree_hashes

Maker = Callable[[Path, Path], Path]
WDS = ConvertOptions(shards=ShardOptions(max_samples=4), workers=0)
RESUME = ConvertOptions(shards=ShardOptions(max_samples=4), workers=0, resume=True)


def make_tar(folder: Path, out: Path, form: int = tarfile.DEFAULT_FORMAT) -> Path:
    """`folder`'s classes as the archive's top-level folders."""
    with tarfile.open(out, "w", format=form) as tar:
        for entry in sorted(folder.iterdir()):
            tar.add(entry, arcname=entry.name)
    return out


def make_zip(folder: Path, out: Path) -> Path:
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            archive.write(path, path.relative_to(folder).as_posix())
    return out


def make_tar_of_tars(folder: Path, out: Path) -> Path:
    """ImageNet's layout: one `<class>.tar` per class folder inside the outer tar."""
    inner_dir = out.parent / f"{out.stem}-inner"
    inner_dir.mkdir()
    with tarfile.open(out, "w") as outer:
        for entry in sorted(folder.iterdir()):
            inner = inner_dir / f"{entry.name}.tar"
            with tarfile.open(inner, "w") as tar:
                for path in sorted(entry.rglob("*")):
                    tar.add(path, arcname=path.relative_to(entry).as_posix(), recursive=False)
            outer.add(inner, arcname=inner.name)
    return out


def make_tgz(folder: Path, out: Path) -> Path:
    """A .tar.gz, members in name order (tarfile.add sorts what it walks)."""
    with tarfile.open(out, "w:gz") as tar:
        for entry in sorted(folder.iterdir()):
            tar.add(entry, arcname=entry.name)
    return out


MAKERS: dict[str, tuple[Maker, str]] = {"tar": (make_tar, ".tar"), "zip": (make_zip, ".zip"),
                                        "tars": (make_tar_of_tars, ".tar"),
                                        "tgz": (make_tgz, ".tar.gz")}


def add_member(tar: tarfile.TarFile, name: str, data: bytes, kind: bytes = tarfile.REGTYPE,
               link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.size, info.type, info.linkname = len(data), kind, link
    tar.addfile(info, io.BytesIO(data) if data else None)


def without_job(folder: Path) -> dict[str, object]:
    """index.json less the job's two fingerprints (they hash the source's paths)."""
    index: dict[str, object] = json.loads((folder / INDEX_NAME).read_text())
    job = index["extra"]["job"]  # type: ignore[index]
    del job["fingerprint"], job["source"]
    return index


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


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
        raise tarheaders.Unusual("test")

    monkeypatch.setattr(archive_scan, "tar_entries", unusual)
    slow = scan(archive)
    assert slow.archive is not None and fast.archive is not None
    assert slow.archive.identity == fast.archive.identity


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
    with pytest.raises(SourceError, match="archive SRC is read by the local executor only"):
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


def bad_tar(path: Path) -> Path:
    good = jpeg_bytes(random_image(32, 24))
    with tarfile.open(path, "w") as tar:
        add_member(tar, "cat/good.jpg", good)
        add_member(tar, "cat/empty.jpg", b"")
        add_member(tar, "cat/text.jpg", b"not an image\n")
        add_member(tar, "cat/cut.jpg", good[: len(good) // 2])
        add_member(tar, "cat/link.jpg", b"", tarfile.SYMTYPE, "good.jpg")
        add_member(tar, "cat/hard.jpg", b"", tarfile.LNKTYPE, "cat/good.jpg")
        add_member(tar, "../evil.jpg", good)
        add_member(tar, "dog/twice.jpg", good)
        add_member(tar, "dog/twice.jpg", good)
        add_member(tar, "dog/notes.txt", b"ignored")
        add_member(tar, "dog/.hidden/x.jpg", good)
        add_member(tar, "README", b"ignored")
    return path


def test_bad_members_are_rejects_naming_archive_and_member(tmp_path: Path) -> None:
    archive = bad_tar(tmp_path / "train.tar")
    index = convert(archive, tmp_path / "out", "wds", run=WDS)
    lines = (tmp_path / "out" / REJECTS_NAME).read_text().splitlines()
    reasons = {entry["path"]: entry["reason"] for entry in map(json.loads, lines)}
    prefix = f"{archive}:"
    assert reasons[prefix + "cat/empty.jpg"].startswith("zero bytes")
    assert reasons[prefix + "cat/text.jpg"].startswith("not an image")
    assert reasons[prefix + "cat/cut.jpg"].startswith(("truncated", "corrupt"))
    assert "link" in reasons[prefix + "cat/link.jpg"]
    assert "link" in reasons[prefix + "cat/hard.jpg"]
    assert "escapes the archive" in reasons[prefix + "../evil.jpg"]
    assert "duplicate key 'dog/twice'" in reasons[prefix + "dog/twice.jpg"]
    assert len(reasons) == len(lines) == 7
    assert index.num_samples == 2 and index.num_rejected == 7
    assert index.class_names == ("cat", "dog")
    assert index.num_ignored == 3  # README, dog/notes.txt, dog/.hidden


def test_corrupt_zip_member_is_a_reject(tmp_path: Path) -> None:
    data = jpeg_bytes(random_image(32, 24))
    archive = tmp_path / "train.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as out:
        out.writestr("cat/a.jpg", data)
        out.writestr("cat/b.jpg", data)
    raw = bytearray(archive.read_bytes())
    at = raw.rfind(data[-64:])  # inside the last member's data: its CRC no longer matches
    raw[at + 10] ^= 0xFF
    archive.write_bytes(bytes(raw))
    index = convert(archive, tmp_path / "out", "lmdb")
    (reject,) = map(json.loads, (tmp_path / "out" / REJECTS_NAME).read_text().splitlines())
    assert reject == {"path": f"{archive}:cat/b.jpg",
                      "reason": "corrupt in the archive: CRC-32 mismatch"}
    assert index.num_samples == 1


def test_truncated_tar_is_one_error_naming_the_last_good_member(src: Path,
                                                                tmp_path: Path) -> None:
    archive = make_tar(src, tmp_path / "train.tar")
    names = [m.name for m in tarfile.open(archive).getmembers()]
    with tarfile.open(archive) as tar:
        cut_member = tar.getmember(names[-3])
    with open(archive, "r+b") as handle:  # cut inside the data of the third-last member
        handle.truncate(cut_member.offset_data + 10)
    result = CliRunner().invoke(main, ["convert", str(archive), str(tmp_path / "out"),
                                       "--to", "wds", "--quiet"])
    assert result.exit_code == 1, result.output
    message = result.output.strip()
    assert len(message.splitlines()) == 1
    assert str(archive) in message and f"after member {names[-4]!r}" in message
    assert not (tmp_path / "out" / INDEX_NAME).exists()


def test_truncated_zip_is_one_error(src: Path, tmp_path: Path) -> None:
    archive = make_zip(src, tmp_path / "train.zip")
    archive.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    with pytest.raises(SourceError, match=r"train\.zip: not a readable zip .*truncated"):
        scan(archive)


@pytest.mark.parametrize("name", ["train.tgz", "gzipped.tar"])
def test_gzipped_tar_by_any_name(src: Path, tmp_path: Path, name: str) -> None:
    archive = make_tgz(src, tmp_path / name)
    assert [i.key for i in scan(archive).items] == [i.key for i in scan(src).items]


@pytest.mark.parametrize(("name", "mode"), [("train.tar.xz", "w:xz"), ("train.tbz2", "w:bz2")])
def test_other_compressed_tars_are_refused_with_the_fix(src: Path, tmp_path: Path, name: str,
                                                        mode: str) -> None:
    archive = tmp_path / name
    with tarfile.open(archive, mode) as tar:
        tar.add(src, arcname=".")
    with pytest.raises(SourceError, match="only gzip-compressed tars are read; decompress"):
        scan(archive)


def test_truncated_gzip_stream_is_one_error(src: Path, tmp_path: Path) -> None:
    archive = make_tgz(src, tmp_path / "train.tar.gz")
    archive.write_bytes(archive.read_bytes()[: archive.stat().st_size * 2 // 3])
    result = CliRunner().invoke(main, ["convert", str(archive), str(tmp_path / "out"),
                                       "--to", "wds", "--quiet"])
    assert result.exit_code == 1, result.output
    message = result.output.strip()
    assert len(message.splitlines()) == 1
    assert f"{archive}: truncated or damaged after member 'class_" in message


def test_gzipped_tar_out_of_name_order_is_refused(src: Path, tmp_path: Path) -> None:
    archive = tmp_path / "train.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(src.rglob("*.*"), reverse=True):
            tar.add(path, arcname=path.relative_to(src).as_posix())
    with pytest.raises(SourceError, match=r"not stored in name order.*gunzip -k"):
        scan(archive)


def test_gzip_cursor_serves_any_order(src: Path, tmp_path: Path) -> None:
    """Threads ask a little out of order, resume starts midway, verify may go back."""
    archive = make_tgz(src, tmp_path / "train.tar.gz")
    items = scan(archive).items
    expected = [Path(item.path).read_bytes() for item in scan(src).items]
    origin = items[0].origin
    assert origin is not None
    order = [5, 3, 4, 6, 0, 1, 2, 9, 7, 8, *range(10, len(items)), 2, 1, len(items) - 1]
    assert all(origin.read(items[i]) == expected[i] for i in order)


@pytest.mark.parametrize("kind", ["tar", "tgz"])
def test_resume_after_interruption_is_byte_identical(mixed_src: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     kind: str) -> None:
    maker, suffix = MAKERS[kind]
    archive = maker(mixed_src, tmp_path / f"train{suffix}")
    before = sha256(archive)
    convert(archive, tmp_path / "ref" / "out", "wds", run=WDS)
    dst = tmp_path / "out"
    with pytest.raises(RuntimeError, match="injected"), \
            count_adds(monkeypatch, "wds", fail_after=13):
        convert(archive, dst, "wds", run=WDS)
    assert not (dst / INDEX_NAME).exists()
    with count_adds(monkeypatch, "wds") as adds:
        convert(archive, dst, "wds", run=RESUME)
    assert adds[0] == 40 - 12  # 3 shards of 4 were durable
    assert tree_hashes(dst) == tree_hashes(tmp_path / "ref" / "out")
    assert sha256(archive) == before


def test_resume_refuses_a_changed_archive(src: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    archive = make_tar(src, tmp_path / "train.tar")
    with pytest.raises(RuntimeError, match="injected"), \
            count_adds(monkeypatch, "wds", fail_after=5):
        convert(archive, tmp_path / "out", "wds", run=WDS)
    stat = archive.stat()
    os.utime(archive, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    with pytest.raises(ResumeRefused, match="source or the options changed"):
        convert(archive, tmp_path / "out", "wds", run=RESUME)


def test_resume_of_complete_dataset_is_a_noop(src: Path, tmp_path: Path) -> None:
    archive = make_zip(src, tmp_path / "train.zip")
    convert(archive, tmp_path / "out", "lmdb")
    result = CliRunner().invoke(main, ["convert", str(archive), str(tmp_path / "out"),
                                       "--to", "lmdb", "--resume"])
    assert result.exit_code == 0 and "nothing to resume" in result.output, result.output


@pytest.mark.parametrize("kind", list(MAKERS))
def test_verify_against_the_archive(mixed_src: Path, tmp_path: Path, kind: str) -> None:
    maker, suffix = MAKERS[kind]
    archive = maker(mixed_src, tmp_path / f"train{suffix}")
    out = tmp_path / "out.wds"
    convert(archive, out, "wds", run=WDS)
    assert read_index(out).num_rejected == 2  # the empty and the text file
    result = CliRunner().invoke(main, ["verify", str(out), "--source", str(archive)])
    assert result.exit_code == 0, result.output


def test_verify_finds_a_member_that_changed(src: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(src, copy)
    archive = make_tar(copy, tmp_path / "train.tar")
    convert(archive, tmp_path / "out", "hdf5")
    assert verify(tmp_path / "out", archive).ok
    changed = sorted(copy.rglob("*.jpg"))[0]
    changed.write_bytes(jpeg_bytes(random_image(20, 20)))
    report = verify(tmp_path / "out", make_tar(copy, tmp_path / "changed.tar"))
    assert not report.ok and "bytes differ" in str(report.problem)
