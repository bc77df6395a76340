"""Accountants with one interface: compose events, then ask eps for a delta or delta for an eps.

Events are ``dp_accounting`` ``DpEvent`` objects (what a mechanism's ``dp_event()`` returns), plus
:class:`ApproximateDpEvent` for a mechanism known only by its (eps, delta).

===================  ==========================================================================
accountant           what it composes (and how)
===================  ==========================================================================
``zcdp``             Gaussian (rho = 1/(2 m^2) for noise multiplier m), zCDP, Laplace and
                     randomized response (pure eps -> eps^2/2-zCDP); sums rho; converts once
``advanced``         (eps_i, delta_i) events (pure events have delta_i = 0) by the advanced
                     composition theorem (Dwork-Roth Thm 3.20, heterogeneous form), never worse
                     than basic composition
``rdp`` / ``pld``    everything ``dp_accounting``'s RDP / PLD accountants support, including the
                     Poisson- and without-replacement-subsampled Gaussian
``parallel``         disjoint data: the maximum over its branches, not the sum
===================  ==========================================================================
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import attr
import dp_accounting
import numpy as np
from dp_accounting import dp_event as events
from dp_accounting.privacy_accountant import NeighboringRelation

from jfed._validation import check_nonnegative, check_open_unit, check_positive
from jfed.privacy import zcdp

ACCOUNTANTS = ("zcdp", "advanced", "rdp", "pld")
NEIGHBORING = {
    "add-or-remove": NeighboringRelation.ADD_OR_REMOVE_ONE,
    "replace-one": NeighboringRelation.REPLACE_ONE,
}


@attr.s(frozen=True, slots=True, auto_attribs=True)
class ApproximateDpEvent(events.DpEvent):
    """A mechanism known only to be (epsilon, delta)-DP."""

    epsilon: float
    delta: float


@attr.s(frozen=True, slots=True, auto_attribs=True)
class ParallelDpEvent(events.DpEvent):
    """Releases on disjoint data: each protected unit takes part in one branch only, so the
    guarantee is the worst branch's, not their sum (dp-accounting has no such event)."""

    branches: tuple


class Accountant(Protocol):
    """What every accountant answers."""

    name: str

    def compose(self, event: events.DpEvent, count: int = 1) -> Accountant: ...

    def epsilon(self, delta: float) -> float: ...

    def delta(self, epsilon: float) -> float: ...


def _unsupported(accountant: str, event: events.DpEvent) -> ValueError:
    return ValueError(f"the {accountant} accountant cannot compose {type(event).__name__}: {event}")


def _check_count(count: int) -> int:
    if int(count) != count or count < 0:
        raise ValueError(f"expected count >= 0 (integer), got count={count}")
    return int(count)


class ZcdpAccountant:
    """Sums zCDP rho; eps(delta) = rho + 2 sqrt(rho ln(1/delta)). No subsampling."""

    name = "zcdp"

    def __init__(self) -> None:
        self.rho = 0.0

    def _rho(self, event: events.DpEvent) -> float:
        if isinstance(event, events.NoOpDpEvent | events.NonPrivateDpEvent):
            return 0.0 if isinstance(event, events.NoOpDpEvent) else math.inf
        if isinstance(event, events.GaussianDpEvent):
            return 0.5 / event.noise_multiplier**2
        if isinstance(event, events.ZCDpEvent):
            return event.rho
        if isinstance(event, events.LaplaceDpEvent):
            return 0.5 / event.noise_multiplier**2  # pure eps = 1/m  ->  eps^2 / 2
        if isinstance(event, events.RandomizedResponseDpEvent):
            p, k = event.noise_parameter, event.num_buckets
            epsilon = math.log((1 - p + p / k) / (p / k))
            return 0.5 * epsilon**2
        if isinstance(event, events.SelfComposedDpEvent):
            return event.count * self._rho(event.event)
        if isinstance(event, events.ComposedDpEvent):
            return sum(self._rho(e) for e in event.events)
        raise _unsupported(self.name, event)

    def compose(self, event: events.DpEvent, count: int = 1) -> ZcdpAccountant:
        self.rho += _check_count(count) * self._rho(event)
        return self

    def epsilon(self, delta: float) -> float:
        return float(zcdp.epsilon_from_rho(self.rho, delta))

    def delta(self, epsilon: float) -> float:
        """Smallest delta with rho + 2 sqrt(rho ln(1/delta)) <= eps."""
        epsilon = check_nonnegative("epsilon", epsilon)
        if self.rho == 0:
            return 0.0
        if epsilon <= self.rho:
            return 1.0
        return float(math.exp(-((epsilon - self.rho) ** 2) / (4.0 * self.rho)))


