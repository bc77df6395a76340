"""Gaussian, Laplace, anisotropic and two-point mechanisms: closed forms and round trips."""

import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

from jfed import privacy
from jfed.privacy import gaussian, two_point
from jfed.privacy.mechanisms import (
    AnisotropicGaussianMechanism,
    GaussianMechanism,
    LaplaceMechanism,
    TwoPointMechanism,
)


@pytest.mark.parametrize("epsilon, ratio", [(0.1, 0.3), (1.0, 1.0), (3.0, 2.5), (0.5, 4.0)])
def test_hockey_stick_is_the_divergence(epsilon, ratio):
    """theta_eps(r) = int max(0, p_r(x) - e^eps p_0(x)) dx, p_r = N(r, 1), by quadrature."""

    def integrand(x):
        return max(0.0, stats.norm.pdf(x, loc=ratio) - math.exp(epsilon) * stats.norm.pdf(x))

    expected, _ = integrate.quad(integrand, -12, 12 + ratio, points=[ratio / 2], limit=200)
    assert gaussian.hockey_stick(epsilon, ratio) == pytest.approx(expected, rel=1e-7, abs=1e-14)


@pytest.mark.parametrize("epsilon", [0.05, 0.5, 1.0, 4.0, 20.0, 150.0])
@pytest.mark.parametrize("delta", [1e-12, 1e-8, 1e-5, 1e-2])
def test_analytic_gaussian_matches_dp_accounting(epsilon, delta):
    sigma = float(privacy.analytic_gaussian_noise(1.0, epsilon, delta))
    assert sigma == pytest.approx(dp_accounting.get_sigma_gaussian(epsilon, delta), rel=1e-9)
    # theta_eps at the calibrated ratio is the analytic delta
    assert float(gaussian.hockey_stick(epsilon, 1.0 / sigma)) == pytest.approx(delta, rel=1e-8)
    assert float(privacy.analytic_gaussian_epsilon(1.0, sigma, delta)) == pytest.approx(
        epsilon, rel=1e-9
    )


def test_log_space_is_stable_where_the_naive_formula_fails():
    # Naive: Q(a) - e^eps Q(b) underflows / overflows; the log form stays finite and monotone.
    eps = np.array([50.0, 100.0, 200.0, 400.0])
    log_delta = gaussian.log_hockey_stick(eps, 1.0)
    assert np.all(np.isfinite(log_delta)) and np.all(np.diff(log_delta) < 0)
    sigma = privacy.analytic_gaussian_noise(1.0, 400.0, 1e-12)
    assert np.isfinite(sigma) and sigma > 0
    assert float(privacy.analytic_gaussian_epsilon(1.0, sigma, 1e-12)) == pytest.approx(400, 1e-8)


def test_analytic_needs_less_noise_than_classic_for_every_eps_below_one():
    for delta in (1e-10, 1e-5, 1e-3):
        for epsilon in np.linspace(0.01, 0.99, 50):
            analytic = float(privacy.analytic_gaussian_noise(2.0, epsilon, delta))
            assert analytic < privacy.classic_gaussian_noise(2.0, epsilon, delta)


def test_monotone_in_every_argument():
    eps = np.logspace(-2, 2, 40)
    assert np.all(np.diff(privacy.analytic_gaussian_noise(1.0, eps, 1e-5)) < 0)
    deltas = np.logspace(-12, -1, 12)
    noise = [float(privacy.analytic_gaussian_noise(1.0, 1.0, d)) for d in deltas]
    assert np.all(np.diff(noise) < 0)
    sens = np.array([0.5, 1.0, 2.0, 4.0])
    assert np.all(np.diff(privacy.analytic_gaussian_noise(sens, 1.0, 1e-5)) > 0)
    assert np.all(np.diff(privacy.analytic_gaussian_epsilon(1.0, np.array([0.5, 1, 2]), 1e-5)) < 0)


def test_classic_round_trip():
    sigma = privacy.classic_gaussian_noise(3.0, 0.4, 1e-6)
    assert privacy.classic_gaussian_epsilon(3.0, sigma, 1e-6) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="outside its validity range"):
        privacy.classic_gaussian_epsilon(3.0, 1.0, 1e-6)


