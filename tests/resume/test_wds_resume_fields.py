"""A resumed wds conversion with fields gives the index.json an uninterrupted one gives:
the image types it reads back from the shards written before the interruption are the
images' (each sample's first member), not the field members' (`.txt`, `.npy`) beside
them, which `pack info`, HF datasets and Ray Data would take for images."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packer import ConvertOptions, FieldChoice, convert
from packer.core.fields import FieldSpec
from packer.core.index import INDEX_NAME, read_index
from packer.formats.base import ShardOptions
from tests.helpers import count_adds, png_bytes, random_image, tree_hashes


def manifest(root: Path) -> Path:
    """10 images with a caption (str, `.caption.txt`), a `txt` field (plain `.txt`) and
    boxes (floats, `.boxes.npy`)."""
    root.mkdir(parents=True)
    rows = []
    for i in range(10):
        (root / f"{i}.png").write_bytes(png_bytes(random_image(8, 8, seed=i)))
        rows.append(json.dumps({"path": f"{i}.png", "label": i % 2, "caption": f"c{i}",
                                "txt": f"t{i}", "boxes": [[1.0, 2, 3, 4]] * (i % 3)}))
    path = root / "rows.jsonl"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_a_resumed_run_keeps_the_image_types(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    src = manifest(tmp_path / "src")
    choice = FieldChoice(types=(FieldSpec("boxes", "floats"),))

    def run(resume: bool = False) -> ConvertOptions:
        return ConvertOptions(workers=0, fields=choice, resume=resume,
                              shards=ShardOptions(max_samples=3))

    reference = tmp_path / "ref" / "out"  # the same name: shard names come from it
    convert(src, reference, "wds", run=run())
    with pytest.raises(RuntimeError, match="injected"), \
            count_adds(monkeypatch, "wds", fail_after=7):
        convert(src, tmp_path / "out", "wds", run=run())
    convert(src, tmp_path / "out", "wds", run=run(resume=True))
    assert read_index(tmp_path / "out").extra["image_types"] == ["png"]
    assert (tmp_path / "out" / INDEX_NAME).read_bytes() == (reference / INDEX_NAME).read_bytes()
    assert tree_hashes(tmp_path / "out") == tree_hashes(reference)
