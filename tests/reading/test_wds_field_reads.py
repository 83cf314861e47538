"""WdsReader.field_values_many: spans walked in place in the shards' maps (`walked`).

Every result must be what the per-sample path gives (a pread of the span, then
`span_values`): batches that mix samples with and without field members, pax headers
(long and non-ASCII keys) beside plain ones, several shards, more shards than stay
open; damage found through a map raises the same errors, and a shard truncated while
mapped is refused, not read past its end.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from pathlib import Path
from typing import NoReturn

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from packer import ConvertOptions, FieldChoice, convert
from packer.core.fields import FieldSpec, pack_record
from packer.core.index import open_dataset
from packer.encode import EncodeOptions
from packer.errors import CorruptDatasetError
from packer.formats import _wds_shards
from packer.formats._tar import member_header, padding
from packer.formats._wds import WdsReader
from packer.formats._wds_fields import field_members, span_values, suffixes, walked
from packer.formats.base import ShardOptions
from tests.helpers import field_rows, png_bytes, random_image

COUNT = 14
NAMES = ("img{}.png", f"sub/{'long' * 30}{{}}.png", "日本{}.png", "a.b{}.png")


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """14 samples in shards of 3: short, long (pax), non-ASCII (pax) and dotted keys;
    some samples without any field, an array field (floats) and a `txt` field."""
    root = tmp_path_factory.mktemp("wds_field_reads")
    lines = []
    for i, row in enumerate(field_rows(COUNT)):
        name = NAMES[i % len(NAMES)].format(i)
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(png_bytes(random_image(8, 8, seed=i)))
        fields = {} if i % 5 == 2 else {**row, "arr": [[k, 0.5] for k in range(i % 4)],
                                        "txt": f"t{i}"}
        lines.append(json.dumps({"path": name, "label": i % 2, **fields}, ensure_ascii=False))
    manifest = root / "rows.jsonl"
    manifest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    dst = root / "wds"
    choice = FieldChoice(types=(FieldSpec("arr", "floats"),))
    convert(manifest, dst, "wds", EncodeOptions(),
            ConvertOptions(workers=0, fields=choice, shards=ShardOptions(max_samples=3)))
    return dst


def per_sample(folder: Path, i: int) -> list[bytes | None]:
    """Sample i's values the way the reader found them before the maps: its span read
    from the file, walked by span_values."""
    index, table = open_dataset(folder)
    assert table.fields is not None
    offset, size = table.fields.location(i)
    with open(folder / index.shards[index.shard_of(i)].name, "rb") as handle:
        handle.seek(offset)
        return span_values(handle.read(size), index.fields, "here")


def reader_of(folder: Path) -> WdsReader:
    index, table = open_dataset(folder)
    return WdsReader(folder, index, table)


def test_batches_equal_the_per_sample_walk(packed: Path) -> None:
    reader = reader_of(packed)
    try:
        n = len(reader.table)
        assert len(reader.index.shards) == 5
        expected = [per_sample(packed, i) for i in range(n)]
        assert any(all(v is None for v in values) for values in expected)  # no members
        assert any(v == b"" for values in expected for v in values)  # an empty caption
        batch = [n - 1, 0, 7, 7, *range(1, n, 2), 2]  # unordered, repeated, every shard
        for _ in range(3):  # read, then through the maps made on the second batch
            got = reader.field_values_many(batch)
            assert [list(values) for values in got] == [expected[i] for i in batch]
        mapped = [shard for shard, opened in reader._shards._open.items() if opened.map]
        assert len(mapped) == 5, "the later batches must have read through the maps"
        assert reader.field_values_many([]) == []
    finally:
        reader.close()


def test_more_shards_than_stay_open(packed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch over 5 shards with 3 kept open: a map closed in the middle of a batch
    (its shard evicted) still serves the batch's later samples of that shard."""
    monkeypatch.setattr(_wds_shards, "MAX_OPEN_SHARDS", 3)
    reader = reader_of(packed)
    try:
        for _ in range(2):  # shards 0, 1, 2 mapped
            reader.field_values_many([0, 3, 6])
        assert all(opened.map for opened in reader._shards._open.values())
        order = [0, 3, 6, 9, 13, 1, 4, 7, 10, 0]  # shards 0 1 2 3 4, then 0 1 2 3 again
        expected = [per_sample(packed, i) for i in order]
        for _ in range(3):
            assert [list(v) for v in reader.field_values_many(order)] == expected
            assert len(reader._shards._open) <= 3
        reader.close()
        assert [list(v) for v in reader.field_values_many(order[:4])] == expected[:4]
    finally:
        reader.close()


