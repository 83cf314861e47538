"""Resume mid-epoch: stop after k batches, rebuild everything, load the state, finish.

Before + after must be exactly the uninterrupted epoch, in order: every sample once, and
the resumed part the tail of an uninterrupted run. 37 samples over 2 workers gives
unequal shares (18 and 19) and, in batches of 3, a worker that runs out first and a
partial batch, so the round-robin mapping of `loop_state` is exercised at its edges.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable
from itertools import islice
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader

from packer.core.index import open_dataset
from readers import ChunkSampler, PackedDataset, PackedIterableDataset, loop_state
from readers.options import PartitionOptions
from readers.passes.resume import samples_per_worker
from readers.passes.stream import resumed_records, stream_order
from readers.plan.chunks import ChunkPlan, epoch_rng, expand
from tests.helpers import CountingReader, pack_wds

NUM = 37
BATCH = 3
EPOCH = 1
Batches = list[list[str]]


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pack_wds(tmp_path_factory.mktemp("resume"), NUM, 8, min_side=16, max_side=24)


def iterable(path: Path, shuffle: bool = True, **split: Any) -> PackedIterableDataset:
    options = PartitionOptions(**{"chunk_size": 4, "buffer_size": 6, **split})
    it = PackedIterableDataset(path, decode="raw", with_keys=True, shuffle=shuffle,
                               partition=options)
    it.set_epoch(EPOCH)
    return it


def sampler_for(ds: PackedDataset, shuffle: bool = True, **split: Any) -> ChunkSampler:
    sampler = ChunkSampler(ds, shuffle=shuffle,
                           partition=PartitionOptions(**{"buffer_size": 6, **split}))
    sampler.set_epoch(EPOCH)
    return sampler


def make_loader(path: Path, style: str, workers: int, loader_class: Any = DataLoader,
                context: str = "fork", **kwargs: Any) -> tuple[Any, Any]:
    """A fresh reader (dataset or sampler: what holds the state) and its loader."""
    extra: dict[str, Any] = {"multiprocessing_context": context} if workers else {}
    if style == "iterable":
        it = iterable(path)
        return it, loader_class(it, batch_size=BATCH, num_workers=workers, **extra, **kwargs)
    ds = PackedDataset(path, decode="raw", with_keys=True, chunk_size=4)
    sampler = sampler_for(ds)
    return sampler, loader_class(ds, batch_size=BATCH, num_workers=workers, sampler=sampler,
                                 **extra, **kwargs)


def keys(batches: Iterable[Any], stop: int | None = None) -> Batches:
    return [list(batch[2]) for batch in islice(batches, stop)]


def check_resumed(path: Path, full: Batches, before: Batches, after: Batches, k: int,
                  whole: bool = True) -> None:
    """`whole`: the epoch is every sample (not when the DataLoader drops partial batches)."""
    assert before == full[:k]
    assert after == full[k:], f"after {k} batches the rest differs from the uninterrupted tail"
    seen = [key for batch in before + after for key in batch]
    assert len(seen) == len(set(seen)), "a sample came twice"
    if whole:
        assert sorted(seen) == sorted(open_dataset(path)[1].keys()), "not one whole epoch"


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize(("buffer_size", "rank", "world_size", "drop_last"),
                         [(6, 0, 1, True), (0, 0, 1, True), (1, 0, 1, True), (100, 0, 1, True),
                          (6, 1, 3, False), (6, 2, 5, True)])
def test_every_stop_of_a_pass_resumes_exactly(path: Path, shuffle: bool, buffer_size: int,
                                              rank: int, world_size: int,
                                              drop_last: bool) -> None:
    """In-process, every possible stop: skipping reproduces the tail (padding included)."""
    def make() -> PackedIterableDataset:
        return iterable(path, shuffle=shuffle, buffer_size=buffer_size, rank=rank,
                        world_size=world_size, drop_last=drop_last)

    full = [(key, label) for _, label, key in make()]
    for k in range(len(full) + 1):
        it = make()
        stream = iter(it)
        assert [(key, label) for _, label, key in islice(stream, k)] == full[:k]
        state = it.state_dict()
        assert state == {"epoch": EPOCH, "seed": 0, "samples_seen": k, "worker": 0,
                         "num_workers": 1, "world_size": world_size, "dealt": 0}
        resumed = make()
        resumed.load_state_dict(pickle.loads(pickle.dumps(state)))
        assert [(key, label) for _, label, key in resumed] == full[k:], k
        resumed.set_epoch(EPOCH)
        assert [(key, label) for _, label, key in resumed] == full, "a state is used once"


def test_sampler_resumes_at_every_index(path: Path) -> None:
    ds = PackedDataset(path, chunk_size=4)
    for world_size, drop_last in [(1, True), (3, False)]:
        full = list(sampler_for(ds, rank=world_size - 1, world_size=world_size,
                                drop_last=drop_last))
        for k in range(len(full) + 1):
            sampler = sampler_for(ds, rank=world_size - 1, world_size=world_size,
                                  drop_last=drop_last)
            assert list(islice(iter(sampler), k)) == full[:k]
            resumed = sampler_for(ds, rank=world_size - 1, world_size=world_size,
                                  drop_last=drop_last)
            resumed.load_state_dict(sampler.state_dict())
            assert list(resumed) == full[k:]


@pytest.mark.parametrize("skip", [0, 1, 57, 199, 200])
def test_a_resume_reads_only_what_is_left(skip: int) -> None:
    """Buffered records come back with one read_many, the rest sequentially: the records
    read are exactly the records yielded, however far the pass had got."""
    spans = ChunkPlan(200, 16, seed=5).worker_spans(3, 0, 1, 2)
    indices = expand(spans)[0].tolist()
    order = stream_order(len(indices), 20, epoch_rng(5, 3, 0, 1, 2))
    reader = CountingReader(200)
    got = [i for i, _, _ in resumed_records(reader, spans, order, skip)]  # type: ignore[arg-type]
    assert got == [indices[p] for p in order[skip:]]
    many = [len(call) - 1 for call in reader.calls if call[0] == "many"]
    ranged = [call[2] - call[1] for call in reader.calls if call[0] == "range"]  # type: ignore
    assert sum(many) + sum(ranged) == len(got) and len(many) == 1 and many[0] <= 20


def test_batches_map_to_workers_round_robin() -> None:
    # shares 18 and 19 -> 6 and 7 batches of 3: worker 0 runs out after batch 12
    assert samples_per_worker(NUM, 0, BATCH, 2) == ([0, 0], 0)
    assert samples_per_worker(NUM, 5, BATCH, 2) == ([9, 6], 1)
    assert samples_per_worker(NUM, 12, BATCH, 2) == ([18, 18], 0)
    assert samples_per_worker(NUM, 13, BATCH, 2) == ([18, 19], 0)
    assert samples_per_worker(NUM, 12, BATCH, 2, drop_last=True) == ([18, 18], 0)
    assert samples_per_worker(NUM, 4, BATCH, 0) == ([12], 0)
    with pytest.raises(ValueError, match="14 batches consumed"):
        samples_per_worker(NUM, 14, BATCH, 2)


@pytest.mark.parametrize("style", ["iterable", "map"])
@pytest.mark.parametrize(("workers", "drop_last"), [(0, False), (2, False), (2, True)])
def test_plain_dataloader_resumes_from_the_loop_count(path: Path, style: str, workers: int,
                                                      drop_last: bool) -> None:
    """The loop counts batches; prefetching workers ran ahead, and that must not matter."""
    full = keys(make_loader(path, style, workers, drop_last=drop_last)[1])
    for k in (1, 5, 12, len(full) - 1):
        before = keys(make_loader(path, style, workers, drop_last=drop_last)[1], stop=k)
        reader, loader = make_loader(path, style, workers, drop_last=drop_last)
        reader.load_state_dict(loop_state(EPOCH, k, BATCH, workers, drop_last))
        check_resumed(path, full, before, keys(loader), k, whole=not drop_last)


@pytest.mark.parametrize(("context", "persistent"), [("spawn", False), ("fork", True)])
def test_a_loaded_state_is_used_once(path: Path, context: str, persistent: bool) -> None:
    """Workers clear their count in shared memory (spawned ones too), so the parent's
    next loader and a persistent worker's next pass read the whole epoch again."""
    full = keys(make_loader(path, "iterable", 2)[1])
    reader, loader = make_loader(path, "iterable", 2, context=context,
                                 persistent_workers=persistent)
    reader.load_state_dict(loop_state(EPOCH, 4, BATCH, 2))
    assert keys(loader) == full[4:]
    if persistent:
        reader.set_epoch(EPOCH)
        assert keys(loader) == full
    fresh = DataLoader(reader, batch_size=BATCH, num_workers=2, multiprocessing_context="fork")
    reader.set_epoch(EPOCH)
    assert keys(fresh) == full


