"""zCDP conversion and Gaussian calibration: closed forms, round trips, monotonicity, errors."""

import math

import numpy as np
import pytest

from jfed import privacy


def test_conversion_matches_closed_form():
    rho, delta = 0.37, 1e-6
    expected = rho + 2 * math.sqrt(rho * math.log(1 / delta))
    assert privacy.epsilon_from_rho(rho, delta) == pytest.approx(expected, rel=1e-14)


@pytest.mark.parametrize("delta", [1e-12, 1e-5, 0.1])
def test_rho_epsilon_round_trip(delta):
    epsilon = np.logspace(-3, 2, 60)
    back = privacy.epsilon_from_rho(privacy.rho_from_epsilon(epsilon, delta), delta)
    np.testing.assert_allclose(back, epsilon, rtol=1e-12)


def test_small_epsilon_is_stable():
    # (sqrt(a + eps) - sqrt(a))^2 cancels catastrophically here; the stable form must not.
    epsilon, delta = 1e-9, 1e-10
    a = math.log(1 / delta)
    expected = (epsilon / (2 * math.sqrt(a))) ** 2  # first-order expansion
    assert privacy.rho_from_epsilon(epsilon, delta) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("rounds", [1, 10, 100])
def test_calibration_round_trip(rounds):
    sensitivity, delta = 4.5, 1e-5
    epsilon = np.array([0.1, 1.0, 3.0, 30.0])
    sigma = privacy.calibrate_gaussian(sensitivity, epsilon, delta, rounds)
    spent = privacy.epsilon_of_gaussian(sensitivity, sigma, delta, rounds)
    np.testing.assert_allclose(spent, epsilon, rtol=1e-12)
    # Closed form: sigma = Delta sqrt(T / (2 rho_total)).
    rho_total = (np.sqrt(np.log(1 / delta) + epsilon) - np.sqrt(np.log(1 / delta))) ** 2
    np.testing.assert_allclose(sigma, sensitivity * np.sqrt(rounds / (2 * rho_total)), rtol=1e-10)


def test_monotone():
    epsilon = np.logspace(-2, 2, 30)
    sigma = privacy.calibrate_gaussian(1.0, epsilon, 1e-5)
    assert np.all(np.diff(sigma) < 0)  # more eps, less noise
    assert privacy.calibrate_gaussian(1.0, 1.0, 1e-5, 10) > privacy.calibrate_gaussian(
        1.0, 1.0, 1e-5
    )
    assert privacy.calibrate_gaussian(1.0, 1.0, 1e-8) > privacy.calibrate_gaussian(1.0, 1.0, 1e-5)


def test_classic_gaussian():
    sigma = privacy.classic_gaussian_noise(2.0, 0.5, 1e-5)
    assert sigma == pytest.approx(2.0 * math.sqrt(2 * math.log(1.25e5)) / 0.5)
    with pytest.raises(ValueError, match="epsilon in \\(0, 1\\)"):
        privacy.classic_gaussian_noise(1.0, 2.0, 1e-5)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: privacy.rho_from_epsilon(0.0, 1e-5), "epsilon > 0"),
        (lambda: privacy.rho_from_epsilon(-1.0, 1e-5), "epsilon > 0"),
        (lambda: privacy.rho_from_epsilon(1.0, 0.0), "delta in \\(0, 1\\)"),
        (lambda: privacy.rho_from_epsilon(1.0, 1.0), "delta in \\(0, 1\\)"),
        (lambda: privacy.gaussian_rho(1.0, -1.0), "noise_std > 0"),
        (lambda: privacy.calibrate_gaussian(1.0, 1.0, 1e-5, 0), "compositions >= 1"),
        (lambda: privacy.calibrate_gaussian(1.0, float("nan"), 1e-5), "epsilon > 0"),
    ],
)
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()
