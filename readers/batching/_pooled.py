"""Batches that leave a DataLoader worker from a pool slot (`SlotPool`):
a list (PooledBatch) or a dict of fields (PooledDict) that unpickles in the main
process as the plain list or dict, its slot freed once nothing views it there."""

from __future__ import annotations

import copy
from typing import Any

import torch

from readers.batching._columns import tensor_of, unpacked
from readers.batching._prepared import Prepared
from readers.batching._shm_arrivals import Rebuild, arrived
from readers.batching._shm_pool import SlotImages, SlotPool

__all__ = ["PooledBatch", "PooledDict"]

_NOTHING = Prepared(None)  # nothing prepared: each value packed as it is


class PooledBatch(list[Any]):
    """[head, labels, ...] whose head (images, or a raw batch: `rebuild`) sits in a pool
    slot; unpickles as a plain list, lists of str or bytes packed as one buffer each
    (`PackedColumn`).

    It stays a list in the worker, so code that wraps `collate` can still index it.
    `rebuild` (callable, args): the head is `callable(images, *args)` (a RawBatch over
    its buffer), else the images tensor itself.
    """

    def __init__(self, items: list[Any], images: torch.Tensor, pool: SlotPool,
                 slot: int, rebuild: Rebuild | None = None) -> None:
        super().__init__(items)
        self.images, self.pool, self.slot, self.rebuild = images, pool, slot, rebuild
        self.head = items[0] if items else None
        self.prepared = [Prepared(value) for value in items[1:]]  # packed ahead of the pickle
        pool.sending(slot)

    def __copy__(self) -> list[Any]:
        """A plain list: only the pickle that leaves for the main process is tracked."""
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return copy.deepcopy(list(self), memo)

    def __reduce__(self) -> Any:
        items = list(self)
        if not items or items[0] is not self.head:  # changed in the worker: untracked
            return list, (items,)
        tail = [self._ready(k).packed(value) for k, value in enumerate(items[1:])]
        # labels: 8 bytes a sample, in the pickle rather than shared memory
        labels = self._ready(0).tensor(items[1]) if tail else None
        if labels is not None:
            tail[0] = labels
        state = self.pool.state_handle()
        images = self.pool.outgoing(self.slot, self.images)
        return arrived, (images, tail, labels is not None, self.pool.token, state, self.slot,
                         self.rebuild)

    def _ready(self, k: int) -> Prepared:
        """The prepared form of value k + 1, or an empty one for a value added since."""
        return self.prepared[k] if k < len(self.prepared) else _NOTHING


class PooledDict(dict[str, Any]):
    """{"image": images, ...} (`collate_dicts`) whose images sit in the
    slot of `batch`, a PooledBatch; unpickles as a plain dict, the slot freed as a
    PooledBatch's is. Other tensors travel by value in the pickle: a batch's labels and
    fields are small, and each shared tensor would cost a file descriptor; a column of
    str or bytes values travels as one buffer (`PackedColumn`)."""

    def __init__(self, items: dict[str, Any], batch: PooledBatch) -> None:
        super().__init__(items)
        self.batch = batch
        known = {id(ready.value): ready for ready in batch.prepared}
        self.prepared = {name: known.get(id(value)) or Prepared(value)
                         for name, value in list(items.items())[1:]}

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return copy.deepcopy(dict(self), memo)

    def __reduce__(self) -> Any:
        names = list(self)
        if not names or names[0] != "image" or self["image"] is not self.batch.head:
            return dict, (dict(self),)
        rest: dict[str, Any] = {}
        moved = []
        for name, value in list(self.items())[1:]:
            ready = self.prepared.get(name, _NOTHING)
            parts = ready.tensor(value)
            if parts is not None:
                moved.append(name)
            rest[name] = parts if parts is not None else ready.packed(value)
        self.batch[1:] = [rest, moved]
        _, args = self.batch.__reduce__()
        return _arrived_dict, args


def _arrived_dict(images: SlotImages, tail: list[Any], *args: Any) -> dict[str, Any]:
    """In the main process: the plain dict batch (see `arrived`)."""
    head, rest, moved = arrived(images, tail, *args)
    rest = {name: unpacked(value) for name, value in rest.items()}
    for name in moved:
        rest[name] = tensor_of(*rest[name])
    return {"image": head, **rest}
