"""COCO datasets packed before the array types (at 39c88be) hold their annotations as
json lists: `pack verify --source` rescans the annotations with the dataset's own field
types, so such a dataset still verifies against its unchanged source (and still fails
when the source changed). `--field boxes:json ...` packs that layout, byte for byte."""

from __future__ import annotations

from pathlib import Path

from packer.core.fields import FieldSpec
from packer.core.index import read_index
from tests.field_array_support import stored_values
from tests.helpers import run_pack
from tests.packing.test_coco import coco_folder, verify_finds_a_changed_box

JSON_TYPES = ("boxes", "category_ids", "annotation_ids", "iscrowd")
# What 39c88be stored for tests.packing.test_coco's annotations (read from a dataset it packed):
# boxes, category_ids, annotation_ids, iscrowd of each key
OLD_VALUES = {
    "a": [b"[[1.0,2.0,3.0,4.0],[0.0,0.0,1.5,1.0]]", b"[3,5]", b"[7,9]", b"[0,0]"],
    "sub/b": [b"[[0.5,0.25,2.0,2.0]]", b"[5]", b"[8]", b"[1]"],
    "c": [b"[]", b"[]", b"[]", b"[]"],
}


def test_a_dataset_of_json_annotations_verifies_against_its_source(tmp_path: Path) -> None:
    folder, annotations = coco_folder(tmp_path)
    dst = tmp_path / "old.lmdb"
    packed = run_pack("convert", folder, dst, "--to", "lmdb", "--annotations", annotations,
                      *(f"--field={name}:json" for name in JSON_TYPES))
    assert packed.exit_code == 0, packed.output
    assert read_index(dst).fields[:4] == tuple(FieldSpec(name, "json") for name in JSON_TYPES)
    assert {key: values[:4] for key, values in stored_values(dst).items()} == OLD_VALUES
    verify_finds_a_changed_box(dst, folder, annotations)
