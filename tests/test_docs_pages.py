"""Every command and code block of the documentation pages runs or, for the commands that
compute, is checked as ``jfed launch`` checks its child command (``tests/docs_runner.py``;
``tests/docs_blocks.py`` says how blocks are found and skipped). A page's blocks run in order in
one scratch folder. The notebooks' cells run in the docs build."""

from __future__ import annotations

import pytest
from docs_blocks import blocks, documents
from docs_runner import run_document

PAGES = [p for p in documents() if p != "README.md" and any(b.skip is None for b in blocks(p))]


@pytest.mark.parametrize("page", PAGES)
def test_page_blocks_run(page, tmp_path, monkeypatch):
    run_document(page, tmp_path, monkeypatch, execute=False)


def test_a_stale_flag_on_a_page_fails_the_check(tmp_path):
    """Negative control: a command whose flag no longer exists, or whose value is out of its
    range, fails even though it is only checked, not run."""
    import docs_runner
    from docs_blocks import Block

    for stale in ("jfed run dp-fedavg --cohort-sise 10", "jfed sweep ols --epsilon -1"):
        with pytest.raises(AssertionError):
            docs_runner.run_block(Block("x.md", 1, "bash", stale, None), tmp_path, execute=False)


def test_every_skip_gives_a_reason_and_pages_are_found():
    pages = documents()
    assert "docs/getting_started.md" in pages and "docs/tutorials/eps_sweep.md" in pages
    assert all(b.skip for p in pages for b in blocks(p) if b.skip is not None)
