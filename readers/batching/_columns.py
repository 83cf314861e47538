"""A batch's columns of text and bytes as one buffer each, for the crossing from a worker.

A list (or tuple) of B strings (keys, captions) pickles as B objects; here it travels as one UTF-8
buffer and the (B + 1) character offsets of its values, and a list of B bytes values as
one buffer and its byte offsets. The receiving process decodes the text once and slices
it: `unpacked(packed(values)) == values` for every list of str (lone surrogates, which
fields decoded with "surrogatepass" may hold, included) or of bytes. Anything else
(a list with None, numbers, dicts) is left as it is.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import numpy as np
import numpy.typing as npt
import torch


@dataclass(frozen=True)
class PackedColumn:
    """One buffer and the offsets of its values (characters for text, bytes for bytes)."""

    buffer: bytes
    offsets: npt.NDArray[np.int64]
    text: bool
    as_tuple: bool  # the values were a tuple (default_collate's batch of keys), not a list

    def __reduce__(self) -> tuple[Any, ...]:
        """Plain values in the pickle: the offsets as bytes (a numpy array pickles
        through numpy's reconstruction, which costs more for a short array)."""
        return _column, (self.buffer, self.offsets.tobytes(), self.text, self.as_tuple)

    def values(self) -> list[Any] | tuple[Any, ...]:
        ends = self.offsets.tolist()
        whole: str | bytes = self.buffer.decode("utf-8", "surrogatepass") if self.text \
            else self.buffer
        values = [whole[ends[k]:ends[k + 1]] for k in range(len(ends) - 1)]
        return tuple(values) if self.as_tuple else values


def _column(buffer: bytes, offsets: bytes, text: bool, as_tuple: bool) -> PackedColumn:
    return PackedColumn(buffer, np.frombuffer(offsets, np.int64), text, as_tuple)


def _offsets(values: Sequence[Any]) -> npt.NDArray[np.int64]:
    return np.frombuffer(array("q", accumulate(map(len, values), initial=0)), np.int64)


def tensor_parts(tensor: torch.Tensor) -> tuple[bytes, str, tuple[int, ...]]:
    """A small CPU tensor as its bytes, dtype and shape: three plain objects in a pickle,
    where its numpy array would cost more to pickle and unpickle."""
    numbers = tensor.numpy()
    return numbers.tobytes(), numbers.dtype.str, numbers.shape


def tensor_of(data: bytes, dtype: str, shape: tuple[int, ...]) -> torch.Tensor:
    """The tensor `tensor_parts` gave the parts of (a writable copy of its bytes)."""
    return torch.from_numpy(np.frombuffer(bytearray(data), np.dtype(dtype)).reshape(shape))


def packed(value: Any) -> Any:
    """A list or tuple of str (or of bytes) as a PackedColumn; any other value as it is."""
    if type(value) not in (list, tuple) or not value:
        return value
    kind = type(value[0])
    if kind not in (str, bytes) or not all(type(item) is kind for item in value):
        return value
    joined = "".join(value).encode("utf-8", "surrogatepass") if kind is str \
        else b"".join(value)
    return PackedColumn(joined, _offsets(value), kind is str, type(value) is tuple)


def unpacked(value: Any) -> Any:
    """The list a PackedColumn stands for; any other value as it is."""
    return value.values() if isinstance(value, PackedColumn) else value