class AdvancedCompositionAccountant:
    """Composes (eps_i, delta_i) mechanisms with the advanced composition theorem.

    For any delta' > 0 the composition is (eps, sum delta_i + delta')-DP with
    ``eps = sqrt(2 ln(1/delta') sum eps_i^2) + sum eps_i (e^{eps_i} - 1)`` (Dwork and Roth 2014,
    Thm 3.20, in the heterogeneous form of Kairouz et al.), and also with ``eps = sum eps_i``
    (basic composition); the smaller is reported.
    """

    name = "advanced"

    def __init__(self) -> None:
        self.parts: list[tuple[float, float, int]] = []

    def _pairs(self, event: events.DpEvent) -> list[tuple[float, float, int]]:
        if isinstance(event, ApproximateDpEvent):
            return [(event.epsilon, event.delta, 1)]
        if isinstance(event, events.LaplaceDpEvent):
            return [(1.0 / event.noise_multiplier, 0.0, 1)]
        if isinstance(event, events.RandomizedResponseDpEvent):
            p, k = event.noise_parameter, event.num_buckets
            return [(math.log((1 - p + p / k) / (p / k)), 0.0, 1)]
        if isinstance(event, events.NoOpDpEvent):
            return []
        if isinstance(event, events.SelfComposedDpEvent):
            return [(e, d, c * event.count) for e, d, c in self._pairs(event.event)]
        if isinstance(event, events.ComposedDpEvent):
            return [pair for e in event.events for pair in self._pairs(e)]
        raise _unsupported(self.name, event)

    def compose(self, event: events.DpEvent, count: int = 1) -> AdvancedCompositionAccountant:
        count = _check_count(count)
        self.parts += [(e, d, c * count) for e, d, c in self._pairs(event)]
        return self

    def _sums(self) -> tuple[float, float, float, float]:
        eps = np.array([p[0] for p in self.parts])
        dlt = np.array([p[1] for p in self.parts])
        cnt = np.array([p[2] for p in self.parts])
        return (
            float(np.sum(cnt * eps)),
            float(np.sum(cnt * eps**2)),
            float(np.sum(cnt * eps * np.expm1(eps))),
            float(np.sum(cnt * dlt)),
        )

    def epsilon(self, delta: float) -> float:
        delta = check_open_unit("delta", delta)
        total, squares, drift, delta_sum = self._sums()
        slack = delta - delta_sum
        if slack <= 0:
            raise ValueError(
                f"expected delta > sum of the composed deltas ({delta_sum:.3g}), got delta={delta}"
            )
        return min(total, math.sqrt(2.0 * math.log(1.0 / slack) * squares) + drift)

    def delta(self, epsilon: float) -> float:
        epsilon = check_nonnegative("epsilon", epsilon)
        total, squares, drift, delta_sum = self._sums()
        if epsilon >= total:
            return delta_sum
        if epsilon <= drift or squares == 0:
            return 1.0
        return min(1.0, delta_sum + math.exp(-((epsilon - drift) ** 2) / (2.0 * squares)))


