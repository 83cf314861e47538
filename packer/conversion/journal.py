"""Resume state of an unfinished conversion, kept in `DST/.pack-state/`.

    job.json            fingerprint of source + format + options (`JobIdentity`); resume
                        refuses a mismatch
    parts.jsonl         one line per durable part: where the source was consumed up to,
                        the shards so far, the rejects of the part
    part-NNNNN.*.npy    the per-sample rows of that part

A line is appended (and fsynced) only after the writer made the part durable, so a
line always describes data on disk; a torn last line is ignored. The folder is
removed once index.json exists (which keeps the job's identity in its `extra`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packer.conversion.identity import STATE_JOB, JobIdentity, check_same_job
from packer.core.index import (
    Index,
    SampleTable,
    ShardInfo,
    load_table,
    read_index,
    save_table,
    shard_from_json,
    shard_json,
)
from packer.core.layout import STATE_DIR as STATE_DIR
from packer.core.record import Reject
from packer.errors import ResumeRefused as ResumeRefused  # defined with every error class
from packer.storage.files import fsync_dir, write_atomic


@dataclass
class Progress:
    """What earlier runs made durable: resume starts from here."""

    src_stop: int = 0
    num_samples: int = 0
    shards: tuple[ShardInfo, ...] = ()
    rejects: list[Reject] = field(default_factory=list)
    tables: list[SampleTable] = field(default_factory=list)


class Journal:
    """Appends durable parts and reads them back for resume."""

    def __init__(self, folder: Path) -> None:
        self.state = folder / STATE_DIR
        self.parts_path = self.state / "parts.jsonl"

    def exists(self) -> bool:
        """Whether an earlier run recorded a job (killed inside start(), it did not)."""
        return (self.state / STATE_JOB).is_file()

    def start(self, job_fingerprint: str) -> None:
        """Begin a fresh job, forgetting any earlier state."""
        shutil.rmtree(self.state, ignore_errors=True)
        self.state.mkdir(parents=True)
        write_atomic(self.state / STATE_JOB, json.dumps({"fingerprint": job_fingerprint}).encode())
        fsync_dir(self.state.parent)

    def fingerprint(self) -> str | None:
        try:
            return str(json.loads((self.state / STATE_JOB).read_text())["fingerprint"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def record_part(self, number: int, progress: Progress, table: SampleTable,
                    rejects: list[Reject]) -> None:
        """Make a part's metadata durable after its data is."""
        save_table(self.state, table, prefix=f"part-{number:05d}.", with_records=True)
        line = {
            "part": number,
            "src_stop": progress.src_stop,
            "num_samples": progress.num_samples,
            "shards": [shard_json(shard) for shard in progress.shards],
            "rejects": [{"position": r.position, "path": r.path, "reason": r.reason}
                        for r in rejects],
        }
        with open(self.parts_path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def read_parts(self) -> list[dict[str, Any]]:
        """Every complete line, in order; a torn last line is dropped."""
        if not self.parts_path.exists():
            return []
        parts = []
        for number, line in enumerate(self.parts_path.read_text(encoding="utf-8").splitlines()):
            try:
                part = json.loads(line)
            except json.JSONDecodeError:
                break
            if not _well_formed(part, number):  # torn or damaged: not durable
                break
            parts.append(part)
        return parts

    def load(self, parts: list[dict[str, Any]]) -> Progress:
        """Progress after the given parts (a prefix of read_parts())."""
        progress = Progress()
        for part in parts:
            progress.src_stop = int(part["src_stop"])
            progress.num_samples = int(part["num_samples"])
            progress.shards = tuple(shard_from_json(shard) for shard in part["shards"])
            progress.rejects += [Reject(r["position"], r["path"], r["reason"])
                                 for r in part["rejects"]]
            progress.tables.append(
                load_table(self.state, prefix=f"part-{int(part['part']):05d}.", mmap=False)
            )
        return progress

    def truncate(self, keep: int) -> None:
        """Forget parts from `keep` on (their data did not survive)."""
        if not self.parts_path.exists():
            return  # no part ended before the interruption: nothing to forget
        lines = self.parts_path.read_text(encoding="utf-8").splitlines()[:keep]
        write_atomic(self.parts_path, "".join(line + "\n" for line in lines).encode("utf-8"))

    def remove(self) -> None:
        """Delete the state, job.json last: a removal cut short still names its job."""
        job = self.state / STATE_JOB
        with contextlib.suppress(FileNotFoundError):
            for path in self.state.iterdir():
                if path.is_dir() and not path.is_symlink():  # a parallel wds run's groups
                    shutil.rmtree(path, ignore_errors=True)
                elif path != job:
                    path.unlink(missing_ok=True)
        job.unlink(missing_ok=True)
        try:
            self.state.rmdir()
        except FileNotFoundError:
            pass
        except OSError:  # something unexpected inside: remove it all
            shutil.rmtree(self.state, ignore_errors=True)

    def finish(self, job: JobIdentity) -> Index:
        """DST is complete and --resume was asked: nothing to convert if it is this job.

        Refused, naming what differs, if it is not. A run killed while removing this
        state left it beside the index: the same job finishes that clean-up.
        """
        folder = self.state.parent
        index = read_index(folder)
        check_same_job(str(folder), index, job, self.fingerprint())
        self.remove()
        return index


def _well_formed(part: Any, number: int) -> bool:
    """A journal line as record_part writes it (a damaged one ends the durable prefix)."""
    shard_fields = {"name", "num_samples", "num_bytes", "sha256"}
    return (isinstance(part, dict) and part.get("part") == number
            and all(isinstance(part.get(key), int) for key in ("src_stop", "num_samples"))
            and isinstance(part.get("rejects"), list)
            and all(isinstance(r, dict) and {"position", "path", "reason"} <= r.keys()
                    for r in part["rejects"])
            and isinstance(part.get("shards"), list)
            and all(isinstance(s, dict) and s.keys() - {"pieces"} == shard_fields
                    for s in part["shards"]))
