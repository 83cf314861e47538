"""What a caption and boxes cost per sample, per format: CPU microseconds side by side.

    python devtools/bench/field_cost.py WORK [--passes 7] [--formats wds,lmdb,hdf5,npy]
    python devtools/bench/field_cost.py WORK --against OTHER_CHECKOUT [--rounds 3]

WORK holds `<fmt>-fields` copies of one photo folder packed with a caption and boxes per
image (devtools.bench.fields: `field_manifest`, then `pack convert`). For each format and
decode (rgb8 at 224x224, raw), the same shuffled samples are read as image + label and
as a dict with caption + boxes, batch 64, through `__getitems__` + `readers.collate`:
exactly what a DataLoader without workers does per batch. The two alternate batch by
batch, so load on a shared machine falls on both alike; each figure is the median of
the passes, in CPU seconds of this process (what other tenants disturb least), the
overhead the median of each pass's own.

This file imports only the public `readers` API and sits apart from the package on
purpose: `PYTHONPATH=<other checkout> python devtools/bench/field_cost.py` measures
another version of the library with the same code. Prints one JSON line per case;
with `--against`, runs itself in turn under this checkout and the other one, `--rounds`
times each (this one, the other, this one, ...), and prints a markdown table of the
medians of the rounds, both versions side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

BATCH = 64
FIELDS = ("caption", "boxes")
SIZE = (224, 224)


def one_pass(plain: Any, dicts: Any, order: list[int],
             collate: Callable[[Any], Any]) -> tuple[float, float]:
    """CPU seconds to read and collate every batch of `order`, plain and with fields,
    batch by batch in turn (which goes first alternates), so that the two share the
    machine's moment: decoding JPEGs varies more between seconds than fields cost."""
    spent = [0.0, 0.0]
    for number, at in enumerate(range(0, len(order) - BATCH + 1, BATCH)):
        batch = order[at : at + BATCH]
        for which in ((0, 1) if number % 2 == 0 else (1, 0)):
            start = time.process_time()
            collate((plain, dicts)[which].__getitems__(batch))
            spent[which] += time.process_time() - start
    return spent[0], spent[1]


def measure(path: Path, decode: str, passes: int, count: int) -> dict[str, Any]:
    """Median CPU microseconds a sample, plain and with fields, of one packed copy.

    One torch thread, as in a DataLoader worker: the resize's idle threads otherwise
    spin on the CPU clock."""
    import torch

    from readers import PackedDataset, collate

    torch.set_num_threads(1)

    size = None if decode == "raw" or path.name.startswith("npy") else SIZE
    plain = PackedDataset(path, decode=decode, size=size)  # type: ignore[arg-type]
    dicts = PackedDataset(path, decode=decode, size=size, fields=FIELDS)  # type: ignore[arg-type]
    order = np.random.default_rng(0).permutation(len(plain))[:count].tolist()
    used = len(order) - len(order) % BATCH
    one_pass(plain, dicts, order, collate)  # warm both
    runs = [one_pass(plain, dicts, order, collate) for _ in range(passes)]
    plain_us, fields_us = (statistics.median(run[k] for run in runs) / used * 1e6
                           for k in (0, 1))
    overhead = statistics.median(100 * (run[1] - run[0]) / run[0] for run in runs)
    return {"format": path.name.split("-")[0], "decode": decode, "samples": used,
            "plain_us": round(plain_us, 2), "fields_us": round(fields_us, 2),
            "overhead_pct": round(overhead, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("--passes", type=int, default=7)
    parser.add_argument("--formats", default="wds,lmdb,hdf5,npy")
    parser.add_argument("--decodes", default="rgb8,raw")
    parser.add_argument("--count", type=int, default=448, help="samples a pass (raw, npy)")
    parser.add_argument("--jpeg-count", type=int, default=192,
                        help="samples a pass when rgb8 decodes JPEG (slow per sample)")
    parser.add_argument("--against", type=Path, help="another checkout to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.against is not None:
        compare(args)
        return
    for fmt in args.formats.split(","):
        for decode in args.decodes.split(","):
            jpeg = decode == "rgb8" and fmt != "npy"
            row = measure(args.work / f"{fmt}-fields", decode, args.passes,
                          args.jpeg_count if jpeg else args.count)
            print(json.dumps(row), flush=True)


def compare(args: argparse.Namespace) -> None:
    """Rounds of this checkout and the other in turn; a table of medians."""
    here = Path(__file__).resolve().parents[2]
    own = [str(args.work), "--passes", str(args.passes), "--formats", args.formats,
           "--decodes", args.decodes, "--count", str(args.count),
           "--jpeg-count", str(args.jpeg_count)]
    rows: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for _ in range(args.rounds):
        for name, checkout in (("after", here), ("before", args.against.resolve())):
            env = {**os.environ, "PYTHONPATH": str(checkout)}
            done = subprocess.run([sys.executable, __file__, *own], env=env, check=True,
                                  capture_output=True, text=True)
            rows[name] += [json.loads(line) for line in done.stdout.splitlines()]
    print(table(rows, args.against))


def table(rows: dict[str, list[dict[str, Any]]], against: Path) -> str:
    """Medians over the rounds, per format and decode: us a sample and overhead, both."""
    lines = ["| format | decode | before: plain / fields us, overhead | after: plain / fields "
             "us, overhead |", "|---|---|---|---|"]
    cases = list(dict.fromkeys((row["format"], row["decode"]) for row in rows["after"]))
    for fmt, decode in cases:
        cells = []
        for name in ("before", "after"):
            runs = [r for r in rows[name] if (r["format"], r["decode"]) == (fmt, decode)]
            plain, fields, pct = (statistics.median(r[k] for r in runs)
                                  for k in ("plain_us", "fields_us", "overhead_pct"))
            cells.append(f"{plain:.1f} / {fields:.1f}, {pct:+.0f}%")
        lines.append(f"| {fmt} | {decode} | {cells[0]} | {cells[1]} |")
    count = len(rows["after"]) // max(1, len(cases))
    lines.append(f"\n{count} rounds, each pairing {against} (before) with this checkout "
                 "(after); CPU us a sample, medians")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
