"""What a round sees of the clients: :class:`Clients`, typed, one return type per call.

Inside ``round(state, hyper, key, clients)`` an algorithm reduces over every client::

    total = clients.sum(client_fn, broadcast)                    # a pytree like one message
    rows = clients.stack(client_fn, broadcast)                   # leaves [n_clients, ...]
    value, agg_state, diagnostics = clients.aggregate(aggregator, hyper.privacy,
                                                      state.aggregator, client_fn, broadcast, key)

or over a cohort, a view of the same calls on the round's sampled clients::

    cohort = clients.sample(Poisson(rate=0.01))                  # cohort.info: size, ids, ...
    value, agg_state, diagnostics = cohort.aggregate(aggregator, hyper.privacy,
                                                     state.aggregator, client_fn, broadcast, key)

``client_fn(broadcast, record, key) -> message`` is written for ONE client; the engine vmaps,
chunks, shards and samples. The whole population is the cohort ``0 .. n-1`` (:class:`All`):
one internal path. A participation schedule (:mod:`jfed.engine.schedules`: cyclic groups,
min-separation, shuffled epochs) is a cohort too, drawn from the run's schedule key and the
round index, so its partition holds for the whole run.

Per-client state. An algorithm that defines ``client_state(hyper, key)`` (ONE client's initial
state) has it stored by the engine for every client (:mod:`jfed.engine.client_state`); a call
with ``client_state=True`` hands each client its own state and keeps what it returns::

    def client(broadcast, record, key, control):       # control: this client's state
        ...
        return message, new_control

    total = cohort.sum(client, broadcast, client_state=True)

Only the cohort's rows are read and written (O(cohort)); a client not drawn keeps its state
exactly; padding writes nothing.

A privatized aggregation (:mod:`jfed.privacy.aggregators`) goes through ``aggregate``: the engine
runs ``client_fn`` for every client of the cohort, the aggregator's ``preprocess`` on each
message, sums, and calls its ``release`` once. A tuple of aggregators makes one release each
from ONE pass over the clients (``client_fn`` returns a tuple of updates, one per aggregator).
Each release is a line of the round's :class:`Ledger` when one is kept (:func:`trace_releases`):
the aggregator, the cohort, where its parameters came from in ``hyper`` (they must be read
from the hyper-parameters unchanged, so that the accountant reads exactly the numbers that ran)
and how many times it RUNS a round (a call inside ``lax.scan`` of length k runs k times; one
whose count the trace cannot tell is refused: :mod:`jfed.engine.release_count`). Where a
program counts its releases (:func:`~jfed.engine.release_count.counting_releases`, as the
runner does), each call adds what it releases to that count as it runs.
A run's guarantee is the composition of those releases over its rounds (:meth:`Ledger.event`):
no method states its event by hand.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jfed.data.population import Population
from jfed.engine.aggregate import (
    ClientFn,
    Statistic,
    aggregate,
    aggregate_cohort,
    cohort_with_state,
    stack,
    stack_cohort,
    sum_messages,
)
from jfed.engine.client_state import check_new_state
from jfed.engine.cohort import All, Cohort, CohortInfo, cohort_capacity, draw_cohort
from jfed.engine.keys import cohort_key
from jfed.engine.plan import ExecutionPlan
from jfed.engine.release_count import Site, count_release, current_trace, runs_here, superseded
from jfed.engine.schedules import SCHEDULES, Schedule
from jfed.privacy.guarantee import Adjacency

PyTree = Any

PRIVACY_STREAM = np.uint32(2**32 - 2)
"""The word folded into a client's key for its aggregator's ``preprocess`` (a local randomizer's
noise): a stream of its own, apart from what the client's own function draws."""


def participation_of(aggregator: Any) -> Any:
    """The participation pattern a correlated-noise aggregator is calibrated for (its
    ``participation``, looked for through wrappers' ``inner``), else ``None``."""
    while aggregator is not None:
        if hasattr(aggregator, "participation"):
            return aggregator.participation
        aggregator = getattr(aggregator, "inner", None)
    return None


def _run_event_of(aggregator: Any, params: Any) -> Any:
    """The whole run's event of a correlated aggregator (its ``run_event``, through wrappers)."""
    while not hasattr(aggregator, "run_event"):
        aggregator = aggregator.inner
    return aggregator.run_event(params)


def _is_schedule(cohort: Any) -> bool:
    return isinstance(cohort, SCHEDULES)


