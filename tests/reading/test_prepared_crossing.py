"""A batch's small values are made ready for the pickle when collate builds the batch
(readers.batching._prepared); whatever changes them afterwards in the worker, the main
process gets what the batch holds when it leaves."""

from __future__ import annotations

import torch

from readers.batching._pooled import PooledBatch, PooledDict
from readers.batching._shm_pool import SlotPool
from tests.shm_pool_support import received, sent


def _with_keys(pool: SlotPool, keys: list[str]) -> PooledBatch:
    images = pool.take((len(keys), 3, 2, 2))
    slot = pool.slot_of(images)
    assert slot is not None
    return PooledBatch([images, torch.arange(len(keys)), keys], images, pool, slot)


def test_an_unchanged_batch_arrives_as_it_was_built() -> None:
    batch = _with_keys(SlotPool(), ["a", "b", "é"])
    arrived = received(batch)
    assert arrived[1].tolist() == [0, 1, 2] and arrived[2] == ["a", "b", "é"]


def test_values_changed_in_place_after_collate_arrive_changed() -> None:
    batch = _with_keys(SlotPool(), ["a", "b", "c"])
    batch[1] += 10  # the same tensor, new numbers
    batch[2][1] = "x"  # the same list, one key replaced
    arrived = received(batch)
    assert arrived[1].tolist() == [10, 11, 12] and arrived[2] == ["a", "x", "c"]


def test_values_replaced_or_resized_after_collate_arrive_as_they_are_then() -> None:
    batch = _with_keys(SlotPool(), ["a", "b", "c"])
    batch[1].resize_(5).fill_(4)  # the same tensor object, over new memory
    batch[2] = ("k", "l", "m")
    batch.append(torch.ones(2))  # a value collate never saw
    arrived = received(batch)
    assert arrived[1].tolist() == [4] * 5 and arrived[2] == ("k", "l", "m")
    assert torch.equal(arrived[3], torch.ones(2))


def test_labels_moved_to_shared_memory_still_arrive() -> None:
    batch, _ = sent(SlotPool(), (2, 3, 2, 2))
    batch[1].share_memory_()
    assert received(batch)[1].tolist() == [0, 1]


def test_a_dict_batch_sends_its_fields_as_they_are_when_it_leaves() -> None:
    inner, _ = sent(SlotPool(), (2, 3, 2, 2))
    boxes, lengths = torch.ones(2, 1, 4), torch.tensor([1, 1])
    pooled = PooledDict({"image": inner.images, "label": inner[1], "boxes": boxes,
                         "boxes_lengths": lengths, "caption": ["a", "b"]}, inner)
    pooled["label"].mul_(3)
    pooled["caption"][0] = "z"
    pooled["boxes"] = torch.zeros(2, 2, 4)
    lengths.resize_(3).fill_(2)
    arrived = received(pooled)
    assert arrived["label"].tolist() == [0, 3] and arrived["caption"] == ["z", "b"]
    assert torch.equal(arrived["boxes"], torch.zeros(2, 2, 4))
    assert arrived["boxes_lengths"].tolist() == [2, 2, 2]
