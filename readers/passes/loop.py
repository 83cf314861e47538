"""loop_state: the position a training loop over a plain DataLoader saves to resume
mid-epoch, counted in batches (a resume turns it back into each worker's
count), and the world size it records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from readers.passes.world import given_world_sizes, group_world
from readers.plan.chunks import check_epoch

LoopState = dict[str, Any]


def loop_state(epoch: int, batches_consumed: int, batch_size: int, num_workers: int = 0,
               drop_last: bool = False, world_size: int | None = None,
               resumed_from: Mapping[str, Any] | None = None) -> LoopState:
    """What a training loop over a plain DataLoader saves to resume mid-epoch.

    `drop_last` is the DataLoader's (it decides how many batches each worker makes);
    `world_size` defaults to the process group's; without one, 1, and a ValueError where
    readers of this process were given another (PartitionOptions(world_size=...)). In a pass
    that was resumed from a state, count the batches of this pass and pass that state as
    `resumed_from`: on the same topology the two make one count, on another the state
    records both stretches.
    """
    for name, value in (("batches_consumed", batches_consumed), ("num_workers", num_workers)):
        if value < 0:
            raise ValueError(f"{name} must be 0 or more, not {value}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    world_size = _world_size() if world_size is None else world_size
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, not {world_size}")
    state: LoopState = {"epoch": check_epoch(epoch), "batches_consumed": batches_consumed,
                        "batch_size": batch_size, "num_workers": num_workers,
                        "drop_last": int(drop_last), "world_size": world_size}
    if resumed_from is None:
        return state
    if int(resumed_from.get("epoch", -1)) != epoch:
        raise ValueError(f"resumed_from is a state of epoch {resumed_from.get('epoch')}, "
                         f"not {epoch}: pass the state this epoch's pass resumed from")
    if _continues(resumed_from, state):  # the pass went on in the very order: one count
        return {**state, "batches_consumed": batches_consumed
                + int(resumed_from["batches_consumed"])}
    return {**state, "resumed_from": dict(resumed_from)}


def _world_size() -> int:
    """The process group's world size; outside one, 1, unless this process's readers were
    given another (then the state would say 1 while they split for more: refused)."""
    group = group_world()
    if group is not None:
        return group[1]
    given = given_world_sizes() - {1}
    if given:
        raise ValueError(f"loop_state: there is no process group, and this process's readers "
                         f"were given world_size={min(given)} (PartitionOptions): pass "
                         f"world_size={min(given)} so the state records the split they read")
    return 1


def _continues(earlier: Mapping[str, Any], state: Mapping[str, Any]) -> bool:
    """Whether a pass resumed from `earlier` on `state`'s topology skipped its way on in the
    uninterrupted order (the same topology), rather than reading a re-split rest."""
    same = ("world_size", "num_workers", "batch_size", "drop_last")
    return "batches_consumed" in earlier and "resumed_from" not in earlier and all(
        int(earlier.get(key, state[key])) == state[key] for key in same)
