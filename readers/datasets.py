"""PyTorch datasets over a packed dataset of any format, found by its index.json.

    PackedDataset          map-style: ds[i] in index order, batched `__getitems__`, chunk cache
    PackedIterableDataset  streams chunks, split exactly once across ranks and workers

Handles (LMDB env, tar fds, memmaps) open lazily in the process that reads, one reader
per folder per process shared by all datasets on it, and are dropped when pickled. A
forked child closes the readers it inherited at once (`os.register_at_fork`) and opens
its own on first read: fork, spawn and forkserver workers all work, also when the
parent read first.

Epochs reach workers, persistent ones too, through one int64 word in shared memory
created in `__init__` (`PassEpochs`): `set_epoch(e)` in the parent names the next pass,
and a pass nobody named takes the next epoch, agreed by all the workers that serve it.
A plain `pickle`/`deepcopy` copies the value, giving an independent dataset. Ranks are
resolved when a pass starts.

`state_dict()` / `load_state_dict()` resume an epoch mid-way.

Samples are `(image, label)` or, with `with_keys=True`, `(image, label, key)`; with
`fields=` a dict with the sample's fields too. A repeat added to even
out the ranks (`partition=PartitionOptions(drop_last=False)`) has label `PAD_LABEL` (-1): mask it
with `labels >= 0`, or train with `CrossEntropyLoss(ignore_index=PAD_LABEL)`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset

from packer.errors import CorruptDatasetError
from readers._base import Handles, Sample, SampleSettings, Transform, _PackedBase, remote_source
from readers.augment import Augment
from readers.batching.batch import Batch, batch_labels
from readers.batching.collate import gathered_rows, gathered_samples
from readers.decoding.decode import Mode
from readers.fields import FieldNames
from readers.iterable import PackedIterableDataset
from readers.options import DEFAULT_CHUNK_SIZE, OnError, RemoteOptions, check_budget
from readers.passes.epochs import PassEpochs
from readers.ram.chunk_cache import DEFAULT_CACHE_BYTES
from readers.ram.copies import in_memory_copy
from readers.sampling.sampler import PAD_LABEL, PaddedIndex
from readers.subset import Subset

__all__ = ["PackedDataset", "PackedIterableDataset", "Sample"]


class PackedDataset(_PackedBase, Dataset[Sample]):
    """Map-style access in index order, with a per-process chunk cache (`ChunkCache`).

    `max_cache_bytes` (default 256 MiB) bounds each process's cache of tar-shard (wds)
    records; 0 turns it off. npy, hdf5 and lmdb read through memory maps, whose cache is
    the OS page cache, so they skip it. Pair with ChunkSampler under DDP so reads stay
    local. npy batches come from one gather; pass
    `collate_fn=readers.collate` to a DataLoader to get them without another copy.

    `path` may be a URL (s3://bucket/prefix, file://...): shards are fetched on demand
    into `remote=RemoteOptions(cache_dir=...)` and evicted beyond its `max_cache_bytes`
    (default 8 GiB, shared by the processes of the machine); its `storage_options` go to
    fsspec.

    `augment` (readers.RandomResizedCrop or CenterCrop) crops every sample at decode, the
    box a pure function of (seed, epoch, index): `set_epoch(e)` names the epoch, reaching
    persistent workers through shared memory as the iterable dataset's does, and
    ChunkSampler forwards the epoch of each of its passes here (Lightning calls
    set_epoch on the sampler only).

    `in_memory=True` copies the dataset (a URL: downloads it) once per node into shared
    RAM that every worker and rank reads; no chunk cache then.

    `split="val"` reads one split that `pack split` wrote into the dataset folder:
    `ds[i]` is the split's i-th sample. (How an epoch is dealt to ranks and workers is
    the sampler's `partition=`.)

    `fields_in_memory=True` reads the `fields=` of every sample once, here, checked
    against their digests, into a few buffers per field that batches gather from
    (`HeldFields`): the same samples, without reading and checking each
    sample's fields again every epoch; it costs one pass over the fields now and their
    size in RAM, shared by forked workers.

    `on_error="skip"` (or `OnError("skip", max_skipped=N)`): a damaged
    or undecodable sample is logged, counted (`num_skipped`) and served as a flagged pad,
    the next readable sample with label PAD_LABEL, as padding is: `__getitem__` cannot
    leave a hole, a default collate would break on one, and a batch one sample short
    would leave the ranks' batches uneven. Mask pads with `labels >= 0`. The default,
    "raise", raises the error that names the sample, its file and where in it; either
    way the other samples of a damaged chunk read.
    """

    def __init__(self, path: str | Path, *, decode: Mode = "rgb8",
                 size: tuple[int, int] | None = None, augment: Augment | None = None,
                 seed: int = 0, transform: Transform | None = None, with_keys: bool = False,
                 max_cache_bytes: int = DEFAULT_CACHE_BYTES,
                 chunk_size: int = DEFAULT_CHUNK_SIZE,
                 remote: RemoteOptions | None = None, in_memory: bool = False,
                 fields: FieldNames = None, fields_in_memory: bool = False,
                 split: str | None = None, on_error: OnError | str = "raise") -> None:
        check_budget("max_cache_bytes", max_cache_bytes, "off")
        if seed < 0:
            raise ValueError(f"seed must be a non-negative integer, not {seed}")
        sample = SampleSettings(decode, size, augment, transform, with_keys)
        self._ram = in_memory_copy(path, remote) if in_memory else None  # the RAM is the cache
        source = None if self._ram else remote_source(path, remote)
        super().__init__(self._ram.folder if self._ram else path, sample=sample,
                         chunk_size=chunk_size, cache_bytes=0 if self._ram else max_cache_bytes,
                         remote=source, on_error=on_error)
        self.seed = seed
        self._epochs = PassEpochs()  # only its named epoch: map-style has no passes
        self._choose_fields(fields, fields_in_memory)
        # ds[i]: the split's i-th sample
        self.subset = None if split is None else Subset.open(path, self.index, split)

    @property
    def epoch(self) -> int:
        """The epoch whose crops the dataset serves now."""
        return self._epochs.next

    def set_epoch(self, epoch: int) -> None:
        """Name the epoch of the crops; reaches running (persistent) workers too."""
        self._epochs.set_next(epoch)

    def __len__(self) -> int:
        return self.index.num_samples if self.subset is None else len(self.subset)

    def __getitem__(self, i: int) -> Sample:
        return self._read([i], recyclable=False)[0]

    def __getitems__(self, indices: Sequence[int]) -> Sequence[Sample]:
        """A batch in one go: cache hits, whole chunks, then one read_many for the rest."""
        return self._read(indices, recyclable=self.transform is None)

    def _read(self, indices: Sequence[int], recyclable: bool) -> Sequence[Sample]:
        """recyclable: an npy batch may be gathered into recycled shared memory (a whole
        batch that `readers.collate` sends as it is; never a single sample)."""
        positions = [self._position(i) for i in indices]
        local = self.handles()
        if local.gather is not None and self.pixels_shape is not None and self.augment is None \
                and self.decode != "pil" and self.size in (None, self.pixels_shape):
            try:
                return self._add_fields(self._gathered(local, indices, positions, recyclable),
                                        positions)
            except CorruptDatasetError:
                if not self._skips.skipping:
                    raise  # else sample by sample below, each damaged one padded
        if self._skips.skipping:
            return self._read_skipping(local, indices, positions)
        records = local.cached.read_many(positions)
        crop = (self.seed, self.epoch)  # read once: the whole batch is of one epoch
        samples = [
            self.make_sample(local.table, i, data, isinstance(original, PaddedIndex), crop,
                         fields=False)
            for original, i, data in zip(indices, positions, records, strict=True)
        ]
        return self._indexed(samples, positions)

    def _indexed(self, samples: list[Sample], positions: list[int]) -> Sequence[Sample]:
        """The batch's samples with their fields; raw ones keep their indices for
        the `RawBatch` of `readers.collate`."""
        if self.decode == "raw":
            return self._add_fields(Batch(samples, indices=positions), positions)
        return self._add_fields(samples, positions)

    def _read_skipping(self, local: Handles, indices: Sequence[int],
                       positions: list[int]) -> Sequence[Sample]:
        """`_read` under on_error="skip": a damaged or undecodable sample's place holds a
        flagged pad (sample_or_pad), whose position its fields then come from."""
        reader = self.tolerant(local.reader)
        records = reader.checked(local.cached.read_each(positions), positions)
        crop = (self.seed, self.epoch)
        made = [self.sample_or_pad(local.table, i, data, isinstance(original, PaddedIndex),
                                   crop, reader.read, fields=False)
                for original, i, data in zip(indices, positions, records, strict=True)]
        return self._indexed([sample for _, sample in made], [j for j, _ in made])

    def _gathered(self, local: Handles, indices: Sequence[int], positions: list[int],
                  recyclable: bool) -> Sequence[Sample]:
        """An npy batch in one gather: a Batch of rows (its buffer is the batch), or the
        samples one by one through the transform."""
        table, shape, raw = local.table, self.pixels_shape, self.decode == "raw"
        assert local.gather is not None and shape is not None  # the caller's condition
        labels = batch_labels(table.labels[positions].tolist(),  # one lookup for the batch
                              [isinstance(i, PaddedIndex) for i in indices], PAD_LABEL)
        if self.transform is None:
            keys = [table.key(i) for i in positions] if self.with_keys else None
            rows = gathered_rows(local.gather, positions, shape, recyclable)
            return Batch(rows=rows, raw=raw, labels=labels, keys=keys)

        def make(k: int, image: Any) -> Sample:
            return self._finish(table, positions[k], image, False, labels[k], fields=False)

        return gathered_samples(local.gather, positions, shape, raw, make)

    def _position(self, i: int) -> int:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"sample {i} out of range for {n} samples in {self.path}")
        return int(i) % n if self.subset is None else self.subset.sample(int(i) % n)
