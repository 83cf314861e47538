"""Packed array fields (`floats`, `ints`): a CSV column typed on the command line and
its rejects, stock tools (webdataset, h5py, numpy, lmdb) reading them without our code,
`pack verify` finding one changed box number, and a packed dataset as the source."""

from __future__ import annotations

import io
import json
import struct
import tarfile
from pathlib import Path

import h5py
import lmdb
import numpy as np
import pytest

from packer import ConvertOptions, EncodeOptions, FieldChoice, FieldSpec, convert, verify
from packer.core.fields import decode_value
from packer.core.index import open_dataset
from packer.errors import CorruptDatasetError
from readers import PackedDataset, collate
from tests.field_array_support import (
    ARRAY_FIELDS,
    NAMES,
    Expected,
    array_manifest,
    pack_arrays,
    pack_every_format,
    same_array,
    stored_values,
)
from tests.helpers import FORMATS, assert_one_line_error, csv_manifest, run_pack


def test_a_csv_column_typed_floats_on_the_command_line(tmp_path: Path) -> None:
    src = csv_manifest(tmp_path / "src", ("label", "boxes"), [
        ("0", '"[[1,2,3,4]]"'), ("1", '"[[1,2],[3]]"'), ("0", "abc"), ("1", "[true]"), ("0", "")])
    out = tmp_path / "out"
    result = run_pack("convert", src, out, "--to", "wds", "--field", "boxes:floats", "-q")
    assert result.exit_code == 0 and "3 rejected" in result.output, result.output
    assert open_dataset(out)[0].fields == (FieldSpec("boxes", "floats"),)
    values = stored_values(out)
    assert list(values) == ["0", "4"] and values["4"] == [None]
    assert same_array(decode_value("floats", values["0"][0]),  # type: ignore[arg-type]
                      np.array([[1, 2, 3, 4]], np.float32))
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert [Path(r["path"]).name for r in rejects] == ["1.png", "2.png", "3.png"]
    for reject, line, why in zip(rejects, (3, 4, 5), ("same length", "not JSON", "numbers only"),
                                 strict=True):
        assert f"{src}, line {line}: column 'boxes' (floats)" in reject["reason"], reject
        assert why in reject["reason"]
    info = run_pack("info", out)
    assert "fields:\n  boxes: floats, 1 of 2 samples have a value\n" in info.output
    failed = run_pack("convert", src, tmp_path / "fail", "--to", "wds", "--field",
                      "boxes:floats", "--on-error", "fail", "-q")
    assert_one_line_error(failed, 1, str(src), "line 3: column 'boxes' (floats)", "same length")


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], Expected]:
    return pack_every_format(tmp_path_factory.mktemp("array_stock"))


def test_stock_webdataset_decodes_them_as_numpy_arrays(
        packed: tuple[dict[str, Path], Expected]) -> None:
    import webdataset as wds

    folders, expected = packed
    urls = [str(folders["wds"] / shard.name) for shard in open_dataset(folders["wds"])[0].shards]
    samples = list(wds.WebDataset(urls, shardshuffle=False).decode())
    assert [sample["__key__"] for sample in samples] == sorted(expected)
    for sample in samples:
        for name in NAMES:
            assert same_array(sample.get(f"{name}.npy"), expected[sample["__key__"]][name])


def test_h5py_slices_of_the_blob_load_with_numpy(packed: tuple[dict[str, Path], Expected]) -> None:
    folders, expected = packed
    table = open_dataset(folders["hdf5"])[1]
    with h5py.File(folders["hdf5"] / "data.h5", "r") as h5:
        for name in NAMES:
            blob, o = h5[f"fields/{name}"], h5[f"fields_offsets/{name}"][:]
            present = h5[f"fields_present/{name}"][:]
            assert blob.dtype == np.uint8 and blob.ndim == 1 and o[-1] == blob.shape[0]
            for i in range(len(table)):
                got = np.load(io.BytesIO(blob[o[i] : o[i + 1]])) if present[i] else None
                assert same_array(got, expected[table.key(i)][name])


def test_npy_offsets_and_data_load_with_numpy(packed: tuple[dict[str, Path], Expected]) -> None:
    folders, expected = packed
    fields, table = folders["npy"] / "fields", open_dataset(folders["npy"])[1]
    for name in NAMES:
        o = np.load(fields / f"{name}.offsets.npy")
        data = np.load(fields / f"{name}.data.npy", mmap_mode="r")
        present = np.load(fields / f"{name}.present.npy")
        for i in range(len(table)):
            got = np.load(io.BytesIO(data[o[i] : o[i + 1]].tobytes())) if present[i] else None
            assert same_array(got, expected[table.key(i)][name])


def test_lmdb_values_load_with_numpy(packed: tuple[dict[str, Path], Expected]) -> None:
    folders, expected = packed
    env = lmdb.open(str(folders["lmdb"] / "data.lmdb"), readonly=True, lock=False)
    with env.begin() as txn:
        for key, want in expected.items():
            for name in NAMES:
                stored = txn.get(f"{key}\0{name}".encode())
                assert same_array(None if stored is None else np.load(io.BytesIO(stored)),
                                  want[name])
    env.close()


