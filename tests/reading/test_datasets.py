"""PackedDataset / PackedIterableDataset through real DataLoaders, in every format."""

from __future__ import annotations

import gc
import json
import os
import pickle
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import psutil
import pytest
import torch
from torch.utils.data import DataLoader

from packer.core.index import INDEX_NAME, open_dataset
from packer.errors import CorruptDatasetError, IncompleteDatasetError
from readers import ChunkSampler, PackedDataset, PackedIterableDataset
from readers.decoding.decode import decode
from readers.options import PartitionOptions
from readers.sampling.sampler import PAD_LABEL
from tests.helpers import pack_every_format

NUM = 48
SIZE = (24, 24)
CONTEXTS = [(None, 0), ("fork", 2), ("spawn", 2), ("forkserver", 2)]


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same small source packed in every format (wds in several shards)."""
    return pack_every_format(tmp_path_factory.mktemp("packed"), NUM, SIZE, 32, 64)


def all_keys(path: Path) -> list[str]:
    return open_dataset(path)[1].keys()


def loader_keys(batches: Iterable[list[object]]) -> list[str]:
    return [key for batch in batches for key in batch[2]]  # type: ignore[attr-defined]


def loader(dataset: object, context: str | None, workers: int, **kwargs: object) -> DataLoader:
    extra = {"multiprocessing_context": context} if workers else {}
    return DataLoader(dataset, batch_size=5, num_workers=workers, **extra, **kwargs)  # type: ignore


def test_folder_without_index_is_refused(packed: dict[str, Path], tmp_path: Path) -> None:
    copy = shutil.copytree(packed["wds"], tmp_path / "half")
    (copy / INDEX_NAME).unlink()
    for make in (PackedDataset, PackedIterableDataset):
        with pytest.raises(IncompleteDatasetError, match=INDEX_NAME):
            make(copy)


def test_a_rank_without_samples_is_refused(packed: dict[str, Path]) -> None:
    with pytest.raises(ValueError, match=f"{NUM} samples cannot give each of 64 ranks"):
        PackedIterableDataset(packed["npy"], partition=PartitionOptions(rank=0, world_size=64))
    ds = PackedDataset(packed["npy"])
    with pytest.raises(ValueError, match="cannot give each"):
        ChunkSampler(ds, partition=PartitionOptions(rank=3, world_size=64))
    uneven = PartitionOptions(rank=3, world_size=64, drop_last=False)
    assert len(ChunkSampler(ds, partition=uneven)) == 1
    with pytest.raises(ValueError, match=r"rank 2 is not in 0\.\.1"):
        ChunkSampler(ds, partition=PartitionOptions(rank=2, world_size=2))


def test_map_dataset_in_index_order(packed: dict[str, Path], fmt: str) -> None:
    index, table = open_dataset(packed[fmt])
    ds = PackedDataset(packed[fmt], size=SIZE, with_keys=True)
    raw = PackedDataset(packed[fmt], decode="raw", max_cache_bytes=0)
    assert len(ds) == NUM
    for i in (0, 7, NUM - 1):
        image, label, key = ds[i]
        assert (key, label) == (table.key(i), int(table.labels[i]))
        assert image.dtype == torch.uint8 and tuple(image.shape) == (3, *SIZE)
        shape = index.image_size if fmt == "npy" else None
        assert torch.equal(image, decode(raw[i][0], "rgb8", SIZE, pixels_shape=shape))
    batch = ds.__getitems__([5, 1, 5, -1])
    assert [sample[2] for sample in batch] == [table.key(j) for j in (5, 1, 5, NUM - 1)]
    assert torch.equal(batch[0][0], batch[2][0])
    with pytest.raises(IndexError):
        ds[NUM]


def test_iterable_reads_each_sample_once(packed: dict[str, Path], fmt: str) -> None:
    it = PackedIterableDataset(packed[fmt], size=SIZE, with_keys=True,
                               partition=PartitionOptions(chunk_size=8, buffer_size=12))
    first = [key for _, _, key in it]
    assert len(it) == NUM and sorted(first) == sorted(all_keys(packed[fmt]))
    second = [key for _, _, key in it]
    assert sorted(second) == sorted(first) and second != first, "an unnamed pass: next epoch"
    it.set_epoch(0)
    assert [key for _, _, key in it] == first, "set_epoch repeats an epoch"
    it.set_epoch(1)
    assert [key for _, _, key in it] == second
    plain = PackedIterableDataset(packed[fmt], shuffle=False, decode="raw")
    assert [label for _, label in plain] == open_dataset(packed[fmt])[1].labels.tolist()


@pytest.mark.parametrize(("context", "workers"), CONTEXTS)
def test_dataloaders_after_the_parent_read(packed: dict[str, Path], context: str | None,
                                           workers: int) -> None:
    """Workers must open their own handles although the parent read (LMDB after fork)."""
    path = packed["lmdb"]
    ds = PackedDataset(path, size=SIZE, with_keys=True)
    it = PackedIterableDataset(path, size=SIZE, with_keys=True,
                               partition=PartitionOptions(chunk_size=8))
    assert ds[0][2] in all_keys(path) and next(iter(it))[2] in all_keys(path)
    sampler = ChunkSampler(ds, partition=PartitionOptions(drop_last=False))
    keys = loader_keys(loader(ds, context, workers, sampler=sampler))
    assert sorted(keys) == sorted(all_keys(path))
    streamed = loader_keys(loader(it, context, workers))
    assert sorted(streamed) == sorted(all_keys(path))


def epoch_orders(it: PackedIterableDataset, dl: DataLoader, epochs: list[int]) -> list[list[str]]:
    orders = []
    for epoch in epochs:
        it.set_epoch(epoch)
        orders.append(loader_keys(dl))
    return orders


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_persistent_workers_follow_set_epoch(packed: dict[str, Path], context: str) -> None:
    it = PackedIterableDataset(packed["wds"], size=SIZE, with_keys=True,
                               partition=PartitionOptions(chunk_size=8))
    dl = loader(it, context, 2, persistent_workers=True)
    first, second, again = epoch_orders(it, dl, [0, 1, 0])
    assert sorted(first) == sorted(second) == sorted(all_keys(packed["wds"]))
    assert first != second, "set_epoch did not reach the persistent workers"
    assert first == again


@pytest.mark.parametrize("fmt", ["wds", "npy"])
@pytest.mark.parametrize("drop_last", [True, False])
def test_ranks_split_exactly_with_flagged_padding(packed: dict[str, Path], fmt: str,
                                                  drop_last: bool) -> None:
    """48 samples over 5 ranks: drop 3, or pad 2 repeats that carry PAD_LABEL."""
    world = 5
    expected = NUM // world if drop_last else -(-NUM // world)
    ds = PackedDataset(packed[fmt], size=SIZE, with_keys=True)
    for styles in ("iterable", "map"):
        real: list[str] = []
        padded = 0
        for rank in range(world):
            if styles == "iterable":
                split = PartitionOptions(drop_last=drop_last, rank=rank, world_size=world,
                                     chunk_size=4)
                data: object = PackedIterableDataset(packed[fmt], size=SIZE, with_keys=True,
                                                     partition=split)
                dl = loader(data, None, 0)
            else:
                split = PartitionOptions(drop_last=drop_last, rank=rank, world_size=world)
                dl = loader(ds, None, 0, sampler=ChunkSampler(ds, partition=split))
            samples = [(label, key) for batch in dl for label, key in zip(*batch[1:], strict=True)]
            assert len(samples) == expected == len(dl.dataset if styles == "iterable"  # type: ignore
                                                   else dl.sampler)  # type: ignore
            real += [key for label, key in samples if label != PAD_LABEL]
            padded += sum(1 for label, _ in samples if label == PAD_LABEL)
        assert len(real) == len(set(real))
        assert len(real) == (NUM - NUM % world if drop_last else NUM)
        assert padded == (0 if drop_last else world * expected - NUM)


def snapshot(folder: Path) -> dict[str, tuple[int, int, int]]:
    out = {}
    for path in sorted(folder.rglob("*")):
        info = path.stat()
        out[str(path.relative_to(folder))] = (info.st_size, info.st_mtime_ns, info.st_mode)
    return out


def set_writable(folder: Path, writable: bool) -> None:
    """chmod -R a-w (or u+w back); root ignores it, hence the snapshot comparison."""
    for path in [folder, *folder.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod(mode | stat.S_IWUSR if writable else mode & ~0o222)


def read_everything(path: Path) -> Iterator[object]:
    ds = PackedDataset(path, size=SIZE)
    yield from (ds[i] for i in range(len(ds)))
    yield from PackedIterableDataset(path, size=SIZE)
    yield from loader(PackedDataset(path, size=SIZE), "fork", 2)


def test_read_only_folder_stays_untouched(packed: dict[str, Path], tmp_path: Path,
                                          fmt: str) -> None:
    folder = shutil.copytree(packed[fmt], tmp_path / fmt)
    set_writable(folder, False)
    try:
        before = snapshot(folder)
        assert sum(1 for _ in read_everything(folder)) > 2 * NUM
        assert snapshot(folder) == before, "reading wrote into the dataset folder"
    finally:
        set_writable(folder, True)


def test_truncated_shard_raises(packed: dict[str, Path], tmp_path: Path) -> None:
    folder = shutil.copytree(packed["wds"], tmp_path / "wds")
    shard = folder / "wds-00002.tar"  # pack_every_format's wds folder is named wds
    os.truncate(shard, shard.stat().st_size // 2)
    ds = PackedDataset(folder, size=SIZE)
    with pytest.raises(CorruptDatasetError, match=r"wds-00002\.tar"):
        for i in range(NUM):
            ds[i]
    with pytest.raises(CorruptDatasetError, match=r"wds-00002\.tar"):
        list(PackedIterableDataset(folder, size=SIZE))
    with pytest.raises(CorruptDatasetError, match="truncated at sample"):
        list(loader(PackedIterableDataset(folder, size=SIZE), "fork", 2))
    gc.collect()  # torch takes seconds to join workers after an error: pay for it here


def test_flipped_byte_raises(packed: dict[str, Path], tmp_path: Path, fmt: str) -> None:
    folder = shutil.copytree(packed[fmt], tmp_path / fmt)
    target = 11
    record = PackedDataset(folder, decode="raw")[target][0]
    data_file = next(p for p in sorted(folder.rglob("*")) if p.is_file()
                     and record in p.read_bytes())
    content = bytearray(data_file.read_bytes())
    where = content.find(record) + len(record) // 2
    content[where] ^= 0xFF
    data_file.write_bytes(bytes(content))
    with pytest.raises(CorruptDatasetError, match=f"sample {target} "):
        PackedDataset(folder, size=SIZE).__getitems__([3, target])
    with pytest.raises(CorruptDatasetError, match=f"sample {target} "):
        list(PackedIterableDataset(folder, size=SIZE))


def test_pickle_carries_no_handles(packed: dict[str, Path]) -> None:
    ds = PackedDataset(packed["lmdb"], size=SIZE)
    ds[0]
    clone = pickle.loads(pickle.dumps(ds))
    assert clone._handles is None and ds._handles is not None
    assert torch.equal(clone[3][0], ds[3][0])
    it = PackedIterableDataset(packed["lmdb"], size=SIZE)
    it.set_epoch(4)
    copy = pickle.loads(pickle.dumps(it))
    copy.set_epoch(5)
    assert (it.epoch, copy.epoch) == (4, 5)


def worker_uss() -> float:
    children = psutil.Process().children()
    return sum(child.memory_full_info().uss for child in children)


# Run in a fresh interpreter: fork workers of the test runner copy pages of its heap as
# they touch them (reference counts), which grows with every test run before this one and
# shows up as growth that is not the datasets'; gc.freeze keeps the collector from doing
# the same in the child's own workers.
_EPOCHS_USS = """
import gc, json, sys
import psutil
from torch.utils.data import DataLoader
from readers import ChunkSampler, PackedDataset, PackedIterableDataset