def check_participation(aggregator: Any, cohort: Any, rounds: int) -> None:
    """``ValueError`` unless a correlated aggregator's participation pattern is the one its
    cohort produces over ``rounds`` rounds: a schedule's ``participation(rounds)``, or every
    round for :class:`All`. A correlated aggregator under a sampled cohort (Poisson, uniform) is
    refused: its event assumes no amplification and must not be wrapped in a sampled one. An
    aggregator without a pattern passes."""
    pattern = participation_of(aggregator)
    if pattern is None:
        return
    from jfed.privacy.participation import Participation

    if _is_schedule(cohort):
        expected = cohort.participation(int(rounds))
    elif isinstance(cohort, All):
        expected = Participation.every_round(int(rounds))
    else:
        raise ValueError(
            f"{type(aggregator).__name__} is calibrated for a participation pattern and assumes "
            f"no amplification by sampling: run it on a schedule (CyclicGroups, MinSeparation, "
            f"ShuffledEpochs) or on every client, not on {cohort!r}"
        )
    if pattern != expected:
        raise ValueError(
            f"{type(aggregator).__name__}'s participation {pattern} is not what {cohort!r} "
            f"gives over {rounds} rounds ({expected}): its sensitivity, hence the guarantee, "
            "would not hold; build the aggregator with the cohort's participation(rounds)"
        )


def releases_together(events: list) -> Any:
    """The releases one cohort makes in one round as ONE event, for the cohort to wrap once:
    Gaussians of multipliers ``z_i`` on the same clients are one Gaussian of
    ``(sum z_i^-2)^-1/2`` (exactly: the pair's privacy loss is that of its projection on the
    shift), anything else their composition."""
    import dp_accounting

    if len(events) == 1:
        return events[0]
    if all(isinstance(e, dp_accounting.GaussianDpEvent) for e in events):
        multipliers = [float(e.noise_multiplier) for e in events]
        if min(multipliers) == 0.0:
            return dp_accounting.GaussianDpEvent(0.0)
        return dp_accounting.GaussianDpEvent(sum(z**-2 for z in multipliers) ** -0.5)
    return dp_accounting.ComposedDpEvent(list(events))


@dataclass(frozen=True)
class Release:
    """One privatized release of a round, as the ledger records it (host side).

    Attributes:
      aggregator: the static aggregator that released.
      cohort: who took part (:class:`~jfed.engine.All`, :class:`~jfed.engine.Uniform`, a
        schedule, ...).
      n_clients: the population size.
      params_paths: where each leaf of the aggregator's parameters lies in the run's
        hyper-parameters (``jax.tree_util`` key paths).
      params_treedef: the structure of those parameters (a NamedTuple).
    """

    aggregator: Any
    cohort: Any
    n_clients: int
    params_paths: tuple
    params_treedef: Any
    runs_per_round: int = 1
    """Times it RUNS in one round: the product of the lengths of the scans it sits in
    (:func:`jfed.engine.release_count.runs_here`); the ledger composes it that many times."""
    where: str = "in the round's body"
    """The constructs it sits in, for messages (``"inside lax.scan of length 4"``)."""
    disjoint_steps: bool = False
    """Its loop's steps take each client once at most (stated by the caller): one release."""

    def params(self, hyper: PyTree) -> Any:
        """The aggregator's parameters read from host hyper-parameters ``hyper``, each leaf as
        the float32 number the device ran with (then as a Python float)."""
        leaves = dict(jax.tree_util.tree_flatten_with_path(hyper)[0])
        values = [float(np.float32(leaves[path])) for path in self.params_paths]
        return jax.tree_util.tree_unflatten(self.params_treedef, values)

    def event(self, hyper: PyTree):
        """The ``DpEvent`` of this release: the aggregator's event at its parameters, wrapped by
        the cohort into its sampled event. A local aggregator (``aggregator.local``: each client
        randomizes its own message) is not wrapped: its guarantee holds for every message
        whoever receives it, and no amplification by the cohort's sampling is claimed."""
        event = self.aggregator.event(self.params(hyper))
        if getattr(self.aggregator, "local", False):
            return event
        return self.cohort.sampled_event(event, self.n_clients)

    @property
    def adjacency(self) -> Adjacency:
        """The aggregator's own adjacency where it states one (a local randomizer's is
        ``BOUNDED``), else its cohort's natural one."""
        return getattr(self.aggregator, "adjacency", None) or self.cohort.adjacency

    @property
    def correlated(self) -> bool:
        """Whether the aggregator is calibrated for a participation pattern over the whole run
        (a correlated-noise aggregator: its run is one event, not a per-round one)."""
        return participation_of(self.aggregator) is not None


