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

The samples also cap what can be proven: even two inputs whose outputs never overlap (eps =
infinity) give at best TPR >= alpha^(1/n) and FPR <= 1 - alpha^(1/n) on n evaluation samples,
so no bound exceeds :func:`largest_detectable_epsilon` (about ``ln(n / ln(1/alpha))``). A claim at
or above it cannot be refuted by the samples: its verdict is "inconclusive", never "consistent".
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


def largest_detectable_epsilon(samples: int, confidence: float, delta: float = 0.0) -> float:
    """The largest lower bound :func:`audit_threshold` can return with ``samples`` evaluation
    samples per input at ``confidence``: its bound at perfect separation (every positive, no
    false positive). Claims at or above it cannot be refuted by that many samples."""
    alpha = (1.0 - confidence) / 2.0  # as audit_threshold splits it
    tpr_lower, _ = _one_sided(samples, samples, alpha)
    _, fpr_upper = _one_sided(0, samples, alpha)
    return _bound(tpr_lower, fpr_upper, delta)


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
    best = (-1.0, 0.0, True)
    for t in candidates:
        above0 = n0 - np.searchsorted(null, t, side="right")
        above1 = n1 - np.searchsorted(alternative, t, side="right")
        # reject D when the output is above t, or when it is at or below it
        for above, tp, fp in (
            (True, above1 / n1, above0 / n0),
            (False, 1 - above0 / n0, 1 - above1 / n1),
        ):
            # a pessimistic point estimate avoids picking thresholds with a handful of counts
            fp_pessimistic = max(fp, 3.0 / n0)
            estimate = _bound(tp, fp_pessimistic, delta)
            if estimate > best[0]:
                best = (estimate, float(t), above)
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
    _, threshold, above = _scan(null[:half0], alternative[:half1], delta, candidates)
    direction = "above" if above else "below"

    null_eval, alternative_eval = null[half0:], alternative[half1:]
    if above:
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


# ----------------------------------------------------------------------------- local randomizers
#
# Each audit below runs a local randomizer exactly as a method runs it, on the pair of inputs
# that is worst for its claim (the canaries), and bounds eps from below with
# :func:`audit_threshold`. Half of the samples choose the test, the other half bound it.

PURE_LDP = "pure eps-LDP"
APPROXIMATE_DP = "(eps, delta)-DP"
ANY_TWO_INPUTS = "any two inputs"
REPLACE_ONE = "replace-one"
ONE_REPORT = "one report"


@dataclass(frozen=True)
class RandomizerAudit:
    """An audit of one local randomizer against its claim.

    Attributes:
      randomizer: its name (``two-point``, ``randomized-response``, ``gaussian``, ``modulated``).
      claimed_epsilon, delta: the claim audited (delta 0 for pure eps).
      notion, adjacency, unit: what the claim means (e.g. pure eps-LDP, any two inputs, one
        report).
      canaries: the two inputs the samples come from.
      result: the :class:`AuditResult` (``epsilon_lower_bound`` holds with ``confidence``; its
        ``samples`` counts the evaluation half).
      samples: outputs drawn per input (half choose the test, half bound it).
    """

    randomizer: str
    claimed_epsilon: float
    delta: float
    notion: str
    adjacency: str
    unit: str
    canaries: str
    result: AuditResult
    samples: int

    @property
    def caught(self) -> bool:
        """Whether the samples prove more eps than claimed (the claim is false)."""
        return self.result.epsilon_lower_bound > self.claimed_epsilon

    @property
    def detectable_epsilon(self) -> float:
        """The largest eps these samples could prove (:func:`largest_detectable_epsilon`)."""
        return largest_detectable_epsilon(self.result.samples, self.result.confidence,
                                          self.delta)  # fmt: skip

    @property
    def verdict(self) -> str:
        """``VIOLATED`` (the samples prove more eps than claimed), ``consistent`` (they do not,
        and could have: the claim is below what they can detect) or ``inconclusive`` (the claim
        is at or above the largest eps the samples can detect: nothing was tested)."""
        if self.caught:
            return "VIOLATED"
        return "consistent" if self.claimed_epsilon < self.detectable_epsilon else "inconclusive"

    def record(self) -> dict:
        """A flat JSON-ready record."""
        return {
            "randomizer": self.randomizer,
            "claimed_epsilon": self.claimed_epsilon,
            "delta": self.delta,
            "notion": self.notion,
            "adjacency": self.adjacency,
            "unit": self.unit,
            "canaries": self.canaries,
            "epsilon_lower_bound": self.result.epsilon_lower_bound,
            "largest_detectable_epsilon": self.detectable_epsilon,
            "samples": self.samples,
            "confidence": self.result.confidence,
            "verdict": self.verdict,
        }


