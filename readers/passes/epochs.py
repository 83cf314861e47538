"""What the workers of one dataset share: the epoch of each pass, agreed by all the workers
that serve it, and the board where they post the counts of a loaded state.

Training frameworks do not all call `set_epoch`: Lightning calls it on a DataLoader's
sampler only, never on an IterableDataset, so a dataset that waited for it would repeat
epoch 0's order forever. Here a pass that nobody named takes the epoch after the previous
pass's; `set_epoch(e)` names the next pass's epoch (a loop that calls it every epoch gets
exactly what it asks for, also when it repeats an epoch on purpose).

The workers of one DataLoader pass must agree on its epoch without talking to each other
or to the main process, whatever order they start in and even when one of them is
stopped before it starts (torch terminates workers that are slow to start when a loop
breaks early). They share one int64 in shared memory, created with the dataset (forked
workers inherit the mapping, spawned ones receive it through torch's reductions), which
holds the token of the latest pass and its epoch in one word, so a reader never sees half
an update. A pass's token is the same in all of its workers and new for every pass:

    DataLoader workers   torch's base_seed (fresh per iterator: info.seed - info.id),
                         mixed with this copy's pass count (persistent workers keep one)
    the main process     (num_workers=0) a fresh random token for every pass

The dataset's `WorkerBoard`, created alongside, is where the workers of a loader that
hands each its own part of a loader state post their counts, so that a state saved on
another world size resumes as one stretch of the epoch.

A worker whose token is in the cell joins that pass; any other token starts the next
epoch. Two workers starting the same new pass at once compute the same value, so the
race is harmless. (A loop that reseeds torch's generator to the same value before every
epoch makes every pass's token equal and so every epoch equal, as it would for a
RandomSampler.)
"""

from __future__ import annotations

import secrets
import time

import torch
from torch.utils.data import get_worker_info

from readers.plan.chunks import check_epoch

_EPOCH_BITS = 32
_EPOCH_MASK = (1 << _EPOCH_BITS) - 1
_TOKEN_MASK = (1 << 31) - 1
_MIX = 0x9E3779B97F4A7C15  # an odd constant (golden ratio): spreads the pass count


def pack(token: int, epoch: int) -> int:
    return (token << _EPOCH_BITS) | epoch


def unpack(word: int) -> tuple[int, int]:
    return word >> _EPOCH_BITS, word & _EPOCH_MASK


class PassEpochs:
    """The shared cell of one dataset; see the module docstring."""

    def __init__(self) -> None:
        self._cell = torch.zeros(1, dtype=torch.int64)
        self._cell.share_memory_()  # type: ignore[no-untyped-call]
        self.board = WorkerBoard()  # the counts of a loaded state, worker by worker
        self._passes = 0  # passes started by this copy of the dataset
        self.token = 0  # the token of the pass this process started last (0: none)

    def set_next(self, epoch: int) -> None:
        """Name the epoch of the next pass (token 0: no pass of it has started yet)."""
        epoch = check_epoch(epoch)
        if epoch > _EPOCH_MASK:
            raise ValueError(f"epoch must be below 2**32, not {epoch}")
        self._cell[0] = pack(0, epoch)

    @property
    def next(self) -> int:
        """The epoch a pass starting now would get (in the main process, between passes)."""
        token, epoch = unpack(int(self._cell[0]))
        return epoch if token == 0 else epoch + 1

    def start_pass(self) -> int:
        """The epoch of the pass this process is starting."""
        token = self.token = self._token()
        current, epoch = unpack(int(self._cell[0]))
        if current == token:
            return epoch  # another worker of this pass got here first
        if current != 0:
            epoch += 1
        self._cell[0] = pack(token, epoch)
        return epoch

    def _token(self) -> int:
        self._passes += 1
        info = get_worker_info()
        if info is None:
            current, _ = unpack(int(self._cell[0]))
            token = current
            while token in (0, current):
                token = secrets.randbits(31)
            return token
        base_seed = info.seed - info.id
        mixed = (base_seed ^ (self._passes * _MIX)) * _MIX
        return ((mixed ^ (mixed >> 29)) & _TOKEN_MASK) or 1


class WorkerBoard:
    """Where the workers of one loader post the counts of the loader state they each load.

    torchdata's StatefulDataLoader hands DataLoader worker k the state worker k saved (it
    keeps `num_workers`); on another world size one count alone does not place the rest of
    the epoch. Each worker posts its count in a shared int64 tensor, created with the
    dataset (forked workers inherit it, spawned ones receive it through torch's
    reductions), and reads all of them when its pass yields its first sample. The loader
    loads every worker's state before it asks any worker for a batch, so by then all are
    posted; a later load overwrites them all again.
    """

    SLOTS = 256  # DataLoader workers a board holds
    WAIT_S = 120.0  # how long a worker waits for the others' counts

    def __init__(self) -> None:
        self._counts = torch.full((self.SLOTS,), -1, dtype=torch.int64)
        self._counts.share_memory_()  # type: ignore[no-untyped-call]

    def post(self, worker: int, num_workers: int, seen: int) -> None:
        """Worker `worker` of `num_workers` loaded a state with `seen` samples."""
        if num_workers > self.SLOTS:
            raise ValueError(f"a loader state of {num_workers} workers resumes on another world "
                             f"size with at most {self.SLOTS}: load the whole loader state into "
                             "the reader before the loader starts (reader.load_state_dict)")
        if seen < 0:
            raise ValueError(f"not a resume state: samples_seen {seen}")
        self._counts[worker] = seen

    def gather(self, num_workers: int) -> list[int]:
        """The counts of workers 0..num_workers-1, once all are posted."""
        deadline = time.monotonic() + self.WAIT_S
        while bool((self._counts[:num_workers] < 0).any()):
            if time.monotonic() > deadline:
                missing = (self._counts[:num_workers] < 0).nonzero().flatten().tolist()
                raise RuntimeError(
                    f"DataLoader workers {missing} did not load their part of the loader state "
                    f"within {self.WAIT_S:.0f} s: a state saved on another world size needs "
                    "every worker's (StatefulDataLoader.load_state_dict), or the whole state "
                    "loaded into the reader before the loader starts")
            time.sleep(0.01)
        return [int(c) for c in self._counts[:num_workers].tolist()]
