"""What a round sees of the clients: :class:`Clients`, typed, one return type per call.

Inside ``round(state, hyper, key, clients)`` an algorithm reduces over every client::

    total = clients.sum(client_fn, broadcast)                    # a pytree like one message
    rows = clients.stack(client_fn, broadcast)                   # leaves [n_clients, ...]
    value, agg_state = clients.aggregate(aggregator, hyper.privacy, state.aggregator,
                                         client_fn, broadcast, key)

or over a cohort, a view of the same calls on the round's sampled clients::

    cohort = clients.sample(Poisson(rate=0.01))                  # cohort.info: size, ids, ...
    value, agg_state = cohort.aggregate(aggregator, hyper.privacy, state.aggregator,
                                        client_fn, broadcast, key)

``client_fn(broadcast, record, key) -> message`` is written for ONE client; the engine vmaps,
chunks, shards and samples. The whole population is the cohort ``0 .. n-1`` (:class:`All`):
one internal path.

A privatized aggregation (:mod:`jfed.privacy.aggregators`) goes through ``aggregate``: the engine
runs ``client_fn`` for every client of the cohort, the aggregator's ``preprocess`` on each
message, sums, and calls its ``release`` once. Each such release is a line of the round's
:class:`Ledger` when one is kept (:func:`trace_releases`): the aggregator, the cohort and where
its parameters came from in ``hyper`` (they must be read from the hyper-parameters unchanged, so
that the accountant reads exactly the numbers that ran). A run's guarantee is the composition of
those releases over its rounds (:meth:`Ledger.event`): no method states its event by hand.
"""

from __future__ import annotations

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
    stack,
    stack_cohort,
    sum_messages,
)
from jfed.engine.cohort import All, Cohort, CohortInfo, cohort_capacity, draw_cohort
from jfed.engine.keys import cohort_key
from jfed.engine.plan import ExecutionPlan
from jfed.privacy.guarantee import Adjacency

PyTree = Any

PRIVACY_STREAM = np.uint32(2**32 - 2)
"""The word folded into a client's key for its aggregator's ``preprocess`` (a local randomizer's
noise): a stream of its own, apart from what the client's own function draws."""


@dataclass(frozen=True)
class Release:
    """One privatized release of a round, as the ledger records it (host side).

    Attributes:
      aggregator: the static aggregator that released.
      cohort: who took part (:class:`~jfed.engine.All`, :class:`~jfed.engine.Uniform`, ...).
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


@dataclass
class Ledger:
    """The releases of one round, in the order the round made them (filled while it is traced)."""

    releases: list[Release] = field(default_factory=list)
    hyper_paths: dict[int, tuple] = field(default_factory=dict)  # id(traced leaf) -> key path

    def record(self, aggregator: Any, cohort: Any, n_clients: int, params: Any) -> None:
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
        self.releases.append(Release(aggregator, cohort, int(n_clients), paths, treedef))

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
        ``hyper``: the round's releases composed, the rounds self-composed."""
        import dp_accounting

        if not self.releases:
            return dp_accounting.NoOpDpEvent()
        events = [release.event(hyper) for release in self.releases]
        one = events[0] if len(events) == 1 else dp_accounting.ComposedDpEvent(events)
        return one if rounds == 1 else dp_accounting.SelfComposedDpEvent(one, int(rounds))


class CohortView:
    """The clients of one round's cohort: the calls of :class:`Clients`, over the cohort only.

    Attributes:
      info: :class:`~jfed.engine.CohortInfo` (size, overflow, capacity, ids; padding ids are
        ``n_clients``, never a real client).
      cohort: the cohort kind it was drawn as.
    """

    def __init__(self, clients: Clients, cohort: Cohort, info: CohortInfo) -> None:
        self._clients = clients
        self.cohort = cohort
        self.info = info

    def sum(
        self, client_fn: ClientFn, broadcast: PyTree, statistic: Statistic = sum_messages
    ) -> PyTree:
        """The statistic summed over the cohort (:func:`jfed.engine.aggregate_cohort`)."""
        c = self._clients
        if self.info.ids is None:
            return aggregate(client_fn, broadcast, c.population, c.key, c.plan, statistic)
        return aggregate_cohort(client_fn, broadcast, c.population, c.key, c.plan, self.info,
                                statistic)  # fmt: skip

    def stack(self, client_fn: ClientFn, broadcast: PyTree) -> PyTree:
        """Every member's message in cohort order (``[capacity, ...]``; rows past the size are
        zero)."""
        c = self._clients
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
        key: jax.Array,
        statistic: Statistic = sum_messages,
    ) -> tuple[PyTree, PyTree, dict]:
        """One privatized release over the cohort.

        Args:
          aggregator: a static aggregator (:mod:`jfed.privacy.aggregators`).
          params: its parameters, read from the round's hyper-parameters unchanged.
          state: its state (from ``aggregator.init`` or its last release).
          client_fn: ``client_fn(broadcast, record, key) -> update`` for ONE client.
          broadcast: what every client receives.
          key: the server's key for this release (used once).
          statistic: how a chunk of preprocessed records is reduced (default: their sum; e.g.
            second moments ``X^T X`` of a chunk, computed as one product); additive over chunks.

        Returns:
          ``(value, state, diagnostics)``: the aggregator's release, its next state, and its
          diagnostics with ``cohort_size`` and ``overflow`` added.
        """

        def contribution(broadcast: PyTree, record: Any, client_key: jax.Array) -> PyTree:
            update = client_fn(broadcast, record, client_key)
            return aggregator.preprocess(
                params, state, update, jax.random.fold_in(client_key, PRIVACY_STREAM)
            )

        c = self._clients
        if c.ledger is not None:
            c.ledger.record(aggregator, self.cohort, c.population.n_clients, params)
        summed = self.sum(contribution, broadcast, statistic)
        value, state, diagnostics = aggregator.release(params, state, summed, key)
        diagnostics = dict(diagnostics, cohort_size=self.info.size, overflow=self.info.overflow)
        return value, state, diagnostics


