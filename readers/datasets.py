"""PyTorch datasets over a packed dataset of any format, found by its index.json.

    PackedDataset          map-style: ds[i] in index order, batched `__getitems__`, chunk cache
    PackedIterableDataset  streams chunks, split exactly once across ranks and workers

Handles (LMDB env, tar fds, memmaps) open lazily in the process that reads, one reader
per folder per process shared by all datasets on it, and are dropped when pickled. A
forked child closes the readers it inherited at once (`os.register_at_fork`) and opens
its own on first read: fork, spawn and forkserver workers all work, also when the
parent read first.

Epochs reach workers, persistent ones too, through one int64 word in shared memory
created in `__init__` (readers.epochs): `set_epoch(e)` in the parent names the next pass,
and a pass nobody named takes the next epoch, agreed by all the workers that serve it.
A plain `pickle`/`deepcopy` copies the value, giving an independent dataset. Ranks are
resolved when a pass starts (readers.world).

`state_dict()` / `load_state_dict()` resume an epoch mid-way (see readers.resume).

Samples are `(image, label)` or, with `with_keys=True`, `(image, label, key)`; with
`fields=` a dict with the sample's fields too (readers.fields). A repeat
added to even out the ranks (drop_last=False) has label `PAD_LABEL` (-1): mask it with
`labels >= 0`, or train with `CrossEntropyLoss(ignore_index=PAD_LABEL)`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, get_args

import numpy as np
from PIL import Image
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from packer import formats
from packer.core.index import SampleTable, open_dataset
from readers._handles import Handles, identity, release
from readers._stream import pass_records
from readers.augment import Augment
from readers.batching.collate import gathered_samples
from readers.cache import DEFAULT_CACHE_BYTES
from readers.crop_decode import as_numpy, decode_augmented
from readers.decode import Mode
from readers.decode import decode as decode_record
from readers.epochs import PassEpochs
from readers.fields import FieldNames, chosen_fields, with_fields
from readers.remote import RemoteSource, remote_source
from readers.resume import PendingResume, pending_from_state
from readers.sampler import (
    DEFAULT_BUFFER_SIZE,
    DEFAULT_CHUNK_SIZE,
    PAD_LABEL,
    PaddedIndex,
)
from readers.sharding import ShardPlan, Spans, epoch_rng, num_in
from readers.world import LateWorld, RankWorld

Sample = Any  # (image, label[, key]), or a dict with fields= (readers.fields)
Transform = Callable[[Any], Any]


class _PackedBase:
    """Opening, per-process handles and sample building, shared by both datasets."""

    fields: tuple[str, ...] | None = None  # the field names samples carry (readers.fields)

    def __init__(self, path: str | Path, decode: Mode, size: tuple[int, int] | None,
                 transform: Transform | None, with_keys: bool, chunk_size: int,
                 cache_bytes: int, remote: RemoteSource | None = None,
                 augment: Augment | None = None) -> None:
        if decode not in get_args(Mode):
            raise ValueError(f"decode must be one of {', '.join(get_args(Mode))}, not {decode!r}")
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1, not {chunk_size}")
        if decode == "raw" and size is not None:
            raise ValueError(f"decode='raw' returns the stored bytes and cannot resize them to "
                             f"{size}: pass size=None, or decode='rgb8' or 'pil' to resize")
        _check_augment(augment, decode, size)
        self.remote = remote  # a URL's local mirror (readers.remote), or None
        self.path = remote.folder if remote is not None else Path(path).resolve()
        self.index, _ = open_dataset(self.path)  # refuses a folder without index.json
        self._key = identity(self.path)
        formats.load(self.index.format)  # a missing library fails here, not in a worker
        self.decode: Mode = decode
        self.size = size
        self.augment = augment
        self.transform = transform
        self.with_keys = with_keys
        self.chunk_size = chunk_size
        self.cache_bytes = cache_bytes
        pixels = self.index.encode.get("mode") == "pixels"
        self.pixels_shape = self.index.image_size if pixels else None
        self._handles: Handles | None = None

    @property
    def class_names(self) -> tuple[str, ...]:
        return self.index.class_names

    def _local(self) -> Handles:
        """This process's handles, opened on first use (again after a fork)."""
        handles = self._handles
        if handles is None or not handles.current(self._key):
            handles = self._handles = Handles(self._key, self.chunk_size, self.cache_bytes,
                                              self.remote)
        return handles

    def _sample(self, table: SampleTable, i: int, data: bytes, padded: bool,
                crop: tuple[int, int]) -> Sample:
        """`crop`: (seed, epoch) that choose the augment's box, with the sample index."""
        image: Any
        if self.augment is not None:
            image = decode_augmented(data, self.augment, (*crop, i), self.pixels_shape)
            if self.decode == "pil":
                image = Image.fromarray(as_numpy(image), "RGB")
        elif self.decode == "raw" and self.pixels_shape is not None:
            image = np.frombuffer(bytearray(data), np.uint8)  # see readers.batching.collate
        else:
            image = decode_record(data, self.decode, self.size, pixels_shape=self.pixels_shape)
        return self._finish(table, i, image, padded)

    def _finish(self, table: SampleTable, i: int, image: Any, padded: bool,
                label: int | None = None) -> Sample:
        """`label`: sample i's label when the caller looked up a batch of them at once."""
        if self.transform is not None:
            image = self.transform(image)
        if padded:
            label = PAD_LABEL
        elif label is None:
            label = int(table.labels[i])
        sample = (image, label, table.key(i)) if self.with_keys else (image, label)
        if self.fields is None:
            return sample
        return with_fields(sample, self._local().reader, i, self.fields)

    def close(self) -> None:
        """Release this process's handles of the folder, for every dataset on it.

        They reopen on the next read.
        """
        self._handles = None
        release(self._key)

    def __getstate__(self) -> dict[str, Any]:
        """Handles never travel: the receiving process opens its own."""
        state = self.__dict__.copy()
        state["_handles"] = None
        return state


