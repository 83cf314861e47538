"""readers.collate on dict samples: stacking, padding with lengths, lists, shared memory."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from readers import collate
from readers.batching import _shm_pool
from readers.batching._pooled import PooledDict
from readers.batching._shm_pool import BUSY, FREE
from readers.fields import natural
from tests.shm_pool_support import from_a_slot, received, sent


def sample(n_boxes: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    boxes = rng.random((n_boxes, 4)).astype(np.float32).tolist()
    return {"image": torch.full((3, 4, 5), seed, dtype=torch.uint8), "label": seed,
            "caption": f"caption {seed} é", "boxes": natural(boxes),
            "meta": {"id": seed, "tags": ["a", "b"][: seed % 3]}, "score": seed / 3,
            "vector": torch.arange(3, dtype=torch.float32) + seed}


def test_ragged_boxes_pad_with_lengths_beside_them() -> None:
    batch = [sample(n, seed) for seed, n in enumerate([3, 0, 50, 1])]
    out = collate(batch)
    assert list(out) == ["image", "label", "caption", "boxes", "boxes_lengths", "meta",
                         "score", "vector", "vector_lengths"]
    assert out["image"].shape == (4, 3, 4, 5) and out["image"].dtype == torch.uint8
    assert out["label"].tolist() == [0, 1, 2, 3]
    assert out["boxes"].shape == (4, 50, 4) and out["boxes"].dtype == torch.float32
    assert out["boxes_lengths"].dtype == torch.int64
    assert out["boxes_lengths"].tolist() == [3, 0, 50, 1]
    for row, item in enumerate(batch):
        n = len(item["boxes"])
        if n:
            assert torch.equal(out["boxes"][row, :n], item["boxes"])
        assert not out["boxes"][row, n:].any()  # zero-padded
    assert out["caption"] == [item["caption"] for item in batch]
    assert out["meta"] == [item["meta"] for item in batch]
    assert out["score"].dtype == torch.float64
    assert out["score"].tolist() == [seed / 3 for seed in range(4)]
    assert torch.equal(out["vector"], torch.stack([item["vector"] for item in batch]))


def test_equal_length_boxes_stack_and_keep_their_lengths() -> None:
    """A batch's keys never depend on its contents: batch_size=1, or every image with
    the same number of boxes, still has boxes_lengths."""
    out = collate([sample(2, 0), sample(2, 1)])
    assert out["boxes"].shape == (2, 2, 4) and out["boxes_lengths"].tolist() == [2, 2]
    alone = collate([sample(3, 0)])
    assert alone["boxes"].shape == (1, 3, 4) and alone["boxes_lengths"].tolist() == [3]


def test_mixed_int_and_float_arrays_promote_and_mixed_types_stay_lists() -> None:
    ints, floats = natural([[1, 2, 3, 4]]), natural([[0.5, 1, 2, 3], [1, 1, 1, 1]])
    assert ints.dtype == torch.int64 and floats.dtype == torch.float32
    base = {"image": torch.zeros(3, 2, 2, dtype=torch.uint8), "label": 0}
    out = collate([{**base, "boxes": ints, "x": None, "n": 1},
                   {**base, "boxes": floats, "x": "text", "n": 2.5}])
    assert out["boxes"].dtype == torch.float32 and out["boxes_lengths"].tolist() == [1, 2]
    assert out["x"] == [None, "text"] and out["n"] == [1, 2.5]


def test_natural_values() -> None:
    assert natural([]).shape == (0,)
    assert natural(["a", "b"]) == ["a", "b"]
    assert natural([[1, 2], [3]]) == [[1, 2], [3]]  # ragged: as it is
    assert natural([True, False]) == [True, False]
    assert natural([1, None]) == [1, None]
    assert natural([2**70]) == [2**70]
    assert natural({"a": [1]}) == {"a": [1]}
    assert natural(0.1) == 0.1 and natural(None) is None
    assert natural(np.arange(3, dtype=np.int16)).dtype == torch.int16


def test_different_keys_are_refused() -> None:
    base = {"image": torch.zeros(3, 2, 2, dtype=torch.uint8), "label": 0}
    with pytest.raises(ValueError, match="different keys"):
        collate([{**base, "a": 1}, {**base, "b": 1}])


def test_default_collate_takes_the_same_dicts_when_not_ragged() -> None:
    batch = [{k: v for k, v in sample(2, seed).items() if k != "meta"} for seed in (0, 1)]
    ours, theirs = collate(batch), default_collate(batch)
    for name in ("image", "label", "boxes", "caption", "vector"):
        assert type(ours[name]) is type(theirs[name])
        assert (torch.equal(ours[name], theirs[name]) if isinstance(ours[name], torch.Tensor)
                else ours[name] == theirs[name])


class DictImages(Dataset[dict[str, Any]]):
    def __len__(self) -> int:
        return 24

    def __getitem__(self, i: int) -> dict[str, Any]:
        return sample(i % 5, i)


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dict_batches_leave_workers_in_recycled_shared_memory(context: str) -> None:
    """Images stacked into a pool slot (as tuple batches are); the rest by value."""
    loader = DataLoader(DictImages(), batch_size=6, num_workers=2, collate_fn=collate,
                        multiprocessing_context=context)
    expected = [collate([sample(i % 5, i) for i in range(k, k + 6)]) for k in range(0, 24, 6)]
    got = list(loader)
    assert len(got) == 4
    for batch, want in zip(got, expected, strict=True):
        assert type(batch) is dict and list(batch) == list(want)
        assert from_a_slot(batch["image"])
        for name, value in want.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(batch[name], value), name
            else:
                assert batch[name] == value, name


def test_pooled_dict_arrives_as_a_plain_dict_and_frees_its_slot() -> None:
    pool = _shm_pool.SlotPool()
    inner, slot = sent(pool, (2, 3, 2, 2))
    inner.images.fill_(7)
    boxes = torch.ones(2, 1, 4)
    pooled = PooledDict({"image": inner.images, "label": inner[1], "boxes": boxes,
                                   "caption": ["a", "b"]}, inner)
    arrived = received(pooled)
    assert type(arrived) is dict and list(arrived) == ["image", "label", "boxes", "caption"]
    assert arrived["caption"] == ["a", "b"] and torch.equal(arrived["boxes"], boxes)
    assert torch.equal(arrived["label"], torch.arange(2)) and int(arrived["image"].max()) == 7
    assert pool.state[slot] == BUSY
    del arrived
    gc.collect()
    assert pool.state[slot] == FREE
