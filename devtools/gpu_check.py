"""One-command check of readers.decode_on on a GPU: the decoder chosen and why, loading
rate and CPU time per image at several worker counts against the CPU decode path, pixel
agreement with the CPU path (mean and worst image), and a stream-hazard run; Markdown.

    python -m devtools.gpu_check [--src PHOTOS] [--count 4096] [--batch 128]
        [--batches 60] [--workers 1,2,4] [--size 224] [--work /tmp/gpu-check]
        [--out report.md] [--device cuda|cpu]

--src: an image folder (class sub-folders); only its JPEGs are packed (the GPU decodes
JPEGs; other codecs would time the CPU fallback). Without it, `--count` photos from
devtools.bench.photos. `--device cpu` runs every step on the CPU with a stand-in
decoder (libjpeg-turbo) through the device code path: a dry run of the check where no
GPU is. Exits 2 where CUDA is asked for and absent, 1 where a correctness goal (pixel
agreement, hazard run) is missed, else 0.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from devtools.gpu_measure import (
    Agreement,
    Rate,
    Target,
    agreement,
    hazard,
    loading_rates,
    unguarded,
)
from readers import CenterCrop, RandomResizedCrop
from readers.augment import Augment

MAX_MEAN = 1.0  # goals: mean |device - CPU| over all pixels, in levels
MAX_WORST_IMAGE = 3.0  # and no image's mean beyond this
GOAL_RATE = 8000  # RandomResizedCrop(224) images/s from at most 4 workers
GOAL_CPU_RATIO = 5.0  # CPU time per image, CPU path / device path
LIBRARIES = ("torch", "torchcodec", "nvidia-nvimgcodec-cu13", "nvidia-nvimgcodec-cu12",
             "torchvision", "simplejpeg", "pillow", "numpy")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--src", type=Path, default=None, help="image folder to pack")
    parser.add_argument("--count", type=int, default=4096, help="photos made without --src")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--batches", type=int, default=60, help="timed batches a row")
    parser.add_argument("--workers", default="1,2,4", help="DataLoader worker counts")
    parser.add_argument("--size", type=int, default=224, help="crop / resize side")
    parser.add_argument("--work", type=Path, default=Path("/tmp/gpu-check"))
    parser.add_argument("--out", type=Path, default=None, help="also write the report here")
    parser.add_argument("--device", default="cuda", help="cuda, or cpu for a dry run")
    return parser.parse_args(argv)


def packed(args: argparse.Namespace) -> Path:
    """The wds dataset under --work: the JPEGs of --src, or photos made for the check."""
    from devtools.bench.photos import write_photos
    from packer import ConvertOptions, convert

    dst: Path = args.work / "wds"
    if (dst / "index.json").exists():
        return dst
    src = args.work / "jpegs"
    if args.src is None:
        write_photos(src, args.count, classes=10, seed=0)
    else:
        _link_jpegs(args.src, src)
    convert(src, dst, "wds", run=ConvertOptions(workers=0))
    return dst


def _link_jpegs(src: Path, dst: Path) -> None:
    for path in sorted(src.rglob("*")):
        if path.suffix.lower() in (".jpg", ".jpeg") and path.is_file():
            link = dst / path.relative_to(src)
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                link.symlink_to(path.resolve())


def blocking_sync() -> str:
    """Make the host sleep while it waits for the GPU instead of spinning
    (cudaDeviceScheduleBlockingSync), so CPU time counts work, not waiting. Must run
    before CUDA makes its context; says what it did."""
    major = (torch.version.cuda or "").split(".")[0]
    try:
        code = ctypes.CDLL(f"libcudart.so.{major}").cudaSetDeviceFlags(4)
    except (OSError, AttributeError) as exc:
        return f"spinning (cudaSetDeviceFlags unavailable: {exc})"
    return "blocking (no spin)" if code == 0 else f"spinning (cudaSetDeviceFlags gave {code})"


def setup_lines(target: Target, host_wait: str) -> list[str]:
    from packer.imaging import crop_extension
    from readers.decoding.gpu_decoders import choose

    device = target.device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (dry run)"
    lines = ["| what | value |", "| --- | --- |", f"| device | {name} |",
             f"| torch CUDA | {torch.version.cuda or 'none'} |",
             f"| Python | {platform.python_version()} |", f"| CPU cores | {os.cpu_count()} |",
             f"| crop extension | {crop_extension.status()} |",
             f"| host waits for the GPU | {host_wait} |"]
    for library in LIBRARIES:
        try:
            lines.append(f"| {library} | {metadata.version(library)} |")
        except metadata.PackageNotFoundError:
            lines.append(f"| {library} | absent |")
    if target.decoder is not None:
        lines.append(f"| decoder | {target.decoder.name} |")
    else:
        for candidate, why in choose(device).tried:
            lines.append(f"| decoder {candidate} | {why} |")
    return lines


def rate_lines(rates: dict[int, dict[str, Rate]]) -> list[str]:
    lines = ["| workers | path | images/s | CPU ms / image | images / CPU-s |",
             "| ---: | --- | ---: | ---: | ---: |"]
    for workers, rows in rates.items():
        for path, found in rows.items():
            lines.append(f"| {workers} | {path} | {found.images_per_s:,.0f} | "
                         f"{found.cpu_ms_per_image:.2f} | {found.images_per_cpu_s:,.0f} |")
    return lines


def agreement_lines(found: dict[str, Agreement]) -> list[str]:
    lines = ["| case | images | mean levels | worst image mean | max pixel |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for case, a in found.items():
        lines.append(f"| {case} | {a.images} | {a.mean:.2f} | {a.worst_image:.2f} | "
                     f"{a.max_pixel} |")
    return lines


def goal_lines(rates: dict[int, dict[str, Rate]], found: dict[str, Agreement],
               differing: int, hazard_batches: int) -> tuple[list[str], bool]:
    """The issue's goals, each met or not; and whether the correctness ones all hold."""
    small = [rows for workers, rows in rates.items() if workers <= 4] or list(rates.values())
    best = max(small, key=lambda rows: rows["raw batches, decode_on"].images_per_s)
    device, cpu = best["raw batches, decode_on"], best["CPU decode in workers, copied"]
    ratio = cpu.cpu_ms_per_image / max(device.cpu_ms_per_image, 1e-9)
    mean = max(a.mean for a in found.values())
    worst = max(a.worst_image for a in found.values())
    correct = mean <= MAX_MEAN and worst <= MAX_WORST_IMAGE and differing == 0
    rows = [(f"decode_on >= {GOAL_RATE:,} images/s from <= 4 workers",
             f"{device.images_per_s:,.0f}", device.images_per_s >= GOAL_RATE),
            (f"CPU time per image >= {GOAL_CPU_RATIO:.0f}x lower than the CPU path's",
             f"{ratio:.1f}x", ratio >= GOAL_CPU_RATIO),
            (f"mean agreement <= {MAX_MEAN} level", f"{mean:.2f}", mean <= MAX_MEAN),
            (f"no image's mean beyond {MAX_WORST_IMAGE} levels", f"{worst:.2f}",
             worst <= MAX_WORST_IMAGE),
            ("hazard run: 0 batches differ", f"{differing} of {hazard_batches}",
             differing == 0)]
    lines = ["| goal | measured | met |", "| --- | ---: | --- |"]
    lines += [f"| {goal} | {value} | {'yes' if met else 'NO'} |" for goal, value, met in rows]
    return lines, correct


