"""The progress bar of a conversion or an append, and the Ctrl-C it must not lose."""

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
