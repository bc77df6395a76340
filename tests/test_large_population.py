"""Ten million procedural clients stay exact enough: the engine's float32 sums of the modulated
messages, debiased, agree with the same sums accumulated in float64 far inside their sampling
error; a float16 accumulator (the negative control) does not."""

import jax
import numpy as np
import pytest

from jfed.algorithms import modulated
from jfed.algorithms.linear import second_moments
from jfed.data import SyntheticLinear
from jfed.engine import ExecutionPlan, aggregate
from jfed.engine.aggregate import _chunk_messages

N_CLIENTS, DIM, CHUNK = 10**7, 10, 65_536
HP = modulated.hyperparams(noise_std=2.0, clip_norm=4.28)


@pytest.fixture(scope="module")
def sums():
    return compute_sums()


def compute_sums():
    """The engine's float32 statistic and the same messages summed in float64 on the host."""
    population = SyntheticLinear.create(jax.random.key(0), N_CLIENTS, DIM)
    broadcast = modulated._broadcast(HP, jax.random.key(1), DIM, 1)
    key = jax.random.key(2)
    plan = ExecutionPlan(block_size=16 * CHUNK, chunk_size=CHUNK)
    engine = jax.jit(
        lambda b, p, k: aggregate(modulated.client_message, b, p, k, plan, second_moments)
    )(broadcast, population, key)

    @jax.jit
    def chunk(ids):
        (z, y, _), weights, _ = _chunk_messages(
            modulated.client_message, N_CLIENTS, ids, broadcast, population, key
        )
        return z, y, weights

    # the same messages, summed on the host in float64 (and, per chunk, kept for the controls)
    zz64, zy64 = np.zeros((DIM, DIM)), np.zeros(DIM)
    square = np.zeros((DIM, DIM))  # sum of (z_i z_i^T)^2, for the sampling error
    chunk_zz = []
    for start in range(0, N_CLIENTS, CHUNK):
        z, y, weights = map(np.asarray, chunk(np.arange(start, start + CHUNK, dtype=np.int32)))
        z = z.astype(np.float64) * weights[:, None]
        zz = z.T @ z
        zz64 += zz
        zy64 += z.T @ (y * weights)
        square += (z**2).T @ (z**2)
        chunk_zz.append(zz.astype(np.float32))
    return broadcast, engine, zz64, zy64, square, chunk_zz


def _s_hat(zz, broadcast) -> np.ndarray:
    """The debiased second moment S_hat of the one-shot estimator from ``sum z z^T``."""
    V = np.asarray(broadcast.directions, np.float64)
    beta, sigma, alpha = (float(getattr(broadcast, n)) for n in ("beta", "noise_std", "alpha"))
    mean = np.asarray(zz, np.float64) / N_CLIENTS
    return (mean - beta**2 / 2 * V @ V.T - sigma**2 * np.eye(DIM)) / alpha**2


def test_float32_sums_agree_with_float64_within_a_tenth_of_the_sampling_error(sums):
    broadcast, engine, zz64, zy64, square, _ = sums
    assert float(engine.count) == N_CLIENTS
    # standard error of each entry of S_hat: the spread of z_i z_j over clients / sqrt(n)
    mean = zz64 / N_CLIENTS
    standard_error = np.sqrt(np.maximum(square / N_CLIENTS - mean**2, 0) / N_CLIENTS)
    standard_error /= float(broadcast.alpha) ** 2
    gap = np.abs(_s_hat(engine.zz, broadcast) - _s_hat(zz64, broadcast))
    assert np.all(gap <= 0.1 * standard_error), (gap / standard_error).max()
    np.testing.assert_allclose(np.asarray(engine.zy, np.float64), zy64, rtol=1e-4)


def test_a_float16_accumulator_is_caught(sums):
    """Negative control: the same chunk statistics added up in float16 (as shares of the mean,
    so nothing overflows: this is rounding alone) miss by more than the sampling error, so the
    check above can fail."""
    broadcast, _, zz64, _, square, chunk_zz = sums
    total = np.zeros((DIM, DIM), np.float16)
    for zz in chunk_zz:
        total = (total + (zz / N_CLIENTS).astype(np.float16)).astype(np.float16)
    assert np.all(np.isfinite(total))
    mean = zz64 / N_CLIENTS
    standard_error = np.sqrt(np.maximum(square / N_CLIENTS - mean**2, 0) / N_CLIENTS)
    standard_error /= float(broadcast.alpha) ** 2
    gap = np.abs(_s_hat(total.astype(np.float64) * N_CLIENTS, broadcast) - _s_hat(zz64, broadcast))
    assert np.any(gap > standard_error)
