"""Monte Carlo unbiasedness of the server's debiased statistics, with negative controls.

Each check averages R independent rounds on a fixed set of clients and compares every entry with
the truth, with tolerance Z standard errors (the standard error estimated from the R draws; CLT).
Z = 4.5 with at most 12 entries per check keeps the family-wise false-alarm rate below 1e-4, and the
seeds are fixed. Each negative control drops one correction term and must be detected by the same
check.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfed.algorithms import modulated
from jfed.algorithms.linear import second_moments
from jfed.data import ArrayClients
from jfed.engine import ExecutionPlan, aggregate

Z = 4.5
REPLICATES = 4000
DIM, K, N = 3, 2, 16


def _clients():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(N, DIM))
    X *= rng.uniform(0.2, 0.95, size=(N, 1)) / np.linalg.norm(X, axis=1, keepdims=True)
    y = X @ np.array([0.5, -1.0, 2.0]) + 0.3 * rng.normal(size=N)
    return X, y


def _hyperparams():
    V = np.linalg.qr(np.random.default_rng(2).normal(size=(DIM, K)))[0]
    return modulated.hyperparams(
        alpha=0.8, beta=1.3, omega=2.0, noise_std=0.6, clip_norm=1.0, directions=V
    )


@pytest.fixture(scope="module")
def replicated_statistics():
    """``(S_hat: [R, d, d], b_hat: [R, d], P: [d, d], hp)`` over R independent rounds (drawn
    once: the checks and their negative controls read the same draws)."""
    X, y = _clients()
    population = ArrayClients.from_numpy(X, y)
    hp = _hyperparams()
    broadcast = modulated.Broadcast(
        hp.directions, hp.alpha, hp.beta, hp.omega, hp.noise_std, hp.clip_norm
    )
    plan = ExecutionPlan(block_size=16, chunk_size=16)

    @jax.jit
    @jax.vmap
    def one_round(key):
        stats = aggregate(
            modulated.client_message, broadcast, population, key, plan, second_moments
        )
        return modulated.debias(stats, broadcast)

    keys = jax.random.split(jax.random.key(3), REPLICATES)
    S_hat, b_hat = one_round(keys)
    P = np.asarray(hp.directions @ hp.directions.T, np.float64)
    return np.asarray(S_hat, np.float64), np.asarray(b_hat, np.float64), P, hp


def _is_unbiased(samples: np.ndarray, truth: np.ndarray) -> bool:
    mean = samples.mean(0)
    standard_error = samples.std(0, ddof=1) / np.sqrt(samples.shape[0])
    return bool(np.all(np.abs(mean - truth) <= Z * standard_error))


def test_s_hat_b_hat_and_gradient_are_unbiased(replicated_statistics):
    X, y = _clients()
    S = X.T @ X / N
    b = X.T @ y / N
    S_hat, b_hat, _, _ = replicated_statistics
    assert _is_unbiased(S_hat, S)
    assert _is_unbiased(b_hat, b)
    theta = np.array([0.3, -0.2, 0.7])
    g_hat = S_hat @ theta - b_hat
    assert _is_unbiased(g_hat, S @ theta - b)


def test_negative_controls_are_detected(replicated_statistics):
    X, _ = _clients()
    S = X.T @ X / N
    S_hat, _, P, hp = replicated_statistics
    alpha2 = float(hp.alpha) ** 2
    without_modulation_term = S_hat + float(hp.beta) ** 2 / (2 * K) * P / alpha2
    without_noise_term = S_hat + float(hp.noise_std) ** 2 * np.eye(DIM) / alpha2
    assert not _is_unbiased(without_modulation_term, S)
    assert not _is_unbiased(without_noise_term, S)
    # a client amplitude of beta instead of beta / sqrt(k) leaves beta^2 (k-1)/(2k) P / alpha^2
    wrong_normalisation = S_hat + float(hp.beta) ** 2 * (K - 1) / (2 * K) * P / alpha2
    assert not _is_unbiased(wrong_normalisation, S)


def test_phase_moments_used_by_the_debiasing():
    # E[cos(a + phi)] = 0 and E[cos^2(a + phi)] = 1/2 for phi ~ U[0, 2 pi), any a.
    phases = jax.random.uniform(jax.random.key(4), (200_000,), maxval=2 * jnp.pi)
    values = np.cos(1.234 + np.asarray(phases, np.float64))
    se = values.std() / np.sqrt(values.size)
    assert abs(values.mean()) <= Z * se
    assert abs((values**2).mean() - 0.5) <= Z * (values**2).std() / np.sqrt(values.size)
