"""packer.conversion.parallel without Ray: group planning (a property test), a task in-process."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from packer import ConvertOptions, convert
from packer.conversion.parallel import commit_group, plan_groups, write_group
from packer.core.index import ShardInfo, open_dataset
from packer.encode import EncodeOptions
from packer.errors import DestinationError
from packer.formats.base import ShardOptions
from packer.source.scan import scan
from tests.helpers import tree_hashes


@given(n=st.integers(0, 200), start=st.integers(0, 200), size=st.integers(1, 30))
def test_groups_cover_the_rest_once_and_stay_aligned(n: int, start: int, size: int) -> None:
    items = list(range(n))
    groups = list(plan_groups(items, start, size))  # type: ignore[arg-type]
    covered = [i for _, _, part in groups for i in part]
    assert covered == items[start:]
    for group, first, part in groups:
        assert all(i // size == group for i in part) and part[0] == first
    assert len({group for group, _, _ in groups}) == len(groups)


def test_tasks_run_in_process_give_a_local_runs_shards(mixed_src: Path, tmp_path: Path) -> None:
    """Each group written by write_group and committed in order: the shards of a local
    run with the same --shard-samples, rejects included (the mixed source has bad files)."""
    local = convert(mixed_src, tmp_path / "local", "wds",
                    run=ConvertOptions(shards=ShardOptions(max_samples=4), workers=0))
    out = tmp_path / "tasks"
    out.mkdir()
    items = scan(mixed_src).items
    shards: list[ShardInfo] = []
    rejected = 0
    for task in plan_groups(items, 0, 4):
        result = write_group(task, str(out), EncodeOptions(), 256_000_000, os.getcwd(),
                             stop_at_reject=False)
        rejected += len(result.rejects)
        commit_group(out, result, shards, "local")
    assert tuple(shards) == local.shards
    assert rejected == local.num_rejected - len(scan(mixed_src).rejects)
    assert {name: digest for name, digest in tree_hashes(out).items()
            if name.startswith("local-")} == \
        {name: digest for name, digest in tree_hashes(tmp_path / "local").items()
         if name.startswith("local-")}


def test_a_tasks_table_holds_the_local_runs_rows(mixed_src: Path, tmp_path: Path) -> None:
    """Each task sends its group's SampleTable, built by the same writer loop as a local
    run: keys, labels, in-shard offsets, sizes and digests are the local table's rows."""
    convert(mixed_src, tmp_path / "local", "wds",
            run=ConvertOptions(shards=ShardOptions(max_samples=4), workers=0))
    _, table = open_dataset(tmp_path / "local")
    tables = [write_group(task, str(tmp_path / "tasks"), EncodeOptions(), 256_000_000,
                          os.getcwd(), stop_at_reject=False).table
              for task in plan_groups(scan(mixed_src).items, 0, 4)]
    rows = np.concatenate([part.rows for part in tables])
    keys = [part.key(i) for part in tables for i in range(len(part))]
    assert keys == table.keys()
    for column in ("label", "offset", "size", "digest"):
        assert np.array_equal(rows[column], table.rows[column]), column


def test_a_task_stops_at_its_first_reject_when_asked(mixed_src: Path, tmp_path: Path) -> None:
    """--on-error fail: the task ends its shard after the first reject (the driver then
    stops on it); without it the group goes on to its last input."""
    items = scan(mixed_src).items
    task = next(task for task in plan_groups(items, 0, 8)
                if any(item.path.endswith("_empty.jpg") for item in task[2]))
    full = write_group(task, str(tmp_path / "a"), EncodeOptions(), 256_000_000, os.getcwd(),
                       stop_at_reject=False)
    stopped = write_group(task, str(tmp_path / "b"), EncodeOptions(), 256_000_000,
                          os.getcwd(), stop_at_reject=True)
    first = full.rejects[0]
    assert stopped.rejects == (first,)
    before = [item.key for item in task[2] if item.position < first.position]
    assert stopped.table.keys() == before and len(full.table) > len(before)


def test_a_shard_written_on_another_node_is_a_clear_error(mixed_src: Path,
                                                          tmp_path: Path) -> None:
    """A task on a node that does not share DST wrote its shard there, not here."""
    items = scan(mixed_src).items
    task = next(plan_groups(items, 0, 4))
    result = write_group(task, str(tmp_path / "node-b"), EncodeOptions(), 256_000_000,
                         os.getcwd(), stop_at_reject=False)
    (tmp_path / "driver").mkdir()
    with pytest.raises(DestinationError, match="mount DST at the same path on every node"):
        commit_group(tmp_path / "driver", result, [], "driver")


def test_a_node_that_cannot_write_dst_is_one_line(mixed_src: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "dst"
    blocker.write_text("a file where the task needs a folder")
    task = next(plan_groups(scan(mixed_src).items, 0, 4))
    with pytest.raises(DestinationError, match="cannot write on node") as caught:
        write_group(task, str(blocker), EncodeOptions(), 256_000_000, os.getcwd(),
                    stop_at_reject=False)
    assert "\n" not in str(caught.value)
