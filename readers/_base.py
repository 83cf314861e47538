"""What both datasets share: opening a folder, per-process handles, building samples.

`Handles` are what one dataset reads through in one process: the folder's shared reader
(one registry for every reader of a folder in the process, closed in
a forked child and reopened on first read) plus this dataset's own chunk cache, batched
gather and, for a URL, the mirror that fetches shards on demand. They never travel
through pickle.

`SampleSettings` groups how a record becomes a sample (decode, size, augment, transform,
with_keys), checked when built, so `_PackedBase` takes that one value and what locates
and reads the records, by keyword.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast, get_args

import numpy as np
from PIL import Image

from packer import formats
from packer.core.index import Index, SampleTable, open_dataset
from packer.dataset.open import (
    LocalVersion,
    Wrap,
    is_current,
    is_url,
    local_version,
    opened,
    release,
)
from packer.formats.base import RecordReader
from readers.augment import Augment
from readers.batching.collate import Gatherer
from readers.damage import DamagedRecord, Skips, TolerantReader
from readers.decoding.crop_decode import as_numpy, decode_augmented
from readers.decoding.decode import DecodeError, Mode
from readers.decoding.decode import decode as decode_record
from readers.fields import (
    FieldNames,
    FieldSource,
    ReadFields,
    chosen_fields,
    with_fields,
    with_fields_many,
)
from readers.held_fields import HeldFields
from readers.options import OnError, RemoteOptions
from readers.ram.chunk_cache import CachedReader
from readers.remote import RemoteSource, open_remote, remote_reader
from readers.sampling.sampler import PAD_LABEL

Sample = Any  # (image, label[, key]), or a dict with fields=
Transform = Callable[[Any], Any]
MAX_PAD_TRIES = 1024  # samples after a skipped one tried for its pad before giving up


@dataclass(frozen=True)
class SampleSettings:
    """How a record becomes a sample, the same for every read of a dataset.

    `decode`: the image's form (a decode `Mode`); `size`: resized to (H, W)
    (None: as stored); `augment`: a crop fused into decode, which sets the size itself;
    `transform`: applied to each decoded image; `with_keys`: samples carry their key.
    """

    decode: Mode = "rgb8"
    size: tuple[int, int] | None = None
    augment: Augment | None = None
    transform: Transform | None = None
    with_keys: bool = False

    def __post_init__(self) -> None:
        if self.decode not in get_args(Mode):
            raise ValueError(f"decode must be one of {', '.join(get_args(Mode))}, "
                             f"not {self.decode!r}")
        if self.decode == "raw" and self.size is not None:
            raise ValueError(f"decode='raw' returns the stored bytes and cannot resize them to "
                             f"{self.size}: pass size=None, or decode='rgb8' or 'pil' to resize")
        _check_augment(self.augment, self.decode, self.size)


class _PackedBase:
    """Opening, per-process handles and sample building, shared by both datasets."""

    fields: tuple[str, ...] | None = None  # the field names samples carry
    _held: HeldFields | None = None  # those fields in memory

    def __init__(self, path: str | Path, *, sample: SampleSettings, chunk_size: int,
                 cache_bytes: int = 0, remote: RemoteSource | None = None,
                 on_error: OnError | str = "raise") -> None:
        """`chunk_size`: the unit of reads and of the chunk cache; `cache_bytes`: that
        cache's budget per process (0: none); `remote`: a URL's local mirror, whose folder
        is then the one opened; `on_error`: raise or skip a damaged sample (OnError)."""
        self._skips = Skips(on_error)
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1, not {chunk_size}")
        self.remote = remote  # a URL's local mirror, or None
        self.path = remote.folder if remote is not None else Path(path).resolve()
        self.index, _ = open_dataset(self.path)  # refuses a folder without index.json
        self._key = local_version(self.path)
        formats.load(self.index.format)  # a missing library fails here, not in a worker
        self.decode: Mode = sample.decode
        self.size = sample.size
        self.augment = sample.augment
        self.transform = sample.transform
        self.with_keys = sample.with_keys
        self.chunk_size = chunk_size
        self.cache_bytes = cache_bytes
        pixels = self.index.encode.get("mode") == "pixels"
        self.pixels_shape = self.index.image_size if pixels else None
        self._handles: Handles | None = None

    @property
    def class_names(self) -> tuple[str, ...]:
        return self.index.class_names

    def handles(self) -> Handles:
        """This process's handles, opened on first use (again after a fork)."""
        handles = self._handles
        if handles is None or not handles.current(self._key):
            handles = self._handles = Handles(self._key, self.chunk_size, self.cache_bytes,
                                              self.remote)
        return handles

    def make_sample(self, table: SampleTable, i: int, data: bytes, padded: bool,
                crop: tuple[int, int], fields: bool = True) -> Sample:
        """`crop`: (seed, epoch) that choose the augment's box, with the sample index;
        `fields=False`: the plain tuple, the caller adding a batch's fields at once."""
        image: Any
        if self.augment is not None:
            image = decode_augmented(data, self.augment, (*crop, i), self.pixels_shape)
            if self.decode == "pil":
                image = Image.fromarray(as_numpy(image), "RGB")
        elif self.decode == "raw" and self.pixels_shape is not None:
            image = np.frombuffer(bytearray(data), np.uint8)  # a writable copy of the row
        else:
            image = decode_record(data, self.decode, self.size, pixels_shape=self.pixels_shape)
        return self._finish(table, i, image, padded, fields=fields)

    @property
    def num_skipped(self) -> int:
        """Samples skipped under on_error="skip" so far, by every process of this dataset."""
        return self._skips.total

    def sample_or_pad(self, table: SampleTable, i: int, data: bytes, padded: bool,
                      crop: tuple[int, int], read: Callable[[int], bytes],
                      fields: bool = True) -> tuple[int, Sample]:
        """(i, make_sample(...)); under on_error="skip", for a damaged (a DamagedRecord) or
        undecodable sample, (j, a flagged pad): sample j, the next one after i that reads
        (`read`: a TolerantReader's), with label PAD_LABEL, as padding is made."""
        error: Exception
        if isinstance(data, DamagedRecord):
            error = data.error
        else:
            try:
                return i, self.make_sample(table, i, data, padded, crop, fields)
            except DecodeError as exc:
                if not self._skips.skipping:
                    raise
                error = exc
        self._skips.record(i, table.key(i), self._file_of(i), error)
        for step in range(1, min(len(table), MAX_PAD_TRIES)):
            j = (i + step) % len(table)
            found = read(j)
            if not isinstance(found, DamagedRecord):
                try:
                    return j, self.make_sample(table, j, found, True, crop, fields)
                except DecodeError:
                    continue
        raise DecodeError(f"{self.path}: no readable sample after skipped sample {i} to pad "
                          f"its place with ({error}); restore or reconvert the dataset")

    def _file_of(self, i: int) -> str:
        """The data file that holds sample i, for a message."""
        shards = self.index.shards
        return str(self.path / shards[self.index.shard_of(i)].name) if shards else str(self.path)

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
        return with_fields(sample, self.field_source(self.handles().reader), i, self.fields)

    def _add_fields(self, samples: Sequence[Sample], positions: Sequence[int]) -> Sequence[Sample]:
        """A batch's plain samples as dicts with their fields, taken in one call (a
        `Batch` of columns that `readers.collate` batches at once)."""
        if self.fields is None:
            return samples
        return with_fields_many(samples, self.field_source(self.handles().reader), positions,
                                self.fields)

    def _choose_fields(self, fields: FieldNames, in_memory: bool) -> None:
        """The fields samples carry, read once into memory with
        `in_memory` (`HeldFields`)."""
        self.fields = None if fields is None else chosen_fields(self.index, fields, self.path)
        if not in_memory:
            return
        if self.fields is None:
            raise ValueError("fields_in_memory=True holds the fields that fields= names: "
                             "pass fields=(...) or fields='all', or leave it False")
        self._held = HeldFields.read(self.handles().reader, self.index.fields, self.fields,
                                     self.index.num_samples, tolerate=self._skips.skipping)

    def tolerant(self, reader: RecordReader) -> TolerantReader:
        """`reader` under on_error="skip": a sample whose image or fields are damaged reads
        as a DamagedRecord (fields held in memory were checked when they were read)."""
        if self._held is not None:
            return TolerantReader(reader, damaged=self._held.damaged)
        return TolerantReader(reader, fields=bool(self.fields))

    def field_source(self, reader: RecordReader) -> FieldSource:
        """Where a batch's fields come from: the held columns, else this process's reader."""
        return self._held if self._held is not None else ReadFields(reader, self.index.fields)

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


