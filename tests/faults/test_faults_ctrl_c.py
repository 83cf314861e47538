"""Ctrl-C at awkward moments of `pack convert`: never a rejected input, never a hidden
error, always exit 130 and a quiet one-line message (the SIGINT rounds with many moments
are in tests/faults/test_faults_kill.py)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import pack_cli
import pack_cli._convert
import pack_cli._terminal
import packer.encode
from packer import ConvertOptions, convert
from packer.core.index import INDEX_NAME
from packer.errors import ctrl_c_pressed, ctrl_c_watched, interrupted
from packer.formats import _lmdb_writer, _wds
from packer.formats.base import ShardOptions, WriterPlan
from packer.storage.filestream import Hasher

RUN = ConvertOptions(shards=ShardOptions(max_samples=6), workers=0)


def raises_from_ctrl_c(error: Exception) -> Callable[..., None]:
    """A stand-in that raises `error` caused by a KeyboardInterrupt, as code wrapping
    what it catches does when Ctrl-C lands inside it."""
    def wrapped(*args: object, **kwargs: object) -> None:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise error from exc
    return wrapped


def test_ctrl_c_wrapped_by_a_decoder_is_not_a_rejected_input(
        mixed_src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C landing in a lazy import (PIL plugins) comes out as RuntimeError from
    KeyboardInterrupt; found by the soak: it made an image a reject and the run complete."""
    wrapped = raises_from_ctrl_c(RuntimeError("Error calling __set_name__ on 'cached_property'"))
    monkeypatch.setattr(packer.encode, "_encode_bytes", wrapped)
    with pytest.raises(KeyboardInterrupt):
        convert(mixed_src, tmp_path / "out", "wds", run=RUN)
    assert not (tmp_path / "out" / INDEX_NAME).exists()
    assert interrupted(RuntimeError("x")) is False


