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

Off the device. A table larger than the devices (10^6 clients x 10^5 parameters in float32 is
400 GB) is kept in host memory or on disk by a :class:`HostTable` named in the plan
(``ExecutionPlan(client_state=HostTable(path))``): one numpy array per leaf, ``[n_clients,
*leaf.shape]``, in host memory, or with a ``path`` an ``np.memmap`` of a ``.npy`` file per leaf
in that folder (``<leaf path>.npy``, e.g. ``control.npy``; ``state.npy`` for a single array),
readable with ``np.load`` after the run. The rounds stay ONE compiled program: a round's read and
write of the cohort's rows are ``jax.experimental.io_callback`` calls (ordered) inside it, at
the same places as the device table's gather and scatter, so the client function, the draws and
the sums are the same program and the results the same bits (tested); only ``O(capacity x
state)`` crosses between host and device per call, and no device holds more than the cohort's
rows. An outer per-round driver (a Python loop calling one compiled round) would also have
worked, but it would run a different program from the device path's (one dispatch per round, the
rounds' ``lax.scan`` gone) and could not serve the sweep's programs; callbacks keep one program
for both places. What the loop carries in place of the table is :class:`HostRows`, a counter of
the writes so far: every read takes it and every write returns its successor, so the reads and
writes are ordered by their data as well as by the callbacks' ordering.

The table is created by the program when a run starts (its initial row is computed on the
device from the run's key, as the device table's is): a fresh zeroed array or sparse file, the
row written into every client's place unless it is all zero bits (a zero initial state costs no
write, so a 400 GB file costs disk only for the rows the rounds write). It is flushed when the
run ends; :meth:`HostTable.rows` then gives every client's row (:func:`jfed.engine.simulate`
returns them in its :class:`RunState`).

