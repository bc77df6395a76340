"""Classic (Dwork-Roth) calibration of the Gaussian mechanism.

``sigma = Delta sqrt(2 ln(1.25/delta)) / eps`` gives (eps, delta)-DP for one release when eps < 1
(Dwork and Roth 2014, Thm A.1). Outside eps < 1 the theorem does not apply; the functions here
refuse such eps unless ``allow_large_epsilon=True`` says the caller knows.
"""

from __future__ import annotations

import numpy as np

from jfed._validation import check_nonnegative, check_open_unit, check_positive


def classic_gaussian_noise(
    sensitivity: float, epsilon: float, delta: float, allow_large_epsilon: bool = False
) -> float:
    """Noise std of the classic Gaussian mechanism for one (eps, delta)-DP release.

    Args:
      sensitivity: L2 sensitivity ``Delta`` (>= 0).
      epsilon: target eps, in (0, 1) for the theorem to hold.
      delta: target delta in (0, 1).
      allow_large_epsilon: compute the formula also for eps >= 1, where it is not a proof.

    Returns:
      ``Delta sqrt(2 ln(1.25/delta)) / eps``.
    """
    sensitivity = check_nonnegative("sensitivity", sensitivity)
    epsilon = check_positive("epsilon", epsilon)
    delta = check_open_unit("delta", delta)
    if epsilon >= 1.0 and not allow_large_epsilon:
        raise ValueError(
            "expected epsilon in (0, 1) for the classic Gaussian mechanism, "
            f"got epsilon={epsilon}; "
            "use zCDP or the analytic Gaussian calibration for larger eps"
        )
    return float(sensitivity * np.sqrt(2.0 * np.log(1.25 / delta)) / epsilon)
