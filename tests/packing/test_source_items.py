"""The scan's compact items: the same order, duplicates and items as a list would give,
at a fraction of the memory (issue 2: memory stays flat as the source grows)."""

from __future__ import annotations

import pickle
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packer.conversion.identity import fingerprint
from packer.core.record import Reject, SourceItem
from packer.source.items import SORT_PREFIX, ItemsBuilder
from packer.source.scan import scan

# Keys that tie on the numpy-sorted prefix (long shared stems), multi-byte characters
# around it, and repeats.
STEMS = st.sampled_from(["", "a", "p" * (SORT_PREFIX - 1), "p" * SORT_PREFIX, "p" * 70, "日" * 22])
TAILS = st.text(alphabet="ab./_ü日\U0001f600", max_size=4)
ROWS = st.lists(st.tuples(STEMS, TAILS, st.sampled_from([".jpg", ".png"]),
                          st.integers(0, 3)), max_size=40)


def reference(rows: list[tuple[str, str, int]]) -> tuple[list[tuple[str, str, int]], list[str]]:
    """What the list-based scan did: sort by (key, path), the first of a key wins."""
    kept, repeated, previous = [], [], None
    for key, path, label in sorted(rows, key=lambda row: (row[0], row[1])):
        if key == previous:
            repeated.append(path)
            continue
        kept.append((key, path, label))
        previous = key
    return kept, repeated


@settings(max_examples=200, deadline=None)
@given(ROWS, st.booleans())
def test_order_and_duplicates_match_python_sorting(raw: list[tuple[str, str, str, int]],
                                                   files: bool) -> None:
    """Stored paths (a manifest) or key + suffix (an image folder's files)."""
    folder = "" if files else "root/"
    rows = [(stem + tail, folder + stem + tail + ext, label) for stem, tail, ext, label in raw]
    builder = ItemsBuilder("/data/")
    for (key, path, label), (*_, ext, _) in zip(rows, raw, strict=True):
        if files:
            builder.add_file(key, ext, label)
        else:
            builder.add(key, path, label)
    rejects: list[Reject] = []
    items = builder.build(rejects)
    kept, repeated = reference(rows)
    assert [(i.key, i.path, i.label) for i in items] == [(k, "/data/" + p, n)
                                                         for k, p, n in kept]
    assert [r.path for r in rejects] == ["/data/" + p for p in repeated]
    assert [i.position for i in items] == list(range(len(kept)))


def test_sequence_behaviour_slices_and_pickle() -> None:
    builder = ItemsBuilder("r/")
    for n in range(50):
        builder.add(f"c/{n:03d}", f"c/{n:03d}.jpg", n % 3)
    items = builder.build([])
    assert len(items) == 50 and items[-1] == SourceItem(49, "r/c/049.jpg", "c/049", 1)
    part = items[10:20]
    assert part[2] == items[12] and part[2].position == 12
    assert list(part) == [items[i] for i in range(10, 20)]
    assert list(items[45:100]) == list(items)[45:]
    assert len(items[30:10]) == 0
    assert items[::7] == [items[i] for i in range(0, 50, 7)]
    with pytest.raises(IndexError):
        items[50]
    sent = pickle.dumps(part)
    assert list(pickle.loads(sent)) == list(part)
    assert len(sent) < len(pickle.dumps(items))  # a batch carries only its own bytes
    assert list(items.rows()) == [(i.key, i.path, i.label) for i in items]


def test_scan_memory_is_compact(tmp_path: Path) -> None:
    """About 40 bytes an item held (a list of SourceItem held ~400), ~150 at the peak."""
    root = tmp_path / "src"
    for c in range(4):
        (root / f"class_{c}").mkdir(parents=True)
        for n in range(750):
            (root / f"class_{c}" / f"img_{n:06d}.jpg").write_bytes(b"")
    tracemalloc.start()
    source = scan(root)
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(source.items) == 3000
    assert held / 3000 < 100 and peak / 3000 < 300, (held / 3000, peak / 3000)
    assert fingerprint(source, {}) == fingerprint(scan(root), {})
