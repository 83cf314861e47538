"""The per-sample fields of an append: SRC's fields matched to DST's, records in DST's order.

New samples carry DST's fields, in DST's order, with DST's types, so that the grown
dataset has one field list: a SRC field DST lacks is refused (the old samples cannot
have it), a type that differs is refused naming the field and both types, and a DST
field that SRC lacks is no value for the new samples (every field may have none).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from packer.core.fields import FieldSpec, pack_record, unpack_record
from packer.errors import SourceError

Reorder = Callable[[bytes], bytes]


def field_order(dst_fields: Sequence[FieldSpec], src_fields: Sequence[FieldSpec],
                src: Path, dst: Path) -> Reorder:
    """How a SRC fields record becomes the record of DST's fields; SourceError (one
    line, naming the field and the fix) where SRC's fields do not fit DST's."""
    by_name = {spec.name: spec for spec in dst_fields}
    for spec in src_fields:
        held = by_name.get(spec.name)
        if held is None:
            raise SourceError(_not_in_dst(spec, dst_fields, src, dst))
        if held.type != spec.type:
            raise SourceError(
                f"{src}: field {spec.name!r} is {spec.type} in SRC and {held.type} in {dst}; "
                f"an append keeps DST's types: pass --field {spec.name}:{held.type} (a "
                "manifest column or a packed source's field), or convert the union")
    if not dst_fields:
        return _no_fields
    place = {spec.name: n for n, spec in enumerate(src_fields)}
    picks = [place.get(spec.name) for spec in dst_fields]
    count = len(src_fields)

    def reorder(record: bytes) -> bytes:
        values = unpack_record(record, count) if record else [None] * count
        return pack_record([None if n is None else values[n] for n in picks])

    return reorder


def _no_fields(record: bytes) -> bytes:
    return b""


def _not_in_dst(spec: FieldSpec, dst_fields: Sequence[FieldSpec], src: Path, dst: Path) -> str:
    if not dst_fields:
        return (f"{src}: has the per-sample field {spec.name!r} ({spec.type}) and {dst} has "
                "no fields; an append cannot give the old samples a field: pass --no-fields "
                "to append without SRC's fields, or convert the union")
    known = ", ".join(f"{s.name} ({s.type})" for s in dst_fields)
    return (f"{src}: field {spec.name!r} ({spec.type}) is not one of {dst}'s fields ({known}); "
            "an append cannot give the old samples a field: leave it out with --fields, or "
            "convert the union")
