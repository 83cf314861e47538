"""The private torch names the batch pool (readers.batching._shm_pool) rests on, and the
one place they are reached.

Each is named once, in PRIVATE_NAMES, and read from there by `_private` when it is
called, never bound at import: where a torch release lacks one, `all_present()` is False,
the pool is off and batches travel as torch moves any tensor (slower, never wrong), and
`shared_buffer` allocates through public `share_memory_()` without `_new_shared`.
tests/reading/test_private_fallbacks.py takes each name away from here in turn.
"""

from __future__ import annotations

from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch

PRIVATE_NAMES: tuple[tuple[object, str], ...] = (
    (torch._C, "_storage_Use_Count"), (torch.UntypedStorage, "_new_shared"),
    (torch.UntypedStorage, "_share_fd_cpu_"), (torch.UntypedStorage, "_new_shared_fd_cpu"),
    (torch.UntypedStorage, "_cdata"), (ForkingPickler, "_extra_reducers"))


def all_present() -> bool:
    """Whether this torch has every private name the pool uses."""
    return all(getattr(owner, name, None) is not None for owner, name in PRIVATE_NAMES)


def has(wanted: str) -> bool:
    """Whether this torch has the private name `wanted`."""
    return any(getattr(owner, name, None) is not None
               for owner, name in PRIVATE_NAMES if name == wanted)


def _private(wanted: str) -> Any:
    """The private name `wanted` of PRIVATE_NAMES, as its owner has it now."""
    for owner, name in PRIVATE_NAMES:
        if name == wanted:
            return getattr(owner, name)
    raise AttributeError(f"{wanted} is not one of the batch pool's private torch names")


def storage_use_count(tensor: torch.Tensor) -> int:
    """How many tensors (views included) hold this tensor's storage, in this process."""
    storage = tensor.untyped_storage()
    handle = _private("_cdata").__get__(storage, type(storage))  # the storage's C pointer
    return int(_private("_storage_Use_Count")(handle))


def new_shared_storage(nbytes: int) -> torch.UntypedStorage:
    """An uninitialized storage of `nbytes` in shared memory, as default_collate makes."""
    storage: torch.UntypedStorage = _private("_new_shared")(nbytes)
    return storage


def share_fd(storage: torch.UntypedStorage) -> int:
    """The file descriptor of a shared `storage`, as torch hands it to another process."""
    fd, _ = _private("_share_fd_cpu_")(storage)
    return int(fd)


def storage_from_fd(fd: int, nbytes: int) -> torch.UntypedStorage:
    """The storage of `nbytes` mapped from the shared memory file descriptor `fd`."""
    storage: torch.UntypedStorage = _private("_new_shared_fd_cpu")(fd, nbytes)
    return storage


def tensor_reducer(kind: type) -> Any:
    """The reducer torch registered with multiprocessing for `kind`, or None."""
    return _private("_extra_reducers").get(kind)
