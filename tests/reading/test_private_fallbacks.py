"""Every private torch name the batch pool rests on has a fallback: with any one of them
gone (as a torch release may drop it), recycling is off and the batches that cross from
the workers are the same. A name is taken away from the pool's sight only (torch's own
code keeps using it, as a release that dropped it would have changed that code too)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from readers import PackedDataset, RawBatch, collate
from readers.batching import _shm_pool, _torch_private
from tests.helpers import pack_wds


@pytest.fixture(scope="module")
def wds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pack_wds(tmp_path_factory.mktemp("fallbacks"), 24, 8, min_side=16, max_side=40)


def _epoch(wds: Path, decode: str) -> list[Any]:
    options: dict[str, Any] = {"size": (16, 16)} if decode == "rgb8" else {}
    dataset = PackedDataset(wds, decode=decode, **options)  # type: ignore[arg-type]
    loader = DataLoader(dataset, batch_size=5, num_workers=2, collate_fn=collate,
                        multiprocessing_context="fork")
    return [_plain(batch) for batch in loader]


def _plain(batch: Any) -> Any:
    images, labels = batch[0], batch[1]
    pixels = [bytes(sample) for sample in images] if isinstance(images, RawBatch) \
        else images.clone()
    return pixels, labels.clone()


@pytest.mark.parametrize(("owner", "name"), _torch_private.PRIVATE_NAMES,
                         ids=[name for _, name in _torch_private.PRIVATE_NAMES])
def test_without_a_private_name_the_pool_is_off_and_batches_are_the_same(
        wds: Path, owner: object, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    want = {decode: _epoch(wds, decode) for decode in ("rgb8", "raw")}
    assert _shm_pool.pool_supported()
    gone = tuple((object(), n) if (o, n) == (owner, name) else (o, n)
                 for o, n in _torch_private.PRIVATE_NAMES)
    monkeypatch.setattr(_torch_private, "PRIVATE_NAMES", gone)  # forked workers inherit it
    assert not _shm_pool.pool_supported()
    for decode in ("rgb8", "raw"):
        got = _epoch(wds, decode)
        assert len(got) == len(want[decode])
        for (pixels, labels), (want_pixels, want_labels) in zip(got, want[decode], strict=True):
            assert torch.equal(labels, want_labels)
            if isinstance(pixels, list):
                assert pixels == want_pixels
            else:
                assert torch.equal(pixels, want_pixels)


def test_a_shared_buffer_without_the_private_allocator_is_still_shared(
        monkeypatch: pytest.MonkeyPatch) -> None:
    gone = tuple((object(), n) if n == "_new_shared" else (o, n)
                 for o, n in _torch_private.PRIVATE_NAMES)
    monkeypatch.setattr(_torch_private, "PRIVATE_NAMES", gone)
    buffer = _shm_pool.shared_buffer((3, 4), torch.int64)
    assert buffer.shape == (3, 4) and buffer.dtype == torch.int64 and buffer.is_shared()
