"""The image-folder scan: layout, keys, order, what is ignored and what is rejected."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from packer import ConvertOptions, convert
from packer.errors import SourceError
from packer.source.manifest import key_of
from packer.source.scan import scan
from tests.helpers import jpeg_bytes, png_bytes, random_image

JPEG = jpeg_bytes(random_image(24, 20))
PNG = png_bytes(random_image(20, 24))


def put(root: Path, rel: str, data: bytes = JPEG) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_nested_folders_and_case_insensitive_extensions(tmp_path: Path) -> None:
    root = tmp_path / "src"
    for rel in ("b/top.jpg", "b/deep/er/still.JPG", "a/x/y.Png", "a/z.JPEG", "a/t.TIFF",
                "c/dir.jpg/inside.webp"):
        put(root, rel, PNG if rel.lower().endswith("png") else JPEG)
    source = scan(root)
    assert source.class_names == ("a", "b", "c")
    assert [(item.key, item.label) for item in source.items] == [
        ("a/t", 0), ("a/x/y", 0), ("a/z", 0), ("b/deep/er/still", 1), ("b/top", 1),
        ("c/dir.jpg/inside", 2),
    ]
    assert source.num_ignored == 0 and source.rejects == []


def test_hidden_and_non_image_files_are_ignored_and_counted(tmp_path: Path) -> None:
    root = tmp_path / "src"
    put(root, "cat/ok.jpg")
    put(root, "cat/.hidden.jpg")  # 1
    put(root, "cat/.DS_Store", b"junk")  # 2
    put(root, "cat/notes.txt", b"text")  # 3
    put(root, "cat/README", b"text")  # 4
    put(root, "cat/.thumbs/t.jpg")  # 5: a hidden folder counts once
    put(root, "readme.md", b"top-level file")  # 6
    put(root, ".git/config", b"x")  # 7: a hidden top-level folder
    source = scan(root)
    assert source.class_names == ("cat",)
    assert [item.key for item in source.items] == ["cat/ok"]
    assert source.num_ignored == 7
    index = convert(root, tmp_path / "out", "wds", run=ConvertOptions(workers=0))
    assert index.num_ignored == 7 and index.num_rejected == 0


@pytest.mark.timeout(60)
def test_symlink_loops_do_not_hang(tmp_path: Path) -> None:
    root = tmp_path / "src"
    put(root, "a/one.jpg")
    put(root, "b/two.jpg")
    os.symlink("..", root / "a" / "up")  # a folder loop back to the root
    os.symlink(".", root / "b" / "self")  # a folder loop onto itself
    os.symlink("loop.jpg", root / "b" / "loop.jpg")  # a link to itself (ELOOP)
    os.symlink("gone.jpg", root / "b" / "dangling.jpg")
    os.symlink(root / "a" / "one.jpg", root / "b" / "linked.jpg")  # a link to a file is fine
    source = scan(root)
    assert [item.key for item in source.items] == ["a/one", "b/linked", "b/two"]
    assert source.num_ignored == 2  # the two linked folders
    assert sorted((Path(r.path).name, r.reason) for r in source.rejects) == [
        ("dangling.jpg", "unreadable: a broken link"),
        ("loop.jpg", "unreadable: a broken link"),
    ]


def test_symlinked_class_folder_is_followed(tmp_path: Path) -> None:
    put(tmp_path / "elsewhere", "x.jpg")
    root = tmp_path / "src"
    put(root, "real/y.jpg")
    os.symlink(tmp_path / "elsewhere", root / "linked")
    assert [item.key for item in scan(root).items] == ["linked/x", "real/y"]


def test_fifo_is_rejected_not_read(tmp_path: Path) -> None:
    root = tmp_path / "src"
    put(root, "a/ok.jpg")
    os.mkfifo(root / "a" / "pipe.jpg")
    source = scan(root)
    assert [item.key for item in source.items] == ["a/ok"]
    assert [(Path(r.path).name, r.reason) for r in source.rejects] == [
        ("pipe.jpg", "unreadable: not a regular file")]


def test_duplicate_keys_are_rejected(tmp_path: Path) -> None:
    root = tmp_path / "src"
    put(root, "a/same.jpg")
    put(root, "a/same.png", PNG)
    source = scan(root)
    assert [item.key for item in source.items] == ["a/same"]
    assert [r.reason for r in source.rejects] == ["duplicate key 'a/same': another file has "
                                                  "that name"]
    assert source.items[0].path.endswith("same.jpg")  # the first in sorted order wins


def test_undecodable_file_name_is_rejected(tmp_path: Path) -> None:
    root = tmp_path / "src"
    put(root, "a/fine.jpg")
    bad = os.fsencode(root / "a") + b"/caf\xe9.jpg"  # Latin-1, not UTF-8
    with open(bad, "wb") as handle:
        handle.write(JPEG)
    source = scan(root)
    assert [item.key for item in source.items] == ["a/fine"]
    assert [r.reason for r in source.rejects] == ["file name is not valid UTF-8; rename it"]
    assert source.rejects[0].path.endswith("caf\\xe9.jpg")
    index = convert(root, tmp_path / "out", "wds", run=ConvertOptions(workers=0))
    assert index.num_rejected == 1
    os.mkdir(os.fsencode(root) + b"/\xff")
    with pytest.raises(SourceError, match="not valid UTF-8"):
        scan(root)


def test_sorted_by_key_labels_by_sorted_class_names(tmp_path: Path) -> None:
    root = tmp_path / "src"
    for rel in ("zebra/b.jpg", "zebra/a.jpg", "Apple/k.jpg", "mango/10.jpg", "mango/9.jpg"):
        put(root, rel)
    source = scan(root)
    assert source.class_names == ("Apple", "mango", "zebra")
    assert [item.key for item in source.items] == [
        "Apple/k", "mango/10", "mango/9", "zebra/a", "zebra/b"]
    assert [item.position for item in source.items] == list(range(5))
    assert [item.label for item in source.items] == [0, 1, 1, 2, 2]


@pytest.mark.parametrize(("setup", "message"), [
    ("missing", "no such file or folder"),
    ("empty", "no class sub-folders"),
    ("file", "not a folder, .csv or .jsonl"),
])
def test_unusable_sources(tmp_path: Path, setup: str, message: str) -> None:
    path = tmp_path / "src"
    if setup == "empty":
        put(path, "loose.jpg")  # images, but no class folder
    elif setup == "file":
        path = put(tmp_path, "list.txt", b"a.jpg,cat\n")
    with pytest.raises(SourceError, match=message):
        scan(path)


def test_key_of_examples() -> None:
    assert key_of("a/b.jpg") == "a/b"
    assert key_of("a/b.c.jpg") == "a/b.c"
    assert key_of("a.d/b") == "a.d/b"
    assert key_of("x/.jpg") == "x/.jpg"  # a hidden name has no extension


@given(st.lists(st.text(alphabet=st.characters(codec="utf-8",
                                               blacklist_characters="/\0"), min_size=1,
                        max_size=12).filter(lambda s: s not in (".", "..")), min_size=1,
                max_size=4),
       st.sampled_from(["jpg", "png", "JPEG"]))
def test_key_of_drops_only_the_extension(parts: list[str], ext: str) -> None:
    rel = "/".join(parts) + "." + ext
    assert key_of(rel) == "/".join(parts)
