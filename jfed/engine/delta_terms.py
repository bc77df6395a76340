"""The delta a run adds beside its accountant's, each term stated by the object that causes it and
composed from the round's :class:`~jfed.engine.Ledger` for ANY method (docs/guarantee.md):

- a padded cohort its overflow: a Poisson cohort with a static capacity drops clients in a round
  that draws more, and is then not the mechanism its event describes
  (:meth:`jfed.engine.Poisson.overflow_delta`, at the target eps);
- float noise its bounded reach: jfed's float32 normals never leave 9 standard deviations, so an
  output one neighbour cannot produce adds to delta (an aggregator's ``reach_shifts(params)``:
  how far one client moves each of a release's noises, in their standard deviations under
  add-or-remove; or a correlated one's ``run_reach_delta(params, rounds)``;
  :func:`jfed.privacy.reach_delta`); such a run is labelled the ideal real-valued mechanism's
  (:data:`jfed.privacy.IDEAL_MECHANISM`);
- exact grid noise its coupling: under a continuous accountant a discrete Gaussian (an
  aggregator with ``couples``) is certified through the continuous Gaussian it is coupled to,
  and the coupling's total variation adds ``(1 + e^eps) T``
  (:func:`jfed.privacy.discrete_accounting.coupled_gaussian`);
- a secure sum's shares are certified by their own event (the sum of shares under zero-out
  adjacency, the discrete RDP accountant): no term of their own, and never coupled.

An aggregator or cohort is looked at through its wrappers (``inner``: a mean, canaries), so a
user's method gets these terms from the objects it releases with, with no code of its own.
"""

from __future__ import annotations

import math
from typing import Any

from jfed.engine.cohort import All, Uniform
from jfed.engine.schedules import SCHEDULES
from jfed.privacy.guarantee import Adjacency


def stated(aggregator: Any, name: str) -> Any:
    """``aggregator``'s member ``name``, or its wrapped aggregator's (through ``inner``), else
    ``None``."""
    while aggregator is not None:
        if hasattr(aggregator, name):
            return getattr(aggregator, name)
        aggregator = getattr(aggregator, "inner", None)
    return None


def runs(release: Any) -> int:
    """How many times ``release`` runs a round (1 where the ledger does not say, or where its
    loop takes each client once)."""
    if getattr(release, "disjoint_steps", False):
        return 1
    return int(getattr(release, "runs_per_round", 1))


def _sampled(release: Any) -> bool:
    """Whether a cohort's sampling decides who takes part in ``release`` (not a local
    randomizer's, whose guarantee holds for every message)."""
    return not getattr(release.aggregator, "local", False)


def overflow(ledger: Any, epsilon: float, rounds: int) -> tuple[float, float]:
    """``(p, delta)``: the probability that some cohort of one round overflows its capacity
    (a union bound over the round's cohorts) and the delta the overflowing rounds add at
    ``epsilon`` over ``rounds`` (each padded cohort's ``overflow_delta``; 0 for cohorts that
    drop no one)."""
    per_round, delta, seen = 0.0, 0.0, set()
    for release in ledger.releases:
        cohort, n_clients = release.cohort, release.n_clients
        if not _sampled(release) or (cohort, n_clients) in seen:
            continue
        seen.add((cohort, n_clients))
        if hasattr(cohort, "overflow_delta"):
            per_round += cohort.overflow_probability(n_clients)
            delta += cohort.overflow_delta(epsilon, rounds, n_clients)
    return per_round, delta


def participation(cohort: Any, n_clients: int, rounds: int) -> tuple[float, int]:
    """``(rate, releases)``: the probability that one client takes part in a round's release and
    how many rounds it may: a Poisson cohort's rate, a uniform one's ``k / n``, every client
    (1) otherwise, over ``rounds`` rounds; a schedule's clients take part at most its
    pattern's ``participations`` times."""
    if isinstance(cohort, SCHEDULES):
        return 1.0, int(cohort.participation(int(rounds)).participations)
    if isinstance(cohort, Uniform):
        return cohort.size / n_clients, int(rounds)
    if isinstance(cohort, All):
        return 1.0, int(rounds)
    return float(getattr(cohort, "rate", 1.0)), int(rounds)


