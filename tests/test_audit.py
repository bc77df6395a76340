"""Empirical privacy audits of the Gaussian, Laplace and two-point mechanisms.

Each audit draws N outputs on a pair of neighbouring inputs, picks a threshold on one half, and
bounds eps from below on the other half with Clopper-Pearson intervals at 95% confidence. A
correct mechanism must never be caught (lower bound <= claimed eps); each negative control, an
under-noised mechanism whose true eps is about 3 times the claim, must be caught. Seeds are fixed.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfed.privacy.audit import audit_threshold, clopper_pearson, largest_detectable_epsilon
from jfed.privacy.mechanisms import GaussianMechanism, LaplaceMechanism, TwoPointMechanism

N = 400_000
CLAIM, DELTA = 1.0, 1e-5


def _outputs(mechanism, low, high, seed=0):
    key_low, key_high = jax.random.split(jax.random.key(seed))
    return (
        mechanism.randomize(key_low, jnp.full(N, low)),
        mechanism.randomize(key_high, jnp.full(N, high)),
    )


def test_gaussian_audit_and_negative_control():
    honest = GaussianMechanism.calibrate(1.0, CLAIM, DELTA)
    result = audit_threshold(*_outputs(honest, 0.0, 1.0), delta=DELTA)
    assert 0.3 < result.epsilon_lower_bound <= CLAIM
    under_noised = GaussianMechanism(1.0, honest.noise_std / 4)
    caught = audit_threshold(*_outputs(under_noised, 0.0, 1.0), delta=DELTA)
    assert caught.epsilon_lower_bound > CLAIM


def test_laplace_audit_and_negative_control():
    honest = LaplaceMechanism.calibrate(1.0, CLAIM)
    assert 0.5 < audit_threshold(*_outputs(honest, 0.0, 1.0)).epsilon_lower_bound <= CLAIM
    under_noised = LaplaceMechanism(1.0, honest.scale / 3)
    assert audit_threshold(*_outputs(under_noised, 0.0, 1.0)).epsilon_lower_bound > CLAIM


def test_two_point_audit_and_negative_control():
    honest = TwoPointMechanism(0.0, 1.0, CLAIM)
    assert 0.8 < audit_threshold(*_outputs(honest, -1.0, 1.0)).epsilon_lower_bound <= CLAIM
    # a randomizer that really spends 3 eps while claiming 1
    cheating = TwoPointMechanism(0.0, 1.0, 3 * CLAIM)
    assert audit_threshold(*_outputs(cheating, -1.0, 1.0)).epsilon_lower_bound > CLAIM


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_honest_gaussian_is_never_caught_across_seeds(seed):
    honest = GaussianMechanism.calibrate(2.0, 0.5, DELTA)
    result = audit_threshold(*_outputs(honest, 0.0, 2.0, seed), delta=DELTA)
    assert result.epsilon_lower_bound <= 0.5


def test_clopper_pearson_brackets_the_proportion():
    low, high = clopper_pearson(30, 100, 0.05)
    assert low < 0.3 < high
    assert clopper_pearson(0, 50, 0.05)[0] == 0.0 and clopper_pearson(50, 50, 0.05)[1] == 1.0
    # the exact interval is wider than the normal approximation's
    assert high - low > 2 * 1.96 * (0.3 * 0.7 / 100) ** 0.5 * 0.99


def test_no_bound_exceeds_the_largest_detectable_epsilon():
    # perfect separation on n samples: TPR >= alpha^(1/n), FPR <= 1 - alpha^(1/n)
    n, confidence = 5_000, 0.95
    alpha = (1 - confidence) / 2
    edge = alpha ** (1 / n)
    assert largest_detectable_epsilon(n, confidence) == pytest.approx(math.log(edge / (1 - edge)))
    never_overlapping = audit_threshold(np.zeros(2 * n), np.ones(2 * n), confidence=confidence)
    assert never_overlapping.epsilon_lower_bound == pytest.approx(
        largest_detectable_epsilon(n, confidence)
    )
    assert largest_detectable_epsilon(n, confidence, delta=1e-5) < largest_detectable_epsilon(
        n, confidence
    )
