"""Privacy layer: noise calibration and accounting, host-side float64.

Knows nothing about clients or models: algorithms compute their sensitivity and ask this layer
for the noise (or for the eps a noise spends).
"""

from jfed.privacy.gaussian import classic_gaussian_noise
from jfed.privacy.guarantee import PrivacyGuarantee
from jfed.privacy.zcdp import (
    calibrate_gaussian,
    epsilon_from_rho,
    epsilon_of_gaussian,
    gaussian_noise_for_rho,
    gaussian_rho,
    rho_from_epsilon,
)

__all__ = [
    "PrivacyGuarantee",
    "calibrate_gaussian",
    "classic_gaussian_noise",
    "epsilon_from_rho",
    "epsilon_of_gaussian",
    "gaussian_noise_for_rho",
    "gaussian_rho",
    "rho_from_epsilon",
]
