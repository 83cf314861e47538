"""The peers the benchmarks compare with: litdata and mosaicml-streaming, each writing
the same photos with its own writer and reading them with its own recommended loader.

    litdata             litdata.optimize(fn, inputs, output_dir) -> StreamingDataset
                        (transform= decodes) -> StreamingDataLoader
    mosaicml-streaming  streaming.MDSWriter(columns={"image": "bytes", "label": "int"})
                        -> streaming.StreamingDataset (a subclass's __getitem__ decodes,
                        as its docs show) -> torch DataLoader

Both store the file bytes as they are (no re-encode), so a raw read of theirs is the
same work as one of ours; both shuffle, as a training read does. Either may be missing
from an environment: `missing(peer)` says so in one line and the harness skips its rows.
Written copies are cached beside the packed ones (a `.complete` marker holds the count).
"""

from __future__ import annotations

import gc
import importlib.util
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devtools.bench.baselines import Size, pil_bytes_to_tensor
from packer.source.scan import scan

if TYPE_CHECKING:
    from devtools.bench.pack import Timing

PEERS = {"litdata": "litdata", "mosaic": "streaming"}  # peer id -> module it needs
NAMES = {"litdata": "litdata", "mosaic": "mosaicml-streaming"}
CHUNK_BYTES = 64 << 20  # both writers' shard size: ~ our wds shards at 10,000 photos


def missing(peer: str) -> str | None:
    """None when the peer imports here, else the one-line reason its rows are skipped."""
    module = PEERS[peer]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if found:
        try:
            __import__(module)
            return None
        except Exception as error:  # a broken install: skip, say why
            return f"{NAMES[peer]} skipped: import {module} failed ({error})"
    return f"{NAMES[peer]} skipped: not installed (pip install {NAMES[peer]})"


def _module(name: str) -> Any:
    """A peer's module, imported when used (an optional dependency, untyped)."""
    return importlib.import_module(name)


def items_of(src: Path) -> list[tuple[str, int]]:
    """(path, label) of every image of src, in sample order."""
    return [(item.path, item.label) for item in scan(src).items]


def _done(dst: Path, count: int) -> bool:
    marker = dst / ".complete"
    return marker.exists() and marker.read_text() == str(count)


def _mark(dst: Path, count: int) -> None:
    (dst / ".complete").write_text(str(count))


def litdata_item(item: tuple[str, int]) -> dict[str, Any]:
    """optimize's fn: one sample, the file bytes as they are and the label."""
    path, label = item
    with open(path, "rb") as handle:
        return {"image": handle.read(), "label": label}


def write_litdata(items: Sequence[tuple[str, int]], dst: Path,
                  workers: int | None = None) -> None:
    """litdata.optimize into a fresh dst: its worker processes (one per core by default),
    forked, so that it runs from any main module (spawn re-imports it)."""
    litdata = _module("litdata")
    shutil.rmtree(dst, ignore_errors=True)
    litdata.optimize(fn=litdata_item, inputs=list(items), output_dir=str(dst),
                     chunk_bytes=CHUNK_BYTES, num_workers=workers, mode="overwrite",
                     verbose=False, reorder_files=False, start_method="fork")


def write_mosaic(items: Sequence[tuple[str, int]], dst: Path) -> None:
    """streaming.MDSWriter into a fresh dst (one process, as its docs write)."""
    shutil.rmtree(dst, ignore_errors=True)
    with _module("streaming").MDSWriter(out=str(dst), columns={"image": "bytes", "label": "int"},
                   size_limit=CHUNK_BYTES) as sink:
        for path, label in items:
            with open(path, "rb") as handle:
                sink.write({"image": handle.read(), "label": label})


def written(peer: str, src: Path, dst: Path) -> Path:
    """The peer's copy of src in dst, written once (reused while its count matches)."""
    items = items_of(src)
    if not _done(dst, len(items)):
        (write_litdata if peer == "litdata" else write_mosaic)(items, dst)
        _mark(dst, len(items))
    return dst


class _Decode:
    """A picklable sample map: raw keeps the bytes, rgb8 decodes + resizes with PIL.

    litdata (0.2.7x) gives a bytes column as a memoryview over its chunk, which neither
    pickles across the worker queue nor collates: raw makes it bytes, as a user must.
    """

    def __init__(self, size: Size | None) -> None:
        self.size = size

    def __call__(self, sample: dict[str, Any]) -> tuple[Any, int]:
        image = sample["image"]
        if isinstance(image, memoryview):
            image = image.tobytes()
        if self.size is not None:
            image = pil_bytes_to_tensor(image, self.size)
        return image, int(sample["label"])


def litdata_loader(path: Path, size: Size | None, batch_size: int,
                   workers: int) -> Iterable[Any]:
    """litdata's recommended read: StreamingDataset(shuffle) + StreamingDataLoader."""
    litdata = _module("litdata")
    dataset = litdata.StreamingDataset(str(path), shuffle=True, transform=_Decode(size))
    loader: Iterable[Any] = litdata.StreamingDataLoader(dataset, batch_size=batch_size,
                                                num_workers=workers,
                                                persistent_workers=workers > 0)
    return loader


def _mosaic_class() -> type:
    base: type = _module("streaming").StreamingDataset

    class MosaicDataset(base):  # type: ignore[misc]
        """streaming.StreamingDataset with the decode in __getitem__, as its docs do."""

        def __init__(self, local: str, size: Size | None, batch_size: int) -> None:
            super().__init__(local=local, shuffle=True, batch_size=batch_size)
            self.decode = _Decode(size)

        def __getitem__(self, index: int) -> tuple[Any, int]:
            return self.decode(super().__getitem__(index))

    return MosaicDataset


def mosaic_loader(path: Path, size: Size | None, batch_size: int,
                  workers: int) -> Iterable[Any]:
    """mosaicml-streaming's recommended read: its StreamingDataset + a torch DataLoader.

    One StreamingDataset per local folder may live in a process: the last run's is
    collected and its shared memory cleaned first."""
    from torch.utils.data import DataLoader

    gc.collect()
    _module("streaming.base.util").clean_stale_shared_memory()
    dataset = _mosaic_class()(str(path), size, batch_size)
    return DataLoader(dataset, batch_size=batch_size, num_workers=workers,
                      persistent_workers=workers > 0)


def timed_write(peer: str, src: Path, dst: Path) -> Timing:
    """One write of src by the peer into a fresh dst (then removed): the pack baseline."""
    from devtools.bench.pack import timed

    items = items_of(src)
    action = (lambda: write_litdata(items, dst)) if peer == "litdata" else \
        (lambda: write_mosaic(items, dst))
    timing = timed(action)
    shutil.rmtree(dst, ignore_errors=True)
    return timing
