"""Shared-noise runs (one pass for every noise level of a seed) equal the separate runs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfed.algorithms import modulated
from jfed.algorithms.linear import SecondMoments
from jfed.data import load_regression
from jfed.engine import simulate
from jfed.sweep.runner import stack

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


def test_shared_units_must_agree_on_what_the_clients_read():
    """Runs that share one pass over the clients may differ in the noise and the server's fields
    (the noise-scaled ridge differs per eps) but not in the map or the clip."""
    shared = modulated.SharedNoise(modulated.OneShot(dim=3))
    base = modulated.hyperparams(noise_std=1.0, ridge=0.5)
    shared.check_shared([base, base._replace(noise_std=jnp.float32(2.0), ridge=jnp.float32(3.0))])
    for field in ("clip_norm", "alpha", "beta"):
        other = base._replace(**{field: jnp.float32(0.25)})
        with pytest.raises(ValueError, match=f"same {field}"):
            shared.check_shared([base, other])
