"""The one accountant system: events -> the guarantee they certify, and a target -> the noise.

Host side, float64. Every accountant is a ``dp_accounting.PrivacyAccountant`` (dp-accounting's
PLD and RDP, and jfed's own in :mod:`jfed.privacy.accountants`), made by a small frozen spec:

==================  ===========================================================================
spec (its key)      accountant
==================  ===========================================================================
``Pld()`` pld       dp-accounting's privacy loss distributions: numerically tight upper bounds;
                    Poisson sampling, either adjacency
``Rdp()`` rdp       dp-accounting's Renyi DP; the only one for sampling without replacement
``Zcdp()`` zcdp     rho adds over releases, converted once (add-or-remove, no sampling; the
                    discrete Gaussian's and Skellam's rho too)
``Analytic()``      exact for Gaussian releases without sampling (the analytic Gaussian);
                    analytic
``Classic()``       the classic bound per release at (eps / R, delta / R), basic composition;
                    classic
``Basic()``         basic composition of exact single releases, with parallel branches
``Advanced()``      the advanced composition theorem over (eps_i, delta_i) releases
``OptimalPure()``   the optimal composition of pure eps0-DP releases of one eps0
``DiscreteRdp()``   Renyi DP of the integer-grid mechanisms (discrete Gaussian, distributed
                    discrete Gaussian, Skellam, discrete Laplace), Poisson sampling by Zhu and
                    Wang's general bound; discrete-rdp
==================  ===========================================================================

:data:`ACCOUNTANTS` maps each key to its spec: the command line's ``--accountant`` choices are
those keys, and :func:`accountant_named` is the only place a name becomes an accountant. The
adjacency is :class:`~jfed.privacy.Adjacency`. :func:`certify` turns a composed ``DpEvent``
into a :class:`~jfed.privacy.PrivacyGuarantee`; :func:`calibrate` finds the least noise
multiplier for a target (eps, delta) through the very same accountant, and
:func:`calibrate_grid` a whole eps grid at once. dp-accounting is imported inside the functions:
it takes about a second to load.

Noise multiplier convention. jfed's events state ``z = noise std / C``, where C bounds one
protected unit's contribution (:mod:`jfed.privacy.aggregators`). Neighbouring sums differ by at
most C under add-or-remove and 2C under replace-one. dp-accounting's PLD accountant doubles the
sensitivity itself under replace-one (its ``GaussianDpEvent(z)`` means std / C under both
adjacencies); its RDP accountant does not (under replace-one ``GaussianDpEvent(z)`` means std /
the distance between neighbouring outputs, so a clipped sum needs ``z / 2``). Hence:

- :func:`poisson_sampled` and :func:`poisson_rounds_event` state ``Gaussian(z)``: exact under
  add-or-remove (PLD, RDP) and under replace-one with PLD;
- :func:`sampled_without_replacement` (and :func:`fixed_cohort_rounds_event`) state
  ``Gaussian(z / 2)`` inside the without-replacement sample: only dp-accounting's RDP accountant
  under replace-one composes it;
- :func:`certify` and :func:`calibrate` refuse what would silently halve the sensitivity: a
  Gaussian outside a without-replacement sample under ``Rdp()`` with replace-one, and ``Zcdp()``
  with replace-one.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np

from jfed._validation import check_int_range, check_open_unit, check_positive
from jfed.privacy.guarantee import Adjacency, PrivacyGuarantee

if TYPE_CHECKING:  # dp-accounting takes about a second to load: imported where it is used
    import dp_accounting

# doublings / halvings from a noise multiplier of 1 before giving up: 2^+-40 covers every noise
# a guarantee can use, and a failed search stops in seconds rather than running on
_MAX_BRACKET_STEPS = 40


@dataclass(frozen=True)
class _Spec:
    """What every accountant spec states (class attributes) and does (``make``).

    ``key``: its name on the command line and in :data:`ACCOUNTANTS`; ``name``: how records
    name it; ``composes_sampling``: whether it amplifies by subsampling; ``via``: what a notion
    adds for it (``" via zCDP"``)."""

    key: ClassVar[str]
    name: ClassVar[str]  # for the CLI's accountants, their key: a record names what was asked
    composes_sampling: ClassVar[bool] = False
    via: ClassVar[str] = ""

    def make(self, adjacency: Adjacency | str = Adjacency.ADD_OR_REMOVE):
        """A fresh, empty ``dp_accounting.PrivacyAccountant`` for ``adjacency``."""
        raise NotImplementedError

    def gaussian_rounds_noise(
        self, sensitivity: float, epsilon: float, delta: float, rounds: int
    ) -> float:
        """Least noise std of ``rounds`` Gaussian releases of L2 sensitivity ``sensitivity``
        (every unit in every round) for (eps, delta): a search through this accountant (the
        closed-form accountants override it)."""
        import dp_accounting

        # every spec is one of AccountantSpec's classes: _Spec itself is never made
        multiplier = calibrate(
            lambda z: dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), rounds),
            epsilon, delta, accountant=cast("AccountantSpec", self), adjacency=Adjacency.BOUNDED,
        )  # fmt: skip
        return multiplier * sensitivity


@dataclass(frozen=True)
class Pld(_Spec):
    """dp-accounting's privacy loss distribution accountant: numerically tight upper bounds.

    Composes Gaussian, Laplace and Poisson-subsampled Gaussian events under either adjacency;
    not sampling without replacement (use :class:`Rdp`).

    Attributes:
      discretization: the value discretization interval (> 0); the bound stays an upper bound at
        any interval, a coarser one is faster and looser.
    """

    discretization: float = 1e-4
    key: ClassVar[str] = "pld"
    name: ClassVar[str] = "pld"
    composes_sampling: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_positive("discretization", self.discretization)

    def make(self, adjacency: Adjacency | str = Adjacency.ADD_OR_REMOVE):
        import dp_accounting

        from jfed.privacy.accountants import NEIGHBORING

        relation = NEIGHBORING[Adjacency.of(adjacency)]
        return dp_accounting.pld.PLDAccountant(relation, self.discretization)


@dataclass(frozen=True)
class Rdp(_Spec):
    """dp-accounting's Renyi DP accountant: looser than :class:`Pld`, but it alone composes
    sampling without replacement (a fixed cohort, under replace-one)."""

    key: ClassVar[str] = "rdp"
    name: ClassVar[str] = "rdp"
    composes_sampling: ClassVar[bool] = True

    def make(self, adjacency: Adjacency | str = Adjacency.ADD_OR_REMOVE):
        import dp_accounting

        from jfed.privacy.accountants import NEIGHBORING

        return dp_accounting.rdp.RdpAccountant(
            neighboring_relation=NEIGHBORING[Adjacency.of(adjacency)]
        )


@dataclass(frozen=True)
class Zcdp(_Spec):
    """Sums zCDP rho (Gaussian, zCDP, Laplace, randomized response), converted to eps once.
    Add-or-remove adjacency only; no subsampling amplification."""

    key: ClassVar[str] = "zcdp"
    name: ClassVar[str] = "zcdp"
    via: ClassVar[str] = " via zCDP"

    def make(self, adjacency: Adjacency | str = Adjacency.ADD_OR_REMOVE):
        from jfed.privacy.accountants import ZcdpAccountant

        return ZcdpAccountant(Adjacency.of(adjacency))

    def gaussian_rounds_noise(
        self, sensitivity: float, epsilon: float, delta: float, rounds: int
    ) -> float:
        """Closed form: rho = R Delta^2 / (2 sigma^2) adds over rounds and converts once."""
        from jfed.privacy import zcdp

        return float(zcdp.calibrate_gaussian(sensitivity, epsilon, delta, rounds))


@dataclass(frozen=True)
class Analytic(_Spec):
    """Exact for compositions of Gaussian releases without sampling (every client in every
    round): the analytic Gaussian mechanism of the combined multiplier. Refuses anything else."""

    key: ClassVar[str] = "analytic"
    name: ClassVar[str] = "analytic"

    def make(self, adjacency: Adjacency | str = Adjacency.ADD_OR_REMOVE):
        from jfed.privacy.accountants import AnalyticGaussian

        return AnalyticGaussian(Adjacency.of(adjacency))

    def gaussian_rounds_noise(
        self, sensitivity: float, epsilon: float, delta: float, rounds: int
    ) -> float:
        """Closed form: R releases of std sigma are one release of std sigma / sqrt(R)."""
        from jfed.privacy.gaussian import analytic_gaussian_noise

        return float(analytic_gaussian_noise(sensitivity, epsilon, delta)) * rounds**0.5


@dataclass(frozen=True)
class Classic(_Spec):
    """The classic Gaussian bound per release at (eps / R, delta / R), composed by basic
    composition: loose, but the textbook calibration (needs eps / R < 1 per release)."""

    key: ClassVar[str] = "classic"
    name: ClassVar[str] = "classic"

    def make(self, adjacency: Adjacency | str = Adjacency.ADD_OR_REMOVE):
        from jfed.privacy.accountants import ClassicGaussian

        return ClassicGaussian(Adjacency.of(adjacency))

    def gaussian_rounds_noise(
        self, sensitivity: float, epsilon: float, delta: float, rounds: int
    ) -> float:
        """Closed form of the classic bound at (eps / R, delta / R)."""
        from jfed.privacy.gaussian import classic_gaussian_noise

        return classic_gaussian_noise(sensitivity, epsilon / rounds, delta / rounds)


@dataclass(frozen=True)
class Basic(_Spec):
    """Basic composition of exact single releases (Laplace, randomized response, the analytic
    Gaussian), with parallel composition over disjoint data: for runs of a few releases, where
    it is what the closed forms calibrate to."""

    key: ClassVar[str] = "basic"
    name: ClassVar[str] = "basic composition of exact releases"

    def make(self, adjacency: Adjacency | str = Adjacency.ADD_OR_REMOVE):
        from jfed.privacy.accountants import BasicComposition

        return BasicComposition(Adjacency.of(adjacency))


@dataclass(frozen=True)
class Advanced(_Spec):
    """The advanced composition theorem over (eps_i, delta_i) and pure releases (Dwork and Roth
    Thm 3.20, heterogeneous form), never worse than basic composition."""

    key: ClassVar[str] = "advanced"
    name: ClassVar[str] = "advanced-composition"

    def make(self, adjacency: Adjacency | str = Adjacency.ADD_OR_REMOVE):
        from jfed.privacy.accountants import AdvancedComposition

        return AdvancedComposition(Adjacency.of(adjacency))


@dataclass(frozen=True)
class OptimalPure(_Spec):
    """The optimal composition of pure eps0-DP releases of one eps0 (Kairouz, Oh and
    Viswanath), computed exactly from the binomial law of binary randomized response
    (:class:`~jfed.privacy.accountants.OptimalPureComposition`): exact for two-point
    and binary randomized-response reports, fast at millions of releases, where a PLD grid
    would be as wide as the composed loss. (dp-accounting 0.6's ``PLDAccountant`` composes a
    ``RandomizedResponseDpEvent`` once whatever its count, so it cannot stand in here.)"""

    key: ClassVar[str] = "optimal-pure"
    name: ClassVar[str] = "optimal composition of pure eps-DP (Kairouz-Oh-Viswanath, exact)"

    def make(self, adjacency: Adjacency | str = Adjacency.REPLACE_ONE):
        from jfed.privacy.accountants import OptimalPureComposition

        return OptimalPureComposition(Adjacency.of(adjacency))


@dataclass(frozen=True)
class DiscreteRdp(_Spec):
    """Renyi DP of the integer-grid mechanisms (discrete Gaussian, distributed discrete Gaussian,
    Skellam, discrete Laplace), alone or Poisson-sampled (Zhu and Wang's general bound), beside
    Gaussian events: :class:`~jfed.privacy.discrete_accounting.DiscreteRdpAccountant`.
    Add-or-remove, zero-out or bounded adjacency; replace-one is refused."""

    key: ClassVar[str] = "discrete-rdp"
    name: ClassVar[str] = "discrete-rdp"
    composes_sampling: ClassVar[bool] = True

    def make(self, adjacency: Adjacency | str = Adjacency.ADD_OR_REMOVE):
        from jfed.privacy.discrete_accounting import DiscreteRdpAccountant

        return DiscreteRdpAccountant(adjacency=Adjacency.of(adjacency))


AccountantSpec = (
    Pld | Rdp | Zcdp | Analytic | Classic | Basic | Advanced | OptimalPure | DiscreteRdp
)
ACCOUNTANTS: dict[str, type[AccountantSpec]] = {
    spec.key: spec
    for spec in (Pld, Rdp, Zcdp, Analytic, Classic, Basic, Advanced, OptimalPure, DiscreteRdp)
}
"""Every accountant spec by its key: the one table the command line's choices come from."""


def accountant_keys(*, sampling: bool | None = None) -> tuple[str, ...]:
    """The keys of :data:`ACCOUNTANTS`, or of those that do (``sampling=True``) or do not
    amplify by subsampling."""
    return tuple(
        k for k, s in ACCOUNTANTS.items() if sampling is None or s.composes_sampling is sampling
    )


def accountant_named(name: str) -> AccountantSpec:
    """The accountant a flag names (``--accountant zcdp``); ``ValueError`` listing the names."""
    if name not in ACCOUNTANTS:
        raise ValueError(f"unknown accountant {name!r}; expected one of {list(ACCOUNTANTS)}")
    return ACCOUNTANTS[name]()


def as_accountant(accountant: AccountantSpec | str) -> AccountantSpec:
    """``accountant`` as a spec: a spec as it is, a key through :func:`accountant_named`."""
    return accountant_named(accountant) if isinstance(accountant, str) else accountant


def via(accountant: AccountantSpec) -> str:
    """What a notion adds for ``accountant``: ``" via zCDP"`` for the zCDP conversion, else
    nothing."""
    return accountant.via


# ---------------------------------------------------------------------------------- events


def poisson_sampled(event: dp_accounting.DpEvent, rate: float) -> dp_accounting.DpEvent:
    """``event`` released over a Poisson sample (each unit independently with probability
    ``rate``; ``rate = 1``: everyone, the event itself). Natural adjacency: add-or-remove."""
    import dp_accounting

    rate = float(rate)
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"expected rate in (0, 1], got rate={rate}")
    return event if rate == 1.0 else dp_accounting.PoissonSampledDpEvent(rate, event)