class DpAccountingAccountant:
    """``dp_accounting``'s RDP or PLD accountant behind this module's interface.

    Args:
      kind: ``"rdp"`` or ``"pld"``.
      neighboring: ``"add-or-remove"`` (default) or ``"replace-one"`` (needed for sampling
        without replacement under RDP; PLD supports Poisson sampling).
      pld_discretization: value discretization interval of the PLD accountant.
    """

    def __init__(
        self,
        kind: str = "pld",
        neighboring: str = "add-or-remove",
        pld_discretization: float = 1e-4,
    ) -> None:
        if kind not in ("rdp", "pld"):
            raise ValueError(f"unknown dp_accounting accountant {kind!r}; expected 'rdp' or 'pld'")
        if neighboring not in NEIGHBORING:
            raise ValueError(f"unknown neighboring {neighboring!r}; expected {list(NEIGHBORING)}")
        relation = NEIGHBORING[neighboring]
        self.name = kind
        self.neighboring = neighboring
        if kind == "rdp":
            self._accountant = dp_accounting.rdp.RdpAccountant(neighboring_relation=relation)
        else:
            self._accountant = dp_accounting.pld.PLDAccountant(relation, pld_discretization)

    @property
    def dp_accounting_accountant(self) -> dp_accounting.PrivacyAccountant:
        """The wrapped ``dp_accounting`` accountant (for its own calibration routines)."""
        return self._accountant

    def compose(self, event: events.DpEvent, count: int = 1) -> DpAccountingAccountant:
        count = _check_count(count)
        if not self._accountant.supports(event):
            raise ValueError(
                f"the {self.name} accountant ({self.neighboring}) cannot compose {event}"
            )
        self._accountant.compose(event, count)
        return self

    def epsilon(self, delta: float) -> float:
        return float(self._accountant.get_epsilon(check_open_unit("delta", delta)))

    def delta(self, epsilon: float) -> float:
        return float(self._accountant.get_delta(check_nonnegative("epsilon", epsilon)))


class ParallelComposition:
    """Mechanisms on disjoint data: each record is touched by one branch, so the guarantee is the
    worst branch's (the maximum of eps at a delta, or of delta at an eps), not the sum."""

    name = "parallel"

    def __init__(self, branches: Sequence[Accountant]) -> None:
        if not branches:
            raise ValueError("expected at least one branch for parallel composition")
        self.branches = list(branches)

    def compose(self, event: events.DpEvent, count: int = 1) -> ParallelComposition:
        raise ValueError("compose into a branch of a parallel composition, not into the whole")

    def epsilon(self, delta: float) -> float:
        return max(branch.epsilon(delta) for branch in self.branches)

    def delta(self, epsilon: float) -> float:
        return max(branch.delta(epsilon) for branch in self.branches)


def make_accountant(
    name: str, neighboring: str = "add-or-remove", pld_discretization: float = 1e-4
) -> Accountant:
    """A fresh accountant by name: ``zcdp``, ``advanced``, ``rdp`` or ``pld``.

    ``pld_discretization`` is the PLD accountant's value discretization interval; its estimates
    stay pessimistic (upper bounds) at any interval, a coarser one is faster and slightly looser.
    """
    if name == "zcdp":
        return ZcdpAccountant()
    if name == "advanced":
        return AdvancedCompositionAccountant()
    if name in ("rdp", "pld"):
        return DpAccountingAccountant(name, neighboring, pld_discretization)
    raise ValueError(f"unknown accountant {name!r}; expected one of {ACCOUNTANTS}")


