"""What both datasets share: opening a folder, per-process handles, building samples."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, get_args

import numpy as np
from PIL import Image

from packer import formats
from packer.core.index import SampleTable, open_dataset
from readers._handles import Handles, identity, release
from readers.augment import Augment
from readers.decoding.crop_decode import as_numpy, decode_augmented
from readers.decoding.decode import Mode
from readers.decoding.decode import decode as decode_record
from readers.fields import with_fields, with_fields_many
from readers.remote import RemoteSource
from readers.sampling.sampler import PAD_LABEL

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
        return with_fields(sample, self.handles().reader, i, self.fields, self.index.fields)

    def _add_fields(self, samples: list[Sample], positions: Sequence[int]) -> Sequence[Sample]:
        """A batch's plain samples as dicts with their fields, read in one call (a
        FieldBatch: columns that readers.collate batches at once)."""
        if self.fields is None:
            return samples
        return with_fields_many(samples, self.handles().reader, positions, self.fields,
                                self.index.fields)

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
