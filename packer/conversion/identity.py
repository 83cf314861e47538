"""What a conversion is (its source listing and the options that shape the output),
kept so that running it again can tell whether it is the same job (invariant 9).

While a conversion runs, `.pack-state/job.json` holds the job's fingerprint and resume
refuses another job. Once the dataset is complete the state is gone, so index.json's
`extra["job"]` keeps the fingerprint and its parts: `--resume` on a complete DST is then
a no-op when the job is the same, and is refused naming what differs when it is not.
A complete dataset whose index.json keeps no job record cannot be matched: --resume
refuses it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packer.core.index import Index
from packer.errors import DatasetExistsError
from packer.source.kinds import Source
from packer.storage.files import write_atomic

JOB_KEY = "job"  # in index.json's `extra`
STATE_JOB = "job.json"  # the resume state's record of its job (`Journal`)
# Settings, flattened, as the `pack convert` options that set them; the others
# (encode.pixels, encode.mode) follow from these and from the format.
OPTION_NAMES = {"format": "--to", "encode.check": "--check", "encode.resize": "--resize",
                "encode.size": "--size", "encode.fit": "--fit", "encode.codec": "--encode",
                "encode.quality": "--quality", "encode.upscale": "--upscale",
                "shards.max_bytes": "--shard-size", "shards.max_samples": "--shard-samples",
                "shards.min_shards": "--shard-size/--shard-samples (left out: the least "
                                     "number of shards)"}


@dataclass(frozen=True)
class JobIdentity:
    """A job's fingerprint, plus its parts, so that a mismatch can be put in words."""

    fingerprint: str  # of everything below: resume's test (job.json)
    source: str  # of the source listing alone: keys, paths, labels, sizes, mtimes
    num_inputs: int
    settings: dict[str, Any]  # format, encode options, shard options

    def to_json(self) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint, "source": self.source,
                "num_inputs": self.num_inputs, "settings": self.settings}


def identify(source: Source, settings: dict[str, Any]) -> JobIdentity:
    """Same files (size, mtime), labels and settings -> same fingerprint.

    A packed source is identified by the hash of its index.json (which pins the sha256
    of every shard) instead of a stat per sample, an archive by its size, mtime and a
    hash of its member table. The source digest is hashed in the
    same pass, so the files are stat-ed once.
    """
    whole = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    listing = hashlib.sha256()

    def update(data: bytes) -> None:
        whole.update(data)
        listing.update(data)

    update(json.dumps(source.class_names).encode())
    if source.origin is not None:
        update(f"packed:{source.origin.fingerprint}\n".encode())
    if source.archive is not None:  # size, mtime and member table
        update(f"archive:{source.archive.fingerprint}\n".encode())
    for key, path, label in source.items.rows():
        update(f"{key}\0{path}\0{label}\0{_facts(source, path)}\n".encode())
    if source.items.fields is not None:  # the field values (a caption edited in a manifest)
        update(b"fields:" + source.items.fields.data)
    return JobIdentity(whole.hexdigest(), listing.hexdigest(), len(source.items), settings)


def _facts(source: Source, path: str) -> str:
    if source.origin is not None:
        return "packed"
    if source.archive is not None:
        return "member"  # the archive's fingerprint covers every member
    try:
        stat = os.stat(path)
    except OSError:
        return "missing"
    return f"{stat.st_size}:{stat.st_mtime_ns}"


def fingerprint(source: Source, settings: dict[str, Any]) -> str:
    """The fingerprint alone (see identify)."""
    return identify(source, settings).fingerprint


def save_identity(state: Path, job: JobIdentity) -> None:
    """Keep the job's parts beside its fingerprint in the resume state's job.json (no
    other file: a nearly full disk has no page for one), so that a refused --resume can
    name what changed."""
    record = {"fingerprint": job.fingerprint, JOB_KEY: job.to_json()}
    write_atomic(state / STATE_JOB, json.dumps(record).encode())


def changed_since(state: Path, job: JobIdentity) -> str:
    """` (--resize was none, now 8; ...)`: how `job` differs from the interrupted one
    whose state is in `state`; empty when that run did not keep its parts."""
    try:
        recorded = json.loads((state / STATE_JOB).read_text()).get(JOB_KEY)
    except (OSError, ValueError, AttributeError):
        recorded = None
    changes = differences(recorded, job) if isinstance(recorded, dict) else []
    return f" ({'; '.join(changes)})" if changes else ""


def check_same_job(where: str, index: Index, job: JobIdentity,
                   state_fingerprint: str | None = None) -> None:
    """Refuse, naming what differs, unless the complete dataset at `where` is this job.

    `state_fingerprint`: from resume state left beside the index (a run killed while
    removing it), the only record of the job where index.json keeps none.
    """
    recorded = index.extra.get(JOB_KEY)
    if not isinstance(recorded, dict):
        if state_fingerprint == job.fingerprint:
            return
        raise DatasetExistsError(
            f"{where}: already holds a complete dataset that does not record its source and "
            "options (written by an older version), so --resume cannot tell whether it is "
            "this job; pass --overwrite to replace it")
    if recorded.get("fingerprint") == job.fingerprint:
        return
    changes = differences(recorded, job)
    made = " and ".join(kind for kind, prefix in (("from another source", "the source"),
                                                  ("with other options", "--"))
                        if any(c.startswith(prefix) for c in changes))
    raise DatasetExistsError(
        f"{where}: already holds a complete dataset made {made or 'by another job'} "
        f"({'; '.join(changes) or 'fingerprints differ'}); pass --overwrite to replace it "
        "or choose another DST")


def differences(recorded: dict[str, Any], job: JobIdentity) -> list[str]:
    """What differs between the job an index recorded and this one, in the CLI's words."""
    changes = []
    if recorded.get("source") != job.source:
        then = recorded.get("num_inputs")
        counts = f"{then} inputs then, {job.num_inputs} now" if then != job.num_inputs \
            else f"the same {then} inputs, but files, labels or classes changed"
        changes.append(f"the source: {counts}")
    settings = recorded.get("settings")
    before = _flat(settings) if isinstance(settings, dict) else {}
    after = _flat(job.settings)
    for name in [*after, *(name for name in before if name not in after)]:
        if name in OPTION_NAMES and before.get(name) != after.get(name):
            changes.append(f"{OPTION_NAMES[name]} was {_word(before.get(name))}, "
                           f"now {_word(after.get(name))}")
    return changes


def _flat(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def _word(value: Any) -> str:
    """A setting as the CLI spells it: 16x16 for a size, none for None."""
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return "x".join(str(v) for v in value)
    return str(value).lower() if isinstance(value, bool) else str(value)
