"""Shared-noise runs (one pass for every noise level of a seed) equal the separate runs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfed.algorithms import modulated
from jfed.algorithms.linear import SecondMoments
from jfed.data import load_regression
from jfed.engine import ExecutionPlan, run_rounds, simulate
from jfed.sweep.runner import stack

NOISE_LEVELS = (0.0, 0.5, 5.0, 50.0)
KEY = jax.random.key(11)


@pytest.fixture(scope="module")
def task():
    return load_regression("modechoice")


def _levels() -> list:
    return [modulated.hyperparams(noise_std=s, beta=0.7, omega=2.0) for s in NOISE_LEVELS]


@pytest.fixture(scope="module")
def separate_runs(task):
    """``runs(estimator, rounds)``: ``(state, infos)`` of each noise level run on its own (one
    program per estimator, run once per module)."""
    done = {}

    def runs(estimator, rounds):
        if (estimator, rounds) not in done:
            done[estimator, rounds] = [
                jax.device_get(simulate(estimator, task.train, hp, KEY, rounds)) for hp in _levels()
            ]
        return done[estimator, rounds]

    return runs


def traced_afresh(algorithm, population, hyperparams, key, rounds):
    """:func:`jfed.engine.simulate` through a jitted function of its own, so it is traced now
    (with the code as it is now), whatever programs are cached."""
    plan = ExecutionPlan.for_backend().fitted(population.n_clients)
    run = jax.jit(lambda population, hp, key: run_rounds(algorithm, population, hp, key, rounds,
                                                         plan))  # fmt: skip
    return run(population, hyperparams, key)


def _largest_gap(task, estimator, rounds, separate):
    """The largest relative gap between a level of the shared run and its separate run (the
    shared run traced afresh, so that a patch of the code in a test reaches it)."""
    shared, shared_infos = traced_afresh(
        modulated.SharedNoise(estimator), task.train, stack(_levels()), KEY, rounds
    )
    assert shared_infos.theta.shape == (rounds, len(NOISE_LEVELS), task.dim)
    gaps = []
    for level, (alone, infos) in enumerate(separate):
        scale = np.abs(np.asarray(alone.theta)).max()
        gaps.append(np.abs(np.asarray(shared.theta[level]) - np.asarray(alone.theta)).max() / scale)
        np.testing.assert_allclose(shared_infos.clipped_fraction[:, level], infos.clipped_fraction)
    return max(gaps)


# float32 sums over ~100 clients grouped differently: a relative gap of order 1e-6, far below
# what a wrong decomposition gives (the cross term alone moves theta by order 1e-1)
TOLERANCE = 1e-4


@pytest.mark.parametrize("rounds, estimator", [(1, modulated.OneShot), (4, modulated.Iterative)])
def test_shared_noise_runs_equal_separate_runs(task, separate_runs, rounds, estimator):
    separate = separate_runs(estimator(task.dim), rounds)
    assert _largest_gap(task, estimator(task.dim), rounds, separate) < TOLERANCE


def test_negative_control_dropping_the_cross_term_is_caught(task, separate_runs, monkeypatch):
    def without_cross_term(joint, noise_std):
        d = joint.zy.shape[0] // 2
        zz = joint.zz[:d, :d] + noise_std**2 * joint.zz[d:, d:]
        return SecondMoments(zz, joint.zy[:d] + noise_std * joint.zy[d:], joint.count,
                             joint.clipped)  # fmt: skip

    estimator = modulated.OneShot(task.dim)
    separate = separate_runs(estimator, 1)  # unchanged by the patch: the shared run alone uses it
    monkeypatch.setattr(modulated, "moments_at_noise", without_cross_term)
    assert _largest_gap(task, estimator, 1, separate) > 100 * TOLERANCE


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