def _halve_multipliers(event: dp_accounting.DpEvent) -> dp_accounting.DpEvent:
    """``event`` with every Gaussian's multiplier halved (z = std / C becomes std / 2C, the
    replace-one distance of a clipped sum, as dp-accounting's RDP accountant reads it)."""
    import dp_accounting
    from dp_accounting import dp_event as events

    if isinstance(event, events.GaussianDpEvent):
        return dp_accounting.GaussianDpEvent(event.noise_multiplier / 2.0)
    if isinstance(event, events.SelfComposedDpEvent):
        return dp_accounting.SelfComposedDpEvent(_halve_multipliers(event.event), event.count)
    if isinstance(event, events.ComposedDpEvent):
        return dp_accounting.ComposedDpEvent([_halve_multipliers(e) for e in event.events])
    if isinstance(event, events.NoOpDpEvent | events.NonPrivateDpEvent):
        return event
    raise ValueError(
        f"a fixed-size sample is accounted for Gaussian releases only, not {type(event).__name__}"
    )


def sampled_without_replacement(
    event: dp_accounting.DpEvent, population: int, size: int
) -> dp_accounting.DpEvent:
    """``event`` (stated with ``z = std / C``) released over a uniform sample of exactly
    ``size`` of ``population`` units: ``SampledWithoutReplacement(N, K, event with z / 2)``.

    Its natural adjacency is replace-one (with a fixed sample size, adding a unit would change
    the population); dp-accounting composes it with :class:`Rdp` under replace-one only. There a
    Gaussian event's noise multiplier is std / the distance between neighbouring outputs, and
    swapping one unit's clipped contribution moves the sum by up to ``2 C``: hence ``z / 2``. The
    sample is kept at K = N (a bare halved Gaussian would be misread as ``Gaussian(z)``)."""
    import dp_accounting

    population = check_int_range("population", population, 1, 2**62)
    size = check_int_range("size", size, 1, population)
    return dp_accounting.SampledWithoutReplacementDpEvent(
        population, size, _halve_multipliers(event)
    )


