"""jfed's own accountants, each a ``dp_accounting.PrivacyAccountant``, and the events dp-accounting
lacks.

Every accountant jfed uses is a ``dp_accounting.PrivacyAccountant``: dp-accounting's own PLD and
RDP accountants, and the ones below, so ``compose`` / ``get_epsilon`` / ``get_delta`` /
``supports`` mean the same everywhere and ``dp_accounting.calibrate_dp_mechanism`` calibrates
through any of them. They are made by the accountant specs of :mod:`jfed.privacy.accounting`
(``Zcdp().make(adjacency)``), never by name.

=============================  ====================================================================
accountant                     what it composes (and how)
=============================  ====================================================================
:class:`ZcdpAccountant`        Gaussian (rho = 1/(2 z^2)), zCDP, discrete Gaussian and Skellam
                               (their own rho), Laplace, discrete Laplace and randomized response
                               (pure eps -> eps^2/2-zCDP); sums rho; converts once
:class:`AdvancedComposition`   (eps_i, delta_i) events (pure ones have delta_i = 0) by the advanced
                               composition theorem (Dwork-Roth Thm 3.20, heterogeneous form),
                               never worse than basic composition
:class:`AnalyticGaussian`      Gaussian releases without sampling, exactly: one Gaussian of the
                               combined multiplier, the analytic Gaussian's eps (Balle-Wang 2018)
:class:`ClassicGaussian`       Gaussian releases, each by the classic bound at delta / R, eps summed
:class:`BasicComposition`      exact single releases (Laplace, discrete Laplace, randomized
                               response, analytic Gaussian at a share of delta, stated (eps,
                               delta)), eps summed; parallel branches take their worst
:class:`OptimalPureComposition`  pure eps0-DP releases of one eps0, by the optimal composition
                               theorem (Kairouz, Oh and Viswanath; exact for binary RR)
=============================  ====================================================================

The discrete mechanisms' RDP accountant,
:class:`~jfed.privacy.discrete_accounting.DiscreteRdpAccountant`, walks events as these do (it is
built on the same base).

Noise multiplier convention (every jfed event): ``z = noise std / C``, C the bound on one
protected unit's contribution, i.e. the L2 sensitivity under add-or-remove adjacency. Under
replace-one, neighbouring sums differ by up to 2C: the analytic and classic accountants account
for that themselves (as dp-accounting's PLD accountant does), the zCDP one refuses replace-one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attr
import dp_accounting
import numpy as np
from dp_accounting import dp_event as events
from dp_accounting.privacy_accountant import NeighboringRelation

from jfed._validation import check_nonnegative, check_open_unit, check_positive
from jfed.privacy import zcdp
from jfed.privacy._accountant_base import NEIGHBORING as NEIGHBORING
from jfed.privacy._accountant_base import Walker as _Walker
from jfed.privacy.discrete_accounting import (
    DiscreteGaussianDpEvent,
    SkellamDpEvent,
    discrete_gaussian_worst_epsilon,
    discrete_laplace_epsilon,
    zcdp_event,
)
from jfed.privacy.guarantee import Adjacency


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


def pure_epsilon(event: events.DpEvent) -> float | None:
    """The pure eps of one Laplace, discrete Laplace or randomized-response release (``None``
    for other events)."""
    if isinstance(event, events.LaplaceDpEvent):
        return 1.0 / event.noise_multiplier
    if isinstance(event, events.DiscreteLaplaceDpEvent):
        return discrete_laplace_epsilon(event)
    if isinstance(event, events.RandomizedResponseDpEvent):
        p, k = event.noise_parameter, event.num_buckets
        if p == 0.0:
            return math.inf  # the true bucket always: no privacy
        return math.log1p(k * (1.0 - p) / p)
    return None


class ZcdpAccountant(_Walker):
    """Sums zCDP rho; eps(delta) = rho + 2 sqrt(rho ln(1/delta)). No subsampling; add-or-remove
    (a Gaussian's rho = 1/(2 z^2) is the add-or-remove one).

    Discrete Gaussian and Skellam releases (:mod:`jfed.privacy.discrete_accounting`) enter with
    their own rho (:func:`~jfed.privacy.discrete_accounting.zcdp_event`); a release whose bound
    is approximate zCDP (``xi > 0``: a Skellam one whose L1 sensitivity is large) is refused,
    since rho alone would understate it."""

    def __init__(self, adjacency: Adjacency = Adjacency.ADD_OR_REMOVE) -> None:
        if NEIGHBORING[Adjacency(adjacency)] != NeighboringRelation.ADD_OR_REMOVE_ONE:
            raise ValueError(
                "the zcdp accountant composes Gaussian events with rho = 1/(2 z^2), which is "
                f"add-or-remove adjacency; got adjacency={Adjacency(adjacency).value!r} (use Pld())"
            )
        super().__init__(adjacency)
        self.rho = 0.0

    def _leaf(self, event, count, do_compose):
        if isinstance(event, events.GaussianDpEvent):
            rho = 0.5 / event.noise_multiplier**2 if event.noise_multiplier > 0 else math.inf
        elif isinstance(event, events.ZCDpEvent):
            rho = event.rho
        elif isinstance(event, DiscreteGaussianDpEvent | SkellamDpEvent):
            approximate = zcdp_event(event)
            if approximate.xi > 0:
                return (
                    f"the zcdp accountant sums rho, but {type(event).__name__} is only "
                    f"(xi={approximate.xi:.3g}, rho)-approximate zCDP (use DiscreteRdp())"
                )
            rho = approximate.rho
        elif pure_epsilon(event) is not None:
            rho = 0.5 * pure_epsilon(event) ** 2  # pure eps -> eps^2 / 2 (Bun and Steinke)
        else:
            return f"the zcdp accountant cannot compose {type(event).__name__}"
        if do_compose:
            self.rho += count * rho
        return None

    def _epsilon(self, delta: float) -> float:
        return float(zcdp.epsilon_from_rho(self.rho, delta))

    def _delta(self, epsilon: float) -> float:
        """Smallest delta with rho + 2 sqrt(rho ln(1/delta)) <= eps."""
        epsilon = check_nonnegative("epsilon", epsilon)
        if self.rho == 0:
            return 0.0
        if epsilon <= self.rho:
            return 1.0
        return float(math.exp(-((epsilon - self.rho) ** 2) / (4.0 * self.rho)))


class AdvancedComposition(_Walker):
    """Composes (eps_i, delta_i) mechanisms with the advanced composition theorem.

    For any delta' > 0 the composition is (eps, sum delta_i + delta')-DP with
    ``eps = sqrt(2 ln(1/delta') sum eps_i^2) + sum eps_i (e^{eps_i} - 1)`` (Dwork and Roth 2014,
    Thm 3.20, in the heterogeneous form of Kairouz et al.), and also with ``eps = sum eps_i``
    (basic composition); the smaller is reported.
    """

    def __init__(self, adjacency: Adjacency = Adjacency.ADD_OR_REMOVE) -> None:
        super().__init__(adjacency)
        self.parts: list[tuple[float, float, int]] = []

    def _leaf(self, event, count, do_compose):
        if isinstance(event, ApproximateDpEvent):
            part = (event.epsilon, event.delta)
        elif pure_epsilon(event) is not None:
            part = (pure_epsilon(event), 0.0)
        else:
            return f"advanced composition cannot compose {type(event).__name__}"
        if do_compose:
            self.parts.append((*part, count))
        return None

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

    def _epsilon(self, delta: float) -> float:
        delta = check_open_unit("delta", delta)
        total, squares, drift, delta_sum = self._sums()
        slack = delta - delta_sum
        if slack <= 0:
            raise ValueError(
                f"expected delta > sum of the composed deltas ({delta_sum:.3g}), got delta={delta}"
            )
        return min(total, math.sqrt(2.0 * math.log(1.0 / slack) * squares) + drift)

    def _delta(self, epsilon: float) -> float:
        epsilon = check_nonnegative("epsilon", epsilon)
        total, squares, drift, delta_sum = self._sums()
        if epsilon >= total:
            return delta_sum
        if epsilon <= drift or squares == 0:
            return 1.0
        return min(1.0, delta_sum + math.exp(-((epsilon - drift) ** 2) / (2.0 * squares)))


class _GaussianOnly(_Walker):
    """Accountants of Gaussian releases without sampling: each leaf must be a Gaussian."""

    def _leaf(self, event, count, do_compose):
        if not isinstance(event, events.GaussianDpEvent):
            return (
                f"the {type(self).__name__} accountant composes Gaussian releases without "
                f"sampling only, not {type(event).__name__} (use Pld())"
            )
        if event.noise_multiplier <= 0:
            return "a Gaussian release needs a noise multiplier > 0"
        if do_compose:
            self._add(event.noise_multiplier, count)
        return None

    def _add(self, noise_multiplier: float, count: int) -> None:
        raise NotImplementedError


class AnalyticGaussian(_GaussianOnly):
    """Composes Gaussian releases without sampling exactly: R releases of multipliers z_r are
    one Gaussian release of multiplier (sum_r z_r^-2)^(-1/2), whose eps is the analytic
    Gaussian's (Balle and Wang 2018), with no discretization."""

    def __init__(self, adjacency: Adjacency = Adjacency.ADD_OR_REMOVE) -> None:
        super().__init__(adjacency)
        # z = noise std / C; replace-one moves a clipped sum by 2C
        self._per_release = 4.0 if self.adjacency == Adjacency.REPLACE_ONE else 1.0
        self.precision = 0.0  # sum of (sensitivity / std)^2

    def _add(self, noise_multiplier: float, count: int) -> None:
        self.precision += count * self._per_release / noise_multiplier**2

    def _epsilon(self, delta: float) -> float:
        from jfed.privacy.gaussian import analytic_gaussian_epsilon

        if self.precision == 0.0:
            return 0.0
        return float(
            analytic_gaussian_epsilon(1.0, self.precision**-0.5, check_open_unit("delta", delta))
        )

    def _delta(self, epsilon: float) -> float:
        from jfed.privacy.gaussian import analytic_gaussian_delta

        if self.precision == 0.0:
            return 0.0
        return float(analytic_gaussian_delta(1.0, self.precision**-0.5, epsilon))


class ClassicGaussian(_GaussianOnly):
    """Each Gaussian release certified by the classic bound (Dwork and Roth, Thm A.1) at delta /
    R, the R releases composed by basic composition: eps = sum of the per-release eps."""

    def __init__(self, adjacency: Adjacency = Adjacency.ADD_OR_REMOVE) -> None:
        super().__init__(adjacency)
        self._per_release = 2.0 if self.adjacency == Adjacency.REPLACE_ONE else 1.0
        self.multipliers: list[tuple[float, int]] = []

    def _add(self, noise_multiplier: float, count: int) -> None:
        self.multipliers.append((noise_multiplier / self._per_release, count))

    def _epsilon(self, delta: float) -> float:
        from jfed.privacy.gaussian import classic_gaussian_epsilon

        releases = sum(count for _, count in self.multipliers)
        share = check_open_unit("delta", delta) / max(1, releases)
        return float(
            sum(count * classic_gaussian_epsilon(1.0, z, share) for z, count in self.multipliers)
        )


class BasicComposition(_Walker):
    """Basic composition of exact single-release guarantees: a Laplace release of multiplier z
    spends eps = 1/z, randomized response its exact pure eps, an (eps_i, delta_i) release its
    own, a Gaussian release the analytic Gaussian's eps at an equal share of what remains of
    delta (a one-coordinate discrete Gaussian release the exact eps of Canonne, Kamath and
    Steinke at its share: :func:`~jfed.privacy.discrete_accounting.discrete_gaussian_worst_epsilon`
    over every integer shift up to its sensitivity); eps and delta add over releases. A
    :class:`ParallelDpEvent` spends its worst branch's eps."""

    def __init__(self, adjacency: Adjacency = Adjacency.ADD_OR_REMOVE) -> None:
        super().__init__(adjacency)
        self.releases: list[tuple[events.DpEvent, int]] = []

    def _leaf(self, event, count, do_compose):
        supported = (events.LaplaceDpEvent, events.DiscreteLaplaceDpEvent, events.GaussianDpEvent,
                     ApproximateDpEvent, events.RandomizedResponseDpEvent,
                     ParallelDpEvent, DiscreteGaussianDpEvent)  # fmt: skip
        if not isinstance(event, supported):
            return (
                "basic composition takes Laplace, discrete Laplace, Gaussian, one-coordinate "
                "discrete Gaussian, randomized-response and parallel events, not "
                f"{type(event).__name__} (use Pld())"
            )
        if isinstance(event, DiscreteGaussianDpEvent) and not _one_exact_coordinate(event):
            return (
                "basic composition takes a discrete Gaussian release of one coordinate, one "
                "noise share and an integer sensitivity only (use DiscreteRdp())"
            )
        if do_compose:
            self.releases.append((event, count))
        return None

    def _gaussians(self) -> int:
        gaussian = (events.GaussianDpEvent, DiscreteGaussianDpEvent)
        return sum(c for e, c in self.releases if isinstance(e, gaussian))

    def _epsilon(self, delta: float) -> float:
        from jfed.privacy.gaussian import analytic_gaussian_epsilon

        stated = sum(c * e.delta for e, c in self.releases if isinstance(e, ApproximateDpEvent))
        if stated > delta:
            raise ValueError(f"the releases state delta {stated} > delta={delta}")
        if self._gaussians():
            check_open_unit("delta", delta - stated)
        share = (delta - stated) / max(1, self._gaussians())
        total = 0.0
        for release, count in self.releases:
            if isinstance(release, events.GaussianDpEvent):
                epsilon = float(analytic_gaussian_epsilon(1.0, release.noise_multiplier, share))
            elif isinstance(release, DiscreteGaussianDpEvent):
                sensitivity = release.l2_sensitivity
                variance = (release.noise_multiplier * sensitivity) ** 2
                epsilon = discrete_gaussian_worst_epsilon(share, variance, int(sensitivity))
            elif isinstance(release, ApproximateDpEvent):
                epsilon = release.epsilon
            elif isinstance(release, ParallelDpEvent):
                epsilon = max(
                    BasicComposition(self.adjacency).compose(branch).get_epsilon(share)
                    for branch in release.branches
                )
            else:
                epsilon = pure_epsilon(release)  # type: ignore[assignment]
            total += count * epsilon
        return total


def _one_exact_coordinate(event: DiscreteGaussianDpEvent) -> bool:
    """Whether the exact one-dimensional (eps, delta) of Canonne, Kamath and Steinke applies."""
    sensitivity = event.l2_sensitivity
    return event.dimension == 1 and event.shares == 1 and float(sensitivity).is_integer()


class ParallelComposition:
    """Mechanisms on disjoint data: each record is touched by one branch, so the guarantee is the
    worst branch's (the maximum of eps at a delta, or of delta at an eps), not the sum.

    Args:
      branches: one composed accountant (any ``dp_accounting.PrivacyAccountant``) per branch.
    """

    def __init__(self, branches: Sequence[dp_accounting.PrivacyAccountant]) -> None:
        if not branches:
            raise ValueError("expected at least one branch for parallel composition")
        self.branches = list(branches)

    def get_epsilon(self, target_delta: float) -> float:
        return max(branch.get_epsilon(target_delta) for branch in self.branches)

    def get_delta(self, target_epsilon: float) -> float:
        return max(branch.get_delta(target_epsilon) for branch in self.branches)


def _check_count(count: int) -> int:
    if int(count) != count or count < 0:
        raise ValueError(f"expected count >= 0 (integer), got count={count}")
    return int(count)


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


class OptimalPureComposition(_Walker):
    """Composes pure eps0-DP releases of ONE eps0 (randomized response of any number of buckets,
    Laplace) with the optimal composition theorem
    (:func:`randomized_response_composition_epsilon`): exact for binary randomized response,
    an upper bound for the others; pure releases compose alike under every adjacency. Releases
    of different eps are refused (their optimal composition has no such closed form; use
    :class:`AdvancedComposition` or :class:`BasicComposition`)."""

    def __init__(self, adjacency: Adjacency = Adjacency.REPLACE_ONE) -> None:
        super().__init__(adjacency)
        self.epsilon0: float | None = None
        self.count = 0

    def _leaf(self, event, count, do_compose):
        epsilon0 = pure_epsilon(event)
        if epsilon0 is None:
            return f"optimal pure composition takes pure releases, not {type(event).__name__}"
        current = self.epsilon0 if self.epsilon0 is not None else epsilon0
        if not math.isclose(epsilon0, current, rel_tol=1e-9):
            return (
                f"optimal pure composition composes releases of one eps only, got {current:g} "
                f"and {epsilon0:g}"
            )
        if do_compose:
            self.epsilon0 = current
            self.count += count
        return None

    def _epsilon(self, delta: float) -> float:
        if self.epsilon0 is None or self.count == 0:
            return 0.0
        if math.isinf(self.epsilon0):
            return math.inf
        if delta == 0.0:
            return self.count * self.epsilon0  # pure DP composes exactly by the sum
        return randomized_response_composition_epsilon(self.epsilon0, self.count, delta)

    def _delta(self, epsilon: float) -> float:
        if self.epsilon0 is None or self.count == 0:
            return 0.0
        return randomized_response_composition_delta(self.epsilon0, self.count, epsilon)


def subsampled_gaussian_event(
    noise_multiplier: float,
    sampling_rate: float = 1.0,
    steps: int = 1,
    without_replacement_of: int | None = None,
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
      without_replacement_of: ``None`` for Poisson sampling (each record independently with
        probability q); a dataset size n for fixed batches of ``round(q n)`` drawn without
        replacement.
    """
    check_positive("noise_multiplier", noise_multiplier)
    sampling_rate = float(sampling_rate)
    if not 0.0 < sampling_rate <= 1.0:
        raise ValueError(f"expected sampling_rate in (0, 1], got sampling_rate={sampling_rate}")
    if int(steps) != steps or steps < 1:
        raise ValueError(f"expected steps >= 1 (integer), got steps={steps}")
    step: events.DpEvent = events.GaussianDpEvent(noise_multiplier)
    if sampling_rate < 1.0:
        if without_replacement_of is None:
            step = events.PoissonSampledDpEvent(sampling_rate, step)
        else:
            if without_replacement_of < 1:
                raise ValueError("expected a dataset size >= 1 for sampling without replacement")
            batch = max(1, round(sampling_rate * without_replacement_of))
            step = events.SampledWithoutReplacementDpEvent(without_replacement_of, batch, step)
    return step if steps == 1 else events.SelfComposedDpEvent(step, int(steps))
