"""PackedIterableDataset with fields: a group of records' fields read at once
(readers.iterable.FIELD_GROUP), every sample still bit-identical to map-style `ds[i]`,
under 0 and 2 workers (fork, spawn) and after a resume at any point, group edges
included. Enough samples for several groups; boxes that take the fast number path and
a JSON object that does not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader

from readers import PackedDataset, PackedIterableDataset, collate
from readers.batching._number_arrays import NumberArrays
from readers.batching.batch import Batch
from readers.iterable import FIELD_GROUP
from readers.options import PartitionOptions
from tests.field_support import pack_plain_boxes, same_bits
from tests.helpers import FORMATS

COUNT = 2 * FIELD_GROUP + 13
NAMES = ("caption", "boxes", "meta")


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fields_stream")
    return {fmt: pack_plain_boxes(root / fmt, fmt, COUNT) for fmt in FORMATS}


def streamed(path: Path, **options: Any) -> PackedIterableDataset:
    it = PackedIterableDataset(path, fields=NAMES, with_keys=True, seed=5,
                               partition=PartitionOptions(chunk_size=16, buffer_size=40), **options)
    it.set_epoch(1)
    return it


def by_key(path: Path) -> dict[str, dict[str, Any]]:
    ds = PackedDataset(path, fields=NAMES, with_keys=True)
    return {sample["key"]: sample for sample in (ds[i] for i in range(len(ds)))}


# every format without workers and with 2 forked ones; spawned workers for two formats
LOADERS = [(fmt, workers, context) for fmt in FORMATS for workers, context in
           ((0, None), (2, "fork"))] + [("wds", 2, "spawn"), ("npy", 2, "spawn")]


def test_the_boxes_take_the_number_path(packed: dict[str, Path]) -> None:
    """The data here exercises the fast path (the reference path is in test_field_batch)."""
    batch = PackedDataset(packed["npy"], fields=NAMES).__getitems__(list(range(COUNT)))
    assert isinstance(batch, Batch) and batch.fields is not None
    assert isinstance(batch.fields["boxes"], NumberArrays)
    assert isinstance(batch.fields["meta"], list)


@pytest.mark.parametrize(("fmt", "workers", "context"), LOADERS)
def test_streamed_samples_equal_map_style(packed: dict[str, Path], fmt: str, workers: int,
                                          context: str | None) -> None:
    reference = by_key(packed[fmt])
    extra: dict[str, Any] = {"multiprocessing_context": context} if workers else {}
    loader = DataLoader(streamed(packed[fmt]), batch_size=None, num_workers=workers, **extra)
    samples = list(loader)
    assert sorted(sample["key"] for sample in samples) == sorted(reference)
    for sample in samples:
        assert same_bits(sample, reference[sample["key"]]), sample["key"]


@pytest.mark.parametrize("fmt", ["wds", "npy"])
def test_streamed_batches_collate_as_map_style_samples(packed: dict[str, Path],
                                                       fmt: str) -> None:
    reference = by_key(packed[fmt])
    loader = DataLoader(streamed(packed[fmt], batch_size=8), batch_size=8, collate_fn=collate,
                        num_workers=2, multiprocessing_context="fork")
    batches = list(loader)
    assert sum(len(batch["key"]) for batch in batches) == COUNT
    for batch in batches:
        assert same_bits(batch, collate([reference[key] for key in batch["key"]]))


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_resumed_stream_is_the_same_samples(packed: dict[str, Path], fmt: str) -> None:
    full = list(streamed(packed[fmt]))
    assert len(full) == COUNT
    for k in (1, FIELD_GROUP - 1, FIELD_GROUP, FIELD_GROUP + 5, COUNT - 1):
        first = streamed(packed[fmt])
        stream = iter(first)
        before = [next(stream) for _ in range(k)]
        resumed = streamed(packed[fmt])
        resumed.load_state_dict(first.state_dict())
        assert same_bits(before + list(resumed), full), k
