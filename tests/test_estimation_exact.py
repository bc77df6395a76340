"""The estimation releases checked on the program's own output laws (one release, two
neighbouring inputs, exact hockey-stick divergence, :mod:`jfed.privacy.exact_release`): the
default ``jfed run estimation`` (each site's release on the integer grid, exact discrete
Laplace noise) and a local release whose values need rounding meet their stated pure eps; the
float32 Laplace release of the same setting (``--noise float``, the negative control) does not.
The Gaussian release on the grid (``--mechanism gaussian``, its default ``--noise discrete``):
its certified eps against the two shifted discrete Gaussian pmfs summed here, its output laws
against the float32 release's, and its noise's mean and variance against the float release's
at the same eps.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfed._random import private_normals
from jfed.algorithms.estimation import release_params
from jfed.algorithms.estimation_aggregators import (
    DiscreteGaussianNoise,
    DiscreteLaplaceNoise,
    LocalNoise,
    SiteCurator,
)
from jfed.methods import Estimation, build_experiment
from jfed.privacy import discrete
from jfed.privacy import exact_release as er
from jfed.privacy.discrete_aggregators import LAPLACE_SCALE_BITS, DiscreteLaplaceSumParams


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


# ------------------------------------------------------------- the Gaussian release on the grid


def shifted_delta(epsilon: float, variance: float, shift: int) -> float:
    """``sum_y max(0, P(y) - e^eps P(y - shift))``, ``P`` the pmf of ``N_Z(0, variance)``
    summed directly over 50 standard deviations."""
    reach = int(50 * math.sqrt(variance)) + shift + 50
    y = np.arange(-reach, reach + 1, dtype=np.float64)
    weights = np.exp(-(y**2) / (2 * variance))
    total = weights.sum()
    p, q = weights / total, np.exp(-((y - shift) ** 2) / (2 * variance)) / total
    return float(np.sum(np.maximum(0.0, p - math.exp(epsilon) * q)))


def _variance(event) -> float:
    return (event.noise_multiplier * event.l2_sensitivity) ** 2


def _basic_epsilon(event, delta: float) -> float:
    from jfed.privacy import Basic, spent
    from jfed.privacy.guarantee import Adjacency

    return spent(event, delta, accountant=Basic(), adjacency=Adjacency.BOUNDED)


@pytest.mark.parametrize("grid_norm, epsilon", [(8, 1.0), (64, 0.5)])
def test_a_release_is_certified_at_the_exact_delta_of_its_sensitivity(grid_norm, epsilon):
    """One release calibrated to (eps, 1e-5) on a grid of L: the device's variance ``v`` and the
    sensitivity 2L give, by direct summation, delta at the certified eps equal to the target
    share (rel 1e-6), and no smaller shift a larger delta. Negative control: a sensitivity one
    larger (a rounding that could move the sum by 2L + 1) is caught above the delta."""
    noise, delta = DiscreteGaussianNoise(grid_norm=grid_norm), 1e-5
    sigma = noise.calibrate(2.0, epsilon, delta)  # a contribution in [-1, 1], count 1
    event = noise.release_event(sigma, 1.0, 1.0)
    assert event.l2_sensitivity == 2 * grid_norm and event.dimension == 1
    certified = _basic_epsilon(event, delta)
    assert certified <= epsilon
    variance, shift = _variance(event), 2 * grid_norm
    assert shifted_delta(certified, variance, shift) == pytest.approx(delta, rel=1e-6)
    for smaller in (1, grid_norm, shift - 1):
        assert shifted_delta(certified, variance, smaller) <= delta
    assert shifted_delta(certified, variance, shift + 1) > delta * (1 + 1e-3)


def gaussian_grid_law(aggregator, params, integers: int) -> er.ReleaseLaw:
    """The law of a site's release when its integer sum is ``integers``: the exact pmf of the
    discrete Gaussian the device draws, pushed through the release's own float map."""
    grid = jax.jit(aggregator.grid_params)(params)
    bits, quotient, in_range = jax.jit(aggregator.noise.grid_variance)(grid)
    assert bool(in_range)
    variance = float(2 ** int(bits) * int(quotient))
    reach = int(40 * math.sqrt(variance)) + 40
    noise = np.arange(-reach, reach + 1)
    masses = np.exp(discrete.discrete_gaussian_log_pmf(noise, variance))

    @jax.jit
    def released(totals):
        noised = aggregator.noise.scaled_back(totals, grid)
        return aggregator.finish(params, noised, jnp.float32(0.0))

    outputs = np.asarray(released(jnp.asarray(integers + noise, jnp.int32)))
    values, inverse = np.unique(outputs, return_inverse=True)
    return er.ReleaseLaw(values, np.bincount(inverse.ravel(), weights=masses))


