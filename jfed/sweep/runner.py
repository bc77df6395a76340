"""Run a grid of configurations (eps x seed x hyper-parameters) inside one compiled program.

The host calibrates every configuration's noise (privacy layer); the device runs a slice of
units in one call, ``jit(lax.map(unit, units, batch_size=width))`` (vmapped ``width`` at a time:
all of them on accelerators, one at a time on CPU, see :func:`default_vector_width`). A unit is
one run, or, where the algorithm allows it, all the eps of one (seed, hyper-parameters): those
runs share their keys, so the unit draws the randomness once and scales the noise per eps
(:class:`jfed.algorithms.modulated.SharedNoise`). Slices all have the same size (the last is
padded), so ONE compiled program serves the whole sweep; their size is decided from the grid size
and the per-unit memory footprint (XLA's memory analysis) against a memory budget. Each finished
slice's rows are appended to a JSON-lines file and flushed to disk, so an interrupted sweep
(even ``kill -9``) resumes with ``resume=True``, re-running nothing that finished.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Callable, Iterable
from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from jfed.engine import ExecutionPlan, run_rounds
from jfed.sweep.adapters import stack
from jfed.sweep.lock import folder_lock

DEFAULT_MEMORY_BUDGET = 2 * 2**30  # bytes of device memory a slice may use
MAX_SLICE = 512


def configurations(
    epsilons: Iterable[float], seeds: int | Iterable[int], grid: dict[str, Iterable[float]]
) -> list[dict]:
    """Every ``{"epsilon", "seed", **hyper}`` of the product eps x seeds x grid."""
    seeds = range(seeds) if isinstance(seeds, int) else list(seeds)
    names = sorted(grid)
    combos = list(itertools.product(*(list(grid[name]) for name in names))) or [()]
    return [
        {"epsilon": float(e), "seed": int(s), **dict(zip(names, map(float, combo), strict=True))}
        for e in epsilons
        for combo in combos
        for s in seeds
    ]


def config_key(config: dict) -> str:
    """A stable identity of a configuration (for resuming)."""
    return json.dumps({k: config[k] for k in sorted(config)}, sort_keys=True)


def read_rows(path: str) -> list[dict]:
    """All complete rows of a JSON-lines results file, one per configuration (the first written;
    a torn last line is ignored). Raises ``ValueError`` for a file that is not jfed's."""
    if not os.path.exists(path):
        return []
    rows, seen = [], set()
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by an interruption; its configuration re-runs
            if not isinstance(row, dict) or not {"config_key", "algorithm", "epsilon"} <= set(row):
                raise ValueError(
                    f"{path} line {number} is not a jfed sweep row (expected the fields "
                    "config_key, algorithm, epsilon)"
                )
            if row["config_key"] not in seen:
                seen.add(row["config_key"])
                rows.append(row)
    return rows


