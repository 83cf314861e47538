"""What runs in a process at the moment it forks: one JSON line per fork, for the soak.

`install(folder)` registers an `os.register_at_fork(before=...)` hook that appends to
folder/forks-<pid>.jsonl the Python threads alive (name, daemon, the function each is
in), the ones still in `threading._limbo` (started, not yet running: a thread starting),
the thread states Python holds that `threading` no longer lists (a thread ending, or a
C thread that called into Python), and the native threads of the process by their
/proc comm name (gloo, OpenMP, ...). Why: CPython 3.11's fork can hang in the child when
a thread starts or ends at that very moment, and this says which thread could have.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

_FOLDER: list[Path] = []


def _native_threads() -> list[dict[str, Any]]:
    """Each native thread: tid, comm name, state and start (clock ticks since boot)."""
    found = []
    for task in sorted(Path("/proc/self/task").iterdir()):
        try:
            stat = (task / "stat").read_text()
        except OSError:  # ended while listed
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2:]
        fields = rest.split()
        found.append({"tid": int(task.name), "name": name, "state": fields[0],
                      "start": int(fields[19])})
    return found


def snapshot() -> dict[str, Any]:
    """This process's threads right now, as the module docstring lists them."""
    frames = sys._current_frames()
    alive = threading.enumerate()
    listed = {thread.ident for thread in alive}
    limbo = [thread.name for thread in list(threading._limbo.values())]  # type: ignore[attr-defined]
    return {
        "pid": os.getpid(), "time": time.time(), "rank": os.environ.get("LOCAL_RANK", "0"),
        "forking": threading.current_thread().name,
        "threads": [{"name": t.name, "daemon": t.daemon, "tid": t.native_id,
                     "in": _where(frames.get(t.ident or -1))} for t in alive],
        "limbo": limbo,
        "unlisted_states": [_where(frame) for ident, frame in frames.items()
                            if ident not in listed],
        "native": _native_threads(),
    }


def _where(frame: Any) -> str:
    """The innermost function of a frame and the file it is in, or '' for none."""
    if frame is None:
        return ""
    code = frame.f_code
    return f"{code.co_name} ({Path(code.co_filename).name}:{frame.f_lineno})"


def _record() -> None:
    folder = _FOLDER[0]
    with (folder / f"forks-{os.getpid()}.jsonl").open("a") as out:
        out.write(json.dumps(snapshot()) + "\n")


def install(folder: Path) -> None:
    """Record every later fork of this process into `folder` (once per process)."""
    if _FOLDER:
        return
    folder.mkdir(parents=True, exist_ok=True)
    _FOLDER.append(folder)
    os.register_at_fork(before=_record)
