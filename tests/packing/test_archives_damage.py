"""Damaged archives: bad members are rejects naming ARCHIVE:MEMBER, a truncated archive is
one error naming the last good member, compressions we cannot stream are refused."""

from __future__ import annotations

import io
import json
import os
import tarfile
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from pack_cli import main
from packer import convert
from packer.core.index import INDEX_NAME, REJECTS_NAME
from packer.errors import SourceError
from packer.source import archive as archive_scan
from packer.source import tarheaders
from packer.source.scan import scan
from tests.archive_support import (
    WDS,
    add_member,
    make_tar,
    make_tgz,
    make_zip,
)
from tests.helpers import jpeg_bytes, random_image


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


@pytest.mark.parametrize("cut", ["padding", "end-blocks"])
@pytest.mark.parametrize(("listing", "inner"), [("fast", False), ("fast", True),
                                                ("tarfile", False)],
                         ids=["tar", "tar-of-tars", "tar-listed-by-tarfile"])
def test_a_tar_cut_between_members_is_one_error(src: Path, tmp_path: Path, cut: str,
                                                inner: bool, listing: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Cut in a member's padding, or where the next header or the end blocks would be,
    a tar still lists whole members: it is refused as truncated, as GNU tar refuses it
    ("Unexpected EOF"), not converted in part."""
    if listing == "tarfile":  # what an unusual header falls back to
        monkeypatch.setattr(archive_scan, "tar_entries", unusual)
    archive = make_tar(src, tmp_path / "train.tar")
    if inner:  # the same cut inside a class tar of a tar of tars
        archive = tar_of(cut_tar(archive, cut), tmp_path / "outer.tar")
    else:
        cut_tar(archive, cut)
    result = CliRunner().invoke(main, ["convert", str(archive), str(tmp_path / "out"),
                                       "--to", "wds", "--quiet"])
    assert result.exit_code == 1, result.output
    message = result.output.strip()
    assert len(message.splitlines()) == 1 and "truncated or damaged after member" in message
    assert not (tmp_path / "out" / INDEX_NAME).exists()


def unusual(*args: object, **kwargs: object) -> None:
    raise tarheaders._Unusual("as a sparse member would")


def cut_tar(archive: Path, cut: str) -> Path:
    """`archive` cut after the data of its third-last member: inside that member's
    padding, or at the block where the next header starts."""
    with tarfile.open(archive) as tar:
        member = tar.getmember(tar.getnames()[-3])
    end = member.offset_data + member.size
    assert end % 512, "the member's data must not fill its last block"
    with open(archive, "r+b") as handle:
        handle.truncate(end + 3 if cut == "padding" else end + (-end) % 512)
    return archive


def tar_of(inner: Path, outer: Path) -> Path:
    with tarfile.open(outer, "w") as tar:
        tar.add(inner, arcname="class_00.tar")
    return outer


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


def test_gzip_cursor_serves_any_order(src: Path, tmp_path: Path) -> None:
    """Threads ask a little out of order, resume starts midway, verify may go back."""
    archive = make_tgz(src, tmp_path / "train.tar.gz")
    items = scan(archive).items
    expected = [Path(item.path).read_bytes() for item in scan(src).items]
    origin = items[0].origin
    assert origin is not None
    order = [5, 3, 4, 6, 0, 1, 2, 9, 7, 8, *range(10, len(items)), 2, 1, len(items) - 1]
    assert all(origin.read(items[i]) == expected[i] for i in order)


def test_every_flipped_header_byte_leaves_the_fast_listing(tmp_path: Path) -> None:
    """The header checksum (checked modulo 65521, in C) catches any one changed byte of a
    header block, so a damaged header goes to tarfile, which words the error."""
    from packer.source import tarheaders

    archive = tmp_path / "one.tar"
    with tarfile.open(archive, "w", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo("cat/a.jpg")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    good = archive.read_bytes()
    assert good[154:156] == b"\0 "  # the checksum field's terminator: read by no one
    for at in [at for at in range(tarheaders.BLOCK) if at != 155]:
        for delta in (1, 0x80):
            damaged = bytearray(good)
            damaged[at] ^= delta
            archive.write_bytes(bytes(damaged))
            fd = os.open(archive, os.O_RDONLY)
            try:
                with pytest.raises(tarheaders._Unusual):
                    list(tarheaders.tar_entries(fd, str(archive), len(damaged)))
            finally:
                os.close(fd)