def mapped_copy(packed: Path, tmp_path: Path) -> tuple[Path, WdsReader]:
    """A copy of the dataset, and a reader of it with every shard mapped."""
    folder = tmp_path / "copy"
    shutil.copytree(packed, folder)
    reader = reader_of(folder)
    every = list(range(len(reader.table)))
    reader.field_values_many(every)
    reader.field_values_many(every)  # the second batch maps every shard
    return folder, reader


def damage(folder: Path, sample: int, at: int, data: bytes) -> None:
    """Overwrite bytes of a sample's field span in place (a mapped shard sees them)."""
    index, table = open_dataset(folder)
    assert table.fields is not None
    offset, _ = table.fields.location(sample)
    with open(folder / index.shards[index.shard_of(sample)].name, "r+b") as handle:
        handle.seek(offset + at)
        handle.write(data)


@pytest.mark.parametrize(("key", "at", "data", "error"), [
    ("img0", 124, b"00000000x42\0", "a damaged tar header among the fields"),
    ("img0", 124, b"77777777777\0", "a field member is truncated"),
    ("img4", 0, b"4.nope\0", "unexpected member '4.nope' among the fields"),
    ("img8", 600, b"#", "do not match their digest"),  # a letter of its 10,000-char caption
])
def test_damage_read_through_a_map_keeps_its_error(packed: Path, tmp_path: Path, key: str,
                                                    at: int, data: bytes, error: str) -> None:
    folder, reader = mapped_copy(packed, tmp_path)
    try:
        sample = [reader.table.key(i) for i in range(COUNT)].index(key)  # keys are sorted
        damage(folder, sample, at, data)
        index = reader.index
        shard = folder / index.shards[index.shard_of(sample)].name
        with pytest.raises(CorruptDatasetError, match=rf"^{re.escape(str(shard))}: .*{error}"):
            reader.field_values_many([0, sample])
    finally:
        reader.close()


