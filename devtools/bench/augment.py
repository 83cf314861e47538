"""Augmentation cases of scripts/bench_read.py (issue 12): crops fused into decode vs Pillow.

    pil-rrc      ImageFolder + what torchvision's RandomResizedCrop + flip does with
                 Pillow: full decode, crop, bilinear resize, flip (the same boxes as ours)
    pil-center   ImageFolder + Resize(256/224 x size) + CenterCrop(size) with Pillow
    crop-1t      our decode + crop + resize + flip alone on one core: the ceiling
    <fmt>-...    PackedDataset / PackedIterableDataset with augment=, readers.collate
    ...-uncropped  the same without the compiled cropped decode (packer.imaging._cropjpeg):
                 full decode, then crop; side by side, what decoding only the box gains

Targets (the issue's): ours at least 2.5x the Pillow baseline and 0.8x (one-thread
ceiling x workers).

Only these cases, and the cost of the stored resolution (an lmdb copy per --resize):

    python -m devtools.bench.augment PHOTOS --work /tmp/bench-read --count 2000 \
        [--runs 3] [--epochs 2] [--formats wds,lmdb,hdf5] [--resize 256]
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from itertools import count
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from packer.imaging.crop_extension import OFF_SWITCH, extension
from packer.source.scan import scan
from readers import CenterCrop, PackedDataset, PackedIterableDataset, RandomResizedCrop, collate
from readers.augment import Augment
from readers.decoding.crop_decode import decode_augmented

JPEG_FORMATS = ("wds", "lmdb", "hdf5")


class PilCropFolderDataset(Dataset[tuple[torch.Tensor, int]]):
    """ImageFolder's loader, then torchvision's resized_crop on PIL: crop, resize, flip."""

    def __init__(self, root: Path, augment: Augment, seed: int = 0) -> None:
        items = scan(root).items
        self.paths = [item.path for item in items]
        self.labels = np.array([item.label for item in items], dtype=np.int64)
        self.augment, self.seed = augment, seed

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        with open(self.paths[i], "rb") as handle:
            image = Image.open(handle).convert("RGB")
        return pil_crop(image, self.augment, self.seed, i), int(self.labels[i])


def pil_crop(image: Image.Image, augment: Augment, seed: int, index: int) -> torch.Tensor:
    top, left, height, width, flipped = augment.params(seed, 0, index,
                                                       (image.height, image.width))
    size = augment.output_size
    out = image.crop((round(left), round(top), round(left + width), round(top + height)))
    out = out.resize((size[1], size[0]), Image.Resampling.BILINEAR)
    if flipped:
        out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return torch.as_tensor(np.array(out, copy=True)).permute(2, 0, 1)


def augments(size: tuple[int, int]) -> dict[str, Augment]:
    resize = round(min(size) * 256 / 224)
    return {"rrc": RandomResizedCrop(size), "center": CenterCrop(size, resize=resize)}


def crop_decoder(augment: Augment) -> Callable[[bytes], object]:
    """Our fused decode, a new sample index per call (so boxes vary as in training)."""
    indices = count()
    return lambda data: decode_augmented(data, augment, (0, 0, next(indices)))


def cropped(enabled: bool, make: Callable[..., Any]) -> Callable[[], Any]:
    """`make`, with the compiled cropped decode on or off (PACKER_CROP_DECODE): every case
    sets it, and the DataLoader starts its workers after `make`, so they inherit it."""
    def made() -> Any:
        if enabled:
            os.environ.pop(OFF_SWITCH, None)
        else:
            os.environ[OFF_SWITCH] = "full"
        return make()
    return made


def cropped_decode_back_on() -> None:
    """Undo the -uncropped cases' setting (devtools.bench.read.run_cases calls it)."""
    os.environ.pop(OFF_SWITCH, None)