def test_the_default_gaussian_release_meets_its_stated_guarantee():
    """``jfed run estimation --mechanism gaussian`` (federated, n = 50 units of ±1 a site, eps 1,
    delta 1e-5): one site's release on its integer totals 0 and -2L (one unit changed) has
    hockey-stick divergence at most delta at the stated eps and above it at 0.9 eps. Negative
    control: the float32 release of ``--noise float`` (jfed's private normals times sigma) on the
    same totals has divergence above 0.5 at eps 5, against the 1e-5 it states."""
    config = Estimation(mechanism="gaussian")
    hyper, fields, aggregator = _calibrated(config)
    assert isinstance(aggregator, SiteCurator)
    assert isinstance(aggregator.noise, DiscreteGaussianNoise)
    assert fields["mechanism_model"].startswith("exact") and "Gaussian" in fields["mechanism_model"]
    assert fields["epsilon_certified"] <= config.epsilon
    delta = fields["delta"]
    params = _device(release_params(hyper, hyper.first_noise))
    top = aggregator.noise.grid_norm
    zero, minus_two = (
        gaussian_grid_law(aggregator, params, 0),
        gaussian_grid_law(aggregator, params, -2 * top),
    )
    assert er.hockey_stick(zero, minus_two, config.epsilon) <= delta * (1 + 1e-6)
    assert er.hockey_stick(zero, minus_two, 0.9 * config.epsilon) > 2 * delta

    float_hyper, float_fields, _ = _calibrated(config.replace(noise="float"))
    sigma = float(float_hyper.first_noise)
    assert float_fields["mechanism_model"].startswith("ideal real-valued mechanism")
    normals = er.enumerated_noise(lambda key, shape: private_normals(key, shape))
    noise = np.asarray(jnp.float32(sigma) * jnp.asarray(normals))
    units = jnp.float32(config.units)
    low = er.float_release_law(float(jnp.float32(0.0) / units), noise,
                               er.PRIVATE_NORMAL_TAIL_CELLS)  # fmt: skip
    high = er.float_release_law(float(jnp.float32(-2.0) / units), noise,
                                er.PRIVATE_NORMAL_TAIL_CELLS)  # fmt: skip
    assert er.hockey_stick(low, high, 5.0) > 0.5


DRAWS = 4000


def _noise_draws(noise: DiscreteGaussianNoise, sigma: float, seed: int) -> np.ndarray:
    """``DRAWS`` releases of an integer sum 0 (one contribution in [-1, 1], count 1)."""
    grid = DiscreteLaplaceSumParams(jnp.float32(1.0), jnp.float32(sigma))
    draw = jax.jit(lambda key: noise.noised(key, jnp.zeros((DRAWS,), jnp.int32), grid))
    return np.asarray(draw(jax.random.key(seed)), np.float64)


def test_the_exact_noise_is_unbiased_with_the_float_releases_variance():
    """4,000 releases of a sum 0 at eps 1, delta 1e-5 (sigma about 7.5 value units, about 950
    grid units): the mean within 4 standard errors of 0, the sample variance within 4 of its
    standard errors (``sigma^2 sqrt(2 / (N - 1))``, a normal's: the discrete Gaussian of this
    sigma has a normal's moments) of the float release's sigma^2 at the same eps: the exact
    release's MSE is the float one's within the seed spread. Negative control: sigma^2 of eps 0.9 is
    rejected by the same test."""
    noise = DiscreteGaussianNoise(grid_norm=64)
    sigma = noise.calibrate(2.0, 1.0, 1e-5)
    from jfed.privacy.gaussian import analytic_gaussian_noise

    float_sigma = float(analytic_gaussian_noise(2.0, 1.0, 1e-5))
    assert sigma == pytest.approx(float_sigma, rel=1e-3)
    draws = _noise_draws(noise, sigma, seed=3)
    standard_error = math.sqrt(float_sigma**2 / DRAWS)
    assert abs(draws.mean()) <= 4 * standard_error

    def variance_matches(target: float) -> bool:
        spread = target * math.sqrt(2.0 / (DRAWS - 1))
        return abs(draws.var(ddof=1) - target) <= 4 * spread

    assert variance_matches(float_sigma**2)
    wrong = float(analytic_gaussian_noise(2.0, 0.9, 1e-5)) ** 2
    assert not variance_matches(wrong)


def test_basic_composition_takes_one_exact_discrete_gaussian_coordinate_only():
    """Basic composition states the exact one-dimensional (eps, delta) of a discrete Gaussian
    release of one coordinate and an integer sensitivity (the estimation releases'); a release
    of two coordinates, or of a non-integer sensitivity (DP-FedAvg's ``sqrt(B)``), is refused
    rather than certified by the one-dimensional formula."""
    from jfed.privacy import Basic, spent
    from jfed.privacy.discrete_accounting import (
        DiscreteGaussianDpEvent,
        discrete_gaussian_epsilon,
    )
    from jfed.privacy.guarantee import Adjacency

    def certified(event) -> float:
        return spent(event, 1e-5, accountant=Basic(), adjacency=Adjacency.BOUNDED)

    one = DiscreteGaussianDpEvent(2.0, 6.0, 6.0, 1)
    assert certified(one) == pytest.approx(discrete_gaussian_epsilon(1e-5, 144.0, 6), rel=1e-9)
    for refused in (DiscreteGaussianDpEvent(2.0, 6.0, 6.0, 2),
                    DiscreteGaussianDpEvent(2.0, 6.5, 6.5, 1)):  # fmt: skip
        with pytest.raises(Exception, match="one coordinate"):
            certified(refused)
