"""Checkpoints of a long run: its state every K rounds, written whole or not at all, and a resume
that continues it with the bits of the uninterrupted run.

A run's rounds are one ``lax.scan`` (:func:`jfed.engine.run_rounds`). With checkpoints the same
rounds run in segments of K (:func:`jfed.engine.loop.rounds_segment`, one compiled program per
segment length, the round index traced), the loop's carry handed from one segment to the next;
after each segment the carry is saved. Every draw is addressed by (run key, round, client,
stream) and a schedule by the round index and the run's rounds, so a segment starting at round r
computes what the one scan computes from round r: segmenting changes no bit, and neither does a
resume (both tested, ``tests/test_checkpoint.py``).

A checkpoint is ONE ``.npz`` file (numpy's zip of ``.npy`` arrays, readable with ``np.load``):

- ``meta``: JSON: the format, the method, EVERY field of the configuration, the rounds, the
  data's identity, the jfed version and the rounds done; a resume of any other run is refused
  in one line naming the first differences;
- ``server/<i>``: the leaves of the server state (the algorithm's, aggregator states included;
  a PRNG key as its key data);
- ``table/<i>``: every client's state (``[n_clients, ...]`` per leaf), wherever the table lives
  (device, host memory or disk: a table off the device is copied into the checkpoint, the one
  cost that grows with the population);
- ``infos/<i>``: the per-round diagnostics so far (``[1, rounds done, ...]``): the metrics a run
  evaluates at its end.

Nothing else is needed: the hyper-parameters are calibrated again from the configuration (a
function of it alone) and the keys are derived again from its seed.

It is written to a temporary file beside the target, synced, renamed over it
(:func:`jfed._io.replacing`), so a run killed while writing one keeps the previous checkpoint
whole. A finished run removes its checkpoint unless asked to keep it (``keep``: the last one,
after the last round, stays; a resume from it runs no round).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jfed._io import replacing
from jfed._validation import UsageError
from jfed.engine.client_state import HostRows
from jfed.engine.loop import finish_rounds, rounds_segment, start_rounds
from jfed.engine.plan import ExecutionPlan
from jfed.sweep import schema

FORMAT = 1

PyTree = Any


@dataclass(frozen=True)
class Checkpoints:
    """How a run keeps checkpoints (``jfed run --checkpoint-every K``; ``jfed.run(...,
    checkpoint_every=K, checkpoint_path=...)``).

    Attributes:
      path: the checkpoint file (:func:`checkpoint_path`).
      every: rounds between two checkpoints (K >= 1).
      resume: continue from the checkpoint at ``path`` if there is one (else start at round 0);
        without it, a checkpoint at ``path`` is refused (it would be overwritten).
      keep: keep the checkpoint of the finished run (its state after the last round).
      on_checkpoint: called with the rounds done after each checkpoint is written (hooks,
        tests).
    """

    path: str
    every: int
    resume: bool = False
    keep: bool = False
    on_checkpoint: Callable[[int], None] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.every, bool) or int(self.every) != self.every or self.every < 1:
            raise UsageError(
                f"expected checkpoint_every >= 1 (an integer, rounds), got {self.every!r}"
            )
        if not isinstance(self.path, str) or not self.path:
            raise UsageError(f"expected a checkpoint file path, got {self.path!r}")


def identity(experiment: Any, config: Any) -> dict:
    """What a checkpoint must match to be resumed: the format, the method, every field of
    ``config``, the rounds, the data's identity and the jfed version (JSON values)."""
    return json.loads(json.dumps({
        "format": FORMAT,
        "method": experiment.name,
        "config": schema.config_fields(config),
        "rounds": int(experiment.rounds),
        "data": experiment.identity(),
        "jfed_version": schema.jfed_version(),
    }, default=str))  # fmt: skip


def differences(saved: dict, wanted: dict, limit: int = 3) -> list[str]:
    """The first ``limit`` differences between a checkpoint's identity and this run's, as
    ``name=saved (this run: value)``."""
    found = []
    for name in ("format", "method", "jfed_version", "rounds"):
        if saved.get(name) != wanted.get(name):
            found.append(f"{name}={saved.get(name)!r} (this run: {wanted.get(name)!r})")
    for section in ("config", "data"):
        mine, theirs = wanted.get(section) or {}, saved.get(section) or {}
        for name in sorted(set(mine) | set(theirs)):
            if mine.get(name) != theirs.get(name) and name != "method":
                found.append(f"{name}={theirs.get(name)!r} (this run: {mine.get(name)!r})")
    return found[:limit]


