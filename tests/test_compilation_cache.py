"""The persistent compilation cache: a second process loads the sweep's programs from disk."""

import os
import subprocess
import sys

import pytest

from jfed.engine.cache import default_directory, enable_compilation_cache, resolve_directory

CHILD = """
import sys, jax.monitoring
hits = []
jax.monitoring.register_event_listener(
    lambda name, **kwargs: hits.append(name) if name.endswith("/cache_hits") else None
)
from jfed.cli.main import main
assert main(sys.argv[1:]) == 0
print("HITS", len(hits))
"""


def _sweep_in_a_new_process(tmp_path, out: str, cache: str) -> int:
    command = ["sweep", "modulated-one-shot", "--dataset", "modechoice", "--epsilon", "1",
               "--seeds", "1", "--out", str(tmp_path / out), "--no-progress",
               "--compilation-cache", cache]  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-c", CHILD, *command], capture_output=True, text=True, check=True,
        env={**os.environ, "JFED_COMPILATION_CACHE": "off"},  # the flag must win
    )  # fmt: skip
    return int(result.stdout.split("HITS")[-1])


def test_second_process_loads_compiled_programs(tmp_path):
    """Negative control: a third process with the cache off finds no hits, though the programs it
    compiles are on disk (the hits come from the cache, nothing else)."""
    cache = str(tmp_path / "xla")
    assert _sweep_in_a_new_process(tmp_path, "first", cache) == 0
    assert any(name.startswith("jit_program") for name in os.listdir(cache))
    assert _sweep_in_a_new_process(tmp_path, "second", cache) > 0
    assert _sweep_in_a_new_process(tmp_path, "third", "off") == 0


def test_cache_folder_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv("JFED_COMPILATION_CACHE", raising=False)
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_directory() == str(tmp_path / "jfed" / "xla")
    assert resolve_directory() == str(tmp_path / "jfed" / "xla")
    # JAX's own variable is respected, and jfed's takes precedence over it
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "jax"))
    assert resolve_directory() == str(tmp_path / "jax")
    monkeypatch.setenv("JFED_COMPILATION_CACHE", "OFF")
    assert resolve_directory() is None
    assert resolve_directory(str(tmp_path / "mine")) == str(tmp_path / "mine")


def test_an_unwritable_folder_warns_and_leaves_the_cache_off(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.warns(UserWarning, match="compilation cache off"):
        assert enable_compilation_cache(str(blocker / "xla")) is None
