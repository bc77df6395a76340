"""Test setup, before jax is imported: 8 forced CPU devices (for the sharding tests), no
persistent compilation cache."""

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


@pytest.fixture(scope="session")
def fair_task():
    from jfed.data import load_regression

    return load_regression("fair")


def pytest_report_header(config):
    return f"jax {jax.__version__}, devices: {jax.devices()}"
