"""Ray: run encode batches as Ray tasks on a cluster and hand results back in order.

    driver (pack convert)                      Ray cluster (any node)
      scan -> batches of SourceItem  --task-->   read, check, decode, encode
      writer <- results, in order   <--result--  list[Record | Reject]

Only paths travel to the tasks; every node reads the source itself, so SRC must be
on storage that all nodes mount at the same path (relative paths are resolved
against the driver's working folder). The single writer on the driver consumes
results in submission order, so the output is byte-identical to a local run.

At most `TASKS_PER_CPU` tasks per CPU are in flight (finished-but-unread results
wait in Ray's object store), so memory stays flat however large the source is. On
Ctrl-C (or any error) the tasks in flight are cancelled, and a Ray instance that this
process started is shut down. Ray is imported only here, and only when asked for.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import socket
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from packer.core.record import Record, Reject, SourceItem
from packer.encode import EncodeOptions, encode_batch
from packer.errors import MissingDependencyError, PackError, install_line
from packer.errors import RayClusterError as RayClusterError  # defined with every error class

Task = TypeVar("Task")
Result = TypeVar("Result")
TASKS_PER_CPU = 2
INSTALL_HINT = f"run `{install_line('ray')}` (or `pip install ray`) on every node"
CONNECT_TIMEOUT_S = 5.0


def import_ray() -> Any:
    """The `ray` module, or a one-line error that says how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise MissingDependencyError(f"--executor ray needs Ray ({exc}); {INSTALL_HINT}") \
            from exc
    return ray


@contextmanager
def connected(address: str | None) -> Iterator[Any]:
    """Use the Ray instance this process already joined, or join `address` for a while.

    `address=None` starts a private local instance; "auto" joins the cluster that
    `ray start` made on this machine; "HOST:PORT" joins a head node. What this function
    started or joined, it leaves on the way out.
    """
    ray = preflight(address)
    if ray.is_initialized():
        yield ray
        return
    local: dict[str, Any] = {"include_dashboard": False} if address is None else {}
    try:
        ray.init(address=address, logging_level=logging.ERROR, **local)
    except ConnectionError as exc:
        raise _unreachable(address, exc) from exc
    try:
        yield ray
    finally:
        ray.shutdown()


def preflight(address: str | None) -> Any:
    """Before DST is touched: Ray is installed, and a HOST:PORT address answers.

    ray.init waits for minutes on a HOST:PORT that nobody listens on; this fails in
    seconds. "auto", "local" and "ray://" URLs are left to Ray, which reports them.
    """
    ray = import_ray()
    if address is None or "://" in address or ray.is_initialized():
        return ray
    host, _, port = address.rpartition(":")
    if host and port.isdigit():
        try:
            with socket.create_connection((host.strip("[]"), int(port)),
                                          timeout=CONNECT_TIMEOUT_S):
                pass
        except OSError as exc:  # refused, timed out, unknown host
            raise _unreachable(address, exc) from exc
    return ray


def _unreachable(address: str | None, exc: Exception) -> RayClusterError:
    return RayClusterError(
        f"cannot join the Ray cluster at {address!r} ({exc}); start one with `ray start "
        "--head`, or drop --ray-address to run a local Ray instance"
    )


def _call(func: Callable[[Task], Result], task: Task) -> Result:
    """The Ray task: `func` arrives once through the object store, `task` inline."""
    return func(task)


def map_ordered_ray(func: Callable[[Task], Result], tasks: Iterable[Task],
                    workers: int | None = None, address: str | None = None) -> Iterator[Result]:
    """Yield func(task) for each task, in order, computed by Ray tasks.

    `workers` caps the CPUs used (default: every CPU of the cluster); TASKS_PER_CPU
    tasks per CPU are in flight.
    """
    with connected(address) as ray:
        cpus = workers or int(ray.cluster_resources().get("CPU", 1))
        limit = TASKS_PER_CPU * max(1, cpus)
        remote = ray.remote(num_cpus=1)(_call)
        shared = ray.put(func)
        pending: collections.deque[Any] = collections.deque()
        try:
            for task in tasks:
                pending.append(remote.remote(shared, task))
                if len(pending) >= limit:
                    yield ray.get(pending.popleft())
            while pending:
                yield ray.get(pending.popleft())
        except ray.exceptions.RayError as exc:
            if isinstance(exc, ray.exceptions.RayTaskError):
                if isinstance(exc.cause, PackError):  # worded for the user: its one line
                    raise exc.cause from None
                raise  # the task's own exception, with its traceback: a bug, not the cluster
            raise RayClusterError(f"the Ray cluster lost a task ({type(exc).__name__}: "
                                  f"{str(exc).splitlines()[0]}); what is written stays, rerun "
                                  "with --resume to continue") from exc
        finally:
            for ref in pending:
                ray.cancel(ref)


def encode_batch_at(items: list[SourceItem], options: EncodeOptions,
                    cwd: str) -> list[Record | Reject]:
    """encode_batch on another node: relative paths resolve against the driver's `cwd`.

    Rejects keep the path as the scan wrote it, so rejects.jsonl matches a local run.
    """
    resolved = [dataclasses.replace(item, path=os.path.join(cwd, item.path)) for item in items]
    results = encode_batch(resolved, options)
    return [dataclasses.replace(result, path=item.path) if isinstance(result, Reject) else result
            for result, item in zip(results, items, strict=True)]
