"""Flip bytes all over a dataset's data file and read every sample back (scripts/soak.py).

Each damaged copy is read in a child process with the format's reader, which checks
every sample against its digest, so a read either returns the original bytes
("intact": the damage hit bytes no sample uses), refuses with our error ("refused"),
fails some other way ("other: TYPE", a bug), or kills the child ("crash: SIGNAL"; LMDB
and HDF5 are C libraries that trust their own page and header pointers). One child
reads a batch of copies, so the interpreter start is paid once per batch; after a
crash the next batch starts in a fresh child.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

BATCH = 25
READ = """
import sys
from pathlib import Path
from packer import formats
from packer.errors import PackError
from packer.core.index import open_dataset

for line in sys.stdin:
    folder = Path(line.strip())
    try:
        index, table = open_dataset(folder)
        reader = formats.load(index.format).open_reader(folder, index, table)
        try:
            list(reader.read_range(0, index.num_samples))
            for i in range(index.num_samples):
                reader.read(i)
        finally:
            reader.close()
        outcome = "intact"
    except PackError:
        outcome = "refused"
    except Exception as exc:
        outcome = "other: " + type(exc).__name__
    print(outcome, flush=True)
"""


def flip_scan(folder: Path, name: str, work: Path, flips: int) -> Counter[str]:
    """Flip two bytes at `flips` offsets spread over `folder/name`; count the outcomes."""
    data = (folder / name).read_bytes()
    step = max(1, len(data) // flips)
    offsets = list(range(0, len(data), step))[:flips]
    outcomes: Counter[str] = Counter()
    for start in range(0, len(offsets), BATCH):
        copies = [_damaged_copy(folder, name, data, offset, work / f"flip-{k}")
                  for k, offset in enumerate(offsets[start : start + BATCH])]
        pending = copies
        while pending:
            done, returncode = _read(pending)
            outcomes.update(done)
            if len(done) < len(pending):  # the child died on the next copy
                outcomes[f"crash: {_signal_name(returncode)}"] += 1
            pending = pending[len(done) + 1 :]
        for copy in copies:
            shutil.rmtree(copy, ignore_errors=True)
    return outcomes


def _damaged_copy(folder: Path, name: str, data: bytes, offset: int, copy: Path) -> Path:
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(folder, copy)
    flipped = bytearray(data)
    for at in (offset, offset + 1):
        if at < len(flipped):
            flipped[at] ^= 0xFF
    (copy / name).write_bytes(bytes(flipped))
    return copy


def _read(copies: list[Path]) -> tuple[list[str], int]:
    """Outcomes of the copies read in one child, up to where it died; its exit status."""
    done = subprocess.run([sys.executable, "-c", READ], capture_output=True, text=True,
                          input="".join(f"{copy}\n" for copy in copies), timeout=600)
    return done.stdout.splitlines()[: len(copies)], done.returncode


def _signal_name(returncode: int) -> str:
    return signal.Signals(-returncode).name if returncode < 0 else f"exit {returncode}"
