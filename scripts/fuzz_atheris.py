#!/usr/bin/env python3
"""Coverage-guided fuzzing of the parsers of untrusted bytes with atheris (not run in CI).

    pip install atheris
    python scripts/fuzz_atheris.py tar     -atheris_runs=200000   # read_labels + WdsReader
    python scripts/fuzz_atheris.py index   -max_total_time=300    # read_index
    python scripts/fuzz_atheris.py table   -runs=100000           # open_dataset's table

The same contract as tests/faults/test_fuzz.py: the only exception allowed out is
CorruptDatasetError; a reader returns a sample's original bytes or refuses. Anything
else is reported by libFuzzer as a crash, with the input saved to reproduce it.
Options after the target go to libFuzzer (-runs=N, -max_total_time=S, a corpus folder).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import atheris

with atheris.instrument_imports():
    import tarfile  # noqa: F401  (instrumented: the tar parser read_labels relies on)

    from packer import ConvertOptions, convert
    from packer.core.checks import files_digest
    from packer.core.index import (
        INDEX_NAME,
        KEYS_NAME,
        SAMPLES_NAME,
        TABLE_DIGEST,
        open_dataset,
        read_index,
    )
    from packer.errors import CorruptDatasetError
    from packer.formats import _wds
    from packer.formats.base import ShardOptions
    from packer.testing import make_sample_folder

SHARD = "wds-00001.tar"  # seed_dataset writes into a folder named wds: its shards carry it


def seed_dataset(work: Path) -> Path:
    src = make_sample_folder(work / "src", count=9, classes=2, min_side=16, max_side=32)
    convert(src, work / "wds", "wds",
            run=ConvertOptions(workers=0, shards=ShardOptions(max_samples=3)))
    return work / "wds"


def targets(work: Path) -> dict[str, Callable[[bytes], None]]:
    folder = seed_dataset(work)
    index, table = open_dataset(folder)
    originals = [_wds.WdsReader(folder, index, table).read(i) for i in range(len(table))]
    mutable = Path(shutil.copytree(folder, work / "mutable"))

    def tar(data: bytes) -> None:
        (mutable / SHARD).write_bytes(data)
        with contextlib.suppress(CorruptDatasetError):
            _wds.read_labels(mutable, index)
        reader = _wds.WdsReader(mutable, index, table)
        for i in range(3, 6):
            try:
                if reader.read(i) != originals[i]:
                    raise AssertionError(f"sample {i}: different bytes, not refused")
            except CorruptDatasetError:
                pass
        reader.close()
        (mutable / SHARD).write_bytes((folder / SHARD).read_bytes())

    def index_json(data: bytes) -> None:
        (mutable / INDEX_NAME).write_bytes(data)
        with contextlib.suppress(CorruptDatasetError):
            read_index(mutable)

    index_data = json.loads((folder / INDEX_NAME).read_text())

    def table_file(data: bytes) -> None:
        """First byte: which file the rest replaces; the index vouches for it (as if
        patched), so the checks behind the table digest are reached."""
        name = SAMPLES_NAME if data[:1] in (b"s", b"") else KEYS_NAME
        (mutable / name).write_bytes(data[1:])
        index_data["extra"][TABLE_DIGEST] = files_digest((mutable / SAMPLES_NAME,
                                                           mutable / KEYS_NAME))
        (mutable / INDEX_NAME).write_text(json.dumps(index_data))
        try:
            _, loaded = open_dataset(mutable)
            for i in range(len(loaded)):
                loaded.key(i)
        except CorruptDatasetError:
            pass
        (mutable / name).write_bytes((folder / name).read_bytes())

    return {"tar": tar, "index": index_json, "table": table_file}


def seed_corpus(work: Path, name: str) -> Path:
    """The real files as starting points: random bytes rarely make a tar or an .npy."""
    folder = work / "wds"
    seeds = {"tar": [folder / SHARD], "index": [folder / INDEX_NAME],
             "table": [folder / SAMPLES_NAME, folder / KEYS_NAME]}[name]
    corpus = work / f"corpus-{name}"
    corpus.mkdir()
    for number, path in enumerate(seeds):
        prefix = (b"s" if path.name == SAMPLES_NAME else b"k") if name == "table" else b""
        (corpus / f"seed-{number}").write_bytes(prefix + path.read_bytes())
    return corpus


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in ("tar", "index", "table"):
        sys.exit(__doc__)
    name = sys.argv.pop(1)
    work = Path(tempfile.mkdtemp(prefix="packer-atheris-"))
    try:
        target = targets(work)[name]
        if not any(not arg.startswith("-") for arg in sys.argv[1:]):  # no corpus given
            sys.argv.append(str(seed_corpus(work, name)))
        atheris.Setup(sys.argv, target)
        atheris.Fuzz()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
