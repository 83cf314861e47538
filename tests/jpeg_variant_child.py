"""Child processes of tests/packing/test_jpeg_variants.py: whatever a segfault would kill
runs here, so the test sees the exit status (-11) and the input that caused it (each
stage names the input it is at on stderr before touching it) instead of dying with it.

    python -m tests.jpeg_variant_child decoders FOLDER
        every decode entry point on every *.jpg below FOLDER, the native ones forced
        (a size from the frame header where fast_size declines); stdout: JSON
        {file name: whether fast_size took it}
    python -m tests.jpeg_variant_child readers OUT DATASET...
        both readers, with and without size= and augment=, in every decode mode; stdout:
        JSON {dataset: {reading: number of samples or the error}}; the pass-through
        pixels of PackedDataset go to OUT/<dataset name>.npz (arrays in key order,
        the keys in OUT/<dataset name>.json)
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from packer.imaging import jpeg, pillow
from packer.imaging.crop_extension import extension
from packer.imaging.jpeg_frame import read_frame
from readers import PackedDataset, PackedIterableDataset
from readers.augment import RandomResizedCrop
from readers.decoding.crop_decode import decode_augmented
from readers.decoding.decode import decode

CROP = RandomResizedCrop(6, scale=(0.3, 0.9))


def _quietly(call: Callable[[], object]) -> None:
    """Run one decode; a Python exception is a refusal, which is fine: only a crash is not."""
    with contextlib.suppress(Exception):
        call()


def _native_calls(data: bytes, full: tuple[int, int]) -> list[Callable[[], object]]:
    """The native entry points, called whatever fast_size said (their own guard decides)."""
    crop = extension().decode
    calls: list[Callable[[], object]] = [
        lambda: jpeg.decodes(data), lambda: jpeg.decode_gray(data, (8, 9)),
        lambda: jpeg.load_rgb_fast(data, (8, 8), "crop"),
        lambda: jpeg.decode_rgb(data, (1, 1), 1.0, colorspace="GRAY")]
    for factor in (1, 2, 8):
        small = jpeg.scaled_size(full, factor)
        box = (small[0] // 3, small[1] // 3, max(1, small[0] // 2), max(1, small[1] // 2))
        calls += [partial(jpeg.decode_scaled, data, full, factor),
                  partial(jpeg.decode_box, data, full, factor, box)]
        if crop is not None:
            calls.append(partial(crop, data, *box, factor))
    return calls


def _every_decoder(data: bytes) -> bool:
    fast = jpeg.fast_size(data)
    frame = read_frame(data)
    full = fast or ((frame.height, frame.width) if frame else (16, 16))
    calls = [*_native_calls(data, full),
             lambda: pillow.check_decodes(data), lambda: pillow.load_rgb(data, size=(8, 8)),
             lambda: decode(data, "rgb8"), lambda: decode(data, "rgb8", (8, 8)),
             lambda: decode(memoryview(data), "pil", (5, 7)),
             lambda: decode_augmented(data, CROP, (0, 0, 1))]
    for call in calls:
        _quietly(call)
    return fast is not None


def decoders(folder: Path) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for path in sorted(folder.rglob("*.jpg")):
        print(path.name, file=sys.stderr, flush=True)
        out[path.name] = _every_decoder(path.read_bytes())
    return out


def _count(name: str, samples: PackedDataset | PackedIterableDataset) -> int | str:
    """How many samples a reader yields; the error, where one stops it."""
    print(name, file=sys.stderr, flush=True)
    every: Iterable[Any] = (iter(samples) if isinstance(samples, PackedIterableDataset)
                            else (samples[i] for i in range(len(samples))))
    try:
        return sum(1 for _ in every)
    except Exception as exc:  # a sample no decoder takes (a dataset packed with --check none)
        return f"{type(exc).__name__}: {exc}"


def _pixels(out: Path, path: Path) -> int | str:
    """PackedDataset's rgb8 pixels of every sample into OUT; the undecodable keys listed."""
    ds = PackedDataset(path, with_keys=True)
    keys, arrays, failed = [], [], []
    for i in range(len(ds)):
        try:
            image, _, key = ds[i]
        except Exception as exc:
            failed.append(f"{i}: {type(exc).__name__}")
            continue
        keys.append(key)
        arrays.append(np.asarray(image).transpose(1, 2, 0))
    np.savez(out / f"{path.name}.npz", *arrays)
    (out / f"{path.name}.json").write_text(json.dumps({"keys": keys, "failed": failed}))
    return len(keys)


def readers(out: Path, datasets: list[Path]) -> dict[str, dict[str, int | str]]:
    report: dict[str, dict[str, int | str]] = {}
    for path in datasets:
        print(path, file=sys.stderr, flush=True)
        report[path.name] = {
            "rgb8": _pixels(out, path),
            "size": _count("size", PackedDataset(path, size=(12, 10))),
            "pil": _count("pil", PackedDataset(path, decode="pil", size=(9, 9))),
            "raw": _count("raw", PackedDataset(path, decode="raw")),
            "augment": _count("augment", PackedDataset(path, augment=CROP, seed=3)),
            "iterable": _count("iterable", PackedIterableDataset(path, shuffle=False)),
            "iterable_size": _count("iterable_size",
                                    PackedIterableDataset(path, size=(12, 10), seed=1)),
            "iterable_augment": _count("iterable_augment",
                                       PackedIterableDataset(path, augment=CROP)),
        }
    return report


def main(argv: list[str]) -> None:
    stage, *args = argv
    if stage == "decoders":
        print(json.dumps(decoders(Path(args[0]))))
    else:
        print(json.dumps(readers(Path(args[0]), [Path(a) for a in args[1:]])))


if __name__ == "__main__":
    main(sys.argv[1:])
