"""Empirical privacy audit: a statistical lower bound on eps from samples of a mechanism.

Draw many outputs of the mechanism on two neighbouring inputs D and D'. Any test that rejects
"the input was D" when the output exceeds a threshold t has false-positive rate FPR = P_D(out > t)
and true-positive rate TPR = P_D'(out > t), and (eps, delta)-DP forces

    TPR <= e^eps FPR + delta     and     1 - FPR <= e^eps (1 - TPR) + delta.

So ``eps >= ln((TPR - delta) / FPR)`` and ``eps >= ln((1 - FPR - delta) / (1 - TPR))``. The audit
picks the threshold and direction on one half of the samples, then bounds TPR from below and FPR
from above on the other half with Clopper-Pearson intervals (Bonferroni over the two), so the
returned lower bound holds with probability at least ``confidence``. A correct mechanism never
yields a lower bound above its claimed eps (except with probability 1 - confidence); an
under-noised one does, given enough samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats


def clopper_pearson(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    """Exact two-sided (1 - alpha) binomial interval; each side holds with 1 - alpha/2."""
    low = 0.0 if successes == 0 else stats.beta.ppf(alpha / 2, successes, trials - successes + 1)
    high = (
        1.0
        if successes == trials
        else stats.beta.ppf(1 - alpha / 2, successes + 1, trials - successes)
    )
    return float(low), float(high)


def _one_sided(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    """(lower bound, upper bound) each holding with probability 1 - alpha."""
    return clopper_pearson(successes, trials, 2 * alpha)


@dataclass(frozen=True)
class AuditResult:
    """The outcome of an audit.

    Attributes:
      epsilon_lower_bound: eps the samples prove (with probability ``confidence``).
      threshold: the chosen threshold t.
      direction: ``"above"`` (reject D when out > t) or ``"below"``.
      tpr_lower, fpr_upper: the Clopper-Pearson bounds used.
      samples: samples per input in the evaluation half.
      confidence: the confidence level.
    """

    epsilon_lower_bound: float
    threshold: float
    direction: str
    tpr_lower: float
    fpr_upper: float
    samples: int
    confidence: float


def _bound(tpr: float, fpr: float, delta: float) -> float:
    if tpr - delta <= 0 or fpr <= 0:
        return 0.0 if tpr - delta <= 0 else math.inf
    return max(0.0, math.log((tpr - delta) / fpr))


def _scan(null: np.ndarray, alternative: np.ndarray, delta: float, candidates: np.ndarray):
    """Best (point-estimate) eps over thresholds and both directions, on the selection half."""
    null, alternative = np.sort(null), np.sort(alternative)
    n0, n1 = len(null), len(alternative)
    best = (-1.0, 0.0, "above")
    for t in candidates:
        above0 = n0 - np.searchsorted(null, t, side="right")
        above1 = n1 - np.searchsorted(alternative, t, side="right")
        for direction, tp, fp in (
            ("above", above1 / n1, above0 / n0),
            ("below", 1 - above0 / n0, 1 - above1 / n1),
        ):
            # a pessimistic point estimate avoids picking thresholds with a handful of counts
            fp_pessimistic = max(fp, 3.0 / n0)
            estimate = _bound(tp, fp_pessimistic, delta)
            if estimate > best[0]:
                best = (estimate, float(t), direction)
    return best


def audit_threshold(
    null_samples: np.ndarray,
    alternative_samples: np.ndarray,
    delta: float = 0.0,
    confidence: float = 0.95,
    n_thresholds: int = 200,
) -> AuditResult:
    """Lower-bound eps from scalar outputs on D (``null_samples``) and D' (``alternative_samples``).

    Args:
      null_samples: ``f[N]`` outputs of M(D); alternative_samples: ``f[N]`` outputs of M(D').
      delta: the delta of the claim being audited (0 for pure DP).
      confidence: probability that the returned bound is valid.
      n_thresholds: candidate thresholds (quantiles of the pooled selection half).
    """
    null = np.asarray(null_samples, np.float64).ravel()
    alternative = np.asarray(alternative_samples, np.float64).ravel()
    half0, half1 = len(null) // 2, len(alternative) // 2
    pooled = np.concatenate([null[:half0], alternative[:half1]])
    candidates = np.unique(np.quantile(pooled, np.linspace(0.0, 1.0, n_thresholds)))
    _, threshold, direction = _scan(null[:half0], alternative[:half1], delta, candidates)

    null_eval, alternative_eval = null[half0:], alternative[half1:]
    if direction == "above":
        positives = int(np.sum(alternative_eval > threshold))
        false_positives = int(np.sum(null_eval > threshold))
    else:
        positives = int(np.sum(null_eval <= threshold))
        false_positives = int(np.sum(alternative_eval <= threshold))
    alpha = (1.0 - confidence) / 2.0  # Bonferroni over the TPR and FPR bounds
    tpr_lower, _ = _one_sided(positives, len(alternative_eval), alpha)
    _, fpr_upper = _one_sided(false_positives, len(null_eval), alpha)
    return AuditResult(
        epsilon_lower_bound=_bound(tpr_lower, fpr_upper, delta),
        threshold=threshold,
        direction=direction,
        tpr_lower=tpr_lower,
        fpr_upper=fpr_upper,
        samples=len(null_eval),
        confidence=confidence,
    )