def test_ctrl_c_between_closing_and_forgetting_a_descriptor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by the soak: Ctrl-C right after LmdbWriter closed its writeback descriptor made
    abort() close it again (EBADF), reported as "cannot write" with exit 1."""
    writer = _lmdb_writer.LmdbWriter(WriterPlan(tmp_path, 0, None, ShardOptions()))
    real_close = os.close

    def close_then_interrupt(fd: int) -> None:
        real_close(fd)
        monkeypatch.setattr(_lmdb_writer.os, "close", real_close)
        raise KeyboardInterrupt

    monkeypatch.setattr(_lmdb_writer.os, "close", close_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        writer._stop_writeback()
    writer.abort()  # must not close the descriptor a second time


def test_a_failing_abort_does_not_hide_the_first_error(
        mixed_src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupt(self: object, record: object) -> None:
        raise KeyboardInterrupt

    def broken_abort(self: object) -> None:
        raise OSError(9, "Bad file descriptor")

    monkeypatch.setattr(_wds.WdsWriter, "add", interrupt)
    monkeypatch.setattr(_wds.WdsWriter, "abort", broken_abort)
    with pytest.raises(KeyboardInterrupt):
        convert(mixed_src, tmp_path / "out", "wds", run=RUN)


def press_ctrl_c() -> None:
    """What a Ctrl-C does in the main thread: run the SIGINT handler (pack's, if set)."""
    handler = signal.getsignal(signal.SIGINT)
    assert callable(handler)
    handler(signal.SIGINT, None)


@pytest.mark.parametrize("where", ["a __del__", "C code"])
def test_a_dropped_ctrl_c_still_stops_the_conversion(
        src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """Found by the soak: Ctrl-C in an import lock's weakref callback was printed as
    "Exception ignored" and dropped, and numpy loading the journal turned one into a
    TypeError (exit 1). pack's SIGINT handler notes the press: both end as Ctrl-C."""
    class Dropper:
        def __del__(self) -> None:
            press_ctrl_c()

    def fake_convert(*args: object, progress: Any, **kwargs: object) -> None:
        if where == "a __del__":
            Dropper()  # its __del__ runs here; Python can only report what it raises
            progress(1)
            raise AssertionError("the Ctrl-C was lost")
        with contextlib.suppress(KeyboardInterrupt):  # dropped, as C code may
            press_ctrl_c()
        raise TypeError("expected str, bytes or os.PathLike object, not BufferedReader")

    monkeypatch.setattr(pack_cli._convert, "convert", fake_convert)
    result = CliRunner().invoke(pack_cli.main, ["convert", str(src), str(tmp_path / "out"),
                                                  "--to", "wds"])
    assert result.exit_code == 130, result.output
    assert "--resume" in result.stderr and "Exception ignored" not in result.stderr
    assert not ctrl_c_pressed()  # the next conversion in this process starts afresh


def test_a_decoder_error_after_ctrl_c_is_not_a_rejected_input(
        mixed_src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def dropped(*args: object, **kwargs: object) -> None:
        with contextlib.suppress(KeyboardInterrupt):
            press_ctrl_c()  # pressed, and the decoder made an error of its own out of it
        raise OSError("broken data stream when reading image file")

    monkeypatch.setattr(packer.encode, "_encode_bytes", dropped)
    with pytest.raises(KeyboardInterrupt), ctrl_c_watched():
        convert(mixed_src, tmp_path / "out", "wds", run=RUN)
    assert not ctrl_c_pressed()


def test_ctrl_c_in_clicks_start_up_is_quiet(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Found by the soak: a Ctrl-C in click's own start-up (before any command) escaped
    as a traceback; the `pack` script (pack_cli.run) ends it with exit 130."""
    def interrupted_start(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(pack_cli.main, "main", interrupted_start)
    with pytest.raises(SystemExit) as exited:
        pack_cli.run(["info", "x"])
    assert exited.value.code == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_a_ctrl_c_past_every_handler_of_a_conversion_still_hints_resume(
        src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Found by tests/faults/test_faults_kill.py under load: a Ctrl-C sent twice can land while
    the first one winds down (after ctrl_c restored Python's handler, inside user_errors'
    or click's handling) and escape them all; once a conversion began, the `pack` script
    still says to resume rather than a bare "interrupted"."""
    def interrupted_conversion(*args: object, **kwargs: object) -> None:
        with pack_cli._terminal.converting():
            raise KeyboardInterrupt

    monkeypatch.setattr(pack_cli.main, "main", interrupted_conversion)
    with pytest.raises(SystemExit) as exited:
        pack_cli.run(["convert", str(src), str(tmp_path / "out"), "--to", "wds"])
    assert exited.value.code == 130
    assert capsys.readouterr().err == pack_cli._terminal.RESUME_HINT + "\n"
    monkeypatch.undo()
    done = CliRunner().invoke(pack_cli.main, ["convert", str(src), str(tmp_path / "out"),
                                               "--to", "wds"])
    assert done.exit_code == 0, done.output
    assert not pack_cli._terminal.conversion_interrupted(), "a finished conversion clears it"


def test_ctrl_c_wrapped_by_a_library_exits_130(src: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by the soak: Ctrl-C inside h5py's string conversion came out as h5py's own
    error and a traceback; any error caused by a KeyboardInterrupt is Ctrl-C."""
    monkeypatch.setattr(pack_cli._convert, "convert",
                        raises_from_ctrl_c(TypeError("Can't convert element to VLEN")))
    result = CliRunner().invoke(pack_cli.main, ["convert", str(src), str(tmp_path / "out"),
                                                  "--to", "hdf5"])
    assert result.exit_code == 130, result.output
    assert "--resume" in result.stderr and "Traceback" not in result.output


@pytest.mark.timeout(30)
def test_abort_does_not_wait_for_a_hash_queue_left_locked() -> None:
    """Found by the soak (npy, SIGINT): a Ctrl-C inside queue.Queue's code left its lock
    held and abort() waited for it forever. Stopping the hasher must not block."""
    hasher = Hasher()
    hasher.queue.mutex.acquire()  # what the interrupted put() left behind
    hasher.stop()  # returns: a stop that waits for the lock fails by the test's timeout