def test_a_shard_truncated_while_mapped_is_refused(packed: Path, tmp_path: Path) -> None:
    """No read past the new end (a SIGBUS would kill the test run): the pread error."""
    folder, reader = mapped_copy(packed, tmp_path)
    try:
        index, table = reader.index, reader.table
        assert table.fields is not None
        first, last = 3, 5  # shard 1: img0, img4 (with fields), by sorted key
        assert index.shard_of(first) == index.shard_of(last) == 1
        assert (table.key(first), table.key(last)) == ("img0", "img4")
        offset, size = table.fields.location(last)
        first_values = per_sample(folder, first)
        os.truncate(folder / index.shards[1].name, offset + size // 2)
        assert [list(v) for v in reader.field_values_many([first])] == [first_values]
        with pytest.raises(CorruptDatasetError, match=rf"truncated at sample {last} "):
            reader.field_values_many([first, last])
    finally:
        reader.close()


def test_a_shard_truncated_before_it_is_mapped_reads_what_is_left(packed: Path,
                                                                 tmp_path: Path) -> None:
    """Shrunk after its first batch, before the second maps it: the samples still whole
    are read, the cut one is refused by name, as a pread reader does."""
    folder = tmp_path / "copy"
    shutil.copytree(packed, folder)
    reader = reader_of(folder)
    try:
        first, last = 3, 5  # shard 1: img0, img4 (with fields), by sorted key
        reader.field_values_many([first, last])  # shard 1 open, not mapped yet
        assert reader.table.fields is not None
        offset, size = reader.table.fields.location(last)
        os.truncate(folder / reader.index.shards[1].name, offset + size // 2)
        assert [list(v) for v in reader.field_values_many([first])] == \
            [per_sample(folder, first)]
        with pytest.raises(CorruptDatasetError, match=rf"truncated at sample {last} "):
            reader.field_values_many([first, last])
    finally:
        reader.close()


def test_a_file_system_without_mmap_reads_by_pread(packed: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """mmap refused (ENODEV: some FUSE and network file systems): the fields still come,
    read as before the maps, not a "cannot read ... reconvert" of a healthy shard."""

    def no_mmap(*args: object, **kwargs: object) -> NoReturn:
        raise OSError(errno.ENODEV, os.strerror(errno.ENODEV))

    every = list(range(COUNT))
    expected = [per_sample(packed, i) for i in every]
    reader = reader_of(packed)  # its tables mapped before mmap goes
    monkeypatch.setattr(_wds_shards.mmap, "mmap", no_mmap)
    try:
        for _ in range(3):
            assert [list(v) for v in reader.field_values_many(every)] == expected
    finally:
        reader.close()


SPECS = (FieldSpec("caption", "str"), FieldSpec("txt", "str"), FieldSpec("blob", "bytes"))
keys = st.text(st.one_of(st.sampled_from("./a%"), st.characters(codec="utf-8",
                                                                exclude_characters="\0")),
               min_size=1, max_size=70)
values = st.one_of(st.none(), st.binary(max_size=20), st.binary(max_size=1100))
# A byte set to a value that means something in a header (NUL, space, dot, slash, octal
# digits, 8, "-", "_", tab, "x"), mostly among the name, size and type bytes of a block.
where_in_block = st.one_of(st.sampled_from([124, 125, 134, 135, 156]), st.integers(0, 100),
                           st.integers(0, 511))
flip = st.tuples(st.integers(0, 6), where_in_block,
                 st.one_of(st.sampled_from(b"\0 ./0178-_\tx"), st.integers(0, 255)))


def slow_values(span: bytes) -> list[bytes | None] | None:
    """span_values' values, None where it refuses the span."""
    try:
        return span_values(span, SPECS, "here")
    except CorruptDatasetError:
        return None


@settings(max_examples=400, deadline=None)
@example(key="k", chosen=(b"v", None, None), flips=[(0, 156, ord("x"))], cut=None)  # "pax"
@example(key="k", chosen=(b"v", None, None), flips=[(0, 135, ord("1"))], cut=None)  # 12 digits
@example(key="d.e/f", chosen=(b"v", b"", None), flips=[], cut=None)  # a dot before a slash
@given(key=keys, chosen=st.tuples(values, values, values), flips=st.lists(flip, max_size=3),
       cut=st.one_of(st.none(), st.integers(0, 4000)))
def test_walked_claims_only_what_span_values_gives(key: str, chosen: tuple[bytes | None, ...],
                                                   flips: list[tuple[int, int, int]],
                                                   cut: int | None) -> None:
    """On any span, damaged or not: `walked` gives span_values' values, or declines;
    it declines an undamaged span only for its pax header."""
    clean = b"".join(field_members(key, SPECS, pack_record(chosen)))
    span = bytearray(clean)
    for block, at, value in flips:
        if span:
            span[(block * 512 + at) % len(span)] = value
    if cut is not None:
        del span[cut % (len(span) + 1) :]
    claimed = walked(bytes(span), 0, len(span), suffixes(SPECS), len(SPECS))
    slow = slow_values(bytes(span))
    assert claimed is None or claimed == slow
    if bytes(span) == clean and key.isascii():  # names of at most 100 bytes: no pax header
        assert claimed == slow
        if "." not in key.rsplit("/", 1)[-1]:
            assert claimed == list(chosen)


@pytest.mark.parametrize(("key", "at", "data"), [
    ("k", 124, b"-0000001000\0"),  # size -512: the walk would stay on this header
    ("k" * 120, 512, b"0 size=1\n"),  # a pax record of length 0, read again and again
    ("k" * 120, 512, b"9 path=\xff\n"),  # a name that is not UTF-8
])
def test_a_header_that_would_hang_or_escape_is_a_damaged_header(key: str, at: int,
                                                                 data: bytes) -> None:
    span = bytearray(b"".join(field_members(key, SPECS, pack_record((b"v", None, b"")))))
    span[at : at + len(data)] = data
    with pytest.raises(CorruptDatasetError, match=r"^here: a damaged tar header among the fields"):
        span_values(bytes(span), SPECS, "here")


@pytest.mark.parametrize("name", ["txt", ".txt", "a.b/k.txt", "a/b/.txt", "k.b.txt", "k.TXT",
                                  "k.txt/", "/k.txt", "k" * 96 + ".txt", "k" * 95 + ".txt"])
def test_walked_splits_names_as_span_values_does(name: str) -> None:
    """A member name read as span_values reads it (after the last slash, from the first
    dot), whether that is a field's or not."""
    value = b"some value"
    span = member_header(name, len(value)) + value + padding(len(value))
    assert len(span) == 1024  # no pax header: every name here is short ASCII
    claimed = walked(span, 0, len(span), suffixes(SPECS), len(SPECS))
    assert claimed == slow_values(span)
    assert (claimed is None) == (name.rsplit("/", 1)[-1].partition(".")[2] != "txt")
