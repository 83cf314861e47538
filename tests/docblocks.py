"""Run the code blocks of a Markdown page, so that README.md and docs/ cannot drift from
the code (tests/project/test_readme.py runs README.md, tests/project/test_docs_blocks.py
every docs page).

Which blocks run: ```python blocks, executed in one namespace per page, and ```bash
blocks, each run as one `bash -euo pipefail` script; other fences (``` alone, ```text,
```yaml) are shown output or files and never run.

Convention: a marker is an HTML comment (invisible on the rendered page) on its own
line directly before a block's opening fence; several markers may stack there.

    <!-- readme-test: skip (reason) -->    the block is never run: it needs what a test
                                           cannot have here (a GPU, a cluster, S3, ...)
    <!-- readme-test: needs MODULE -->     the block runs only where MODULE is installed
                                           (importlib.util.find_spec); elsewhere it is
                                           skipped. Several modules: `needs a b`.

Any other `readme-test:` marker is an error, so a typo cannot skip a block silently. A
block without a marker must run: an exception (or a shell command's non-zero exit) fails
the test (an ImportError too, even for a module that is not installed: mark the block
`needs MODULE` instead).

Blocks run in page order, as a reader types them: a block may use the names and files an
earlier block of the same page made (`it`, `loader`, `list.csv`). The working folder is a
temporary one laid out as `scripts/demo` leaves its folder (examples.demo): `photos/`, a
generated image folder of 3 classes, and `photos.wds`, `photos.lmdb`, `photos.h5` and
`photos.npy` packed from it. Shell blocks find `pack` and `python` of the running
interpreter first on PATH, and the clone's root on PYTHONPATH. Selecting one block
(`-k`) runs the earlier runnable blocks of its page first.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from examples.demo import PACKED, PHOTOS, pack
from packer.testing import make_sample_folder

REPO = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"<!--\s*readme-test:\s*(?P<body>.*?)\s*-->")
LANGUAGES = {"python": "python", "bash": "bash", "sh": "bash"}
SHELL_TIMEOUT = 300  # seconds for one shell block


@dataclass(frozen=True)
class Block:
    """One runnable block of a page and what its markers ask."""

    page: str  # the page's path relative to the repository, for messages
    line: int  # of the opening fence, 1-based
    lang: str  # "python" or "bash"
    code: str
    skip: str | None = None  # the reason given
    needs: tuple[str, ...] = ()

    def why_not_run(self) -> str | None:
        """Why this block is skipped here, or None if it must run."""
        if self.skip is not None:
            return f"{self.page} line {self.line}: {self.skip}"
        missing = [module for module in self.needs if not installed(module)]
        return f"{self.page} line {self.line}: needs {', '.join(missing)}" if missing else None


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a dotted name whose parent is missing
        return False


def parse_markers(lines: list[str], line: int, page: str
                  ) -> tuple[str | None, tuple[str, ...]]:
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
            raise ValueError(f"{page}:{above + 1}: unknown marker {body!r}; use "
                             "`readme-test: skip (reason)` or `readme-test: needs MODULE`")
        above -= 1
    return skip, tuple(needs)


def code_blocks(text: str, page: str = "README.md") -> list[Block]:
    """Every ```python and ```bash block of `text`, in order (other fences are skipped)."""
    lines = text.splitlines()
    blocks = []
    start: int | None = None
    fence = ""
    for number, line in enumerate(lines):
        stripped = line.strip()
        if start is None and stripped.startswith("```"):
            start, fence = number, stripped[3:].strip()
        elif start is not None and stripped == "```":
            if fence in LANGUAGES:
                skip, needs = parse_markers(lines, start, page)
                blocks.append(Block(page, start + 1, LANGUAGES[fence],
                                    "\n".join(lines[start + 1 : number]) + "\n", skip, needs))
            start = None
    return blocks


def python_blocks(text: str, page: str = "README.md") -> list[Block]:
    """The ```python blocks only (the README convention's own tests use it)."""
    return [block for block in code_blocks(text, page) if block.lang == "python"]


def demo_folder(work: Path) -> Path:
    """`work` laid out as scripts/demo leaves demo-out/, with a small, fast image folder."""
    photos = make_sample_folder(work / PHOTOS, count=24, classes=3, min_side=40, max_side=96)
    for fmt in PACKED:
        pack(photos, work, fmt, workers=0, size=(32, 32))
    return work


def run_shell(block: Block, work: Path) -> None:
    """Run a bash block in `work`; a non-zero exit fails with the block's output."""
    bin_dir = str(Path(sys.executable).parent)
    # devtools/ is not installed: the clone's root on PYTHONPATH, as `python -m` from it has
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
           "PYTHONPATH": path}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.code], cwd=work, env=env,
                          capture_output=True, text=True, timeout=SHELL_TIMEOUT, check=False)
    if done.returncode != 0:
        raise AssertionError(f"{block.page}, block at line {block.line} exited "
                             f"{done.returncode}:\n{done.stdout}\n{done.stderr}")


@dataclass
class Session:
    """One page's blocks, the namespace and folder they share, and how far they have run."""

    blocks: list[Block]
    work: Path
    namespace: dict[str, Any] = field(default_factory=lambda: {"__name__": "__readme__"})
    done: int = 0  # blocks[:done] have run (or were skipped)

    def run_through(self, number: int) -> None:
        """Run the blocks up to blocks[number] that have not run yet, skipping marked ones."""
        before = Path.cwd()
        os.chdir(self.work)
        try:
            while self.done <= number:
                block = self.blocks[self.done]
                self.done += 1
                if block.why_not_run() is None:
                    self._run(block)
        finally:
            os.chdir(before)

    def _run(self, block: Block) -> None:
        if block.lang == "bash":
            run_shell(block, self.work)
            return
        code = compile(block.code, f"{block.page}, block at line {block.line}", "exec")
        exec(code, self.namespace)

    def close(self) -> None:
        """End what the blocks left running: DataLoader workers with their names, and a
        Ray instance a Ray Data block started (tests/packing/test_ray.py starts its own)."""
        self.namespace.clear()
        gc.collect()
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            ray.shutdown()
