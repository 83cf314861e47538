"""Calls written against the old reader signatures keep working, with a DeprecationWarning.

Until this release the dataset and sampler constructors took most settings by position,
and flat keywords that now live in SplitOptions / RemoteOptions (or were renamed: one name
per meaning). `accepts_legacy` translates such a call into the new keywords and warns once
per call, naming the new spelling, so existing training scripts run unchanged while they
are updated. Type checkers see only the new signature, which is the point.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from readers.options.values import RemoteOptions, SplitOptions

Init = TypeVar("Init", bound=Callable[..., None])

# old keyword -> (new keyword, field of the option value or None for a plain rename)
Moves = Mapping[str, tuple[str, str | None]]

SPLIT_MOVES: Moves = {name: ("split", name) for name in
                      ("drop_last", "rank", "world_size", "chunk_size", "buffer_size")}
REMOTE_MOVES: Moves = {"cache_dir": ("remote", "cache_dir"),
                       "storage_options": ("remote", "storage_options")}
_GROUPS: dict[str, type[Any]] = {"split": SplitOptions, "remote": RemoteOptions}


def accepts_legacy(positional: tuple[str, ...], moves: Moves) -> Callable[[Init], Init]:
    """Wrap an `__init__(self, first, *, ...)` to take the old call shapes too.

    `positional`: the old names of the arguments after the first, in their old order.
    `moves`: old keywords that are now spelled otherwise.
    """
    def wrap(init: Init) -> Init:
        @functools.wraps(init)
        def upgraded(self: Any, first: Any, *args: Any, **kwargs: Any) -> None:
            if args or not moves.keys().isdisjoint(kwargs):
                kwargs = _upgrade(type(self).__name__, args, kwargs, positional, moves)
            init(self, first, **kwargs)
        return upgraded  # type: ignore[return-value]
    return wrap


def _upgrade(owner: str, args: tuple[Any, ...], kwargs: dict[str, Any],
             positional: tuple[str, ...], moves: Moves) -> dict[str, Any]:
    if len(args) > len(positional):
        raise TypeError(f"{owner}() takes at most {len(positional) + 1} positional arguments "
                        f"(and only the first from this release), got {len(args) + 1}")
    named = dict(zip(positional, args, strict=False))
    for name in named:
        if name in kwargs:
            raise TypeError(f"{owner}() got multiple values for argument {name!r}")
    old = {**named, **{k: v for k, v in kwargs.items() if k in moves}}
    new = {k: v for k, v in kwargs.items() if k not in moves}
    spellings = [_move(name, value, moves, new) for name, value in old.items()]
    warnings.warn(f"{owner}: {'; '.join(spellings)} (the old spelling goes in the next "
                  f"release)", DeprecationWarning, stacklevel=3)
    return new


def _move(name: str, value: Any, moves: Moves, new: dict[str, Any]) -> str:
    """Put one old argument where it goes now; return how to spell it."""
    if name not in moves:
        new[name] = value
        return f"pass {name}= by keyword"
    target, field = moves[name]
    if field is None:
        new[target] = value
        return f"{name}= is now {target}="
    group = new.get(target)
    current = _GROUPS[target]() if group is None else group
    if isinstance(current, _GROUPS[target]):
        new[target] = dataclasses.replace(current, **{field: value})
    spelling = f"{target}={_GROUPS[target].__name__}({field}=...)"
    return f"{name}= is now {spelling}"
