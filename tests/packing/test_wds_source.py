"""WebDataset shards as SRC, written by stock `webdataset.TarWriter` and in img2dataset's
layout: each converts to every format with its images bit for bit (pixels for npy),
labels from `.cls` or `--label`, every other member a field, and `pack verify --source`
covers it. Bad samples are rejects naming `SHARD:MEMBER`."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from packer import formats
from packer.core.index import open_dataset, read_index
from packer.encode import rgb_pixels
from packer.source.kinds import IMAGE_EXTENSIONS
from packer.source.wds_scan import IMAGE_ORDER
from readers import PackedDataset
from tests.helpers import assert_one_line_error, jpeg_bytes, png_bytes, random_image, run_pack

wds = pytest.importorskip("webdataset")
NPY_SIZE = (24, 32)


def stored_by_key(folder: Path) -> dict[str, tuple[int, bytes, dict[str, Any]]]:
    """key -> (label, stored bytes, fields) of every sample of a packed dataset."""
    index, table = open_dataset(folder)
    reader = formats.load(index.format).open_reader(folder, index, table)
    try:
        return {table.key(i): (int(table.labels[i]), reader.read(i),
                               reader.fields(i, None) if index.fields else {})
                for i in range(len(table))}
    finally:
        reader.close()


def write_shards(folder: Path, shards: int = 2, per_shard: int = 5) -> dict[str, dict[str, Any]]:
    """Shards by stock webdataset.TarWriter (jpg or png, cls, txt, json); the samples."""
    folder.mkdir(parents=True)
    samples: dict[str, dict[str, Any]] = {}
    for s in range(shards):
        with wds.TarWriter(str(folder / f"train-{s:06d}.tar")) as sink:
            for i in range(per_shard):
                key = f"{s:04d}{i:05d}"
                image = random_image(40 + i, 30 + s, seed=s * 100 + i)
                ext = "png" if i % 4 == 3 else "jpg"
                data = png_bytes(image) if ext == "png" else jpeg_bytes(image)
                sample = {"__key__": key, ext: data, "cls": (s + i) % 3,
                          "txt": f"caption {key} é", "json": {"url": f"http://x/{key}", "w": 40}}
                sink.write(sample)
                samples[key] = sample
    return samples


def write_img2dataset(folder: Path) -> dict[str, dict[str, Any]]:
    """img2dataset's output: `00000.tar` of KEY.jpg/.txt/.json, with `00000.parquet` and
    `00000_stats.json` beside each shard (not samples)."""
    folder.mkdir(parents=True)
    samples: dict[str, dict[str, Any]] = {}
    for s in range(2):
        with tarfile.open(folder / f"{s:05d}.tar", "w") as tar:
            for i in range(4):
                key = f"{s:05d}{i:04d}"
                image = jpeg_bytes(random_image(50, 40, seed=7 + s * 10 + i))
                meta: dict[str, Any] = {
                    "url": f"https://example.com/{key}.jpg", "key": key, "status": "success",
                    "width": 50, "height": 40, "caption": f"a photo {key}"}
                members = {"jpg": image, "txt": meta["caption"].encode(),
                           "json": json.dumps(meta).encode()}
                for ext, data in members.items():
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                samples[key] = {"jpg": image, "txt": meta["caption"], "json": meta}
        (folder / f"{s:05d}_stats.json").write_text(json.dumps({"count": 4}))
        (folder / f"{s:05d}.parquet").write_bytes(b"PAR1 not read")
    return samples


@pytest.mark.parametrize("fmt", ["wds", "lmdb", "hdf5", "npy"])
@pytest.mark.parametrize("spelling", ["folder", "braces", "one shard"])
def test_webdataset_shards_convert_to_every_format(tmp_path: Path, fmt: str,
                                                   spelling: str) -> None:
    samples = write_shards(tmp_path / "shards")
    src = {"folder": str(tmp_path / "shards"),
           "braces": str(tmp_path / "shards" / "train-{000000..000001}.tar"),
           "one shard": str(tmp_path / "shards" / "train-000000.tar")}[spelling]
    if spelling == "one shard":
        samples = {k: v for k, v in samples.items() if k.startswith("0000")}
    size = ["--size", "24x32"] if fmt == "npy" else []
    result = run_pack("convert", src, tmp_path / "out", "--to", fmt, *size)
    assert result.exit_code == 0, result.output
    got = stored_by_key(tmp_path / "out")
    assert sorted(got) == sorted(samples)
    assert read_index(tmp_path / "out").class_names == ("0", "1", "2")
    pixels = PackedDataset(tmp_path / "out", decode="rgb8", with_keys=True) if fmt == "npy" \
        else None
    for position, (key, (label, data, fields)) in enumerate(sorted(got.items())):
        sample = samples[key]
        image: bytes = sample["jpg"] if "jpg" in sample else sample["png"]
        assert label == sample["cls"]
        assert fields == {"json": sample["json"], "txt": sample["txt"]}
        if pixels is None:
            assert data == image  # bit for bit
        else:  # the pixels a folder of the same files gives (packer.encode.rgb_pixels)
            expected = np.frombuffer(rgb_pixels(image, NPY_SIZE, "crop"), np.uint8)
            image_out, _, key_out = pixels[position]
            assert key_out == key
            assert np.array_equal(np.asarray(image_out).transpose(1, 2, 0).ravel(), expected)
    verified = run_pack("verify", tmp_path / "out", "--source", src)
    assert verified.exit_code == 0, verified.output


@pytest.mark.parametrize("fmt", ["wds", "lmdb", "hdf5", "npy"])
def test_img2dataset_output_converts_with_captions_and_metadata(tmp_path: Path,
                                                                fmt: str) -> None:
    samples = write_img2dataset(tmp_path / "i2d")
    size = ["--size", "24x32"] if fmt == "npy" else []
    out = tmp_path / f"out.{fmt}"
    result = run_pack("convert", tmp_path / "i2d", out, "--to", fmt, *size)
    assert result.exit_code == 0, result.output
    index = read_index(out)
    assert index.class_names == ("unlabelled",)
    assert index.num_ignored == 0  # the .parquet / _stats.json beside shards are not members
    got = stored_by_key(out)
    assert sorted(got) == sorted(samples)
    for key, (label, data, fields) in got.items():
        expected = samples[key]["jpg"] if fmt != "npy" else \
            rgb_pixels(samples[key]["jpg"], NPY_SIZE, "crop")
        assert (label, data) == (0, expected)
        assert fields == {"json": samples[key]["json"], "txt": samples[key]["txt"]}
    assert run_pack("verify", out, "--source", tmp_path / "i2d").exit_code == 0


def test_label_from_a_json_key_names_classes_in_sorted_order(tmp_path: Path) -> None:
    samples = write_img2dataset(tmp_path / "i2d")
    result = run_pack("convert", tmp_path / "i2d", tmp_path / "out", "--to", "hdf5",
                      "--label", "json:status", "--fields", "txt")
    assert result.exit_code == 0, result.output
    index = read_index(tmp_path / "out")
    assert index.class_names == ("success",)
    assert [spec.name for spec in index.fields] == ["txt"]
    assert run_pack("verify", tmp_path / "out", "--source", tmp_path / "i2d").exit_code == 0
    assert len(stored_by_key(tmp_path / "out")) == len(samples)


def test_class_name_labels_and_a_sample_without_image_are_handled(tmp_path: Path) -> None:
    shard = tmp_path / "named.tar"
    with wds.TarWriter(str(shard)) as sink:
        sink.write({"__key__": "a", "jpg": jpeg_bytes(random_image(20, 20, 1)), "cls": "zebra"})
        sink.write({"__key__": "b", "jpg": jpeg_bytes(random_image(20, 20, 2)), "cls": "ant"})
        sink.write({"__key__": "c", "txt": "no image here"})
        sink.write({"__key__": "d", "jpg": jpeg_bytes(random_image(20, 20, 3))})  # no .cls
    result = run_pack("convert", shard, tmp_path / "out", "--to", "wds")
    assert result.exit_code == 0, result.output
    index = read_index(tmp_path / "out")
    assert index.class_names == ("ant", "zebra")
    got = stored_by_key(tmp_path / "out")
    assert {key: label for key, (label, _, _) in got.items()} == {"a": 1, "b": 0}
    rejects = [json.loads(line) for line in
               (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    reasons = {reject["path"]: reject["reason"] for reject in rejects}
    assert "no image member" in reasons[f"{shard}:c"]
    assert "no .cls member" in reasons[f"{shard}:d.jpg"]
    assert index.num_rejected == 2


def test_webdataset_sample_tgz_layout_and_a_damaged_image(tmp_path: Path) -> None:
    """webdataset's testdata/sample.tgz layout: flat KEY.png + KEY.cls, gzipped; one
    image is not an image."""
    shard = tmp_path / "sample.tgz"
    with tarfile.open(shard, "w:gz") as tar:
        for i in range(6):
            data = png_bytes(random_image(12, 10, i)) if i != 4 else b"not a png"
            for ext, payload in (("cls", str(i % 2).encode()), ("png", data)):
                info = tarfile.TarInfo(f"{i}.{ext}")
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    result = run_pack("convert", shard, tmp_path / "out", "--to", "npy", "--size", "8x8")
    assert result.exit_code == 0, result.output
    index = read_index(tmp_path / "out")
    assert (index.num_samples, index.num_rejected) == (5, 1)
    assert f"{shard}:4.png" in (tmp_path / "out" / "rejects.jsonl").read_text()
    stock = sum(1 for _ in wds.WebDataset(str(shard), shardshuffle=False))
    assert stock == 6  # stock webdataset sees the same six samples


def test_every_image_extension_can_be_a_samples_image() -> None:
    assert {"." + ext for ext in IMAGE_ORDER} == set(IMAGE_EXTENSIONS)


def test_brace_list_naming_a_missing_shard_is_one_line(tmp_path: Path) -> None:
    write_shards(tmp_path / "shards")
    result = run_pack("convert", str(tmp_path / "shards" / "train-{000000..000003}.tar"),
                      tmp_path / "out", "--to", "wds")
    assert_one_line_error(result, 1, "train-000002.tar does not exist", "and 1 more")
    assert not (tmp_path / "out").exists()


def test_bad_label_option_and_label_on_a_folder_are_refused(tmp_path: Path) -> None:
    write_shards(tmp_path / "shards")
    bad = run_pack("convert", tmp_path / "shards", tmp_path / "out", "--to", "wds",
                   "--label", "json")
    assert bad.exit_code == 2 and "json:KEY" in bad.output
    folder = tmp_path / "photos" / "cat"
    folder.mkdir(parents=True)
    random_image(10, 10).save(folder / "a.jpg")
    refused = run_pack("convert", tmp_path / "photos", tmp_path / "out", "--to", "wds",
                       "--label", "cls")
    assert_one_line_error(refused, 1, "--label cls applies to webdataset shards",
                          "only --label none")


def test_resume_of_a_shards_conversion_is_a_no_op(tmp_path: Path) -> None:
    write_shards(tmp_path / "shards")
    args = ("convert", tmp_path / "shards", tmp_path / "out", "--to", "lmdb")
    assert run_pack(*args).exit_code == 0
    again = run_pack(*args, "--resume")
    assert again.exit_code == 0 and "nothing to resume" in again.output
    changed = run_pack(*args, "--resume", "--label", "none")
    assert changed.exit_code == 1 and "--overwrite" in changed.stderr
