"""Test setup, before jax is imported: 8 forced CPU devices (for the sharding tests), and no
persistent compilation cache unless ``JFED_TEST_COMPILATION_CACHE`` names one for the session."""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# the CLI keeps compiled programs on disk by default; tests that call it in-process must not
# switch that on for the whole session (tests/test_compilation_cache.py turns it on in children)
os.environ["JFED_COMPILATION_CACHE"] = "off"

import jax
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


def pytest_report_header(config):
    return f"jax {jax.__version__}, devices: {jax.devices()}"
