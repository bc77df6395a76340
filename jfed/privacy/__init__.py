"""Privacy layer: mechanisms, calibration and accounting, host-side float64.

Knows nothing about clients or models: algorithms compute their sensitivity and ask this layer
for the noise (or for the eps a noise spends). Every reported eps names its accountant.

- :mod:`~jfed.privacy.zcdp`, :mod:`~jfed.privacy.gaussian` (classic and exact analytic),
  :mod:`~jfed.privacy.laplace`, :mod:`~jfed.privacy.anisotropic`, :mod:`~jfed.privacy.two_point`:
  closed forms, both ways.
- :mod:`~jfed.privacy.mechanisms`: mechanism objects that sample (jittable) and describe
  themselves (``dp_event``).
- :mod:`~jfed.privacy.accountants`: zCDP, advanced composition, RDP / PLD (dp-accounting),
  parallel composition, with one interface.
- :mod:`~jfed.privacy.calibration`: noise for a target eps, one or a grid.
- :mod:`~jfed.privacy.shuffle`, :mod:`~jfed.privacy.last_iterate`: amplification by shuffling and
  the last-iterate accountant of projected noisy SGD.
- :mod:`~jfed.privacy.audit`: empirical lower bounds on eps.
"""

from jfed.privacy.accountants import (
    AdvancedCompositionAccountant,
    ApproximateDpEvent,
    DpAccountingAccountant,
    ParallelComposition,
    ZcdpAccountant,
    epsilon_of,
    make_accountant,
    subsampled_gaussian_event,
)
from jfed.privacy.audit import AuditResult, audit_threshold
from jfed.privacy.calibration import (
    calibrate_noise_multiplier,
    calibrate_noise_multipliers,
    epsilon_for_noise,
)
from jfed.privacy.clipping import clip_per_example, clip_to_ball
from jfed.privacy.gaussian import (
    analytic_gaussian_delta,
    analytic_gaussian_epsilon,
    analytic_gaussian_noise,
    classic_gaussian_epsilon,
    classic_gaussian_noise,
    hockey_stick,
)
from jfed.privacy.guarantee import PrivacyGuarantee
from jfed.privacy.last_iterate import LastIterateSetting, last_iterate_delta, last_iterate_epsilon
from jfed.privacy.mechanisms import (
    AnisotropicGaussianMechanism,
    GaussianMechanism,
    LaplaceMechanism,
    TwoPointMechanism,
)
from jfed.privacy.shuffle import shuffle_epsilon
from jfed.privacy.zcdp import (
    calibrate_gaussian,
    epsilon_from_rho,
    epsilon_of_gaussian,
    gaussian_noise_for_rho,
    gaussian_rho,
    rho_from_epsilon,
)

__all__ = [
    "AdvancedCompositionAccountant",
    "AnisotropicGaussianMechanism",
    "ApproximateDpEvent",
    "AuditResult",
    "DpAccountingAccountant",
    "GaussianMechanism",
    "LaplaceMechanism",
    "LastIterateSetting",
    "ParallelComposition",
    "PrivacyGuarantee",
    "TwoPointMechanism",
    "ZcdpAccountant",
    "analytic_gaussian_delta",
    "analytic_gaussian_epsilon",
    "analytic_gaussian_noise",
    "audit_threshold",
    "calibrate_gaussian",
    "calibrate_noise_multiplier",
    "calibrate_noise_multipliers",
    "classic_gaussian_epsilon",
    "classic_gaussian_noise",
    "clip_per_example",
    "clip_to_ball",
    "epsilon_for_noise",
    "epsilon_from_rho",
    "epsilon_of",
    "epsilon_of_gaussian",
    "gaussian_noise_for_rho",
    "gaussian_rho",
    "hockey_stick",
    "last_iterate_delta",
    "last_iterate_epsilon",
    "make_accountant",
    "rho_from_epsilon",
    "shuffle_epsilon",
    "subsampled_gaussian_event",
]
