"""Two JSONL manifests of one photo folder, with and without two fields (a caption and
boxes), for timing `pack convert` with fields against the same images without.

    python -m devtools.bench.fields_manifest PHOTOS OUT
    flock /tmp/bench.lock time pack convert OUT/fields.jsonl D1 --to wds --overwrite -q
    flock /tmp/bench.lock time pack convert OUT/plain.jsonl D2 --to wds --overwrite -q
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def write_manifests(photos: Path, out: Path) -> tuple[Path, Path]:
    """out/plain.jsonl (path, label) and out/fields.jsonl (+ caption, boxes) of `photos`."""
    out.mkdir(parents=True, exist_ok=True)
    classes = sorted(p.name for p in photos.iterdir() if p.is_dir())
    plain, fields = [], []
    for label, name in enumerate(classes):
        for n, image in enumerate(sorted((photos / name).iterdir())):
            row = {"path": str(image.resolve()), "label": label}
            plain.append(json.dumps(row))
            boxes = [[0.1 * k, 0.2 * k, 0.3 + k, 0.4 + k] for k in range(n % 12)]
            caption = f"a photo of a {name}, number {n}, " + "with some words " * (n % 8)
            fields.append(json.dumps({**row, "caption": caption, "boxes": boxes}))
    paths = out / "plain.jsonl", out / "fields.jsonl"
    for path, lines in zip(paths, (plain, fields), strict=True):
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("photos", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    for path in write_manifests(args.photos, args.out):
        print(path)


if __name__ == "__main__":
    main()
