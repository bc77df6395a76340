"""The anisotropic Gaussian mechanism (seed 000): noise shaped by per-coordinate sensitivity.

For a vector query whose coordinate l changes by at most ``Delta_l`` between neighbours,

    sigma_l^2 = 4 ln(2/delta) Delta_l ||Delta||_1 / eps^2

gives (eps, delta)-DP (the seed's form; docs/specs/accounting.md). Coordinates with small
sensitivity get
less noise than the isotropic mechanism would give them. An exact alternative: whitening by
``sigma_l`` makes the mechanism an isotropic Gaussian with L2 sensitivity ``||Delta / sigma||_2``,
which :func:`anisotropic_noise_multiplier` reports for the accountants.
"""

from __future__ import annotations

import numpy as np

from jfed._validation import UsageError, check_finite_array, check_open_unit, check_positive


def _sensitivities(sensitivities: np.ndarray) -> np.ndarray:
    sensitivities = check_finite_array("sensitivities", np.asarray(sensitivities, np.float64))
    if sensitivities.ndim != 1 or np.any(sensitivities < 0) or not np.any(sensitivities > 0):
        raise UsageError(
            "expected sensitivities: a 1-D array of non-negative values, not all zero, got "
            f"{sensitivities!r}"
        )
    return sensitivities


def anisotropic_noise(sensitivities: np.ndarray, epsilon: float, delta: float) -> np.ndarray:
    """Per-coordinate noise std ``sigma_l`` (``f64[d]``) of the seed's anisotropic mechanism."""
    sensitivities = _sensitivities(sensitivities)
    epsilon = check_positive("epsilon", epsilon)
    delta = check_open_unit("delta", delta)
    variance = 4.0 * np.log(2.0 / delta) * sensitivities * sensitivities.sum() / epsilon**2
    return np.sqrt(variance)


def anisotropic_epsilon(sensitivities: np.ndarray, noise_std: np.ndarray, delta: float) -> float:
    """The eps the seed's formula certifies for given ``sigma_l`` (the largest over coordinates)."""
    sensitivities = _sensitivities(sensitivities)
    noise_std = check_finite_array("noise_std", np.asarray(noise_std, np.float64))
    if noise_std.shape != sensitivities.shape or np.any(noise_std <= 0):
        raise UsageError("expected noise_std > 0 with the same shape as sensitivities")
    delta = check_open_unit("delta", delta)
    per_coordinate = np.sqrt(4.0 * np.log(2.0 / delta) * sensitivities * sensitivities.sum())
    return float(np.max(per_coordinate / noise_std))


def anisotropic_noise_multiplier(sensitivities: np.ndarray, noise_std: np.ndarray) -> float:
    """Noise multiplier of the whitened (isotropic) mechanism: ``1 / ||Delta / sigma||_2``."""
    sensitivities = _sensitivities(sensitivities)
    noise_std = np.asarray(noise_std, np.float64)
    return float(1.0 / np.linalg.norm(sensitivities / noise_std))
