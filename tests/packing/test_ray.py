"""`--executor ray`: the same bytes as a local run, through the library and the CLI.

One local Ray instance (2 CPUs) serves the whole module; starting it takes a few
seconds. Tests that need Ray skip when it is not installed (`pip install .[ray]`).
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import shutil
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
import pytest
from click.testing import CliRunner

from pack_cli import main
from packer import ConvertOptions, convert
from packer.conversion.job import convert_local
from packer.conversion.writing import GroupResult
from packer.encode import EncodeOptions
from packer.errors import DestinationError, MissingDependencyError, install_line
from packer.formats.base import ShardOptions
from packer.source.scan import scan
from tests.helpers import decoded_by_key, tree_hashes

pytestmark = pytest.mark.frameworks  # a local Ray instance and its worker processes
DST = "photos.wds"  # every run's DST has this name: shards carry it

CASES = {  # name: (format, encode options, shard options)
    "wds-passthrough": ("wds", EncodeOptions(), ShardOptions(max_samples=7)),
    "wds-small-shards": ("wds", EncodeOptions(check="header"), ShardOptions(max_bytes=20_000)),
    # tasks write the shards (packer.conversion.parallel); some groups roll by bytes too
    "wds-parallel-writers": ("wds", EncodeOptions(), ShardOptions(max_bytes=12_000,
                                                                  max_samples=5)),
    "npy-pixels": ("npy", EncodeOptions(size=(24, 32)), ShardOptions()),
    "lmdb-resize": ("lmdb", EncodeOptions(resize=32, codec="webp"), ShardOptions()),
}


@pytest.fixture(scope="module")
def ray_instance() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR)
    yield ray
    ray.shutdown()


@pytest.mark.parametrize("case", list(CASES))
def test_ray_output_is_byte_identical(ray_instance: Any, case: str, mixed_src: Path,
                                      tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fmt, options, shards = CASES[case]
    copy = tmp_path / "photos"
    shutil.copytree(mixed_src, copy)
    monkeypatch.chdir(tmp_path)  # a relative SRC: tasks resolve it against this folder
    local = convert("photos", tmp_path / "local" / DST, fmt, options,
                    ConvertOptions(shards=shards, workers=2))
    ray = convert("photos", tmp_path / "ray" / DST, fmt, options,
                  ConvertOptions(shards=shards, executor="ray"))
    assert ray == local
    assert local.num_rejected == 2  # rejects.jsonl names them as the scan did
    assert tree_hashes(tmp_path / "ray" / DST) == tree_hashes(tmp_path / "local" / DST)


def test_tasks_write_the_shards_with_shard_samples(
        ray_instance: Any, mixed_src: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    committed: list[int] = []
    module = importlib.import_module("packer.conversion.parallel")
    real = module.commit_group

    def spy(folder: Path, result: GroupResult, shards: list[Any], stem: str) -> None:
        committed.append(result.group)
        assert (folder / ".pack-state" / "groups" / f"{result.group:07d}").is_dir() == \
            bool(result.shards)  # a task wrote them there, on its node
        assert stem == "photos"
        real(folder, result, shards, stem)

    monkeypatch.setattr(module, "commit_group", spy)
    shards = ShardOptions(max_samples=4)
    ray, local = tmp_path / "ray" / DST, tmp_path / "local" / DST
    convert(mixed_src, ray, "wds", run=ConvertOptions(shards=shards, executor="ray"))
    convert(mixed_src, local, "wds", run=ConvertOptions(shards=shards))
    assert committed == list(range(-(-len(scan(mixed_src).items) // 4)))
    assert tree_hashes(ray) == tree_hashes(local)
    assert (ray / "photos-00000.tar").is_file() and (ray / "photos.wids.json").is_file()


def test_a_local_run_resumed_on_ray_is_byte_identical(
        ray_instance: Any, src: Path, tmp_path: Path) -> None:
    shards = ShardOptions(max_samples=5)
    seen = [0]

    def stop_in_the_third_group(count: int) -> None:
        seen[0] += count
        if seen[0] > 12:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        convert(src, tmp_path / "out" / DST, "wds",
                run=ConvertOptions(shards=shards, workers=0), progress=stop_in_the_third_group)
    convert(src, tmp_path / "out" / DST, "wds",
            run=ConvertOptions(shards=shards, executor="ray", resume=True))
    convert(src, tmp_path / "whole" / DST, "wds", run=ConvertOptions(shards=shards, workers=0))
    assert tree_hashes(tmp_path / "out" / DST) == tree_hashes(tmp_path / "whole" / DST)


def test_ray_keeps_odd_keys(ray_instance: Any, odd_src: Path, tmp_path: Path) -> None:
    convert(odd_src, tmp_path / "local" / DST, "wds", run=ConvertOptions(workers=0))
    convert(odd_src, tmp_path / "ray" / DST, "wds",
            run=ConvertOptions(executor="ray", workers=1))
    assert tree_hashes(tmp_path / "ray" / DST) == tree_hashes(tmp_path / "local" / DST)


def test_ray_data_reads_our_shards(ray_instance: Any, odd_src: Path, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's call: Ray Data over the tars only (`read_webdataset(DST)` would read
    index.json and the tables as tars too). Odd keys, several shards, one image type."""
    pytest.importorskip("pyarrow")  # ray[data]
    import ray.data

    monkeypatch.setattr(ray.data.DataContext.get_current(), "enable_progress_bars", False)
    dst = tmp_path / DST
    convert(odd_src, dst, "wds", EncodeOptions(codec="jpeg"),
            ConvertOptions(shards=ShardOptions(max_samples=5), workers=0))
    rows = ray.data.read_webdataset(str(dst), file_extensions=["tar"]).take_all()
    expected = decoded_by_key(dst)
    by_key = {unquote(row["__key__"]): row for row in rows}
    assert len(rows) == len(by_key) == len(expected) == 13 and by_key.keys() == expected.keys()
    for key, (label, pixels) in expected.items():
        assert by_key[key]["cls"] == label, key
        assert np.array_equal(by_key[key]["jpg"], pixels), key


