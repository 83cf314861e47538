"""`packer.append` on datasets with per-sample fields, every format: the old samples'
fields stay as they were, the new ones' equal a fresh conversion of the same inputs,
readers and `verify --source` see every field, and SRC fields that do not fit DST's
are refused in one line naming the field and both types."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from packer import ConvertOptions, EncodeOptions, append, convert, verify
from packer.core.index import read_index
from packer.errors import SourceError
from readers import PackedDataset
from tests.append_support import field_bytes
from tests.helpers import FORMATS, png_bytes, random_image

BASE, UNION = 12, 20


def row(i: int, *, caption: str | None = None) -> dict[str, Any]:
    """Manifest row i: a caption, a float score, an int, a JSON object and boxes;
    some values missing."""
    data: dict[str, Any] = {"path": f"img{i:03d}.png", "label": f"c{i % 3}",
                            "caption": caption or f"photo {i} é", "score": i / 7,
                            "n": i * 3 - 5, "meta": {"i": i, "odd": i % 2 == 1},
                            "boxes": [[i, 1.5, 2.0, 3.25]] * (i % 3)}
    if i % 4 == 1:
        data["meta"] = None
    return data


def write_manifest(root: Path, name: str, rows: list[dict[str, Any]]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for data in rows:
        image = root / data["path"]
        if not image.exists():
            image.write_bytes(png_bytes(random_image(8, 8, seed=int(data["path"][3:6]))))
    path = root / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def pack(src: Path, dst: Path, fmt: str) -> None:
    encode = EncodeOptions(size=(8, 8)) if fmt == "npy" else EncodeOptions()
    convert(src, dst, fmt, encode, ConvertOptions(workers=0))


@pytest.fixture(scope="module")
def manifests(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("append-fields")
    rows = [row(i) for i in range(UNION)]
    return write_manifest(root, "base.jsonl", rows[:BASE]), \
        write_manifest(root, "union.jsonl", rows)


@pytest.mark.parametrize("fmt", FORMATS)
def test_fields_of_old_samples_stay_and_new_ones_match_a_conversion(
        fmt: str, manifests: tuple[Path, Path], tmp_path: Path) -> None:
    base, union = manifests
    dst, fresh = tmp_path / f"ds.{fmt}", tmp_path / f"fresh.{fmt}"
    pack(base, dst, fmt)
    before = field_bytes(dst)
    result = append(union, dst, workers=0)
    assert result.num_new == UNION - BASE
    pack(union, fresh, fmt)
    after, want = field_bytes(dst), field_bytes(fresh)
    assert {key: after[key] for key in before} == before
    assert after == want
    assert read_index(dst).fields == read_index(fresh).fields
    assert read_index(dst).field_counts == read_index(fresh).field_counts
    report = verify(dst, union)
    assert report.ok, report.problem
    dataset = PackedDataset(dst, fields="all", with_keys=True)
    for i in range(len(dataset)):
        sample = dataset[i]
        assert sample["caption"] == row(int(str(sample["key"])[3:6]))["caption"]


@pytest.mark.parametrize("fmt", ["wds", "npy"])
def test_a_field_that_src_lacks_is_no_value(fmt: str, manifests: tuple[Path, Path],
                                            tmp_path: Path) -> None:
    base, _ = manifests
    dst = tmp_path / f"ds.{fmt}"
    pack(base, dst, fmt)
    rows = [{k: v for k, v in row(i).items() if k != "meta"} for i in range(BASE, UNION)]
    src = write_manifest(base.parent / "no-meta", "new.jsonl", rows)
    assert append(src, dst, workers=0).num_new == UNION - BASE
    got = field_bytes(dst)
    names = [spec.name for spec in read_index(dst).fields]
    assert all(got[f"img{i:03d}"][names.index("meta")] is None for i in range(BASE, UNION))
    assert read_index(dst).field_counts[names.index("meta")] == \
        sum(row(i)["meta"] is not None for i in range(BASE))


def test_a_field_type_that_differs_is_one_line(manifests: tuple[Path, Path],
                                               tmp_path: Path) -> None:
    base, _ = manifests
    dst = tmp_path / "ds.lmdb"
    pack(base, dst, "lmdb")
    rows = [{**row(i), "score": i} for i in range(BASE, UNION)]  # all integers: an int field
    src = write_manifest(base.parent / "int-score", "new.jsonl", rows)
    with pytest.raises(SourceError, match=r"field 'score' is int in SRC and float in .*"
                                          r"pass --field score:float"):
        append(src, dst, workers=0)
    assert not (dst / ".pack-append").exists()


def test_a_field_dst_lacks_is_refused(manifests: tuple[Path, Path], tmp_path: Path) -> None:
    base, _ = manifests
    dst = tmp_path / "ds.hdf5"
    pack(base, dst, "hdf5")
    rows = [{**row(i), "extra": "x"} for i in range(BASE, UNION)]
    src = write_manifest(base.parent / "extra", "new.jsonl", rows)
    with pytest.raises(SourceError, match=r"field 'extra' \(str\) is not one of"):
        append(src, dst, workers=0)
    from packer.source.fields import FieldChoice

    kept = FieldChoice(keep=("caption", "score", "n", "meta", "boxes"))
    assert append(src, dst, workers=0, fields=kept).num_new == UNION - BASE


def test_fields_into_a_dataset_without_fields_are_refused(manifests: tuple[Path, Path],
                                                          tmp_path: Path) -> None:
    base, union = manifests
    dst = tmp_path / "ds.wds"
    encode = EncodeOptions()
    from packer.source.fields import FieldChoice

    convert(base, dst, "wds", encode, ConvertOptions(workers=0, fields=FieldChoice(enabled=False)))
    with pytest.raises(SourceError, match=r"has no fields; .* pass --no-fields"):
        append(union, dst, workers=0)
    assert append(union, dst, workers=0, fields=FieldChoice(enabled=False)).num_new == 8


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_edited_field_is_a_reject_unless_replace(fmt: str, manifests: tuple[Path, Path],
                                                    tmp_path: Path) -> None:
    base, _ = manifests
    dst = tmp_path / f"ds.{fmt}"
    pack(base, dst, fmt)
    rows = [row(i, caption="edited" if i == 5 else None) for i in range(BASE)]
    src = write_manifest(base.parent / f"edited-{fmt}", "edited.jsonl", rows)
    result = append(src, dst, workers=0)
    assert result.num_new == 0 and result.num_new_rejects == 1
    result = append(src, dst, workers=0, replace=True)
    assert result.replaced == ("img005",)
    got = field_bytes(dst)
    assert got["img005"][0] == b"edited"
    assert verify(dst, src).ok, verify(dst, src).problem
    assert np.count_nonzero([v[0] == b"edited" for v in got.values()]) == 1
    shutil.rmtree(base.parent / f"edited-{fmt}")


def test_an_edited_sidecar_in_an_archive_is_a_reject_unless_replace(tmp_path: Path) -> None:
    """The fields of a key DST holds are compared whatever holds the source: a tar of the
    folder with one caption edited is a conflict, as the folder is; a new image's sidecar
    comes along from the tar as from the folder."""
    folder = tmp_path / "photos"
    (folder / "cat").mkdir(parents=True)
    for i in range(3):
        (folder / "cat" / f"{i}.png").write_bytes(png_bytes(random_image(8, 8, seed=i)))
        (folder / "cat" / f"{i}.txt").write_text(f"caption {i}")
    dst = tmp_path / "ds.lmdb"
    convert(folder, dst, "lmdb", run=ConvertOptions(workers=0))
    (folder / "cat" / "1.txt").write_text("an edited caption")
    (folder / "cat" / "3.png").write_bytes(png_bytes(random_image(8, 8, seed=3)))
    (folder / "cat" / "3.txt").write_text("a new image")
    archive = tmp_path / "photos.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(folder / "cat", arcname="cat")
    result = append(archive, dst, workers=0)
    assert (result.num_new, result.num_new_rejects) == (1, 1)
    assert field_bytes(dst)["cat/3"] == [b"a new image"]
    result = append(folder, dst, workers=0)  # the folder: the same conflict, nothing new
    assert (result.num_new, result.num_new_rejects) == (0, 1)
    assert append(archive, dst, workers=0, replace=True).replaced == ("cat/1",)
    assert field_bytes(dst)["cat/1"] == [b"an edited caption"]
