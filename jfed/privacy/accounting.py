"""One accountant interface: the events a run emitted -> the guarantee it certifies, and back.

Host side, float64. An accountant is named by a small frozen object, :class:`Pld`, :class:`Rdp`,
:class:`Zcdp` (each makes a fresh accountant of :mod:`jfed.privacy.accountants`) or
:class:`Analytic` (exact, for Gaussian releases without sampling), and the
adjacency by a string, ``"add-or-remove"`` (a client joins or leaves) or ``"replace-one"`` (a
client's data is swapped for another's). :func:`certify` turns a composed ``DpEvent`` into a
:class:`~jfed.privacy.PrivacyGuarantee`; :func:`calibrate` finds the least noise multiplier for a
target (eps, delta) through the very same accountant. dp-accounting is imported inside the
functions: it takes about a second to load.

Adjacency is recorded in the guarantee's ``notion``, which reads ``"<notion>, <adjacency>
adjacency"`` (e.g. ``"central (eps, delta)-DP, add-or-remove adjacency"``), so every result
record that stores the guarantee states it with no change to the record's fields.

Noise multiplier convention. jfed's privatizers state ``z = noise std / clip_norm``, where
``clip_norm`` = C bounds one client's contribution (:class:`~jfed.privacy.GaussianSumQuery`).
Neighbouring sums differ by at most C under add-or-remove and 2C under replace-one.
dp-accounting's PLD accountant doubles the sensitivity itself under replace-one (its
``GaussianDpEvent(z)`` means std / C under both adjacencies); its RDP accountant does not (under
replace-one ``GaussianDpEvent(z)`` means std / the distance between neighbouring outputs, so a
clipped sum needs ``z / 2``). Hence:

- :func:`poisson_rounds_event` states ``Gaussian(z)``: exact under add-or-remove (PLD, RDP) and
  under replace-one with PLD.
- :func:`fixed_cohort_rounds_event` states ``Gaussian(z / 2)`` inside the without-replacement
  sample: only dp-accounting's RDP accountant under replace-one composes it.
- :func:`certify` and :func:`calibrate` refuse what would silently halve the sensitivity: a
  Gaussian outside a without-replacement sample under ``Rdp()`` with replace-one, and
  ``Zcdp()`` (rho = 1 / (2 z^2)) with replace-one.

Events dp-accounting lacks live in :mod:`~jfed.privacy.accountants`
(:class:`~jfed.privacy.ApproximateDpEvent`); zCDP releases use dp-accounting's own
``ZCDpEvent(rho)``.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from jfed._validation import check_int_range, check_open_unit, check_positive
from jfed.privacy.guarantee import PrivacyGuarantee

if TYPE_CHECKING:  # dp-accounting takes about a second to load: imported where it is used
    import dp_accounting

    from jfed.privacy.accountants import Accountant


ADJACENCIES = ("add-or-remove", "replace-one", "bounded")


def _check_adjacency(adjacency: str) -> str:
    if adjacency not in ADJACENCIES:
        raise ValueError(f"unknown adjacency {adjacency!r}; expected one of {list(ADJACENCIES)}")
    return adjacency


def _convention(adjacency: str) -> str:
    """dp-accounting's neighbouring relation for ``adjacency``: ``"bounded"`` states the
    sensitivity as the distance between the outputs of any two neighbouring inputs (local DP of
    one client's message), which is how add-or-remove reads ``GaussianDpEvent(z)``."""
    return "add-or-remove" if _check_adjacency(adjacency) == "bounded" else adjacency


@dataclass(frozen=True)
class Pld:
    """dp-accounting's privacy loss distribution accountant: numerically tight upper bounds.

    Composes Gaussian, Laplace and Poisson-subsampled Gaussian events under either adjacency;
    not sampling without replacement (use :class:`Rdp`).

    Attributes:
      discretization: the value discretization interval (> 0); the bound stays an upper bound at
        any interval, a coarser one is faster and looser.
    """

    discretization: float = 1e-4
    name: ClassVar[str] = "pld"

    def __post_init__(self) -> None:
        check_positive("discretization", self.discretization)

    def make(self, adjacency: str = "add-or-remove") -> Accountant:
        """A fresh, empty accountant for ``adjacency``."""
        from jfed.privacy.accountants import make_accountant

        return make_accountant(self.name, _convention(adjacency), self.discretization)

    def gaussian_rounds_noise(
        self, sensitivity: float, epsilon: float, delta: float, rounds: int
    ) -> float:
        """Least noise std of ``rounds`` Gaussian releases of L2 sensitivity ``sensitivity``
        (every client in every round) for (eps, delta): bisection through this accountant."""
        from jfed.privacy.calibration import calibrate_noise_multiplier

        multiplier = calibrate_noise_multiplier(
            epsilon, delta, 1.0, rounds, self.name, pld_discretization=self.discretization
        )
        return multiplier * sensitivity


@dataclass(frozen=True)
class Rdp:
    """dp-accounting's Renyi DP accountant: looser than :class:`Pld`, but it alone composes
    sampling without replacement (a fixed cohort, under replace-one)."""

    name: ClassVar[str] = "rdp"

    def make(self, adjacency: str = "add-or-remove") -> Accountant:
        """A fresh, empty accountant for ``adjacency``."""
        from jfed.privacy.accountants import make_accountant

        return make_accountant(self.name, _convention(adjacency))

    def gaussian_rounds_noise(
        self, sensitivity: float, epsilon: float, delta: float, rounds: int
    ) -> float:
        """Least noise std of ``rounds`` Gaussian releases, by bisection."""
        from jfed.privacy.calibration import calibrate_noise_multiplier

        return calibrate_noise_multiplier(epsilon, delta, 1.0, rounds, self.name) * sensitivity


class _RhoSum:
    """zCDP of Gaussian releases, composed without dp-accounting: rho = sum 1 / (2 z^2)."""

    def __init__(self) -> None:
        self.rho = 0.0

    def add_gaussian(self, noise_multiplier: float, count: int = 1) -> _RhoSum:
        self.rho += count * 0.5 / check_positive("noise_multiplier", noise_multiplier) ** 2
        return self

    def epsilon(self, delta: float) -> float:
        from jfed.privacy import zcdp

        return float(zcdp.epsilon_from_rho(self.rho, delta))


@dataclass(frozen=True)
class Zcdp:
    """Sums zCDP rho (Gaussian, zCDP, Laplace, randomized response), converted to eps once.
    Add-or-remove adjacency only; no subsampling amplification."""

    name: ClassVar[str] = "zcdp"
    via: ClassVar[str] = " via zCDP"  # how a notion names the conversion it certifies through

    def make(self, adjacency: str = "add-or-remove") -> Accountant:
        """A fresh, empty accountant; refuses replace-one (its Gaussian rho is add-or-remove's)."""
        from jfed.privacy.accountants import ZcdpAccountant

        if _convention(adjacency) != "add-or-remove":
            raise ValueError(
                f"the zcdp accountant composes Gaussian events with rho = 1/(2 z^2), which is "
                f"add-or-remove adjacency; got adjacency={adjacency!r} (use Pld())"
            )
        return ZcdpAccountant()

    def gaussian_composer(self, adjacency: str = "add-or-remove") -> _RhoSum:
        """Composes Gaussian releases in closed form (no dp-accounting import: a zCDP run starts
        fast); the same numbers as :meth:`make`."""
        if _convention(adjacency) != "add-or-remove":
            raise ValueError(
                f"the zcdp accountant takes add-or-remove adjacency, got {adjacency!r}"
            )
        return _RhoSum()

    def gaussian_rounds_noise(
        self, sensitivity: float, epsilon: float, delta: float, rounds: int
    ) -> float:
        """Closed form: rho = R Delta^2 / (2 sigma^2) adds over rounds and converts once."""
        from jfed.privacy import zcdp

        return float(zcdp.calibrate_gaussian(sensitivity, epsilon, delta, rounds))


class _GaussianComposer:
    """An accountant of Gaussian releases without sampling: ``compose`` walks the event down to
    its Gaussian releases and hands each to ``add_gaussian``; anything else is refused."""

    name = "gaussian"
    refusal = "composes Gaussian releases without sampling only"

    def compose(self, event: dp_accounting.DpEvent, count: int = 1) -> _GaussianComposer:
        from dp_accounting import dp_event as events

        count = check_int_range("count", count, 1, 2**62)
        if isinstance(event, events.GaussianDpEvent):
            self.add_gaussian(event.noise_multiplier, count)
        elif isinstance(event, events.SelfComposedDpEvent):
            self.compose(event.event, count * event.count)
        elif isinstance(event, events.ComposedDpEvent):
            for inner in event.events:
                self.compose(inner, count)
        else:
            raise ValueError(
                f"the {self.name} accountant {self.refusal}, not {type(event).__name__} (use Pld())"
            )
        return self

    def add_gaussian(self, noise_multiplier: float, count: int = 1) -> _GaussianComposer:
        raise NotImplementedError

    def epsilon(self, delta: float) -> float:
        raise NotImplementedError


class _AnalyticGaussianAccountant(_GaussianComposer):
    """Composes Gaussian releases without sampling exactly: R releases of multipliers z_r are
    one Gaussian release of multiplier (sum_r z_r^-2)^(-1/2), whose eps is the analytic
    Gaussian's (Balle and Wang 2018), with no discretization."""

    name = "analytic"

    def __init__(self, adjacency: str) -> None:
        # z = noise std / clip_norm; replace-one moves a clipped sum by 2 clip_norm
        self._per_release = 4.0 if adjacency == "replace-one" else 1.0
        self._precision = 0.0  # sum of (sensitivity / std)^2

    def add_gaussian(self, noise_multiplier: float, count: int = 1) -> _AnalyticGaussianAccountant:
        """Compose ``count`` Gaussian releases of multiplier z (no dp-accounting needed)."""
        if noise_multiplier <= 0:
            raise ValueError("the analytic accountant needs a noise multiplier > 0")
        self._precision += count * self._per_release / noise_multiplier**2
        return self

    def epsilon(self, delta: float) -> float:
        from jfed.privacy.gaussian import analytic_gaussian_epsilon

        if self._precision == 0.0:
            return 0.0
        noise = self._precision**-0.5
        return float(analytic_gaussian_epsilon(1.0, noise, check_open_unit("delta", delta)))

    def delta(self, epsilon: float) -> float:
        from jfed.privacy.gaussian import analytic_gaussian_delta

        if self._precision == 0.0:
            return 0.0
        return float(analytic_gaussian_delta(1.0, self._precision**-0.5, epsilon))


@dataclass(frozen=True)
class Analytic:
    """Exact for compositions of Gaussian releases without sampling (every client in every
    round): the analytic Gaussian mechanism of the combined multiplier. Refuses anything else."""

    name: ClassVar[str] = "analytic-gaussian"

    def make(self, adjacency: str = "add-or-remove") -> _AnalyticGaussianAccountant:
        """A fresh, empty accountant for ``adjacency``."""
        return _AnalyticGaussianAccountant(_check_adjacency(adjacency))

    def gaussian_composer(self, adjacency: str = "add-or-remove") -> _AnalyticGaussianAccountant:
        """Composes Gaussian releases in closed form (``add_gaussian``), no dp-accounting."""
        return self.make(adjacency)

    def gaussian_rounds_noise(
        self, sensitivity: float, epsilon: float, delta: float, rounds: int
    ) -> float:
        """Closed form: R releases of std sigma are one release of std sigma / sqrt(R)."""
        from jfed.privacy.gaussian import analytic_gaussian_noise

        return float(analytic_gaussian_noise(sensitivity, epsilon, delta)) * rounds**0.5


class _BasicCompositionAccountant(_GaussianComposer):
    """Each Gaussian release certified by the classic bound (Dwork and Roth, Thm A.1) at delta /
    R, the R releases composed by basic composition: eps = sum of the per-release eps."""

    name = "classic"
    refusal = "composes Gaussian releases only"

    def __init__(self, adjacency: str) -> None:
        self._per_release = 2.0 if adjacency == "replace-one" else 1.0
        self._multipliers: list[float] = []

    def add_gaussian(self, noise_multiplier: float, count: int = 1) -> _BasicCompositionAccountant:
        """Compose ``count`` Gaussian releases of multiplier z (no dp-accounting needed)."""
        self._multipliers += [noise_multiplier / self._per_release] * count
        return self

    def epsilon(self, delta: float) -> float:
        from jfed.privacy.gaussian import classic_gaussian_epsilon

        share = check_open_unit("delta", delta) / max(1, len(self._multipliers))
        return float(sum(classic_gaussian_epsilon(1.0, z, share) for z in self._multipliers))

    def delta(self, epsilon: float) -> float:
        raise ValueError("basic composition of classic Gaussian bounds answers eps for a delta")


@dataclass(frozen=True)
class Classic:
    """The classic Gaussian bound per release at (eps / R, delta / R), composed by basic
    composition: loose, but the textbook calibration (needs eps / R < 1 per release)."""

    name: ClassVar[str] = "classic-gaussian+basic-composition"

    def make(self, adjacency: str = "add-or-remove") -> _BasicCompositionAccountant:
        """A fresh, empty accountant for ``adjacency``."""
        return _BasicCompositionAccountant(_check_adjacency(adjacency))

    def gaussian_composer(self, adjacency: str = "add-or-remove") -> _BasicCompositionAccountant:
        """Composes Gaussian releases in closed form (``add_gaussian``), no dp-accounting."""
        return self.make(adjacency)

    def gaussian_rounds_noise(
        self, sensitivity: float, epsilon: float, delta: float, rounds: int
    ) -> float:
        """Closed form of the classic bound at (eps / R, delta / R)."""
        from jfed.privacy.gaussian import classic_gaussian_noise

        return classic_gaussian_noise(sensitivity, epsilon / rounds, delta / rounds)


class _BasicAccountant:
    """Basic composition of exact single-release guarantees: a Laplace release of multiplier z
    spends eps = 1/z, randomized response its exact pure eps, an (eps_i, delta_i) release its
    own, a Gaussian release the analytic Gaussian's eps at an equal share of what remains of
    delta; eps and delta add over releases. A
    :class:`~jfed.privacy.accountants.ParallelDpEvent` spends its worst branch's eps."""

    def __init__(self, adjacency: str) -> None:
        self._adjacency = adjacency
        self._releases: list = []

    def compose(self, event: dp_accounting.DpEvent, count: int = 1) -> _BasicAccountant:
        from dp_accounting import dp_event as events

        from jfed.privacy.accountants import ParallelDpEvent

        count = check_int_range("count", count, 1, 10**9)
        if isinstance(event, events.SelfComposedDpEvent):
            return self.compose(event.event, count * event.count)
        if isinstance(event, events.ComposedDpEvent):
            for inner in event.events:
                self.compose(inner, count)
            return self
        from jfed.privacy.accountants import ApproximateDpEvent

        supported = (events.LaplaceDpEvent, events.GaussianDpEvent, ApproximateDpEvent,
                     events.RandomizedResponseDpEvent, ParallelDpEvent)  # fmt: skip
        if not isinstance(event, supported):
            raise ValueError(
                f"basic composition takes Laplace, Gaussian, randomized-response and parallel "
                f"events, not {type(event).__name__} (use Pld())"
            )
        self._releases += [event] * count
        return self

    def _gaussians(self) -> int:
        from dp_accounting import dp_event as events

        return sum(isinstance(e, events.GaussianDpEvent) for e in self._releases)

    def epsilon(self, delta: float) -> float:
        from dp_accounting import dp_event as events

        from jfed.privacy.accountants import ApproximateDpEvent, ParallelDpEvent
        from jfed.privacy.gaussian import analytic_gaussian_epsilon

        stated = sum(e.delta for e in self._releases if isinstance(e, ApproximateDpEvent))
        if stated > delta:
            raise ValueError(f"the releases state delta {stated} > delta={delta}")
        if self._gaussians():
            check_open_unit("delta", delta - stated)
        share = (delta - stated) / max(1, self._gaussians())
        total = 0.0
        for release in self._releases:
            if isinstance(release, events.LaplaceDpEvent):
                total += 1.0 / release.noise_multiplier
            elif isinstance(release, events.GaussianDpEvent):
                total += float(analytic_gaussian_epsilon(1.0, release.noise_multiplier, share))
            elif isinstance(release, ApproximateDpEvent):
                total += release.epsilon
            elif isinstance(release, events.RandomizedResponseDpEvent):
                noise, buckets = release.noise_parameter, release.num_buckets
                if noise == 0.0:
                    return math.inf  # the true bucket always: no privacy
                total += math.log1p(buckets * (1.0 - noise) / noise)
            elif isinstance(release, ParallelDpEvent):
                total += max(
                    _BasicAccountant(self._adjacency).compose(branch).epsilon(share)
                    for branch in release.branches
                )
        return total

    def delta(self, epsilon: float) -> float:
        raise ValueError("basic composition answers eps for a delta")


@dataclass(frozen=True)
class Basic:
    """Basic composition of exact single releases (Laplace, randomized response, the analytic
    Gaussian), with parallel composition over disjoint data: for runs of a few releases, where
    it is what the closed forms calibrate to."""

    name: ClassVar[str] = "basic composition of exact releases"

    def make(self, adjacency: str = "add-or-remove") -> _BasicAccountant:
        """A fresh, empty accountant for ``adjacency``."""
        return _BasicAccountant(_check_adjacency(adjacency))


AccountantSpec = Pld | Rdp | Zcdp | Analytic | Classic | Basic
# the command line's names for the accountants (its --accountant flags); nothing else names one
ACCOUNTANTS_BY_NAME = {"pld": Pld, "rdp": Rdp, "zcdp": Zcdp, "analytic": Analytic,
                       "classic": Classic}  # fmt: skip


def via(accountant: AccountantSpec) -> str:
    """What a notion adds for ``accountant``: ``" via zCDP"`` for the zCDP conversion, else
    nothing."""
    return getattr(accountant, "via", "")


def accountant_named(name: str) -> AccountantSpec:
    """The accountant a flag names (``--accountant zcdp``); ``ValueError`` listing the names."""
    if name not in ACCOUNTANTS_BY_NAME:
        raise ValueError(
            f"unknown accountant {name!r}; expected one of {list(ACCOUNTANTS_BY_NAME)}"
        )
    return ACCOUNTANTS_BY_NAME[name]()


def gaussian_rounds_event(noise_multiplier: float, rounds: int = 1) -> dp_accounting.DpEvent:
    """``SelfComposed(Gaussian(z), R)``: R Gaussian releases of one client's whole contribution
    (every client takes part in every round; ``Gaussian(z)`` itself for R = 1).

    Args:
      noise_multiplier: z = noise std / L2 sensitivity (> 0).
      rounds: R >= 1.
    """
    return poisson_rounds_event(noise_multiplier, 1.0, rounds)


def poisson_rounds_event(
    noise_multiplier: float, sampling_rate: float, rounds: int
) -> dp_accounting.DpEvent:
    """``SelfComposed(PoissonSampled(q, Gaussian(z)), R)``: R rounds of a Gaussian sum over a
    cohort where each client takes part independently with probability q.

    Its natural adjacency is add-or-remove (Poisson sampling is analysed for it); PLD also
    certifies it under replace-one.

    Args:
      noise_multiplier: z = noise std / clip_norm (> 0), as in
        :meth:`~jfed.privacy.GaussianSumQuery.noised_sum`.
      sampling_rate: q in (0, 1]; 1 is full participation (the Poisson wrapper is dropped).
      rounds: R >= 1.
    """
    from jfed.privacy.accountants import subsampled_gaussian_event

    return subsampled_gaussian_event(noise_multiplier, sampling_rate, rounds, "poisson")


def fixed_cohort_rounds_event(
    noise_multiplier: float, population: int, cohort: int, rounds: int
) -> dp_accounting.DpEvent:
    """``SelfComposed(SampledWithoutReplacement(N, K, Gaussian(z / 2)), R)``: R rounds of a
    Gaussian sum over a uniformly drawn cohort of exactly K of N clients.

    Its natural adjacency is replace-one (with a fixed cohort size, adding a client would change
    the population); dp-accounting composes it with :class:`Rdp` under replace-one only. There a
    Gaussian event's noise multiplier is std / the distance between neighbouring outputs, and
    swapping one client's clipped update moves the sum by up to ``2 clip_norm``: hence ``z / 2``.

    Args:
      noise_multiplier: z = noise std / clip_norm (> 0), as in
        :meth:`~jfed.privacy.GaussianSumQuery.noised_sum`.
      population: N >= 1 clients.
      cohort: K in [1, N] clients per round (K = N: everyone, every round).
      rounds: R >= 1.
    """
    import dp_accounting

    noise_multiplier = check_positive("noise_multiplier", noise_multiplier)
    population = check_int_range("population", population, 1, 2**62)
    cohort = check_int_range("cohort", cohort, 1, population)
    rounds = check_int_range("rounds", rounds, 1, 2**62)
    # built here rather than by subsampled_gaussian_event, which drops the sample at K = N and
    # would leave a bare Gaussian(z / 2) that certify cannot tell from a misread Gaussian(z)
    step = dp_accounting.SampledWithoutReplacementDpEvent(
        population, cohort, dp_accounting.GaussianDpEvent(noise_multiplier / 2.0)
    )
    return dp_accounting.SelfComposedDpEvent(step, rounds)


def _walk(event: dp_accounting.DpEvent, inside_sample: bool = False):
    """Every node of an event tree, with whether it lies inside a without-replacement sample."""
    from dp_accounting import dp_event as events

    yield event, inside_sample
    inside_sample = inside_sample or isinstance(event, events.SampledWithoutReplacementDpEvent)
    children = list(getattr(event, "events", ()))
    if isinstance(getattr(event, "event", None), events.DpEvent):
        children.append(event.event)
    for child in children:
        yield from _walk(child, inside_sample)


def _check_event(event: dp_accounting.DpEvent, accountant: AccountantSpec, adjacency: str) -> None:
    """Refuse the combinations the module docstring lists, with the reason and the remedy."""
    from dp_accounting import dp_event as events

    _check_adjacency(adjacency)
    nodes = list(_walk(event))
    rdp_replace_one = isinstance(accountant, Rdp) and adjacency == "replace-one"
    if any(isinstance(e, events.SampledWithoutReplacementDpEvent) for e, _ in nodes):
        if not rdp_replace_one:
            raise ValueError(
                "sampling without replacement (a fixed cohort) is composed only by Rdp() under "
                f"replace-one adjacency; got accountant={accountant}, adjacency={adjacency!r}"
            )
    if rdp_replace_one and any(
        isinstance(e, events.GaussianDpEvent) and not inside for e, inside in nodes
    ):
        raise ValueError(
            "under replace-one adjacency dp-accounting's RDP accountant reads GaussianDpEvent(z) "
            "as noise std / the distance between neighbouring outputs (2 clip_norm for a clipped "
            "sum), but jfed's events state z = noise std / clip_norm: certify this event with "
            "Pld(), which doubles the sensitivity itself"
        )


def spent(
    event: dp_accounting.DpEvent,
    delta: float,
    *,
    accountant: AccountantSpec = Pld(),
    adjacency: str = "add-or-remove",
) -> float:
    """eps at ``delta`` of ``event`` under ``accountant`` (what :func:`certify` states);
    ``delta`` may be 0 for releases with a pure eps (the accountant refuses it otherwise)."""
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"expected delta in [0, 1), got delta={delta}")
    _check_event(event, accountant, adjacency)
    return float(accountant.make(adjacency).compose(event).epsilon(delta))


