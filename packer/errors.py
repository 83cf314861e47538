"""Errors the toolkit raises on bad input or damaged data, and how to recognise Ctrl-C.

Each one also inherits the builtin that fits, so callers that catch `ValueError` or
`FileNotFoundError` keep working. The message is one line that says what, where,
and how to fix it; the CLI prints it as it is.
"""

import threading

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


class RayClusterError(PackError, ConnectionError):
    """The Ray cluster cannot be reached, or lost a task (a node or worker died)."""


class ResumeRefused(PackError, ValueError):
    """The interrupted job does not match this one."""


class ArrayValueError(ValueError):
    """A value that is not an array of its field's type."""


class FieldValueError(ValueError):
    """A value that is not of its field's type (a bad manifest cell, a bad sidecar)."""


class RemoteError(PackError, OSError):
    """Remote storage refused or failed a request (URL, bucket, credentials, network)."""


class DecodeError(PackError, ValueError):
    """Stored bytes are not a decodable image (or not the pixels they claim to be)."""


class ExtensionMissingError(PackError, RuntimeError):
    """PACKER_REQUIRE_EXTENSION=1, and the compiled cropped decode cannot be used."""


# Set by `pack convert`'s SIGINT handler before it raises KeyboardInterrupt: code that
# catches broadly asks it, since C code (numpy, h5py, Pillow) that meets the
# KeyboardInterrupt may drop it and raise its own error instead.
CTRL_C = threading.Event()


def interrupted(error: BaseException) -> bool:
    """Whether `error` is, was caused by, or came with a Ctrl-C.

    Ctrl-C raised inside code that wraps what it catches (an import's `__set_name__`
    hook wraps it in RuntimeError) must stay Ctrl-C, not become a rejected input.
    """
    if CTRL_C.is_set():
        return True
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False
