"""The functional mean's release on the integer grid (``jfed run functional-estimation``, its
default ``--noise discrete``; :class:`~jfed.algorithms.estimation_aggregators.DiscreteBatchMeans`):
its certified eps against the analytic Gaussian's closed form written here, the rounded
integers against their exact norm bound, and one coordinate's output laws on two neighbouring
inputs, exactly, as the program maps them (negative control: the float32 release of
``--noise float`` on the same pair). The exact estimator's MSE against the float one's, and the
float draws against a value recorded before the grid existed, are in
``test_estimation_functional.py`` (with its runs)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from jfed._random import private_normals
from jfed.algorithms import functional
from jfed.algorithms.estimation_aggregators import BatchMeansParams, DiscreteBatchMeans
from jfed.methods import FunctionalEstimation
from jfed.methods import estimation as experiments
from jfed.privacy import discrete
from jfed.privacy import exact_release as er

BETA = math.exp(-0.5)


def analytic_epsilon(multiplier: float, delta: float) -> float:
    """The least eps at which the Gaussian mechanism of sensitivity 1 and noise std
    ``multiplier`` is (eps, delta)-DP: ``delta(eps) = Phi(1/(2z) - eps z) - e^eps Phi(-1/(2z) -
    eps z)`` (Balle and Wang 2018, Theorem 8), solved by Brent's method."""

    def excess(epsilon: float) -> float:
        z = multiplier
        upper, lower = norm.cdf(0.5 / z - epsilon * z), norm.cdf(-0.5 / z - epsilon * z)
        return upper - math.exp(epsilon) * lower - delta

    return brentq(excess, 0.0, 50.0, xtol=1e-15, rtol=1e-14)


def squared_norm_bound(grid_norm: int, dimension: int) -> int:
    """Kairouz, Liu and Steinke's bound (Theorem 1) on a rounded vector's squared norm at beta =
    e^-0.5, or the deterministic ``(L + sqrt(d))^2`` where smaller."""
    spread = math.sqrt(2 * math.log(1 / BETA)) * (grid_norm + math.sqrt(dimension) / 2)
    concentrated = grid_norm**2 + dimension / 4 + spread
    return math.ceil(min((grid_norm + math.sqrt(dimension)) ** 2, concentrated))


def _calibrated(config: FunctionalEstimation, terms: int):
    hp, record = experiments.calibrate_functional(config, terms)
    program = experiments._functional_program(config, record["grid_norm"])
    (release,) = experiments.round_ledger(program, config.servers).releases
    params = BatchMeansParams(np.asarray(hp.noise_std, np.float64),
                              np.asarray(hp.clip, np.float64), config.functions,
                              config.iterations, terms)  # fmt: skip
    return hp, record, release.aggregator, params