@pytest.fixture
def stateful_loader() -> Any:
    return pytest.importorskip("torchdata.stateful_dataloader").StatefulDataLoader


# torchdata 0.11 calls a torch function that newer torch deprecates; harmless
quiet = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")


@quiet
@pytest.mark.parametrize("style", ["iterable", "map"])
@pytest.mark.parametrize("workers", [0, 2])
def test_stateful_dataloader_resumes(path: Path, stateful_loader: Any, style: str,
                                     workers: int) -> None:
    def make() -> Any:
        return make_loader(path, style, workers, stateful_loader)[1]

    full = keys(make())
    for k in (3, 12):
        loader = make()
        batches = iter(loader)
        before = keys(batches, stop=k)
        state = pickle.loads(pickle.dumps(loader.state_dict()))
        del batches
        assert list(ours(state)), "the loader did not keep our state (it would replay)"
        resumed = make()
        resumed.load_state_dict(state)
        check_resumed(path, full, before, keys(resumed), k)


def ours(state: object) -> Iterable[dict[str, Any]]:
    """Our reader's states nested anywhere in a StatefulDataLoader state."""
    if isinstance(state, dict):
        if "samples_seen" in state:
            yield state
        for value in state.values():
            yield from ours(value)


@quiet
def test_stateful_dataloader_after_a_finished_epoch(path: Path, stateful_loader: Any) -> None:
    """A state saved at the end of an epoch resumes into the next one, whole."""
    reader, loader = make_loader(path, "iterable", 2, stateful_loader)
    keys(loader)
    state = loader.state_dict()
    reader, loader = make_loader(path, "iterable", 2, stateful_loader)
    reader.set_epoch(EPOCH + 1)
    loader.load_state_dict(state)
    expected, plain = make_loader(path, "iterable", 2)
    expected.set_epoch(EPOCH + 1)
    assert keys(loader) == keys(plain)


