"""Run every docs/ page's ```python and ```bash blocks (the convention of tests/docblocks.py),
each page in its own namespace and folder laid out as scripts/demo leaves demo-out/."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.docblocks import REPO, Block, Session, code_blocks, demo_folder

PAGES = sorted((REPO / "docs").rglob("*.md"))
BLOCKS = [block for page in PAGES
          for block in code_blocks(page.read_text(encoding="utf-8"),
                                   str(page.relative_to(REPO)))]


class Sessions:
    """One Session per page, made when its first block runs; the previous one is closed
    then, so DataLoader workers a page left do not outlive it."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self.factory = factory
        self.current: Session | None = None
        self.page = ""

    def of(self, page: str) -> Session:
        if self.current is None or self.page != page:
            self.close()
            blocks = [block for block in BLOCKS if block.page == page]
            self.current = Session(blocks, demo_folder(self.factory.mktemp("docs")))
            self.page = page
        return self.current

    def close(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sessions]:
    running = Sessions(tmp_path_factory)
    try:
        yield running
    finally:
        running.close()


def test_the_docs_have_runnable_blocks() -> None:
    assert len({block.page for block in BLOCKS}) >= 6
    assert sum(block.why_not_run() is None for block in BLOCKS) >= 20


@pytest.mark.docs
@pytest.mark.timeout(600)
@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")  # 4 workers, 2 CPUs
@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")  # torchdata's own
@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.page}:{b.line}" for b in BLOCKS])
def test_docs_block_runs(sessions: Sessions, block: Block) -> None:
    session = sessions.of(block.page)
    session.run_through(session.blocks.index(block))
    if (reason := block.why_not_run()) is not None:
        pytest.skip(reason)
