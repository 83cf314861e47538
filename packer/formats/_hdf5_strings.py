"""HDF5's one limit on field values, checked per sample without importing h5py: its
variable-length strings end at a NUL byte, so a str field holding one cannot be stored
(the hdf5 writer and an append's spool of replacements check it before writing)."""

from __future__ import annotations

from collections.abc import Sequence

from packer.core.fields import FieldSpec, unpack_record
from packer.errors import UnstorableRecord


def string_fields(specs: Sequence[FieldSpec]) -> list[int]:
    """The positions of the str fields, which check_strings looks at."""
    return [n for n, spec in enumerate(specs) if spec.type == "str"]


def check_strings(specs: Sequence[FieldSpec], strings: Sequence[int], fields: bytes) -> None:
    """HDF5's variable-length strings end at a NUL byte (h5py refuses to write one):
    a str field holding one is this sample's reject, not the whole file's failure
    at the end (json fields escape it as \\u0000)."""
    values = unpack_record(fields, len(specs))
    for n in strings:
        value = values[n]
        if value is not None and b"\0" in value:
            raise UnstorableRecord(
                f"field {specs[n].name!r} holds a NUL byte, which HDF5 strings "
                "cannot; remove it, or pack to wds, lmdb or npy, which keep it")