def bump_first_number(data: bytes, offset: int) -> bytes:
    """`data` with the float32 at `offset` one larger (a box's x moved by a pixel)."""
    (x,) = struct.unpack_from("<f", data, offset)
    return data[:offset] + struct.pack("<f", x + 1) + data[offset + 4 :]


def position(folder: Path, key: str) -> int:
    table = open_dataset(folder)[1]
    return [table.key(n) for n in range(len(table))].index(key)


def move_one_box(folder: Path, fmt: str, key: str) -> None:
    """Box 1 of `key` one pixel to the right, edited inside the packed dataset."""
    at = 64 + 16  # past the header and box 0
    if fmt == "wds":
        index = open_dataset(folder)[0]
        shard = folder / index.shards[index.shard_of(position(folder, key))].name
        with tarfile.open(shard) as tar:
            start = tar.getmember(f"{key}.boxes.npy").offset_data
        shard.write_bytes(bump_first_number(shard.read_bytes(), start + at))
        return
    i = position(folder, key)
    if fmt == "npy":
        o = np.load(folder / "fields" / "boxes.offsets.npy")
        data = np.load(folder / "fields" / "boxes.data.npy")
        np.save(folder / "fields" / "boxes.data.npy",
                np.frombuffer(bump_first_number(data.tobytes(), int(o[i]) + at), np.uint8))
    elif fmt == "hdf5":
        with h5py.File(folder / "data.h5", "r+") as h5:
            start = int(h5["fields_offsets/boxes"][i]) + at
            blob = h5["fields/boxes"]
            blob[start : start + 4] = np.frombuffer(
                bump_first_number(blob[start : start + 4].tobytes(), 0), np.uint8)
    else:
        env = lmdb.open(str(folder / "data.lmdb"), lock=False)
        with env.begin(write=True) as txn:
            name = f"{key}\0boxes".encode()
            txn.put(name, bump_first_number(txn.get(name), at))
        env.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_verify_finds_one_box_number_changed_in_the_dataset(fmt: str, tmp_path: Path) -> None:
    manifest, _ = array_manifest(tmp_path / "src")
    folder = pack_arrays(tmp_path, fmt, manifest)
    result = run_pack("verify", folder, "--source", manifest)
    assert result.exit_code == 0, result.output
    move_one_box(folder, fmt, "img002")
    result = run_pack("verify", folder, "--source", manifest)
    assert result.exit_code != 0 and str(folder) in result.output, result.output
    if fmt == "npy":  # the other formats' files have a whole-file digest, checked first
        assert "'img002') do not match their digest" in result.output
    with pytest.raises(CorruptDatasetError, match=r"'img002'\) do not match their digest"):
        PackedDataset(folder, fields=("boxes",))[position(folder, "img002")]


def test_verify_source_finds_one_box_number_changed_in_the_source(tmp_path: Path) -> None:
    manifest, _ = array_manifest(tmp_path / "src")
    folder = pack_arrays(tmp_path, "npy", manifest)
    lines = manifest.read_text().splitlines()
    row = json.loads(lines[3])
    row["boxes"][1][0] += 1
    manifest.write_text("\n".join([*lines[:3], json.dumps(row), *lines[4:]]) + "\n")
    result = run_pack("verify", folder, "--source", manifest)
    assert result.exit_code != 0 and "fields" in result.output and "img003" in result.output


def test_a_packed_source_keeps_the_arrays_bit_identical(tmp_path: Path) -> None:
    manifest, _ = array_manifest(tmp_path / "src")
    first = pack_arrays(tmp_path, "wds", manifest)
    want = stored_values(first)
    second = tmp_path / "second.hdf5"
    convert(first, second, "hdf5", run=ConvertOptions(workers=0))
    third = tmp_path / "third.npy"
    convert(second, third, "npy", EncodeOptions(size=(8, 8)), ConvertOptions(workers=0))
    for folder, source in ((second, first), (third, second)):
        assert open_dataset(folder)[0].fields == ARRAY_FIELDS.types
        assert stored_values(folder) == want
        assert verify(folder, source=source).problem is None
    info = run_pack("info", third)
    assert "  boxes: floats, 11 of 12 samples have a value\n" \
           "  ids: ints, 11 of 12 samples have a value" in info.output, info.output


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_array_field_no_sample_has_a_value_for(fmt: str, tmp_path: Path) -> None:
    """hdf5's blob is then empty (h5py gives it no file offset to map)."""
    src = csv_manifest(tmp_path / "src", ("label", "boxes"), [("0", ""), ("1", "")])
    folder = pack_arrays(tmp_path, fmt, src, FieldChoice(types=(FieldSpec("boxes", "floats"),)))
    assert stored_values(folder) == {"0": [None], "1": [None]}
    assert verify(folder).problem is None
    assert collate(PackedDataset(folder, fields="all").__getitems__([0, 1]))["boxes"] == \
        [None, None]
