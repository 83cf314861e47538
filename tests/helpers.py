"""Helpers for the tests: generated images, tree hashing, packing every format, the `pack`
command. Fixtures live in conftest.py (importing conftest is a pytest anti-pattern)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result
from PIL import Image

from pack_cli import main
from packer import ConvertOptions, convert, formats
from packer.core.index import read_index
from packer.core.layout import FORMAT_NAMES
from packer.core.record import Record
from packer.encode import EncodeOptions
from packer.formats.base import DecodedFields, ShardOptions, Writer
from packer.testing import make_sample_folder, synthetic_image

FORMATS = FORMAT_NAMES  # every format, in the registry's order: parametrize with it

# The seed of the kill tests' moments: fixed, so that every run draws the same ones;
# PACKER_KILL_SEED=<seed from a failure message> replays another run's.
KILL_SEED = os.environ.get("PACKER_KILL_SEED") or "5eed0001"


def soak_rounds(light: int, full: int) -> int:
    """Rounds of a `soak` test: `light` in the soak-light tier that CI runs, `full` with
    PACKER_SOAK=full (scripts/test --tier soak), which hunts rare windows for longer."""
    return full if os.environ.get("PACKER_SOAK") == "full" else light


# Names that stress keys: dots, spaces, quotes, '%', non-ASCII, a dotted folder.
ODD_NAMES = (
    "a.b.c.jpg",
    "with space.jpg",
    "quote'single.jpg",
    'quote"double.png',
    "100%.jpg",
    "%2E literal.jpg",
    "naïve_日本語.png",
    "Ünïcödé €.jpg",
    "dir.with.dots/x.y.z.jpg",
    "plain.jpeg",
    "a_long_name_" + "x" * 120 + ".jpg",  # over tar's 100-byte name field
    "tab\tand\nnewline.png",
    "__meta__.jpg",
)


def tree_hashes(root: Path, skip: tuple[str, ...] = (".pack-state",)) -> dict[str, str]:
    """Relative path -> sha256 of every file below `root` (links by target, modes included)."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip)
        rel_dir = Path(dirpath).relative_to(root)
        for name in dirnames:
            out[str(rel_dir / name) + "/"] = "dir"
        for name in sorted(filenames):
            path = Path(dirpath) / name
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                digest = "link:" + os.readlink(path)
            elif stat.S_ISREG(info.st_mode):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                digest = f"special:{stat.S_IFMT(info.st_mode)}"
            out[str(rel_dir / name)] = f"{digest}:{stat.S_IMODE(info.st_mode):o}"
    return out


def shard_path(folder: Path, number: int) -> Path:
    """Shard `number` of a complete dataset, by index.json (wds shards carry the dataset's
    name, so a copied or renamed folder keeps the names it was converted with)."""
    return folder / read_index(folder).shards[number].name


def decoded_by_key(folder: Path) -> dict[str, tuple[int, np.ndarray]]:
    """key -> (label, HWC uint8 pixels) of every sample, as readers.PackedDataset decodes
    them: what other readers of our files (HF datasets, Ray Data) must give."""
    from readers import PackedDataset

    ds = PackedDataset(folder, decode="rgb8", with_keys=True)
    return {key: (int(label), np.asarray(image).transpose(1, 2, 0)) for image, label, key in ds}


def jpeg_bytes(image: Image.Image, quality: int = 90, **save: object) -> bytes:
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=quality, **save)
    return out.getvalue()


def png_bytes(image: Image.Image, **save: object) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG", **save)
    return out.getvalue()


def random_image(width: int, height: int, seed: int = 0) -> Image.Image:
    return synthetic_image(np.random.default_rng(seed), width, height)


def pack_command() -> list[str]:
    """The installed `pack` console script of this interpreter, or an equivalent."""
    script = Path(sys.executable).parent / "pack"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from pack_cli import main; main()"]


def wait_for_state(proc: subprocess.Popen[bytes], dst: Path) -> float | None:
    """Wait until the conversion starts writing (its journal appears) or ends."""
    while proc.poll() is None:
        if (dst / ".pack-state").exists():
            return time.monotonic()
        time.sleep(0.001)
    return None


