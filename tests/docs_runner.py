"""Run a document's blocks (``tests/docs_blocks.py``) in a scratch folder that sees the
repository's examples, studies and benchmarks under their README paths.

``execute=False`` (the documentation pages) checks the commands that compute - ``jfed run``,
``sweep``, ``launch`` and ``plot`` - the way ``jfed launch`` checks its child command: parsed and
every value checked against its declaration, before JAX loads, without running them (their
notebooks and the method tests run the computations; running every page's commands would take
several minutes of CI). Every other command (``methods``, ``datasets``, ``account``,
``audit``, ``python``) and every Python block runs."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys

from docs_blocks import ROOT, Block, blocks, commands, documents

LINKED = ("examples", "sims", "bench", "docs", "jfed")


def _scratch(folder) -> None:
    for name in LINKED:
        target = os.path.join(folder, name)
        if not os.path.exists(target):
            os.symlink(os.path.join(ROOT, name), target)


CHECKED_ONLY = ("run", "sweep", "launch", "plot")


def run_block(block: Block, folder, execute: bool = True) -> None:
    """Run one block in ``folder``; an AssertionError names the block and what failed."""
    import jfed
    from jfed.cli.main import main_checks_only

    if block.language == "python":
        namespace = {"__name__": "__docs__"}
        try:
            # dont_inherit: a block runs as a user's file does, not under this module's
            # `from __future__ import annotations` (string annotations break a block's
            # dataclasses, whose module is not imported)
            exec(compile(block.code, block.name, "exec", dont_inherit=True), namespace)
        except Exception as error:  # the block's own failure, reported with its place
            raise AssertionError(f"{block.name}: {type(error).__name__}: {error}") from error
        return
    for argv in commands(block):
        if argv[0] == "jfed":
            out = io.StringIO()
            checked_only = not execute and len(argv) > 1 and argv[1] in CHECKED_ONLY
            with contextlib.redirect_stdout(out):
                try:
                    status = (main_checks_only if checked_only else jfed.main)(argv[1:])
                except SystemExit as stop:
                    status = stop.code
            assert status == 0, f"{block.name}: `{' '.join(argv)}` exited {status}"
        elif argv[0] in ("python", "python3"):
            done = subprocess.run([sys.executable, *argv[1:]], cwd=folder, capture_output=True,
                                  text=True, timeout=600)  # fmt: skip
            assert done.returncode == 0, (
                f"{block.name}: `{' '.join(argv)}` exited {done.returncode}: {done.stderr[-2000:]}"
            )
        else:
            raise AssertionError(
                f"{block.name}: `{' '.join(argv)}` is neither a jfed nor a python command: "
                "mark its block with <!-- docs-test: skip (reason) -->"
            )


def notebook_cells() -> list[str]:
    """The code cells of the notebook pages, which the docs build executes (a failing cell fails
    the build)."""
    cells = []
    for page in documents():
        with open(os.path.join(ROOT, page), encoding="utf-8") as handle:
            text = handle.read()
        if "file_format: mystnb" in text:
            cells += re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", text, flags=re.S)
    return cells


def run_in_a_notebook(block: Block) -> bool:
    """Whether a notebook runs ``block``'s code verbatim as one of its cells."""
    code = block.code.strip()
    return block.language == "python" and any(code in cell for cell in notebook_cells())


def run_document(path: str, folder, monkeypatch, execute: bool = True) -> None:
    """Every block of ``path`` that is not marked skip, in order, in ``folder``: run here, or
    (a Python block that a notebook page holds verbatim) by the docs build."""
    _scratch(folder)
    monkeypatch.chdir(folder)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    for block in blocks(path):
        if block.skip is None and not run_in_a_notebook(block):
            run_block(block, folder, execute)
