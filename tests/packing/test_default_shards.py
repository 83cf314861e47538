"""The default shard limits: at least MIN_SHARDS shards for a set of at least that many
inputs, so that stock webdataset in a DataLoader with workers reads a small set; given
limits win; the plan is a function of the inputs alone."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

import pytest
import torch.utils.data
from hypothesis import given
from hypothesis import strategies as st

import packer
from packer.core.index import open_dataset
from packer.formats.base import MIN_SHARDS, ShardOptions
from packer.testing import make_sample_folder
from tests.helpers import run_pack

COUNT = 40


@pytest.fixture(scope="module")
def small_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_sample_folder(tmp_path_factory.mktemp("small") / "src", count=COUNT,
                              classes=4, min_side=24, max_side=48)


def _urls(dst: Path) -> list[str]:
    return [str(dst / shard.name) for shard in open_dataset(dst)[0].shards]


def test_stock_webdataset_with_two_workers_reads_every_sample_once(small_set: Path,
                                                                   tmp_path: Path) -> None:
    import webdataset

    dst = tmp_path / "small.wds"
    packer.convert(small_set, dst, "wds", run=packer.ConvertOptions(workers=0))
    urls = _urls(dst)
    assert len(urls) == MIN_SHARDS  # 40 inputs: 5 a shard
    loader = torch.utils.data.DataLoader(webdataset.WebDataset(urls, shardshuffle=False),
                                         batch_size=None, num_workers=2)
    keys = [unquote(sample["__key__"]) for sample in loader]
    table = open_dataset(dst)[1]
    assert sorted(keys) == sorted(table.key(i) for i in range(COUNT))


def test_the_cli_default_spreads_and_a_given_size_wins(small_set: Path, tmp_path: Path) -> None:
    spread = run_pack("convert", small_set, tmp_path / "a.wds", "--to", "wds", "-q")
    assert spread.exit_code == 0 and f"(wds, {MIN_SHARDS} shards, " in spread.output
    given_size = run_pack("convert", small_set, tmp_path / "b.wds", "--to", "wds", "-q",
                          "--shard-size", "256MB")
    assert given_size.exit_code == 0 and "(wds, 1 shard, " in given_size.output
    given_samples = run_pack("convert", small_set, tmp_path / "c.wds", "--to", "wds", "-q",
                             "--shard-samples", "20")
    assert given_samples.exit_code == 0 and "(wds, 2 shards, " in given_samples.output


def test_the_same_inputs_make_the_same_shards(small_set: Path, tmp_path: Path) -> None:
    made = []
    for name in ("one", "two"):
        dst = tmp_path / name / "photos.wds"
        packer.convert(small_set, dst, "wds", run=packer.ConvertOptions(workers=2))
        made.append(open_dataset(dst)[0].shards)
    assert made[0] == made[1] and len(made[0]) == MIN_SHARDS


@given(st.integers(0, 100_000), st.integers(1, 64), st.none() | st.integers(1, 5_000))
def test_the_rule_gives_at_least_min_shards_and_fewer_than_twice(
        num_inputs: int, min_shards: int, max_samples: int | None) -> None:
    limits = ShardOptions(max_samples=max_samples, min_shards=min_shards).for_inputs(num_inputs)
    assert limits.min_shards is None and limits.max_bytes == ShardOptions.max_bytes
    assert limits.max_samples is not None and limits.max_samples >= 1
    if max_samples is not None:
        assert limits.max_samples <= max_samples
    shards = -(-num_inputs // limits.max_samples)  # inputs cut every max_samples
    assert shards >= min(num_inputs, min_shards)
    if max_samples is None and num_inputs >= min_shards:
        assert shards < 2 * min_shards  # not a shard a sample
    assert limits == ShardOptions(max_samples=max_samples,
                                  min_shards=min_shards).for_inputs(num_inputs)


def test_given_limits_are_kept_as_given() -> None:
    given_limits = ShardOptions(max_bytes=1_000, max_samples=3)
    assert given_limits.for_inputs(10_000) is given_limits
    assert given_limits.to_json() == {"max_bytes": 1_000, "max_samples": 3}  # as recorded before
    assert packer.ConvertOptions().shards == ShardOptions.spread()
    assert ShardOptions.spread().to_json()["min_shards"] == MIN_SHARDS
    with pytest.raises(ValueError, match="minimum shards"):
        ShardOptions(min_shards=0)
