"""Test helper: forget every compiled program of the sweep runner and JAX, so that a run traces
the code as it is now (a test that monkeypatches a release must not reuse a program compiled
before the patch)."""

from __future__ import annotations

import jax

from jfed.sweep import runner


def fresh_programs() -> None:
    for cached in (runner._unit_function, runner._program, runner._compiled):
        cached.cache_clear()
    jax.clear_caches()
