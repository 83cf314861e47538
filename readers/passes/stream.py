"""One pass's records, read span by span: in order, shuffled in a buffer, or resumed.

The reading half of a PackedIterableDataset pass; the resume (`PendingResume`) decides how many
records a resumed pass skips, this module skips them without reading them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt

from packer.formats.base import RecordReader
from readers.plan.chunks import ChunkPlan, Spans, buffered_shuffle, epoch_rng, expand, num_in, take
from readers.plan.elastic import Segment, rest_of_epoch

SpanRecord = tuple[int, bool, bytes]  # (sample index, padded, stored bytes)

__all__ = ["SpanRecord", "pass_records", "rest_after", "span_records", "stream_order"]


def stream_order(count: int, buffer_size: int,
                 rng: np.random.Generator | None) -> npt.NDArray[np.int64]:
    """Positions 0..count-1 in the order `buffered_shuffle` yields them with `rng`.

    Exactly the same draws as the pass itself (the buffer's draws do not depend on the
    items); no generator means no shuffle.
    """
    if rng is None:
        return np.arange(count, dtype=np.int64)
    return np.fromiter(buffered_shuffle(range(count), buffer_size, rng), np.int64, count)


def rest_after(first: ChunkPlan, segments: Sequence[Segment], epoch: int, buffer_size: int,
               per_worker: bool) -> Spans:
    """What `segments` (a loop state's) left of `epoch`, whose first
    segment read `first`'s plan: the streams' orders are a PackedIterableDataset worker's
    (`per_worker`: seed, epoch, rank, worker, 2) or a ChunkSampler rank's (seed, epoch,
    rank, 1), as their passes draw them."""
    def order(rank: int, worker: int, count: int) -> npt.NDArray[np.int64]:
        stream = (rank, worker, 2) if per_worker else (rank, 1)
        rng = epoch_rng(first.seed, epoch, *stream) if first.shuffle else None
        return stream_order(count, buffer_size, rng)

    return rest_of_epoch(first.epoch_spans(epoch), segments, order, first.drop_last)


LOOKAHEAD_SPANS = 8  # how far ahead of the read a prefetching reader is shown


def span_records(reader: RecordReader, spans: Spans) -> Iterator[SpanRecord]:
    """(index, padded, stored bytes) span by span, each span one sequential read.

    The reader is shown the coming spans (a URL's mirror starts fetching its shards
    while this one is read; local readers ignore it) and told when the spans end or the
    pass is closed, so that no fetching thread of a finished pass is left alive for a
    fork to meet (`Prefetcher`).
    """
    rows = spans.tolist()
    try:
        for number, (start, stop, padded) in enumerate(rows):
            if number + 1 < len(rows):
                reader.prefetch(rows[number + 1 : number + 1 + LOOKAHEAD_SPANS])
            for i, data in zip(range(start, stop), reader.read_range(start, stop),
                               strict=True):
                yield i, bool(padded), data
    finally:
        reader.stop_prefetch()


def pass_records(reader: RecordReader, spans: Spans, buffer_size: int,
                 rng: np.random.Generator | None, skip: int) -> Iterator[SpanRecord]:
    """One pass's records: read span by span and shuffled within the buffer (no generator:
    in order), or, after a resume, the same sequence less its first `skip` records."""
    if skip:
        return resumed_records(reader, spans, stream_order(num_in(spans), buffer_size, rng), skip)
    records = span_records(reader, spans)
    return records if rng is None else buffered_shuffle(records, buffer_size, rng)


def resumed_records(reader: RecordReader, spans: Spans, order: npt.NDArray[np.int64],
                    skip: int) -> Iterator[SpanRecord]:
    """The records at stream positions order[skip:], without reading the skipped ones.

    Positions below the furthest one already yielded sat in the shuffle buffer when the
    pass stopped: one `read_many` fetches them (at most about buffer_size). The rest are
    read on from there span by span, as in an uninterrupted pass, and held only until
    their turn (again at most about a buffer's worth).
    """
    indices, padded = expand(spans)
    rest = order[skip:]
    frontier = int(order[:skip].max()) + 1 if skip else 0
    behind = rest[rest < frontier].tolist()
    held = dict(zip(behind, reader.read_many(indices[behind].tolist()), strict=True))
    ahead = span_records(reader, take(spans, frontier, num_in(spans)))
    next_position = frontier
    for position in rest.tolist():
        while position not in held:
            held[next_position] = next(ahead)[2]
            next_position += 1
        yield int(indices[position]), bool(padded[position]), held.pop(position)
