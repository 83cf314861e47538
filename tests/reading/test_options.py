"""The readers' keyword-only signatures, their option values, and the old spellings.

Every call shape the earlier README showed keeps working for a release, warning with the
new spelling; the new shape gives the very same reader.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from readers import (
    ChunkSampler,
    PackedDataset,
    PackedIterableDataset,
    RemoteOptions,
    SplitOptions,
)
from readers.ram.chunk_cache import ChunkCache
from tests.helpers import pack_wds

NUM = 24


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pack_wds(tmp_path_factory.mktemp("options"), NUM, 6, min_side=8, max_side=12)


def old_call(cls: Any, *args: Any, **kwargs: Any) -> tuple[Any, str]:
    """Build with an old spelling; return the object and the one warning it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        made = cls(*args, **kwargs)
    assert [w.category for w in caught] == [DeprecationWarning], caught
    assert caught[0].filename == __file__  # points at the caller's line
    return made, str(caught[0].message)


def keys(data: Any) -> list[str]:
    return [sample[2] for sample in data]


def test_iterable_positional_and_split_keywords_still_work(path: Path) -> None:
    old, message = old_call(PackedIterableDataset, path, False, 3, "raw", None, None, True,
                            False, 1, 2, 4, 0)
    for spelling in ("pass shuffle= by keyword", "drop_last= is now split=SplitOptions(",
                     "chunk_size= is now split=SplitOptions("):
        assert spelling in message
    new = PackedIterableDataset(path, shuffle=False, seed=3, decode="raw", with_keys=True,
                                split=SplitOptions(drop_last=False, rank=1, world_size=2,
                                                   chunk_size=4, buffer_size=0))
    assert (old.rank, old.world_size, old.chunk_size, old.buffer_size) == (1, 2, 4, 0)
    assert len(old) == len(new) and keys(old) == keys(new)


def test_map_style_renames(path: Path) -> None:
    old, message = old_call(PackedDataset, path, "raw", cache_bytes=0)
    assert "cache_bytes= is now max_cache_bytes=" in message and "decode= by keyword" in message
    assert old.cache_bytes == 0 and old.decode == "raw"
    with pytest.raises(ValueError, match="apply to a URL"):
        old_call(PackedDataset, path, cache_dir="/tmp/x")


def test_sampler_keywords_move_into_split(path: Path) -> None:
    ds = PackedDataset(path, decode="raw", with_keys=True)
    old, message = old_call(ChunkSampler, ds, True, 5, drop_last=False, rank=1, world_size=5,
                            buffer_size=3)
    assert "rank= is now split=SplitOptions(rank=...)" in message
    new = ChunkSampler(ds, seed=5, split=SplitOptions(drop_last=False, rank=1, world_size=5,
                                                      buffer_size=3))
    assert list(old) == list(new) and len(old) == len(new) == 5


def test_iterable_disk_cache_budget_moves_into_remote(path: Path) -> None:
    with pytest.raises(ValueError, match=r"remote options .* apply to a URL"):
        old_call(PackedIterableDataset, path, cache_bytes=2**20)


def test_one_split_value_serves_sampler_and_iterable(path: Path) -> None:
    split = SplitOptions(drop_last=False, rank=0, world_size=3, chunk_size=6, buffer_size=0)
    it = PackedIterableDataset(path, shuffle=False, decode="raw", with_keys=True, split=split)
    ds = PackedDataset(path, decode="raw", with_keys=True, chunk_size=6)
    sampler = ChunkSampler(ds, shuffle=False, split=split)
    assert keys(it) == [ds[i][2] for i in sampler]


def test_bad_calls_fail_as_python_would(path: Path) -> None:
    with pytest.raises(TypeError, match="multiple values for argument 'decode'"):
        PackedDataset(path, "raw", decode="raw")  # type: ignore[misc]
    with pytest.raises(TypeError, match="at most 6 positional"):
        PackedDataset(path, "raw", None, None, False, 0, 1)  # type: ignore[misc]
    with pytest.raises(TypeError, match="unexpected keyword argument 'shufle'"):
        PackedIterableDataset(path, shufle=True)  # type: ignore[call-arg]


@pytest.mark.parametrize(("values", "message"), [
    ({"chunk_size": 0}, "chunk_size must be at least 1"),
    ({"buffer_size": -1}, "buffer_size must be 0"),
])
def test_split_options_are_checked_when_built(values: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SplitOptions(**values)  # type: ignore[arg-type]


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
