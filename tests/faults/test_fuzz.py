"""Fuzz the parsers of untrusted bytes: tar shards, index.json, the per-sample table.

Random inputs and mutations of real files (byte flips, numbers written into tar
header fields, cuts, inserts, deletions) go through read_labels, the WdsReader,
read_index / index_from_json and open_dataset. Only our documented errors may come out
(CorruptDatasetError, a PackError), nothing may hang (pytest-timeout), and a reader
either returns a sample's original bytes or refuses: never different ones.

PACKER_FUZZ_EXAMPLES (default 400) sets examples per test; the inputs are the same every
run (the hypothesis profile of tests/conftest.py is derandomized), and
`scripts/fuzz_atheris.py` runs the same targets under atheris' coverage-guided fuzzer.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packer import ConvertOptions, convert
from packer.core.checks import files_digest
from packer.core.index import (
    INDEX_NAME,
    KEYS_NAME,
    SAMPLES_NAME,
    TABLE_DIGEST,
    Index,
    index_from_json,
    open_dataset,
    read_index,
)
from packer.errors import CorruptDatasetError
from packer.formats import _wds
from packer.formats.base import ShardOptions
from tests.helpers import shard_path

EXAMPLES = int(os.environ.get("PACKER_FUZZ_EXAMPLES", "400"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,  # derandomized: tests/conftest.py
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
TRIED: dict[str, int] = {}
# numpy's parser of a mutated .npy header warns before it fails (escape sequences,
# "created on Python 2"); the failure is what the tests check.
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning")]


@pytest.fixture(scope="module", autouse=True)
def report_counts() -> Iterator[None]:
    yield
    print("fuzz inputs tried:", TRIED, "total", sum(TRIED.values()))


def tried(target: str) -> None:
    TRIED[target] = TRIED.get(target, 0) + 1


@pytest.fixture(scope="module")
def seed_set(odd_src: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real wds dataset with long and non-ASCII names (pax headers) in 3-sample shards."""
    dst = tmp_path_factory.mktemp("fuzz") / "wds"
    convert(odd_src, dst, "wds", run=ConvertOptions(workers=0,
                                                     shards=ShardOptions(max_samples=3)))
    return dst


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    """One folder per module: hypothesis runs many examples per test function."""
    path = Path(tempfile.mkdtemp(prefix="packer-fuzz-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------- mutations


def mutated(seed: bytes, block: int = 512) -> st.SearchStrategy[bytes]:
    """Edits of `seed`: flips, numbers in header-like fields, cuts, inserts, deletions."""
    size = max(len(seed), 1)
    edit = st.one_of(
        st.tuples(st.just("flip"), st.integers(0, size - 1), st.integers(1, 255)),
        st.tuples(st.just("field"), st.integers(0, size // block), st.sampled_from(
            [0, 100, 124, 136, 148, 156, 257, 345]), st.sampled_from(
            [b"0", b"7777777777\x00", b"-1", b"99999999999\x00", b"\x80\x00\x00\x00\x00\x00"
             b"\x00\x00\x00\x00\x00\x01", b"\xff" * 12, b"x", b"L", b"K", b"g", b"5", b"2",
             b"30 path=\xff\xfe\n", b"999999999 path=a\n"])),
        st.tuples(st.just("cut"), st.integers(0, size)),
        st.tuples(st.just("insert"), st.integers(0, size), st.binary(min_size=1, max_size=700)),
        st.tuples(st.just("delete"), st.integers(0, size - 1), st.integers(1, 1500)),
    )
    return st.lists(edit, min_size=1, max_size=6).map(lambda edits: apply(seed, edits, block))


def apply(seed: bytes, edits: list[tuple[Any, ...]], block: int) -> bytes:
    data = bytearray(seed)
    for kind, *args in edits:
        if kind == "flip" and args[0] < len(data):
            data[args[0]] ^= args[1]
        elif kind == "field":
            at = args[0] * block + args[1]
            data[at : at + len(args[2])] = args[2]
        elif kind == "cut":
            del data[args[0] :]
        elif kind == "insert":
            data[args[0] : args[0]] = args[1]
        elif kind == "delete":
            del data[args[0] : args[0] + args[1]]
    return bytes(data)


def only_our_errors(action: Callable[[], Any]) -> Any:
    """What `action` returns, or None when it refused with our error (one line)."""
    try:
        return action()
    except CorruptDatasetError as exc:
        assert "\n" not in str(exc), str(exc)
        return None


# ---------------------------------------------------------------- tar shards


def shard_bytes(folder: Path) -> bytes:
    return shard_path(folder, 1).read_bytes()


def one_shard_index(data: bytes, name: str) -> Index:
    return Index(format="wds", num_samples=3, class_names=("a", "b"),
                 shards=(_wds.ShardInfo(name, 3, len(data), "0" * 64),), encode={})


@pytest.mark.timeout(300)
def test_read_labels_on_mutated_tars(seed_set: Path, scratch: Path) -> None:
    seed = shard_bytes(seed_set)

    @FUZZ
    @given(st.one_of(mutated(seed), st.binary(max_size=3000)))
    def check(data: bytes) -> None:
        tried("tar shards (read_labels)")
        (scratch / "x.tar").write_bytes(data)
        labels = only_our_errors(lambda: _wds.read_labels(
            scratch, one_shard_index(data, "x.tar")))
        if labels is not None:
            assert labels.dtype == np.int64 and labels.ndim == 1

    check()


@pytest.mark.timeout(300)
def test_wds_reader_returns_original_bytes_or_refuses(seed_set: Path, scratch: Path) -> None:
    index, table = open_dataset(seed_set)
    originals = [_wds.WdsReader(seed_set, index, table).read(i) for i in range(len(table))]
    target = scratch / "reader"
    shutil.copytree(seed_set, target, dirs_exist_ok=True)
    seed = shard_bytes(seed_set)
    first = int(index.shard_starts[1])

    @FUZZ
    @given(mutated(seed))
    def check(data: bytes) -> None:
        tried("tar shards (WdsReader)")
        (target / shard_path(seed_set, 1).name).write_bytes(data)
        reader = _wds.WdsReader(target, index, table)
        try:
            got = only_our_errors(lambda: list(reader.read_range(0, len(table))))
            if got is not None:
                assert got == originals
            for i in range(first, first + 3):
                one = only_our_errors(lambda i=i: reader.read(i))
                assert one in (None, originals[i])
        finally:
            reader.close()

    check()


# ---------------------------------------------------------------- index.json

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                 max_size=4),
    max_leaves=12)


