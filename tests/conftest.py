"""Test setup: 8 forced CPU devices (for the sharding tests), set before jax is imported."""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import pytest


@pytest.fixture(scope="session")
def fair_task():
    from jfed.data import load_regression

    return load_regression("fair")


def pytest_report_header(config):
    return f"jax {jax.__version__}, devices: {jax.devices()}"
