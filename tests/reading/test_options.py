"""The readers' keyword-only signatures and their option values."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from readers import (
    ChunkSampler,
    PackedDataset,
    PackedIterableDataset,
    PartitionOptions,
    RemoteOptions,
)
from readers.ram.chunk_cache import ChunkCache
from tests.helpers import pack_wds

NUM = 24


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pack_wds(tmp_path_factory.mktemp("options"), NUM, 6, min_side=8, max_side=12)


def keys(data: Any) -> list[str]:
    return [sample[2] for sample in data]


def test_one_split_value_serves_sampler_and_iterable(path: Path) -> None:
    split = PartitionOptions(drop_last=False, rank=0, world_size=3, chunk_size=6, buffer_size=0)
    it = PackedIterableDataset(path, shuffle=False, decode="raw", with_keys=True, partition=split)
    ds = PackedDataset(path, decode="raw", with_keys=True, chunk_size=6)
    sampler = ChunkSampler(ds, shuffle=False, partition=split)
    assert keys(it) == [ds[i][2] for i in sampler]


def test_bad_calls_fail_as_python_would(path: Path) -> None:
    with pytest.raises(TypeError, match="positional argument"):
        PackedDataset(path, "raw")  # type: ignore[misc]
    with pytest.raises(TypeError, match="positional argument"):
        ChunkSampler(PackedDataset(path), True)  # type: ignore[misc]
    with pytest.raises(TypeError, match="unexpected keyword argument 'shufle'"):
        PackedIterableDataset(path, shufle=True)  # type: ignore[call-arg]


@pytest.mark.parametrize(("values", "message"), [
    ({"chunk_size": 0}, "chunk_size must be at least 1"),
    ({"buffer_size": -1}, "buffer_size must be 0"),
])
def test_split_options_are_checked_when_built(values: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PartitionOptions(**values)  # type: ignore[arg-type]


def test_remote_options_are_checked_when_built() -> None:
    with pytest.raises(ValueError, match="max_cache_bytes must be 0"):
        RemoteOptions(max_cache_bytes=-1)
    with pytest.raises(AttributeError):
        RemoteOptions().cache_dir = "x"  # type: ignore[misc]


@pytest.mark.parametrize(("build", "message"), [
    (lambda: RemoteOptions(max_cache_bytes=-1),
     r"RemoteOptions.max_cache_bytes must be 0 \(pinned shards only\) or more, not -1"),
    (lambda: ChunkCache(-2), r"max_cache_bytes must be 0 \(off\) or more, not -2"),
])
def test_every_cache_budget_says_what_0_means(build: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()
