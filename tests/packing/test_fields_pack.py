"""Per-sample fields on the pack side: every format round-trips them at the RecordReader,
stock tools read them, verify compares them, bad cells are rejected by file, line, column."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

import h5py
import lmdb
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from packer import ConvertOptions, EncodeOptions, FieldChoice, FieldSpec, convert, formats, verify
from packer.core.fields import (
    decode_record,
    decode_value,
    encode_value,
    pack_record,
    parse_text,
    unpack_record,
)
from packer.core.index import open_dataset
from packer.errors import BadInputError, SourceError
from tests.helpers import (
    FIELD_NAMES,
    FORMATS,
    csv_manifest,
    pack_with_fields,
    png_bytes,
    random_image,
)


def fields_by_key(folder: Path, names: list[str] | None = None) -> dict[str, dict[str, Any]]:
    index, table = open_dataset(folder)
    reader = formats.load(index.format).open_reader(folder, index, table)
    try:
        return {table.key(i): reader.fields(i, names) for i in range(len(table))}
    finally:
        reader.close()


def bits(value: Any) -> Any:
    """Floats by their bits (-0.0 is not 0.0 here), recursively."""
    if isinstance(value, float):
        return struct.pack("<d", value)
    if isinstance(value, list):
        return [bits(v) for v in value]
    if isinstance(value, dict):
        return {k: bits(v) for k, v in value.items()}
    return value


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_round_trips_fields(fmt: str, tmp_path: Path) -> None:
    dst, expected = pack_with_fields(tmp_path, fmt)
    index, _ = open_dataset(dst)
    assert [(s.name, s.type) for s in index.fields] == [
        ("caption", "str"), ("boxes", "json"), ("score", "float"), ("count", "int"),
        ("meta", "json")]
    got = fields_by_key(dst)
    assert bits(got) == bits(expected)
    assert any(len(v["caption"] or "") == 10_000 for v in got.values())
    assert {len(v["boxes"]) for v in got.values()} >= {0, 50}
    assert index.field_counts == tuple(sum(v[n] is not None for v in expected.values())
                                       for n in FIELD_NAMES)
    assert fields_by_key(dst, ["score"]) == {k: {"score": v["score"]} for k, v in expected.items()}
    with pytest.raises(KeyError, match="no field 'nope'"):
        fields_by_key(dst, ["nope"])
    assert verify(dst).problem is None


def test_byte_forms_round_trip() -> None:
    for kind, value in (("str", "é\n"), ("int", -(1 << 63)), ("float", 5e-324),
                        ("json", {"a": [1, None, 2.5]}), ("bytes", b"\0\xff")):
        assert decode_value(kind, encode_value(kind, value)) == value  # type: ignore[arg-type]
    assert math.isnan(decode_value("float", encode_value("float", math.nan)))  # type: ignore[arg-type]
    record = pack_record([b"", None, b"xy"])
    assert unpack_record(record, 3) == [b"", None, b"xy"]
    with pytest.raises(ValueError, match="not a number"):
        parse_text("float", "abc")
    with pytest.raises(ValueError, match="int64"):
        encode_value("int", 1 << 63)
    with pytest.raises(ValueError, match="taken by the sample"):
        FieldSpec("label", "str")


def test_stock_tools_read_the_fields(tmp_path: Path) -> None:
    import webdataset as wds

    stores = {fmt: pack_with_fields(tmp_path / fmt, fmt) for fmt in FORMATS}
    folder, expected = stores["wds"]
    index, _ = open_dataset(folder)
    urls = [str(folder / shard.name) for shard in index.shards]
    samples = list(wds.WebDataset(urls, shardshuffle=False).decode())
    assert len(samples) == len(expected)
    for sample, (key, want) in zip(samples, sorted(expected.items()), strict=True):
        assert sample["__key__"] == key
        assert sample.get("caption.txt") == want["caption"]
        assert bits(sample["boxes.json"]) == bits(want["boxes"])
        assert bits(sample["score.json"]) == bits(want["score"])
        assert sample["count.id"] == want["count"] and type(sample["count.id"]) is int
        assert sample.get("meta.json") == want["meta"]

    folder, expected = stores["hdf5"]
    with h5py.File(folder / "data.h5", "r") as h5:
        scores = h5["fields/score"][:]
        assert scores.dtype == np.float64
        assert bits(scores.tolist()) == bits([v["score"] for _, v in sorted(expected.items())])
        captions = h5["fields/caption"].asstr()[:]
        present = h5["fields_present/caption"][:]
        assert [c if p else None for c, p in zip(captions, present, strict=True)] == \
            [v["caption"] for _, v in sorted(expected.items())]
        assert json.loads(h5["fields/boxes"][1]) == expected["img001"]["boxes"]

    folder, expected = stores["npy"]
    counts = np.load(folder / "fields" / "count.npy")
    assert counts.dtype == np.int64
    assert counts.tolist() == [v["count"] for _, v in sorted(expected.items())]
    offsets = np.load(folder / "fields" / "caption.offsets.npy")
    data = np.load(folder / "fields" / "caption.data.npy", mmap_mode="r")
    assert bytes(data[offsets[2] : offsets[3]]).decode() == expected["img002"]["caption"]

    folder, expected = stores["lmdb"]
    env = lmdb.open(str(folder / "data.lmdb"), readonly=True, lock=False)
    with env.begin() as txn:
        assert txn.get(b"img002\0caption").decode() == expected["img002"]["caption"]
        assert txn.get(b"img003\0caption") is None  # null in the manifest: no value
        assert json.loads(txn.get(b"img001\0meta")) == expected["img001"]["meta"]
    env.close()


def write_csv(root: Path, rows: list[tuple[str, str, str]]) -> Path:
    return csv_manifest(root, ("label", "caption", "score"), rows)


def test_csv_columns_are_fields_typed_by_field_option(tmp_path: Path) -> None:
    manifest = write_csv(tmp_path / "src", [("cat", "a cat", "0.5"), ("dog", "", "2")])
    run = ConvertOptions(workers=0, fields=FieldChoice(types=(FieldSpec("score", "float"),)))
    index = convert(manifest, tmp_path / "out", "lmdb", run=run)
    assert index.fields == (FieldSpec("caption", "str"), FieldSpec("score", "float"))
    assert fields_by_key(tmp_path / "out") == {"0": {"caption": "a cat", "score": 0.5},
                                              "1": {"caption": None, "score": 2.0}}
    untyped = convert(manifest, tmp_path / "plain", "lmdb", run=ConvertOptions(workers=0))
    assert untyped.fields == (FieldSpec("caption", "str"), FieldSpec("score", "str"))
    none = convert(manifest, tmp_path / "none", "lmdb",
                   run=ConvertOptions(workers=0, fields=FieldChoice(enabled=False)))
    assert none.fields == () and not (tmp_path / "none" / "fields.npy").exists()
    assert "fields" not in json.loads((tmp_path / "none" / "index.json").read_text())


def test_a_bad_cell_is_rejected_naming_file_line_and_column(tmp_path: Path) -> None:
    manifest = write_csv(tmp_path / "src", [("cat", "ok", "0.5"), ("dog", "bad", "abc")])
    typed = FieldChoice(types=(FieldSpec("score", "float"),))
    index = convert(manifest, tmp_path / "out", "wds",
                    run=ConvertOptions(workers=0, fields=typed))
    assert index.num_samples == 1 and index.num_rejected == 1
    reason = json.loads((tmp_path / "out" / "rejects.jsonl").read_text())["reason"]
    assert str(manifest) in reason and "line 3" in reason and "'score'" in reason
    assert "'abc' is not a number" in reason
    with pytest.raises(BadInputError, match=r"line 3: column 'score' \(float\)"):
        convert(manifest, tmp_path / "fail", "wds",
                run=ConvertOptions(workers=0, on_error="fail", fields=typed))


def test_unknown_field_names_are_refused(tmp_path: Path) -> None:
    manifest = write_csv(tmp_path / "src", [("cat", "ok", "0.5")])
    with pytest.raises(SourceError, match="no field 'nope'"):
        convert(manifest, tmp_path / "a", "wds",
                run=ConvertOptions(workers=0, fields=FieldChoice(keep=("nope",))))
    with pytest.raises(SourceError, match="--field names column 'nope'"):
        convert(manifest, tmp_path / "b", "wds", run=ConvertOptions(
            workers=0, fields=FieldChoice(types=(FieldSpec("nope", "int"),))))


def test_sidecars_become_fields(tmp_path: Path) -> None:
    src = tmp_path / "photos"
    (src / "cat").mkdir(parents=True)
    for name in ("a", "b", "c"):
        (src / "cat" / f"{name}.png").write_bytes(png_bytes(random_image(8, 8)))
    (src / "cat" / "a.txt").write_text("a cat on a mat", encoding="utf-8")
    (src / "cat" / "b.json").write_text('{"width": 8, "tags": ["x"]}', encoding="utf-8")
    (src / "cat" / "orphan.txt").write_text("beside no image", encoding="utf-8")
    index = convert(src, tmp_path / "out", "hdf5", run=ConvertOptions(workers=0))
    assert index.fields == (FieldSpec("txt", "str"), FieldSpec("json", "json"))
    assert (index.num_samples, index.num_rejected, index.num_ignored) == (3, 0, 1)
    assert fields_by_key(tmp_path / "out") == {
        "cat/a": {"txt": "a cat on a mat", "json": None},
        "cat/b": {"txt": None, "json": {"width": 8, "tags": ["x"]}},
        "cat/c": {"txt": None, "json": None}}
    only = convert(src, tmp_path / "txt", "wds",
                   run=ConvertOptions(workers=0, fields=FieldChoice(keep=("txt",))))
    assert only.fields == (FieldSpec("txt", "str"),)
    (src / "cat" / "c.json").write_text("{broken", encoding="utf-8")
    index = convert(src, tmp_path / "bad", "wds", run=ConvertOptions(workers=0))
    reject = json.loads((tmp_path / "bad" / "rejects.jsonl").read_text())
    assert reject["path"].endswith("c.json") and "not JSON" in reject["reason"]
    assert index.num_samples == 3, "the image of a bad sidecar is packed without it"
    assert fields_by_key(tmp_path / "bad")["cat/c"] == {"txt": None, "json": None}


@pytest.mark.parametrize("fmt", ["lmdb", "npy"])
def test_a_packed_source_keeps_its_fields(fmt: str, tmp_path: Path) -> None:
    first, expected = pack_with_fields(tmp_path, "wds")
    encode = EncodeOptions(size=(8, 8)) if fmt == "npy" else None
    index = convert(first, tmp_path / "second", fmt, encode, ConvertOptions(workers=0))
    assert index.fields == open_dataset(first)[0].fields
    assert bits(fields_by_key(tmp_path / "second")) == bits(expected)
    assert verify(tmp_path / "second", source=first).problem is None


def test_verify_source_finds_an_edited_caption(tmp_path: Path) -> None:
    dst, _ = pack_with_fields(tmp_path, "npy")
    manifest = tmp_path / "src" / "manifest.jsonl"
    assert verify(dst, source=manifest).problem is None
    lines = manifest.read_text(encoding="utf-8").splitlines()
    row = json.loads(lines[0])
    row["caption"] = "a cat"
    lines[0] = json.dumps(row, ensure_ascii=False)
    manifest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    problem = verify(dst, source=manifest).problem
    assert problem is not None and "fields" in problem and "img000" in problem


def test_verify_finds_a_caption_edited_in_the_dataset(tmp_path: Path) -> None:
    dst, _ = pack_with_fields(tmp_path, "npy")
    data = dst / "fields" / "caption.data.npy"
    array = np.load(data)
    array[0] ^= 1  # one letter of the first caption
    np.save(data, array)
    problem = verify(dst).problem
    assert problem is not None and "do not match their digest" in problem


def test_parts_resume_with_their_fields(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A resumed npy run gets the fields of the parts the journal kept (no re-encode)."""
    from packer.formats import _npy

    monkeypatch.setattr(_npy, "PART_SAMPLES", 4)
    whole, expected = pack_with_fields(tmp_path / "whole", "npy")
    calls = {"n": 0}
    real_add = _npy.NpyWriter.add

    def dying_add(self: _npy.NpyWriter, record: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 7:
            raise KeyboardInterrupt
        return real_add(self, record)

    monkeypatch.setattr(_npy.NpyWriter, "add", dying_add)
    manifest = tmp_path / "whole" / "src" / "manifest.jsonl"
    dst = tmp_path / "resumed"
    with pytest.raises(KeyboardInterrupt):
        convert(manifest, dst, "npy", EncodeOptions(size=(8, 8)), ConvertOptions(workers=0))
    monkeypatch.setattr(_npy.NpyWriter, "add", real_add)
    convert(manifest, dst, "npy", EncodeOptions(size=(8, 8)),
            ConvertOptions(workers=0, resume=True))
    assert bits(fields_by_key(dst)) == bits(expected)
    for name in ("caption.data.npy", "score.npy", "count.present.npy"):
        assert (dst / "fields" / name).read_bytes() == (whole / "fields" / name).read_bytes()


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_bytes_column_stores_the_file_it_names(fmt: str, tmp_path: Path) -> None:
    manifest = csv_manifest(tmp_path / "src", ("label", "mask"), [("0", "m0.bin"), ("0", "")])
    (tmp_path / "src" / "m0.bin").write_bytes(b"\0\xff" * 300)
    encode = EncodeOptions(size=(8, 8)) if fmt == "npy" else None
    run = ConvertOptions(workers=0, fields=FieldChoice(types=(FieldSpec("mask", "bytes"),)))
    convert(manifest, tmp_path / "out", fmt, encode, run)
    assert fields_by_key(tmp_path / "out") == {"0": {"mask": b"\0\xff" * 300},
                                              "1": {"mask": None}}


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats() | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=12)
VALUES = {"str": st.text(), "int": st.integers(-(2**63), 2**63 - 1),
          "float": st.floats(), "json": JSON_VALUES, "bytes": st.binary()}


