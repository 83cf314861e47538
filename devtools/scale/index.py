"""A million-sample dataset in seconds, and what its index costs to load.

Encoding a million real images takes too long for a test, and the index is what grows
with the sample count, so `make_tiny_dataset` writes a valid npy dataset of 1x1 RGB
images directly: the same files, header, per-sample table, digests and index.json a
conversion writes (`pack verify` passes on it). `index_load_cost` opens its index in a
fresh process and reports seconds and bytes.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import xxhash

from packer.conversion.job import effective_options
from packer.core.index import (
    REJECTS_NAME,
    SAMPLE_DTYPE,
    Index,
    SampleTable,
    ShardInfo,
    save_table,
    write_index,
)
from packer.encode import EncodeOptions
from packer.formats._npy import HEADER_BYTES, IMAGES, LABELS, npy_header
from packer.storage.files import write_atomic

SIDE = 1
KEY_WIDTH = 7  # img_0000000: fixed-width keys sort in sample order


def make_tiny_dataset(out: str | Path, num_samples: int, classes: int = 10,
                      seed: int = 0) -> Path:
    """Write an npy dataset of `num_samples` random 1x1 images in `classes` classes."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=False)
    pixels = np.random.default_rng(seed).integers(0, 256, (num_samples, SIDE, SIDE, 3),
                                                  dtype=np.uint8)
    labels = (np.arange(num_samples, dtype=np.int64) * classes) // max(num_samples, 1)
    sample_bytes = SIDE * SIDE * 3
    flat = pixels.reshape(num_samples, sample_bytes)
    rows = np.zeros(num_samples, dtype=SAMPLE_DTYPE)
    rows["label"] = labels
    rows["offset"] = HEADER_BYTES + np.arange(num_samples, dtype=np.int64) * sample_bytes
    rows["size"] = sample_bytes
    rows["digest"] = np.frombuffer(b"".join(xxhash.xxh3_128_digest(row.tobytes())
                                            for row in flat), np.uint8).reshape(-1, 16)
    keys = "".join(f"class_{label:02d}/img_{i:0{KEY_WIDTH}d}"
                   for i, label in enumerate(labels.tolist())).encode("ascii")
    key_length = len(keys) // max(num_samples, 1)
    rows["key_start"] = np.arange(num_samples, dtype=np.int64) * key_length
    images = npy_header((num_samples, SIDE, SIDE, 3)) + pixels.tobytes()
    write_atomic(folder / IMAGES, images)
    np.save(folder / LABELS, labels)
    save_table(folder, SampleTable(rows, np.frombuffer(keys, np.uint8)))
    write_atomic(folder / REJECTS_NAME, b"")
    options = effective_options("npy", EncodeOptions(size=(SIDE, SIDE)))
    write_index(folder, Index(
        format="npy", num_samples=num_samples,
        class_names=tuple(f"class_{c:02d}" for c in range(classes)),
        shards=(ShardInfo(IMAGES, num_samples, len(images),
                          hashlib.sha256(images).hexdigest()),),
        encode=options.to_json(), image_size=(SIDE, SIDE)))
    return folder


LOAD = """
import json, sys, time, tracemalloc
import psutil
import packer.formats  # imports are not the index's cost
from packer.core.index import open_dataset
process = psutil.Process()
rss = process.memory_info().rss
tracemalloc.start()
start = time.perf_counter()
index, table = open_dataset(sys.argv[1])
n = len(table)
first, last, label = table.key(0), table.key(n - 1), int(table.labels[n // 2])
seconds = time.perf_counter() - start
peak = tracemalloc.get_traced_memory()[1]
print(json.dumps({"samples": n, "seconds": seconds, "peak_bytes": peak,
                  "rss_bytes": process.memory_info().rss - rss}))
"""


def index_load_cost(folder: Path) -> dict[str, float]:
    """Open `folder`'s index in a fresh process: seconds, peak traced bytes, RSS growth."""
    done = subprocess.run([sys.executable, "-c", LOAD, str(folder)], capture_output=True,
                          text=True, check=True)
    cost: dict[str, float] = json.loads(done.stdout)
    return cost
