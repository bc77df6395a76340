"""Rounds as one ``lax.scan``: a whole simulated run is one jitted program."""

from __future__ import annotations

import time
from typing import Any, Protocol

import jax
import jax.numpy as jnp
from jax import lax

from jfed.data.population import Population
from jfed.engine.client_state import RunState, create_table, trim_table
from jfed.engine.clients import Clients, initial_client_state
from jfed.engine.keys import round_key, run_streams
from jfed.engine.plan import ExecutionPlan
from jfed.engine.progress import report_every, report_round, round_progress
from jfed.engine.schedules import schedule_key

PyTree = Any


class Algorithm(Protocol):
    """A federated algorithm: ``init`` + ``round``, pure and jittable.

    The algorithm object itself holds only static configuration (hashable, e.g. a frozen
    dataclass of ints): numbers that vary across a sweep (noise scales, step sizes) live in the
    ``hyperparams`` pytree, which reaches ``init`` and every ``round`` explicitly, so they are
    traced, not compiled in.

    Optional: ``client_state(hyperparams, key) -> PyTree``, ONE client's initial state (e.g.
    a control variate of zeros shaped like the model); ``key`` is the run's init key, the one
    ``init`` receives (so a state can start at the server's initial model). The engine then
    stores a copy for every client, hands each client its own in calls with
    ``client_state=True`` and returns them all with the final state (:class:`RunState`).
    """

    def init(self, hyperparams: PyTree, key: jax.Array) -> PyTree:
        """The server state before round 0."""
        ...

    def round(
        self, state: PyTree, hyperparams: PyTree, key: jax.Array, clients: Clients
    ) -> tuple[PyTree, PyTree]:
        """One round: ``key`` is the server's key for this round; ``clients`` runs a one-client
        function over every client (``clients.sum``, ``clients.stack``,
        ``clients.aggregate``) or over a cohort (``clients.sample(cohort)``): see
        :class:`~jfed.engine.Clients`. Returns the next state and the round's diagnostics."""
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
      ``rounds`` (the per-round diagnostics); for an algorithm with per-client state,
      ``final_state`` is :class:`RunState` ``(server, clients)`` (with a
      :class:`~jfed.engine.HostTable` in the plan, ``clients`` are its numpy rows, the call
      having waited for the run).
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
        return _host_rows(result, plan)
    if not progress:
        return _host_rows(_simulate(algorithm, population, hyperparams, key, rounds, plan), plan)
    description = progress if isinstance(progress, str) else "rounds"
    with round_progress(rounds, description) as token:
        result = _simulate(
            algorithm, population, hyperparams, key, rounds, plan, token, report_every(rounds)
        )
        jax.block_until_ready(result)
        jax.effects_barrier()  # every report has reached the bar
    return _host_rows(result, plan)


def _host_rows(result: tuple[PyTree, PyTree], plan: ExecutionPlan) -> tuple[PyTree, PyTree]:
    """A run's result with a table kept off the device: its rows read from the host once the
    run has finished (the program flushed them as its last step)."""
    state, infos = result
    if plan.client_state is None or not isinstance(state, RunState):
        return result
    jax.block_until_ready(result)
    return RunState(state.server, plan.client_state.rows()), infos


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
    ``progress_every`` rounds to that bar; ``None`` reports nothing.

    An algorithm with per-client state (``client_state``) has its table created here, carried
    through the rounds beside the server state (split over the plan's mesh by rows) and
    returned as ``RunState(server=final_state, clients=table)``, the table's leaves
    ``[n_clients, ...]``; with a :class:`~jfed.engine.HostTable` in the plan, the table is
    created, read, written and flushed on the host from inside this program, and ``clients`` is
    its :class:`~jfed.engine.client_state.HostRows` (the rows: ``plan.client_state.rows()``
    once the program has finished)."""
    carry = start_rounds(algorithm, population, hyperparams, key, plan)
    carry, infos = rounds_segment(algorithm, population, hyperparams, key, carry, 0, rounds,
                                  rounds, plan, progress_token, progress_every)  # fmt: skip
    return finish_rounds(carry, population.n_clients), infos


def start_rounds(
    algorithm: Algorithm, population: Population, hyperparams: PyTree, key: jax.Array,
    plan: ExecutionPlan,
) -> tuple[PyTree, PyTree]:  # fmt: skip
    """The loop's carry before round 0: ``(server state, client table)``, the table ``None``
    for an algorithm without per-client state (traceable; :func:`run_rounds` is
    ``finish_rounds(rounds_segment(start_rounds(...), 0, rounds))``)."""
    init_key, _, _ = run_streams(key)
    state = algorithm.init(hyperparams, init_key)
    initial = initial_client_state(algorithm, hyperparams, init_key)
    table = None if initial is None else create_table(initial, population.n_clients, plan)
    return state, table


def rounds_segment(
    algorithm: Algorithm, population: Population, hyperparams: PyTree, key: jax.Array,
    carry: tuple[PyTree, PyTree], first: jax.Array | int, length: int, rounds: int,
    plan: ExecutionPlan, progress_token: jax.Array | None = None, progress_every: int = 1,
) -> tuple[tuple[PyTree, PyTree], PyTree]:  # fmt: skip
    """Rounds ``first .. first + length - 1`` of a run of ``rounds`` (traceable): the carry
    after them and their infos (leaves ``[length, ...]``).

    Every draw is addressed by (run key, round, client, stream) and a round's schedule by the
    round index and ``rounds``, so a run cut into segments (each its own program, the carry
    passed from one to the next: what checkpoints do, :mod:`jfed.sweep.checkpoint`) computes the
    rounds of one uninterrupted scan; ``first`` may be traced (one program serves every
    segment of a length)."""
    _, server_root, client_root = run_streams(key)
    schedules = schedule_key(client_root)

    def one_round(carry: tuple, t: jax.Array) -> tuple[tuple, PyTree]:
        state, table = carry
        clients = Clients(population, round_key(client_root, t), plan, t, states=table,
                          schedule_key=schedules, rounds=rounds)  # fmt: skip
        new_state, info = algorithm.round(state, hyperparams, round_key(server_root, t), clients)
        if progress_token is not None:
            report_round(progress_token, t, progress_every, rounds)
        return (new_state, clients.states), info

    steps = jnp.arange(length, dtype=jnp.int32)
    return lax.scan(one_round, carry, steps if isinstance(first, int) and first == 0 else
                    steps + jnp.asarray(first, jnp.int32))  # fmt: skip


def finish_rounds(carry: tuple[PyTree, PyTree], n_clients: int) -> PyTree:
    """The final state of a run from the loop's last carry: the server state, or
    :class:`RunState` with the table's first ``n_clients`` rows (a table kept by a
    :class:`~jfed.engine.HostTable` flushed)."""
    state, table = carry
    if table is None:
        return state
    return RunState(state, trim_table(table, n_clients))


_simulate = jax.jit(run_rounds, static_argnames=("algorithm", "rounds", "plan", "progress_every"))