One run at a time: the host holds one table per :class:`HostTable`, which every run that starts
recreates. Runs vmapped together (a sweep's vector width > 1) would share it, so they are
refused in one line; runs mapped one after another (a sweep's vector width 1, the CPU's default)
each get the table in turn, and the rows left are the last run's. A multi-process run is
refused (each process would write its own host's table).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback
from jax.sharding import NamedSharding, PartitionSpec

from jfed.engine.plan import CLIENT_AXIS, ExecutionPlan, TableStore

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
    ``[table_rows(n_clients, plan), *leaf.shape]``, split by rows over the plan's mesh; with a
    :class:`HostTable` in the plan, that table created on the host and its :class:`HostRows`."""
    if plan.client_state is not None:
        return _open_host_table(plan.client_state, initial, int(n_clients))
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
    """The table's first ``n_clients`` rows (the population's), each leaf ``[n_clients, ...]``;
    a table kept by a :class:`HostTable` flushed (its :class:`HostRows` returned: the rows are
    read on the host, :meth:`HostTable.rows`)."""
    if isinstance(table, HostRows):
        return table.after(_host_call(table.store.flush, _WRITES, table.writes))
    return jax.tree.map(lambda t: t if t.shape[0] == n_clients else t[:n_clients], table)


def gather_rows(table: PyTree, ids: jax.Array, plan: ExecutionPlan) -> PyTree:
    """The rows at ``ids: i32[m]``, leaves ``[m, ...]`` (replicated on a mesh). An id outside
    ``[0, rows)`` reads a row of no meaning (the caller masks that position)."""
    if isinstance(table, HostRows):
        ids = _replicated(ids, plan)
        rows = _host_call(table.store.read, table.rows_of(ids.shape[0]), ids, table.writes)
        return _replicated(rows, plan)
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
    if isinstance(table, HostRows):
        ids, rows, valid = _replicated((ids, rows, valid), plan)
        return table.after(_host_call(table.store.write, _WRITES, ids, valid, table.writes, rows))
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


# ------------------------------------------------------------------------------ off the device


_WRITES = jax.ShapeDtypeStruct((), jnp.uint32)
ONE_RUN = (
    "a per-client state table in host memory or on disk serves one run at a time: run these "
    "configurations one after another (vector width 1) or keep the table on the device "
    "(ExecutionPlan(client_state=None))"
)


class HostTable:
    """Where a per-client state table lives off the device: host memory, or ``.npy`` files in
    the folder ``path`` (see the module docstring). Name it in the plan:
    ``ExecutionPlan(client_state=HostTable("/scratch/scaffold"))``.

    A place, compared by identity (two ``HostTable()`` are two tables). Each run that starts
    recreates the table; :meth:`rows` reads the last run's.

    Args:
      path: a folder for the table's files (created if missing; its ``<leaf>.npy`` files are
        overwritten by every run); ``None``: host memory.
    """

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = None if path is None else os.fspath(path)
        self._tables: list[np.ndarray] = []
        self._treedef: Any = None

    def __repr__(self) -> str:
        return "HostTable()" if self.path is None else f"HostTable({self.path!r})"

    @property
    def kind(self) -> str:
        """``"disk"`` (a folder of files) or ``"host"`` (host memory)."""
        return "host" if self.path is None else "disk"

    def rows(self) -> PyTree:
        """Every client's state after the last run, leaves ``[n_clients, *leaf.shape]`` (numpy
        arrays; ``np.memmap`` views of the files on disk)."""
        if self._treedef is None:
            raise ValueError(f"{self!r} holds no table yet: no run has used it")
        return jax.tree.unflatten(self._treedef, list(self._tables))

    def files(self) -> list[str]:
        """The table's files, one per leaf in the order of the state's leaves (``[]`` in host
        memory)."""
        return [str(t.filename) for t in self._tables if isinstance(t, np.memmap)]

    # host side: called from inside the compiled run through io_callback

    def create(self, n_clients: int, treedef: Any, *initial: np.ndarray) -> Any:
        """A fresh table of ``n_clients`` rows, each ``initial`` (ONE client's leaves)."""
        names = _leaf_names(treedef, len(initial))
        if self.path is not None:
            os.makedirs(self.path, exist_ok=True)
        tables = []
        for name, leaf in zip(names, initial, strict=True):
            leaf = np.asarray(leaf)
            table = self._fresh(name, (n_clients, *leaf.shape), leaf.dtype)
            if np.ascontiguousarray(leaf).reshape(-1).view(np.uint8).any():
                step = max(1, _FILL_BYTES // max(1, leaf.nbytes))
                for start in range(0, n_clients, step):
                    table[start : start + step] = leaf
            tables.append(table)
        self._tables, self._treedef = tables, treedef
        return np.uint32(0)

    def restore(self, treedef: Any, *rows: np.ndarray) -> None:
        """The table set to ``rows`` (every client's leaves, ``[n_clients, *leaf.shape]``, in
        the order of the state's leaves), laid out as :meth:`create` lays a new one out: a run
        resumed from a checkpoint (:mod:`jfed.sweep.checkpoint`) continues with these rows."""
        names = _leaf_names(treedef, len(rows))
        if self.path is not None:
            os.makedirs(self.path, exist_ok=True)
        tables = []
        for name, leaf in zip(names, rows, strict=True):
            table = self._fresh(name, np.shape(leaf), np.asarray(leaf[:0]).dtype)
            step = max(1, _FILL_BYTES // max(1, table[:1].nbytes))
            for start in range(0, len(table), step):  # a copy a slice at a time
                table[start : start + step] = leaf[start : start + step]
            tables.append(table)
        self._tables, self._treedef = tables, treedef

    def _fresh(self, name: str, shape: tuple, dtype: Any) -> np.ndarray:
        """A zeroed leaf table: an array in host memory, or a new ``<name>.npy`` file mapped."""
        if self.path is None:
            return np.zeros(shape, dtype)  # pages zeroed when first touched
        file = os.path.join(self.path, f"{name}.npy")
        if os.path.exists(file):  # a new file: an earlier run's rows, mapped, stay whole
            os.remove(file)
        return np.lib.format.open_memmap(file, mode="w+", dtype=dtype, shape=shape)

    def read(self, ids: np.ndarray, writes: np.ndarray) -> PyTree:
        """The rows at ``ids`` (an id past the table reads its last row: masked by the caller)."""
        del writes  # an argument only to order this read after the writes before it
        at = np.clip(np.asarray(ids), 0, len(self._tables[0]) - 1)
        return jax.tree.unflatten(self._treedef, [np.asarray(table[at]) for table in self._tables])

    def write(self, ids: np.ndarray, valid: np.ndarray, writes: np.ndarray, rows: PyTree) -> Any:
        """Row ``ids[j]`` set to ``rows[j]`` wherever ``valid[j]``; the writes counted."""
        valid = np.asarray(valid)
        at = np.asarray(ids)[valid]
        for table, row in zip(self._tables, jax.tree.leaves(rows), strict=True):
            table[at] = np.asarray(row)[valid]
        return np.uint32(writes + 1)

    def flush(self, writes: np.ndarray) -> Any:
        """The files written through to disk (nothing in host memory)."""
        for table in self._tables:
            if isinstance(table, np.memmap):
                table.flush()
        return np.uint32(writes)


_FILL_BYTES = 2**26  # rows written at once when a table starts at a non-zero row


def _leaf_names(treedef: Any, count: int) -> list[str]:
    """A file name per leaf: its path in the state (``control``, ``params.w``), ``state`` for a
    single array; characters outside ``[A-Za-z0-9_.-]`` replaced, repeats numbered."""
    skeleton = jax.tree.unflatten(treedef, [0] * count)
    names: list[str] = []
    for path, _ in jax.tree_util.tree_flatten_with_path(skeleton)[0]:
        name = jax.tree_util.keystr(path, simple=True, separator=".") or "state"
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
        names.append(name if name not in names else f"{name}.{len(names)}")
    return names


@dataclass(frozen=True)
class HostRows:
    """What a run's loop carries for a table kept by a :class:`HostTable`: the count of writes
    so far (``writes: u32[]``; each read takes it, each write returns the next), and, static,
    the store and one client's row (``treedef`` and ``shapes``)."""

    writes: jax.Array
    store: TableStore
    n_clients: int
    treedef: Any
    shapes: tuple[jax.ShapeDtypeStruct, ...]

    def after(self, writes: jax.Array) -> HostRows:
        return HostRows(writes, self.store, self.n_clients, self.treedef, self.shapes)

    def rows_of(self, count: int) -> PyTree:
        """The shapes of ``count`` rows: leaves ``[count, *leaf.shape]``."""
        return jax.tree.unflatten(self.treedef, [
            jax.ShapeDtypeStruct((count, *s.shape), s.dtype) for s in self.shapes
        ])  # fmt: skip


jax.tree_util.register_dataclass(
    HostRows, data_fields=["writes"], meta_fields=["store", "n_clients", "treedef", "shapes"]
)


def _replicated(tree: PyTree, plan: ExecutionPlan) -> PyTree:
    """``tree`` whole on every device of the plan's mesh: what a host call (on one device)
    reads and gives without SPMD's warnings about resharding it."""
    if plan.mesh is None:
        return tree
    return jax.lax.with_sharding_constraint(tree, NamedSharding(plan.mesh, PartitionSpec()))


def _open_host_table(store: TableStore, initial: PyTree, n_clients: int) -> HostRows:
    if jax.process_count() > 1:
        raise ValueError(
            f"client_state={store!r} keeps the table on one host: a multi-process run "
            "(jax.distributed) keeps it on the devices (client_state=None)"
        )
    leaves, treedef = jax.tree.flatten(jax.tree.map(jnp.asarray, initial))
    shapes = tuple(jax.ShapeDtypeStruct(leaf.shape, leaf.dtype) for leaf in leaves)

    def create(*leaves: np.ndarray) -> Any:
        return store.create(n_clients, treedef, *leaves)

    writes = _host_call(create, _WRITES, *leaves)
    return HostRows(writes, store, n_clients, treedef, shapes)


def _host_call(callback: Callable[..., Any], result: PyTree, *args: PyTree) -> Any:
    """``callback(*args)`` on the host from inside the program (``io_callback``, ordered),
    returning ``result``'s shapes. Under ``vmap`` (runs vectorised together) it runs for a
    width of one run and refuses any wider (:data:`ONE_RUN`)."""

    def call(*args: PyTree) -> Any:
        return io_callback(callback, result, *args, ordered=True)

    one_run = jax.custom_batching.custom_vmap(call)

    @one_run.def_vmap
    def _(axis_size: int, in_batched: Any, *args: PyTree) -> tuple[Any, Any]:
        if axis_size != 1:
            raise ValueError(ONE_RUN)
        unbatched = [jax.tree.map(lambda a, b: a[0] if b else a, arg, batched)
                     for arg, batched in zip(args, in_batched, strict=True)]  # fmt: skip
        out = call(*unbatched)
        return jax.tree.map(lambda o: o[None], out), jax.tree.map(lambda _: True, out)

    return one_run(*args)


NAMED_STORES: dict[str, Callable[[], HostTable | None]] = {
    "device": lambda: None,
    "host": lambda: HostTable(),
}
"""The stores a plan's ``client_state`` may name by a string, each made afresh (a
:class:`HostTable` is a place of its own)."""


def store_named(name: str) -> HostTable | None:
    """The store a plan's ``client_state`` string names: ``"device"`` (``None``) or ``"host"``
    (a new :class:`HostTable` in host memory); a table on disk needs its folder:
    ``HostTable(path)``."""
    if name not in NAMED_STORES:
        raise ValueError(
            f"expected client_state 'device', 'host' or HostTable(path) (a folder for a table on "
            f"disk), got client_state={name!r}"
        )
    return NAMED_STORES[name]()


def table_bytes(initial: PyTree, n_clients: int) -> int:
    """Bytes of the table of ``n_clients`` rows of ``initial`` (ONE client's state; arrays or
    ``jax.ShapeDtypeStruct`` shapes)."""
    return int(n_clients) * sum(
        int(np.prod(np.shape(leaf))) * np.dtype(leaf.dtype).itemsize
        for leaf in jax.tree.leaves(initial)
    )


def choose_client_state(
    table: int,
    device_free: int,
    host_free: int,
    disk_free: int | None = None,
    requested: str | None = None,
) -> str:
    """Where a table of ``table`` bytes goes: ``requested`` (``"device"``, ``"host"`` or
    ``"disk"``) if it fits there, else (``None``) the first of device, host memory and disk
    (``disk_free``: bytes free in the folder the user named; ``None``: no folder named) with room
    for it. ``ValueError`` in one line, saying what each place has free, when it fits nowhere
    asked (a sparse file holds only the rows written, but a run may write every row)."""
    free = {"device": device_free, "host": host_free, "disk": disk_free}
    if requested is not None and requested not in free:
        raise ValueError(f"expected client_state in {sorted(free)}, got client_state={requested!r}")
    for place in [requested] if requested else list(free):
        room = free[place]
        if room is not None and table <= room:
            return place
    where = {"device": "on the device", "host": "in host memory", "disk": "on disk"}
    places = ", ".join(f"{_size(room)} {where[place]}" for place, room in free.items()
                       if room is not None)  # fmt: skip
    asked = f" (client_state={requested!r})" if requested else ""
    folder = "" if disk_free is not None else "; name a folder for a table on disk"
    raise ValueError(
        f"the per-client state table needs {_size(table)}{asked}, and {places} are free{folder}"
    )


def _size(value: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{int(value)} B"


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
