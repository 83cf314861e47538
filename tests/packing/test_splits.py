"""`pack split` and split=: disjoint, covering, deterministic, stable when keys are added,
stratified fractions, and readers that read exactly a split's samples."""

from __future__ import annotations

import json
import math
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import DataLoader

import packer
from packer.core.index import open_dataset
from packer.dataset.splits import load_subset, split
from packer.testing import make_sample_folder, synthetic_image
from readers import Mix, PackedDataset, PackedIterableDataset, PartitionOptions
from readers.plan.chunks import expand
from readers.subset import Subset
from tests.helpers import assert_one_line_error, run_pack


def pack(src: Path, dst: Path) -> Path:
    packer.convert(src, dst, "wds", run=packer.ConvertOptions(
        workers=0, shards=packer.ShardOptions(max_samples=8)))
    return dst


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("splits")
    src = make_sample_folder(root / "src", count=60, classes=3, min_side=16, max_side=24)
    return pack(src, root / "data.wds")


@pytest.fixture
def fresh(dataset: Path, tmp_path: Path) -> Path:
    """A private copy of `dataset` that a test may split."""
    return Path(shutil.copytree(dataset, tmp_path / "data.wds"))


def keys_of(folder: Path, name: str) -> list[str]:
    index, table = open_dataset(folder)
    return [table.key(int(i)) for i in load_subset(folder, index, name)]


def test_splits_are_disjoint_covering_and_deterministic(fresh: Path) -> None:
    report = split(fresh, 0.2, 0.1, seed=5)
    assert report.counts == {"train": 42, "val": 12, "test": 6}  # round(f * 60) exactly
    index, _ = open_dataset(fresh)
    parts = [load_subset(fresh, index, name) for name in ("train", "val", "test")]
    together = np.concatenate(parts)
    assert len(together) == len(set(together.tolist())) == index.num_samples
    files = {p.name: p.read_bytes() for p in (fresh / "splits").iterdir()}
    split(fresh, 0.2, 0.1, seed=5)
    assert files == {p.name: p.read_bytes() for p in (fresh / "splits").iterdir()}
    split(fresh, 0.2, 0.1, seed=6, force=True)  # another seed, another split
    assert load_subset(fresh, index, "val").tolist() != parts[1].tolist()


def test_stratified_fractions_per_label(fresh: Path) -> None:
    split(fresh, 0.15, 0.1, stratify=True, seed=1)
    index, table = open_dataset(fresh)
    labels = np.asarray(table.labels)
    sizes = Counter(labels.tolist())
    for name, fraction in (("val", 0.15), ("test", 0.1)):
        got = Counter(labels[load_subset(fresh, index, name)].tolist())
        for label, n in sizes.items():
            low = math.floor(0.15 * n + 0.5) if name == "val" else \
                math.floor(0.25 * n + 0.5) - math.floor(0.15 * n + 0.5)
            assert got[label] == low, (name, label, got, fraction)


@pytest.mark.parametrize("stratify", [False, True])
def test_no_sample_moves_when_keys_are_added(tmp_path: Path, stratify: bool) -> None:
    src = make_sample_folder(tmp_path / "src", count=45, classes=3, min_side=16, max_side=24)
    before = pack(src, tmp_path / "before.wds")
    split(before, 0.2, 0.2, stratify=stratify, seed=3)
    rng = np.random.default_rng(0)
    for k in range(30):  # new samples, in the old classes and a new one
        folder = src / f"class_{k % 4:02d}"
        folder.mkdir(exist_ok=True)
        synthetic_image(rng, 16, 16).save(folder / f"new_{k:03d}.png")
    after = pack(src, tmp_path / "after.wds")
    shutil.copytree(before / "splits", after / "splits")  # as an append leaves them
    with pytest.raises(packer.errors.IncompleteDatasetError, match="rerun `pack split"):
        keys_of(after, "val")  # made for fewer samples: refused, not silently partial
    report = split(after, 0.2, 0.2, stratify=stratify, seed=3)
    assert report.kept_thresholds == (3 if stratify else 1)
    for name in ("train", "val", "test"):
        old = set(keys_of(before, name))
        new = set(keys_of(after, name))
        assert old <= new, name
        assert not old & (set().union(*(set(keys_of(after, other)) for other in
                                        ("train", "val", "test") if other != name)))
    assert sum(map(len, (keys_of(after, n) for n in ("train", "val", "test")))) == 75