class Saved(NamedTuple):
    """A checkpoint read back: its ``meta`` (identity and ``round``, the rounds done) and the
    leaves of the server state, the client table and the infos so far."""

    meta: dict
    server: list[np.ndarray]
    table: list[np.ndarray]
    infos: list[np.ndarray]


def write(path: str, meta: dict, server: list, table: list, infos: list) -> None:
    """Save a checkpoint to ``path`` whole or not at all (temporary file, sync, rename)."""
    arrays = {"meta": np.array(json.dumps(meta))}
    for section, leaves in (("server", server), ("table", table), ("infos", infos)):
        arrays |= {f"{section}/{i}": leaf for i, leaf in enumerate(leaves)}
    with replacing(path, "wb") as handle:
        np.savez(handle, **arrays)  # type: ignore[arg-type]  # (numpy's stub: str keys only)


def read(path: str) -> Saved | None:
    """The checkpoint at ``path`` (``None`` when there is none); ``UsageError`` naming it when
    it is not a jfed checkpoint or is damaged."""
    if not os.path.exists(path):
        return None
    try:
        with np.load(path, allow_pickle=False) as saved:
            meta = json.loads(str(saved["meta"]))
            sections: dict[str, list] = {"server": [], "table": [], "infos": []}
            for section, leaves in sections.items():
                count = sum(1 for name in saved.files if name.startswith(f"{section}/"))
                leaves += [saved[f"{section}/{i}"] for i in range(count)]
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as error:
        raise UsageError(
            f"{path} is not a readable jfed checkpoint ({error}); remove it to start the run over"
        ) from None
    if not isinstance(meta, dict) or "round" not in meta:
        raise UsageError(f"{path} is not a jfed checkpoint (no round recorded); remove it")
    return Saved(meta, sections["server"], sections["table"], sections["infos"])


def remove(path: str) -> None:
    """The checkpoint at ``path`` removed (nothing when there is none)."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


# ------------------------------------------------------------------------- the segmented run


class Programs(NamedTuple):
    """The programs of one run in segments, each ``lax.map`` over the slice's units (one here)
    as the runner's one program is, so each unit's computation is the same program's."""

    start: Callable  # (population, hps, keys) -> (carry, releases)
    segment: Callable[[int], Callable]  # length -> (population, hps, keys, carry, first, token)
    # -> (carry, infos, releases)
    finish: Callable  # (population, carry, infos) -> outputs


@lru_cache(maxsize=8)
def programs(
    algorithm: Any, rounds: int, plan: ExecutionPlan, outputs: Any, width: int,
    progress_every: int = 0, counting: Callable[[], Any] | None = None,
) -> Programs:  # fmt: skip
    """The jitted programs of a run of ``rounds`` cut into segments: its start (the carry
    before round 0), a segment of a given length from a traced first round, and its finish
    (the kept ``outputs`` from the last carry and all the infos); ``progress_every > 0`` reports
    rounds to the bar named by the segment's token. The start and each segment also return the
    releases they made as they ran (``i32[units]``), counted inside ``counting()`` (a context
    manager yielding an ``i32[]`` cell, as ``jfed.engine.release_count.counting_releases``;
    ``None``: none counted, zeros), which the runner adds up and checks as it checks an
    unsegmented run's."""
    count = counting or _not_counting

    def single(hp: PyTree) -> PyTree:
        return jax.tree.map(lambda leaf: leaf[0], hp)  # a unit of one run (the runner's shape)

    def start(population, hps, keys):
        def one(args):
            hp, key = args
            with count() as counter:
                carry = start_rounds(algorithm, population, single(hp), key, plan)
            return carry, _read(counter)

        return jax.lax.map(one, (hps, keys), batch_size=width)

    @lru_cache(maxsize=4)
    def segment(length: int) -> Callable:
        def program(population, hps, keys, carry, first, token):
            def one(args):
                hp, key, state = args
                with count() as counter:
                    state, infos = rounds_segment(
                        algorithm, population, single(hp), key, state, first, length, rounds,
                        plan, token if progress_every else None, progress_every or 1,
                    )  # fmt: skip
                return state, infos, _read(counter)

            return jax.lax.map(one, (hps, keys, carry), batch_size=width)

        return jax.jit(program)

    def finish(population, carry, infos):
        def one(args):
            state, info = args
            kept = outputs(finish_rounds(state, population.n_clients), info)
            return jax.tree.map(lambda leaf: leaf[None], kept)

        return jax.lax.map(one, (carry, infos), batch_size=width)

    return Programs(jax.jit(start), segment, jax.jit(finish))


@contextlib.contextmanager
def _not_counting() -> Iterator[None]:
    yield None


