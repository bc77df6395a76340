"""Test setup, before jax is imported: 8 forced CPU devices (for the sharding tests), and no
persistent compilation cache unless ``JFED_TEST_COMPILATION_CACHE`` names one for the session."""

import os

# The suite compiles with XLA's least optimisation (JAX's jax_disable_most_optimizations: LLVM
# at level 0 with its expensive passes off), not XLA's default: most of the suite's time is XLA
# compiling small programs, which this does faster (tests/test_cohort.py: 33 s of CPU against
# 46 s at LLVM's first level, the suite's earlier setting, measured one after the other). The
# program is the
# same HLO; its results equal the default level's bit for bit in most programs and within
# float32 rounding of a fused multiply-add in others (seen: 2.5e-9 relative in silo risks).
# Every claim the tests make is a property of the program within one setting, so it holds at
# either level; JFED_TEST_DEFAULT_OPTIMIZATION=1 runs the suite at XLA's default, as jfed itself
# runs. The environment variable (not jax.config) reaches the processes tests start too.
if not os.environ.get("JFED_TEST_DEFAULT_OPTIMIZATION"):
    os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "1"
os.environ["XLA_FLAGS"] = " ".join(
    [os.environ.get("XLA_FLAGS", ""), "--xla_force_host_platform_device_count=8"]
).strip()
# the CLI keeps compiled programs on disk by default; tests that call it in-process must not
# switch that on for the whole session (tests/test_compilation_cache.py turns it on in children)
os.environ["JFED_COMPILATION_CACHE"] = "off"

import jax
import numpy as np
import pytest

# One compilation cache for the whole test session when CI names a fresh folder for it: many
# tests compile the same programs (the same method through the CLI, the same engine round), and
# both test processes share what either compiled. Off otherwise, so a developer's runs never
# depend on programs kept from earlier ones.
if os.environ.get("JFED_TEST_COMPILATION_CACHE"):
    from jfed.engine.cache import enable_compilation_cache

    enable_compilation_cache(os.environ["JFED_TEST_COMPILATION_CACHE"], min_compile_seconds=0.0)


@pytest.fixture(scope="session")
def fair_task():
    from jfed.data import load_regression

    return load_regression("fair")


@pytest.fixture
def forget_registered_methods():
    """Forget the methods a test registers (the registry is the process's)."""
    from jfed.methods import METHODS

    before = set(METHODS)
    yield
    for name in set(METHODS) - before:
        METHODS.remove(name)


@pytest.fixture
def on_cpu():
    """The test's computations on the host CPU whatever JAX's default backend is: for claims of
    bit-for-bit equality that are the CPU's (against the 8 forced CPU devices, or between vector
    widths), which a GPU meets only up to float rounding (seen: 2e-7 relative)."""
    with jax.default_device(jax.devices("cpu")[0]):
        yield


@pytest.fixture
def both_branches(monkeypatch):
    """``both_branches(compute) -> (on_cpu, elsewhere)``: ``compute()`` (as numpy) with the
    branches ``lax.platform_dependent`` lowers on the CPU, then with those of every other backend
    (its ``default``), forced here on the CPU; ``jax.clear_caches`` around each, so no program
    traced the other way is reused."""

    def default_branch(*args, default, **per_platform):
        del per_platform
        return default(*args)

    def both(compute):
        jax.clear_caches()
        on_cpu = jax.tree.map(np.asarray, compute())
        with monkeypatch.context() as patched:
            patched.setattr(jax.lax, "platform_dependent", default_branch)
            jax.clear_caches()
            elsewhere = jax.tree.map(np.asarray, compute())
        jax.clear_caches()
        return on_cpu, elsewhere

    return both


def pytest_report_header(config):
    return f"jax {jax.__version__}, devices: {jax.devices()}"
