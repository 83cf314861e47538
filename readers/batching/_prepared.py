"""A batch's small values made ready for the crossing while the worker builds the batch.

A DataLoader worker pickles each batch in its queue's feeder thread, which competes for
the GIL with the worker's main thread building the next batch: the same torch and
Python steps cost more CPU there than in the main thread. So `collate`
works out the pickled form of a batch's values (a text column packed; where a tensor's
bytes lie) when it builds the batch, and the pickle takes it after a check that the
value is still the one prepared: the same object, a list with the same items, a tensor
over the same memory, shape and strides. A value replaced or resized after collate (by a
wrapping collate_fn) is packed afresh; one changed in place is read where it lies: the
pickle always holds what the batch holds when it leaves.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import torch

from readers.batching._columns import PackedColumn, packed, tensor_parts

__all__ = ["Prepared", "by_value"]


def by_value(value: Any) -> bool:
    """A plain CPU tensor outside shared memory: it travels in the pickle as bytes."""
    return isinstance(value, torch.Tensor) and not value.untyped_storage().is_shared() \
        and value.device.type == "cpu" and not value.requires_grad


class Prepared:
    """One value of a batch and its pickled form, worked out in the worker's main thread."""

    __slots__ = ("column", "dtype", "items", "layout", "nbytes", "value")

    def __init__(self, value: Any) -> None:
        self.value = value
        column = packed(value)  # a PackedColumn for a list of str or of bytes alone
        self.column = column if isinstance(column, PackedColumn) else None
        # its items, to see that none was replaced (str and bytes compare safely)
        self.items = value[:] if self.column is not None else None
        self.layout: Layout | None = None
        if by_value(value) and value.is_contiguous():
            self.layout, self.nbytes = _layout(value), value.numel() * value.element_size()
            self.dtype = _numpy_dtype(value.dtype)

    def packed(self, value: Any) -> Any:
        """`packed(value)`, prepared when it is unchanged."""
        if value is self.value and self.items is not None and value == self.items:
            return self.column
        return packed(value)

    def tensor(self, value: Any) -> tuple[bytes, str, tuple[int, ...]] | None:
        """`tensor_parts(value)` where it travels by value (else None): its memory read
        as it is, while the tensor still lies where and as it did when prepared."""
        if self.layout is not None and value is self.value and not value.requires_grad \
                and _layout(value) == self.layout:
            data = ctypes.string_at(self.layout[0], self.nbytes) if self.nbytes else b""
            return data, self.dtype, tuple(self.layout[1])
        return tensor_parts(value) if by_value(value) else None


Layout = tuple[int, torch.Size, tuple[int, ...], torch.dtype]


def _layout(tensor: torch.Tensor) -> Layout:
    """Where and how a tensor lies: its memory, shape, strides and dtype. (Its numpy view,
    the other way to its bytes, would make its storage unresizable for good.)"""
    return tensor.data_ptr(), tensor.shape, tensor.stride(), tensor.dtype


@functools.cache
def _numpy_dtype(dtype: torch.dtype) -> str:
    """numpy's name of a torch dtype, as tensor_parts writes it."""
    return torch.empty(0, dtype=dtype).numpy().dtype.str
