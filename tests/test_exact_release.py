"""The stated guarantee checked on the program's own output laws, one coordinate, two
neighbouring inputs (exact hockey-stick divergence): the integer-grid releases meet their
(eps, delta); the float32 releases of the float mechanisms (the negative controls) do not.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfed.methods import build_experiment, declared
from jfed.privacy import exact_release as er
from jfed.privacy.discrete_accounting import DiscreteRdpAccountant, discrete_gaussian_delta
from jfed.privacy.discrete_aggregators import (
    DiscreteGaussianSum,
    DiscreteGaussianSumParams,
    DiscreteLaplaceSum,
    DiscreteLaplaceSumParams,
)
from jfed.privacy.gaussian import analytic_gaussian_noise
from jfed.privacy.privatizers import gaussian_noise_tree


def test_hockey_stick_of_small_laws():
    truthful = math.e / (1 + math.e)  # randomized response at eps = 1
    p = er.ReleaseLaw(np.array([0.0, 1.0]), np.array([truthful, 1 - truthful]))
    q = er.ReleaseLaw(np.array([0.0, 1.0]), np.array([1 - truthful, truthful]))
    assert er.hockey_stick(p, q, 1.0) == pytest.approx(0.0, abs=1e-15)
    assert er.hockey_stick(p, q, 0.5) == pytest.approx(truthful - math.exp(0.5) * (1 - truthful))
    disjoint = er.ReleaseLaw(np.array([2.0]), np.array([1.0]))
    assert er.hockey_stick(p, disjoint, 10.0) == 1.0  # outputs the other never produces
    # unknown mass may sit on the outputs: it is charged against the excess
    vague = er.ReleaseLaw(np.array([0.0]), np.array([0.5]), unknown=0.5)
    assert er.hockey_stick(er.ReleaseLaw(np.array([0.0]), np.array([1.0])), vague, 0.0) == 0.0


@pytest.fixture(scope="module")
def private_normals():
    """Every value jfed's private normal noise (gaussian_noise_tree at stddev 1) can draw."""
    return er.enumerated_noise(
        lambda key, shape: gaussian_noise_tree(key, jnp.zeros(shape, jnp.float32), 1.0)
    )


def test_the_enumeration_covers_the_real_draws(private_normals):
    real = np.asarray(gaussian_noise_tree(jax.random.key(0), jnp.zeros(20_000), 1.0))
    bulk = np.delete(private_normals, er.PRIVATE_NORMAL_TAIL_CELLS)
    assert np.isin(real, bulk).mean() == 1.0  # a tail draw has probability 2^-22 each
    laplace = er.enumerated_noise(jax.random.laplace)
    assert np.isin(np.asarray(jax.random.laplace(jax.random.key(1), (20_000,))), laplace).all()


def test_the_discrete_gaussian_release_meets_its_stated_guarantee(private_normals):
    """DP-FedAvg's sum on the grid (one coordinate; the default grid's own numbers): the exact
    delta of the output laws on sums 0 and L (one client's largest move) against the delta its
    event states; the float32 Gaussian sum at the same claim is the negative control."""
    aggregator = DiscreteGaussianSum(dimension=1, grid_norm=2**6)
    params = DiscreteGaussianSumParams(clip_norm=1.0, noise_multiplier=1.0)
    sensitivity = math.isqrt(aggregator.squared_bound)  # the largest |v| with v^2 <= B: L
    assert sensitivity == 2**6
    without = er.grid_release_law(aggregator, params, 0)
    with_client = er.grid_release_law(aggregator, params, sensitivity)
    stated = DiscreteRdpAccountant().compose(aggregator.event(params))
    bits, quotient, _ = aggregator.noise_parameters(DiscreteGaussianSumParams(1.0, 1.0))
    variance = 2 ** int(bits) * int(quotient)
    for epsilon in (0.5, 1.0, 2.0):
        exact = er.hockey_stick(without, with_client, epsilon)
        assert exact <= stated.get_delta(epsilon)
        # the float map is one-to-one here: the integers' own delta (Canonne et al., Thm 7)
        assert exact == pytest.approx(discrete_gaussian_delta(epsilon, variance, sensitivity),
                                      rel=1e-9)  # fmt: skip

    # negative control: float32 noise of the analytic calibration for (1, 1e-5), as
    # GaussianSum draws it (gaussian_noise_tree), on float32 sums 0 and C = 1
    stddev = float(analytic_gaussian_noise(1.0, 1.0, 1e-5))
    noise = np.asarray(jnp.float32(stddev) * jnp.asarray(private_normals))
    low = er.float_release_law(0.0, noise, er.PRIVATE_NORMAL_TAIL_CELLS)
    high = er.float_release_law(1.0, noise, er.PRIVATE_NORMAL_TAIL_CELLS)
    delta = er.hockey_stick(low, high, 1.0)
    assert delta > 0.5 > 1e-5  # most outputs with the client are impossible without it


def test_the_discrete_laplace_release_is_pure_and_float_laplace_is_not():
    """Estimation's release on the grid (one site total, the default grid): pure eps = 1 / z
    exactly, on totals 0 and the largest move; jax.random.laplace's float32 release is not."""
    aggregator = DiscreteLaplaceSum(dimension=1)
    params = DiscreteLaplaceSumParams(clip_norm=1.0, noise_multiplier=1.0)
    sensitivity = aggregator.absolute_bound
    without = er.grid_release_law(aggregator, params, 0)
    with_client = er.grid_release_law(aggregator, params, -sensitivity)
    assert er.hockey_stick(without, with_client, 1.0) <= 1e-12  # pure 1-DP: zero delta
    assert er.hockey_stick(without, with_client, 0.9) > 1e-3  # and no smaller eps

    scale = np.float32(1.0)  # Laplace b = sensitivity / eps for sums 0 and -1
    laplace = np.asarray(scale * jnp.asarray(er.enumerated_noise(jax.random.laplace)))
    low, high = er.float_release_law(0.0, laplace), er.float_release_law(-1.0, laplace)
    assert er.hockey_stick(low, high, 1.0) > 0.5  # claimed delta 0