def certify(
    event: dp_accounting.DpEvent,
    delta: float,
    *,
    accountant: AccountantSpec = Pld(),
    adjacency: str = "add-or-remove",
    notion: str,
    protected: str,
    trust_model: str,
) -> PrivacyGuarantee:
    """The (eps, delta) guarantee of everything a run released, composed in ``event``.

    Args:
      event: the run's composed event, e.g. :func:`poisson_rounds_event` or a
        ``ComposedDpEvent`` of several releases.
      delta: in (0, 1).
      accountant: :class:`Pld` (default), :class:`Rdp`, :class:`Zcdp`, :class:`Analytic`
        (exact for Gaussian releases without sampling) or :class:`Classic`.
      adjacency: ``"add-or-remove"``, ``"replace-one"``, or ``"bounded"`` (a release's
        sensitivity is the distance between its outputs on any two neighbouring inputs, as for
        one client's message under local DP; the notion then states the neighbours itself).
      notion: the DP notion, e.g. ``"central (eps, delta)-DP"``; a central adjacency is
        appended.
      protected: what one adjacency changes, e.g. ``"one client's whole dataset"``.
      trust_model: who sees what, e.g. ``"trusted server adds the noise"``.

    Returns:
      A :class:`~jfed.privacy.PrivacyGuarantee` with ``accountant`` the spec's name, ``notion``
      ending in ``", <adjacency> adjacency"`` and ``rho`` set under :class:`Zcdp`.

    Example::

        event = poisson_rounds_event(1.1, 0.01, 1000)
        guarantee = certify(event, 1e-6, notion="central (eps, delta)-DP",
                            protected="one client's data", trust_model="trusted server")
    """
    delta = check_open_unit("delta", delta)
    _check_event(event, accountant, adjacency)
    return stated(accountant.make(adjacency).compose(event), delta, accountant=accountant,
                  adjacency=adjacency, notion=notion, protected=protected,
                  trust_model=trust_model)  # fmt: skip