def subsampled_gaussian_event(
    noise_multiplier: float,
    sampling_rate: float = 1.0,
    steps: int = 1,
    sampling: str = "poisson",
    dataset_size: int | None = None,
) -> events.DpEvent:
    """The event of ``steps`` Gaussian steps on a subsample (DP-SGD / Noisy MB-SGD).

    The noise multiplier follows dp-accounting's conventions, which differ under replace-one
    adjacency (checked in the tests): for the RDP accountant it is noise std / the L2 distance
    between neighbouring outputs; for the PLD accountant under replace-one it is noise std / the
    bound on one record's contribution, neighbouring outputs then differing by twice that.
    Without sampling and under add-or-remove both mean noise std / L2 sensitivity.

    Args:
      noise_multiplier: noise std / sensitivity of one step (> 0), see above.
      sampling_rate: q in (0, 1]; 1 means no subsampling.
      steps: number of composed steps (>= 1).
      sampling: ``"poisson"`` (each record independently with probability q) or
        ``"without-replacement"`` (fixed batches of ``round(q * dataset_size)``).
      dataset_size: n, required for ``"without-replacement"``.
    """
    check_positive("noise_multiplier", noise_multiplier)
    sampling_rate = float(sampling_rate)
    if not 0.0 < sampling_rate <= 1.0:
        raise ValueError(f"expected sampling_rate in (0, 1], got sampling_rate={sampling_rate}")
    if int(steps) != steps or steps < 1:
        raise ValueError(f"expected steps >= 1 (integer), got steps={steps}")
    step: events.DpEvent = events.GaussianDpEvent(noise_multiplier)
    if sampling_rate < 1.0:
        if sampling == "poisson":
            step = events.PoissonSampledDpEvent(sampling_rate, step)
        elif sampling == "without-replacement":
            if dataset_size is None or dataset_size < 1:
                raise ValueError("expected dataset_size >= 1 for sampling without replacement")
            batch = max(1, round(sampling_rate * dataset_size))
            step = events.SampledWithoutReplacementDpEvent(dataset_size, batch, step)
        else:
            raise ValueError(
                f"unknown sampling {sampling!r}; expected 'poisson' or 'without-replacement'"
            )
    return step if steps == 1 else events.SelfComposedDpEvent(step, int(steps))


def epsilon_of(
    event: events.DpEvent, delta: float, accountant: str = "pld", neighboring: str = "add-or-remove"
) -> float:
    """eps at ``delta`` of one (composed) event under a named accountant."""
    return make_accountant(accountant, neighboring).compose(event).epsilon(delta)


def _randomized_response_profile(epsilon0: float, count: int):
    """``delta(eps)`` of ``count`` composed binary randomized responses of pure eps0 (a closure).

    The privacy loss of the composition is ``eps0 (count - 2 X)`` with ``X ~ Bin(count, q)``,
    ``q = 1 / (1 + e^eps0)`` (the number of flipped answers), so ``delta(eps) = E[(1 -
    e^(eps - loss))_+]``. The binomial is summed over its mean +- 50 standard deviations and the
    mass outside is added whole (each term is at most its probability): an upper bound exact to
    far below any delta of interest, computed in O(sqrt(count)) per eps.
    """
    from scipy import stats

    q = 1.0 / (1.0 + math.exp(epsilon0))
    mean, spread = count * q, math.sqrt(count * q * (1.0 - q))
    low = max(0, math.floor(mean - 50.0 * spread - 50.0))
    high = min(count, math.ceil(mean + 50.0 * spread + 50.0))
    flips = np.arange(low, high + 1, dtype=np.float64)
    probability = np.exp(stats.binom.logpmf(flips, count, q))
    loss = epsilon0 * (count - 2.0 * flips)
    below = float(stats.binom.cdf(low - 1, count, q)) if low > 0 else 0.0
    above = float(stats.binom.sf(high, count, q))

    def delta(epsilon: float) -> float:
        inside = loss > epsilon
        total = float(np.sum(probability[inside] * -np.expm1(epsilon - loss[inside])))
        # past the window: the low side has the largest losses; the high side counts only if
        # its losses can exceed eps
        tail = below + (above if epsilon0 * (count - 2.0 * (high + 1)) > epsilon else 0.0)
        return min(1.0, total + tail)

    return delta


