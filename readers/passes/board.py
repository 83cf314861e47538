"""WorkerBoard: where the DataLoader workers of one loader post the counts of the loader
state each loaded, so that a state saved on another world size resumes as one stretch of
the epoch (`from_worker_states` reads it)."""

from __future__ import annotations

import time

import torch


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