def decoder_lines(path: Path, target: Target, batch: int, batches: int,
                  side: int) -> list[str]:
    """RandomResizedCrop agreement of every working decoder, and the hazard run without
    the side stream (a negative control: differing batches there show the hazard is real
    for that decoder, and that the guard is what prevents it)."""
    from readers.decoding.gpu_decoders import CANDIDATES, choose

    lines = ["| decoder | mean levels | worst image mean | hazard run without the side stream |",
             "| --- | ---: | ---: | ---: |"]
    decoders = [target.decoder] if target.decoder is not None else [
        choose(target.device, [candidate]).decoder for candidate in CANDIDATES]
    for decoder in decoders:
        if decoder is None:
            continue
        one = Target(target.device, decoder)
        found = agreement(path, one, {"augment": _crop(side)}, batch, 2)
        control = hazard(path, Target(target.device, unguarded(decoder)), batch, batches, side)
        lines.append(f"| {decoder.name} | {found.mean:.2f} | {found.worst_image:.2f} | "
                     f"{control} of {batches} differ |")
    return lines


def report(args: argparse.Namespace, target: Target, host_wait: str) -> tuple[str, bool]:
    path = packed(args)
    side = args.size
    counts = [int(w) for w in str(args.workers).split(",") if w.strip()]
    rates = {w: loading_rates(path, target, w, args.batch, args.batches, side) for w in counts}
    cases: dict[str, dict[str, Any]] = {f"size=({side}, {side})": {"size": (side, side)},
             f"RandomResizedCrop({side})": {"augment": _crop(side)},
             f"CenterCrop({side}, resize={side * 8 // 7})": {"augment": _center(side)}}
    found = {case: agreement(path, target, options, args.batch, 4)
             for case, options in cases.items()}
    hazard_batches = min(20, args.batches)
    differing = hazard(path, target, args.batch, hazard_batches, side)
    goals, correct = goal_lines(rates, found, differing, hazard_batches)
    sections = [f"# readers.decode_on check on {target.device}", "## Setup",
                *setup_lines(target, host_wait),
                "## Loading: RandomResizedCrop batches on the device",
                *rate_lines(rates), "## Pixels against the CPU path", *agreement_lines(found),
                "## Each decoder that passes the probe",
                *decoder_lines(path, target, args.batch, hazard_batches, side),
                "## Goals", *goals]
    return "\n".join(line if line.startswith("|") else f"\n{line}\n" for line in sections), \
        correct


def _crop(side: int) -> Augment:
    return RandomResizedCrop(side)


def _center(side: int) -> Augment:
    return CenterCrop(side, resize=side * 8 // 7)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here (torch.cuda.is_available() is False); run it on "
              "a machine with an NVIDIA GPU and a CUDA build of torch, or pass --device cpu "
              "for a dry run with a stand-in decoder", file=sys.stderr)
        return 2
    host_wait = blocking_sync() if torch.device(args.device).type == "cuda" else "no GPU"
    text, correct = report(args, Target.of(args.device), host_wait)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    if not correct:
        print("gpu_check: a correctness goal is missed (see Goals)", file=sys.stderr)
    return 0 if correct else 1


if __name__ == "__main__":
    sys.exit(main())
