"""The code base stays ruff clean (lint rules and formatting of pyproject.toml)."""

import importlib.util
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# ruff is a test dependency (pyproject's [test] extra): a machine that lacks it (a GPU image run
# as it is) skips these two checks, saying why
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("ruff") is None, reason="ruff is not installed here"
)


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, "jfed", "tests", "bench", "sims"],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip


def test_ruff_check():
    result = _ruff("check", "--no-cache")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format():
    result = _ruff("format", "--check", "--no-cache")
    assert result.returncode == 0, result.stdout + result.stderr