def _averaged(law: er.ReleaseLaw, denominator: float) -> er.ReleaseLaw:
    """``law`` pushed through the fixed-denominator mean's float32 division (as it runs)."""
    outputs = np.asarray(jnp.asarray(law.outputs, jnp.float32) / jnp.float32(denominator))
    values, inverse = np.unique(outputs, return_inverse=True)
    return er.ReleaseLaw(values, np.bincount(inverse.ravel(), weights=law.masses), law.unknown)


def _sampled(law: er.ReleaseLaw, absent: er.ReleaseLaw, rate: float) -> er.ReleaseLaw:
    """The Poisson cohort's mixture: the client takes part with probability ``rate``."""
    outputs = np.concatenate([law.outputs, absent.outputs])
    masses = np.concatenate([rate * law.masses, (1 - rate) * absent.masses])
    values, inverse = np.unique(outputs, return_inverse=True)
    return er.ReleaseLaw(values, np.bincount(inverse, weights=masses),
                         rate * law.unknown + (1 - rate) * absent.unknown)  # fmt: skip


@pytest.mark.parametrize("accountant", [None, "discrete-rdp"])
def test_the_default_dp_fedavg_release_meets_its_stated_guarantee(private_normals, accountant):
    """DP-FedAvg as it runs by default (the exact grid, one coordinate of a round's average):
    the output laws with and without one client (its whole move on that coordinate, taking
    part with the cohort's probability q) meet the delta that the round's stated event gives
    at every eps checked: by default (PLD through the coupling) the Poisson-sampled continuous
    Gaussian the noise is coupled to plus the coupling's (1 + e^eps) T over the round's d
    coordinates; under --accountant discrete-rdp the discrete event's Renyi bound. The float32
    mechanism of ``--noise float``, calibrated to the same target, fails the same check by
    orders of magnitude (negative control)."""
    from jfed import privacy
    from jfed.privacy.discrete_accounting import coupled_gaussian, coupling_total_variation

    setting = dict(clients=300, records=16, rounds=5, cohort_size=30, batch=8, epsilon=3.0,
                   delta=1e-4, accountant=accountant)  # fmt: skip
    config = declared.DPFedAvg(**setting)
    experiment = build_experiment(config)
    experiment.prepare([config])
    hyper, fields = experiment.calibrated(config)
    aggregator = experiment.algorithm.aggregator.inner  # the sum inside the fixed-denominator mean
    assert isinstance(aggregator, DiscreteGaussianSum)
    assert fields["accountant"] == (accountant or "pld")
    params = DiscreteGaussianSumParams(*(float(v) for v in hyper.privacy))
    move = math.isqrt(aggregator.squared_bound)  # one client's largest move on one coordinate
    rate = config.cohort_size / config.clients
    absent = _averaged(er.grid_release_law(aggregator, params, 0), config.cohort_size)
    present = _averaged(er.grid_release_law(aggregator, params, move), config.cohort_size)
    with_client = _sampled(present, absent, rate)
    if accountant is None:
        one_round = privacy.poisson_sampled(coupled_gaussian(aggregator.event(params)), rate)
        variation = coupling_total_variation(aggregator.dimension)
        stated = privacy.Pld().make().compose(one_round)

        def stated_delta(epsilon: float) -> float:
            return stated.get_delta(epsilon) + (1 + math.exp(epsilon)) * variation
    else:
        one_round = privacy.poisson_sampled(aggregator.event(params), rate)
        stated = privacy.DiscreteRdp().make().compose(one_round)
        stated_delta = stated.get_delta
    for epsilon in (0.25, 0.5, 1.0):
        exact = er.hockey_stick(with_client, absent, epsilon)
        assert 0 < exact <= stated_delta(epsilon)

    # negative control: --noise float at the same target, float32 sums 0 and C, the same map
    float_config = config.replace(noise="float", accountant=None)
    float_experiment = build_experiment(float_config)
    float_experiment.prepare([float_config])
    float_hyper, float_fields = float_experiment.calibrated(float_config)
    stddev = float(float_hyper.privacy.noise_multiplier) * float(float_hyper.privacy.clip_norm)
    noise = np.asarray(jnp.float32(stddev) * jnp.asarray(private_normals))
    cells = er.PRIVATE_NORMAL_TAIL_CELLS
    float_absent = _averaged(er.float_release_law(0.0, noise, cells), config.cohort_size)
    float_present = _averaged(er.float_release_law(params.clip_norm, noise, cells),
                              config.cohort_size)  # fmt: skip
    float_with = _sampled(float_present, float_absent, rate)
    float_stated = (
        privacy.Pld()
        .make()
        .compose(
            privacy.poisson_sampled(dp_accounting_gaussian(float_fields["noise_multiplier"]), rate)
        )
    )
    delta = er.hockey_stick(float_with, float_absent, 1.0)
    print(f"float32 release: delta {delta:.3g} at eps 1 against {float_stated.get_delta(1.0):.3g}")
    assert delta > 10 * float_stated.get_delta(1.0)


def dp_accounting_gaussian(noise_multiplier: float):
    import dp_accounting

    return dp_accounting.GaussianDpEvent(noise_multiplier)
