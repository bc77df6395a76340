"""Zero-concentrated DP (zCDP) of the Gaussian mechanism: cost, composition, calibration.

Host-side float64. Formulas (Bun and Steinke 2016), restated in docs/specs/accounting.md:

- the Gaussian mechanism with L2 sensitivity ``Delta`` and noise ``sigma`` is rho-zCDP with
  ``rho = Delta^2 / (2 sigma^2)``;
- rho-zCDP mechanisms compose by adding their rho;
- rho-zCDP implies (eps, delta)-DP for every delta in (0, 1) with
  ``eps = rho + 2 sqrt(rho ln(1/delta))``;
- inverting that conversion, a target (eps, delta) allows
  ``rho = (sqrt(ln(1/delta) + eps) - sqrt(ln(1/delta)))^2``.

Every function accepts scalars or numpy arrays (broadcast), so a whole eps grid calibrates at once.
"""

from __future__ import annotations

import numpy as np

from jfed._validation import UsageError, check_nonnegative, check_open_unit, check_positive

ArrayLike = float | np.ndarray


def _check_all(check, name: str, values: ArrayLike) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    for value in np.ravel(array):
        check(name, value)
    return array


def gaussian_rho(sensitivity: ArrayLike, noise_std: ArrayLike) -> np.ndarray:
    """rho of one Gaussian release: ``Delta^2 / (2 sigma^2)``.

    Args:
      sensitivity: L2 sensitivity ``Delta`` of the released vector (>= 0).
      noise_std: standard deviation ``sigma`` of the isotropic Gaussian noise (> 0).

    Returns:
      rho (float64, broadcast shape of the inputs).
    """
    sensitivity = _check_all(check_nonnegative, "sensitivity", sensitivity)
    noise_std = _check_all(check_positive, "noise_std", noise_std)
    return sensitivity**2 / (2.0 * noise_std**2)


def epsilon_from_rho(rho: ArrayLike, delta: float) -> np.ndarray:
    """(eps, delta)-DP implied by rho-zCDP: ``eps = rho + 2 sqrt(rho ln(1/delta))``."""
    rho = _check_all(check_nonnegative, "rho", rho)
    log_inv_delta = np.log(1.0 / check_open_unit("delta", delta))
    return rho + 2.0 * np.sqrt(rho * log_inv_delta)


def rho_from_epsilon(epsilon: ArrayLike, delta: float) -> np.ndarray:
    """Largest rho whose zCDP-to-DP conversion gives at most ``epsilon`` at ``delta``.

    Written as ``eps^2 / (sqrt(a + eps) + sqrt(a))^2`` with ``a = ln(1/delta)``, which equals
    ``(sqrt(a + eps) - sqrt(a))^2`` without the cancellation at small eps.
    """
    epsilon = _check_all(check_positive, "epsilon", epsilon)
    log_inv_delta = np.log(1.0 / check_open_unit("delta", delta))
    return epsilon**2 / (np.sqrt(log_inv_delta + epsilon) + np.sqrt(log_inv_delta)) ** 2


def gaussian_noise_for_rho(sensitivity: ArrayLike, rho: ArrayLike) -> np.ndarray:
    """Noise ``sigma = Delta / sqrt(2 rho)`` that makes one Gaussian release rho-zCDP."""
    sensitivity = _check_all(check_nonnegative, "sensitivity", sensitivity)
    rho = _check_all(check_positive, "rho", rho)
    return sensitivity / np.sqrt(2.0 * rho)


def calibrate_gaussian(
    sensitivity: ArrayLike, epsilon: ArrayLike, delta: float, compositions: int = 1
) -> np.ndarray:
    """Noise per release so that ``compositions`` Gaussian releases are (eps, delta)-DP via zCDP.

    ``rho_total = rho_from_epsilon(eps, delta)`` is split evenly over the releases, so each gets
    ``rho_total / T`` and ``sigma = Delta sqrt(T / (2 rho_total))``.

    Args:
      sensitivity: L2 sensitivity of one release.
      epsilon: target eps (> 0); an array calibrates a grid at once.
      delta: target delta in (0, 1).
      compositions: number T >= 1 of releases composed (e.g. rounds, every client every round).

    Returns:
      sigma per release, float64, broadcast shape of ``sensitivity`` and ``epsilon``.
    """
    if int(compositions) != compositions or compositions < 1:
        raise UsageError(f"expected compositions >= 1 (integer), got compositions={compositions}")
    rho_total = rho_from_epsilon(epsilon, delta)
    return gaussian_noise_for_rho(sensitivity, rho_total / compositions)


def epsilon_of_gaussian(
    sensitivity: ArrayLike, noise_std: ArrayLike, delta: float, compositions: int = 1
) -> np.ndarray:
    """eps (at ``delta``) spent by ``compositions`` Gaussian releases, accounted in zCDP."""
    if int(compositions) != compositions or compositions < 1:
        raise UsageError(f"expected compositions >= 1 (integer), got compositions={compositions}")
    return epsilon_from_rho(compositions * gaussian_rho(sensitivity, noise_std), delta)
