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

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, get_args

import numpy as np
from PIL import Image
from torch.utils.data import Dataset, IterableDataset

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
from readers.fields import FieldNames, chosen_fields, with_fields, with_fields_many
from readers.in_memory import in_memory_copy
from readers.options import DEFAULT_CHUNK_SIZE, DEFAULT_SPLIT, RemoteOptions, SplitOptions
from readers.options.legacy import REMOTE_MOVES, SPLIT_MOVES, accepts_legacy
from readers.passes import SplitPasses
from readers.remote import RemoteSource, remote_source
from readers.resume import PendingResume
from readers.sampler import PAD_LABEL, PaddedIndex
from readers.sharding import ShardPlan, Spans, epoch_rng
from readers.weighted import ClassWeights, weighted_split
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
                crop: tuple[int, int], fields: bool = True) -> Sample:
        """`crop`: (seed, epoch) that choose the augment's box, with the sample index;
        `fields=False`: the plain tuple, the caller adding a batch's fields at once."""
        image: Any
        if self.augment is not None:
            image = decode_augmented(data, self.augment, (*crop, i), self.pixels_shape)
            if self.decode == "pil":
                image = Image.fromarray(as_numpy(image), "RGB")
        elif self.decode == "raw" and self.pixels_shape is not None:
            image = np.frombuffer(bytearray(data), np.uint8)  # see readers.batching.collate
        else:
            image = decode_record(data, self.decode, self.size, pixels_shape=self.pixels_shape)
        return self._finish(table, i, image, padded, fields=fields)

    def _finish(self, table: SampleTable, i: int, image: Any, padded: bool,
                label: int | None = None, fields: bool = True) -> Sample:
        """`label`: sample i's label when the caller looked up a batch of them at once."""
        if self.transform is not None:
            image = self.transform(image)
        if padded:
            label = PAD_LABEL
        elif label is None:
            label = int(table.labels[i])
        sample = (image, label, table.key(i)) if self.with_keys else (image, label)
        if self.fields is None or not fields:
            return sample
        return with_fields(sample, self._local().reader, i, self.fields)

    def _add_fields(self, samples: list[Sample], positions: Sequence[int]) -> list[Sample]:
        """A batch's plain samples as dicts with their fields, read with one fields_many."""
        if self.fields is None:
            return samples
        return with_fields_many(samples, self._local().reader, positions, self.fields)

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

    `in_memory=True` copies the dataset (a URL: downloads it) once per node into shared
    RAM that every worker and rank reads (readers.in_memory); no chunk cache then.
    """

    @accepts_legacy(("decode", "size", "transform", "with_keys", "cache_bytes"),
                    {"cache_bytes": ("max_cache_bytes", None),
                     "cache_dir_bytes": ("remote", "max_cache_bytes"), **REMOTE_MOVES})
    def __init__(self, path: str | Path, *, decode: Mode = "rgb8",
                 size: tuple[int, int] | None = None, augment: Augment | None = None,
                 seed: int = 0, transform: Transform | None = None, with_keys: bool = False,
                 max_cache_bytes: int = DEFAULT_CACHE_BYTES,
                 chunk_size: int = DEFAULT_CHUNK_SIZE,
                 remote: RemoteOptions | None = None, in_memory: bool = False,
                 fields: FieldNames = None) -> None:
        if max_cache_bytes < 0:
            raise ValueError(f"max_cache_bytes must be 0 (off) or positive, "
                             f"not {max_cache_bytes}")
        if seed < 0:
            raise ValueError(f"seed must be a non-negative integer, not {seed}")
        self._ram = in_memory_copy(path, remote) if in_memory else None  # the RAM is the cache
        source = None if self._ram else remote_source(path, remote)
        super().__init__(self._ram.folder if self._ram else path, decode, size, transform,
                         with_keys, chunk_size, 0 if self._ram else max_cache_bytes, source,
                         augment)
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
                                    isinstance(indices[k], PaddedIndex), labels[k], fields=False)

            return self._add_fields(gathered_samples(local.gather, positions,
                                                     self.pixels_shape, self.decode == "raw",
                                                     make, recyclable=recyclable), positions)
        records = local.cached.read_many(positions)
        crop = (self.seed, self.epoch)  # read once: the whole batch is of one epoch
        return self._add_fields([
            self._sample(local.table, i, data, isinstance(original, PaddedIndex), crop,
                         fields=False)
            for original, i, data in zip(indices, positions, records, strict=True)
        ], positions)

    def _position(self, i: int) -> int:
        n = self.index.num_samples
        if not -n <= i < n:
            raise IndexError(f"sample {i} out of range for {n} samples in {self.path}")
        return int(i) % n


class PackedIterableDataset(_PackedBase, SplitPasses, IterableDataset[Sample]):
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

    `in_memory=True` copies the dataset (a URL: downloads it) once per node into shared
    RAM that every worker and rank reads (readers.in_memory).
    """

    @accepts_legacy(("shuffle", "seed", "decode", "size", "transform", "with_keys",
                     "drop_last", "rank", "world_size", "chunk_size", "buffer_size"),
                    {"cache_bytes": ("remote", "max_cache_bytes"), **SPLIT_MOVES, **REMOTE_MOVES})
    def __init__(self, path: str | Path, *, shuffle: bool = True, seed: int = 0,
                 decode: Mode = "rgb8", size: tuple[int, int] | None = None,
                 augment: Augment | None = None, transform: Transform | None = None,
                 with_keys: bool = False, batch_size: int | None = None,
                 split: SplitOptions = DEFAULT_SPLIT,
                 remote: RemoteOptions | None = None, in_memory: bool = False,
                 class_weights: ClassWeights | None = None,
                 fields: FieldNames = None) -> None:
        self._ram = in_memory_copy(path, remote) if in_memory else None  # readers.in_memory
        source = None if self._ram else remote_source(path, remote)
        super().__init__(self._ram.folder if self._ram else path, decode, size, transform,
                         with_keys, split.chunk_size_or(DEFAULT_CHUNK_SIZE), cache_bytes=0,
                         remote=source, augment=augment)
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be at least 1 (or None), not {batch_size}")
        self.split = split
        self._world = LateWorld.of(split.rank, split.world_size)
        self._sent: RankWorld | None = None  # the world when sent to a spawned worker
        self._split = (shuffle, split.drop_last, seed)
        self._weights = weighted_split(self, class_weights, None, self.chunk_size)
        self._plan_for(self._world.now()[1])  # bad arguments fail here
        self.buffer_size = split.buffer_size
        self.batch_size = batch_size
        self._epochs = PassEpochs()
        self._resume: PendingResume | None = None
        self._pass: tuple[int, int, int] | None = None  # (epoch, worker, num_workers) ...
        self._seen = 0  # ... of this process's latest pass, and the samples it yielded
        self.fields = chosen_fields(self.index, fields, self.path)

    def _plan_for(self, world_size: int) -> ShardPlan:
        shuffle, drop_last, seed = self._split
        if self._weights is not None:  # readers.weighted: a per-class chunk schedule
            return self._weights.plan(self.index.num_samples, self.chunk_size, world_size,
                                      shuffle, drop_last, seed)
        return ShardPlan(self.index.num_samples, self.chunk_size, world_size, shuffle,
                         drop_last, seed)

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
