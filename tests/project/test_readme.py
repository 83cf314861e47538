"""Run README.md's ```python and ```bash blocks, so that the README cannot drift from the
code, and hold the README to what a newcomer needs: under 200 lines, about the product.

The convention (markers such as `<!-- readme-test: needs lightning -->`, the working
folder laid out as scripts/demo leaves demo-out/) is tests/docblocks.py's; docs/ pages
run the same way in tests/project/test_docs_blocks.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docblocks import REPO, Session, code_blocks, demo_folder, python_blocks

README = REPO / "README.md"
BLOCKS = code_blocks(README.read_text(encoding="utf-8"), "README.md")
MAX_LINES = 200
# words about how the project was built, not what it does
BANNED = ("session", "issue", "target", "met")


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """The README's blocks and a folder laid out as scripts/demo leaves demo-out/."""
    running = Session(BLOCKS, demo_folder(tmp_path_factory.mktemp("readme")))
    try:
        yield running
    finally:
        running.close()


def test_the_readme_has_runnable_blocks() -> None:
    assert len(BLOCKS) >= 3
    assert {block.lang for block in BLOCKS if block.why_not_run() is None} == {"python", "bash"}


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


def test_the_readme_is_short_and_about_the_product() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < MAX_LINES
    found = [word for word in BANNED if re.search(rf"\b{word}\b", text, re.IGNORECASE)]
    assert found == [], f"README.md says {found}: words about how it was built"


def test_the_readme_links_into_the_docs() -> None:
    links = re.findall(r"\]\((docs/[^)#]+)", README.read_text(encoding="utf-8"))
    assert len(links) >= 5 and all((REPO / link).is_file() for link in links)


# ------------------------------------------------------------------ the convention itself


def test_markers_skip_or_require_modules() -> None:
    text = ("<!-- readme-test: skip (needs a GPU) -->\n```python\nimport cuda_only\n```\n"
            "<!-- readme-test: needs surely_not_installed_xyz -->\n```python\nx = 1\n```\n"
            "<!-- readme-test: needs os -->\n```python\ny = 2\n```\n"
            "```python\nimport surely_not_installed_xyz\n```\n")
    skipped, missing, present, plain = python_blocks(text)
    assert skipped.why_not_run() == "README.md line 2: needs a GPU"
    assert missing.why_not_run() == "README.md line 6: needs surely_not_installed_xyz"
    assert present.why_not_run() is None and present.code == "y = 2\n"
    assert plain.why_not_run() is None  # unmarked: an ImportError must fail it


def test_an_unknown_marker_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown marker 'skpi'"):
        python_blocks("<!-- readme-test: skpi -->\n```python\nx = 1\n```\n")


def test_shell_blocks_run_and_other_fences_do_not(tmp_path: Path) -> None:
    text = ("```bash\necho made > made.txt\n```\n```\nnot run\n```\n```text\nout\n```\n"
            "```bash\nfalse\n```\n")
    made, failing = code_blocks(text, "page.md")
    assert (made.lang, failing.lang) == ("bash", "bash")
    session = Session([made, failing], tmp_path)
    session.run_through(0)
    assert (tmp_path / "made.txt").read_text() == "made\n"
    with pytest.raises(AssertionError, match=r"page\.md, block at line 10 exited 1"):
        session.run_through(1)