def raises(match: str, action: Callable[[], object]) -> None:
    with pytest.raises(ValueError, match=match):
        action()


def test_states_that_cannot_apply_are_refused(path: Path) -> None:
    it = iterable(path)
    it.load_state_dict({"epoch": EPOCH, "samples_seen": 5})
    it.set_epoch(EPOCH + 1)
    raises(r"mid-way through epoch 1.*set_epoch\(1\)", lambda: iter(it))
    raises("seed 3", lambda: it.load_state_dict({"epoch": 1, "seed": 3, "samples_seen": 5}))
    raises("state of DataLoader worker 1 of 2", lambda: it.load_state_dict(
        {"epoch": 1, "samples_seen": 5, "worker": 1, "num_workers": 2}))
    it.load_state_dict(loop_state(EPOCH + 1, 2, BATCH, num_workers=2))
    assert len(list(it)) == NUM - 2 * BATCH, "another worker count reads the rest, re-split"
    raises("14 batches consumed", lambda: it.load_state_dict(loop_state(1, 14, BATCH, 2)))
    sampler = sampler_for(PackedDataset(path))
    sampler.load_state_dict({"epoch": EPOCH, "samples_seen": 40})
    raises("only 37", lambda: iter(sampler))
    sampler.load_state_dict({"epoch": EPOCH - 1, "samples_seen": NUM})
    sampler.set_epoch(EPOCH)
    assert len(list(sampler)) == NUM, "a finished epoch leaves nothing to skip in another"
