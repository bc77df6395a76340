"""The Gaussian mechanism: classic (Dwork-Roth) and exact analytic (Balle-Wang) calibration.

- Classic: ``sigma = Delta sqrt(2 ln(1.25/delta)) / eps`` gives (eps, delta)-DP for eps < 1
  (Dwork and Roth 2014, Thm A.1). Outside eps < 1 the theorem does not apply; the functions refuse
  such eps unless ``allow_large_epsilon=True``.
- Analytic (Balle and Wang 2018): the mechanism with ratio ``r = Delta / sigma`` is (eps, delta)-DP
  iff ``delta >= theta_eps(r)``, the hockey-stick divergence ``E_{e^eps}(N(r, 1) || N(0, 1))``:

      theta_eps(r) = Q(eps/r - r/2) - e^eps Q(eps/r + r/2),    Q(t) = P(N(0, 1) > t).

  It is computed in log space, ``log theta = log Q_1 + log(1 - exp(eps + log Q_2 - log Q_1))``
  with ``log Q = scipy.special.log_ndtr(-t)``, so it stays accurate for large eps and for delta far
  below 1e-12. Calibration inverts it by bisection (vectorised: a whole eps grid at once).

Host-side float64; scalars or numpy arrays (broadcast).
"""

from __future__ import annotations

import numpy as np
from scipy.special import log_ndtr

from jfed._validation import UsageError, check_nonnegative, check_open_unit, check_positive

ArrayLike = float | np.ndarray
_BISECTION_STEPS = 200


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
        raise UsageError(
            "expected epsilon in (0, 1) for the classic Gaussian mechanism, "
            f"got epsilon={epsilon}; use zCDP or the analytic Gaussian calibration for larger eps"
        )
    return float(sensitivity * np.sqrt(2.0 * np.log(1.25 / delta)) / epsilon)


def classic_gaussian_epsilon(sensitivity: float, noise_std: float, delta: float) -> float:
    """The eps of the classic calibration for a given noise (its inverse); valid when < 1."""
    sensitivity = check_nonnegative("sensitivity", sensitivity)
    noise_std = check_positive("noise_std", noise_std)
    delta = check_open_unit("delta", delta)
    epsilon = float(sensitivity * np.sqrt(2.0 * np.log(1.25 / delta)) / noise_std)
    if epsilon >= 1.0:
        raise UsageError(
            f"the classic Gaussian bound gives epsilon={epsilon:.4g} >= 1, outside its validity "
            "range (eps < 1); use the analytic Gaussian or zCDP accountant"
        )
    return epsilon


def log_hockey_stick(epsilon: ArrayLike, ratio: ArrayLike) -> np.ndarray:
    """``log theta_eps(r)``: log of the exact delta of the Gaussian mechanism at eps.

    Args:
      epsilon: eps >= 0.
      ratio: ``r = Delta / sigma`` > 0.

    Returns:
      float64 array (broadcast); ``-inf`` where delta underflows to exactly 0.
    """
    epsilon = np.asarray(epsilon, np.float64)
    ratio = np.asarray(ratio, np.float64)
    log_q1 = log_ndtr(ratio / 2.0 - epsilon / ratio)
    log_q2 = log_ndtr(-ratio / 2.0 - epsilon / ratio)
    gap = np.minimum(epsilon + log_q2 - log_q1, 0.0)  # <= 0 in exact arithmetic
    with np.errstate(divide="ignore"):
        return log_q1 + np.log(-np.expm1(gap))


def hockey_stick(epsilon: ArrayLike, ratio: ArrayLike) -> np.ndarray:
    """``theta_eps(r) = Q(eps/r - r/2) - e^eps Q(eps/r + r/2)`` (see the module docstring)."""
    return np.exp(log_hockey_stick(epsilon, ratio))


def analytic_gaussian_delta(
    sensitivity: ArrayLike, noise_std: ArrayLike, epsilon: ArrayLike
) -> np.ndarray:
    """Exact smallest delta for which one Gaussian release is (eps, delta)-DP."""
    return hockey_stick(epsilon, np.asarray(sensitivity) / np.asarray(noise_std))


def _bisect(function, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Vectorised bisection for a function that is True at ``high`` and False at ``low``
    (monotone); returns the ``high`` end, so the answer always satisfies the condition."""
    for _ in range(_BISECTION_STEPS):
        middle = 0.5 * (low + high)
        ok = function(middle)
        high = np.where(ok, middle, high)
        low = np.where(ok, low, middle)
        if np.all(high - low <= 1e-13 * np.abs(high)):
            break
    return high


def analytic_gaussian_noise(sensitivity: ArrayLike, epsilon: ArrayLike, delta: float) -> np.ndarray:
    """Smallest sigma with ``theta_eps(Delta / sigma) <= delta`` (exact calibration).

    Works in log space (``log sigma`` bisected, ``log delta`` compared), so eps up to hundreds and
    delta down to 1e-300 are handled. Returns float64 (broadcast of ``sensitivity``, ``epsilon``).
    """
    sensitivity = np.asarray(sensitivity, np.float64)
    epsilon = np.asarray(epsilon, np.float64)
    for value in np.ravel(sensitivity):
        check_positive("sensitivity", value)
    for value in np.ravel(epsilon):
        check_positive("epsilon", value)
    log_delta = np.log(check_open_unit("delta", delta))
    shape = np.broadcast(sensitivity, epsilon).shape
    sensitivity, epsilon = np.broadcast_to(sensitivity, shape), np.broadcast_to(epsilon, shape)

    def private_enough(log_sigma):
        return log_hockey_stick(epsilon, sensitivity / np.exp(log_sigma)) <= log_delta

    # ratio r -> 0 gives delta -> 0 and r -> inf gives delta -> 1: bracket sigma widely.
    low = np.log(sensitivity) - 60.0
    high = np.log(sensitivity) + 60.0
    return np.exp(_bisect(private_enough, low, high))


def analytic_gaussian_epsilon(
    sensitivity: ArrayLike, noise_std: ArrayLike, delta: float
) -> np.ndarray:
    """Smallest eps with ``theta_eps(Delta / sigma) <= delta`` (0 if already (0, delta)-DP)."""
    ratio = np.asarray(sensitivity, np.float64) / np.asarray(noise_std, np.float64)
    for value in np.ravel(ratio):
        check_positive("sensitivity / noise_std", value)
    log_delta = np.log(check_open_unit("delta", delta))

    def private_enough(epsilon):
        return log_hockey_stick(epsilon, ratio) <= log_delta

    # theta_eps(r) <= exp(-eps) Q-tail bound: eps = r^2/2 + r sqrt(2 ln(1/delta)) + 1 suffices.
    high = ratio**2 / 2.0 + ratio * np.sqrt(2.0 * -log_delta) + 1.0
    result = _bisect(private_enough, np.zeros_like(ratio), high)
    return np.where(private_enough(np.zeros_like(ratio)), 0.0, result)