@given(st.lists(st.sampled_from(sorted(VALUES)).flatmap(
    lambda kind: st.tuples(st.just(kind), st.none() | VALUES[kind])), max_size=6))
def test_records_round_trip_any_values(cells: list[tuple[str, Any]]) -> None:
    specs = [FieldSpec(f"f{n}", kind) for n, (kind, _) in enumerate(cells)]  # type: ignore[arg-type]
    raw = [None if value is None else encode_value(kind, value)  # type: ignore[arg-type]
           for kind, value in cells]
    decoded = decode_record(specs, pack_record(raw))
    for (kind, value), got in zip(cells, decoded.values(), strict=True):
        if value is None or kind != "json":
            assert repr(bits(got)) == repr(bits(value)) or (value != value and got != got)
        else:  # JSON: one canonical text, whatever the value
            assert encode_value("json", got) == encode_value("json", value)


@pytest.mark.parametrize("fmt", ["wds", "npy"])
def test_a_url_destination_keeps_the_fields(fmt: str, tmp_path: Path) -> None:
    from tests.helpers import field_manifest

    manifest, expected = field_manifest(tmp_path / "src")
    url = (tmp_path / "up").as_uri()
    convert(manifest, url, fmt, EncodeOptions(size=(8, 8)) if fmt == "npy" else None,
            ConvertOptions(workers=0))
    assert bits(fields_by_key(tmp_path / "up")) == bits(expected)
    assert verify(url, manifest).problem is None


@pytest.mark.parametrize("fmt", FORMATS)
def test_fields_of_a_dataset_whose_inputs_were_all_rejected(fmt: str, tmp_path: Path) -> None:
    manifest = tmp_path / "list.jsonl"
    manifest.write_text('{"path": "missing.png", "label": 0, "caption": "x"}\n')
    index = convert(manifest, tmp_path / "out", fmt,
                    EncodeOptions(size=(8, 8)) if fmt == "npy" else None,
                    ConvertOptions(workers=0))
    assert (index.num_samples, index.fields, index.field_counts) == \
        (0, (FieldSpec("caption", "str"),), (0,))
    assert verify(tmp_path / "out").problem is None
