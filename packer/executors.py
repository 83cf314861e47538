"""Run encode work in parallel and hand results back in order.

A local process pool is the default. Tasks are submitted through a bounded window,
so memory stays flat however large the source is, and results come back in
submission order, so the output is identical for any number of workers. Workers
ignore SIGINT: Ctrl-C reaches the main process, which terminates the pool at once.
"""

from __future__ import annotations

import collections
import multiprocessing
import signal
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

Task = TypeVar("Task")
Result = TypeVar("Result")


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def map_ordered(func: Callable[[Task], Result], tasks: Iterable[Task], workers: int,
                window: int | None = None) -> Iterator[Result]:
    """Yield func(task) for each task, in order, using `workers` processes (0: inline)."""
    if workers <= 0:
        yield from map(func, tasks)
        return
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["packer.encode"])
    pool = context.Pool(workers, initializer=_ignore_sigint)
    pending: collections.deque[multiprocessing.pool.AsyncResult[Result]] = collections.deque()
    limit = window or 4 * workers
    try:
        for task in tasks:
            pending.append(pool.apply_async(func, (task,)))
            if len(pending) >= limit:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()
        pool.close()
    finally:
        pool.terminate()
        pool.join()
