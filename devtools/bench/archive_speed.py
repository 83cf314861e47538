"""Converting from an archive against converting the folder it extracts to (issue 16).

The targets: from a `.tar` at least 0.9x the folder's speed (pass-through, `--check none`
and `--check decode`), from a `.zip` at least 0.8x, from a tar of tars (ImageNet's
layout: one inner tar per class) at least 0.9x. The archives are built once from the
folder in `--work` (stored zip members, as JPEGs usually are; `--deflate` compresses
them) and read from a warm page cache like the folder; each run converts every source
once, interleaved, and the ratios are of median wall times (CPU seconds beside them).

    flock /tmp/bench.lock python -m devtools.bench.archive_speed /tmp/photos10k \\
        --work /tmp/bench-archive --runs 5
"""

from __future__ import annotations

import argparse
import io
import shutil
import statistics
import tarfile
import zipfile
from pathlib import Path

from devtools.bench.pack import Case, Timing, linked_folder, run_ours, source_files, warm

TARGETS = {"tar": 0.9, "tar (pax)": 0.9, "zip": 0.8, "tar of tars": 0.9}


def build_archives(folder: Path, work: Path, deflate: bool) -> dict[str, Path]:
    """{kind: path} of the folder as tars, a zip and a tar of per-class tars.

    "tar" is GNU format, what GNU tar writes by default (one header a member); "tar
    (pax)" is Python's default, which adds a pax header to every member whose mtime has
    a fraction (two headers a member, so a slower listing).
    """
    files = [(path, f"{key.rpartition('/')[0]}/{Path(path).name}")
             for path, key, _ in source_files(folder)]
    paths = {"tar": work / "photos.tar", "tar (pax)": work / "photos-pax.tar",
             "zip": work / "photos.zip", "tar of tars": work / "photos-of-tars.tar"}
    for kind, tar_format in (("tar", tarfile.GNU_FORMAT), ("tar (pax)", tarfile.PAX_FORMAT)):
        if not paths[kind].exists():
            with tarfile.open(paths[kind], "w", format=tar_format) as tar:
                for path, name in files:
                    tar.add(path, arcname=name)
    if not paths["zip"].exists():
        method = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
        with zipfile.ZipFile(paths["zip"], "w", method) as archive:
            for path, name in files:
                archive.write(path, name)
    if not paths["tar of tars"].exists():
        _write_tar_of_tars(files, paths["tar of tars"])
    return paths


def _write_tar_of_tars(files: list[tuple[str, str]], out: Path) -> None:
    """ImageNet's layout: CLASS.tar members holding that class's images, flat."""
    by_class: dict[str, list[tuple[str, str]]] = {}
    for path, name in files:
        folder, _, base = name.partition("/")
        by_class.setdefault(folder, []).append((path, base))
    with tarfile.open(out, "w", format=tarfile.GNU_FORMAT) as outer:
        for folder, members in sorted(by_class.items()):
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as inner:
                for path, base in members:
                    inner.add(path, arcname=base)
            info = tarfile.TarInfo(f"{folder}.tar")
            info.size = buffer.tell()
            buffer.seek(0)
            outer.addfile(info, buffer)


def _warm_file(path: Path) -> None:
    with open(path, "rb") as handle:
        while handle.read(1 << 24):
            pass


def measure(sources: dict[str, Path], work: Path, runs: int,
            checks: list[str]) -> dict[tuple[str, str], list[Timing]]:
    """{(check, source kind): timings}, every source converted once per run, interleaved."""
    timings: dict[tuple[str, str], list[Timing]] = {}
    for run in range(runs):
        for check in checks:
            for kind, src in sources.items():
                dst = work / "out.wds"
                shutil.rmtree(dst, ignore_errors=True)
                timing = run_ours(Case("wds", check=check), src, dst)  # type: ignore[arg-type]
                timings.setdefault((check, kind), []).append(timing)
                print(f"run {run + 1}/{runs}  --check {check:<6} {kind:<12} "
                      f"{timing.wall:6.2f} s  {timing.cpu:6.2f} CPU-s", flush=True)
    return timings


def report(timings: dict[tuple[str, str], list[Timing]], count: int) -> bool:
    """Print the table; whether every target was met."""
    print("| check | source | images/s | CPU µs/image | vs folder (wall) | target |")
    print("|---|---|---:|---:|---|---|")
    met = True
    for check in dict.fromkeys(check for check, _ in timings):
        folder = statistics.median(t.wall for t in timings[(check, "folder")])
        for (row_check, kind), runs in timings.items():
            if row_check != check:
                continue
            wall = statistics.median(t.wall for t in runs)
            cpu = statistics.median(t.cpu for t in runs)
            ratio, target = folder / wall, TARGETS.get(kind)
            verdict = "" if target is None else (
                f">= {target}x {'ok' if ratio >= target else 'MISS'}")
            met = met and (target is None or ratio >= target)
            print(f"| {check} | {kind} | {count / wall:,.0f} | {cpu / count * 1e6:,.0f} | "
                  f"{ratio:.2f}x | {verdict} |")
    return met


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("photos", type=Path)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-archive"))
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--checks", default="none,decode")
    parser.add_argument("--deflate", action="store_true", help="deflate the zip's members")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    folder = linked_folder(args.photos, args.work / "folder", args.count)
    count = len(source_files(folder))
    sources = {"folder": folder, **build_archives(folder, args.work, args.deflate)}
    warm(folder)
    for kind, path in sources.items():
        if kind != "folder":
            _warm_file(path)
    timings = measure(sources, args.work, args.runs, args.checks.split(","))
    print(f"\n{count:,} photos, --to wds, default workers, medians of {args.runs} runs")
    raise SystemExit(0 if report(timings, count) else 1)


if __name__ == "__main__":
    main()
