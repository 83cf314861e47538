"""Run encode work in parallel and hand results back in order.

The work runs on threads. The per-image work is file reads, JPEG decoding, resizing
and hashing, all of which release the GIL, so N threads keep N cores busy; and a
result (an image's bytes, or a row of pixels) reaches the writer without being
pickled, piped and unpickled (three copies that can cost more than a scaled-down JPEG
decode), with no pool start-up. `--executor ray` sends the same batches to Ray tasks
on a cluster instead (Ray is imported only then).

Tasks are submitted through a bounded window, so memory stays flat however large the
source is, and results come back in submission order, so the output is identical for
any number of workers. On Ctrl-C (or any error) queued tasks are cancelled and the
running ones finish their batch, so the process exits within a batch's time; process
workers ignore SIGINT and are terminated.
"""

from __future__ import annotations

import collections
import os
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Literal, TypeVar

from packer.core.record import Record, Reject, SourceItem
from packer.encode import EncodeOptions, encode_batch

Task = TypeVar("Task")
Result = TypeVar("Result")
Executor = Literal["local", "ray"]
EXECUTORS: tuple[Executor, ...] = ("local", "ray")


def check_executor(executor: Executor, address: str | None = None) -> None:
    """Fail before any work when the executor cannot run (Ray missing, cluster silent)."""
    if executor == "ray":
        from packer.conversion.ray import preflight

        preflight(address)


def encode_ordered(batches: Iterable[list[SourceItem]], options: EncodeOptions,
                   workers: int | None, executor: Executor = "local",
                   address: str | None = None) -> Iterator[list[Record | Reject]]:
    """Encode batches in submission order: on local threads, or as Ray tasks.

    `workers`: local threads (default: one per CPU; 0: inline), or with Ray the cluster
    CPUs used (default: all); `address` names the Ray cluster (None: a local instance).
    """
    if executor == "ray":
        from packer.conversion.ray import encode_batch_at, map_ordered_ray

        func = partial(encode_batch_at, options=options, cwd=os.getcwd())
        return map_ordered_ray(func, batches, workers, address)
    func = partial(encode_batch, options=options)
    threads = os.cpu_count() or 1 if workers is None else workers
    if workers is None and not options.transforms and options.check == "none":
        return map_ordered_adaptive(func, batches, threads, FAST_ITEM_S * batch_size(options))
    return map_ordered(func, batches, threads)


FAST_ITEM_S = 50e-6  # above what reading one input from the page cache takes


def batch_size(options: EncodeOptions) -> int:
    """Inputs per task: many for pass-through, where an image costs microseconds and
    per-task overhead would dominate; few when every image is decoded and resized, so
    the window of finished-but-unwritten pixels stays small."""
    if options.transforms or options.pixels:
        return 8
    return 64 if options.check == "none" else 32


def map_ordered_adaptive(func: Callable[[Task], Result], tasks: Iterable[Task],
                         workers: int, fast_s: float,
                         clock: Callable[[], float] = time.perf_counter) -> Iterator[Result]:
    """Run tasks inline while they take under `fast_s`; once 2 of the last 4 took longer,
    the rest on `workers` threads.

    `clock` (seconds) times each inline task: a test passes one that its tasks advance, so
    that which tasks count as slow does not depend on how busy the machine is.

    Why: pass-through with `--check none` only reads each file and hashes it. From the
    page cache that costs less than handing it to a thread: the threads contend with
    the writer for the GIL, so inline is faster. From a cold disk or a network file
    system each read waits, and only threads overlap the waits: such a source switches
    within a few tasks, and for good, while one preempted task on a busy machine does not.
    """
    pending = iter(tasks)
    recent: collections.deque[bool] = collections.deque(maxlen=SLOW_WINDOW)
    for task in pending:
        start = clock()
        result = func(task)
        recent.append(clock() - start > fast_s)
        yield result
        if sum(recent) >= SLOW_TO_SWITCH:
            yield from map_ordered(func, pending, workers)
            return


SLOW_WINDOW, SLOW_TO_SWITCH = 4, 2


def map_ordered(func: Callable[[Task], Result], tasks: Iterable[Task], workers: int,
                window: int | None = None) -> Iterator[Result]:
    """Yield func(task) for each task, in order, using `workers` threads.

    `workers=0` runs inline; `window` bounds the tasks in flight (default 4 per worker).
    """
    if workers <= 0:
        yield from map(func, tasks)
        return
    limit = window or 4 * workers
    pool = ThreadPoolExecutor(workers, thread_name_prefix="packer-encode")
    pending: collections.deque[Future[Result]] = collections.deque()
    try:
        for task in tasks:
            pending.append(pool.submit(func, task))
            if len(pending) >= limit:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
