"""The lmdb layout choice for fields: a key per field, or one record value per sample.

    python -m devtools.bench.lmdb_fields [--samples N] [--folder /tmp/lmdb-fields]

Builds both layouts (a caption and boxes beside a 2 KB stand-in image) and prints the
best of five passes of reading both fields of random samples (packer.formats._lmdb
quotes the result and keeps a key per field: stock py-lmdb reads each value).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import time
from pathlib import Path

import lmdb

from packer.core.fields import pack_record, unpack_record


def build(path: Path, keys: list[bytes], values: list[tuple[bytes, bytes]],
          per_field: bool) -> None:
    shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    env = lmdb.open(str(path), map_size=1 << 31)
    items: list[tuple[bytes, bytes]] = []
    for key, (caption, boxes) in zip(keys, values, strict=True):
        items.append((key, bytes(2000)))
        if per_field:
            items += [(key + b"\0boxes", boxes), (key + b"\0caption", caption)]
        else:
            items.append((key + b"\0fields", pack_record([caption, boxes])))
    with env.begin(write=True) as txn:
        txn.cursor().putmulti(items, append=True)
    env.close()


def time_reads(path: Path, keys: list[bytes], order: list[int], per_field: bool) -> float:
    """Best seconds a sample over five passes."""
    env = lmdb.open(str(path), readonly=True, lock=False)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for i in order:
            with env.begin() as txn:
                if per_field:
                    txn.get(keys[i] + b"\0caption"), txn.get(keys[i] + b"\0boxes")
                else:
                    unpack_record(txn.get(keys[i] + b"\0fields") or b"", 2)
        best = min(best, (time.perf_counter() - start) / len(order))
    env.close()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/lmdb-fields"))
    args = parser.parse_args()
    rng = random.Random(0)
    keys = sorted(f"class{i % 10}/img{i:06d}".encode() for i in range(args.samples))
    values = [((f"a photo of item {i} " * (i % 5 + 1)).encode(),
               json.dumps([[0.1 * k, 0.2, 0.3, 0.4] for k in range(i % 12)]).encode())
              for i in range(args.samples)]
    order = [rng.randrange(args.samples) for _ in range(args.samples)]
    for per_field, name in ((True, "a key per field"), (False, "one record value")):
        build(args.folder / name.replace(" ", "-"), keys, values, per_field)
        seconds = time_reads(args.folder / name.replace(" ", "-"), keys, order, per_field)
        print(f"{name}: {seconds * 1e6:.2f} us a sample")


if __name__ == "__main__":
    main()