class count_adds:
    """Count Writer.add calls of this format's writers; optionally fail after N of them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fmt: str,
                 fail_after: int | None = None) -> None:
        self.monkeypatch = monkeypatch
        self.module = formats.load(fmt)
        self.real_open: Callable[..., Writer] = self.module.open_writer
        self.fail_after = fail_after
        self.adds = [0]

    def __enter__(self) -> list[int]:
        real_open, adds, fail_after = self.real_open, self.adds, self.fail_after

        def open_writer(plan: Any) -> Writer:
            writer = real_open(plan)
            real_add = writer.add

            def add(record: Record) -> Any:
                if fail_after is not None and adds[0] >= fail_after:
                    raise RuntimeError("injected failure in the writer")
                adds[0] += 1
                return real_add(record)

            writer.add = add  # type: ignore[method-assign]
            return writer

        self.monkeypatch.setattr(self.module, "open_writer", open_writer)
        return self.adds

    def __exit__(self, *exc: object) -> None:
        self.monkeypatch.setattr(self.module, "open_writer", self.real_open)


def run_pack(*args: str | Path) -> Result:
    """`pack ARGS...` through click's CliRunner, in this process."""
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_one_line_error(result: Result, code: int, *words: str) -> None:
    assert result.exit_code == code, (result.exit_code, result.output)
    assert result.stderr.startswith("error: "), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception,
                                                                     SystemExit)
    for word in words:
        assert word in result.stderr, (word, result.stderr)


def pack_wds(root: Path, count: int, shard_samples: int, min_side: int, max_side: int) -> Path:
    """A generated source of 3 classes packed as wds into `root/wds`, a shard every
    `shard_samples` inputs."""
    src = make_sample_folder(root / "src", count=count, classes=3, min_side=min_side,
                             max_side=max_side)
    run = ConvertOptions(workers=0, shards=ShardOptions(max_samples=shard_samples))
    convert(src, root / "wds", "wds", run=run)
    return root / "wds"


def pack_every_format(root: Path, count: int, npy_size: tuple[int, int], min_side: int,
                      max_side: int) -> dict[str, Path]:
    """One generated source packed in each format under `root` (wds in shards of 10)."""
    src = make_sample_folder(root / "src", count=count, classes=3, min_side=min_side,
                             max_side=max_side)
    run = ConvertOptions(workers=0, shards=ShardOptions(max_samples=10))
    for fmt in formats.FORMATS:
        options = EncodeOptions(size=npy_size) if fmt == "npy" else None
        convert(src, root / fmt, fmt, encode=options, run=run)
    return {fmt: root / fmt for fmt in formats.FORMATS}