def refuse_repeated(release: Release, family: str) -> None:
    """``ValueError`` where ``release`` runs more than once a round (a loop's steps that may
    take a client again): ``family``'s accounting composes it once a round."""
    if release.runs_per_round != 1 and not release.disjoint_steps:
        raise ValueError(
            f"{family} accounts its release once a round, but "
            f"{type(release.aggregator).__name__} runs {release.runs_per_round} times a round "
            f"({release.where}): release it once a round (outside the loop)"
        )


@dataclass
class Ledger:
    """The releases of one round, in the order the round made them (filled while it is traced)."""

    releases: list[Release] = field(default_factory=list)
    hyper_paths: dict[int, tuple] = field(default_factory=dict)  # id(traced leaf) -> key path
    # while the round is traced: where it started, and where each release was recorded
    _base: tuple = (None, None)
    _sites: list[Site] = field(default_factory=list)

    def begin(self) -> None:
        """Mark the start of the round's tracing (called by the function that traces it): a
        release recorded in a construct nested below it is counted as often as it runs
        (:func:`jfed.engine.release_count.runs_here`)."""
        self._base = (sys._getframe(1), current_trace())

    def end(self) -> None:
        """The round is traced: forget the frames kept to place its releases."""
        self._base, self._sites = (None, None), [Site() for _ in self._sites]

    @property
    def releases_per_round(self) -> int:
        """The releases one round RUNS as the ledger counts them (each release's
        :attr:`Release.runs_per_round`; a release whose loop takes each client once counts
        none): what the compiled program must count at run time
        (:func:`jfed.engine.release_count.counting_releases`)."""
        return sum(r.runs_per_round for r in self.releases if not r.disjoint_steps)

    def record(
        self, aggregator: Any, cohort: Any, n_clients: int, params: Any,
        disjoint_steps: bool = False,
    ) -> None:  # fmt: skip
        """Record one release of ``aggregator`` over ``cohort`` at ``params`` (read from the
        hyper-parameters unchanged), counted as many times as it runs a round; ``ValueError``
        (:class:`~jfed.engine.release_count.ReleaseCountError`) where that count cannot be known
        from the trace, naming the construct and the way out."""
        base_frame, base_trace = self._base
        site = runs_here(type(aggregator).__name__, base_frame, base_trace, disjoint_steps)
        kept = [i for i, old in enumerate(self._sites) if not superseded(old, site)]
        self.releases = [self.releases[i] for i in kept]  # an abandoned pass of a scan body
        self._sites = [self._sites[i] for i in kept]
        leaves, treedef = jax.tree_util.tree_flatten(params)
        missing = [leaf for leaf in leaves if id(leaf) not in self.hyper_paths]
        if missing:
            raise ValueError(
                f"the parameters of {type(aggregator).__name__} must be read from the round's "
                "hyper-parameters unchanged (e.g. hyper.privacy), so that the accountant reads "
                f"the numbers that ran; {len(missing)} of its {len(leaves)} parameters are "
                "computed or constant"
            )
        paths = tuple(self.hyper_paths[id(leaf)] for leaf in leaves)
        self.releases.append(Release(aggregator, cohort, int(n_clients), paths, treedef,
                                     site.runs, site.describe(), disjoint_steps))  # fmt: skip
        self._sites.append(site)

    def only_release(self, family: str) -> Release:
        """The round's one release, for a family whose guarantee composes one release a round
        (``family`` names it in messages: ``"a silo round"``); ``ValueError`` where the round
        made another number of releases, or runs its one release more than once (inside a
        loop: :attr:`Release.runs_per_round`), which that family's accounting would count
        once."""
        if len(self.releases) != 1:
            raise ValueError(
                f"{family} makes one release, but this round recorded {len(self.releases)}: "
                "release once a round, or account the round with Ledger.event"
            )
        (release,) = self.releases
        refuse_repeated(release, family)
        return release

    @property
    def adjacency(self) -> Adjacency:
        """The adjacency of the round's releases: their cohorts' natural one (they must agree)."""
        found = {release.adjacency for release in self.releases}
        if len(found) > 1:
            names = sorted(a.value for a in found)
            raise ValueError(
                f"the releases of one round sample their clients under different adjacencies "
                f"({names}): one guarantee needs one neighbouring relation"
            )
        return found.pop() if found else Adjacency.ADD_OR_REMOVE

    def event(self, hyper: PyTree, rounds: int):
        """The ``DpEvent`` of ``rounds`` rounds of these releases at host hyper-parameters
        ``hyper``.

        - The releases of one round over one sampled cohort (same clients) are wrapped ONCE by
          the cohort's sampling (:func:`releases_together` joins them): wrapping each would count
          two
          independent samples where there is one. Releases over two different sampled cohorts
          in one round are refused (their draws are nested, not independent).
        - A local randomizer's release is its own event (never wrapped).
        - Those per-round events are composed, and the rounds self-composed.
        - Over a schedule, independent-noise releases compose over the participations of one
          client only (``Participation.independent_releases_event``).
        - A correlated-noise aggregator's releases are its run's event, once
          (``run_event``; its pattern is checked against the cohort's for ``rounds``).
        - A release that RUNS k times a round (inside a scan: :attr:`Release.runs_per_round`)
          is k releases of that round: k entries beside the others (joined with them on a
          sampled cohort, whose clients are the same in every step), k composed otherwise. A
          correlated-noise aggregator run more than once a round is refused (its pattern
          counts one release a round).
        """
        import dp_accounting

        per_round, run_level = [], []
        sampled: dict[Any, list] = {}
        scheduled: dict[Any, list] = {}
        for release in self.releases:
            check_participation(release.aggregator, release.cohort, rounds)
            params = release.params(hyper)
            k = release.runs_per_round
            if release.correlated:
                if k != 1:
                    raise ValueError(
                        f"{type(release.aggregator).__name__} runs {k} times a round "
                        f"({release.where}), but its participation pattern counts one release "
                        "a round: release it once a round (outside the loop)"
                    )
                run_level.append(_run_event_of(release.aggregator, params))
            elif getattr(release.aggregator, "local", False):
                per_round.append(_repeated(release.aggregator.event(params), k))
            elif _is_schedule(release.cohort):
                scheduled.setdefault(release.cohort, []).extend(
                    [release.aggregator.event(params)] * k
                )
            else:
                sampled.setdefault((release.cohort, release.n_clients), []).append(
                    (release.aggregator.event(params), k)
                )
        amplifying = [cohort for cohort, _ in sampled if not isinstance(cohort, All)]
        if len(amplifying) > 1:
            raise ValueError(
                f"one round releases over different sampled cohorts ({amplifying}): their draws "
                "are nested, not independent samples, and no accountant here composes them"
            )
        for (cohort, n_clients), runs in sampled.items():
            if isinstance(cohort, All):  # nothing sampled: each release is its own event
                per_round += [_repeated(event, k) for event, k in runs]
            else:  # the same clients in every run: one sample of all the runs
                events = [event for event, k in runs for _ in range(k)]
                per_round.append(cohort.sampled_event(releases_together(events), n_clients))
        for schedule, events in scheduled.items():
            pattern = schedule.participation(int(rounds))
            one = events[0] if len(events) == 1 else dp_accounting.ComposedDpEvent(events)
            run_level.append(pattern.independent_releases_event(one))
        parts = []
        if per_round:
            one = per_round[0] if len(per_round) == 1 else dp_accounting.ComposedDpEvent(per_round)
            if rounds != 1:
                one = dp_accounting.SelfComposedDpEvent(one, int(rounds))
            parts.append(one)
        parts += run_level
        if not parts:
            return dp_accounting.NoOpDpEvent()
        return parts[0] if len(parts) == 1 else dp_accounting.ComposedDpEvent(parts)


