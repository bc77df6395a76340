"""The code blocks of the README and of the documentation pages, as the docs tests run them.

A ```bash block's commands and a ```python block's code are run by ``tests/test_docs_*.py``; a
block preceded by the line ``<!-- docs-test: skip (reason) -->`` is not (installs, the test suite
itself, GPU-only commands, long studies), and the reason is required. Notebook pages
(``file_format: mystnb``) run their ``{code-cell}`` cells in the docs build, not here; their plain
```bash blocks are run here like any other.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP = re.compile(r"<!--\s*docs-test:\s*skip\s*\((?P<reason>[^)]+)\)\s*-->")
FENCE = re.compile(r"^(?P<indent> *)```(?P<language>[\w-]*)\s*$")


@dataclass(frozen=True)
class Block:
    path: str  # relative to the repository root
    line: int  # 1-based line of the opening fence
    language: str  # "bash" or "python"
    code: str
    skip: str | None  # the reason given, or None

    @property
    def name(self) -> str:
        return f"{self.path}:{self.line}"


def blocks(path: str) -> list[Block]:
    """The ```bash and ```python blocks of one markdown file, with their skip marks."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    found, index = [], 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening or opening["language"] not in ("bash", "python"):
            if opening:  # another language's block: step over its body
                index += 1
                while index < len(lines) and lines[index].strip() != "```":
                    index += 1
            index += 1
            continue
        start = index
        index += 1
        body = []
        while index < len(lines) and lines[index].strip() != "```":
            body.append(lines[index][len(opening["indent"]) :])
            index += 1
        previous = next((lines[i] for i in range(start - 1, -1, -1) if lines[i].strip()), "")
        mark = SKIP.search(previous)
        found.append(Block(path, start + 1, opening["language"], "\n".join(body),
                           mark["reason"].strip() if mark else None))  # fmt: skip
        index += 1
    return found


def documents() -> list[str]:
    """README.md and every committed page under docs/ (generated and built files excluded)."""
    pages = sorted(
        os.path.relpath(p, ROOT)
        for p in glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
        if not re.search(r"docs/(_build|_generated|jupyter_execute|reference/_autosummary)/", p)
    )
    return ["README.md", *pages]


def commands(block: Block) -> list[list[str]]:
    """A bash block's commands as argument lists (``\\`` continuations joined, comments off)."""
    joined = block.code.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            out.append(words)
    return out