def stated(
    composed, delta: float, *, accountant: AccountantSpec, adjacency: str, notion: str,
    protected: str, trust_model: str,
) -> PrivacyGuarantee:  # fmt: skip
    """The guarantee an accountant that has composed a run's releases states at ``delta``."""
    return PrivacyGuarantee(
        epsilon=float(composed.epsilon(delta)),
        delta=delta,
        accountant=accountant.name,
        notion=notion if adjacency == "bounded" else f"{notion}, {adjacency} adjacency",
        protected=protected,
        trust_model=trust_model,
        rho=float(composed.rho) if isinstance(accountant, Zcdp) else None,
    )


@functools.cache
def _privacy_accountant_view() -> type:
    """A jfed accountant seen as a ``dp_accounting.PrivacyAccountant`` (for
    ``calibrate_dp_mechanism``), so calibration composes through the accountant certify uses."""
    import dp_accounting

    from jfed.privacy.accountants import NEIGHBORING

    class View(dp_accounting.PrivacyAccountant):
        def __init__(self, inner: Accountant, adjacency: str) -> None:
            super().__init__(NEIGHBORING[_convention(adjacency)])
            self._inner = inner

        def _maybe_compose(self, event, count, do_compose):
            try:  # a dry run (supports()) composes into a copy
                (self._inner if do_compose else copy.deepcopy(self._inner)).compose(event, count)
            except ValueError as error:
                return self.CompositionErrorDetails(event, str(error))
            return None

        def get_epsilon(self, target_delta: float) -> float:
            return self._inner.epsilon(target_delta)

        def get_delta(self, target_epsilon: float) -> float:
            return self._inner.delta(target_epsilon)

    return View


