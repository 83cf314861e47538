"""Shared fixtures for the tests: generated image folders (helpers live in tests/helpers.py).

Everything is generated here (no committed binary data, no network). Session-scoped
sources are shared by many tests, so tests must never write into them; the contract
tests check that by hashing the tree before and after.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

from packer.imaging.crop_extension import ExtensionMissingError, require_extension
from packer.testing import make_sample_folder
from tests.helpers import (
    FORMATS,
    ODD_NAMES,
    jpeg_bytes,
    png_bytes,
    random_image,
    run_pack,
)
from tests.s3_server import endpoint, uploaded  # noqa: F401 - fixtures for the S3 tests
from tests.shm_pool_support import pack_small, read_by_key

# Property tests check what holds, not how fast: on a loaded 2-core machine hypothesis's
# default 200 ms deadline per example, and its too-slow check of data generation, fail
# tests that are right. Derandomized, without the example database: every run draws the
# same examples (seeded by the test's name), so a result never depends on the run.
settings.register_profile("packer", deadline=None, derandomize=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("packer")

# DataLoader start methods that start a fresh interpreter per worker (each imports torch):
# a test parametrized with one of them belongs to the `spawn` tier.
FRESH_START_METHODS = frozenset({"spawn", "forkserver"})


def starts_fresh_workers(item: pytest.Item) -> bool:
    """Whether one of the item's parameters (or a member of a tuple parameter) names a
    start method in FRESH_START_METHODS."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return False
    values: list[object] = []
    for value in callspec.params.values():
        values.extend(value if isinstance(value, (tuple, list)) else [value])
    return any(isinstance(value, str) and value in FRESH_START_METHODS for value in values)


@pytest.hookimpl(tryfirst=True)  # before -m deselects: the marks added here count
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Start-method matrices join the `spawn` tier: a case parametrized with spawn or
    forkserver is marked `spawn`, its fork and in-process cases stay in the default tier.

    Wall-clock thresholds (the `perf` marker) run only when asked for: `-m perf`, or
    PACKER_PERF=1; on a shared 2-core machine speed is measured by the benchmarks."""
    for item in items:
        if starts_fresh_workers(item):
            item.add_marker(pytest.mark.spawn)
    if "perf" in (config.option.markexpr or "") or os.environ.get("PACKER_PERF") == "1":
        return
    skip = pytest.mark.skip(reason="a wall-clock threshold: run with -m perf on a quiet machine")
    for item in items:
        if "perf" in item.keywords:
            item.add_marker(skip)


def pytest_sessionstart(session: pytest.Session) -> None:
    """PACKER_REQUIRE_EXTENSION=1 (scripts/test sets it where libjpeg-turbo's headers are):
    a compiled cropped decode that did not build, or failed its self-test, fails the run
    instead of skipping its tests."""
    try:
        require_extension()
    except ExtensionMissingError as exc:
        pytest.exit(f"error: {exc}", returncode=1)


@pytest.fixture(params=FORMATS)
def fmt(request: pytest.FixtureRequest) -> str:
    """Each format in turn: a test that takes `fmt` runs once per format. A test that
    covers only some overrides it with `@pytest.mark.parametrize("fmt", [...])`."""
    return str(request.param)


@pytest.fixture(scope="session")
def packed_wds(src: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wds dataset of `src` in 4 shards; tests copy it before damaging it."""
    dst = tmp_path_factory.mktemp("packed") / "out.wds"
    result = run_pack("convert", src, dst, "--to", "wds", "--shard-samples", "6", "--workers", "0")
    assert result.exit_code == 0, result.output
    return dst


@pytest.fixture(scope="session")
def pool_packed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """npy and wds copies of a small folder, for the shared-memory batch tests."""
    return pack_small(tmp_path_factory.mktemp("pool"), ("npy", "wds"))


@pytest.fixture(scope="session")
def pool_want(pool_packed: dict[str, Path]) -> dict[str, torch.Tensor]:
    """pool_packed's npy images by key, read without the pool."""
    return read_by_key(pool_packed["npy"])


@pytest.fixture(scope="session")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 small images in 3 classes (a few PNG among the JPEGs)."""
    return make_sample_folder(tmp_path_factory.mktemp("plain") / "src", count=24, classes=3,
                              min_side=48, max_side=120)


@pytest.fixture(scope="session")
def odd_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """File and folder names that stress key encoding, in two classes (one non-ASCII)."""
    root = tmp_path_factory.mktemp("odd") / "src"
    for n, name in enumerate(ODD_NAMES):
        path = root / ("cls" if n % 2 else "klasse ß") / name
        path.parent.mkdir(parents=True, exist_ok=True)
        image = random_image(40 + n, 56 - n, seed=n)
        path.write_bytes(png_bytes(image) if name.endswith(".png") else jpeg_bytes(image))
    return root


@pytest.fixture(scope="session")
def mixed_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 images plus two bad inputs (zero bytes, text named .jpg): for resume and kills."""
    root = make_sample_folder(tmp_path_factory.mktemp("mixed") / "src", count=40, classes=3,
                              min_side=40, max_side=96, seed=7)
    (root / "class_01" / "img_000013_empty.jpg").write_bytes(b"")
    (root / "class_02" / "img_000026_text.jpg").write_text("not an image\n")
    return root


@pytest.fixture
def writable_src(tmp_path: Path, src: Path) -> Iterator[Path]:
    """A private copy of `src` that a test may change."""
    copy = tmp_path / "src-copy"
    shutil.copytree(src, copy)
    yield copy
