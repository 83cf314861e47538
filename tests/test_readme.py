"""Run the README's ```python blocks, so that the README cannot drift from the code.

Convention: a marker is an HTML comment (invisible on the rendered page) on its own
line directly before a block's opening fence; several markers may stack there.

    <!-- readme-test: skip (reason) -->    the block is never run: it needs what a test
                                           cannot have here (a GPU, a cluster, S3, ...)
    <!-- readme-test: needs MODULE -->     the block runs only where MODULE is installed
                                           (importlib.util.find_spec); elsewhere it is
                                           skipped. Several modules: `needs a b`.

Any other `readme-test:` marker is an error, so a typo cannot skip a block silently. A
block without a marker must run: an exception fails the test (an ImportError too, even
for a module that is not installed: mark the block `needs MODULE` instead).

Blocks run in README order in one namespace, as a reader types them: a block may use
the names an earlier block defined (`it`, `loader`). The working folder is a temporary
one holding what the blocks open: `photos/`, a generated image folder, and
`photos.wds`, `photos.lmdb`, `photos.h5` and `photos.npy` packed from it by
`packer.convert`. Selecting one block (`-k`) runs the earlier runnable blocks first.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from packer import ConvertOptions, convert
from packer.encode import EncodeOptions
from packer.testing import make_sample_folder

README = Path(__file__).resolve().parent.parent / "README.md"
MARKER = re.compile(r"<!--\s*readme-test:\s*(?P<body>.*?)\s*-->")
PACKED = {"photos.wds": ("wds", EncodeOptions(codec="jpeg")),  # one image type: HF, Ray
          "photos.lmdb": ("lmdb", EncodeOptions()),
          "photos.h5": ("hdf5", EncodeOptions()),
          "photos.npy": ("npy", EncodeOptions(size=(32, 32)))}


@dataclass(frozen=True)
class Block:
    """One ```python block of the README and what its markers ask."""

    line: int  # of the opening fence, 1-based
    code: str
    skip: str | None = None  # the reason given
    needs: tuple[str, ...] = ()

    def why_not_run(self) -> str | None:
        """Why this block is skipped here, or None if it must run."""
        if self.skip is not None:
            return f"README line {self.line}: {self.skip}"
        missing = [module for module in self.needs if not installed(module)]
        return f"README line {self.line}: needs {', '.join(missing)}" if missing else None


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a dotted name whose parent is missing
        return False


def parse_markers(lines: list[str], line: int) -> tuple[str | None, tuple[str, ...]]:
    """The skip reason and needed modules of the markers stacked above `line` (0-based)."""
    skip: str | None = None
    needs: list[str] = []
    above = line - 1
    while above >= 0 and (match := MARKER.fullmatch(lines[above].strip())):
        body = match.group("body")
        if skipped := re.fullmatch(r"skip(?:\s*\((?P<reason>.*)\))?", body):
            skip = skipped.group("reason") or "marked skip"
        elif body.startswith("needs ") and body.split()[1:]:
            needs += body.split()[1:]
        else:
            raise ValueError(f"{README}:{above + 1}: unknown marker {body!r}; use "
                             "`readme-test: skip (reason)` or `readme-test: needs MODULE`")
        above -= 1
    return skip, tuple(needs)


def python_blocks(text: str) -> list[Block]:
    """Every ```python block, in order."""
    lines = text.splitlines()
    blocks = []
    start: int | None = None
    for number, line in enumerate(lines):
        if start is None and line.strip() == "```python":
            start = number
        elif start is not None and line.strip() == "```":
            skip, needs = parse_markers(lines, start)
            blocks.append(Block(start + 1, "\n".join(lines[start + 1 : number]) + "\n",
                                skip, needs))
            start = None
    return blocks


BLOCKS = python_blocks(README.read_text(encoding="utf-8"))


@dataclass
class Session:
    """The namespace the blocks share, and how far they have run."""

    namespace: dict[str, Any] = field(default_factory=lambda: {"__name__": "__readme__"})
    done: int = 0  # BLOCKS[:done] have run (or were skipped)

    def run_through(self, number: int) -> None:
        """Run the blocks up to BLOCKS[number] that have not run yet, skipping marked ones."""
        while self.done <= number:
            block = BLOCKS[self.done]
            self.done += 1
            if block.why_not_run() is None:
                code = compile(block.code, f"README.md, block at line {block.line}", "exec")
                exec(code, self.namespace)


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """A working folder holding photos/ and its packed copies, as the README's blocks expect."""
    work = tmp_path_factory.mktemp("readme")
    photos = make_sample_folder(work / "photos", count=24, classes=3, min_side=40,
                                max_side=96)
    for name, (fmt, options) in PACKED.items():
        convert(photos, work / name, fmt, options, ConvertOptions(workers=0))
    before = Path.cwd()
    os.chdir(work)
    running = Session()
    try:
        yield running
    finally:
        running.namespace.clear()  # ends DataLoader workers the blocks left running
        gc.collect()
        os.chdir(before)


def test_the_readme_has_python_blocks() -> None:
    assert len(BLOCKS) >= 3
    assert any(block.why_not_run() is None for block in BLOCKS)


@pytest.mark.timeout(300)
@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")  # 4 workers, 2 CPUs
@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")  # torchdata's own
@pytest.mark.parametrize("number", range(len(BLOCKS)),
                         ids=[f"line{block.line}" for block in BLOCKS])
def test_readme_block_runs(session: Session, number: int) -> None:
    reason = BLOCKS[number].why_not_run()
    session.run_through(number)
    if reason is not None:
        pytest.skip(reason)


# ------------------------------------------------------------------ the convention itself


def test_markers_skip_or_require_modules() -> None:
    text = ("<!-- readme-test: skip (needs a GPU) -->\n```python\nimport cuda_only\n```\n"
            "<!-- readme-test: needs surely_not_installed_xyz -->\n```python\nx = 1\n```\n"
            "<!-- readme-test: needs os -->\n```python\ny = 2\n```\n"
            "```python\nimport surely_not_installed_xyz\n```\n")
    skipped, missing, present, plain = python_blocks(text)
    assert skipped.why_not_run() == "README line 2: needs a GPU"
    assert missing.why_not_run() == "README line 6: needs surely_not_installed_xyz"
    assert present.why_not_run() is None and present.code == "y = 2\n"
    assert plain.why_not_run() is None  # unmarked: an ImportError must fail it


def test_an_unknown_marker_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown marker 'skpi'"):
        python_blocks("<!-- readme-test: skpi -->\n```python\nx = 1\n```\n")
