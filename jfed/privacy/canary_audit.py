"""Host-side estimators of eps from canary scores (:mod:`jfed.privacy.canaries`), and the summary
a run record carries.

- :func:`one_run_lower_bound`: the one-run audit of Steinke, Nasr and Jagielski (2023). Each of m
  canaries was included with probability 1/2, independently; the auditor guesses "included" for
  the canaries whose score reaches a threshold. If the release is (eps, delta)-DP for every
  canary (add-or-remove adjacency), the number of right guesses among r guesses is dominated by
  Binomial(r, e^eps / (1 + e^eps)) up to a delta term, so a count that
  the binomial makes improbable refutes eps: the largest refuted eps is a lower bound that holds
  with probability ``confidence``. The p-value and the eps search are jax-privacy's
  (``jax_privacy.auditing.CanaryScoreAuditor.epsilon_one_run`` at a given threshold). The
  number of guesses r is chosen from the same scores, among a grid fixed in advance
  (:func:`guess_numbers`, about 2 log2(m) values), each tried at a Bonferroni share of the
  significance, so the best is valid whatever it is. jax-privacy's own default instead divides
  the significance by the number of thresholds on the scores' ROC hull, a set chosen from the
  scores themselves; with 1,000 canaries of a Gaussian release its bounds were about 10% higher
  than the fixed grid's. A union bound over all m possible r is valid too but, with the delta
  term ``2 m delta`` of the p-value, refuted nothing at delta = 1e-5.
- :func:`one_shot_estimate`: the one-shot estimate of Andrew et al. (2024). Every canary was
  included; the cosines of their directions with the released model delta are fitted by a normal
  law, and so are those of directions never inserted (or their law is taken as ``N(0, 1/d)``);
  eps is that of the pair of normals at delta (:func:`two_gaussians_epsilon`). An estimate, not
  a bound: for the Gaussian mechanism it tends to the true eps as d grows,
  for other mechanisms it is what a Gaussian mechanism with the same canary visibility would
  spend.

Both state eps for the same notion as the run's certificate: (eps, delta)-DP under add-or-remove
adjacency of one client (a canary is one client), at the run's delta.

References:
  T. Steinke, M. Nasr, M. Jagielski. Privacy auditing with one (1) training run. NeurIPS 2023.
  G. Andrew, P. Kairouz, S. Oh, A. Oprea, H. B. McMahan, V. Suriyakumar. One-shot empirical
  privacy estimation for federated learning. ICLR 2024. (Their code:
  google-research/federated, ``one_shot_epe/``.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import special, stats

from jfed._validation import UsageError, check_open_unit, check_positive
from jfed.privacy.gaussian import analytic_gaussian_epsilon

ONE_RUN = "one-run (Steinke, Nasr, Jagielski 2023)"
ONE_SHOT = "one-shot (Andrew et al. 2024)"
AUDIT_NOTION = "(eps, delta)-DP, add-or-remove adjacency of one client (a canary client)"
_BISECTION_STEPS = 200


@dataclass(frozen=True)
class AuditSummary:
    """What a run record says about its audit.

    Attributes:
      epsilon: the audit's eps at ``delta``: a lower bound on the true eps that holds with
        probability ``confidence`` (one-run), or an estimate (one-shot; ``confidence`` None).
      delta: the delta the eps is stated at (the run's).
      estimator: :data:`ONE_RUN` or :data:`ONE_SHOT`.
      canaries: canaries scored (for one-shot: inserted ones; directions never inserted are
        not counted).
      confidence: probability that a lower bound holds; None for an estimate.
    """

    epsilon: float
    delta: float
    estimator: str
    canaries: int
    confidence: float | None = None

    @property
    def is_lower_bound(self) -> bool:
        return self.confidence is not None

    def to_fields(self) -> dict:
        """The record's flat fields: ``audit_epsilon_lower`` (a bound, else None) or
        ``audit_epsilon_estimate`` (an estimate, else None), ``audit_confidence``,
        ``audit_estimator``, ``audit_canary_count``, ``audit_delta``, ``audit_notion``."""
        return {
            "audit_epsilon_lower": self.epsilon if self.is_lower_bound else None,
            "audit_epsilon_estimate": None if self.is_lower_bound else self.epsilon,
            "audit_confidence": self.confidence,
            "audit_estimator": self.estimator,
            "audit_canary_count": self.canaries,
            "audit_delta": self.delta,
            "audit_notion": AUDIT_NOTION,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> AuditSummary | None:
        """The audit a run record states (its ``audit_*`` fields, :meth:`to_fields`), or
        ``None`` where the run was not audited."""
        lower, estimate = record.get("audit_epsilon_lower"), record.get("audit_epsilon_estimate")
        stated = lower if lower is not None else estimate
        if stated is None:
            return None
        return cls(
            epsilon=float(stated),
            delta=float(record["audit_delta"]),
            estimator=str(record["audit_estimator"]),
            canaries=int(record["audit_canary_count"]),
            confidence=None if lower is None else float(record["audit_confidence"]),
        )

    def brief(self) -> str:
        """The audit's part of a run's summary line: ``audit eps >= 0.41 (95% one-run bound, 400
        canaries)``, or ``audit eps ~ 0.8 (one-shot estimate, ...)``."""
        name = self.estimator.split(" (")[0]
        if self.is_lower_bound:
            return (
                f"audit eps >= {self.epsilon:.3g} ({self.confidence:.0%} {name} bound, "
                f"{self.canaries} canaries)"
            )
        return f"audit eps ~ {self.epsilon:.3g} ({name} estimate, {self.canaries} canaries)"

    def describe(self) -> str:
        """One line for humans."""
        what = (
            f"lower bound at confidence {self.confidence:g}" if self.is_lower_bound else "estimate"
        )
        return (
            f"audit eps = {self.epsilon:.4g} at delta = {self.delta:.3g} ({what}; "
            f"{self.estimator}, {self.canaries} canaries; {AUDIT_NOTION})"
        )


def _scores(name: str, values) -> np.ndarray:
    array = np.asarray(values, np.float64)
    if array.ndim != 1 or array.size == 0:
        raise UsageError(f"expected {name} a non-empty 1-d array, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise UsageError(f"expected finite {name}, got {int(np.sum(~np.isfinite(array)))} not")
    return array


GUESSES_PER_OCTAVE = 2


def guess_numbers(canaries: int) -> np.ndarray:
    """``i64[k]``: the numbers of guesses r the one-run audit tries, fixed before the scores are
    seen: ``round(m 2^(-j/2))`` for j = 0, 1, ... down to 1 (about 2 log2(m) values; 20 for
    m = 1000), so that a Bonferroni share of the significance makes the best of them valid."""
    steps = np.arange(int(GUESSES_PER_OCTAVE * math.log2(canaries)) + 1)
    numbers = np.round(canaries * 2.0 ** (-steps / GUESSES_PER_OCTAVE)).astype(np.int64)
    return np.unique(numbers[numbers >= 1])


def one_run_lower_bound(scores, included, delta: float, confidence: float = 0.95) -> AuditSummary:
    """Steinke et al.'s one-run eps lower bound from m canaries' scores.

    Args:
      scores: ``f[m]`` each canary's score, higher meaning "more likely included" (an inner
        product of its direction with the release, :mod:`jfed.privacy.canaries`).
      included: ``bool[m]`` which canaries were included (each with probability 1/2, drawn
        independently of everything else: :func:`jfed.privacy.canaries.canaries_included`).
      delta: the delta of the claim audited, in (0, 1).
      confidence: the probability with which the returned bound holds, in (0, 1).

    Returns:
      An :class:`AuditSummary` whose ``epsilon`` is the largest eps that the guesses refute at
      significance ``1 - confidence`` (0 when they refute none).
    """
    from jax_privacy import auditing

    scores = _scores("scores", scores)
    included = np.asarray(included, bool)
    if included.shape != scores.shape:
        raise UsageError(
            f"expected included of the scores' shape {scores.shape}, got {included.shape}"
        )
    check_open_unit("delta", delta)
    significance = 1.0 - check_open_unit("confidence", confidence)
    m = scores.size
    if included.all() or not included.any():
        raise UsageError(f"expected both included and excluded canaries, got {included.sum()}/{m}")
    auditor = auditing.CanaryScoreAuditor(scores[included], scores[~included])
    numbers = guess_numbers(m)
    descending = np.sort(scores)[::-1]
    best = 0.0
    for guesses in numbers:
        # guess "included" for the top `guesses` scores; a Bonferroni share of the significance
        found = auditor.epsilon_one_run(
            significance / numbers.size,
            delta,
            threshold_strategy=auditing.Explicit(float(descending[guesses - 1])),
        )
        best = max(best, float(found))
    return AuditSummary(float(best), float(delta), ONE_RUN, int(m), float(confidence))


def _log_mass(low: float, high: float, mean: float, std: float) -> float:
    """``log P(low < X < high)`` for ``X ~ N(mean, std^2)`` (either end may be infinite),
    computed from the tail the interval lies in (no cancellation of two masses near 1)."""
    if low >= high:
        return -math.inf
    a, b = (low - mean) / std, (high - mean) / std
    if a > 0:  # upper tail: sf(a) - sf(b)
        upper, lower = stats.norm.logsf(a), stats.norm.logsf(b)
    else:  # cdf(b) - cdf(a)
        upper, lower = stats.norm.logcdf(b), stats.norm.logcdf(a)
    if lower == -math.inf:
        return float(upper)
    return float(upper + np.log1p(-np.exp(min(lower - upper, 0.0))))


def _log_hockey_stick(
    epsilon: float, mean_p: float, std_p: float, mean_q: float, std_q: float
) -> float:
    """``log sup_S [P(S) - e^eps Q(S)]`` for ``P = N(mean_p, std_p^2)``, ``Q = N(mean_q,
    std_q^2)``: the optimal S is where the privacy loss ``log p/q = a y^2 + b y + c`` exceeds
    eps, an interval or its complement (a half-line when the variances are equal)."""
    a = 0.5 * (std_q**-2 - std_p**-2)
    b = mean_p / std_p**2 - mean_q / std_q**2
    c = 0.5 * ((mean_q / std_q) ** 2 - (mean_p / std_p) ** 2) + math.log(std_q / std_p)
    if a == 0.0:
        if b == 0.0:
            return -math.inf  # P = Q
        cut = (epsilon - c) / b
        regions = [(cut, math.inf)] if b > 0 else [(-math.inf, cut)]
    else:
        discriminant = b * b - 4.0 * a * (c - epsilon)
        if discriminant <= 0:
            # the loss stays on one side of eps: above everywhere (a > 0) gives P - e^eps Q < 0
            return -math.inf
        roots = sorted(((-b - math.sqrt(discriminant)) / (2 * a),
                        (-b + math.sqrt(discriminant)) / (2 * a)))  # fmt: skip
        regions = [(-math.inf, roots[0]), (roots[1], math.inf)] if a > 0 else [(roots[0], roots[1])]
    log_p = special.logsumexp([_log_mass(lo, hi, mean_p, std_p) for lo, hi in regions])
    log_q = special.logsumexp([_log_mass(lo, hi, mean_q, std_q) for lo, hi in regions])
    gap = epsilon + log_q - log_p
    if not gap < 0:
        return -math.inf
    return float(log_p + np.log1p(-np.exp(gap)))


def two_gaussians_epsilon(
    null_mean: float, null_std: float, mean: float, std: float, delta: float
) -> float:
    """The smallest eps at which the pair ``N(null_mean, null_std^2)``, ``N(mean, std^2)`` is
    (eps, delta)-indistinguishable in both directions (exact: the hockey-stick divergence of two
    normals of any variances, bisected in eps).

    With equal standard deviations this is the Gaussian mechanism's eps for sensitivity
    ``|mean - null_mean|`` and noise ``std`` (:func:`jfed.privacy.gaussian.
    analytic_gaussian_epsilon`, which it then calls).
    """
    null_std, std = check_positive("null_std", null_std), check_positive("std", std)
    log_delta = math.log(check_open_unit("delta", delta))
    if null_std == std:
        if mean == null_mean:
            return 0.0
        return float(analytic_gaussian_epsilon(abs(mean - null_mean), std, delta))

    def log_delta_at(epsilon: float) -> float:
        return max(
            _log_hockey_stick(epsilon, null_mean, null_std, mean, std),
            _log_hockey_stick(epsilon, mean, std, null_mean, null_std),
        )

    if log_delta_at(0.0) <= log_delta:
        return 0.0
    high = 1.0
    while log_delta_at(high) > log_delta:
        high *= 2.0
    low = 0.0
    for _ in range(_BISECTION_STEPS):
        middle = 0.5 * (low + high)
        low, high = (low, middle) if log_delta_at(middle) <= log_delta else (middle, high)
        if high - low <= 1e-12 * high:
            break
    return high


def null_cosine_std(dimension: int) -> float:
    """``1 / sqrt(d)``: the standard deviation of the cosine of a direction uniform on the unit
    sphere of R^d with any fixed vector (mean 0; within 1e-3 of normal in its cdf from d = 1000,
    the law Andrew et al. use there)."""
    if int(dimension) != dimension or dimension < 1:
        raise UsageError(f"expected dimension a positive integer, got dimension={dimension}")
    return float(1.0 / math.sqrt(dimension))


MIN_ANALYTIC_DIMENSION = 1000


def one_shot_estimate(
    observed, delta: float, *, dimension: int | None = None, unobserved=None
) -> AuditSummary:
    """Andrew et al.'s one-shot eps estimate from the inserted canaries' cosines.

    Args:
      observed: ``f[m]`` cosines of the inserted canaries' directions with the release (the
        final model delta, or each canary's maximum over the rounds' deltas).
      delta: the delta to state eps at, in (0, 1).
      dimension: d, the model's parameter count: the null law is ``N(0, 1/d)`` (the cosine of
        an independent uniform direction; for the final model delta only, and d >= 1000).
      unobserved: ``f[k]`` cosines of directions never inserted, scored like ``observed``: the
        null is the normal fitted to them (needed for the maximum over rounds, whose null is
        not ``N(0, 1/d)``). Give exactly one of ``dimension`` and ``unobserved``.

    Returns:
      An :class:`AuditSummary` with the estimate (``confidence`` None) and m canaries.
    """
    observed = _scores("observed", observed)
    check_open_unit("delta", delta)
    if observed.size < 2:
        raise UsageError(f"expected at least 2 observed cosines, got {observed.size}")
    if (dimension is None) == (unobserved is None):
        raise UsageError("expected exactly one of dimension= and unobserved=")
    if unobserved is not None:
        unobserved = _scores("unobserved", unobserved)
        if unobserved.size < 2:
            raise UsageError(f"expected at least 2 unobserved cosines, got {unobserved.size}")
        null_mean, null_std = float(np.mean(unobserved)), float(np.std(unobserved, ddof=1))
    else:
        assert dimension is not None  # exactly one of the two was given
        if int(dimension) < MIN_ANALYTIC_DIMENSION:
            raise UsageError(
                f"expected dimension >= {MIN_ANALYTIC_DIMENSION} for the normal null law, got "
                f"dimension={dimension}: score unobserved canaries and pass unobserved="
            )
        null_mean, null_std = 0.0, null_cosine_std(dimension)
    epsilon = two_gaussians_epsilon(
        null_mean, null_std, float(np.mean(observed)), float(np.std(observed, ddof=1)), delta
    )
    return AuditSummary(float(epsilon), float(delta), ONE_SHOT, int(observed.size), None)


__all__ = [
    "AUDIT_NOTION",
    "GUESSES_PER_OCTAVE",
    "MIN_ANALYTIC_DIMENSION",
    "ONE_RUN",
    "ONE_SHOT",
    "AuditSummary",
    "guess_numbers",
    "null_cosine_std",
    "one_run_lower_bound",
    "one_shot_estimate",
    "two_gaussians_epsilon",
]