def _pair(randomize, key, samples: int, low, high) -> tuple[np.ndarray, np.ndarray]:
    """``samples`` outputs of ``randomize(key, inputs)`` on ``low`` and on ``high``: one vector
    of inputs, each entry its own draw."""
    import jax
    import jax.numpy as jnp

    key_low, key_high = jax.random.split(key)
    run = jax.jit(randomize)
    null = run(key_low, jnp.full(samples, low))
    alternative = run(key_high, jnp.full(samples, high))
    return np.asarray(null, np.float64), np.asarray(alternative, np.float64)


def audit_two_point(
    key, epsilon: float, samples: int, confidence: float = 0.95, run_epsilon: float | None = None
) -> RandomizerAudit:
    """Audit the two-point mechanism (:func:`jfed.privacy.two_point.perturb`, LDP-FL's, per
    weight) claimed at ``epsilon``, on the range ends ``-1`` and ``1`` (range ``[-1, 1]``).
    ``run_epsilon`` runs it at another eps than claimed (a negative control)."""
    from jfed.privacy import two_point

    used = epsilon if run_epsilon is None else run_epsilon
    null, alternative = _pair(
        lambda k, w: two_point.perturb(k, w, 0.0, 1.0, used), key, samples, -1.0, 1.0
    )
    return RandomizerAudit(
        "two-point", epsilon, 0.0, PURE_LDP, ANY_TWO_INPUTS, "one reported weight",
        "w = -1 and w = 1 in the range [-1, 1]",
        audit_threshold(null, alternative, 0.0, confidence), samples,
    )  # fmt: skip


def audit_randomized_response(
    key, epsilon: float, samples: int, confidence: float = 0.95, run_epsilon: float | None = None
) -> RandomizerAudit:
    """Audit randomized response as the estimation search runs it (from the f32 truthful
    probability, :func:`~jfed.privacy.randomized_response.keeps_true_bit_given_truthful`),
    claimed at ``epsilon``, on the bits 0 and 1."""
    import jax.numpy as jnp

    from jfed.privacy import randomized_response

    used = epsilon if run_epsilon is None else run_epsilon
    truthful = np.float32(randomized_response.truthful_probability(used))

    def respond(k, bits):
        keep = randomized_response.keeps_true_bit_given_truthful(k, truthful, bits.shape)
        return jnp.where(keep, bits, 1.0 - bits)

    null, alternative = _pair(respond, key, samples, 0.0, 1.0)
    return RandomizerAudit(
        "randomized-response", epsilon, 0.0, PURE_LDP, ANY_TWO_INPUTS, "one reported bit",
        "bit 0 and bit 1", audit_threshold(null, alternative, 0.0, confidence), samples,
    )  # fmt: skip


def audit_gaussian(
    key,
    epsilon: float,
    delta: float,
    samples: int,
    confidence: float = 0.95,
    noise_scale: float = 1.0,
) -> RandomizerAudit:
    """Audit the Gaussian mechanism calibrated (analytic, exact) to one (eps, delta)-DP release
    of a query of L2 sensitivity 1, on the query values 0 and 1. ``noise_scale`` multiplies the
    calibrated noise (below 1: a negative control)."""
    from jfed.privacy.mechanisms import GaussianMechanism

    calibrated = GaussianMechanism.calibrate(1.0, epsilon, delta)
    mechanism = GaussianMechanism(1.0, calibrated.noise_std * noise_scale)
    null, alternative = _pair(mechanism.randomize, key, samples, 0.0, 1.0)
    return RandomizerAudit(
        "gaussian", epsilon, delta, APPROXIMATE_DP, REPLACE_ONE, "one release",
        "query values 0 and 1 (L2 sensitivity 1)",
        audit_threshold(null, alternative, delta, confidence), samples,
    )  # fmt: skip