def test_other_settings_need_force(fresh: Path) -> None:
    assert run_pack("split", fresh, "--val", "0.1").exit_code == 0
    assert_one_line_error(run_pack("split", fresh, "--val", "0.2"), 1, "--force",
                          "--val 0.1")
    result = run_pack("split", fresh, "--val", "0.2", "--force", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["counts"] == {"train": 48, "val": 12}
    text = run_pack("split", fresh, "--val", "0.2")
    assert "train 48, val 12; thresholds of 1 group(s) kept" in text.output
    assert_one_line_error(run_pack("split", fresh, "--val", "0.7", "--test", "0.4",
                                   "--force"), 2, "together below 1")


@pytest.mark.parametrize("num_workers", [0, 2])
def test_readers_read_exactly_the_subset(fresh: Path, num_workers: int) -> None:
    split(fresh, 0.25, seed=2)
    want = sorted(keys_of(fresh, "val"))
    iterable = PackedIterableDataset(fresh, split="val", with_keys=True, decode="raw",
                                     partition=PartitionOptions(chunk_size=4, buffer_size=8))
    assert len(iterable) == len(want) == 15
    loader = DataLoader(iterable, batch_size=4, num_workers=num_workers,
                        collate_fn=lambda batch: batch)
    assert sorted(key for batch in loader for _, _, key in batch) == want
    mapped = PackedDataset(fresh, split="val", with_keys=True, decode="raw")
    loader = DataLoader(mapped, batch_size=4, num_workers=num_workers,
                        collate_fn=lambda batch: batch)
    assert [key for batch in loader for _, _, key in batch] == want  # keys sort like indices
    whole = PackedDataset(fresh, with_keys=True, decode="raw")
    index, _ = open_dataset(fresh)
    for position, i in enumerate(load_subset(fresh, index, "val").tolist()):
        assert mapped[position][0] == whole[i][0]


def test_ranks_split_a_subset_exactly_once(fresh: Path) -> None:
    split(fresh, 0.3, seed=2)  # 18 samples, over 4 ranks with flagged padding
    want = keys_of(fresh, "val")
    seen: list[str] = []
    for rank in range(4):
        ranked = PackedIterableDataset(fresh, split="val", with_keys=True, decode="raw",
                                       partition=PartitionOptions(rank=rank, world_size=4,
                                                                  drop_last=False, chunk_size=3))
        seen += [key for _, label, key in ranked if label >= 0]
    assert sorted(seen) == sorted(want)


def test_class_weights_draw_from_the_subset(fresh: Path) -> None:
    split(fresh, 0.25, seed=2)
    train = set(keys_of(fresh, "train"))
    balanced = PackedIterableDataset(fresh, split="train", class_weights="balanced",
                                     with_keys=True, decode="raw")
    assert {key for _, _, key in balanced} <= train


def test_unknown_or_missing_splits_are_named(fresh: Path) -> None:
    with pytest.raises(packer.errors.IncompleteDatasetError, match="pack split"):
        PackedDataset(fresh, split="val")
    split(fresh, 0.25)
    with pytest.raises(ValueError, match="has train, val"):
        PackedDataset(fresh, split="test")
    with pytest.raises(ValueError, match="URL"):
        Subset.open("s3://bucket/data.wds", open_dataset(fresh)[0], "val")
    with pytest.raises(TypeError, match=r"partition=PartitionOptions"):
        PackedIterableDataset(fresh, split=PartitionOptions(rank=0, world_size=1))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="split= is not supported"):
        Mix([PackedIterableDataset(fresh, split="val")])


@given(st.lists(st.integers(0, 200), min_size=1, max_size=60, unique=True),
       st.lists(st.tuples(st.integers(0, 59), st.integers(0, 59), st.booleans()),
                max_size=8))
def test_subset_spans_are_the_positions_samples(members: list[int],
                                                rows: list[tuple[int, int, bool]]) -> None:
    indices = np.array(sorted(members), np.int64)
    n = len(indices)
    spans = np.array([[min(a % n, b % n), max(a % n, b % n) + 1, int(p)] for a, b, p in rows],
                     np.int64).reshape(-1, 3)
    mapped = Subset("val", indices).sample_spans(spans)
    positions, padded = expand(spans)
    samples, flags = expand(mapped)
    assert samples.tolist() == indices[positions].tolist()
    assert flags.tolist() == padded.tolist()
    assert np.all(mapped[:, 1] > mapped[:, 0])


def test_a_subset_pass_resumes_where_it_stopped(fresh: Path) -> None:
    split(fresh, 0.5, seed=4)

    def make() -> PackedIterableDataset:
        dataset = PackedIterableDataset(fresh, split="train", with_keys=True, decode="raw",
                                        seed=9,
                                        partition=PartitionOptions(chunk_size=4, buffer_size=6))
        dataset.set_epoch(1)
        return dataset

    whole = [key for _, _, key in make()]
    stream = make()
    head = [key for _, (_, _, key) in zip(range(11), stream, strict=False)]
    state = stream.state_dict()
    again = make()
    again.load_state_dict(state)
    assert head + [key for _, _, key in again] == whole
    assert sorted(whole) == sorted(keys_of(fresh, "train"))


def test_overwrite_clears_the_splits_of_the_old_dataset(tmp_path: Path) -> None:
    src = make_sample_folder(tmp_path / "src", count=6, classes=2, min_side=16, max_side=20)
    dst = pack(src, tmp_path / "data.wds")
    split(dst, 0.5)
    result = run_pack("convert", src, dst, "--to", "wds", "--workers", "0", "--overwrite")
    assert result.exit_code == 0, result.output
    assert not (dst / "splits").exists()