def floating(ledger: Any) -> bool:
    """Whether a release of the round draws float noise (it states a bounded reach)."""
    return any(stated(r.aggregator, "reach_shifts") is not None
               or stated(r.aggregator, "run_reach_delta") is not None
               for r in ledger.releases)  # fmt: skip


def reach(ledger: Any, hyper: Any, rounds: int) -> float:
    """The delta float noise's bounded reach adds over ``rounds`` rounds at host
    hyper-parameters ``hyper``: per cohort, every noise of its round's releases (each
    release's ``reach_shifts``, doubled under replace-one: one client swapped moves a sum by
    twice the clip), as often as each runs a round, at the cohort's participation
    (:func:`participation`; :func:`jfed.privacy.reach_delta`); plus each correlated release's
    ``run_reach_delta`` over the run. 0 for exact noise."""
    from jfed.privacy.accounting import reach_delta

    parts: list[float] = []
    shifts_of: dict[Any, Any] = {}
    for release in ledger.releases:
        params = release.params(hyper)
        whole_run = stated(release.aggregator, "run_reach_delta")
        if release.correlated and whole_run is not None:
            parts.append(float(whole_run(params, rounds)))
            continue
        shifts = stated(release.aggregator, "reach_shifts")
        if shifts is None:
            continue
        scale = 2.0 if release.adjacency is Adjacency.REPLACE_ONE else 1.0
        cohort = release.cohort if _sampled(release) else All()
        found = shifts_of.setdefault((cohort, release.n_clients), [])
        found += [scale * shift for shift in shifts(params)] * runs(release)
    for (cohort, n_clients), shifts in shifts_of.items():
        rate, releases = participation(cohort, n_clients, rounds)
        parts.append(reach_delta(shifts, rate, releases))
    return math.fsum(parts)


def couples(ledger: Any, accountant: Any) -> bool:
    """Whether ``accountant`` certifies the run through the continuous Gaussians its exact
    noise is coupled to: a continuous accountant (not the discrete RDP one, which reads the
    discrete events themselves) and a release on coupled noise (``couples``)."""
    from jfed.privacy.accounting import DiscreteRdp

    if isinstance(accountant, DiscreteRdp):
        return False
    return any(stated(r.aggregator, "couples") for r in ledger.releases)


def coupling(event: Any, epsilon: float) -> float:
    """The delta the coupling adds to a run whose (uncoupled) event is ``event``, at
    ``epsilon``: ``(1 + e^eps) T``, T the total variation over every discrete Gaussian
    coordinate the run draws (:func:`~jfed.privacy.discrete_accounting.coupling_delta`)."""
    from jfed.privacy.discrete_accounting import (
        coupling_delta,
        coupling_total_variation,
        discrete_coordinates,
    )

    return coupling_delta(epsilon, coupling_total_variation(discrete_coordinates(event)))


def coupled(event: Any) -> Any:
    """``event`` with every central discrete Gaussian replaced by the continuous Gaussian it is
    coupled to, one cohort's releases of a round joined as the ledger joins them (coupled
    Gaussians on the same clients are one Gaussian): what a continuous accountant certifies.
    ``ValueError`` for a noise too small to couple."""
    from jfed.privacy.discrete_accounting import coupled_gaussian

    return joined(coupled_gaussian(event))


def joined(event: Any) -> Any:
    """``event`` with every sampled composition (one cohort's releases in one round) joined as
    the ledger joins them (:func:`jfed.engine.clients.releases_together`)."""
    import dp_accounting

    from jfed.engine.clients import releases_together

    if isinstance(event, dp_accounting.PoissonSampledDpEvent):
        inner = event.event
        if isinstance(inner, dp_accounting.ComposedDpEvent):
            inner = releases_together(list(inner.events))
        return dp_accounting.PoissonSampledDpEvent(event.sampling_probability, inner)
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        return dp_accounting.SelfComposedDpEvent(joined(event.event), event.count)
    if isinstance(event, dp_accounting.ComposedDpEvent):
        return dp_accounting.ComposedDpEvent([joined(part) for part in event.events])
    return event
