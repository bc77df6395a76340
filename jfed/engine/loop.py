"""Rounds as one ``lax.scan``: a whole simulated run is one jitted program."""

from __future__ import annotations

import time
from typing import Any, Protocol

import jax
import jax.numpy as jnp
from jax import lax

from jfed.data.population import Population
from jfed.engine.aggregate import ClientFn, Statistic, aggregate, sum_messages
from jfed.engine.cohort import Cohort, CohortInfo
from jfed.engine.keys import round_key, run_streams
from jfed.engine.plan import ExecutionPlan
from jfed.engine.progress import report_every, report_round, round_progress

PyTree = Any


class Clients(Protocol):
    """What a round sees of the clients: one call that runs them (all, or a cohort) and returns
    the reduction.

    ``clients(client_fn, broadcast, statistic=sum_messages, cohort=None)``: without a cohort it
    returns the statistic summed over every client, as always. With a cohort
    (:class:`~jfed.engine.cohort.All`, :class:`~jfed.engine.cohort.Uniform` or
    :class:`~jfed.engine.cohort.Poisson`, static) it returns ``(statistic, info)``: the statistic
    over the round's cohort only and its :class:`~jfed.engine.cohort.CohortInfo` (size,
    overflow, capacity, ids). The cohort is drawn from the round's own cohort key
    (:func:`~jfed.engine.keys.cohort_key`), so every call in a round with the same cohort kind
    sees the same clients; a client's key is the same as without a cohort.
    """

    def __call__(
        self,
        client_fn: ClientFn,
        broadcast: PyTree,
        statistic: Statistic = sum_messages,
        cohort: Cohort | None = None,
    ) -> PyTree | tuple[PyTree, CohortInfo]: ...


class Algorithm(Protocol):
    """A federated algorithm: ``init`` + ``round``, pure and jittable.

    The algorithm object itself holds only static configuration (hashable, e.g. a frozen
    dataclass of ints): numbers that vary across a sweep (noise scales, step sizes) live in the
    ``hyperparams`` pytree and then in the state, so they are traced, not compiled in.
    """

    def init(self, hyperparams: PyTree, key: jax.Array) -> PyTree:
        """The server state before round 0."""
        ...

    def round(self, state: PyTree, key: jax.Array, clients: Clients) -> tuple[PyTree, PyTree]:
        """One round: ``key`` is the server's key for this round; ``clients(client_fn, broadcast,
        statistic)`` runs ``client_fn`` on every client and returns the summed statistic
        (``clients(..., cohort=...)`` on a cohort only; see :class:`Clients`)."""
        ...


def simulate(
    algorithm: Algorithm,
    population: Population,
    hyperparams: PyTree,
    key: jax.Array,
    rounds: int,
    plan: ExecutionPlan | None = None,
    progress: bool | str = False,
    timings: dict | None = None,
) -> tuple[PyTree, PyTree]:
    """Run ``rounds`` rounds of ``algorithm`` on ``population`` as one jitted program.

    Args:
      algorithm: static algorithm object (``init`` + ``round``).
      population: the clients.
      hyperparams: traced hyper-parameters (e.g. a NamedTuple of f32 scalars).
      key: the run key; see :mod:`jfed.engine.keys` for how it is split.
      rounds: number of rounds T >= 1 (static).
      plan: batching plan (default: :meth:`ExecutionPlan.for_backend`, sized for the default
        backend); shrunk to fit small populations.
      progress: show a progress bar over rounds, reported from inside the compiled scan (a
        string names the bar); the call then waits for the results. See
        :mod:`jfed.engine.progress` for what it costs.
      timings: a dict that receives ``compile_seconds`` (lowering and compiling, or loading the
        program from the persistent cache) and ``run_seconds`` (the run, waited for); the call
        then waits for the results. Not measured with ``progress`` (the bar's wait mixes both).

    Returns:
      ``(final_state, infos)`` where every leaf of ``infos`` has a leading axis of length
      ``rounds`` (the per-round diagnostics).
    """
    if int(rounds) != rounds or rounds < 1:
        raise ValueError(f"expected rounds >= 1 (integer), got rounds={rounds}")
    plan = (plan or ExecutionPlan.for_backend()).fitted(population.n_clients)
    rounds = int(rounds)
    if timings is not None and not progress:
        start = time.perf_counter()
        compiled = _simulate.lower(algorithm, population, hyperparams, key, rounds, plan).compile()
        timings["compile_seconds"] = time.perf_counter() - start
        start = time.perf_counter()
        result = jax.block_until_ready(compiled(population, hyperparams, key))
        timings["run_seconds"] = time.perf_counter() - start
        return result
    if not progress:
        return _simulate(algorithm, population, hyperparams, key, rounds, plan)
    description = progress if isinstance(progress, str) else "rounds"
    with round_progress(rounds, description) as token:
        result = _simulate(
            algorithm, population, hyperparams, key, rounds, plan, token, report_every(rounds)
        )
        jax.block_until_ready(result)
        jax.effects_barrier()  # every report has reached the bar
    return result


def run_rounds(
    algorithm: Algorithm,
    population: Population,
    hyperparams: PyTree,
    key: jax.Array,
    rounds: int,
    plan: ExecutionPlan,
    progress_token: jax.Array | None = None,
    progress_every: int = 1,
) -> tuple[PyTree, PyTree]:
    """The traceable body of :func:`simulate` (for callers that vmap or jit it themselves).

    ``progress_token`` (from :func:`jfed.engine.progress.round_progress`) reports every
    ``progress_every`` rounds to that bar; ``None`` reports nothing."""
    init_key, server_root, client_root = run_streams(key)
    state = algorithm.init(hyperparams, init_key)

    def one_round(state: PyTree, t: jax.Array) -> tuple[PyTree, PyTree]:
        round_client_root = round_key(client_root, t)

        def clients(client_fn, broadcast, statistic=sum_messages, cohort=None):
            return aggregate(
                client_fn, broadcast, population, round_client_root, plan, statistic, cohort
            )

        new_state, info = algorithm.round(state, round_key(server_root, t), clients)
        if progress_token is not None:
            report_round(progress_token, t, progress_every, rounds)
        return new_state, info

    return lax.scan(one_round, state, jnp.arange(rounds, dtype=jnp.int32))


_simulate = jax.jit(run_rounds, static_argnames=("algorithm", "rounds", "plan", "progress_every"))
