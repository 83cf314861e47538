"""The contracts every format implements: a Writer (pack time) and a RecordReader.

A conversion is a sequence of *parts*. A part is the unit that resume keeps: when a
writer ends a part, everything in it is durable on disk. wds ends a part at each
shard; npy every PART_SAMPLES samples; lmdb and hdf5 are one file each, so their only
part ends with the file and an interrupted run redoes them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np

from packer.core.checks import digest_of
from packer.core.fields import (
    FieldSpec,
    decode_numbered,
    numbered,
    records_match,
    select,
)
from packer.core.index import Index, SampleTable, ShardInfo
from packer.core.record import Record
from packer.errors import CorruptDatasetError

MIN_SHARDS = 8  # shards a conversion makes by default, inputs allowing: a loader's workers


@dataclass(frozen=True)
class ShardOptions:
    """When a writer ends a shard: at `max_bytes` or `max_samples`, whichever comes first.

    `min_shards` (a conversion's default, `spread`): also every num_inputs // min_shards
    inputs (at least 1), so that enough inputs make at least min_shards shards however
    small: stock webdataset gives each DataLoader worker whole shards, and refuses a worker
    that gets none. An input's shard is still a function of the inputs alone (resume).
    """

    max_bytes: int = 256_000_000  # the CLI default, 256MB
    max_samples: int | None = None
    min_shards: int | None = None

    def __post_init__(self) -> None:
        if self.max_bytes < 1:
            raise ValueError(f"shard size must be positive, not {self.max_bytes}")
        if self.max_samples is not None and self.max_samples < 1:
            raise ValueError(f"shard samples must be positive, not {self.max_samples}")
        if self.min_shards is not None and self.min_shards < 1:
            raise ValueError(f"minimum shards must be positive, not {self.min_shards}")

    @classmethod
    def spread(cls) -> ShardOptions:
        """The default: 256MB shards, and at least MIN_SHARDS of them."""
        return cls(min_shards=MIN_SHARDS)

    def for_inputs(self, num_inputs: int) -> ShardOptions:
        """The limits a conversion of `num_inputs` inputs writes with: min_shards made a
        max_samples of num_inputs // min_shards (at least 1), or the given one if smaller."""
        if self.min_shards is None:
            return self
        spread = max(1, num_inputs // self.min_shards)
        return ShardOptions(self.max_bytes, spread if self.max_samples is None
                            else min(self.max_samples, spread))

    def to_json(self) -> dict[str, int | None]:
        """The options as a job records them; min_shards only when set, so that a job of
        given limits records those limits alone (and its fingerprint depends on them only)."""
        limits = {"max_bytes": self.max_bytes, "max_samples": self.max_samples}
        return limits if self.min_shards is None else {**limits, "min_shards": self.min_shards}


@dataclass(frozen=True)
class WriterPlan:
    """Everything a writer needs to know before the first record."""

    folder: Path
    capacity: int
    image_size: tuple[int, int] | None  # (H, W) of stored pixels (npy), else None
    shards: ShardOptions
    done_samples: int = 0
    done_shards: tuple[ShardInfo, ...] = ()
    name: str | None = None  # wds: the name shards carry (`stem_of`); None: the folder's
    fields: tuple[FieldSpec, ...] = ()  # the dataset's fields; every record has a value list


@dataclass(frozen=True)
class Location:
    """Where a record's bytes landed inside its shard (-1 offset where not applicable)."""

    offset: int
    size: int
    fields_offset: int = -1  # where the format put the sample's field bytes, if it must know
    fields_size: int = 0


class Writer(Protocol):
    """Writes records in order; one writer per conversion, in the main process."""

    resumable: bool

    def part_full(self, next_size: int) -> bool:
        """Whether the current part should end before a record of `next_size` bytes."""

    def add(self, record: Record) -> Location:
        """Append one record to the current part."""

    def end_part(self) -> None:
        """Make everything added so far durable."""

    def finish(self, table: SampleTable) -> tuple[ShardInfo, ...]:
        """End the last part, move files to their final names and describe every shard.

        `table` holds every sample written, resumed parts included.
        """

    def abort(self) -> None:
        """Release handles after a failure, keeping what is durable for resume."""


class RecordReader(Protocol):
    """Reads the stored bytes of samples; opened lazily in the process that reads.

    What a reader can do beyond reading is declared here, not probed for: `memory_mapped`
    (the page cache is its cache: readers skip their own), `gathers_rows` (a
    `gather(indices, out)` that copies fixed-size rows into a batch buffer: npy),
    `prefetch`/`stop_prefetch` (a URL's reader fetches coming shards in the background).
    """

    memory_mapped: bool
    gathers_rows: bool

    def read(self, i: int) -> bytes:
        """The stored bytes of sample i."""

    def read_many(self, indices: Sequence[int]) -> list[bytes]:
        """Several samples, batched where the format allows it."""

    def read_range(self, start: int, stop: int) -> Iterator[bytes]:
        """Samples start..stop-1 in order, with large sequential reads."""

    def fields(self, i: int, names: Sequence[str] | None = None) -> dict[str, object]:
        """Sample i's fields as natural Python values (str, int, float, bytes, parsed JSON),
        None where it has no value; only `names` when given (KeyError for an unknown one).

        Checked against the sample's field digest; {} for a dataset without fields.
        """

    def fields_many(self, indices: Sequence[int], names: Sequence[str] | None = None
                    ) -> list[dict[str, object]]:
        """`fields` of several samples, batched where the format allows it (one lmdb
        transaction, one pass over npy columns); each one checked against its digest."""

    def field_values_many(self, indices: Sequence[int]) -> Sequence[Sequence[bytes | None]]:
        """Each sample's values in byte form (None: no value), every field of the dataset
        in the index's order, each sample checked against its field digest; [] per sample
        for a dataset without fields. The reading side decodes them a column at a time."""

    def prefetch(self, ranges: Sequence[Sequence[int]]) -> None:
        """Show the reader the (start, stop, ...) spans a pass reads next."""

    def stop_prefetch(self) -> None:
        """The pass is over: end any background fetch and wait for it."""

    def close(self) -> None:
        """Release file handles."""


class FormatModule(Protocol):
    """What `packer.formats.load(name)` returns; its capabilities are declared (each
    module sets them), so that no caller branches on the format name."""

    NAME: str
    FILES: tuple[str, ...]
    THREAD_SAFE_READER: bool  # one reader may serve every thread of a process
    OPENS_EVERY_SHARD: bool  # its reader opens every data file at once (remote: pin all)
    STORES_PIXELS: bool  # raw pixels of one size (npy), not encoded images
    GROUPS_INPUTS: bool  # --shard-samples N: a shard per N inputs (wds)
    LABELS_FILE: str | None  # the file that holds the labels apart from the data (npy)

    def open_writer(self, plan: WriterPlan) -> Writer: ...

    def open_reader(self, folder: Path, index: Index, table: SampleTable) -> RecordReader: ...

    def read_labels(self, folder: Path, index: Index) -> np.ndarray: ...

    def side_files(self, index: Index) -> tuple[str, ...]:
        """Files beside the shards a reader needs (npy: labels, field values)."""

    def kept_files(self, index: Index) -> tuple[str, ...]:
        """Files of the dataset for other tools, not our readers (wds: the wids index)."""

    def check_kept_files(self, folder: Path, index: Index) -> tuple[str, ...]:
        """Check the kept files against index.json (CorruptDatasetError naming the file);
        what was checked, for `pack verify`'s report."""


def no_files(index: Index) -> tuple[str, ...]:
    """A format's side_files or kept_files where it has none."""
    return ()


def nothing_to_check(folder: Path, index: Index) -> tuple[str, ...]:
    """A format's check_kept_files where it keeps no other files."""
    return ()


Data = TypeVar("Data", bytes, memoryview)


def checked(table: SampleTable, i: int, data: Data, where: Path, offset: int = -1) -> Data:
    """Return `data` if it matches sample i's digest, else name the file, the sample and,
    where the format knows it (`offset` >= 0), the byte of the file where its data starts."""
    if digest_of(data) != table.digest(i):
        at = f" (bytes {offset}..{offset + len(data) - 1})" if offset >= 0 else ""
        raise CorruptDatasetError(
            f"{where}: sample {i} ({table.key(i)!r}){at} does not match its digest; the file "
            "is damaged, restore it or reconvert the dataset"
        )
    return data


class _ValuesReader(RecordReader, Protocol):
    index: Index
    table: SampleTable

    def _field_values(self, indices: Sequence[int]) -> Sequence[Sequence[bytes | None]]:
        """Each sample's field values as stored, not yet checked."""

    def _field_file(self, i: int) -> Path:
        """The file that holds sample i's field values, for an error."""


class DecodedFields:
    """What the format readers share: `field_values_many` from their `_field_values`,
    every sample's values checked against its digest; `fields` and `fields_many` from
    that, decoded; `read_many` and `read_range` a `read` at a time; and RecordReader's
    defaults: not memory mapped, nothing to prefetch."""

    memory_mapped = False
    gathers_rows = False

    def prefetch(self, ranges: Sequence[Sequence[int]]) -> None:
        """Nothing to fetch ahead: the data is on a local disk."""

    def stop_prefetch(self) -> None:
        """No background fetch to end."""

    def read_many(self: RecordReader, indices: Sequence[int]) -> list[bytes]:
        return [self.read(i) for i in indices]

    def read_range(self: RecordReader, start: int, stop: int) -> Iterator[bytes]:
        for i in range(start, stop):
            yield self.read(i)

    def field_values_many(self: _ValuesReader, indices: Sequence[int]
                          ) -> Sequence[Sequence[bytes | None]]:
        if self.table.fields is None:
            return [[] for _ in indices]
        batch = self._field_values(indices)
        bad = records_match(batch, self.table.fields.digests(indices), digest_of)
        if bad >= 0:
            i = indices[bad]
            raise CorruptDatasetError(
                f"{self._field_file(i)}: the fields of sample {i} ({self.table.key(i)!r}) do "
                "not match their digest; the file is damaged, restore it or reconvert the "
                "dataset")
        return batch

    def fields(self: _ValuesReader, i: int,
               names: Sequence[str] | None = None) -> dict[str, object]:
        return self.fields_many([i], names)[0]

    def fields_many(self: _ValuesReader, indices: Sequence[int],
                    names: Sequence[str] | None = None) -> list[dict[str, object]]:
        if self.table.fields is None:  # no fields: {} a sample, KeyError for any name asked
            if indices:
                select(self.index.fields, names)
            return [{} for _ in indices]
        chosen = numbered(self.index.fields, None if names is None else tuple(names))
        return [decode_numbered(chosen, values) for values in self.field_values_many(indices)]