def _check_augment(augment: Augment | None, decode: Mode, size: tuple[int, int] | None) -> None:
    if augment is None:
        return
    if decode == "raw":
        raise ValueError("augment crops decoded pixels, but decode='raw' returns the stored "
                         "bytes: pass decode='rgb8' (or 'pil'), or augment=None")
    if size is not None:
        raise ValueError(f"augment sets the output size ({augment.output_size}); "
                         f"pass size=None, not {size}")


class PackedDataset(_PackedBase, Dataset[Sample]):
    """Map-style access in index order, with a per-process chunk cache (see readers.cache).

    `cache_bytes` (default 256 MiB) bounds each process's cache of tar-shard (wds)
    records; 0 turns it off. npy, hdf5 and lmdb read through memory maps, whose cache is
    the OS page cache, so they skip it. Pair with ChunkSampler under DDP so reads stay
    local. npy batches come from one gather (see readers.batching.collate); pass
    `collate_fn=readers.collate` to a DataLoader to get them without another copy.

    `path` may be a URL (s3://bucket/prefix, file://...): shards are fetched into
    `cache_dir` on demand and evicted beyond `cache_dir_bytes` (default 8 GiB, shared by
    the processes of the machine); `storage_options` go to fsspec (see readers.remote).

    `augment` (readers.RandomResizedCrop or CenterCrop) crops every sample at decode, the
    box a pure function of (seed, epoch, index): `set_epoch(e)` names the epoch, reaching
    persistent workers through shared memory as the iterable dataset's does, and
    ChunkSampler forwards the epoch of each of its passes here (Lightning calls
    set_epoch on the sampler only).
    """

    def __init__(self, path: str | Path, decode: Mode = "rgb8",
                 size: tuple[int, int] | None = None, transform: Transform | None = None,
                 with_keys: bool = False, cache_bytes: int = DEFAULT_CACHE_BYTES, *,
                 chunk_size: int = DEFAULT_CHUNK_SIZE, cache_dir: str | Path | None = None,
                 cache_dir_bytes: int | None = None,
                 storage_options: Mapping[str, Any] | None = None,
                 seed: int = 0, augment: Augment | None = None,
                 fields: FieldNames = None) -> None:
        if cache_bytes < 0:
            raise ValueError(f"cache_bytes must be 0 (off) or positive, not {cache_bytes}")
        if seed < 0:
            raise ValueError(f"seed must be a non-negative integer, not {seed}")
        remote = remote_source(path, storage_options, cache_dir, cache_dir_bytes)
        super().__init__(path, decode, size, transform, with_keys, chunk_size, cache_bytes,
                         remote, augment)
        self.seed = seed
        self._epochs = PassEpochs()  # only its named epoch: map-style has no passes
        self.fields = chosen_fields(self.index, fields, self.path)

    @property
    def epoch(self) -> int:
        """The epoch whose crops the dataset serves now."""
        return self._epochs.next

    def set_epoch(self, epoch: int) -> None:
        """Name the epoch of the crops; reaches running (persistent) workers too."""
        self._epochs.set_next(epoch)

    def __len__(self) -> int:
        return self.index.num_samples

    def __getitem__(self, i: int) -> Sample:
        return self._read([i], recyclable=False)[0]

    def __getitems__(self, indices: Sequence[int]) -> list[Sample]:
        """A batch in one go: cache hits, whole chunks, then one read_many for the rest."""
        return self._read(indices, recyclable=self.transform is None)

    def _read(self, indices: Sequence[int], recyclable: bool) -> list[Sample]:
        """recyclable: an npy batch may be gathered into recycled shared memory (a whole
        batch that readers.collate sends as it is; never a single sample)."""
        positions = [self._position(i) for i in indices]
        local = self._local()
        if local.gather is not None and self.pixels_shape is not None and self.augment is None \
                and self.decode != "pil" and self.size in (None, self.pixels_shape):
            table = local.table
            labels = table.labels[positions].tolist()  # one lookup for the batch

            def make(k: int, image: Any) -> Sample:
                return self._finish(table, positions[k], image,
                                    isinstance(indices[k], PaddedIndex), labels[k])

            return gathered_samples(local.gather, positions, self.pixels_shape,
                                    self.decode == "raw", make,
                                    recyclable=recyclable)
        records = local.cached.read_many(positions)
        crop = (self.seed, self.epoch)  # read once: the whole batch is of one epoch
        return [
            self._sample(local.table, i, data, isinstance(original, PaddedIndex), crop)
            for original, i, data in zip(indices, positions, records, strict=True)
        ]

    def _position(self, i: int) -> int:
        n = self.index.num_samples
        if not -n <= i < n:
            raise IndexError(f"sample {i} out of range for {n} samples in {self.path}")
        return int(i) % n


