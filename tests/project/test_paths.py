"""The two paths a maintainer walks, traced: the product modules one sample crosses from
PackedDataset to a collated batch, and `pack convert` from the command line to index.json.

Each bound is the count today; a change that adds a hop fails here, one that removes hops
lowers the bound (docs/architecture.md lists the modules in the order they are entered).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from click.testing import CliRunner
from torch.utils.data import DataLoader

from pack_cli import main
from readers import PackedDataset, collate
from tests.helpers import pack_wds

PRODUCT = ("packer", "readers", "pack_cli")
READ_BOUND = 19  # modules from PackedDataset(path) to a collated batch
BATCH_BOUND = 16  # modules a batch after the first crosses (what every step of an epoch repeats)
CONVERT_BOUND = 30  # modules from `pack convert SRC DST --to lmdb` to index.json


def modules_crossed(action: Callable[[], object]) -> list[str]:
    """The product modules whose functions `action` calls (in every thread), in the order
    they are first entered."""
    entered: dict[str, None] = {}

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            name = str(frame.f_globals.get("__name__", ""))
            if name.split(".")[0] in PRODUCT:
                entered.setdefault(name)

    threading.setprofile(profile)  # type: ignore[arg-type]
    sys.setprofile(profile)  # type: ignore[arg-type]
    try:
        action()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    return list(entered)


@pytest.fixture(scope="module")
def wds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pack_wds(tmp_path_factory.mktemp("paths"), 12, 6, min_side=16, max_side=40)


@pytest.mark.parametrize("decode", ["rgb8", "raw"])
def test_one_sample_to_a_batch_crosses_at_most_the_bound(wds: Path, decode: str) -> None:
    def read() -> object:
        options: dict[str, Any] = {"size": (16, 16)} if decode == "rgb8" else {}
        dataset = PackedDataset(wds, decode=decode, **options)  # type: ignore[arg-type]
        return next(iter(DataLoader(dataset, batch_size=4, collate_fn=collate)))

    read()  # imports and per-process caches first: the path is what a pass repeats
    crossed = modules_crossed(read)
    assert len(crossed) <= READ_BOUND, "\n".join(crossed)
    assert crossed[0] == "readers.datasets" and "readers.batching.collate" in crossed


@pytest.mark.parametrize("decode", ["rgb8", "raw"])
def test_each_next_batch_crosses_at_most_the_batch_bound(wds: Path, decode: str) -> None:
    options: dict[str, Any] = {"size": (16, 16)} if decode == "rgb8" else {}
    dataset = PackedDataset(wds, decode=decode, **options)  # type: ignore[arg-type]
    batches = iter(DataLoader(dataset, batch_size=4, collate_fn=collate))
    next(batches)  # the first batch opens the handles
    crossed = modules_crossed(lambda: next(batches))
    assert len(crossed) <= BATCH_BOUND, "\n".join(crossed)
    assert "readers.batching.collate" in crossed


def test_pack_convert_reaches_the_index_within_the_bound(tmp_path: Path) -> None:
    from packer.testing import make_sample_folder

    src = make_sample_folder(tmp_path / "src", count=6, classes=2, min_side=16, max_side=24)
    dst = tmp_path / "out.lmdb"

    def convert(to: Path) -> object:
        return CliRunner().invoke(main, ["convert", str(src), str(to), "--to", "lmdb", "-q",
                                         "--workers", "0"])

    convert(tmp_path / "first.lmdb")  # imports first, as for reading: the path is the run's
    crossed = modules_crossed(lambda: convert(dst))
    assert (dst / "index.json").exists()
    assert len(crossed) <= CONVERT_BOUND, "\n".join(crossed)
    assert crossed[0] == "pack_cli"
