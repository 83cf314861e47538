"""The progress bar of a conversion or an append, the Ctrl-C it must not lose, and what a
--resume reused."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tqdm import tqdm

from packer.errors import ctrl_c_pressed

Count = Callable[[int], None]


@contextmanager
def progress_bar(desc: str, quiet: bool) -> Iterator[tuple[Count, Count]]:
    """(advance, on_total) for the library's `progress` and `on_total` callbacks, drawing
    a bar on a terminal (none when `quiet` or stderr is not one), closed when the block
    ends. `advance` raises KeyboardInterrupt for a Ctrl-C that the code it landed in
    dropped (`ctrl_c_watched` noted it)."""
    bar = tqdm(unit="img", disable=quiet or not sys.stderr.isatty(), desc=desc)

    def on_total(total: int) -> None:
        bar.total = total

    def advance(count: int) -> None:
        bar.update(count)
        if ctrl_c_pressed():
            raise KeyboardInterrupt

    try:
        yield advance, on_total
    finally:
        bar.close()


class Reused:
    """Wraps the progress callbacks to learn what a --resume reused: a conversion reports
    its number of inputs (`on_total`), then, as its first count, the inputs an interrupted
    run already packed (`convert_local` reports them)."""

    def __init__(self, advance: Callable[[int], None],
                 on_total: Callable[[int], None]) -> None:
        self._advance = advance
        self._on_total = on_total
        self.total: int | None = None
        self.done: int | None = None  # the first count after the total

    def on_total(self, total: int) -> None:
        self.total = total
        self._on_total(total)

    def advance(self, count: int) -> None:
        if self.done is None and self.total is not None:
            self.done = count
        self._advance(count)

    def line(self) -> str:
        """`resumed: 300 of 500 inputs were already packed`, or that nothing was."""
        if not self.done:
            return "resumed: no inputs of an interrupted run were kept; packed them all"
        return f"resumed: {self.done} of {self.total} inputs were already packed"