class PackedIterableDataset(_PackedBase, IterableDataset[Sample]):
    """Streams this rank's share of chunks, split among DataLoader workers.

    Chunks are read in order with `read_range` (tar shards sequentially) and shuffled
    within `buffer_size` samples; the buffer then holds about buffer_size / chunk_size
    chunks, which sets how well classes mix (index order is sorted by key). `len()` is
    the exact number of samples this rank yields per epoch.

    `path` may be a URL (s3://bucket/prefix, file://...): index.json and the tables are
    fetched now, shards on demand into `cache_dir`, least recently used ones evicted
    beyond `cache_bytes` (default 8 GiB, shared by the processes of the machine);
    `storage_options` go to fsspec (see readers.remote).

    `augment` (readers.RandomResizedCrop or CenterCrop) crops every sample at decode, the
    box a pure function of (seed, epoch of the pass, sample index).
    """

    def __init__(self, path: str | Path, shuffle: bool = True, seed: int = 0,
                 decode: Mode = "rgb8", size: tuple[int, int] | None = None,
                 transform: Transform | None = None, with_keys: bool = False,
                 drop_last: bool = True, rank: int | None = None,
                 world_size: int | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE,
                 buffer_size: int = DEFAULT_BUFFER_SIZE, *, cache_dir: str | Path | None = None,
                 cache_bytes: int | None = None,
                 storage_options: Mapping[str, Any] | None = None,
                 batch_size: int | None = None, augment: Augment | None = None,
                 fields: FieldNames = None) -> None:
        remote = remote_source(path, storage_options, cache_dir, cache_bytes)
        super().__init__(path, decode, size, transform, with_keys, chunk_size, cache_bytes=0,
                         remote=remote, augment=augment)
        if buffer_size < 0:
            raise ValueError(f"buffer_size must be 0 (chunk order only) or more, "
                             f"not {buffer_size}")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be at least 1 (or None), not {batch_size}")
        self._world = LateWorld.of(rank, world_size)
        self._sent: RankWorld | None = None  # the world when sent to a spawned worker
        self._split = (shuffle, drop_last, seed)
        self._plan_for(self._world.now()[1])  # bad arguments fail here
        self.buffer_size = buffer_size
        self.batch_size = batch_size
        self._epochs = PassEpochs()
        self._resume: PendingResume | None = None
        self._pass: tuple[int, int, int] | None = None  # (epoch, worker, num_workers) ...
        self._seen = 0  # ... of this process's latest pass, and the samples it yielded
        self.fields = chosen_fields(self.index, fields, self.path)

    def _plan_for(self, world_size: int) -> ShardPlan:
        shuffle, drop_last, seed = self._split
        return ShardPlan(self.index.num_samples, self.chunk_size, world_size, shuffle,
                         drop_last, seed)

    @property
    def plan(self) -> ShardPlan:
        """The split for the world as of now."""
        return self._plan_for(self.world_size)

    @property
    def rank(self) -> int:
        return self._world.now(self._sent_here())[0]

    @property
    def world_size(self) -> int:
        return self._world.now(self._sent_here())[1]

    def _sent_here(self) -> RankWorld | None:
        """The world the main process sent, in a DataLoader worker (readers.world)."""
        return self._sent if get_worker_info() is not None else None

    @property
    def epoch(self) -> int:
        """The epoch of the coming pass."""
        return self._epochs.next

    def set_epoch(self, epoch: int) -> None:
        """Name the coming epoch; reaches running (persistent) workers too. Without it,
        each pass takes the epoch after the previous pass's (see readers.epochs)."""
        self._epochs.set_next(epoch)

    def __len__(self) -> int:
        return self.plan.num_per_rank

    def __iter__(self) -> Iterator[Sample]:
        """This process's share of the epoch, less what a loaded state says it has seen.

        Not a generator itself: the count restarts when the pass is created, so a
        state_dict() taken before its first sample (StatefulDataLoader does) is right.
        """
        info = get_worker_info()
        worker, num_workers = (info.id, info.num_workers) if info is not None else (0, 1)
        rank, world_size = self._world.for_pass(self._sent_here())
        plan = self._plan_for(world_size)
        epoch, resume, skip = self._epochs.start_pass(), self._resume, 0
        if resume is not None:
            worker = resume.worker_for(epoch, worker, num_workers)
        spans = plan.worker_spans(epoch, rank, worker, num_workers, self.batch_size)
        if resume is not None:
            skip = resume.take(epoch, worker, num_in(spans))
        self._pass, self._seen = (epoch, worker, num_workers), skip
        return self._stream(spans, plan, (epoch, rank, worker), skip)

    def _stream(self, spans: Spans, plan: ShardPlan, where: tuple[int, int, int],
                skip: int) -> Iterator[Sample]:
        """`where`: (epoch, rank, worker) of the pass, which seed its shuffle buffer."""
        local = self._local()
        rng = epoch_rng(plan.seed, *where, 2) if plan.shuffle else None
        records = pass_records(local.reader, spans, self.buffer_size, rng, skip)
        crop = (plan.seed, where[0])
        for i, padded, data in records:
            sample = self._sample(local.table, i, data, padded, crop)
            self._seen += 1
            yield sample

    def __getstate__(self) -> dict[str, Any]:
        """Spawned workers cannot ask the process group: send them the world as of now."""
        state = super().__getstate__()
        state["_sent"] = self._world.now(self._sent_here())
        return state

    def state_dict(self) -> dict[str, int]:
        """{"epoch", "seed", "samples_seen", "worker", "num_workers"} of this process's pass.

        In a DataLoader worker, that worker's share (StatefulDataLoader collects it from each
        worker with every batch); the main process of a loader with workers knows nothing
        of theirs: save `readers.resume.loop_state` there.
        """
        info = get_worker_info()
        here = (self.epoch, *((info.id, info.num_workers) if info is not None else (0, 1)))
        epoch, worker, num_workers = self._pass if self._pass is not None else here
        return {"epoch": epoch, "seed": self._split[2], "samples_seen": self._seen,
                "worker": worker, "num_workers": num_workers}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Make the next pass over state["epoch"] skip what was seen, worker by worker.

        Takes one worker's `state_dict()` inside that worker (StatefulDataLoader does
        this), or `loop_state(...)` in the main process before the DataLoader starts its
        workers. The next pass is then the state's epoch; a `set_epoch` to another epoch
        raises if the state stops mid-epoch. See `readers.resume`.
        """
        info = get_worker_info()
        here = (info.id, info.num_workers) if info is not None else None
        self._resume = pending_from_state(state, self._split[2], len(self), here,
                                          dealt=self.batch_size)
        self._epochs.set_next(self._resume.epoch)
