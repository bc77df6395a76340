"""Stream every client of a population through a one-client function and reduce.

The per-client function is written for ONE client and vmapped over a chunk of ``chunk_size``
clients; chunks are streamed with ``lax.scan`` (grouped into blocks, the unit of sharding), so a
round holds ``O(chunk_size * d)`` messages at a time, and each chunk's sufficient statistic is added
to the running total one after another in client order. A fixed vmap width and a fixed summation
order are what make the result bit-identical for every block size. With a mesh, contiguous ranges
of blocks run on different devices and the partial totals are summed with ``psum``.

A round may ask for a cohort (:mod:`jfed.engine.cohort`): then only the cohort's ids are streamed,
through the same fixed-width chunks, so the round costs O(capacity), not O(population).

Four entry points, each with one return type: :func:`aggregate` (a statistic summed over every
client), :func:`stack` (every client's message, stacked), and their cohort forms
:func:`aggregate_cohort` and :func:`stack_cohort` (over a drawn cohort). An algorithm reaches
them through :class:`jfed.engine.Clients`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec

from jfed.data.population import Population
from jfed.engine.cohort import CohortInfo
from jfed.engine.keys import client_key
from jfed.engine.plan import CLIENT_AXIS, ExecutionPlan

PyTree = Any
ClientFn = Callable[..., PyTree]
"""``client_fn(broadcast, record, key) -> message`` for ONE client; with per-client state,
``client_fn(broadcast, record, key, state) -> (message, new_state)``."""
Statistic = Callable[[PyTree, jax.Array], PyTree]


def sum_messages(messages: PyTree, weights: jax.Array) -> PyTree:
    """The default statistic: the sum of the messages of a chunk (padding is already zero)."""
    del weights
    return jax.tree.map(lambda m: jnp.sum(m, axis=0), messages)


def _tree_add(a: PyTree, b: PyTree) -> PyTree:
    return jax.tree.map(jnp.add, a, b)


def _chunk_messages(
    client_fn: ClientFn,
    n_clients: int,
    chunk_ids: jax.Array,
    broadcast: PyTree,
    population: Population,
    key: jax.Array,
    valid: jax.Array | None = None,
    padded: bool = True,
    states: PyTree | None = None,
) -> tuple[PyTree, jax.Array, PyTree | None]:
    """Messages of one chunk of clients (padding zeroed), their weights ``f32[chunk]`` and,
    with ``states`` (the chunk's rows of the per-client state), the clients' new states.

    ``valid: bool[chunk]`` marks the real clients; default: the ids below ``n_clients`` (a
    population's tail padding). A cohort passes its own mask (positions past its size).
    ``padded=False`` says that every id is a real client: nothing is masked, the weights are 1.
    With ``states``, ``client_fn(broadcast, record, key, state) -> (message, new_state)``; the
    new states of padding positions are returned as computed (the caller never writes them)."""
    keys = jax.vmap(partial(client_key, key))(chunk_ids)

    def one_client(client_id: jax.Array, client_key_: jax.Array, *state: PyTree) -> PyTree:
        # fetched inside the vmap: a population may hand out a view (e.g. a silo's id into shared
        # arrays) so that only the rows a client reads are ever gathered
        record = population.record(jnp.minimum(client_id, n_clients - 1))
        return client_fn(broadcast, record, client_key_, *state)

    # vmapped even when a chunk holds one client: on XLA:CPU (jax 0.10.2, 2 cores) a CNN's local
    # training scanned client after client WITHOUT the vmap ran about ten times slower in most
    # runs (100 clients of the LDP-FL CNN: 27.2 s against 2.1 s, bench/vmap_one.py; its YNNPACK
    # fusions, gone with --xla_cpu_experimental_ynn_fusion_type=-LIBRARY_FUSION_TYPE_REDUCE),
    # while with it every run took about 2 s
    if states is None:
        messages, new_states = jax.vmap(one_client)(chunk_ids, keys), None
    else:
        messages, new_states = jax.vmap(one_client)(chunk_ids, keys, states)
    if not padded:
        return messages, jnp.ones(chunk_ids.shape, jnp.float32), new_states
    if valid is None:
        valid = chunk_ids < n_clients

    def zero_padding(m: jax.Array) -> jax.Array:
        mask = valid.reshape(valid.shape + (1,) * (m.ndim - 1))
        return jnp.where(mask, m, jnp.zeros_like(m))

    return jax.tree.map(zero_padding, messages), valid.astype(jnp.float32), new_states


def _block_fold(
    client_fn: ClientFn,
    statistic: Statistic,
    plan: ExecutionPlan,
    n_clients: int,
    any_padding: bool,
    carry: PyTree,
    block_index: jax.Array,
    broadcast: PyTree,
    population: Population,
    key: jax.Array,
) -> PyTree:
    """Add the statistic of one block of clients to ``carry``, one fixed-width chunk at a time.

    The chunks of a block run in a sequential loop rather than one wide vmap: XLA rounds a
    vectorised computation differently at different widths (measured: even ``sqrt(sum(x * x))``
    per client changes in the last bit between widths 7 and 256), so only a fixed width keeps every
    client's message, and hence the run, bit-identical across block sizes.

    ``any_padding`` (static) says whether the blocks reach past the last client.
    """
    block, chunk = plan.block_size, plan.chunk_size
    ids = block_index * block + jnp.arange(block, dtype=jnp.int32)

    def chunk_statistic(padded: bool) -> Callable[[jax.Array], PyTree]:
        def of(chunk_ids: jax.Array) -> PyTree:
            messages, weights, _ = _chunk_messages(
                client_fn, n_clients, chunk_ids, broadcast, population, key, padded=padded
            )
            return statistic(messages, weights)

        return of

    def add_chunk(total: PyTree, chunk_ids: jax.Array) -> tuple[PyTree, None]:
        if not any_padding:
            return _tree_add(total, chunk_statistic(False)(chunk_ids)), None
        stats = lax.platform_dependent(
            chunk_ids, cpu=mask_past_the_end, default=chunk_statistic(True)
        )
        return _tree_add(total, stats), None

    def mask_past_the_end(chunk_ids: jax.Array) -> PyTree:
        # only the chunks past the population's end need their padding masked: a full chunk
        # skips it (the same numbers: where(True, m, 0) is m), which on CPU saved a fifth of a
        # modulated round at d = 10 (XLA computed the masked messages again for each reader).
        # Not on accelerators, where a conditional waits on the host for its predicate.
        full = chunk_ids[-1] < n_clients
        return lax.cond(full, chunk_statistic(False), chunk_statistic(True), chunk_ids)

    total, _ = lax.scan(add_chunk, carry, ids.reshape(block // chunk, chunk))
    return total


def aggregate(
    client_fn: ClientFn,
    broadcast: PyTree,
    population: Population,
    key: jax.Array,
    plan: ExecutionPlan,
    statistic: Statistic = sum_messages,
) -> PyTree:
    """Sum a statistic of every client's message over the whole population.

    Traceable (call it inside ``jit``); ``plan`` and the population size are static.

    Args:
      client_fn: ``client_fn(broadcast, record, key) -> message`` for ONE client; ``record`` is
        the population's record of that client; the message is any pytree of arrays.
      broadcast: what the server sends to every client this round (pytree, replicated).
      population: the clients (:class:`~jfed.data.ArrayClients` or a procedural population).
      key: this round's client root key; client ``i`` gets ``client_key(key, i)`` (its stream).
      plan: block and chunk sizes, optional mesh.
      statistic: ``statistic(messages, weights) -> stats`` for one chunk, where every message leaf
        has a leading axis of ``chunk_size`` and ``weights: f32[chunk_size]`` is 1 for real
        clients and 0 for padding (whose messages are zero). Must be additive over chunks.

    Returns:
      The sum over all chunks of ``statistic``, a pytree like one chunk's statistic.

    Example:
      >>> total = aggregate(client_fn, broadcast, population, key, plan)  # doctest: +SKIP
    """
    n_clients = population.n_clients
    per_pass = plan.block_size * plan.n_shards
    blocks_per_shard = -(-n_clients // per_pass)
    block_ids = jnp.arange(blocks_per_shard * plan.n_shards, dtype=jnp.int32)
    any_padding = blocks_per_shard * per_pass > n_clients
    fold = partial(_block_fold, client_fn, statistic, plan, n_clients, any_padding)

    def local_total(local_block_ids, broadcast, population, key):
        zero = _zero_statistic(client_fn, statistic, plan, broadcast, population, key)
        total, _ = lax.scan(
            lambda c, b: (fold(c, b, broadcast, population, key), None), zero, local_block_ids
        )
        return total

    if plan.mesh is None:
        return local_total(block_ids, broadcast, population, key)

    def sharded(local_block_ids, broadcast, population, key):
        return lax.psum(local_total(local_block_ids, broadcast, population, key), CLIENT_AXIS)

    replicated = PartitionSpec()
    return jax.shard_map(
        sharded,
        mesh=plan.mesh,
        in_specs=(PartitionSpec(CLIENT_AXIS), replicated, replicated, replicated),
        out_specs=replicated,
        check_vma=False,
    )(block_ids, broadcast, population, key)


def _zero_statistic(client_fn, statistic, plan, broadcast, population, key) -> PyTree:
    zero_shape = jax.eval_shape(
        partial(_chunk_stat_shape, client_fn, statistic, plan), broadcast, population, key
    )
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), zero_shape)


def stack(
    client_fn: ClientFn,
    broadcast: PyTree,
    population: Population,
    key: jax.Array,
    plan: ExecutionPlan,
) -> PyTree:
    """Every client's message in client order (``[n_clients, ...]`` leaves), for algorithms
    whose server needs each report (e.g. to perturb and shuffle them); memory is
    O(n_clients x message), so keep it for few, heavy clients.

    The chunks' messages are the outputs of the scan over chunks (each shard scans its
    contiguous range), so the stack is written once, never summed. Chunks keep their fixed
    width, so a message is the same bits for every block size and device count. Arguments as
    :func:`aggregate`."""
    n_clients = population.n_clients
    per_pass = plan.block_size * plan.n_shards
    padded = -(-n_clients // per_pass) * per_pass
    chunk_ids = jnp.arange(padded, dtype=jnp.int32).reshape(-1, plan.chunk_size)

    def local_stack(local_chunk_ids, broadcast, population, key):
        def one_chunk(carry, ids):
            messages, _, _ = _chunk_messages(client_fn, n_clients, ids, broadcast, population,
                                             key)  # fmt: skip
            return carry, messages

        _, stacked = lax.scan(one_chunk, None, local_chunk_ids)
        return jax.tree.map(lambda m: m.reshape(-1, *m.shape[2:]), stacked)

    if plan.mesh is None:
        stacked = local_stack(chunk_ids, broadcast, population, key)
    else:
        replicated = PartitionSpec()
        stacked = jax.shard_map(
            local_stack,
            mesh=plan.mesh,
            in_specs=(PartitionSpec(CLIENT_AXIS), replicated, replicated, replicated),
            out_specs=PartitionSpec(CLIENT_AXIS),
            check_vma=False,
        )(chunk_ids, broadcast, population, key)
    return jax.tree.map(lambda m: m[:n_clients], stacked)


def aggregate_cohort(
    client_fn: ClientFn,
    broadcast: PyTree,
    population: Population,
    key: jax.Array,
    plan: ExecutionPlan,
    info: CohortInfo,
    statistic: Statistic = sum_messages,
) -> PyTree:
    """The statistic summed over a drawn cohort (``info``, from
    :func:`~jfed.engine.cohort.draw_cohort`): its ``capacity`` ids (padded to whole chunks on
    every shard) are streamed through the same fixed-width chunks as a population, one after
    another in cohort order; positions past the cohort's size get weight 0 and zero messages, as
    a population's tail padding does, so the round costs O(capacity) whatever n. Each client
    keeps its key ``client_key(key, id)``: its message does not depend on who else was drawn.
    With a mesh, contiguous ranges of chunks go to the devices and the partial statistics are
    ``psum``-ed. Other arguments as :func:`aggregate`."""
    return _cohort(client_fn, broadcast, population, key, plan, info, statistic)


def stack_cohort(
    client_fn: ClientFn,
    broadcast: PyTree,
    population: Population,
    key: jax.Array,
    plan: ExecutionPlan,
    info: CohortInfo,
) -> PyTree:
    """Every cohort member's message, stacked in cohort order: leaves ``[capacity, ...]``, row j
    is client ``info.ids[j]``; rows past ``info.size`` are zero. Arguments as
    :func:`aggregate_cohort`."""
    return _cohort(client_fn, broadcast, population, key, plan, info, None)


def cohort_with_state(
    client_fn: ClientFn,
    broadcast: PyTree,
    population: Population,
    key: jax.Array,
    plan: ExecutionPlan,
    info: CohortInfo,
    table: PyTree,
    statistic: Statistic | None = sum_messages,
) -> tuple[PyTree, PyTree]:
    """A cohort's statistic (``None``: its stacked messages) computed with per-client state,
    and the state table with the cohort's rows updated.

    ``client_fn(broadcast, record, key, state) -> (message, new_state)`` for ONE client, where
    ``state`` is its row of ``table`` (:mod:`jfed.engine.client_state`). The cohort's rows are
    gathered once (O(capacity)), streamed through the fixed-width chunks beside the ids, and the
    new rows of the cohort's members scattered back; positions past ``info.size`` (padding, id
    ``n_clients``) write nothing, so no client's row is touched unless it was drawn. ``info``
    with ``ids=None`` (every client) is the cohort ``0 .. n-1``. Other arguments as
    :func:`aggregate_cohort`.

    Returns:
      ``(result, table)``: the statistic (or stacked messages, leaves ``[capacity, ...]``) and
      the updated table.
    """
    from jfed.engine.client_state import gather_rows, scatter_rows

    ids = info.ids
    if ids is None:
        ids = jnp.arange(population.n_clients, dtype=jnp.int32)
        info = CohortInfo(info.size, info.overflow, info.capacity, ids)
    valid = jnp.arange(ids.shape[0], dtype=jnp.int32) < info.size
    rows = gather_rows(table, ids, plan)
    result, new_rows = _cohort(client_fn, broadcast, population, key, plan, info, statistic,
                               rows)  # fmt: skip
    # padding keeps the row it read (and writes nothing): what is written then depends on what
    # was read, so XLA orders the gather before the scatter and updates the table in place;
    # without it, a new state that ignores the old (e.g. c_i <- g) made it copy the whole table
    # every round (O(population): 0.4 s a round at 10^6 x 100 on CPU, twice the memory)
    new_rows = jax.tree.map(
        lambda new, old: jnp.where(valid.reshape((-1,) + (1,) * (new.ndim - 1)), new, old),
        new_rows, rows,
    )  # fmt: skip
    table = scatter_rows(table, ids, new_rows, valid, plan)
    return result, table


def _cohort(
    client_fn: ClientFn,
    broadcast: PyTree,
    population: Population,
    key: jax.Array,
    plan: ExecutionPlan,
    info: CohortInfo,
    statistic: Statistic | None,
    states: PyTree | None = None,
) -> Any:
    """The statistic (``None``: the stacked messages) of the drawn cohort ``info``; with
    ``states`` (the cohort's state rows, leaves ``[capacity, ...]``), the pair ``(result,
    new_states)``, the new rows in cohort order."""
    assert info.ids is not None  # a drawn cohort lists its ids
    n_clients = population.n_clients
    capacity = int(info.ids.shape[0])
    plan = plan.fitted(capacity)
    chunk = plan.chunk_size
    padded = -(-capacity // (chunk * plan.n_shards)) * chunk * plan.n_shards
    positions = jnp.arange(capacity, dtype=jnp.int32)
    # masked positions fetch client 0 (a real id: every record read stays in bounds); their
    # messages are computed at the fixed width, then zeroed
    fetched = jnp.where(positions < info.size, info.ids, 0)
    ids = jnp.pad(fetched, (0, padded - capacity)).reshape(-1, chunk)
    valid = (jnp.arange(padded, dtype=jnp.int32) < info.size).reshape(-1, chunk)
    stacked = statistic is None
    stateful = states is not None
    if stateful:
        states = jax.tree.map(
            lambda r: jnp.pad(r, [(0, padded - capacity)] + [(0, 0)] * (r.ndim - 1)).reshape(
                -1, chunk, *r.shape[1:]
            ),
            states,
        )

    def local(ids, valid, states, broadcast, population, key):
        def one_chunk(total, chunk_inputs):
            chunk_ids, chunk_valid, chunk_states = chunk_inputs
            messages, weights, new_states = _chunk_messages(
                client_fn, n_clients, chunk_ids, broadcast, population, key, chunk_valid,
                states=chunk_states,
            )  # fmt: skip
            if stacked:
                return total, (messages, new_states)
            return _tree_add(total, statistic(messages, weights)), (None, new_states)

        if stacked:
            total = None
        else:
            message_fn = client_fn
            if stateful:
                one_row = jax.tree.map(lambda s: s[0, 0], states)
                message_fn = lambda b, r, k: client_fn(b, r, k, one_row)[0]  # noqa: E731
            total = _zero_statistic(message_fn, statistic, plan, broadcast, population, key)
        total, (rows, new_states) = lax.scan(one_chunk, total, (ids, valid, states))
        flat = lambda m: m.reshape(-1, *m.shape[2:])  # noqa: E731
        result = jax.tree.map(flat, rows) if stacked else total
        return result, jax.tree.map(flat, new_states)

    if plan.mesh is None:
        result, new_states = local(ids, valid, states, broadcast, population, key)
    else:
        replicated, split = PartitionSpec(), PartitionSpec(CLIENT_AXIS)

        def sharded(ids, valid, states, broadcast, population, key):
            part, new_states = local(ids, valid, states, broadcast, population, key)
            return (part if stacked else lax.psum(part, CLIENT_AXIS)), new_states

        result, new_states = jax.shard_map(
            sharded,
            mesh=plan.mesh,
            in_specs=(split, split, split, replicated, replicated, replicated),
            out_specs=(split if stacked else replicated, split),
            check_vma=False,
        )(ids, valid, states, broadcast, population, key)
    if stacked:
        result = jax.tree.map(lambda m: m[:capacity], result)
    if not stateful:
        return result
    return result, jax.tree.map(lambda m: m[:capacity], new_states)


def _chunk_stat_shape(
    client_fn: ClientFn,
    statistic: Statistic,
    plan: ExecutionPlan,
    broadcast: PyTree,
    population: Population,
    key: jax.Array,
) -> PyTree:
    """The statistic of one chunk (traced only for its shape and dtype)."""
    ids = jnp.arange(plan.chunk_size, dtype=jnp.int32)
    messages, weights, _ = _chunk_messages(client_fn, 1, ids, broadcast, population, key)
    return statistic(messages, weights)