def _read(counter: Any) -> jax.Array:
    """The releases a counting cell holds (``0`` for none kept)."""
    return jnp.int32(0) if counter is None else counter[...]


def saved_carry(carry: PyTree, n_clients: int) -> tuple[list, list]:
    """The leaves a checkpoint keeps of a loop carry (one unit: leading axis 1): the server
    state's (PRNG keys as their key data) and every client's row of the table, read from the
    host for a table kept off the device."""
    server, table = carry
    leaves = [_plain(leaf) for leaf in jax.tree.leaves(server)]
    if table is None:
        return leaves, []
    if isinstance(table, HostRows):
        return leaves, [np.asarray(leaf) for leaf in jax.tree.leaves(table.store.rows())]
    return leaves, [np.asarray(leaf[0, :n_clients]) for leaf in jax.tree.leaves(table)]


def _plain(leaf: jax.Array) -> np.ndarray:
    if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        leaf = jax.random.key_data(leaf)
    return np.asarray(leaf)


def restored_carry(expected: PyTree, saved: Saved, plan: ExecutionPlan, path: str) -> PyTree:
    """The loop carry of ``saved`` in the structure ``expected`` (the start program's shapes);
    a table kept off the device is restored in its store. ``UsageError`` naming ``path`` when the
    checkpoint's arrays do not fit this program."""
    server_shape, table_shape = expected
    shapes, treedef = jax.tree.flatten(server_shape)
    server = jax.tree.unflatten(
        treedef, [_leaf(shape, value, path) for shape, value in _paired(shapes, saved.server, path)]
    )
    if table_shape is None:
        _paired([], saved.table, path)
        return server, None
    if isinstance(table_shape, HostRows):
        rows = [(jax.ShapeDtypeStruct((table_shape.n_clients, *s.shape), s.dtype), value)
                for s, value in _paired(table_shape.shapes, saved.table, path)]  # fmt: skip
        restore = getattr(table_shape.store, "restore", None)
        if restore is None:
            raise UsageError(
                f"the client-state store {table_shape.store!r} cannot restore a table "
                "(no restore method): keep the table in a jfed.engine.HostTable to resume"
            )
        restore(table_shape.treedef, *[_leaf(shape, value, path) for shape, value in rows])
        return server, table_shape.after(jnp.zeros(table_shape.writes.shape, jnp.uint32))
    leaves, table_def = jax.tree.flatten(table_shape)
    table = []
    for shape, value in _paired(leaves, saved.table, path):
        n_rows = shape.shape[1]
        row = jax.ShapeDtypeStruct((value.shape[0], *shape.shape[2:]), shape.dtype)
        value = _leaf(row, value, path)
        padding = np.zeros((n_rows - len(value), *value.shape[1:]), value.dtype)
        table.append(np.concatenate([value, padding])[None])  # rows past the population: unread
    return server, jax.tree.unflatten(table_def, table)


def _paired(shapes: Sequence, values: list, path: str) -> list[tuple]:
    if len(shapes) != len(values):
        raise UsageError(
            f"checkpoint {path} holds {len(values)} arrays where this run's state has "
            f"{len(shapes)}: it is not a checkpoint of this program; remove it to start over"
        )
    return list(zip(shapes, values, strict=True))


def _leaf(shape: jax.ShapeDtypeStruct, value: np.ndarray, path: str) -> Any:
    """``value`` as a leaf of ``shape`` (a PRNG key rebuilt from its data)."""
    if jax.dtypes.issubdtype(shape.dtype, jax.dtypes.prng_key):
        return jax.random.wrap_key_data(jnp.asarray(value), impl=shape.dtype._impl)  # type: ignore[attr-defined]
    if tuple(value.shape) != tuple(shape.shape) or value.dtype != shape.dtype:
        raise UsageError(
            f"checkpoint {path} holds {value.dtype}{list(value.shape)} where this run's state "
            f"has {shape.dtype}{list(shape.shape)}: it is not a checkpoint of this program; "
            "remove it to start over"
        )
    return value


def _appended(infos: list | None, new: list) -> list:
    """The infos so far (leaves ``[1, r, ...]``) followed by a segment's, along the rounds."""
    if infos is None:
        return new
    return [np.concatenate([old, more], axis=1) for old, more in zip(infos, new, strict=True)]


class Outcome(NamedTuple):
    """A segmented run's kept outputs, the releases it made as it ran (``i32[units]``, resumed
    runs included), the seconds spent compiling and running (this process's), and the round it
    resumed at (0: it started afresh)."""

    outputs: PyTree
    releases: np.ndarray
    compile_seconds: float
    run_seconds: float
    resumed_at: int


