"""Interrupt `pack convert` at chosen moments and check what it leaves (tests, soak script).

Starting a Python process that imports packer costs about 0.5 s, more than converting a
small source, so a fork server imports packer once and forks one child per run. A
child is an ordinary `pack convert` (same code, same imports) in a session of its own,
its stdout and stderr in a log file. The server reaps a child only when asked, so its
pid cannot be reused while the parent may still signal it.

A moment to interrupt is chosen in one of two ways:

  at an I/O event   the child counts its calls of the os functions in EVENTS and sends
                    itself the signal just before call number k: every gap between two
                    system calls of the run can be hit, and the same k hits the same gap
  after a delay     the parent sends the signal at a random time within the run; this
                    also lands inside I/O done in C (LMDB, HDF5, buffered writes)

`devtools.faults.kills` runs the rounds and checks each outcome against what the README promises.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from types import TracebackType
from typing import Any

EVENTS = ("open", "close", "write", "writev", "pwrite", "fsync", "fdatasync", "ftruncate",
          "truncate", "replace", "rename", "unlink", "rmdir", "mkdir")
SERVE = "from devtools.faults.forkserver import serve; serve()"
HANG_S = 60.0  # a conversion of the small test sources takes well under a second


@dataclass(frozen=True)
class Interrupt:
    """A signal and when to send it: before I/O event `at_event`, or after `after_s` seconds."""

    signum: int
    at_event: int | None = None
    after_s: float | None = None


@dataclass(frozen=True)
class Outcome:
    """How one run ended: exit code (-N: killed by signal N), I/O events, log, seconds."""

    returncode: int
    events: int
    log: str
    seconds: float
    exit_after_signal_s: float | None = None


def checkout_env() -> dict[str, str]:
    """This environment, with the checkout on PYTHONPATH: devtools is not installed."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root if not path else f"{root}{os.pathsep}{path}"}


class ForkServer:
    """Client of the fork server process; one run at a time."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", SERVE], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=checkout_env())

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _exited(self, pid: int, deadline: float) -> bool:
        """Wait until the child exits (a zombie: the server reaps only when asked)."""
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{pid}/stat", "rb") as handle:
                    if handle.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                        return True
            except FileNotFoundError:  # no /proc: trust the reap
                return True
            time.sleep(0.002)
        return False

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the fork server died (exit {self.proc.poll()})")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def run(self, argv: list[str], log: Path, interrupt: Interrupt | None = None,
            patches: dict[str, int] | None = None, timeout: float = HANG_S) -> Outcome:
        """Run `pack ARGV...` in a fresh child, interrupted as asked; wait for its end.

        A child still running after `timeout` seconds is taken for hung: it writes every
        thread's Python stack to its log (faulthandler, SIGUSR1), then is killed.
        """
        events = log.with_name(log.name + ".events")
        events.unlink(missing_ok=True)
        request: dict[str, Any] = {"op": "start", "argv": argv, "log": str(log),
                                   "events": str(events), "patches": patches or {}}
        if interrupt is not None and interrupt.at_event is not None:
            request.update(signum=int(interrupt.signum), at_event=interrupt.at_event)
        start = time.monotonic()
        pid = int(self._ask(request)["pid"])
        signalled = None
        if interrupt is not None and interrupt.after_s is not None:
            time.sleep(interrupt.after_s)
            signalled = time.monotonic()
            with contextlib.suppress(ProcessLookupError):  # unreaped: never another process
                os.kill(pid, interrupt.signum)
        if not self._exited(pid, start + timeout):
            os.kill(pid, signal.SIGUSR1)
            time.sleep(1)
            os.kill(pid, signal.SIGKILL)
        code = int(self._ask({"op": "reap", "pid": pid})["returncode"])
        end = time.monotonic()
        count = int(events.read_text() or -1) if events.exists() else -1
        text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
        return Outcome(code, count, text, end - start,
                       None if signalled is None else end - signalled)


def serve() -> None:
    """The server loop: one JSON request per line on stdin, one JSON reply per line."""
    import_module("pack_cli")  # what every child shares; formats load in the child
    # Children start with SIGINT blocked (a signal sent right after fork would otherwise
    # land in Python's own after-fork hooks); _run_cli unblocks it as the command starts.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "start":
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                _child(request)
            reply = {"pid": pid}
        else:
            _, status = os.waitpid(int(request["pid"]), 0)
            reply = {"returncode": os.waitstatus_to_exitcode(status)}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


def _child(request: dict[str, Any]) -> None:
    """Run one `pack` command in the forked child; never returns."""
    exit_code: list[int] = []  # set the moment `pack` has ended
    try:
        # As `pack` started from a terminal: Ctrl-C raises KeyboardInterrupt (a server
        # started in the background by a shell without job control inherits SIG_IGN).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.setsid()
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        faulthandler.register(signal.SIGUSR1, all_threads=True)  # stacks of a hung child
        for target, value in request["patches"].items():
            module, _, name = target.rpartition(".")
            setattr(import_module(module), name, value)
        counter = _arm(request.get("signum"), request.get("at_event"))
        _run_cli(request["argv"], exit_code)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        Path(request["events"]).write_text(str(counter[0]))
    except KeyboardInterrupt:
        if not exit_code:  # it escaped `pack` itself: report it
            traceback.print_exc()
    except BaseException:
        traceback.print_exc()  # a harness problem: the check for "Traceback" reports it
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(exit_code[0] if exit_code else 70)


def _run_cli(argv: list[str], exit_code: list[int]) -> None:
    """What the `pack` script does (pack_cli.run); its exit code goes to `exit_code`.

    A Ctrl-C that arrives once `pack` has ended (the parent's timer ran out just then)
    lands in the harness, not in `pack`: _child ignores it.
    """
    from pack_cli import run

    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    except KeyboardInterrupt:  # it came before the command started: die of it
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    try:
        run(argv)
        exit_code.append(0)
    except SystemExit as exc:
        exit_code.append(exc.code if isinstance(exc.code, int) else int(exc.code is not None))
    except KeyboardInterrupt as exc:  # one on `run`'s first instruction, before its `try`:
        if not _at_entry(run, exc):    # as one before the command started, die of it
            raise
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)


def _at_entry(function: Any, exc: BaseException) -> bool:
    """Whether `exc` was raised on the line `function` starts at, in its own frame: a
    signal checked when the call begins, before any statement of the function runs."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    code = function.__code__
    return tb is not None and tb.tb_frame.f_code is code and tb.tb_lineno == code.co_firstlineno


def _arm(signum: int | None, at_event: int | None) -> list[int]:
    """Count calls of the EVENTS functions; signal this process before call `at_event`."""
    counter = [0]
    for name in EVENTS:
        setattr(os, name, _counted(getattr(os, name), counter, signum, at_event))
    return counter


def _counted(real: Callable[..., Any], counter: list[int], signum: int | None,
             at_event: int | None) -> Callable[..., Any]:
    pid = os.getpid()
    kill = os.kill

    def call(*args: Any, **kwargs: Any) -> Any:
        counter[0] += 1
        if counter[0] == at_event and signum is not None:
            kill(pid, signum)
        return real(*args, **kwargs)

    return call
