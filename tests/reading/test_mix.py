"""Mix through a DataLoader: exact per-source counts, the same samples for 0 and 2 workers
(fork and spawn), resume bit-identical, sources of different formats, with_source."""

from __future__ import annotations

from collections import Counter
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from torch.utils.data import DataLoader

from packer import ConvertOptions, convert
from packer.formats.base import ShardOptions
from packer.testing import make_sample_folder
from readers import Mix, PackedDataset, PackedIterableDataset, loop_state
from readers.mix import _MixedReader
from readers.options import PartitionOptions

BATCH = 3
WEIGHTS = (0.7, 0.3)
EPOCH_SIZE = 31  # odd, and more than the small source's 10: it repeats within an epoch


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A wds source of 24 samples and an lmdb source of 10."""
    root = tmp_path_factory.mktemp("mix")
    run = ConvertOptions(workers=0, shards=ShardOptions(max_samples=8))
    big = make_sample_folder(root / "big", count=24, classes=3, min_side=16, max_side=24)
    small = make_sample_folder(root / "small", count=10, classes=2, min_side=16, max_side=24,
                               seed=3)
    convert(big, root / "wds", "wds", run=run)
    convert(small, root / "lmdb", "lmdb", run=run)
    return root / "wds", root / "lmdb"


SPLIT_NAMES = ("drop_last", "rank", "world_size", "buffer_size")


def make_mix(sources: tuple[Path, Path], epoch: int = 1, **kwargs: Any) -> Mix:
    parts = [PackedIterableDataset(path, decode="raw", with_keys=True,
                                   partition=PartitionOptions(chunk_size=4)) for path in sources]
    split = PartitionOptions(**{"buffer_size": 6,
                            **{k: v for k, v in kwargs.items() if k in SPLIT_NAMES}})
    options: dict[str, Any] = {"weights": WEIGHTS, "epoch_size": EPOCH_SIZE, "seed": 5,
                               "with_source": True, "partition": split,
                               **{k: v for k, v in kwargs.items() if k not in SPLIT_NAMES}}
    mix = Mix(parts, **options)
    mix.set_epoch(epoch)
    return mix


def loader(mix: Mix, workers: int, context: str = "fork") -> DataLoader[Any]:
    extra: dict[str, Any] = {"multiprocessing_context": context} if workers else {}
    return DataLoader(mix, batch_size=BATCH, num_workers=workers, collate_fn=list, **extra)


def read(batches: Any) -> list[tuple[int, str]]:
    """(source, key) of every sample, in order."""
    return [(sample[3], sample[2]) for batch in batches for sample in batch]


def test_counts_follow_the_weights_exactly(sources: tuple[Path, Path]) -> None:
    mix = make_mix(sources, epoch=0, drop_last=False)
    assert mix.counts == (22, 9)  # 21.7 and 9.3: the larger remainder rounds up
    samples = read(loader(mix, 0))
    assert len(samples) == len(mix) == EPOCH_SIZE
    assert Counter(source for source, _ in samples) == {0: 22, 1: 9}
    assert max(Counter(samples).values()) == 1  # epoch 0: 9 of the small source's first pass


def test_a_small_source_resumes_next_epoch_before_repeating(sources: tuple[Path, Path]) -> None:
    small = [[key for source, key in read(loader(make_mix(sources, epoch, drop_last=False), 0))
              if source == 1] for epoch in (0, 1, 2)]
    assert [len(keys) for keys in small] == [9, 9, 9]
    assert len(set(small[0])) == 9 and len(set(small[0] + small[1])) == 10
    counts = Counter(small[0] + small[1] + small[2])  # 27 draws of 10: each 2 or 3 times
    assert len(counts) == 10 and set(counts.values()) == {2, 3}


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_two_workers_read_what_one_process_reads(sources: tuple[Path, Path],
                                                 context: str) -> None:
    alone = read(loader(make_mix(sources), 0))
    workers = read(loader(make_mix(sources), 2, context))
    assert workers == read(loader(make_mix(sources), 2, "fork"))  # fork and spawn alike
    assert len(alone) == len(workers) == len(make_mix(sources)) == EPOCH_SIZE
    assert sorted(workers) == sorted(alone)
    assert alone != read(loader(make_mix(sources, epoch=2), 0))  # another epoch, another order


def test_batch_dealing_and_ranks_split_the_epoch_exactly_once(sources: tuple[Path, Path]) -> None:
    ranks = [read(loader(make_mix(sources, rank=r, world_size=2, batch_size=BATCH), 2))
             for r in range(2)]
    assert [len(r) for r in ranks] == [15, 15]
    together, alone = Counter(ranks[0] + ranks[1]), Counter(read(loader(make_mix(sources), 0)))
    assert not together - alone and (alone - together).total() == 1  # drop_last: one of 31


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_from_loop_state_is_bit_identical(sources: tuple[Path, Path],
                                                 workers: int) -> None:
    whole = [read([b]) for b in loader(make_mix(sources), workers)]
    stopped = 4
    resumed = make_mix(sources)
    resumed.load_state_dict(loop_state(1, stopped, BATCH, workers))
    rest = [read([b]) for b in loader(resumed, workers)]
    assert whole[:stopped] + rest == whole


def test_state_dict_of_a_pass_resumes_it(sources: tuple[Path, Path]) -> None:
    mix = make_mix(sources)
    stream = iter(mix)
    head = [(s[3], s[2]) for s in islice(stream, 7)]
    state = mix.state_dict()
    assert state == {"epoch": 1, "seed": 5, "samples_seen": 7, "worker": 0, "num_workers": 1,
                     "world_size": 1, "dealt": 0}
    tail = [(s[3], s[2]) for s in stream]
    again = make_mix(sources)
    again.load_state_dict(state)
    assert [(s[3], s[2]) for s in again] == tail and len(head + tail) == len(mix)


def test_samples_carry_their_source_only_when_asked(sources: tuple[Path, Path]) -> None:
    sample = next(iter(make_mix(sources, with_source=False)))
    assert len(sample) == 3 and isinstance(sample[0], bytes)


def test_bad_arguments_say_what_to_fix(sources: tuple[Path, Path]) -> None:
    with pytest.raises(ValueError, match="3 weights for 2 sources"):
        make_mix(sources, weights=(1, 1, 1))
    with pytest.raises(ValueError, match="not all zero"):
        make_mix(sources, weights=(0, 0))
    with pytest.raises(ValueError, match="at least one source"):
        Mix([])


def mixed(parts: list[Any], workers: int, context: str) -> list[tuple[int, str]]:
    """(source, key) of the mix of `parts` (make_mix's settings), epoch 1."""
    mix = Mix(parts, WEIGHTS, epoch_size=EPOCH_SIZE, seed=5, with_source=True,
              partition=PartitionOptions(buffer_size=6))
    mix.set_epoch(1)
    return read(loader(mix, workers, context))


@pytest.mark.parametrize(("workers", "context"), [(0, "fork"), (2, "fork"), (2, "spawn")])
def test_map_style_sources_mix_as_iterable_ones(sources: tuple[Path, Path], workers: int,
                                                context: str) -> None:
    """PackedDataset sources mix into the same samples as PackedIterableDataset ones."""
    views = [PackedDataset(path, decode="raw", with_keys=True, chunk_size=4) for path in sources]
    streams = [PackedIterableDataset(path, decode="raw", with_keys=True,
                                     partition=PartitionOptions(chunk_size=4))
               for path in sources]
    samples = mixed(views, workers, context)
    assert Counter(source for source, _ in samples) == {0: 22, 1: 9}
    assert samples == mixed(streams, workers, context)


def test_the_mixed_reader_routes_reads_and_prefetches_to_each_source() -> None:
    class Source:
        def __init__(self, name: str) -> None:
            self.name, self.prefetched = name, []

        def read_range(self, start: int, stop: int) -> Any:
            return iter([f"{self.name}{i}".encode() for i in range(start, stop)])

        def read_many(self, indices: Any) -> list[bytes]:
            return [f"{self.name}{i}".encode() for i in indices]

        def prefetch(self, rows: Any) -> None:
            self.prefetched.append(rows)

    a, b = Source("a"), Source("b")
    reader = _MixedReader([a, b], np.array([0, 5, 9]))  # type: ignore[list-item]
    assert list(reader.read_range(6, 8)) == [b"b1", b"b2"]
    assert reader.read_many([7, 1, 5, 4]) == [b"b2", b"a1", b"b0", b"a4"]
    reader.prefetch([[2, 4, 0], [5, 9, 1]])
    assert a.prefetched == [[[2, 4, 0]]] and b.prefetched == [[[0, 4, 1]]]
