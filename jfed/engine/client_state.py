"""Per-client state stored by the engine for the whole population: a table with one row per
client, gathered for a round's cohort and scattered back, O(cohort) work per round.

An algorithm declares ONE client's initial state (a pytree of arrays, e.g. a control variate
shaped like the model, a personal model, a counter); the engine keeps every leaf as
``[rows, *leaf.shape]`` (``rows`` >= n_clients, see :func:`table_rows`), row ``i`` the state of
client ``i``, and carries it from round to round beside the server state. A round reaches it
through :class:`jfed.engine.Clients` (``client_state=True``); what runs here is:

- :func:`gather_rows`: the rows of a cohort's ids, ``[capacity, ...]`` (an id past the
  population reads some row, which the caller masks);
- :func:`scatter_rows`: new rows written back at the ids marked valid; every other position,
  padding included (its id is ``n_clients``, never a real client's), writes nothing.

On a mesh the table is split by rows over the ``"clients"`` axis: device d holds rows
``[d m, (d + 1) m)``, ``m = rows / n_devices``. A gather is then each device's masked local
gather of every requested id, summed over the devices as integers (one device holds each row,
the others give zeros, so the sum is that row's bits exactly: no float rounding, no sign of zero
lost); a scatter hands every device all the new rows and each writes those in its own range.
Communication is O(capacity x state) per call, never O(population): no device ever holds the
whole table.

Memory: the table takes ``rows x (bytes of one client's state)`` on the devices, split over them;
a call adds ``O(capacity x state)`` (the gathered rows, the new rows); the scatter is in place
(the table is a loop carry of the compiled run).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from jfed.engine.plan import CLIENT_AXIS, ExecutionPlan

PyTree = Any


class RunState(NamedTuple):
    """The final state of a run whose algorithm keeps per-client state.

    Attributes:
      server: the algorithm's own state (what ``init`` and ``round`` return).
      clients: every client's state, one row per client: each leaf of the algorithm's
        ``client_state`` with a leading axis of ``n_clients``.
    """

    server: PyTree
    clients: PyTree


def table_rows(n_clients: int, plan: ExecutionPlan) -> int:
    """Rows of the table: ``n_clients`` rounded up to a multiple of the plan's devices (equal
    shards; the rows past the population are never read as a client's)."""
    shards = plan.n_shards
    return -(-int(n_clients) // shards) * shards


def create_table(initial: PyTree, n_clients: int, plan: ExecutionPlan) -> PyTree:
    """Every client's state at ``initial`` (ONE client's state: a pytree of arrays), as leaves
    ``[table_rows(n_clients, plan), *leaf.shape]``, split by rows over the plan's mesh."""
    rows = table_rows(n_clients, plan)

    def one(leaf: Any) -> jax.Array:
        leaf = jnp.asarray(leaf)
        table = jnp.broadcast_to(leaf, (rows, *leaf.shape))
        if plan.mesh is None:
            return table
        return jax.lax.with_sharding_constraint(
            table, NamedSharding(plan.mesh, PartitionSpec(CLIENT_AXIS))
        )

    return jax.tree.map(one, initial)


def trim_table(table: PyTree, n_clients: int) -> PyTree:
    """The table's first ``n_clients`` rows (the population's), each leaf ``[n_clients, ...]``."""
    return jax.tree.map(lambda t: t if t.shape[0] == n_clients else t[:n_clients], table)


def gather_rows(table: PyTree, ids: jax.Array, plan: ExecutionPlan) -> PyTree:
    """The rows at ``ids: i32[m]``, leaves ``[m, ...]`` (replicated on a mesh). An id outside
    ``[0, rows)`` reads a row of no meaning (the caller masks that position)."""
    if plan.mesh is None:
        return jax.tree.map(lambda t: jnp.take(t, ids, axis=0, mode="clip"), table)

    def local(table: PyTree, ids: jax.Array) -> PyTree:
        per_device = jax.tree.leaves(table)[0].shape[0]
        local_ids = ids - jax.lax.axis_index(CLIENT_AXIS) * per_device
        mine = (local_ids >= 0) & (local_ids < per_device)

        def one(t: jax.Array) -> jax.Array:
            rows = jnp.take(t, local_ids, axis=0, mode="clip")
            bits = _as_bits(rows)
            mask = mine.reshape(mine.shape + (1,) * (bits.ndim - 1))
            # one device holds each row: the integer sum is its bits, whatever the row's value
            summed = jax.lax.psum(jnp.where(mask, bits, jnp.zeros_like(bits)), CLIENT_AXIS)
            return _from_bits(summed, t.dtype)

        return jax.tree.map(one, table)

    return jax.shard_map(
        local,
        mesh=plan.mesh,
        in_specs=(PartitionSpec(CLIENT_AXIS), PartitionSpec()),
        out_specs=PartitionSpec(),
        check_vma=False,
    )(table, ids)


def scatter_rows(
    table: PyTree, ids: jax.Array, rows: PyTree, valid: jax.Array, plan: ExecutionPlan
) -> PyTree:
    """``table`` with row ``ids[j]`` set to ``rows[j]`` wherever ``valid[j]`` (``ids: i32[m]``,
    ``valid: bool[m]``, ``rows`` leaves ``[m, ...]``); positions not valid write nothing. The
    valid ids must be distinct (a cohort's are)."""
    total = jax.tree.leaves(table)[0].shape[0]
    if plan.mesh is None:
        target = jnp.where(valid, ids, total)  # past the end: dropped (a negative id would wrap)
        return jax.tree.map(lambda t, r: t.at[target].set(r, mode="drop"), table, rows)

    def local(table: PyTree, ids: jax.Array, rows: PyTree, valid: jax.Array) -> PyTree:
        per_device = jax.tree.leaves(table)[0].shape[0]
        local_ids = ids - jax.lax.axis_index(CLIENT_AXIS) * per_device
        mine = valid & (local_ids >= 0) & (local_ids < per_device)
        target = jnp.where(mine, local_ids, per_device)
        return jax.tree.map(lambda t, r: t.at[target].set(r, mode="drop"), table, rows)

    replicated = PartitionSpec()
    return jax.shard_map(
        local,
        mesh=plan.mesh,
        in_specs=(PartitionSpec(CLIENT_AXIS), replicated, replicated, replicated),
        out_specs=PartitionSpec(CLIENT_AXIS),
        check_vma=False,
    )(table, ids, rows, valid)


def check_new_state(old: PyTree, new: PyTree) -> None:
    """``ValueError`` unless a client function's new state has the structure, shapes and dtypes
    of the state it received (the table's row), naming the first difference."""
    old_structure, new_structure = jax.tree.structure(old), jax.tree.structure(new)
    # jaxlib's stub gives PyTreeDef no comparison operators
    if old_structure != new_structure:  # type: ignore[operator]
        raise ValueError(
            f"a client function's new state must have the structure of its state: expected "
            f"{old_structure}, got {new_structure}"
        )
    paths = jax.tree_util.tree_flatten_with_path(old)[0]
    for (path, a), b in zip(paths, jax.tree.leaves(new), strict=True):
        if np.shape(a) != np.shape(b) or jnp.result_type(a) != jnp.result_type(b):
            raise ValueError(
                f"a client function's new state must keep the shape and dtype of its state: "
                f"at {jax.tree_util.keystr(path) or 'the root'} expected "
                f"{jnp.result_type(a)}{list(np.shape(a))}, got "
                f"{jnp.result_type(b)}{list(np.shape(b))}"
            )


_BITS = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}


def _as_bits(x: jax.Array) -> jax.Array:
    """``x`` as unsigned integers of its width (booleans as uint8)."""
    if x.dtype == jnp.bool_:
        return x.astype(jnp.uint8)
    return jax.lax.bitcast_convert_type(x, _BITS[x.dtype.itemsize])


def _from_bits(bits: jax.Array, dtype: Any) -> jax.Array:
    if dtype == jnp.bool_:
        return bits.astype(jnp.bool_)
    return jax.lax.bitcast_convert_type(bits, dtype)
