"""Rates from Monte Carlo errors: log-log (or log-linear) slopes with confidence intervals.

Each point's Monte Carlo standard error gives the variance of its log, ``(se / value)^2`` (delta
method), so the slope is a weighted least-squares fit whose standard error comes from those known
variances, not from the scatter about the line; ``chi2`` measures that scatter against them (about
the number of points minus 2 when a straight line fits).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.stats import norm


class SlopeFit(NamedTuple):
    """``log y = intercept + slope * log x`` (or ``* x`` for a log-linear fit)."""

    slope: float
    slope_se: float
    ci_low: float
    ci_high: float
    intercept: float
    chi2: float
    points: int


def fit_slope(
    x: np.ndarray, value: np.ndarray, value_se: np.ndarray, log_x: bool = True, level: float = 0.95
) -> SlopeFit:
    """Weighted least-squares slope of ``log value`` against ``log x`` (``x`` if not ``log_x``).

    Args:
      x: ``f64[k]`` the parameter (k >= 2 distinct values).
      value: ``f64[k]`` positive Monte Carlo estimates (e.g. MSE).
      value_se: ``f64[k]`` their standard errors (> 0).
      level: confidence level of the interval (normal quantile).
    """
    x, value, value_se = (np.asarray(a, np.float64) for a in (x, value, value_se))
    if x.shape != value.shape or x.shape != value_se.shape or x.ndim != 1:
        raise ValueError("expected x, value and value_se: 1-D arrays of one length")
    if len(np.unique(x)) < 2:
        raise ValueError("expected at least two distinct x values to fit a slope")
    if np.any(value <= 0) or np.any(value_se <= 0):
        raise ValueError(
            "expected positive values and standard errors (a non-positive MSE excess means the "
            "term fitted does not dominate there)"
        )
    u = np.log(x) if log_x else x
    y = np.log(value)
    weight = (value / value_se) ** 2  # 1 / Var(log value)
    u_mean = np.sum(weight * u) / np.sum(weight)
    y_mean = np.sum(weight * y) / np.sum(weight)
    spread = np.sum(weight * (u - u_mean) ** 2)
    slope = float(np.sum(weight * (u - u_mean) * (y - y_mean)) / spread)
    intercept = float(y_mean - slope * u_mean)
    slope_se = float(np.sqrt(1.0 / spread))
    z = float(norm.ppf(0.5 + level / 2.0))
    chi2 = float(np.sum(weight * (y - intercept - slope * u) ** 2))
    return SlopeFit(slope, slope_se, slope - z * slope_se, slope + z * slope_se, intercept, chi2,
                    len(x))  # fmt: skip
