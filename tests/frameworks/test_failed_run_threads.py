"""A conversion that stops on a bad input shuts its encode threads down before the
error reaches the caller, even one that keeps the traceback (pytest, CliRunner, a
notebook). Left to the garbage collector, the pool's shutdown ran wherever the next
collection did, once inside a new thread's start, and the process deadlocked."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest

from packer import ConvertOptions, convert
from packer.errors import BadInputError
from tests.helpers import png_bytes, random_image


def encode_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("packer-encode")]


@pytest.mark.parametrize("fmt", ["wds", "lmdb"])
def test_a_failed_run_leaves_no_encode_threads(tmp_path: Path, fmt: str) -> None:
    src = tmp_path / "src" / "cat"
    src.mkdir(parents=True)
    for i in range(40):
        (src / f"{i:02d}.png").write_bytes(png_bytes(random_image(8, 8, seed=i)))
    (src / "20.png").write_bytes(b"not an image")
    gc.disable()  # the collector must not be what cleans up
    try:
        with pytest.raises(BadInputError) as failed:
            convert(src.parent, tmp_path / fmt, fmt,
                    run=ConvertOptions(workers=2, on_error="fail"))
        assert failed.traceback  # kept, with every frame of the run
        assert encode_threads() == []
    finally:
        gc.enable()