def _append(path: str, rows: list[dict]) -> None:
    if os.path.exists(path) and os.path.getsize(path) > 0:
        with open(path, "rb") as handle:
            handle.seek(-1, os.SEEK_END)
            torn = handle.read(1) != b"\n"
        if torn:  # an interrupted write left a partial line: end it so new rows stay whole
            with open(path, "a", encoding="utf-8") as handle:
                handle.write("\n")
    with open(path, "a", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def default_vector_width(slice_size: int) -> int:
    """Configurations vectorised together inside a slice: all of them on an accelerator; one at a
    time on CPU, where a wide vmap makes every op memory-bound (measured on the one-shot Fair
    sweep, 200 runs in one program: 0.064 s mapped one at a time, 0.15 s fully vmapped)."""
    return 1 if jax.default_backend() == "cpu" else slice_size


def _units(configs: list[dict], shared: bool) -> list[list[dict]]:
    """Configurations run together: with shared noise, all eps of one (seed, hyper-parameters);
    otherwise each configuration alone."""
    if not shared:
        return [[config] for config in configs]
    groups: dict[str, list[dict]] = {}
    for config in configs:
        rest = {k: v for k, v in config.items() if k != "epsilon"}
        groups.setdefault(config_key(rest), []).append(config)
    return list(groups.values())


def _stack_unit(hps: list, shared_algorithm):
    """Stack a unit's hyper-parameters (leaves ``[E, ...]``); runs that share their noise are
    checked against the shared-noise algorithm's contract first (``check_shared``)."""
    if shared_algorithm is not None:
        shared_algorithm.check_shared(hps)
    return stack(hps)


@lru_cache(maxsize=32)
def _unit_function(algorithm, rounds: int, plan: ExecutionPlan, adapter_outputs, shared: bool):
    """``(population, hp, key) -> outputs`` of one unit, every output leaf with a leading ``E``."""

    def unit(population, hp, key):
        if shared:
            state, infos = run_rounds(algorithm, population, hp, key, rounds, plan)
            infos = jax.tree.map(lambda leaf: jnp.swapaxes(leaf, 0, 1), infos)
            return jax.vmap(adapter_outputs)(state, infos)
        single = jax.tree.map(lambda leaf: leaf[0], hp)
        outputs = adapter_outputs(*run_rounds(algorithm, population, single, key, rounds, plan))
        return jax.tree.map(lambda leaf: leaf[None], outputs)

    return unit


@lru_cache(maxsize=32)
def _program(unit, population_shape, width: int):
    """One compiled program for a slice: ``lax.map`` over its units, ``width`` of them vmapped at
    a time. Cached per static configuration (and jit caches the executable per input shapes), so
    re-running a sweep in the same process does not recompile."""
    del population_shape  # part of the cache key only

    def program(population, hps, keys):
        return jax.lax.map(lambda args: unit(population, *args), (hps, keys), batch_size=width)

    return jax.jit(program)


def unit_footprint(unit, population, hp, key) -> int:
    """Device bytes one unit needs (XLA's memory analysis of its compiled program)."""
    memory = jax.jit(unit).lower(population, hp, key).compile().memory_analysis()
    return max(1, memory.temp_size_in_bytes + memory.output_size_in_bytes)


def run_sweep(
    adapter,
    configs: list[dict],
    results_path: str,
    resume: bool = False,
    slice_size: int | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    plan: ExecutionPlan | None = None,
    progress: bool = True,
    identity: dict | None = None,
    on_slice: Callable[[int], None] | None = None,
    vector_width: int | None = None,
    share_noise: bool = True,
) -> list[dict]:
    """Run ``configs`` and append one row per run to ``results_path`` (JSON lines).

    Configurations that differ only in eps run as one unit when the algorithm allows it
    (``adapter.shared_noise_algorithm``, the modulated estimators): they have the same key, so
    they draw the same numbers, and the unit draws them once and scales the noise per eps (see
    :class:`jfed.algorithms.modulated.SharedNoise`); each row equals its separate run up to float32
    rounding.

    Args:
      adapter: a :mod:`jfed.sweep.adapters` adapter (algorithm, task, calibration, evaluation).
      configs: configurations (:func:`configurations`).
      results_path: the JSON-lines file; must not exist unless ``resume``.
      resume: skip configurations already in the file.
      slice_size: runs per compiled call, rounded down to whole units (at least one unit);
        default: from the memory budget.
      memory_budget: bytes one slice may use when ``slice_size`` is not given.
      plan: engine plan of every run.
      progress: show a progress bar with ETA over runs (updated per slice).
      identity: extra fields written in every row (e.g. the dataset name).
      on_slice: called with the slice index after each slice is written (hooks, tests).
      vector_width: units vmapped together inside a slice (default:
        :func:`default_vector_width`).
      share_noise: run the eps of one (seed, hyper-parameters) as one unit where the algorithm
        allows it (``False``: every run on its own, bit-identical to :func:`jfed.engine.simulate`).

    Returns:
      The rows of every configuration of ``configs`` (read back from the file).
    """
    for config in configs:
        adapter.check({k: v for k, v in config.items() if k not in ("epsilon", "seed")})
    folder = os.path.dirname(os.path.abspath(results_path))
    with folder_lock(folder):  # one writer per folder: rows are never written twice
        return _run_sweep(
            adapter, configs, results_path, resume, slice_size, memory_budget, plan, progress,
            identity, on_slice, vector_width, share_noise,
        )  # fmt: skip


def _run_sweep(
    adapter, configs, results_path, resume, slice_size, memory_budget, plan, progress, identity,
    on_slice, vector_width, share_noise,
) -> list[dict]:  # fmt: skip
    if os.path.exists(results_path) and not resume:
        raise ValueError(
            f"results file {results_path} exists; pass resume=True (--resume) to continue it "
            "or choose another path"
        )
    done = {row["config_key"] for row in read_rows(results_path)}
    todo = [c for c in configs if config_key(c) not in done]
    population = adapter.task.train
    plan = (plan or ExecutionPlan.for_backend()).fitted(population.n_clients)
    shared_algorithm = adapter.shared_noise_algorithm if share_noise else None
    shared = shared_algorithm is not None
    if todo:
        if hasattr(adapter, "prepare"):  # host calibration of the whole grid at once
            adapter.prepare(todo)
        units = _units(todo, shared)
        per_unit = max(len(unit) for unit in units)  # shorter units are padded to this
        unit = _unit_function(
            shared_algorithm if shared else adapter.algorithm,
            adapter.rounds,
            plan,
            adapter.outputs,
            shared,
        )

        def prepared(unit_configs):
            padded = unit_configs + [unit_configs[-1]] * (per_unit - len(unit_configs))
            calibrated = [adapter.hyperparams(c) for c in padded]
            hp = _stack_unit([hp for hp, _ in calibrated], shared_algorithm if shared else None)
            return hp, [fields for _, fields in calibrated]

        if slice_size is not None:
            units_per_slice = max(1, slice_size // per_unit)
        else:
            hp, _ = prepared(units[0])
            footprint = unit_footprint(unit, population, hp, jax.random.key(0))
            units_per_slice = max(1, min(MAX_SLICE // per_unit, memory_budget // footprint))
        units_per_slice = min(units_per_slice, len(units))
        program = _program(
            unit,
            jax.tree.map(np.shape, population),
            vector_width or default_vector_width(units_per_slice),
        )
        bar = tqdm(total=len(configs), initial=len(configs) - len(todo), disable=not progress,
                   desc=f"sweep {adapter.name}", unit="run")  # fmt: skip
        for index, start in enumerate(range(0, len(units), units_per_slice)):
            chunk = units[start : start + units_per_slice]
            padded = chunk + [chunk[-1]] * (units_per_slice - len(chunk))
            prepared_units = [prepared(u) for u in padded]
            hps = stack([hp for hp, _ in prepared_units])
            keys = jax.vmap(jax.random.key)(np.array([u[0]["seed"] for u in padded]))
            tic = time.perf_counter()
            outputs = jax.device_get(program(population, hps, keys))
            seconds = time.perf_counter() - tic
            n_runs = sum(len(u) for u in chunk)
            rows = []
            for g, unit_configs in enumerate(chunk):
                for e, config in enumerate(unit_configs):
                    run_outputs = jax.tree.map(
                        lambda leaf, g=g, e=e: np.asarray(leaf[g, e]), outputs
                    )
                    rows.append(
                        {
                            "config_key": config_key(config),
                            "algorithm": adapter.name,
                            **(identity or {}),
                            **config,
                            "rounds": adapter.rounds,
                            "n_clients": population.n_clients,
                            "dim": adapter.task.dim,
                            **prepared_units[g][1][e],
                            **adapter.evaluate(run_outputs),
                            "seconds": seconds / n_runs,
                            "slice": index,
                            "slice_size": units_per_slice * per_unit,
                            "shared_noise": shared,
                            "jfed_version": _version(),
                        }
                    )
            _append(results_path, rows)
            bar.update(n_runs)
            if on_slice is not None:
                on_slice(index)
        bar.close()
    wanted = {config_key(c) for c in configs}
    return [row for row in read_rows(results_path) if row["config_key"] in wanted]


def _version() -> str:
    from jfed import __version__

    return __version__