class _Progress(NamedTuple):
    """Where a segmented run stands: its loop carry, the infos so far (leaves ``[1, done,
    ...]``; ``None`` before any round), the releases counted so far and the rounds done."""

    carry: PyTree
    infos: list | None
    releases: np.ndarray
    done: int


def opened(checkpoints: Checkpoints, meta: dict) -> Saved | None:
    """The checkpoint a run continues from (``None``: none, it starts at round 0).

    Raises:
      UsageError: a checkpoint exists and ``resume`` is not asked, or it is one of another
        run (its configuration, rounds or jfed differ: the first differences are named).
    """
    path = checkpoints.path
    saved = read(path)
    if saved is None:
        return None
    if not checkpoints.resume:
        raise UsageError(
            f"a checkpoint of an earlier run is at {path} (round {saved.meta['round']} of "
            f"{saved.meta.get('rounds')}): pass --resume (resume=True) to continue it, or "
            "remove it"
        )
    mismatch = differences(saved.meta, meta)
    if mismatch:
        raise UsageError(
            f"cannot resume from {path}: it is a checkpoint of another run ("
            f"{'; '.join(mismatch)}); use the same arguments, or remove it"
        )
    return saved


def run_segments(
    run: Programs, population: Any, hps: PyTree, keys: jax.Array, rounds: int,
    checkpoints: Checkpoints, meta: dict, plan: ExecutionPlan, compiled: Callable,
    token: jax.Array,
) -> Outcome:  # fmt: skip
    """Run ``rounds`` rounds in segments of ``checkpoints.every``, saving the carry after each
    (with ``meta``, the run's :func:`identity`) and continuing from a saved one
    (:func:`opened`); ``compiled(program, args) -> (executable, seconds)`` compiles.
    ``UsageError`` as :func:`opened` raises it, before anything compiles."""
    saved = opened(checkpoints, meta)
    built: dict[Any, float] = {}  # seconds to build each program (once, however often it runs)
    waited = [0.0]  # seconds this call spent in ``compiled`` (a program built before is free)

    def executable_of(program: Callable, args: tuple) -> Callable:
        start = time.perf_counter()
        executable, built[program] = compiled(program, args)
        waited[0] += time.perf_counter() - start
        return executable

    tic = time.perf_counter()
    if saved is not None:
        expected, _ = jax.eval_shape(run.start, population, hps, keys)
        carry = restored_carry(expected, saved, plan, checkpoints.path)
        releases = np.asarray(saved.meta["releases"], np.int64)
        state = _Progress(carry, saved.infos, releases, int(saved.meta["round"]))
    else:
        carry, releases = executable_of(run.start, (population, hps, keys))(population, hps, keys)
        state = _Progress(carry, None, np.asarray(releases, np.int64), 0)
    resumed_at, info_def = state.done, None
    while state.done < rounds:
        length = min(checkpoints.every, rounds - state.done)
        args = (population, hps, keys, state.carry, jnp.int32(state.done), token)
        carry, infos, releases = jax.block_until_ready(
            executable_of(run.segment(length), args)(*args)
        )
        leaves, info_def = jax.tree.flatten(infos)
        state = _Progress(carry, _appended(state.infos, [np.asarray(x) for x in leaves]),
                          state.releases + np.asarray(releases), state.done + length)  # fmt: skip
        if state.done < rounds or checkpoints.keep:
            _save(checkpoints, meta, state, int(population.n_clients))
    if info_def is None:  # resumed after the last round: the infos' structure from the program
        shapes = jax.eval_shape(run.segment(1), population, hps, keys, state.carry,
                                jnp.int32(0), token)  # fmt: skip
        info_def = jax.tree.structure(shapes[1])
    infos = jax.tree.unflatten(info_def, state.infos or [])
    finish = executable_of(run.finish, (population, state.carry, infos))
    outputs = jax.block_until_ready(finish(population, state.carry, infos))
    if not checkpoints.keep:
        remove(checkpoints.path)
    run_seconds = time.perf_counter() - tic - waited[0]
    return Outcome(outputs, state.releases, sum(built.values()), run_seconds, resumed_at)


def _save(checkpoints: Checkpoints, meta: dict, state: _Progress, n_clients: int) -> None:
    """``state`` written to the checkpoint file (its folder made if missing), then the hook."""
    server, table = saved_carry(state.carry, n_clients)
    folder = os.path.dirname(os.path.abspath(checkpoints.path))
    os.makedirs(folder, exist_ok=True)
    extra = {"round": state.done, "releases": [int(r) for r in state.releases]}
    write(checkpoints.path, meta | extra, server, table, state.infos or [])
    if checkpoints.on_checkpoint is not None:
        checkpoints.on_checkpoint(state.done)
