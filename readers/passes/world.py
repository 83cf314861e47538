"""Which rank of how many a reader splits for, resolved when a pass starts.

Training frameworks build loaders before the process group exists: a script's top level,
a Lightning DataModule's `__init__`, a loader made before `trainer.fit`. A reader that
asked torch.distributed at construction would split for rank 0 of 1 and every rank would
read everything, silently. So a reader resolves its rank when a pass starts (and `len()`
asks afresh each time), and refuses, naming both, when the world it finds differs from
one it already used or from the one it was given before the group existed:

    given rank/world_size, no group when given   honoured until a group says otherwise
    given while a group existed                  honoured (a deliberate custom split)
    not given                                    the process group's, else rank 0 of 1

`torch.distributed` state is not shared with spawned DataLoader workers: a reader sent to
one carries the world the main process found when it sent it (`sent`), and a forked
worker inherits the group's state and asks it directly.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch.distributed as dist

RankWorld = tuple[int, int]


def group_world() -> RankWorld | None:
    """(rank, world_size) of the initialised default process group, or None."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


def check_world(rank: int, world_size: int) -> RankWorld:
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in 0..{world_size - 1} (world_size {world_size})")
    return rank, world_size


def describe(world: RankWorld) -> str:
    return f"rank {world[0]} of {world[1]}"


@dataclass(eq=False)  # compared by object: live ones are kept in a WeakSet
class LateWorld:
    """A reader's split, resolved late (see the module docstring).

    `given` is what the caller passed (None: ask the group); `group_when_given` the
    group's world when it was given (None: there was no group, so the arguments were a
    guess a later group may contradict); `used` the world of the first pass.
    """

    given: tuple[int | None, int | None]
    group_when_given: RankWorld | None
    used: RankWorld | None = None

    @classmethod
    def of(cls, rank: int | None, world_size: int | None) -> LateWorld:
        world = cls((rank, world_size), group_world() if (rank, world_size) != (None, None)
                    else None)
        world.now()  # a bad explicit rank fails at construction, not in a worker
        if world_size is not None and world.group_when_given is None:
            _GIVEN_WITHOUT_GROUP.add(world)
        return world

    def now(self, sent: RankWorld | None = None) -> RankWorld:
        """The world as of now, without recording it; `sent`: see the module docstring."""
        group = group_world() or sent
        rank, size = self.given
        if (rank, size) != (None, None) and self.group_when_given is None \
                and group is not None and not _agrees(self.given, group):
            raise ValueError(
                f"this reader was given {describe((rank or 0, size or 1))} before the process "
                f"group existed, and the group now says {describe(group)}: build it after "
                "init_process_group (or inside trainer.fit), or drop rank= and world_size=")
        base = group or (0, 1)
        return check_world(base[0] if rank is None else rank, base[1] if size is None else size)

    def for_pass(self, sent: RankWorld | None = None) -> RankWorld:
        """The world of a pass starting now; the same as every earlier pass's, or an error."""
        world = self.now(sent)
        if self.used is not None and world != self.used:
            raise ValueError(
                f"this reader's first pass ran as {describe(self.used)}, this one as "
                f"{describe(world)}: the process group changed after it was first used; "
                "build the reader (and its DataLoader) after init_process_group")
        self.used = world
        return world


_GIVEN_WITHOUT_GROUP: weakref.WeakSet[LateWorld] = weakref.WeakSet()


def given_world_sizes() -> set[int]:
    """The world sizes that live readers of this process were given with no process group."""
    return {size for world in list(_GIVEN_WITHOUT_GROUP)
            if (size := world.given[1]) is not None}


def _agrees(given: tuple[int | None, int | None], group: RankWorld) -> bool:
    return all(g is None or g == v for g, v in zip(given, group, strict=True))