def rounds_of(event: dp_accounting.DpEvent, rounds: int) -> dp_accounting.DpEvent:
    """``rounds`` compositions of ``event`` (``event`` itself for one)."""
    import dp_accounting

    rounds = check_int_range("rounds", rounds, 1, 2**62)
    return event if rounds == 1 else dp_accounting.SelfComposedDpEvent(event, rounds)


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
    cohort where each client takes part independently with probability q (:func:`poisson_sampled`).

    Args:
      noise_multiplier: z = noise std / clip_norm (> 0), as in
        :class:`~jfed.privacy.aggregators.GaussianSum`.
      sampling_rate: q in (0, 1]; 1 is full participation (the Poisson wrapper is dropped).
      rounds: R >= 1.
    """
    import dp_accounting

    noise_multiplier = check_positive("noise_multiplier", noise_multiplier)
    one = poisson_sampled(dp_accounting.GaussianDpEvent(noise_multiplier), sampling_rate)
    return rounds_of(one, rounds)


def fixed_cohort_rounds_event(
    noise_multiplier: float, population: int, cohort: int, rounds: int
) -> dp_accounting.DpEvent:
    """``SelfComposed(SampledWithoutReplacement(N, K, Gaussian(z / 2)), R)``: R rounds of a
    Gaussian sum over a uniformly drawn cohort of exactly K of N clients
    (:func:`sampled_without_replacement`), kept composed even at R = 1.

    Args:
      noise_multiplier: z = noise std / clip_norm (> 0).
      population: N >= 1 clients.
      cohort: K in [1, N] clients per round (K = N: everyone, every round).
      rounds: R >= 1.
    """
    import dp_accounting

    noise_multiplier = check_positive("noise_multiplier", noise_multiplier)
    step = sampled_without_replacement(
        dp_accounting.GaussianDpEvent(noise_multiplier), population, cohort
    )
    return dp_accounting.SelfComposedDpEvent(step, check_int_range("rounds", rounds, 1, 2**62))


def _walk(event: dp_accounting.DpEvent, inside_sample: bool = False):
    """Every node of an event tree, with whether it lies inside a without-replacement sample."""
    from dp_accounting import dp_event as events

    yield event, inside_sample
    inside_sample = inside_sample or isinstance(event, events.SampledWithoutReplacementDpEvent)
    children = list(getattr(event, "events", ()))
    if isinstance(getattr(event, "event", None), events.DpEvent):
        children.append(event.event)
    for child in getattr(event, "branches", ()):
        children.append(child)
    for child in children:
        yield from _walk(child, inside_sample)


def _check_event(
    event: dp_accounting.DpEvent, accountant: AccountantSpec, adjacency: Adjacency
) -> None:
    """Refuse the combinations the module docstring lists, with the reason and the remedy."""
    from dp_accounting import dp_event as events

    nodes = list(_walk(event))
    rdp_replace_one = isinstance(accountant, Rdp) and adjacency is Adjacency.REPLACE_ONE
    if any(isinstance(e, events.SampledWithoutReplacementDpEvent) for e, _ in nodes):
        if not rdp_replace_one:
            raise ValueError(
                "sampling without replacement (a fixed cohort) is composed only by Rdp() under "
                f"replace-one adjacency; got accountant={accountant}, "
                f"adjacency={adjacency.value!r}"
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


def _composed(event: dp_accounting.DpEvent, accountant: AccountantSpec, adjacency: Adjacency):
    """A fresh accountant with ``event`` composed; a top-level parallel event becomes the
    :class:`~jfed.privacy.accountants.ParallelComposition` of its branches."""
    from jfed.privacy.accountants import ParallelComposition, ParallelDpEvent

    if isinstance(event, ParallelDpEvent) and not isinstance(accountant, Basic):
        return ParallelComposition(
            [_composed(branch, accountant, adjacency) for branch in event.branches]
        )
    made = accountant.make(adjacency)
    if not made.supports(event):
        error = made._maybe_compose(event, 0, False)
        reason = error.error_message if error is not None else "unsupported"
        raise ValueError(f"the {accountant.key} accountant cannot compose {event}: {reason}")
    return made.compose(event)


def spent(
    event: dp_accounting.DpEvent,
    delta: float,
    *,
    accountant: AccountantSpec = Pld(),
    adjacency: Adjacency | str = Adjacency.ADD_OR_REMOVE,
) -> float:
    """eps at ``delta`` of ``event`` under ``accountant`` (what :func:`certify` states);
    ``delta`` may be 0 for releases with a pure eps (the accountant refuses it otherwise)."""
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"expected delta in [0, 1), got delta={delta}")
    adjacency = Adjacency.of(adjacency)
    _check_event(event, accountant, adjacency)
    return float(_composed(event, accountant, adjacency).get_epsilon(delta))


def certify(
    event: dp_accounting.DpEvent,
    delta: float,
    *,
    accountant: AccountantSpec = Pld(),
    adjacency: Adjacency | str = Adjacency.ADD_OR_REMOVE,
    notion: str,
    protected: str,
    trust_model: str,
) -> PrivacyGuarantee:
    """The (eps, delta) guarantee of everything a run released, composed in ``event``.

    Args:
      event: the run's composed event, e.g. :func:`poisson_rounds_event` or a
        ``ComposedDpEvent`` of several releases (a top-level
        :class:`~jfed.privacy.ParallelDpEvent` takes its worst branch).
      delta: in (0, 1).
      accountant: a spec of :data:`ACCOUNTANTS` (default :class:`Pld`).
      adjacency: :class:`~jfed.privacy.Adjacency` (or its name); ``BOUNDED``: a release's
        sensitivity is the distance between its outputs on any two neighbouring inputs, as for
        one client's message under local DP (the notion then states the neighbours itself).
      notion: the DP notion, e.g. ``"central (eps, delta)-DP"``; a central adjacency is
        appended (:meth:`~jfed.privacy.Adjacency.states`).
      protected: what one adjacency changes, e.g. ``"one client's whole dataset"``.
      trust_model: who sees what, e.g. ``"trusted server adds the noise"``.

    Returns:
      A :class:`~jfed.privacy.PrivacyGuarantee` with ``accountant`` the spec's name, its
      ``adjacency``, and ``rho`` set under :class:`Zcdp`.

    Example::

        event = poisson_rounds_event(1.1, 0.01, 1000)
        guarantee = certify(event, 1e-6, notion="central (eps, delta)-DP",
                            protected="one client's data", trust_model="trusted server")
    """
    delta = check_open_unit("delta", delta)
    adjacency = Adjacency.of(adjacency)
    _check_event(event, accountant, adjacency)
    epsilon, rho = _certified(event, delta, accountant, adjacency)
    return PrivacyGuarantee(
        epsilon=epsilon,
        delta=delta,
        accountant=accountant.name,
        notion=adjacency.states(notion),
        protected=protected,
        trust_model=trust_model,
        rho=rho,
        adjacency=adjacency,
    )


_CERTIFIED: dict[tuple[str, float, str, Adjacency], tuple[float, float | None]] = {}
"""``(eps, rho)`` already composed, by event, delta, accountant and adjacency
(:func:`_certified`)."""
_CERTIFIED_MOST = 1024


def _certified(
    event: dp_accounting.DpEvent, delta: float, accountant: AccountantSpec, adjacency: Adjacency
) -> tuple[float, float | None]:
    """``(eps at delta, rho under Zcdp else None)`` of ``event``: composed once per (event,
    delta, accountant, adjacency) in a process. The seeds of a sweep certify the same event, and
    a PLD certificate of 100 Poisson rounds takes seconds. Keyed by the event's ``repr`` (every
    ``DpEvent`` is an attrs class whose repr states all its fields, floats exactly; a composed
    event holds a list, so it has no hash)."""
    key = (repr(event), float(delta), repr(accountant), adjacency)
    if key not in _CERTIFIED:
        composed = _composed(event, accountant, adjacency)
        if len(_CERTIFIED) >= _CERTIFIED_MOST:  # a long session's sweeps: forget the oldest
            del _CERTIFIED[next(iter(_CERTIFIED))]
        rho = float(composed.rho) if isinstance(accountant, Zcdp) else None
        _CERTIFIED[key] = (float(composed.get_epsilon(delta)), rho)
    return _CERTIFIED[key]


# ------------------------------------------------------------------ float Gaussian sampling


def reach_delta(shifts: Sequence[float], rate: float = 1.0, releases: int = 1) -> float:
    """The delta float32 Gaussian noise adds by its bounded reach: jfed's private normals
    (:func:`jfed.random.private_normals`) never leave :data:`jfed.random.PRIVATE_NORMAL_REACH`
    standard deviations (9; the sampler reaches 9.155), so an output whose noise would have to
    lie beyond it under a neighbouring input is impossible there, whatever eps: the mass of such
    outputs adds to delta. A release in which one protected unit moves each of its noises by
    ``shifts`` standard deviations (the worst case: the whole shift along one coordinate, as
    for the modulated method's messages, :func:`jfed.algorithms.modulated.reach_statement`),
    taking part with probability ``rate`` (its sampling: without it both inputs give the same
    law), ``releases`` times, adds at most ``releases * rate * sum_s Q(reach - s)`` (a union
    bound; Q the normal tail, :func:`jfed._random.normal_reach_mass`).

    The float32 grid of the draws is not modelled here (nor anywhere: an ideal mechanism's
    guarantee).

    Args:
      shifts: each noise's sensitivity in its standard deviations (1 / z for a sum of
        multiplier z under add-or-remove; 2 / z under replace-one).
      rate: the probability that the unit takes part in one release, in [0, 1].
      releases: how many releases (rounds).
    """
    from jfed._random import normal_reach_mass

    per_release = math.fsum(normal_reach_mass(float(shift)) for shift in shifts)
    return min(1.0, float(releases) * float(rate) * per_release)


# ----------------------------------------------------------------------------- calibration


def bracket(
    eps_at: Callable[[float], float], low_target: float, high_target: float
) -> tuple[float, float]:
    """Noise multipliers ``(lo, hi)`` with eps(lo) >= high_target and eps(hi) <= low_target
    (eps decreases in the noise), found by doubling and halving from 1."""
    hi = 1.0
    for _ in range(_MAX_BRACKET_STEPS):
        if eps_at(hi) <= low_target:
            break
        hi *= 2.0
    else:
        raise ValueError(
            f"cannot bracket the noise multiplier: eps stays above {low_target:g} up to a noise "
            f"multiplier of {hi:g}"
        )
    lo = hi / 2.0
    for _ in range(_MAX_BRACKET_STEPS):
        if eps_at(lo) >= high_target:
            break
        lo /= 2.0
    else:
        raise ValueError(
            f"cannot bracket the noise multiplier: eps stays below {high_target:g} down to a "
            f"noise multiplier of {lo:g}"
        )
    return lo, hi


def calibrate(
    make_event: Callable[[float], dp_accounting.DpEvent],
    epsilon: float,
    delta: float,
    *,
    accountant: AccountantSpec = Pld(),
    adjacency: Adjacency | str = Adjacency.ADD_OR_REMOVE,
    tolerance: float = 1e-6,
) -> float:
    """The smallest noise multiplier z for which ``make_event(z)`` is (eps, delta)-DP.

    The noise is bracketed by doubling and halving from z = 1, then refined by
    ``dp_accounting.calibrate_dp_mechanism`` on fresh accountants of ``accountant``, which
    returns a z whose eps is at most the target and at most ``tolerance`` above the least one.

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

    epsilon = check_positive("epsilon", epsilon)
    delta = check_open_unit("delta", delta)
    tolerance = check_positive("tolerance", tolerance)
    adjacency = Adjacency.of(adjacency)
    _check_event(make_event(1.0), accountant, adjacency)

    def eps_at(noise_multiplier: float) -> float:
        return _composed(make_event(noise_multiplier), accountant, adjacency).get_epsilon(delta)

    lo, hi = bracket(eps_at, epsilon, epsilon)
    return float(
        dp_accounting.calibrate_dp_mechanism(
            lambda: accountant.make(adjacency),
            make_event,
            epsilon,
            delta,
            bracket_interval=dp_accounting.ExplicitBracketInterval(lo, hi),
            tol=tolerance,
        )
    )