def test_cli_executor_ray(ray_instance: Any, src: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    for name, extra in (("local", []), ("ray", ["--executor", "ray"])):
        result = runner.invoke(main, ["convert", str(src), str(tmp_path / name), "--to", "npy",
                                      "--size", "16x16", "-q", *extra])
        assert result.exit_code == 0, result.output
        assert "packed 24 samples" in result.output
    assert tree_hashes(tmp_path / "ray") == tree_hashes(tmp_path / "local")


def test_stopping_cancels_tasks_in_flight(ray_instance: Any, tmp_path: Path) -> None:
    """The tasks after the first sleep far longer than a loaded machine takes to cancel
    them, so that a file written by one means that it was not cancelled."""
    from packer.conversion.ray import map_ordered_ray

    def work(n: int) -> int:  # defined here so that Ray pickles it by value
        time.sleep(0.1 if n == 0 else 6.0)
        (tmp_path / f"done-{n}").touch()
        return n

    results = map_ordered_ray(work, range(100), workers=2)
    assert next(results) == 0
    time.sleep(0.5)  # tasks 1 and 2 running, 3 queued
    results.close()  # what Ctrl-C or a writer error does to the generator
    time.sleep(6.0)  # tasks 1 and 2, had they run on, would have written their files
    assert sorted(p.name for p in tmp_path.iterdir()) == ["done-0"]


def test_lost_worker_is_one_line_error(ray_instance: Any) -> None:
    from packer.conversion.ray import RayClusterError, map_ordered_ray

    def work(n: int) -> int:
        if n == 3:
            os._exit(1)  # the worker dies, every time Ray retries the task
        return n

    with pytest.raises(RayClusterError, match=r"lost a task.*--resume"):
        list(map_ordered_ray(work, range(6)))


def test_silent_address_fails_fast_before_dst(src: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh `pack` process
    with socket.socket() as free:  # a port nobody listens on
        free.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{free.getsockname()[1]}"
    result = CliRunner().invoke(main, ["convert", str(src), str(tmp_path / "out"), "--to",
                                       "wds", "--executor", "ray", "--ray-address", address])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"error: cannot join the Ray cluster at '{address}'")
    assert not (tmp_path / "out").exists()


def test_missing_ray_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from packer.conversion.ray import import_ray

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(MissingDependencyError, match=re.escape(install_line("ray"))):
        import_ray()


@pytest.mark.parametrize(("changes", "words"), [
    ({"ray_address": "auto"}, "needs --executor ray"),
    ({"executor": "ray", "workers": 0}, "does not combine"),
    ({"executor": "dask"}, "local or ray"),
])
def test_options_refuse_nonsense(changes: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        ConvertOptions(**changes)


def _refuse(task: int) -> int:
    raise DestinationError(f"task {task}: cannot write on node x; mount DST everywhere")


def test_a_tasks_own_error_reaches_the_user_as_one_line(ray_instance: Any) -> None:
    from packer.conversion.ray import map_ordered_ray

    with pytest.raises(DestinationError) as caught:
        list(map_ordered_ray(_refuse, range(3), workers=1))
    assert str(caught.value).startswith("task 0: cannot write") and "\n" not in str(caught.value)


def test_a_url_dst_keeps_the_driver_writing(ray_instance: Any, src: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """With an upload hook (convert_remote), tasks must not write into the local staging."""
    module = importlib.import_module("packer.conversion.parallel")
    monkeypatch.setattr(module, "commit_group", lambda *a: pytest.fail("tasks wrote shards"))
    parts: list[int] = []
    convert_local(src, tmp_path / "staged", "wds",
                  run=ConvertOptions(shards=ShardOptions(max_samples=5), executor="ray"),
                  on_part=lambda shards: parts.append(len(shards)))
    assert parts == [1, 2, 3, 4]
