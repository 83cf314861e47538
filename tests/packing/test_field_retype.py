"""--field on every source that has fields: a JSONL key, a packed dataset's field (json
boxes repacked as floats), an image folder's sidecars. A name the source lacks, or a
type a sidecar cannot take, is an error naming it, never silently ignored."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from packer import ConvertOptions, FieldChoice, FieldSpec, convert
from packer.errors import SourceError
from readers import PackedDataset
from tests.helpers import assert_one_line_error, jsonl_manifest, png_bytes, random_image, run_pack


def jsonl(root: Path, boxes: list[object]) -> Path:
    """root/m.jsonl: one small PNG per entry of `boxes`, with those boxes."""
    return jsonl_manifest(root, [{"boxes": value} for value in boxes])


BOXES = [[[0.5, 1.0, 2.25, 3.0]], [], [[0.1, 0.2, 0.3, 0.4], [1, 2, 3, 4]]]


def boxes_of(dst: Path) -> dict[str, object]:
    ds = PackedDataset(dst, fields=("boxes",), with_keys=True)
    return {sample["key"]: sample["boxes"] for sample in (ds[i] for i in range(len(ds)))}


def test_a_typo_in_a_jsonl_field_type_is_an_error(tmp_path: Path) -> None:
    manifest = jsonl(tmp_path / "src", BOXES)
    with pytest.raises(SourceError, match="--field names 'boxs', which the source does not"):
        convert(manifest, tmp_path / "a", "wds", run=ConvertOptions(
            workers=0, fields=FieldChoice(types=(FieldSpec("boxs", "floats"),))))
    result = run_pack("convert", manifest, tmp_path / "b", "--to", "wds", "--field", "boxs:floats")
    assert_one_line_error(result, 1, str(manifest), "'boxs'", "its fields: boxes")


@pytest.mark.parametrize("fmt", ["lmdb", "hdf5"])
def test_a_packed_sources_json_boxes_repack_as_floats(tmp_path: Path, fmt: str) -> None:
    old = tmp_path / "old"
    convert(jsonl(tmp_path / "src", BOXES), old, fmt, run=ConvertOptions(workers=0))
    new = tmp_path / "new"
    index = convert(old, new, "wds", run=ConvertOptions(
        workers=0, fields=FieldChoice(types=(FieldSpec("boxes", "floats"),))))
    assert index.fields == (FieldSpec("boxes", "floats"),)
    got = boxes_of(new)
    for key, value in zip(("0", "1", "2"), BOXES, strict=True):
        tensor = got[key]
        assert isinstance(tensor, torch.Tensor) and tensor.dtype == torch.float32
        assert np.array_equal(tensor.numpy(), np.array(value, np.float32).reshape(tensor.shape))
    assert run_pack("verify", new, "--source", old).exit_code == 0
    back = tmp_path / "back"  # and floats back to json: lists again
    convert(new, back, "lmdb", run=ConvertOptions(
        workers=0, fields=FieldChoice(types=(FieldSpec("boxes", "json"),))))
    assert {k: v.tolist() if isinstance(v, torch.Tensor) else v
            for k, v in boxes_of(back).items()} == \
        {k: v.tolist() for k, v in got.items()}


def test_a_packed_value_that_does_not_fit_the_new_type_is_a_reject(tmp_path: Path) -> None:
    old = tmp_path / "old"
    convert(jsonl(tmp_path / "src", [[[1, 2], [3]], [[1.5, 2]]]), old, "lmdb",
            run=ConvertOptions(workers=0))
    new = tmp_path / "new"
    index = convert(old, new, "wds", run=ConvertOptions(
        workers=0, fields=FieldChoice(types=(FieldSpec("boxes", "floats"),))))
    assert index.num_samples == 1 and index.num_rejected == 1
    (reject,) = map(json.loads, (new / "rejects.jsonl").read_text().splitlines())
    assert "field 'boxes' (floats)" in reject["reason"] and "ragged" in reject["reason"]


def test_sidecar_types_are_fixed(tmp_path: Path) -> None:
    src = tmp_path / "photos" / "cat"
    src.mkdir(parents=True)
    (src / "a.png").write_bytes(png_bytes(random_image(8, 8, seed=0)))
    (src / "a.txt").write_text("12")
    result = run_pack("convert", src.parent, tmp_path / "x", "--to", "wds", "--field", "txt:int")
    assert_one_line_error(result, 1, str(src.parent), "--field txt:int does not apply")
    same = run_pack("convert", src.parent, tmp_path / "y", "--to", "wds", "--field", "txt:str")
    assert same.exit_code == 0, same.output
