"""The README: its commands and code run, its generated blocks (the methods table, the headline
benchmark numbers) are current, and it stays short."""

from __future__ import annotations

import importlib.util
import os

import pytest
from docs_blocks import ROOT, Block, commands
from docs_runner import run_document


def _generator():
    path = os.path.join(ROOT, "docs", "_ext", "jfed_docs.py")
    spec = importlib.util.spec_from_file_location("jfed_docs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _readme() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        return handle.read()


def test_readme_blocks_run(tmp_path, monkeypatch):
    run_document("README.md", tmp_path, monkeypatch)


def test_readme_generated_blocks_are_current():
    """Regenerate with ``python docs/_ext/jfed_docs.py README.md``. Negative control: a stale
    table (a method's row removed) is caught."""
    generator, text = _generator(), _readme()
    assert generator.readme_with_blocks(text) == text, (
        "README's generated blocks are stale: run `python docs/_ext/jfed_docs.py README.md`"
    )
    row = next(line for line in text.splitlines() if line.startswith("| `dp-fedavg` |"))
    stale = text.replace(row + "\n", "")
    assert generator.readme_with_blocks(stale) != stale


def test_the_readme_example_runs_in_the_docs_build():
    """The README's Python example is a cell of the DP-FedAvg tutorial, which the docs build
    executes; a block no notebook holds runs here instead. Negative control: the example changed
    by one character is no longer found in a notebook."""
    import docs_runner
    from docs_blocks import blocks

    (example,) = [b for b in blocks("README.md") if b.language == "python"]
    assert docs_runner.run_in_a_notebook(example)
    changed = Block(example.path, example.line, "python", example.code.replace("8.0", "9.0"), None)
    assert not docs_runner.run_in_a_notebook(changed)


def test_readme_is_short():
    assert len(_readme().splitlines()) <= 220


def test_block_parser_reads_fences_skips_and_continuations(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "text\n<!-- docs-test: skip (needs a GPU) -->\n```bash\njfed demo\n```\n"
        "```bash\njfed run ols \\\n  --clients 10  # small\n```\n```text\n```bash\n```\n"
    )
    import docs_blocks

    original = docs_blocks.ROOT
    try:
        docs_blocks.ROOT = str(tmp_path)
        first, second = docs_blocks.blocks("page.md")
    finally:
        docs_blocks.ROOT = original
    assert first.skip == "needs a GPU" and second.skip is None
    assert commands(second) == [["jfed", "run", "ols", "--clients", "10"]]
    assert isinstance(first, Block)


@pytest.mark.parametrize("bad", ["jfed run ols --clients", "cd somewhere"])
def test_a_failing_command_fails_the_test(bad, tmp_path, monkeypatch):
    """Negative control: a command that exits non-zero, or one the runner does not know, fails."""
    import docs_runner

    block = Block("x.md", 1, "bash", bad, None)
    with pytest.raises(AssertionError):
        docs_runner.run_block(block, tmp_path)
