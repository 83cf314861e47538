"""A .tar.gz whose members are not in name order (a plain `tar czf` writes directory
order): read in one forward pass all the same, members that come early kept in memory
or a temporary file, and converted like the extracted folder, file for file."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from packer import ConvertOptions, convert
from packer.core.index import INDEX_NAME
from packer.core.record import SourceItem
from packer.source import gzcursor
from packer.source.members import ArchiveSource
from packer.source.scan import scan
from tests.archive_support import WDS, make_tgz_any_order, without_job
from tests.helpers import tree_hashes


def test_members_are_really_out_of_name_order(src: Path, tmp_path: Path) -> None:
    source = scan(make_tgz_any_order(src, tmp_path / "train.tgz"))
    assert source.archive is not None
    assert bool(np.any(np.diff(source.archive.table.offsets) < 0))
    assert [i.key for i in source.items] == [i.key for i in scan(src).items]


@pytest.mark.parametrize("memory", [gzcursor.MEMORY, 0])  # 0: every early member spills
@pytest.mark.parametrize("workers", [0, 2])
def test_converts_like_the_extracted_folder(src: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch, memory: int,
                                            workers: int) -> None:
    monkeypatch.setattr(gzcursor, "MEMORY", memory)
    archive = make_tgz_any_order(src, tmp_path / "train.tgz")
    run = ConvertOptions(shards=WDS.shards, workers=workers)
    convert(archive, tmp_path / "a" / "ds", "wds", run=run)
    convert(src, tmp_path / "f" / "ds", "wds", run=WDS)
    ours, theirs = tree_hashes(tmp_path / "a" / "ds"), tree_hashes(tmp_path / "f" / "ds")
    del ours[INDEX_NAME], theirs[INDEX_NAME]
    assert ours == theirs
    assert without_job(tmp_path / "a" / "ds") == without_job(tmp_path / "f" / "ds")


def counted_cursor(items: Sequence[SourceItem], monkeypatch: pytest.MonkeyPatch
                   ) -> tuple[gzcursor.GzipCursor, list[int]]:
    """A cursor over the items' archive, and a list that grows at each (re)start."""
    origin = items[0].origin
    assert isinstance(origin, ArchiveSource)
    cursor = gzcursor.GzipCursor(origin.path, origin.table.offsets, origin.table.sizes)
    starts: list[int] = []
    real_restart = cursor._restart

    def counting() -> None:
        starts.append(1)
        real_restart()

    monkeypatch.setattr(cursor, "_restart", counting)
    return cursor, starts


def test_cursor_keeps_early_members_in_memory_then_in_a_file(
        src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    items = scan(make_tgz_any_order(src, tmp_path / "train.tgz")).items
    expected = [Path(item.path).read_bytes() for item in scan(src).items]
    monkeypatch.setattr(gzcursor, "MEMORY", sum(map(len, expected)) // 4)
    cursor, starts = counted_cursor(items, monkeypatch)
    try:
        assert [cursor.read(i) for i in range(len(items))] == expected
        assert len(starts) == 1  # the first read opens the stream: one pass in all
        assert cursor.spill is not None and int(cursor.spilled.max()) == -1  # all handed out
        assert cursor.waiting == 0 and os.fstat(cursor.spill.fileno()).st_size == 0
        assert not cursor.kept
        assert cursor.read(0) == expected[0]  # passed and handed out: the stream restarts
        assert len(starts) == 2
    finally:
        cursor.close()


@pytest.mark.parametrize("memory", [gzcursor.MEMORY, 0])  # 0: what is kept spills
def test_a_resumed_run_keeps_only_what_it_will_ask_for(src: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        memory: int) -> None:
    """Starting midway (resume), members well before the start are passed, not kept;
    those a little before it are kept (threads ask a little out of order) until the run
    is SLACK past its start, then dropped: nothing stays that will never be asked for."""
    monkeypatch.setattr(gzcursor, "SLACK", 2)
    monkeypatch.setattr(gzcursor, "MEMORY", memory)
    items = scan(make_tgz_any_order(src, tmp_path / "train.tgz")).items
    expected = [Path(item.path).read_bytes() for item in scan(src).items]
    cursor, starts = counted_cursor(items, monkeypatch)
    try:
        start = len(items) // 2
        order = [start + 1, start, *range(start + 2, len(items))]
        assert [cursor.read(i) for i in order] == [expected[i] for i in order]
        assert len(starts) == 1
        assert cursor.settled and not cursor.kept and cursor.waiting == 0
        if cursor.spill is not None:
            assert os.fstat(cursor.spill.fileno()).st_size == 0
    finally:
        cursor.close()