class Clients:
    """Every client of the population in one round (see the module docstring).

    Built by the engine for each round; an algorithm only calls it.

    Attributes:
      n_clients: the population size n (static).
      round_index: ``i32[]``, the round t.
    """

    def __init__(
        self,
        population: Population,
        key: jax.Array,
        plan: ExecutionPlan,
        round_index: jax.Array,
        ledger: Ledger | None = None,
    ) -> None:
        self.population = population
        self.key = key
        self.plan = plan
        self.round_index = round_index
        self.ledger = ledger
        self._drawn: dict[Any, CohortView] = {}
        n = population.n_clients
        self._all = CohortView(self, All(), CohortInfo(jnp.int32(n), jnp.int32(0),
                                                        jnp.int32(n), None))  # fmt: skip

    @property
    def n_clients(self) -> int:
        return int(self.population.n_clients)

    def sample(self, cohort: Cohort) -> CohortView:
        """The round's cohort of kind ``cohort`` (static), drawn from the round's cohort key in
        O(capacity) work: every call with the same kind in a round gives the same clients."""
        if isinstance(cohort, All):
            return self._all
        if cohort not in self._drawn:
            cohort_capacity(cohort, self.n_clients)  # a cohort larger than n is refused here
            info = draw_cohort(cohort, self.n_clients, cohort_key(self.key))
            self._drawn[cohort] = CohortView(self, cohort, info)
        return self._drawn[cohort]

    def sum(
        self, client_fn: ClientFn, broadcast: PyTree, statistic: Statistic = sum_messages
    ) -> PyTree:
        """The statistic (default: the messages) summed over every client."""
        return self._all.sum(client_fn, broadcast, statistic)

    def stack(self, client_fn: ClientFn, broadcast: PyTree) -> PyTree:
        """Every client's message in client order (``[n_clients, ...]`` leaves; memory
        O(n_clients x message): for few, heavy clients)."""
        return self._all.stack(client_fn, broadcast)

    def aggregate(
        self,
        aggregator: Any,
        params: Any,
        state: PyTree,
        client_fn: ClientFn,
        broadcast: PyTree,
        key: jax.Array,
        statistic: Statistic = sum_messages,
    ) -> tuple[PyTree, PyTree, dict]:
        """One privatized release over every client (:meth:`CohortView.aggregate`)."""
        return self._all.aggregate(aggregator, params, state, client_fn, broadcast, key,
                                   statistic)  # fmt: skip


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
    from jfed.engine.keys import round_key, run_streams
    from jfed.engine.plan import ExecutionPlan

    plan = (plan or ExecutionPlan()).fitted(population.n_clients)
    ledger = Ledger()

    def one_round(hyper: PyTree, key: jax.Array) -> Any:
        ledger.hyper_paths = {
            id(leaf): path for path, leaf in jax.tree_util.tree_flatten_with_path(hyper)[0]
        }
        init_key, server_root, client_root = run_streams(key)
        state = algorithm.init(hyper, init_key)
        t = jnp.int32(0)
        clients = Clients(population, round_key(client_root, t), plan, t, ledger)
        return algorithm.round(state, hyper, round_key(server_root, t), clients)

    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), jnp.asarray(x).dtype),
                            hyper)  # fmt: skip
    jax.eval_shape(one_round, abstract, jax.random.key(0))
    return ledger
