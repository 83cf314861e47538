#!/usr/bin/env python3
"""Reading a wds pack from S3 (moto's server on loopback) vs local disk, through a DataLoader.

    python scripts/bench_remote.py /tmp/photos10k --work /tmp/bench-remote [--runs 3]
        [--workers 2] [--shard-size 16MB] [--latency-ms 0]

Starts `moto_server` as a separate process on 127.0.0.1 (an in-memory S3 API; never a
real AWS endpoint), packs SRC locally and into s3://bench/photos.wds (timing both), then
reads every sample with decode="raw" and with rgb8 at 224x224, from local disk, from S3
with an empty cache (cold: every shard downloaded) and from S3 again (warm: the cache
holds every shard). Prints a markdown table of images/s, medians of --runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader

import readers.remote._cache as remote_cache
from pack_cli._params import parse_bytes
from packer import ConvertOptions, convert
from packer.formats.base import ShardOptions
from readers import PackedIterableDataset
from readers.options import PartitionOptions, RemoteOptions


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_moto() -> subprocess.Popen[bytes]:
    port = free_port()
    server = Path(sys.executable).parent / "moto_server"
    proc = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.environ.update(AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}", AWS_ACCESS_KEY_ID="bench",
                      AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1")
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("moto_server did not start")


def read_all(path: str | Path, decode: Any, size: tuple[int, int] | None, workers: int,
             cache_dir: Path | None, prefetch_shards: int = 2) -> float:
    """Images per second over one full pass (worker start-up included)."""
    remote = None if cache_dir is None else RemoteOptions(cache_dir=cache_dir,
                                                          prefetch_shards=prefetch_shards)
    ds = PackedIterableDataset(path, shuffle=True, decode=decode, size=size,
                               partition=PartitionOptions(drop_last=False), remote=remote)
    loader = DataLoader(ds, batch_size=64, num_workers=workers, collate_fn=len)
    start = time.perf_counter()
    count = sum(loader)
    return count / (time.perf_counter() - start)


def add_latency(seconds: float) -> None:
    """Make every shard download wait `seconds` first (DataLoader workers fork: inherited)."""
    real = remote_cache.fetch

    def slow(*args: Any, **kwargs: Any) -> None:
        time.sleep(seconds)
        real(*args, **kwargs)

    remote_cache.fetch = slow  # type: ignore[assignment]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-remote"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shard-size", default="16MB")
    parser.add_argument("--latency-ms", type=float, default=0.0,
                        help="add this wait to every shard download, as a far-away store "
                             "would (loopback has none)")
    args = parser.parse_args()
    if args.latency_ms:
        add_latency(args.latency_ms / 1000)
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    server = start_moto()
    try:
        import s3fs

        s3fs.S3FileSystem().mkdir("bench")
        run = ConvertOptions(shards=ShardOptions(parse_bytes(args.shard_size)))
        local, url = args.work / "photos.wds", "s3://bench/photos.wds"
        timings = {}
        for name, dst in (("local disk", local), ("S3 (moto, loopback)", url)):
            start = time.perf_counter()
            index = convert(args.src, dst, "wds", run=run)
            timings[name] = time.perf_counter() - start
        print(f"{index.num_samples} images, {len(index.shards)} shards, "
              f"{sum(s.num_bytes for s in index.shards) / 1e6:.0f} MB; pack: "
              + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()), flush=True)
        print("| decode | local disk | S3 cold cache | S3 cold, no prefetch | S3 warm cache |")
        print("| --- | --- | --- | --- | --- |")
        for decode, size in (("raw", None), ("rgb8", (224, 224))):
            rates: dict[str, list[float]] = {"local": [], "cold": [], "cold, no prefetch": [],
                                             "warm": []}
            for attempt in range(args.runs):
                cache = args.work / f"cache-{decode}-{attempt}"
                rates["local"].append(read_all(local, decode, size, args.workers, None))
                rates["cold"].append(read_all(url, decode, size, args.workers, cache))
                rates["cold, no prefetch"].append(read_all(
                    url, decode, size, args.workers, args.work / f"cold-{decode}-{attempt}",
                    prefetch_shards=0))
                rates["warm"].append(read_all(url, decode, size, args.workers, cache))
            print(f"runs ({decode}): " + "; ".join(
                f"{k} " + ", ".join(f"{r:.0f}" for r in v) for k, v in rates.items()),
                  file=sys.stderr, flush=True)
            label = decode if size is None else f"{decode} {size[0]}x{size[1]}"
            cells = " | ".join(f"{statistics.median(r):,.0f} img/s" for r in rates.values())
            print(f"| {label} | {cells} |", flush=True)
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