def calibrate(
    make_event: Callable[[float], dp_accounting.DpEvent],
    epsilon: float,
    delta: float,
    *,
    accountant: AccountantSpec = Pld(),
    adjacency: str = "add-or-remove",
    tolerance: float = 1e-6,
) -> float:
    """The smallest noise multiplier z for which ``make_event(z)`` is (eps, delta)-DP.

    The noise is bracketed by doubling and halving from z = 1 (as
    :func:`~jfed.privacy.calibrate_noise_multiplier` does), then refined by
    ``dp_accounting.calibrate_dp_mechanism``, which returns a z whose eps is at most the target.

    Args:
      make_event: z -> the run's event, e.g. ``lambda z: poisson_rounds_event(z, q, R)``; eps
        must decrease as z grows.
      epsilon: target eps > 0.
      delta: target delta in (0, 1).
      accountant, adjacency: as in :func:`certify`.
      tolerance: absolute tolerance on z (> 0).

    Example::

        z = calibrate(lambda z: poisson_rounds_event(z, 0.01, 1000), 2.0, 1e-6)
    """
    import dp_accounting

    from jfed.privacy.calibration import _bracket

    epsilon = check_positive("epsilon", epsilon)
    delta = check_open_unit("delta", delta)
    tolerance = check_positive("tolerance", tolerance)
    _check_event(make_event(1.0), accountant, adjacency)

    def eps_at(noise_multiplier: float) -> float:
        return accountant.make(adjacency).compose(make_event(noise_multiplier)).epsilon(delta)

    lo, hi = _bracket(eps_at, epsilon, epsilon)
    view = _privacy_accountant_view()
    return float(
        dp_accounting.calibrate_dp_mechanism(
            lambda: view(accountant.make(adjacency), adjacency),
            make_event,
            epsilon,
            delta,
            bracket_interval=dp_accounting.ExplicitBracketInterval(lo, hi),
            tol=tolerance,
        )
    )


@dataclass(frozen=True)
class OptimalPure:
    """The optimal composition of pure eps0-DP releases of one eps0 (Kairouz, Oh and
    Viswanath), computed exactly from the binomial law of binary randomized response
    (:class:`~jfed.privacy.accountants.OptimalPureCompositionAccountant`): exact for two-point
    and binary randomized-response reports, fast at millions of releases, where a PLD grid
    would be as wide as the composed loss. (dp-accounting 0.6's ``PLDAccountant`` composes a
    ``RandomizedResponseDpEvent`` once whatever its count, so it cannot stand in here.)"""

    name: ClassVar[str] = "optimal composition of pure eps-DP (Kairouz-Oh-Viswanath, exact)"

    def make(self, adjacency: str = "replace-one") -> Accountant:
        """A fresh, empty accountant (pure releases compose alike under every adjacency)."""
        from jfed.privacy.accountants import OptimalPureCompositionAccountant

        _check_adjacency(adjacency)
        return OptimalPureCompositionAccountant()