def randomized_response_composition_delta(epsilon0: float, count: int, epsilon: float) -> float:
    """Exact ``delta(eps)`` of ``count`` composed eps0-DP binary randomized responses.

    Binary randomized response is the worst case of every pure eps0-DP mechanism, so this is
    also the optimal composition of any ``count`` eps0-DP mechanisms, adaptively chosen
    (Kairouz, Oh and Viswanath, "The Composition Theorem for Differential Privacy", Thm 3.3: at
    ``eps = (count - 2 i) eps0`` it equals their ``delta_i``).

    Args:
      epsilon0: eps of one release (> 0).
      count: number of composed releases (>= 1).
      epsilon: eps >= 0 at which delta is asked.
    """
    epsilon0 = check_positive("epsilon0", epsilon0)
    count = _check_count(count)
    return _randomized_response_profile(epsilon0, count)(check_nonnegative("epsilon", epsilon))


def randomized_response_composition_epsilon(epsilon0: float, count: int, delta: float) -> float:
    """The least eps at which ``count`` composed eps0-DP releases are (eps, delta)-DP (the
    inverse of :func:`randomized_response_composition_delta`, by root finding; the returned eps
    is checked to meet ``delta``). Never above basic composition, ``count * eps0``."""
    from scipy import optimize

    epsilon0 = check_positive("epsilon0", epsilon0)
    count = _check_count(count)
    delta = check_open_unit("delta", delta)
    profile = _randomized_response_profile(epsilon0, count)
    if count == 0 or profile(0.0) <= delta:
        return 0.0
    top = count * epsilon0
    epsilon = optimize.brentq(lambda e: profile(e) - delta, 0.0, top, xtol=1e-12, rtol=1e-12)
    while profile(epsilon) > delta and epsilon < top:  # the root's side that meets delta
        epsilon = min(top, epsilon * (1.0 + 1e-12) + 1e-12)
    return float(epsilon)


class OptimalPureCompositionAccountant:
    """Composes pure eps0-DP releases of ONE eps0 (randomized response of any number of buckets,
    Laplace) with the optimal composition theorem
    (:func:`randomized_response_composition_epsilon`): exact for binary randomized response,
    an upper bound for the others. Releases of different eps are refused (their optimal
    composition has no such closed form; use ``advanced`` or basic composition)."""

    name = "optimal-pure"

    def __init__(self) -> None:
        self.epsilon0: float | None = None
        self.count = 0

    def _pure(self, event: events.DpEvent) -> list[tuple[float, int]]:
        if isinstance(event, events.RandomizedResponseDpEvent):
            p, k = event.noise_parameter, event.num_buckets
            if p == 0.0:
                return [(math.inf, 1)]
            return [(math.log1p(k * (1.0 - p) / p), 1)]
        if isinstance(event, events.LaplaceDpEvent):
            return [(1.0 / event.noise_multiplier, 1)]
        if isinstance(event, events.NoOpDpEvent):
            return []
        if isinstance(event, events.SelfComposedDpEvent):
            return [(e, c * event.count) for e, c in self._pure(event.event)]
        if isinstance(event, events.ComposedDpEvent):
            return [pair for e in event.events for pair in self._pure(e)]
        raise _unsupported(self.name, event)

    def compose(self, event: events.DpEvent, count: int = 1) -> OptimalPureCompositionAccountant:
        count = _check_count(count)
        for epsilon0, times in self._pure(event):
            current = self.epsilon0 if self.epsilon0 is not None else epsilon0
            if not math.isclose(epsilon0, current, rel_tol=1e-9):
                raise ValueError(
                    f"the {self.name} accountant composes releases of one eps only, got "
                    f"{current:g} and {epsilon0:g}"
                )
            self.epsilon0 = current
            self.count += times * count
        return self

    def epsilon(self, delta: float) -> float:
        if self.epsilon0 is None or self.count == 0:
            return 0.0
        if math.isinf(self.epsilon0):
            return math.inf
        if delta == 0.0:
            return self.count * self.epsilon0  # pure DP composes exactly by the sum
        return randomized_response_composition_epsilon(self.epsilon0, self.count, delta)

    def delta(self, epsilon: float) -> float:
        if self.epsilon0 is None or self.count == 0:
            return 0.0
        return randomized_response_composition_delta(self.epsilon0, self.count, epsilon)