def _repeated(event: Any, runs: int) -> Any:
    """``event`` composed ``runs`` times (itself once)."""
    import dp_accounting

    return event if runs == 1 else dp_accounting.SelfComposedDpEvent(event, runs)


class CohortView:
    """The clients of one round's cohort: the calls of :class:`Clients`, over the cohort only.

    Attributes:
      info: :class:`~jfed.engine.CohortInfo` (size, overflow, capacity, ids; padding ids are
        ``n_clients``, never a real client).
      cohort: the cohort kind it was drawn as.
    """

    def __init__(self, clients: Clients, cohort: Cohort | Schedule, info: CohortInfo) -> None:
        self._clients = clients
        self.cohort = cohort
        self.info = info

    def sum(
        self,
        client_fn: ClientFn,
        broadcast: PyTree,
        statistic: Statistic = sum_messages,
        *,
        client_state: bool = False,
    ) -> PyTree:
        """The statistic summed over the cohort (:func:`jfed.engine.aggregate_cohort`).

        With ``client_state=True``, ``client_fn(broadcast, record, key, state) -> (message,
        new_state)`` reads and updates each member's stored state (see the module docstring)."""
        c = self._clients
        if client_state:
            return c._with_state(client_fn, broadcast, self.info, statistic)
        if self.info.ids is None:
            return aggregate(client_fn, broadcast, c.population, c.key, c.plan, statistic)
        return aggregate_cohort(client_fn, broadcast, c.population, c.key, c.plan, self.info,
                                statistic)  # fmt: skip

    def stack(
        self, client_fn: ClientFn, broadcast: PyTree, *, client_state: bool = False
    ) -> PyTree:
        """Every member's message in cohort order (``[capacity, ...]``; rows past the size are
        zero). ``client_state`` as in :meth:`sum`."""
        c = self._clients
        if client_state:
            return c._with_state(client_fn, broadcast, self.info, None)
        if self.info.ids is None:
            return stack(client_fn, broadcast, c.population, c.key, c.plan)
        return stack_cohort(client_fn, broadcast, c.population, c.key, c.plan, self.info)

    def aggregate(
        self,
        aggregator: Any,
        params: Any,
        state: PyTree,
        client_fn: ClientFn,
        broadcast: PyTree,
        key: Any,
        statistic: Statistic = sum_messages,
        *,
        client_state: bool = False,
        disjoint_steps: bool = False,
    ) -> tuple[PyTree, PyTree, Any]:
        """One privatized release over the cohort (or one per aggregator of a tuple).

        Args:
          aggregator: a static aggregator (:mod:`jfed.privacy.aggregators`), or a tuple of
            them: then ``params``, ``state`` and ``key`` are tuples of the same length,
            ``client_fn`` returns a tuple of updates (one per aggregator), every aggregator
            preprocesses its own, and each makes its own release (a line of the ledger each)
            from ONE pass over the clients.
          params: its parameters, read from the round's hyper-parameters unchanged.
          state: its state (from ``aggregator.init`` or its last release).
          client_fn: ``client_fn(broadcast, record, key) -> update`` for ONE client (with
            ``client_state=True``: ``client_fn(broadcast, record, key, state) -> (update,
            new_state)``).
          broadcast: what every client receives.
          key: the server's key for this release (used once).
          statistic: how a chunk of preprocessed records is reduced (default: their sum; e.g.
            second moments ``X^T X`` of a chunk, computed as one product); additive over chunks.
          client_state: hand each client its stored state (see :meth:`sum`).
          disjoint_steps: the loop this call sits in (``lax.scan``, ``lax.fori_loop``,
            ``lax.while_loop``) takes each client in one step at most (its other steps weigh
            it 0): the steps compose in parallel and the ledger counts ONE release a round.
            Without it a release inside a scan counts once per step, and one inside a loop of
            unknown length is refused (:mod:`jfed.engine.release_count`).

        Returns:
          ``(value, state, diagnostics)``: the aggregator's release, its next state, and its
          diagnostics with ``cohort_size`` and ``overflow`` added (tuples of them for a tuple
          of aggregators).
        """
        several = isinstance(aggregator, tuple)
        aggregators = aggregator if several else (aggregator,)
        all_params = params if several else (params,)
        states = state if several else (state,)
        keys = key if several else (key,)
        if not len(aggregators) == len(all_params) == len(states) == len(keys):
            raise ValueError(
                f"a tuple of {len(aggregators)} aggregators needs as many params, states and keys, "
                f"got {len(all_params)}, {len(states)} and {len(keys)}"
            )

        def preprocess(client_key: jax.Array, updates: tuple) -> tuple:
            if not several:
                updates = (updates,)
            if len(updates) != len(aggregators):
                raise ValueError(
                    f"the client function must return one update per aggregator "
                    f"({len(aggregators)}), got {len(updates)}"
                )
            privacy_key = jax.random.fold_in(client_key, PRIVACY_STREAM)
            # one key per aggregator: the first keeps the single aggregator's key
            keys = [privacy_key] + [jax.random.fold_in(privacy_key, i)
                                    for i in range(1, len(aggregators))]  # fmt: skip
            inputs = zip(aggregators, all_params, states, updates, keys, strict=True)
            return tuple(agg.preprocess(p, s, u, k) for agg, p, s, u, k in inputs)

        def stateful(broadcast, record, client_key, client_state_):
            updates, new_state = client_fn(broadcast, record, client_key, client_state_)
            return preprocess(client_key, updates), new_state

        def stateless(broadcast, record, client_key):
            return preprocess(client_key, client_fn(broadcast, record, client_key))

        contribution = stateful if client_state else stateless

        c = self._clients
        for agg, p in zip(aggregators, all_params, strict=True):
            if c.rounds is not None:
                check_participation(agg, self.cohort, c.rounds)
            if c.ledger is not None:
                c.ledger.record(agg, self.cohort, c.population.n_clients, p, disjoint_steps)
        if not disjoint_steps:  # counted where it runs (a ledger's count is checked against it)
            count_release(len(aggregators))
        summed = self.sum(contribution, broadcast, _per_aggregator(statistic, len(aggregators)),
                          client_state=client_state)  # fmt: skip
        values, new_states, diagnostics = [], [], []
        for agg, p, s, total, k in zip(aggregators, all_params, states, summed, keys, strict=True):
            value, new_state, found = agg.release(p, s, total, k)
            values.append(value)
            new_states.append(new_state)
            diagnostics.append(dict(found, cohort_size=self.info.size, overflow=self.info.overflow))
        if several:
            return tuple(values), tuple(new_states), tuple(diagnostics)
        return values[0], new_states[0], diagnostics[0]