def test_gaussian_noise_scales_exactly_with_the_noise_std():
    key = jax.random.key(0)
    unit = GaussianMechanism(1.0, 1.0).noise(key, (1000,))
    scaled = GaussianMechanism(1.0, 3.5).noise(key, (1000,))
    np.testing.assert_allclose(scaled, 3.5 * unit, rtol=1e-6)


def test_mechanisms_describe_themselves():
    g = GaussianMechanism.calibrate(2.0, 1.0, 1e-5)
    assert g.epsilon(1e-5) == pytest.approx(1.0, rel=1e-8)
    assert g.delta(1.0) == pytest.approx(1e-5, rel=1e-6)
    assert g.dp_event() == dp_accounting.GaussianDpEvent(g.noise_std / 2.0)
    assert GaussianMechanism.calibrate(2.0, 1.0, 1e-5, "zcdp").noise_std > g.noise_std
    lap = LaplaceMechanism.calibrate(2.0, 0.5)
    assert lap.scale == 4.0 and lap.epsilon() == 0.5
    assert lap.dp_event() == dp_accounting.LaplaceDpEvent(2.0)
    rr = TwoPointMechanism(0.0, 1.0, 1.3).dp_event()
    p, k = rr.noise_parameter, rr.num_buckets
    assert math.log((1 - p + p / k) / (p / k)) == pytest.approx(1.3)


def test_anisotropic_mechanism():
    sens = np.array([1.0, 0.1, 0.01])
    mech = AnisotropicGaussianMechanism.calibrate(sens, 1.0, 1e-5)
    expected = np.sqrt(4 * np.log(2 / 1e-5) * sens * sens.sum())
    np.testing.assert_allclose(mech.noise_std, expected)
    assert privacy.anisotropic.anisotropic_epsilon(sens, np.array(mech.noise_std), 1e-5) == (
        pytest.approx(1.0)
    )
    # the whitened exact accounting certifies at most the seed's eps
    assert mech.epsilon(1e-5) <= 1.0
    # low-sensitivity coordinates get less noise than the isotropic mechanism with ||Delta||_2
    isotropic = float(privacy.analytic_gaussian_noise(np.linalg.norm(sens), 1.0, 1e-5))
    assert mech.noise_std[2] < isotropic


def test_two_point_is_unbiased_with_the_stated_variance():
    """Mean and variance by Monte Carlo; tolerance 4.5 standard errors; negative control: the
    output points without the (e^eps + 1)/(e^eps - 1) stretch are biased."""
    center, radius, epsilon, w, n = 0.1, 0.5, 0.8, 0.45, 400_000
    draws = np.asarray(
        two_point.perturb(jax.random.key(1), jnp.full(n, w), center, radius, epsilon), np.float64
    )
    variance = two_point.variance(w, center, radius, epsilon)
    assert abs(draws.mean() - w) <= 4.5 * math.sqrt(variance / n)
    assert draws.var() == pytest.approx(variance, rel=4.5 * math.sqrt(2 / n))
    unstretched = center + (draws - center) / ((math.exp(epsilon) + 1) / math.expm1(epsilon))
    assert abs(unstretched.mean() - w) > 4.5 * math.sqrt(variance / n)


def test_two_point_likelihood_ratio_is_e_eps():
    e = 1.7
    probabilities = two_point.high_probability(jnp.array([-1.0, 1.0, 0.3]), 0.0, 1.0, e)
    assert float(probabilities[1] / probabilities[0]) == pytest.approx(math.exp(e), rel=1e-5)
    assert float(probabilities[0]) == pytest.approx(1 / (math.exp(e) + 1), rel=1e-5)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: privacy.analytic_gaussian_noise(1.0, 0.0, 1e-5), "epsilon > 0"),
        (lambda: privacy.analytic_gaussian_noise(1.0, 1.0, 1.5), "delta in \\(0, 1\\)"),
        (lambda: privacy.analytic_gaussian_noise(-1.0, 1.0, 1e-5), "sensitivity > 0"),
        (lambda: GaussianMechanism(1.0, -2.0), "noise_std > 0"),
        (lambda: LaplaceMechanism.calibrate(1.0, -1.0), "epsilon > 0"),
        (lambda: TwoPointMechanism(0.0, 1.0, 0.0), "epsilon > 0"),
        (lambda: GaussianMechanism.calibrate(1.0, 1.0, 1e-5, "magic"), "unknown accountant"),
    ],
)
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()
