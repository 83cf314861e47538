"""Errors the toolkit raises on bad input or damaged data, and how to recognise Ctrl-C.

Each one also inherits the builtin that fits, so callers that catch `ValueError` or
`FileNotFoundError` keep working. The message is one line that says what, where,
and how to fix it; the CLI prints it as it is.
"""

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# The distribution's name on the package index (`packer` there is an unrelated package);
# the import packages are `packer` and `readers`, the command `pack`.
DISTRIBUTION = "packer-readers"


def install_line(extra: str) -> str:
    """The pip command that adds an optional extra, for install hints."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


class PackError(Exception):
    """Base class: a user-facing problem with a one-line message."""


class SourceError(PackError, ValueError):
    """The source folder or manifest cannot be used."""


class BadInputError(PackError, ValueError):
    """An input image was rejected while `--on-error fail` was in force."""


class UnstorableRecord(PackError, ValueError):
    """The format cannot store this one sample (an LMDB key over 511 bytes): the sample is
    rejected like a bad input, and the conversion goes on (or stops, with --on-error fail)."""


class RejectReason(Exception):
    """An input problem already worded for rejects.jsonl (raised by readers of inputs)."""


class IncompleteDatasetError(PackError, FileNotFoundError):
    """A dataset folder has no index.json: its conversion did not finish."""


class DatasetExistsError(PackError, FileExistsError):
    """The destination already holds a complete dataset."""


class CorruptDatasetError(PackError, ValueError):
    """A packed dataset does not match its index (damaged file, record or index)."""


class MissingDependencyError(PackError, ImportError):
    """An optional library needed for this format or option is not installed."""


class DestinationError(PackError, OSError):
    """Writing into DST failed (permissions, I/O error); what is durable stays for resume."""


class DiskFullError(DestinationError):
    """The disk holding DST filled up during a conversion."""


class AppendInterrupted(IncompleteDatasetError):
    """An earlier append of DST did not finish and --resume was not asked."""


class RayClusterError(PackError, ConnectionError):
    """The Ray cluster cannot be reached, or lost a task (a node or worker died)."""


class ResumeRefused(PackError, ValueError):
    """The interrupted job does not match this one."""


class ArrayValueError(PackError, ValueError):
    """A value that is not an array of its field's type."""


class FieldValueError(PackError, ValueError):
    """A value that is not of its field's type (a bad manifest cell, a bad sidecar)."""


class RemoteError(PackError, OSError):
    """Remote storage refused or failed a request (URL, bucket, credentials, network)."""


class DecodeError(PackError, ValueError):
    """Stored bytes are not a decodable image (or not the pixels they claim to be)."""


class UnsupportedImageError(PackError, OSError):
    """A valid image no decoder here reads (a 12- or 16-bit JPEG): not a damaged file."""


class ExtensionMissingError(PackError, RuntimeError):
    """PACKER_REQUIRE_EXTENSION=1, and the compiled cropped decode cannot be used."""


# Pressed during a ctrl_c_watched() block (its SIGINT handler sets it, the block's end
# clears it): code that catches broadly asks it, since C code (numpy, h5py, Pillow) that
# meets the KeyboardInterrupt may drop it and raise its own error instead.
_PRESSED = threading.Event()


def ctrl_c_pressed() -> bool:
    """Whether Ctrl-C was pressed during the ctrl_c_watched() block now running."""
    return _PRESSED.is_set()


@contextmanager
def ctrl_c_watched() -> Iterator[None]:
    """Make a Ctrl-C in the block a Ctrl-C, whatever the code it lands in makes of it.

    The block's SIGINT handler notes the press before raising KeyboardInterrupt, so when C
    code drops the KeyboardInterrupt for an error of its own (numpy loading a file, h5py
    converting strings) or Python can only print it (a weakref callback during a lazy
    import), the error still ends as KeyboardInterrupt here, a broad `except` never turns
    it into a rejected input (encoding asks `interrupted`), and the next progress report
    can raise it again (`ctrl_c_pressed`). The previous handler and a clear state are
    restored when the block ends. `pack convert` runs each conversion in one.
    """
    _PRESSED.clear()

    def on_sigint(signum: int, frame: Any) -> None:
        _PRESSED.set()
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main thread: Python delivers no signals here anyway
        previous = None
    try:
        with unprinted_ctrl_c(lambda: None):  # noted: the next report raises it
            yield
    except Exception as exc:
        if _PRESSED.is_set():
            raise KeyboardInterrupt from exc
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        _PRESSED.clear()  # a later block in this process starts afresh


@contextmanager
def unprinted_ctrl_c(on_drop: Callable[[], None]) -> Iterator[None]:
    """While active, a KeyboardInterrupt that Python can only print (raised in a weakref
    callback during a lazy import, in a __del__) calls `on_drop` instead of printing a
    traceback."""
    previous_hook = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type,
                                                          KeyboardInterrupt):
            on_drop()
        else:
            previous_hook(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous_hook


def interrupted(error: BaseException) -> bool:
    """Whether `error` is, was caused by, or came with a Ctrl-C.

    Ctrl-C raised inside code that wraps what it catches (an import's `__set_name__`
    hook wraps it in RuntimeError) must stay Ctrl-C, not become a rejected input.
    """
    if _PRESSED.is_set():
        return True
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False
