"""The cases of `scripts/bench_read.py --suite peers`: our readers against the peers.

    raw bytes + label   ours: PackedIterableDataset(decode="raw") over wds and
                        PackedDataset(decode="raw") + shuffle over lmdb, both with
                        collate_fn=readers.collate (a batch is a RawBatch); stock
                        webdataset, litdata and mosaicml-streaming: their bytes + label
    rgb8 224x224        the same readers decoding (the peers: PIL in their transform),
                        and the PIL ImageFolder
    npy                 PackedDataset + readers.collate against a one-thread memcpy
    fields              image + label + caption + 0-7 boxes against image + label (raw)

Goals, as targets of the table: raw bytes >= 3x the faster of litdata and
mosaicml-streaming and >= 3.5x stock webdataset; npy >= 0.6x memcpy; fields cost at
most 15% over image + label.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from devtools.bench import baselines as base
from devtools.bench import peers
from packer.core.index import read_index

RAW_TARGETS = (("litdata-raw", 3.0), ("mosaic-raw", 3.0), ("wds-stock-raw", 3.5))
FIELDS_TARGET = 1 / 1.15  # fields rate / plain rate, at least
NPY_TARGET = 0.6  # x memcpy


def shard_urls(folder: Path) -> list[Path]:
    """The tar shards of a packed wds dataset, for stock webdataset to read."""
    return [folder / shard.name for shard in read_index(folder).shards]


def folder_and_stock_cases(case: Callable[..., Any], size: tuple[int, int], src: Path,
                           packed: dict[str, Path]) -> list[Any]:
    """(a) a PIL ImageFolder and (b) stock webdataset over our shards, decoding to `size`:
    the baselines of every suite."""
    shown = f"rgb8 {size[0]}x{size[1]}"
    cases = [case("pil", "PIL ImageFolder (a)", "folder", shown,
                  lambda: base.PilFolderDataset(src, size), shuffle=True)]
    if "wds" in packed:
        urls = shard_urls(packed["wds"])
        cases.append(case("wds-stock", "stock webdataset (b)", "wds", shown,
                          lambda: base.stock_webdataset(urls, size)))
    return cases


def baseline_cases(case: Callable[..., Any], settings: Any, src: Path,
                   packed: dict[str, Path]) -> list[Any]:
    """PIL ImageFolder, stock webdataset (rgb8 and raw), litdata and mosaicml-streaming
    (each where it is installed), and memcpy of the npy bytes."""
    cases = folder_and_stock_cases(case, settings.size, src, packed)
    if "wds" in packed:
        urls = shard_urls(packed["wds"])
        cases.append(case("wds-stock-raw", "stock webdataset (b)", "wds", "raw",
                          lambda: base.stock_webdataset_raw(urls)))
    cases += peer_cases(case, settings, src, packed)
    if "npy" in packed:
        npy = packed["npy"]
        cases.append(case("memcpy", "memcpy, 1 thread (d)", "npy", "bytes",
                          lambda: base.memcpy_rate(npy / "images.npy", settings.batch_size,
                                                   settings.raw_epochs or settings.epochs)))
    return cases


def peer_cases(case: Callable[..., Any], settings: Any, src: Path,
               packed: dict[str, Path]) -> list[Any]:
    """litdata and mosaicml-streaming, raw and rgb8, through their own loaders, their
    copies beside the packed ones; a peer that does not import here has no rows (`notes`
    says why)."""
    size = settings.size
    beside = next(iter(packed.values())).parent if packed else settings.work / src.name
    cases = []
    for peer, loader in (("litdata", peers.litdata_loader), ("mosaic", peers.mosaic_loader)):
        if peers.missing(peer) is not None:
            continue
        path = peers.written(peer, src, beside / peer)
        for decode, decode_size, shown in (("raw", None, "raw"),
                                           ("rgb8", size, f"rgb8 {size[0]}x{size[1]}")):
            cases.append(case(
                f"{peer}-{decode}", peers.NAMES[peer], peer, shown,
                lambda lo=loader, p=path, s=decode_size: lo(p, s, settings.batch_size,
                                                            settings.num_workers),
                own_loader=True))
    return cases


def notes() -> list[str]:
    """One line per peer whose rows are missing, and why."""
    return [note for note in (peers.missing(peer) for peer in peers.PEERS) if note]


def our_peer_cases(case: Callable[..., Any], settings: Any,
                   packed: dict[str, Path]) -> list[Any]:
    """Our raw and rgb8 readers with readers.collate, npy, and the fields' cost (raw)."""
    from readers import PackedDataset, PackedIterableDataset, collate

    size = settings.size
    shown = f"rgb8 {size[0]}x{size[1]}"
    readers = (("wds", "PackedIterableDataset + readers.collate", PackedIterableDataset, False),
               ("lmdb", "PackedDataset + readers.collate", PackedDataset, True))
    cases = []
    for fmt, name, cls, shuffle in readers:
        if fmt not in packed:
            continue
        path = packed[fmt]
        cases.append(case(f"{fmt}-{cls.__name__}-collate-raw", name, fmt, "raw",
                          lambda c=cls, p=path: c(p, decode="raw"), shuffle,
                          RAW_TARGETS, collate))
        cases.append(case(f"{fmt}-{cls.__name__}-collate-rgb8", name, fmt, shown,
                          lambda c=cls, p=path: c(p, size=size), shuffle,
                          (("pil", 3.0),), collate))
    if "npy" in packed:
        npy = packed["npy"]
        cases.append(case("npy-PackedDataset-collate-rgb8", "PackedDataset + readers.collate",
                          "npy", "rgb8 (stored)", lambda: PackedDataset(npy), True,
                          (("memcpy", NPY_TARGET),), collate))
    from devtools.bench.fields import field_cases

    return cases + field_cases(case, packed, size, decodes=("raw",),
                               formats=("wds", "lmdb"), target=FIELDS_TARGET)
