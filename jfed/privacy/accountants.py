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