def _per_aggregator(statistic: Statistic, count: int) -> Statistic:
    """``statistic`` applied to each aggregator's records of a chunk (a tuple of ``count``)."""

    def of(records: tuple, weights: jax.Array) -> tuple:
        return tuple(statistic(r, weights) for r in records)

    return of


class Clients:
    """Every client of the population in one round (see the module docstring).

    Built by the engine for each round; an algorithm only calls it.

    Attributes:
      n_clients: the population size n (static).
      round_index: ``i32[]``, the round t.
      rounds: the run's number of rounds R (static), where the engine knows it.
      states: the per-client state table (leaves ``[rows, ...]``, row i client i's state; rows
        >= n), updated by every call with ``client_state=True``; ``None`` when the algorithm
        keeps none.
    """

    def __init__(
        self,
        population: Population,
        key: jax.Array,
        plan: ExecutionPlan,
        round_index: jax.Array,
        ledger: Ledger | None = None,
        *,
        states: PyTree | None = None,
        schedule_key: jax.Array | None = None,
        rounds: int | None = None,
    ) -> None:
        self.population = population
        self.key = key
        self.plan = plan
        self.round_index = round_index
        self.ledger = ledger
        self.states = states
        self.schedule_key = schedule_key
        self.rounds = rounds
        self._drawn: dict[Any, CohortView] = {}
        n = population.n_clients
        self._all = CohortView(self, All(), CohortInfo(jnp.int32(n), jnp.int32(0),
                                                        jnp.int32(n), None))  # fmt: skip

    @property
    def n_clients(self) -> int:
        return int(self.population.n_clients)

    def sample(self, cohort: Cohort | Schedule) -> CohortView:
        """The round's cohort of kind ``cohort`` (static), in O(capacity) work: every call with
        the same kind in a round gives the same clients. A random cohort (``Uniform``,
        ``Poisson``) is drawn from the round's cohort key; a schedule (``CyclicGroups``,
        ``MinSeparation``, ``ShuffledEpochs``) from the run's schedule key and the round index
        (its partition is the same in every round)."""
        if isinstance(cohort, All):
            return self._all
        if cohort not in self._drawn:
            if isinstance(cohort, SCHEDULES):
                if self.schedule_key is None:
                    raise ValueError(
                        f"{cohort!r} is drawn from the run's schedule key, which these clients "
                        "lack: run the rounds with jfed.engine.simulate or run_rounds"
                    )
                info = cohort.draw(self.n_clients, self.schedule_key, self.round_index)
            else:
                cohort_capacity(cohort, self.n_clients)  # a cohort larger than n is refused here
                info = draw_cohort(cohort, self.n_clients, cohort_key(self.key))
            self._drawn[cohort] = CohortView(self, cohort, info)
        return self._drawn[cohort]

    def sum(
        self,
        client_fn: ClientFn,
        broadcast: PyTree,
        statistic: Statistic = sum_messages,
        *,
        client_state: bool = False,
    ) -> PyTree:
        """The statistic (default: the messages) summed over every client."""
        return self._all.sum(client_fn, broadcast, statistic, client_state=client_state)

    def stack(
        self, client_fn: ClientFn, broadcast: PyTree, *, client_state: bool = False
    ) -> PyTree:
        """Every client's message in client order (``[n_clients, ...]`` leaves; memory
        O(n_clients x message): for few, heavy clients)."""
        return self._all.stack(client_fn, broadcast, client_state=client_state)

    def aggregate(
        self,
        aggregator: Any,
        params: Any,
        state: PyTree,
        client_fn: ClientFn,
        broadcast: PyTree,
        key: Any,
        statistic: Statistic = sum_messages,
        *,
        client_state: bool = False,
        disjoint_steps: bool = False,
    ) -> tuple[PyTree, PyTree, Any]:
        """One privatized release over every client (:meth:`CohortView.aggregate`)."""
        return self._all.aggregate(aggregator, params, state, client_fn, broadcast, key,
                                   statistic, client_state=client_state,
                                   disjoint_steps=disjoint_steps)  # fmt: skip

    def _with_state(
        self, client_fn: ClientFn, broadcast: PyTree, info: CohortInfo, statistic: Any
    ) -> PyTree:
        """A call with per-client state: the cohort's rows gathered, computed, scattered back
        into :attr:`states`."""
        if self.states is None:
            raise ValueError(
                "client_state=True needs per-client state: define client_state(hyper, key) on "
                "the algorithm (ONE client's initial state) and run it with "
                "jfed.engine.simulate or run_rounds"
            )

        def checked(broadcast, record, key, state):
            message, new_state = client_fn(broadcast, record, key, state)
            check_new_state(state, new_state)
            return message, new_state

        result, self.states = cohort_with_state(
            checked, broadcast, self.population, self.key, self.plan, info, self.states,
            statistic,
        )  # fmt: skip
        return result