def valid_index(seed_set: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((seed_set / INDEX_NAME).read_text())
    return data


@pytest.mark.timeout(300)
def test_read_index_on_random_and_mutated_bytes(seed_set: Path, scratch: Path) -> None:
    seed = (seed_set / INDEX_NAME).read_bytes()
    folder = scratch / "index"
    folder.mkdir(exist_ok=True)

    @FUZZ
    @given(st.one_of(mutated(seed, block=64), st.binary(max_size=2000),
                     st.just(b"[" * 100_000), st.just(b'{"a": ' * 50_000)))
    def check(data: bytes) -> None:
        tried("index.json bytes")
        (folder / INDEX_NAME).write_bytes(data)
        index = only_our_errors(lambda: read_index(folder))
        if index is not None:
            assert sum(s.num_samples for s in index.shards) == index.num_samples

    check()


@pytest.mark.timeout(300)
def test_index_fields_replaced_by_any_json(seed_set: Path) -> None:
    base = valid_index(seed_set)
    keys = [*sorted(base), "shards.0", "shards.0.name", "shards.0.num_samples", "shards.1"]

    @FUZZ
    @given(st.sampled_from(keys), JSON_VALUES)
    def check(key: str, value: Any) -> None:
        tried("index.json fields")
        data = json.loads(json.dumps(base))
        parts = key.split(".")
        target = data
        for part in parts[:-1]:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if isinstance(target, list):
            target[int(parts[-1])] = value
        else:
            target[parts[-1]] = value
        index = only_our_errors(lambda: index_from_json(data, Path("i.json")))
        if index is not None:
            for shard in index.shards:
                assert isinstance(shard.num_samples, int) and shard.num_samples >= 0
                assert not shard.name.startswith("/") and ".." not in shard.name.split("/")

    check()


@pytest.mark.timeout(300)
def test_index_from_any_json(seed_set: Path) -> None:
    @FUZZ
    @given(JSON_VALUES)
    def check(value: Any) -> None:
        tried("index JSON values")
        only_our_errors(lambda: index_from_json(value, Path("i.json")))

    check()


# ---------------------------------------------------------------- the per-sample table


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", [SAMPLES_NAME, KEYS_NAME])
def test_open_dataset_on_mutated_tables(seed_set: Path, scratch: Path, name: str) -> None:
    """index.json is re-stamped with each mutant's digest (or not): the table digest
    alone would refuse nearly all of them before the structural checks are reached."""
    folder = scratch / f"table-{name}"
    shutil.copytree(seed_set, folder, dirs_exist_ok=True)
    seed = (seed_set / name).read_bytes()
    index_data = valid_index(seed_set)

    @FUZZ
    @given(st.one_of(mutated(seed, block=64), st.binary(max_size=1000)), st.booleans())
    def check(data: bytes, vouched: bool) -> None:
        tried(f"per-sample table ({name})")
        (folder / name).write_bytes(data)
        if vouched:
            tables = (folder / SAMPLES_NAME, folder / KEYS_NAME)
            index_data["extra"][TABLE_DIGEST] = files_digest(tables)
        (folder / INDEX_NAME).write_text(json.dumps(index_data))
        opened = only_our_errors(lambda: open_dataset(folder))
        if opened is not None:
            index, table = opened
            assert len(table) == index.num_samples
            for i in range(len(table)):
                key = only_our_errors(lambda i=i: table.key(i))
                assert key is None or isinstance(key, str)
            labels = np.asarray(table.labels)
            assert labels.min() >= 0 and labels.max() < len(index.class_names)

    check()
