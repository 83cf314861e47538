"""COCO-style annotations as a source's fields: boxes, category ids, annotation ids,
iscrowd and segmentation per image, categories in the index, rejects by id."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from packer import ConvertOptions, FieldChoice, convert
from packer.core.index import read_index
from packer.errors import BadInputError, SourceError
from readers import PackedDataset
from tests.helpers import (
    FORMATS,
    assert_one_line_error,
    png_bytes,
    random_image,
    run_pack,
    tree_hashes,
)

NAMES = ["a.png", "sub/b.png", "c.png"]  # c.png has no annotations
ANNOTATIONS = [
    {"id": 7, "image_id": 1, "category_id": 3, "bbox": [1, 2, 3, 4], "iscrowd": 0,
     "segmentation": [[1.0, 2.0, 4.0, 2.0, 4.0, 6.0]]},
    {"id": 8, "image_id": 2, "category_id": 5, "bbox": [0.5, 0.25, 2, 2], "iscrowd": 1,
     "segmentation": {"counts": [0, 4, 12], "size": [4, 4]}},
    {"id": 9, "image_id": 1, "category_id": 5, "bbox": [0, 0, 1.5, 1], "iscrowd": 0,
     "segmentation": [[0.0, 0.0, 1.0, 0.0, 1.0, 1.0]]},
]
EXPECTED = {  # key -> (boxes, category_ids, annotation_ids, iscrowd, segmentation)
    "a": ([[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 1.5, 1.0]], [3, 5], [7, 9], [0, 0],
          [[[1.0, 2.0, 4.0, 2.0, 4.0, 6.0]], [[0.0, 0.0, 1.0, 0.0, 1.0, 1.0]]]),
    "sub/b": ([[0.5, 0.25, 2.0, 2.0]], [5], [8], [1],
              [{"counts": [0, 4, 12], "size": [4, 4]}]),
    "c": ([], [], [], [], []),
}
FIELDS = ("boxes", "category_ids", "annotation_ids", "iscrowd", "segmentation")


def coco_folder(root: Path, annotations: list[dict[str, Any]] | None = None,
                images: list[dict[str, Any]] | None = None,
                names: Sequence[str] = NAMES, folder_name: str = "images"
                ) -> tuple[Path, Path]:
    """An image folder and its instances.json (beside it, not inside); image id n + 1
    is `names[n]`."""
    folder = root / folder_name
    for n, name in enumerate(names):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(png_bytes(random_image(8, 6, seed=n)))
    data = {"images": images if images is not None else
            [{"id": n + 1, "file_name": name, "width": 8, "height": 6}
             for n, name in enumerate(names)],
            "annotations": ANNOTATIONS if annotations is None else annotations,
            "categories": [{"id": 3, "name": "cat"}, {"id": 5, "name": "dog"}]}
    path = root / "instances.json"
    path.write_text(json.dumps(data))
    return folder, path


def read_back(dst: Path) -> dict[str, tuple[Any, ...]]:
    dataset = PackedDataset(dst, fields=list(FIELDS), with_keys=True)
    out = {}
    for i in range(len(dataset)):
        sample = dataset[i]
        out[sample["key"]] = tuple(plain(sample[name]) for name in FIELDS)
    return out


def plain(value: Any) -> Any:
    return value.tolist() if isinstance(value, torch.Tensor) else value


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_in_every_format(tmp_path: Path, fmt: str) -> None:
    folder, annotations = coco_folder(tmp_path)
    dst = tmp_path / f"out.{fmt}"
    index = convert(folder, dst, fmt, run=ConvertOptions(
        fields=FieldChoice(annotations=str(annotations))))
    assert [spec.name for spec in index.fields] == list(FIELDS)
    assert index.extra["categories"] == {"3": "cat", "5": "dog"}
    assert index.num_samples == 3 and index.num_rejected == 0
    assert read_back(dst) == EXPECTED  # c.png, without annotations, kept with empty lists


def test_no_segmentation_field_when_no_annotation_has_one(tmp_path: Path) -> None:
    plain_anns = [{k: v for k, v in a.items() if k != "segmentation"} for a in ANNOTATIONS]
    folder, annotations = coco_folder(tmp_path, plain_anns)
    index = convert(folder, tmp_path / "out.wds", "wds", run=ConvertOptions(
        fields=FieldChoice(annotations=str(annotations))))
    assert [spec.name for spec in index.fields] == list(FIELDS[:-1])


def test_missing_image_id_and_missing_file_are_rejects(tmp_path: Path) -> None:
    stray = {"id": 42, "image_id": 99, "category_id": 3, "bbox": [0, 0, 1, 1], "iscrowd": 0}
    images = [{"id": n + 1, "file_name": name} for n, name in enumerate(NAMES)]
    images.append({"id": 4, "file_name": "gone.png"})
    images.append({"id": 5, "file_name": "../instances.json"})  # no path escapes
    folder, annotations = coco_folder(tmp_path, [*ANNOTATIONS, stray], images)
    dst = tmp_path / "out.wds"
    index = convert(folder, dst, "wds", run=ConvertOptions(
        fields=FieldChoice(annotations=str(annotations))))
    assert index.num_samples == 3 and index.num_rejected == 3
    reasons = [json.loads(line)["reason"] for line in
               (dst / "rejects.jsonl").read_text().splitlines()]
    assert any("annotation 42" in r and "image id 99" in r for r in reasons), reasons
    assert any("image id 4" in r and "gone.png" in r for r in reasons), reasons
    assert any("image id 5" in r and "outside" in r for r in reasons), reasons
    with pytest.raises(BadInputError, match=r"annotation 42|image id 4"):
        convert(folder, tmp_path / "fail.wds", "wds", run=ConvertOptions(
            on_error="fail", fields=FieldChoice(annotations=str(annotations))))
    assert not (tmp_path / "fail.wds" / "index.json").exists()


def test_malformed_json_is_a_one_line_error(tmp_path: Path) -> None:
    folder, annotations = coco_folder(tmp_path)
    annotations.write_text('{"images": [')
    with pytest.raises(SourceError, match=r"instances\.json: not valid JSON .*line 1"):
        convert(folder, tmp_path / "out.wds", "wds", run=ConvertOptions(
            fields=FieldChoice(annotations=str(annotations))))
    result = run_pack("convert", folder, tmp_path / "cli.wds", "--to", "wds",
                      "--annotations", annotations)
    assert_one_line_error(result, 1, "instances.json", "not valid JSON", "fix the file")


def test_cli_convert_info_and_resume_refuses_changed_annotations(tmp_path: Path) -> None:
    folder, annotations = coco_folder(tmp_path)
    dst = tmp_path / "out.wds"
    result = run_pack("convert", folder, dst, "--to", "wds", "--annotations", annotations)
    assert result.exit_code == 0, result.output
    assert read_back(dst) == EXPECTED
    info = run_pack("info", dst)
    assert "categories:\n  3: cat\n  5: dog" in info.output, info.output
    again = run_pack("convert", folder, dst, "--to", "wds", "--annotations", annotations,
                     "--resume")
    assert again.exit_code == 0, again.output
    data = json.loads(annotations.read_text())
    data["categories"][0]["name"] = "kitten"  # fields unchanged: only the file differs
    annotations.write_text(json.dumps(data))
    changed = run_pack("convert", folder, dst, "--to", "wds", "--annotations", annotations,
                       "--resume")
    assert changed.exit_code != 0, changed.output
    assert "--overwrite" in changed.stderr
    assert read_index(dst).extra["categories"]["3"] == "cat"


def test_stock_webdataset_reads_the_boxes(tmp_path: Path) -> None:
    import webdataset as wds

    folder, annotations = coco_folder(tmp_path)
    dst = tmp_path / "out.wds"
    index = convert(folder, dst, "wds", run=ConvertOptions(
        fields=FieldChoice(annotations=str(annotations))))
    urls = [str(dst / shard.name) for shard in index.shards]
    samples = {s["__key__"]: s for s in wds.WebDataset(urls, shardshuffle=False).decode()}
    boxes = {key: samples[key]["boxes.npy"] for key in EXPECTED}
    assert all(array.dtype == np.float32 for array in boxes.values())
    assert boxes["c"].shape == (0, 4)
    assert {key: array.tolist() for key, array in boxes.items()} == \
        {key: want[0] for key, want in EXPECTED.items()}
    assert samples["a"]["category_ids.npy"].dtype == np.int64
    assert samples["a"]["category_ids.npy"].tolist() == [3, 5]


def test_output_is_the_same_for_any_worker_count(tmp_path: Path) -> None:
    folder, annotations = coco_folder(tmp_path)
    hashes = []
    for workers in (0, 2):
        dst = tmp_path / f"w{workers}.wds"
        convert(folder, dst, "wds", run=ConvertOptions(
            workers=workers, name="out", fields=FieldChoice(annotations=str(annotations))))
        hashes.append(tree_hashes(dst))
    assert hashes[0] == hashes[1] and hashes[0]


def verify_finds_a_changed_box(dst: Path | str, folder: Path, annotations: Path) -> None:
    """`pack verify --source` passes, then fails naming a.png once its first box moved."""
    ok = run_pack("verify", dst, "--source", folder, "--annotations", annotations)
    assert ok.exit_code == 0, ok.output
    data = json.loads(annotations.read_text())
    data["annotations"][0]["bbox"] = [1, 2, 3, 5]  # image a.png's first box
    annotations.write_text(json.dumps(data))
    changed = run_pack("verify", dst, "--source", folder, "--annotations", annotations)
    assert changed.exit_code == 1
    assert "a.png: fields (boxes," in changed.stderr, changed.stderr


def test_verify_compares_the_annotations(tmp_path: Path) -> None:
    folder, annotations = coco_folder(tmp_path)
    dst = tmp_path / "out.lmdb"
    assert run_pack("convert", folder, dst, "--to", "lmdb", "--annotations",
                    annotations).exit_code == 0
    verify_finds_a_changed_box(dst, folder, annotations)
    alone = run_pack("verify", dst, "--annotations", annotations)
    assert alone.exit_code == 2 and "--annotations needs --source" in alone.output


def test_verify_compares_the_annotations_of_a_dataset_at_a_url(tmp_path: Path) -> None:
    pytest.importorskip("fsspec")
    folder, annotations = coco_folder(tmp_path)
    dst = tmp_path / "out.lmdb"
    assert run_pack("convert", folder, dst, "--to", "lmdb", "--annotations",
                    annotations).exit_code == 0
    verify_finds_a_changed_box(f"file://{dst}", folder, annotations)


@pytest.mark.parametrize(("change", "said"), [
    ({"bbox": None}, "has no `bbox`"),
    ({"bbox": [1, 2, 3]}, "`bbox` [1, 2, 3], not 4 numbers"),
    ({"bbox": [1, 2, "3", 4]}, "not 4 numbers"),
    ({"bbox": [1, 2, -3, 4]}, "width and height >= 0"),
    ({"bbox": [1, 2, 10**400, 4]}, "must be finite"),  # beyond any float
    ({"bbox": [1, 2, 1e39, 4]}, "beyond float32's range"),  # boxes are float32
    ({"category_id": None}, "has no `category_id`"),
    ({"category_id": "3"}, "`category_id` \"3\", not an integer"),
    ({"category_id": 4}, "`category_id` 4, which `categories` does not list"),
    ({"category_id": 2**64}, "not an integer (64-bit)"),
    ({"iscrowd": 2}, "`iscrowd` 2, not 0 or 1"),
])
def test_a_bad_annotation_rejects_its_image(tmp_path: Path, change: dict[str, Any],
                                            said: str) -> None:
    """Nothing is filled in: the image of a bad annotation is a reject naming the id."""
    bad = dict(ANNOTATIONS[2])  # id 9, on image 1 (a.png), beside the good id 7
    for name, value in change.items():
        if value is None:
            del bad[name]
        else:
            bad[name] = value
    folder, annotations = coco_folder(tmp_path, [ANNOTATIONS[0], ANNOTATIONS[1], bad])
    dst = tmp_path / "out.wds"
    index = convert(folder, dst, "wds", run=ConvertOptions(
        fields=FieldChoice(annotations=str(annotations))))
    assert index.num_samples == 2 and index.num_rejected == 1
    assert set(read_back(dst)) == {"sub/b", "c"}
    (reject,) = map(json.loads, (dst / "rejects.jsonl").read_text().splitlines())
    assert reject["path"] == str(folder / "a.png")
    assert reject["reason"].startswith(f"image id 1 in {annotations}: annotation 9 has"), \
        reject["reason"]
    assert said in reject["reason"], reject["reason"]
    assert "fix or delete" in reject["reason"]
    result = run_pack("convert", folder, tmp_path / "fail.wds", "--to", "wds",
                      "--annotations", annotations, "--on-error", "fail")
    assert_one_line_error(result, 1, "a.png", "annotation 9", "instances.json", said)
    assert not (tmp_path / "fail.wds" / "index.json").exists()


def test_every_bad_annotation_of_an_image_is_counted(tmp_path: Path) -> None:
    anns = [{**a, "bbox": [0, 0]} if a["image_id"] == 1 else a for a in ANNOTATIONS]
    folder, annotations = coco_folder(tmp_path, anns)
    dst = tmp_path / "out.wds"
    convert(folder, dst, "wds", run=ConvertOptions(
        fields=FieldChoice(annotations=str(annotations))))
    (reject,) = map(json.loads, (dst / "rejects.jsonl").read_text().splitlines())
    assert "annotation 7 has `bbox` [0, 0]" in reject["reason"]
    assert "(and 1 more bad annotations)" in reject["reason"]


@pytest.mark.parametrize("broken", [{"id": None}, {"id": 2**63}, {"image_id": -(2**63) - 1}])
def test_an_annotation_without_an_id_stops_naming_its_position(
        tmp_path: Path, broken: dict[str, int | None]) -> None:
    ((name, value),) = broken.items()
    second = {k: v for k, v in ANNOTATIONS[1].items() if k != name}
    anns = [ANNOTATIONS[0], second if value is None else {**second, name: value}]
    folder, annotations = coco_folder(tmp_path, anns)
    result = run_pack("convert", folder, tmp_path / "out.wds", "--to", "wds",
                      "--annotations", annotations)
    assert_one_line_error(result, 1, "instances.json", "annotations[1]", "integer `id`",
                          "fix the file")


def test_the_json_as_src_is_a_manifest_of_its_folder(tmp_path: Path) -> None:
    """`pack convert images/instances.json DST`: file_names relative to the JSON's folder,
    the dataset that the folder with --annotations gives (an export keeps them together)."""
    folder, outside = coco_folder(tmp_path)
    annotations = folder / "_annotations.coco.json"
    outside.rename(annotations)
    as_src = run_pack("convert", annotations, tmp_path / "a" / "ds", "--to", "wds")
    assert as_src.exit_code == 0, as_src.output
    with_flag = run_pack("convert", folder, tmp_path / "f" / "ds", "--to", "wds",
                         "--annotations", annotations)
    assert with_flag.exit_code == 0, with_flag.output
    assert tree_hashes(tmp_path / "a" / "ds") == tree_hashes(tmp_path / "f" / "ds")
    assert read_back(tmp_path / "a" / "ds") == EXPECTED
    again = run_pack("convert", annotations, tmp_path / "a" / "ds", "--to", "wds", "--resume")
    assert again.exit_code == 0, again.output
    ok = run_pack("verify", tmp_path / "a" / "ds", "--source", annotations)
    assert ok.exit_code == 0, ok.output
    both = run_pack("convert", annotations, tmp_path / "b.wds", "--to", "wds",
                    "--annotations", annotations)
    assert_one_line_error(both, 1, "_annotations.coco.json", "drop --annotations")


def test_a_json_src_away_from_its_images_says_what_to_pass(tmp_path: Path) -> None:
    _, annotations = coco_folder(tmp_path)  # instances.json beside images/, not in it
    result = run_pack("convert", annotations, tmp_path / "out.wds", "--to", "wds")
    assert_one_line_error(result, 1, "instances.json: none of its images is in",
                          f"pass the image folder as SRC with --annotations {annotations}")
    annotations.write_text(json.dumps([{"path": "a.png", "label": 0}]))
    other = run_pack("convert", annotations, tmp_path / "out.wds", "--to", "wds")
    assert_one_line_error(other, 1, "instances.json", "JSON object with `images`")