def augment_cases(case: Callable[..., Any], src: Path, packed: dict[str, Path],
                  size: tuple[int, int], samples: Sequence[bytes],
                  one_thread: Callable[..., Any], workers: int = 2) -> list[Any]:
    """`case` builds a read.Case; `one_thread` is baselines.one_thread_rate. With the
    extension built, the one-thread and map-style cases have an -uncropped twin."""
    twins = (True, False) if extension().decode is not None else (True,)
    loaders = [(PackedDataset, True), (PackedIterableDataset, True)]
    if extension().decode is not None:
        loaders.append((PackedDataset, False))
    cases = []
    for name, augment in augments(size).items():
        shown = f"{type(augment).__name__} {size[0]}x{size[1]}"
        cases.append(case(f"pil-{name}", "PIL ImageFolder + crop", "folder", shown,
                          cropped(True, lambda a=augment: PilCropFolderDataset(src, a)),
                          shuffle=True))
        for on in twins:
            tail = "" if on else "-uncropped"
            cases.append(case(f"crop-1t-{name}{tail}", f"readers crop decode{tail}, 1 thread",
                              "bytes", shown, cropped(on, lambda a=augment: one_thread(
                                  samples, crop_decoder(a)))))
        for fmt in (f for f in JPEG_FORMATS if f in packed):
            for cls, on in loaders:
                tail = "" if on else "-uncropped"
                cases.append(case(
                    f"{fmt}-{cls.__name__}-{name}{tail}",
                    f"{cls.__name__}{tail} + readers.collate", fmt, shown,
                    cropped(on, lambda c=cls, p=packed[fmt], a=augment: c(p, augment=a)),
                    shuffle=cls is PackedDataset,
                    targets=((f"pil-{name}", 2.5), (f"crop-1t-{name}", 0.8 * workers)),
                    collate=collate))
    return cases


def stored_cases(case: Callable[..., Any], packed: dict[int, Path], size: tuple[int, int],
                 one_thread: Callable[..., Any]) -> list[Any]:
    """RandomResizedCrop on lmdb copies stored at a smaller resolution (pack --resize N)."""
    augment = RandomResizedCrop(size)
    cases = []
    for side, path in packed.items():
        shown = f"RandomResizedCrop {size[0]}x{size[1]}"
        raw = PackedDataset(path, decode="raw")
        samples = [bytes(raw[i][0]) for i in range(len(raw))]
        cases.append(case(f"crop-1t-resize{side}", f"crop decode, 1 thread, --resize {side}",
                          "bytes", shown, cropped(True, lambda s=samples: one_thread(
                              s, crop_decoder(augment)))))
        cases.append(case(f"lmdb-resize{side}", f"PackedDataset + collate, --resize {side}",
                          "lmdb", shown, cropped(True, lambda p=path: PackedDataset(
                              p, augment=augment)), shuffle=True, collate=collate))
    return cases


def pack_resized(src: Path, dst: Path, side: int) -> Path:
    """An lmdb copy with the shorter side scaled to `side`, packed once."""
    import subprocess
    import sys

    if (dst / "index.json").exists():
        return dst
    command = [sys.executable, "-c", "from pack_cli import main; main()", "convert",
               str(src), str(dst), "--to", "lmdb", "-q", "--resize", str(side)]
    subprocess.run(command, check=True, capture_output=True)
    return dst


def main(argv: list[str] | None = None) -> None:
    import argparse
    import sys

    from devtools.bench import baselines
    from devtools.bench.read import Case, Settings, markdown, pack_all, run_cases, sample_bytes

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-read"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--count", type=int, default=None)
    parser.add_argument("--formats", default=",".join(JPEG_FORMATS))
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--resize", type=int, action="append", default=[])
    args = parser.parse_args(argv)
    settings = Settings(src=args.src, work=args.work, runs=args.runs, count=args.count,
                        epochs=args.epochs, formats=tuple(f for f in args.formats.split(",") if f))

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    src, packed = pack_all(settings, progress)
    tag = f"{args.src.name}-{args.count or 'all'}"
    resized = {side: pack_resized(src, settings.work / f"{tag}-lmdb-resize{side}", side)
               for side in args.resize}
    cases = augment_cases(Case, src, packed, settings.size, sample_bytes(src),
                          baselines.one_thread_rate, settings.num_workers)
    cases += stored_cases(Case, resized, settings.size, baselines.one_thread_rate)
    run_cases(cases, settings, progress)
    print(markdown(cases, settings))


if __name__ == "__main__":
    main()