def calibrate_grid(
    make_event: Callable[[float], dp_accounting.DpEvent],
    epsilons: Sequence[float] | np.ndarray,
    delta: float,
    *,
    accountant: AccountantSpec = Pld(),
    adjacency: Adjacency | str = Adjacency.ADD_OR_REMOVE,
    tolerance: float = 1e-4,
    grid_size: int = 12,
    max_refinements: int = 6,
    verify: bool | str = "auto",
) -> tuple[np.ndarray, dict]:
    """Noise multipliers for a grid of target eps, reusing accountant work across the grid.

    eps(z) is evaluated on a shared log-spaced grid of noise multipliers, inverted by monotone
    (PCHIP) interpolation of log z against log eps, and refined where a check at interval
    midpoints disagrees with the interpolant by more than ``tolerance``. The answers are then
    raised by the largest disagreement still seen, so every returned z is at least the exact one
    up to that tolerance (conservative).

    Args:
      make_event, delta, accountant, adjacency: as in :func:`calibrate`.
      epsilons: target eps values (any shape and order, > 0).
      tolerance: relative accuracy in z that the interpolation must reach at every checked
        midpoint (the returned values are inflated by the residual disagreement).
      grid_size: initial number of grid points.
      max_refinements: rounds of midpoint checks.
      verify: evaluate the exact eps at every returned z and raise z (by factors of
        ``1 + tolerance``) until it meets its target. ``"auto"`` verifies for :class:`Rdp`,
        whose eps(z) has kinks (a minimum over a finite set of orders) where interpolation can
        err between checks, and whose evaluations are cheap; PLD's curve is smooth, and its
        answers are inflated by the largest disagreement seen at the checks instead.

    Returns:
      ``(noise_multipliers: f64[epsilons.shape], info)`` with ``info["evaluations"]``
      (accountant evaluations spent), ``info["max_relative_error"]`` (the last midpoint
      disagreement) and, when verified, ``info["achieved_epsilons"]`` (the exact eps of every
      returned multiplier, flattened).
    """
    from scipy.interpolate import PchipInterpolator

    epsilons = np.asarray(epsilons, np.float64)
    for value in np.ravel(epsilons):
        check_positive("epsilon", value)
    delta = check_open_unit("delta", delta)
    adjacency = Adjacency.of(adjacency)
    _check_event(make_event(1.0), accountant, adjacency)
    cache: dict[float, float] = {}

    def eps_at(noise: float) -> float:
        if noise not in cache:
            cache[noise] = _composed(make_event(noise), accountant, adjacency).get_epsilon(delta)
        return cache[noise]

    def inverse(nodes: list[float]) -> Callable[[float], float]:
        eps = np.array([eps_at(x) for x in nodes])
        order = np.argsort(eps)
        log_eps, log_noise = np.log(eps[order]), np.log(np.asarray(nodes)[order])
        keep = np.concatenate([[True], np.diff(log_eps) > 0])  # strictly increasing abscissae
        spline = PchipInterpolator(log_eps[keep], log_noise[keep], extrapolate=False)
        return lambda epsilon: float(np.exp(spline(np.log(epsilon))))

    low_target, high_target = float(epsilons.min()), float(epsilons.max())
    lo, hi = bracket(eps_at, low_target, high_target)
    nodes = sorted(np.geomspace(lo, hi, grid_size))
    # intervals worth checking: those whose eps range meets [low_target, high_target]
    active = [
        (left, right)
        for left, right in itertools.pairwise(nodes)
        if eps_at(right) <= high_target and eps_at(left) >= low_target
    ]
    max_error = math.inf
    for _ in range(max_refinements + 1):
        interpolant = inverse(nodes)
        errors = {}
        for left, right in active:
            middle = math.sqrt(left * right)
            errors[(left, middle, right)] = abs(interpolant(eps_at(middle)) / middle - 1.0)
        max_error = max(errors.values(), default=0.0)
        # every evaluated midpoint becomes a node; only the halves of failed intervals are checked
        # again (eps(z) may have kinks: RDP takes a minimum over a finite set of orders)
        nodes = sorted(set(nodes) | {middle for _, middle, _ in errors})
        active = [
            half
            for (left, middle, right), error in errors.items()
            if error > tolerance
            for half in ((left, middle), (middle, right))
        ]
        if not active:
            break
    interpolant = inverse(sorted(set(nodes)))
    noise = np.array([interpolant(e) for e in np.ravel(epsilons)]) * (1.0 + max_error)
    info: dict[str, Any] = {"max_relative_error": max_error}
    if verify is True or (verify == "auto" and isinstance(accountant, Rdp)):
        for index, target in enumerate(np.ravel(epsilons)):
            while eps_at(float(noise[index])) > target:
                noise[index] *= 1.0 + tolerance
        info["achieved_epsilons"] = [eps_at(float(value)) for value in noise]
    info["evaluations"] = len(cache)
    return noise.reshape(epsilons.shape), info


@functools.lru_cache(maxsize=1024)
def _cached_calibration(make_event, epsilon, delta, accountant, adjacency, tolerance) -> float:
    return calibrate(make_event, epsilon, delta, accountant=accountant, adjacency=adjacency,
                     tolerance=tolerance)  # fmt: skip


def calibrate_cached(
    make_event: Callable[[float], dp_accounting.DpEvent],
    epsilon: float,
    delta: float,
    *,
    accountant: AccountantSpec = Pld(),
    adjacency: Adjacency | str = Adjacency.ADD_OR_REMOVE,
    tolerance: float = 1e-6,
) -> float:
    """:func:`calibrate`, answered once per setting: ``make_event`` must be hashable and equal
    for equal settings (a frozen dataclass whose ``__call__(z)`` builds the event; a lambda or a
    ``functools.partial`` compares by identity and is searched again), so that the seeds and
    repeated grid points of a sweep share one search."""
    return _cached_calibration(make_event, float(epsilon), float(delta), accountant,
                               Adjacency.of(adjacency), float(tolerance))  # fmt: skip