def free_port() -> int:
    """A loopback TCP port nobody listens on now (for a test's process group)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_ranks(target: Callable[..., None], args: tuple[Any, ...], world: int,
              timeout: float = 150) -> list[int | None]:
    """Exit codes of `world` spawned processes running target(rank, port, *args), the port
    free for their gloo group; one still running after `timeout` seconds is killed."""
    import multiprocessing

    port = free_port()
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=target, args=(rank, port, *args)) for rank in range(world)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=timeout)
        if proc.is_alive():
            proc.kill()
            proc.join()
    return [proc.exitcode for proc in procs]


# Per-sample fields (issue 13): a manifest whose rows carry every kind of field value.
FIELD_SAMPLES = 12  # rows in field_rows()


def field_rows(count: int = FIELD_SAMPLES) -> list[dict[str, Any]]:
    """JSONL rows (without path/label) that stress fields: unicode, empty and 10,000-char
    captions, 0..50 boxes, floats that need every bit, nested JSON, nulls and missing keys.

    Their JSONL types: caption str, boxes json, score float, count int, meta json.
    """
    rows: list[dict[str, Any]] = []
    for i in range(count):
        row: dict[str, Any] = {
            "caption": ("a dog", "", "naïve 日本語 €", "x" * 10_000, "line\nbreak\ttab")[i % 5],
            "boxes": [[i + 0.1 * k, 1 / 3, 2.5e-310, 1e300] for k in range((i * 7) % 51)],
            "score": (0.1, 1 / 3, -0.0, 5e-324, 1.7976931348623157e308, 2.0 ** -30)[i % 6],
            "count": (i - 5) * 10**15,
            "meta": {"id": i, "tags": ["a", {"b": [None, True, 1.5]}], "text": "é" * i},
        }
        if i % 4 == 3:
            row["caption"] = None  # null: no value
        if i % 5 == 4:
            del row["meta"]  # missing key: no value
        rows.append(row)
    rows[0]["boxes"] = []  # an image with no boxes
    rows[-1]["boxes"] = [[k, k + 0.5, 1e-7 * k, 3.0] for k in range(50)]  # and one with 50
    return rows


def field_manifest(root: Path, count: int = FIELD_SAMPLES,
                   size: int = 8) -> tuple[Path, dict[str, dict[str, Any]]]:
    """A JSONL manifest of `count` small PNG images with field_rows(); returns it and
    key -> the fields a reader must return (None where a row has no value)."""
    root.mkdir(parents=True, exist_ok=True)
    rows = field_rows(count)
    lines = []
    expected: dict[str, dict[str, Any]] = {}
    for i, row in enumerate(rows):
        name = f"img{i:03d}.png"
        (root / name).write_bytes(png_bytes(random_image(size, size, seed=i)))
        lines.append(json.dumps({"path": name, "label": i % 2, **row}, ensure_ascii=False))
        expected[f"img{i:03d}"] = {name: row.get(name) for name in FIELD_NAMES}
    manifest = root / "manifest.jsonl"
    manifest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return manifest, expected


FIELD_NAMES = ("caption", "boxes", "score", "count", "meta")


def pack_with_fields(root: Path, fmt: str, count: int = FIELD_SAMPLES,
                     **options: Any) -> tuple[Path, dict[str, dict[str, Any]]]:
    """Pack field_manifest() into root/<fmt> (npy at 8x8); returns the dataset and the
    expected fields by key. `options`: ConvertOptions fields (e.g. shards=...)."""
    manifest, expected = field_manifest(root / "src", count)
    encode = EncodeOptions(size=(8, 8)) if fmt == "npy" else EncodeOptions()
    dst = root / fmt
    convert(manifest, dst, fmt, encode, ConvertOptions(workers=0, **options))
    return dst, expected


def jsonl_manifest(root: Path, rows: list[dict[str, Any]]) -> Path:
    """root/m.jsonl: a small PNG `<i>.png` for each row, label 0 and the row's keys."""
    root.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, row in enumerate(rows):
        (root / f"{i}.png").write_bytes(png_bytes(random_image(8, 8, seed=i)))
        lines.append(json.dumps({"path": f"{i}.png", "label": 0, **row}))
    (root / "m.jsonl").write_text("\n".join(lines) + "\n")
    return root / "m.jsonl"


def csv_manifest(root: Path, columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> Path:
    """root/list.csv: a `path` column (root/<i>.png, small images written here) and
    `columns` (label first, then fields) holding `rows`."""
    root.mkdir(parents=True, exist_ok=True)
    lines = [",".join(("path", *columns))]
    for i, cells in enumerate(rows):
        (root / f"{i}.png").write_bytes(png_bytes(random_image(8, 8, seed=i)))
        lines.append(",".join((f"{i}.png", *cells)))
    manifest = root / "list.csv"
    manifest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return manifest


class CountingReader(DecodedFields):
    """A RecordReader over fixed 10-byte records that logs every call (DecodedFields: the
    protocol's defaults, nothing to prefetch)."""

    def __init__(self, num: int) -> None:
        self.records = [bytes([i % 256]) * 10 for i in range(num)]
        self.calls: list[tuple[object, ...]] = []

    def read(self, i: int) -> bytes:
        return self.read_many([i])[0]

    def read_many(self, indices: list[int]) -> list[bytes]:
        self.calls.append(("many", *indices))
        return [self.records[i] for i in indices]

    def read_range(self, start: int, stop: int) -> Iterator[bytes]:
        self.calls.append(("range", start, stop))
        yield from self.records[start:stop]

    def close(self) -> None:
        pass
