"""The estimation releases checked on the program's own output laws (one release, two
neighbouring inputs, exact hockey-stick divergence, :mod:`jfed.privacy.exact_release`): the
default ``jfed run estimation`` (each site's release on the integer grid, exact discrete
Laplace noise) and a local release whose values need rounding meet their stated pure eps; the
float32 Laplace release of the same setting (``--noise float``, the negative control) does not.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfed.algorithms.estimation import release_params
from jfed.algorithms.estimation_aggregators import DiscreteLaplaceNoise, LocalNoise, SiteCurator
from jfed.methods import Estimation, build_experiment
from jfed.privacy import discrete
from jfed.privacy import exact_release as er
from jfed.privacy.discrete_aggregators import LAPLACE_SCALE_BITS


def _calibrated(config: Estimation):
    experiment = build_experiment(config)
    experiment.prepare([config])
    hyper, fields = experiment.calibrate(config)
    (release,) = experiment.ledger().releases
    return hyper, fields, release.aggregator


def _device(params):
    return type(params)(*(jnp.asarray(value) for value in params))


def grid_law(aggregator, params, integers: int, offset: float = 0.0) -> er.ReleaseLaw:
    """The law of ``aggregator``'s release (one value) when the contributions' integer sum on
    the grid is ``integers``: the discrete Laplace's exact pmf at the scale the device computes,
    pushed through the release's own float map (run by JAX)."""
    grid = jax.jit(aggregator.grid_params)(params)
    scale = 2.0**LAPLACE_SCALE_BITS / int(jax.jit(aggregator.noise.grid.divisor)(grid))
    noise = np.arange(-int(40 * scale) - 40, int(40 * scale) + 41)
    masses = np.exp(discrete.discrete_laplace_log_pmf(noise, scale))

    @jax.jit
    def released(totals):  # as SiteCurator / LocalNoise scale back and divide
        noised = aggregator.noise.scaled_back(totals, grid)
        return aggregator.finish(params, noised, jnp.float32(offset))

    outputs = np.asarray(released(jnp.asarray(integers + noise, jnp.int32)))
    values, inverse = np.unique(outputs, return_inverse=True)
    return er.ReleaseLaw(values, np.bincount(inverse.ravel(), weights=masses))


def _mixture(laws_and_weights) -> er.ReleaseLaw:
    outputs = np.concatenate([law.outputs for law, _ in laws_and_weights])
    masses = np.concatenate([weight * law.masses for law, weight in laws_and_weights])
    values, inverse = np.unique(outputs, return_inverse=True)
    return er.ReleaseLaw(values, np.bincount(inverse, weights=masses))


def test_the_default_estimation_release_meets_its_stated_guarantee():
    """``jfed run estimation`` as it runs by default (federated: each site releases the mean of
    its n = 50 units of ±1 on the grid, eps 1, "pure" eps-DP): one site's release on site totals
    0 and -2 (one unit changed) has delta 0 at the stated eps, and is no tighter (delta > 0 at
    0.9 eps). Negative control: the float32 Laplace release of ``--noise float`` (scale 0.04)
    on the same totals has delta >= 0.89 at eps 5, so at every eps up to 5 (the hockey-stick
    divergence falls as eps grows), against the 0 it states."""
    config = Estimation()
    hyper, fields, aggregator = _calibrated(config)
    assert isinstance(aggregator, SiteCurator)
    assert isinstance(aggregator.noise, DiscreteLaplaceNoise)
    assert fields["mechanism_model"].startswith("exact") and fields["delta"] == 0.0
    assert fields["epsilon_certified"] == pytest.approx(config.epsilon, rel=1e-6)
    assert fields["grid_norm"] == aggregator.noise.grid_norm
    params = _device(release_params(hyper, hyper.first_noise))

    # the site's contributions as the program sums them: ±1 units, counts from the exact law
    contributions = jax.jit(aggregator.contributions)

    def integer_total(plus: int) -> int:
        update = {"value": jnp.array([1.0, -1.0]), "weight": jnp.array([plus, 50.0 - plus]),
                  "clipped": jnp.float32(0)}  # fmt: skip
        summed = contributions(params, update, jax.random.key(0))
        return int(summed["value"])

    top = aggregator.noise.grid_norm
    assert integer_total(25) == 0 and integer_total(24) == -2 * top  # ±1 lie on the grid
    zero, minus_two = grid_law(aggregator, params, 0), grid_law(aggregator, params, -2 * top)
    assert er.hockey_stick(zero, minus_two, config.epsilon) <= 1e-12
    assert er.hockey_stick(zero, minus_two, 0.9 * config.epsilon) > 1e-3

    float_config = config.replace(noise="float")
    float_hyper, float_fields, _ = _calibrated(float_config)
    scale = float(float_hyper.first_noise)
    assert scale == pytest.approx(0.04) and float_fields["delta"] == 0.0
    assert float_fields["mechanism_model"].startswith("ideal real-valued mechanism")
    noise = np.asarray(jnp.float32(scale) * jnp.asarray(er.enumerated_noise(jax.random.laplace)))
    units = jnp.float32(config.units)
    low = er.float_release_law(float(jnp.float32(0.0) / units), noise)
    high = er.float_release_law(float(jnp.float32(-2.0) / units), noise)
    assert er.hockey_stick(low, high, 5.0) >= 0.89  # the release states delta 0


def test_a_local_release_that_rounds_meets_its_stated_guarantee():
    """local-item on Gaussian data (a unit's value rounded to the grid at random, then exact
    discrete Laplace noise): a unit at the clip bound c and one at -0.3 c (between two grid
    points) give output laws whose divergence is 0 at the stated eps whatever the rounding
    drew (each outcome's pair of laws is), and positive at 0.6 eps (the values are 1.3 c apart:
    0.65 of the sensitivity 2c)."""
    config = Estimation(setting="local-item", data="gaussian", sites=4, units=5)
    hyper, fields, aggregator = _calibrated(config)
    assert isinstance(aggregator, LocalNoise)
    assert fields["epsilon_certified"] == pytest.approx(config.epsilon, rel=1e-6)
    params = _device(release_params(hyper, hyper.first_noise))
    top = aggregator.noise.grid_norm
    position = -0.3 * top  # grid units: floor and ceiling each with their probability
    down = math.floor(position)
    up = position - down
    at_bound = grid_law(aggregator, params, top)
    between = _mixture([(grid_law(aggregator, params, down), 1 - up),
                        (grid_law(aggregator, params, down + 1), up)])  # fmt: skip
    assert 0.0 < up < 1.0
    assert er.hockey_stick(at_bound, between, config.epsilon) <= 1e-12
    assert er.hockey_stick(at_bound, between, 0.6 * config.epsilon) > 1e-4
    # the value's grid integers as the release rounds them: the floor or the ceiling only
    clip = float(hyper.clip)
    rounded = jax.jit(lambda k: aggregator.noise.integers(k, jnp.float32(-0.3 * clip), 0.0,
                                                          jnp.float32(clip)))  # fmt: skip
    draws = {int(rounded(jax.random.key(i))) for i in range(40)}
    assert draws <= {down, down + 1} and len(draws) == 2
