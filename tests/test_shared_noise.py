"""Shared-noise runs (one pass for every noise level of a seed) equal the separate runs."""

import jax
import numpy as np
import pytest

from jfed.algorithms import modulated
from jfed.algorithms.linear import SecondMoments
from jfed.data import load_regression
from jfed.engine import simulate
from jfed.sweep.adapters import stack

NOISE_LEVELS = (0.0, 0.5, 5.0, 50.0)


@pytest.fixture(scope="module")
def task():
    return load_regression("modechoice")


def _largest_gap(task, estimator, rounds):
    hps = [modulated.hyperparams(noise_std=s, beta=0.7, omega=2.0) for s in NOISE_LEVELS]
    key = jax.random.key(11)
    shared, shared_infos = simulate(
        modulated.SharedNoise(estimator), task.train, stack(hps), key, rounds
    )
    assert shared_infos.theta.shape == (rounds, len(NOISE_LEVELS), task.dim)
    gaps = []
    for level, hp in enumerate(hps):
        alone, infos = simulate(estimator, task.train, hp, key, rounds)
        scale = np.abs(np.asarray(alone.theta)).max()
        gaps.append(np.abs(np.asarray(shared.theta[level]) - np.asarray(alone.theta)).max() / scale)
        np.testing.assert_allclose(shared_infos.clipped_fraction[:, level], infos.clipped_fraction)
    return max(gaps)


# float32 sums over ~100 clients grouped differently: a relative gap of order 1e-6, far below
# what a wrong decomposition gives (the cross term alone moves theta by order 1e-1)
TOLERANCE = 1e-4


@pytest.mark.parametrize("rounds, estimator", [(1, modulated.OneShot), (4, modulated.Iterative)])
def test_shared_noise_runs_equal_separate_runs(task, rounds, estimator):
    assert _largest_gap(task, estimator(task.dim), rounds) < TOLERANCE


def test_negative_control_dropping_the_cross_term_is_caught(task, monkeypatch):
    def without_cross_term(joint, noise_std):
        d = joint.zy.shape[0] // 2
        zz = joint.zz[:d, :d] + noise_std**2 * joint.zz[d:, d:]
        return SecondMoments(zz, joint.zy[:d] + noise_std * joint.zy[d:], joint.count,
                             joint.clipped)  # fmt: skip

    monkeypatch.setattr(modulated, "moments_at_noise", without_cross_term)
    jax.clear_caches()  # the compiled shared-noise program of the test above must be retraced
    try:
        assert _largest_gap(task, modulated.OneShot(task.dim), 1) > 100 * TOLERANCE
    finally:
        jax.clear_caches()
