"""The field values of the grown dataset, for the formats that rebuild their field files
(hdf5's /fields, npy's fields/) and for index.json's per-field counts.

Old samples' values are read back from DST through its reader, each sample checked
against its field digest (a damaged DST stops the append before anything is built),
the replaced ones swapped for their replacements', and the new samples' come from the
staged field records: the same byte forms a conversion of the same inputs would write.
"""

from __future__ import annotations

from collections.abc import Sequence

from packer import formats
from packer.conversion.append.plan import AppendPlan
from packer.conversion.append.spool import Replacements
from packer.conversion.append.stage import Staged
from packer.core.fields import unpack_record
from packer.core.index import SampleTable
from packer.formats._field_columns import Column, columns_of

BATCH = 4096  # samples read at a time

Values = list[Sequence[bytes | None]]


def old_values(plan: AppendPlan, indices: Sequence[int]) -> Values:
    """DST's samples' field values (byte forms, DST's order), checked against their digests."""
    reader = formats.load(plan.index.format).open_reader(plan.folder, plan.index, plan.table)
    try:
        values: Values = []
        for start in range(0, len(indices), BATCH):
            values += reader.field_values_many(indices[start : start + BATCH])
        return values
    finally:
        reader.close()


def staged_values(table: SampleTable, count: int) -> Values:
    """The field values of staged samples, from the records the staging kept."""
    if table.fields is None:
        return [[None] * count for _ in range(len(table))]
    return [unpack_record(table.fields.record(j), count) for j in range(len(table))]


def all_columns(plan: AppendPlan, staged: Staged, replaced: Replacements | None) -> list[Column]:
    """Every field's column over the grown dataset: old samples (replaced ones with their
    replacements' values), then the new ones."""
    specs = plan.index.fields
    if not specs:
        return []
    values = old_values(plan, range(plan.index.num_samples))
    if replaced is not None:
        for j, i in enumerate(replaced.at):
            values[i] = replaced.values(j)
    return columns_of(specs, values + staged_values(staged.table, len(specs)))


def field_counts(plan: AppendPlan, staged: Staged, replaced: Replacements | None
                 ) -> tuple[int, ...]:
    """How many samples of the grown dataset have a value, per field (index.json)."""
    specs = plan.index.fields
    if not specs:
        return ()
    counts = list(plan.index.field_counts or (0,) * len(specs))
    gone = old_values(plan, replaced.at) if replaced is not None else []
    came = [replaced.values(j) for j in range(len(replaced.at))] if replaced is not None else []
    for sign, rows in ((-1, gone), (1, came), (1, staged_values(staged.table, len(specs)))):
        for row in rows:
            for n, value in enumerate(row):
                counts[n] += sign * (value is not None)
    return tuple(counts)