def remote_source(path: str | Path, options: RemoteOptions | None) -> RemoteSource | None:
    """A RemoteSource when `path` is a URL; None (and no remote options given) for a folder."""
    if isinstance(path, str) and is_url(path):
        given = RemoteOptions() if options is None else options
        return open_remote(path, dict(given.storage_options), given.cache_dir,
                           given.max_cache_bytes, given.prefetch_shards)
    if options is not None:
        raise ValueError(f"{path}: remote options (cache_dir, max_cache_bytes, "
                         "storage_options) apply to a URL (s3://..., file://...), not to a "
                         "local folder: drop remote=")
    return None


def _check_augment(augment: Augment | None, decode: Mode, size: tuple[int, int] | None) -> None:
    if augment is None:
        return
    if decode == "raw":
        raise ValueError("augment crops decoded pixels, but decode='raw' returns the stored "
                         "bytes: pass decode='rgb8' (or 'pil'), or augment=None")
    if size is not None:
        raise ValueError(f"augment sets the output size ({augment.output_size}); "
                         f"pass size=None, not {size}")


class Handles:
    """What one dataset reads through in one process: the shared reader plus its own cache."""

    def __init__(self, key: LocalVersion, chunk_size: int, cache_bytes: int,
                 remote: RemoteSource | None = None) -> None:
        self.opened = opened(key, None if remote is None else _mirrored(remote))
        self.table = self.opened.table
        self.reader = self.opened.shared()
        if self.reader.memory_mapped:
            cache_bytes = 0  # the page cache already holds it
        self.cached = CachedReader(self.reader, len(self.table), chunk_size, cache_bytes)
        # npy rows: a batch in one gather
        self.gather = cast(Gatherer, self.reader) if self.reader.gathers_rows else None

    def current(self, key: LocalVersion) -> bool:
        """Whether these handles are still this process's for `key` (not after a fork, not
        after `release`)."""
        return self.opened.key == key and is_current(self.opened)


def _mirrored(remote: RemoteSource) -> Wrap:
    """A URL's mirror around the format's reader: shards are fetched on demand."""
    def wrap(open_reader: Callable[[], RecordReader], index: Index) -> RecordReader:
        return remote_reader(open_reader, remote, index)
    return wrap