def initial_client_state(algorithm: Any, hyper: PyTree, key: jax.Array) -> PyTree | None:
    """ONE client's initial state, ``algorithm.client_state(hyper, key)``, or ``None`` when the
    algorithm keeps no per-client state."""
    declare = getattr(algorithm, "client_state", None)
    return None if declare is None else declare(hyper, key)


def trace_releases(
    algorithm: Any, population: Population, hyper: PyTree, plan: ExecutionPlan | None = None
) -> Ledger:
    """The releases one round of ``algorithm`` makes, found by tracing it (nothing runs):
    what a run's guarantee composes (:meth:`Ledger.event`).

    Args:
      algorithm: the static algorithm (``init`` + ``round``).
      population: its clients (only shapes are read).
      hyper: hyper-parameters of the run's structure (any values: e.g. a noise multiplier of 1).
      plan: the engine plan (default: one chunk of the population's size, fitted).
    """
    from jfed.engine.client_state import create_table
    from jfed.engine.keys import round_key, run_streams
    from jfed.engine.plan import ExecutionPlan
    from jfed.engine.schedules import schedule_key

    plan = (plan or ExecutionPlan()).fitted(population.n_clients)
    ledger = Ledger()

    def one_round(hyper: PyTree, key: jax.Array) -> Any:
        ledger.begin()  # releases in constructs nested below count as often as they run
        ledger.hyper_paths = {
            id(leaf): path for path, leaf in jax.tree_util.tree_flatten_with_path(hyper)[0]
        }
        init_key, server_root, client_root = run_streams(key)
        state = algorithm.init(hyper, init_key)
        initial = initial_client_state(algorithm, hyper, init_key)
        states = None if initial is None else create_table(initial, population.n_clients, plan)
        t = jnp.int32(0)
        clients = Clients(population, round_key(client_root, t), plan, t, ledger, states=states,
                          schedule_key=schedule_key(client_root))  # fmt: skip
        return algorithm.round(state, hyper, round_key(server_root, t), clients)

    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), jnp.asarray(x).dtype),
                            hyper)  # fmt: skip
    try:
        jax.eval_shape(one_round, abstract, jax.random.key(0))
    finally:
        ledger.end()
    return ledger