@pytest.mark.parametrize("shape", ["anisotropic", "isotropic"])
def test_the_exact_release_certifies_the_float_releases_eps(shape):
    """A default run's record (the grid) certifies the analytic Gaussian's eps at the whitened
    multiplier ``z = n_b / (2 ||kappa / sigma||_2)`` of the float32 numbers that ran (the float
    release's), at ``delta_accountant``, to 1e-9; its event's sensitivity is ``2 sqrt(B)``, B
    written here, and its variance less the coupling's 9 grid units is ``(2 z sqrt(B))^2``.
    Negative controls: the rounding's inflation forgotten (the same noise read at the unrounded
    sensitivity 2L), and a batch one function larger, certify other eps."""
    config = FunctionalEstimation(servers=2, functions=41, observations=20, terms=6,
                                  iterations=2, epsilon=0.7, noise_shape=shape)  # fmt: skip
    hp, record, aggregator, params = _calibrated(config, 6)
    assert isinstance(aggregator, DiscreteBatchMeans)
    assert record["mechanism_model"].startswith("exact") and "ideal" not in record["notion"]
    assert record["delta_accountant"] + record["delta_coupling"] == record["delta"]
    assert 0 < record["delta_coupling"] < 1e-60
    clip, std = np.asarray(hp.clip, np.float64)[:6], np.asarray(hp.noise_std, np.float64)[:6]
    grid_norm = record["grid_norm"]
    bound = squared_norm_bound(grid_norm, functional.MAX_TERMS)
    assert record["noise_inflation"] == pytest.approx(math.sqrt(bound) / grid_norm, rel=1e-12)

    def epsilon(batch: int) -> float:
        return analytic_epsilon(batch / (2.0 * np.linalg.norm(clip / std)),
                                record["delta_accountant"])  # fmt: skip

    assert record["epsilon_certified"] == pytest.approx(epsilon(41 // 2), rel=1e-9)
    assert record["epsilon_certified"] == pytest.approx(config.epsilon, rel=1e-6)
    event = aggregator.event(params)
    assert event.l2_sensitivity**2 == pytest.approx(4 * bound, rel=1e-15)
    variance = (event.noise_multiplier * event.l2_sensitivity) ** 2
    z = (41 // 2) / (2.0 * np.linalg.norm(clip / std))
    assert variance - 9.0 == pytest.approx((2 * z) ** 2 * bound, rel=1e-12)
    forgotten = analytic_epsilon(math.sqrt(variance - 9.0) / (2 * grid_norm),
                                 record["delta_accountant"])  # fmt: skip
    assert forgotten < record["epsilon_certified"] * (1 - 1e-6)
    assert record["epsilon_certified"] != pytest.approx(epsilon(41 // 2 + 1), rel=1e-9)


def test_every_rounded_function_meets_the_integer_norm_bound():
    """4,000 functions at corners of the clip box (every coordinate at +-kappa_l: the whitened
    norm is the radius R exactly), all 32 coordinates used, on a coarse grid (L = 16, where
    rounding matters): every rounded vector's squared norm, summed here in int64, is at most B,
    with no fallback; most exceed L^2 (the unrounded bound: the inflation to B is needed).
    Negative control: plain randomized rounding of the same vectors exceeds B in some draws (the
    exact check, not luck, keeps the bound)."""
    grid_norm, terms = 16, functional.MAX_TERMS
    aggregator = DiscreteBatchMeans(functional.MAX_TERMS, grid_norm=grid_norm)
    rng = np.random.default_rng(0)
    clip = rng.uniform(0.1, 1.0, terms).astype(np.float32)
    std = rng.uniform(0.3, 1.3, terms).astype(np.float32)
    params = BatchMeansParams(jnp.asarray(std), jnp.asarray(clip), jnp.int32(4000), jnp.int32(1),
                              jnp.int32(terms))  # fmt: skip
    signs = np.where(rng.random((4000, terms)) < 0.5, -1, 1)
    projections = jnp.asarray(signs * clip, jnp.float32)

    @jax.jit
    def rounded(key):
        records = aggregator.integers(params, projections, key)
        whitening, radius, _ = aggregator.whitening(params)
        scaled = projections * whitening * (grid_norm / radius)
        plain = discrete.randomized_round(jax.random.fold_in(key, 1), scaled)
        return records["value"], records["rounding_fallbacks"], plain

    values, fallbacks, plain = (np.asarray(x) for x in rounded(jax.random.key(7)))
    bound = aggregator.grid.squared_bound
    assert bound == squared_norm_bound(grid_norm, functional.MAX_TERMS)
    squared = np.sum(values.astype(np.int64) ** 2, axis=1)
    assert np.all(squared <= bound) and np.sum(fallbacks) == 0
    assert np.mean(squared > grid_norm**2) > 0.5
    plain_squared = np.sum(plain.astype(np.int64) ** 2, axis=1)
    assert np.any(plain_squared > bound)


def test_one_coordinates_output_laws_meet_the_stated_guarantee():
    """``functional-estimation`` on the grid at r = 1, T = 1 (eps 1, delta 1e-5): the release of
    one server on two neighbouring inputs, whose integer sums differ by 2L (the most one function
    moves a one-coordinate sum: its rounded value is in [-L, L]) or by ``2 floor(sqrt(B))`` (the
    certified sensitivity's integer part): the discrete Gaussian's exact pmf at the variance the
    device draws, pushed through the release's own float map, has hockey-stick divergence at most
    the stated delta at the certified eps, and above it at 0.9 eps. Negative control: the float32
    release of ``--noise float`` (jfed's private normals times sigma, added to the batch means 0
    and Delta) has divergence above 0.5 at eps 5 on the same pair, against the 1e-5 it states."""
    config = FunctionalEstimation(servers=1, functions=12, observations=20, terms=1, epsilon=1.0)
    _, record, aggregator, params = _calibrated(config, 1)
    grid_norm, delta = record["grid_norm"], record["delta"]
    bits, quotient, in_range = aggregator.batch_noise(params, config.functions)
    assert bool(in_range)
    variance = float(2 ** int(bits) * int(quotient))
    reach = int(40 * math.sqrt(variance)) + 40
    noise = np.arange(-reach, reach + 1, dtype=np.int64)
    masses = np.exp(discrete.discrete_gaussian_log_pmf(noise, variance))
    one = BatchMeansParams(*(jnp.asarray(np.asarray(x, np.float32)[:1]) for x in params[:2]),
                           jnp.int32(config.functions), jnp.int32(1), jnp.int32(1))  # fmt: skip

    @jax.jit
    def released(totals):  # the release's own map of the noised integer sums (one coordinate)
        count = jnp.full((1,), config.functions, jnp.float32)
        return jax.vmap(lambda t: aggregator.scaled_back(one, t.reshape(1, 1), count)[0])(totals)

    def law(total: int) -> er.ReleaseLaw:
        outputs = np.asarray(released(jnp.asarray(total + noise, jnp.int32)))
        values, inverse = np.unique(outputs, return_inverse=True)
        return er.ReleaseLaw(values, np.bincount(inverse.ravel(), weights=masses))

    certified = record["epsilon_certified"]
    zero = law(0)
    for shift in sorted({2 * grid_norm, 2 * math.isqrt(aggregator.grid.squared_bound)}):
        moved = law(shift)
        assert er.hockey_stick(zero, moved, certified) <= delta * (1 + 1e-6)
        assert er.hockey_stick(moved, zero, certified) <= delta * (1 + 1e-6)
    assert er.hockey_stick(zero, law(2 * grid_norm), 0.9 * certified) > 2 * delta

    float_hp, float_record = experiments.calibrate_functional(config.replace(noise="float"), 1)
    assert float_record["mechanism_model"].startswith("ideal real-valued mechanism")
    sigma = np.float32(np.asarray(float_hp.noise_std)[0])
    sensitivity = np.float32(2.0 * np.asarray(float_hp.clip, np.float32)[0] / config.functions)
    normals = er.enumerated_noise(lambda key, shape: private_normals(key, shape))
    scaled = np.asarray(jnp.float32(sigma) * jnp.asarray(normals))
    low = er.float_release_law(0.0, scaled, er.PRIVATE_NORMAL_TAIL_CELLS)
    high = er.float_release_law(float(sensitivity), scaled, er.PRIVATE_NORMAL_TAIL_CELLS)
    assert er.hockey_stick(low, high, 5.0) > 0.5


def test_one_sweep_runs_one_arithmetic():
    """A sweep's configurations share one program: exact and float32 releases together are
    refused, naming --noise; a noise-free configuration joins either."""
    from jfed._validation import UsageError
    from jfed.methods import build_experiment

    exact = FunctionalEstimation(functions=20, observations=4, terms=2)
    experiment = build_experiment(exact)
    experiment.prepare([exact, exact.replace(noise_shape="none")])
    assert experiment.algorithm.grid_norm is not None
    with pytest.raises(UsageError, match="--noise"):
        experiment.prepare([exact, exact.replace(noise="float")])


def test_the_cost_model_counts_the_programs_terms():
    """The cost model's mirrors of the program's sizes (it imports no algorithm)."""
    from jfed.methods.declared import estimation as declared

    assert (declared.TRUTH_TERMS, declared.MAX_TERMS) == (functional.TRUTH_TERMS,
                                                          functional.MAX_TERMS)  # fmt: skip