path, size, num = sys.argv[1], (int(sys.argv[2]), int(sys.argv[3])), int(sys.argv[4])
ds = PackedDataset(path, size=size)
it = PackedIterableDataset(path, size=size)
sampler = ChunkSampler(ds)
loaders = [DataLoader(it, batch_size=5, num_workers=2, multiprocessing_context="fork",
                      persistent_workers=True),
           DataLoader(ds, batch_size=5, num_workers=2, multiprocessing_context="fork",
                      persistent_workers=True, sampler=sampler)]
gc.collect()
gc.freeze()
sizes = []
for epoch in range(6):
    it.set_epoch(epoch)
    sampler.set_epoch(epoch)
    assert [sum(len(batch[1]) for batch in dl) for dl in loaders] == [num, num]
    children = psutil.Process().children()
    sizes.append(sum(child.memory_full_info().uss for child in children))
print(json.dumps({"workers": len(children), "sizes": sizes}))
"""


def test_worker_memory_stays_flat(packed: dict[str, Path]) -> None:
    """Per-sample metadata is numpy and the cache is bounded: no growth across epochs."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", _EPOCHS_USS, str(packed["wds"]), *map(str, SIZE),
                           str(NUM)], env={**os.environ, "PYTHONPATH": path},
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    sizes = measured["sizes"]
    print("worker USS by epoch, MiB:", [round(size / 2**20, 2) for size in sizes])
    assert measured["workers"] >= 4
    assert sizes[-1] < sizes[1] * 1.05, "workers grew over 4 epochs"

