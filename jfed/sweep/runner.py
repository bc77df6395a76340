"""Run configurations of a method (eps x seed x tunable fields) inside one compiled program.

``jfed run`` is a sweep of one configuration through this same path: calibrate on the host
(privacy layer), compile, run on the device, evaluate on the host, write the record
(:mod:`jfed.sweep.schema`).

The device runs a slice of units in one call, ``lax.map(unit, units, batch_size=width)``
(vmapped ``width`` at a time: all of them on accelerators, one at a time on CPU, see
:func:`default_vector_width`). A unit is one run, or, where the method allows it, all the eps of
one (seed, settings): those runs share their keys, so the unit draws the randomness once and
scales the noise per eps (:class:`jfed.algorithms.modulated.SharedNoise`). Slices all have the
same size (the last is padded), so ONE compiled program serves the whole sweep; their size comes
from the grid size and the per-unit memory footprint (XLA's memory analysis) against a memory
budget. Each finished slice's rows are appended to a JSON-lines file and synced to disk row by
row, so an interrupted sweep (even ``kill -9``) resumes with ``resume=True``, re-running nothing
that finished (a row cut mid-write is removed with a note, and runs again); the configuration a
folder was run with is kept beside it, and a resume with any other, or a results file holding
rows of another sweep, is refused before anything is written.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from jfed._validation import UsageError
from jfed.engine import ExecutionPlan, client_mesh, counting_releases, distributed, run_rounds
from jfed.engine.client_state import ONE_RUN
from jfed.engine.progress import progress_bar, report_every, round_progress
from jfed.methods import Config, method_of
from jfed.methods.fields import field_map
from jfed.report.rows import append_rows, read_rows, repair_torn_tail, scan_rows
from jfed.sweep import checkpoint, schema
from jfed.sweep.checkpoint import Checkpoints
from jfed.sweep.lock import folder_lock
from jfed.sweep.schema import config_key

DEFAULT_MEMORY_BUDGET = 2 * 2**30  # bytes of device memory a slice may use
MAX_SLICE = 512


def configurations(
    base: Config,
    epsilons: Iterable[float] | None = None,
    seeds: int | Iterable[int] = 1,
    grid: dict[str, Iterable[float]] | None = None,
) -> list[Config]:
    """Every configuration of the product eps x grid x seeds, the other fields those of ``base``.

    ``epsilons`` is ignored (must be ``None`` or one value) for a method without eps; ``grid``
    names tunable fields of the method (``UsageError`` otherwise)."""
    grid = grid or {}
    declared = field_map(base)
    for name in grid:
        if name not in declared or not declared[name].tunable:
            tunable = [f for f, d in declared.items() if d.tunable]
            raise UsageError(
                f"unknown --grid {name} for {method_of(base).name}; expected some of {tunable}"
            )
    if epsilons is None or not hasattr(base, "epsilon"):
        epsilons = [getattr(base, "epsilon", None)]  # type: ignore[list-item]  # no eps: None
    seeds = range(seeds) if isinstance(seeds, int) else list(seeds)
    names = sorted(grid)
    combos = list(itertools.product(*(list(grid[name]) for name in names))) or [()]
    configs = []
    for epsilon in epsilons:
        for combo in combos:
            for seed in seeds:
                changes = {"seed": int(seed), **dict(zip(names, combo, strict=True))}
                if epsilon is not None:
                    changes["epsilon"] = float(epsilon)
                configs.append(base.replace(**_typed(declared, changes)))
    return configs


def _typed(declared: dict, changes: dict) -> dict:
    return {k: declared[k].kind(v) if v is not None else None for k, v in changes.items()}


def default_vector_width(slice_size: int) -> int:
    """Configurations vectorised together inside a slice: all of them on an accelerator; one at a
    time on CPU, where a wide vmap makes every op memory-bound (measured on the one-shot Fair
    sweep, 200 runs in one program: 0.064 s mapped one at a time, 0.15 s fully vmapped)."""
    return 1 if jax.default_backend() == "cpu" else slice_size


def _units(configs: list[Config], shared: bool) -> list[list[Config]]:
    """Configurations run together: with shared noise, all eps of one (seed, settings);
    otherwise each configuration alone."""
    if not shared:
        return [[config] for config in configs]
    groups: dict[str, list[Config]] = {}
    for config in configs:
        rest = {k: v for k, v in schema.config_fields(config).items() if k != "epsilon"}
        groups.setdefault(json.dumps(rest, sort_keys=True), []).append(config)
    return list(groups.values())


def stack(trees: list) -> object:
    """Stack a list of identical pytrees along a new leading axis (host -> device)."""
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *trees)


def _stack_unit(hps: list, shared_algorithm):
    """Stack a unit's hyper-parameters (leaves ``[E, ...]``); runs that share their noise are
    checked against the shared-noise algorithm's contract first (``check_shared``)."""
    if shared_algorithm is not None:
        shared_algorithm.check_shared(hps)
    return stack(hps)


@lru_cache(maxsize=32)
def _unit_function(
    algorithm, rounds: int, plan: ExecutionPlan, outputs, shared: bool, progress_every: int = 0
):
    """``(population, hp, key, token) -> (outputs, releases)`` of one unit: every output leaf
    with a leading ``E``, and ``releases: i32[]`` the releases its rounds made as they ran
    (:func:`~jfed.engine.release_count.counting_releases`; the runs of a unit share them);
    ``progress_every > 0`` reports rounds to the bar named by ``token``."""
    every = progress_every or 1

    def unit(population, hp, key, token):
        token = token if progress_every else None
        with counting_releases() as counter:
            if shared:
                state, infos = run_rounds(algorithm, population, hp, key, rounds, plan, token,
                                          every)  # fmt: skip
                infos = jax.tree.map(lambda leaf: jnp.swapaxes(leaf, 0, 1), infos)
                return jax.vmap(outputs)(state, infos), counter[...]
            single = jax.tree.map(lambda leaf: leaf[0], hp)
            result = outputs(*run_rounds(algorithm, population, single, key, rounds, plan, token,
                                         every))  # fmt: skip
        return jax.tree.map(lambda leaf: leaf[None], result), counter[...]

    return unit


@lru_cache(maxsize=32)
def _program(unit, width: int):
    """A slice: ``lax.map`` over its units, ``width`` of them vmapped at a time."""

    def program(population, hps, keys, token):
        return jax.lax.map(
            lambda args: unit(population, *args, token), (hps, keys), batch_size=width
        )

    return jax.jit(program)


def _spec(tree) -> tuple:
    """Shapes, dtypes and placements of ``tree``: what a compiled program is specialised to."""
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, tuple(
        jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=_placement(x)) for x in leaves
    )


def _placement(x):
    """The sharding of an array placed over several devices (a multi-process input); ``None``
    for one on a single device, which the program may move to its mesh."""
    if isinstance(x, jax.Array) and len(x.sharding.device_set) > 1:
        return x.sharding
    return None


@lru_cache(maxsize=32)
def _compiled(program, spec: tuple):
    """The executable of ``program`` for arguments of ``spec`` and the seconds it took to lower
    and compile it (or load it from the persistent cache) when this process first built it."""
    treedef, leaves = spec
    start = time.perf_counter()
    executable = program.lower(*jax.tree.unflatten(treedef, leaves)).compile()
    return executable, time.perf_counter() - start


def _placed(plan: ExecutionPlan, tree):
    """``tree`` replicated over every process when the run spans several (else unchanged)."""
    return distributed.replicate(tree, plan.mesh) if distributed.is_distributed() else tree


def _footprint(executable) -> int:
    """Device bytes a compiled program needs beyond its inputs (XLA's memory analysis); one
    byte, the floor, on a backend without memory analysis."""
    memory = executable.memory_analysis()
    if memory is None:
        return 1
    return max(1, memory.temp_size_in_bytes + memory.output_size_in_bytes)


def unit_footprint(unit, population, hp, key) -> int:
    """Device bytes one unit needs (XLA's memory analysis of its compiled program)."""
    return _footprint(jax.jit(unit).lower(population, hp, key, jnp.int32(0)).compile())


def check_manifest(results_path: str, manifest: dict, resume: bool) -> None:
    """Refuse to continue ``results_path`` with a different configuration than it was run with
    (``UsageError`` naming the first differences; nothing is written)."""
    if os.path.exists(results_path) and not resume:
        raise UsageError(
            f"results file {results_path} exists; pass resume=True (--resume) to continue it "
            "or choose another path"
        )
    saved = schema.read_manifest(results_path)
    if saved is None:
        if resume and os.path.exists(results_path) and os.path.getsize(results_path) > 0:
            name = os.path.basename(schema.manifest_path(results_path))
            raise UsageError(
                f"cannot resume {results_path}: it has no {name} saying how it "
                "was run (written by an older jfed?); use a new --out"
            )
        return
    differences = schema.manifest_differences(saved, manifest)
    if differences:
        folder = os.path.dirname(results_path) or "."
        raise UsageError(
            f"cannot resume {folder}: it was run with {'; '.join(differences)}; use the same "
            "arguments, or a new --out"
        )


@dataclasses.dataclass(frozen=True)
class SweepOptions:
    """How a sweep runs (the arguments of :func:`run_sweep` that say neither which runs nor
    where their rows go): none of them changes what a run computes beyond float32 rounding."""

    slice_size: int | None = None
    memory_budget: int = DEFAULT_MEMORY_BUDGET
    plan: ExecutionPlan | None = None
    progress: bool = False
    on_slice: Callable[[int], None] | None = None
    vector_width: int | None = None
    share_noise: bool = True
    checkpoints: Checkpoints | None = None


def run_sweep(
    experiment,
    configs: list[Config],
    results_path: str | None,
    resume: bool = False,
    slice_size: int | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    plan: ExecutionPlan | None = None,
    progress: bool | None = None,
    on_slice: Callable[[int], None] | None = None,
    vector_width: int | None = None,
    share_noise: bool = True,
    swept: tuple[str, ...] | None = None,
    checkpoints: Checkpoints | None = None,
) -> list[dict]:
    """Run ``configs`` and write one record per run (:mod:`jfed.sweep.schema`).

    Configurations that differ only in eps run as one unit when the method allows it
    (``experiment.shared_noise_algorithm``, the modulated estimators): they have the same key,
    so they draw the same numbers, and the unit draws them once and scales the noise per eps;
    each row equals its separate run up to float32 rounding.

    Args:
      experiment: the method's experiment (:mod:`jfed.methods`), built from the fixed fields.
      configs: configurations of that method (:func:`configurations`).
      results_path: the JSON-lines file (``None``: keep the rows in memory only); must not exist
        unless ``resume``.
      resume: skip configurations already in the file; refused when the file was run with other
        fixed fields (its ``*.sweep.json`` says which).
      slice_size: runs per compiled call, rounded down to whole units (at least one unit);
        default: from the memory budget.
      memory_budget: bytes one slice may use when ``slice_size`` is not given.
      plan: engine plan of every run.
      progress: a progress bar (over runs; over rounds for a single run); default: when stderr
        is a terminal.
      on_slice: called with the slice index after each slice is written (hooks, tests).
      vector_width: units vmapped together inside a slice (default:
        :func:`default_vector_width`).
      share_noise: run the eps of one (seed, settings) as one unit where the method allows it
        (``False``: every run on its own, bit-identical to :func:`jfed.engine.simulate`).
      swept: the fields varied by the grid (default: those that differ across ``configs``).
      checkpoints: save the run's state every ``checkpoints.every`` rounds and resume from it
        (:mod:`jfed.sweep.checkpoint`); a single run only (a sweep keeps each finished run).

    Returns:
      The rows of every configuration of ``configs``.
    """
    for config in configs:
        if type(config) is not type(experiment.base_config):
            raise UsageError(
                f"expected {experiment.name} configurations, got {type(config).__name__}"
            )
        config.check()
    check_checkpoints(checkpoints, configs)
    options = SweepOptions(
        slice_size=slice_size, memory_budget=memory_budget, plan=plan,
        progress=sys.stderr.isatty() if progress is None else progress, on_slice=on_slice,
        vector_width=vector_width, share_noise=share_noise, checkpoints=checkpoints,
    )  # fmt: skip
    if results_path is not None and not distributed.is_primary():
        # another process of a multi-process run writes; this one runs what that one runs
        done = read_rows(results_path) if resume else []
        return _run(experiment, configs, None, done, dataclasses.replace(options, progress=False))
    if results_path is None:
        return _run(experiment, configs, None, [], options)
    manifest = schema.manifest(experiment.base_config, swept or schema.varying(configs))
    folder = os.path.dirname(os.path.abspath(results_path))
    with folder_lock(folder):  # one writer per folder: rows are never written twice
        check_manifest(results_path, manifest, resume)
        done = checked_rows(results_path, manifest)
        os.makedirs(folder, exist_ok=True)
        schema.write_manifest(results_path, manifest)
        return _run(experiment, configs, results_path, done, options)


def check_checkpoints(checkpoints: Checkpoints | None, configs: list[Config]) -> None:
    """``UsageError`` for checkpoints asked of more than one run, or of a run over several
    processes (each would write the one file)."""
    if checkpoints is None:
        return
    if len(configs) != 1:
        raise UsageError(
            f"checkpoints (--checkpoint-every) are kept for one run, and this sweep has "
            f"{len(configs)}: a sweep keeps each finished run in its results file and --resume "
            "continues at the next run"
        )
    if distributed.is_distributed():
        raise UsageError(
            "checkpoints (--checkpoint-every) are kept by a run in one process: drop "
            "--checkpoint-every, or run without jfed launch / jax.distributed"
        )


def checked_rows(results_path: str, manifest: dict) -> list[dict]:
    """The rows of ``results_path`` a resume continues, after checking that every one is a run
    of the sweep ``manifest`` describes; a torn last line is removed (with a note on stderr)
    once everything else has passed, so a refused resume changes nothing.

    Raises:
      UsageError: a line that is damaged, not a jfed row, or a run of another method or other
        fixed fields (the message names the line); a results file that is a symbolic link.
    """
    if os.path.islink(results_path):
        raise UsageError(
            f"{results_path} is a symbolic link: jfed appends only to a regular file in the "
            "results folder; replace the link by the file it points to"
        )
    scan = scan_rows(results_path)
    for number, row in scan.rows:
        foreign = schema.foreign_row(manifest, row)
        if foreign is not None:
            name = os.path.basename(schema.manifest_path(results_path))
            raise UsageError(
                f"{results_path} line {number} is {foreign} (this folder's {name}); move that "
                "line to the folder of its own sweep"
            )
    note = repair_torn_tail(results_path, scan)
    if note is not None:
        print(note, file=sys.stderr)
    return [row for _, row in scan.rows]


def _run(
    experiment, configs: list[Config], results_path: str | None, done_rows: list[dict],
    options: SweepOptions,
) -> list[dict]:  # fmt: skip
    """Run the configurations of ``configs`` that ``done_rows`` lacks (their rows appended to
    ``results_path`` unless ``None``); the rows of ``configs``, in their order."""
    todo = _pending(configs, done_rows)
    rows = list(done_rows)
    if todo:
        # the frozen program of the whole grid at once (its configurations may size it: a
        # Poisson capacity or a noise grid for the largest eps, found by calibrating them)
        tic = time.perf_counter()
        with experiment.frozen(todo) as program:
            prepared = time.perf_counter() - tic
            plan = _fit_plan(options.plan or experiment.default_plan(),
                             program.population.n_clients)  # fmt: skip
            if distributed.is_distributed():
                program = program._replace(
                    population=distributed.replicate(program.population, plan.mesh)
                )
            rows += _run_pending(experiment, program, todo, len(configs), plan, results_path,
                                 options, prepared)  # fmt: skip
    return _in_order(configs, rows)


def _pending(configs: list[Config], done_rows: list[dict]) -> list[Config]:
    """The configurations that no row of ``done_rows`` holds (a resume re-runs only those)."""
    done = {row["config_key"] for row in done_rows}
    return [c for c in configs if config_key(c) not in done]


def _fit_plan(plan: ExecutionPlan, n_clients: int) -> ExecutionPlan:
    """``plan`` over every device of every process in a multi-process run (unless it names its
    mesh), fitted to a population of ``n_clients``."""
    if distributed.is_distributed() and plan.mesh is None:
        plan = dataclasses.replace(plan, mesh=client_mesh())
    return plan.fitted(n_clients)


def _in_order(configs: list[Config], rows: list[dict]) -> list[dict]:
    """The row of each configuration of ``configs`` (once each, in their order) that ``rows``
    holds."""
    by_key = {row["config_key"]: row for row in rows}
    return [by_key[key] for key in dict.fromkeys(map(config_key, configs)) if key in by_key]


@dataclasses.dataclass(frozen=True)
class _Sweep:
    """What every slice of one sweep shares."""

    experiment: Any  # calibrates and evaluates the runs (calibrated_all, evaluate)
    program: Any  # the frozen Program (population placed: replicated over a run's processes)
    plan: ExecutionPlan
    unit: Callable  # (population, hp, key, token) -> outputs of one unit (_unit_function)
    shared_algorithm: Any  # the program of units that share their noise; None: runs alone
    per_unit: int  # runs per unit; shorter units are padded to it
    rounds_bar: bool  # a progress bar over the rounds of the one run (instead of over runs)
    releases: int | None = None  # a run's releases as its ledger composes them (None: unknown)
    calibration: _HostClock = dataclasses.field(default_factory=lambda: _HostClock())


@dataclasses.dataclass
class _HostClock:
    """Host seconds spent calibrating that no record states yet: the frozen program's
    preparation (which calibrates the sweep's eps where they size it: a Poisson capacity, a
    noise grid) and every :func:`_calibrated_units`; the rows of the next slice share them
    (:func:`_stating_calibration`), so a sweep's rows add up to all of it."""

    seconds: float = 0.0

    def take(self) -> float:
        """The seconds not yet stated; none are left."""
        seconds, self.seconds = self.seconds, 0.0
        return seconds


def _run_pending(
    experiment, program, todo: list[Config], total: int, plan: ExecutionPlan,
    results_path: str | None, options: SweepOptions, prepared: float = 0.0,
) -> list[dict]:  # fmt: skip
    """Run ``todo`` (of ``total`` configurations) in slices of whole units through one compiled
    ``program`` (the experiment's frozen :class:`~jfed.methods.experiment.Program`, built in
    ``prepared`` host seconds); each slice's rows are appended to ``results_path`` (unless
    ``None``) as soon as it finishes."""
    shared_algorithm = (
        program.shared_noise_algorithm if options.share_noise and len(todo) > 1 else None
    )
    units = _units(todo, shared_algorithm is not None)
    sweep = _sweep_of(experiment, program, units, shared_algorithm, plan, options.progress)
    sweep.calibration.seconds += prepared
    units_per_slice = _slice_size(sweep, units, options)
    width = _vector_width(experiment.name, program, plan, options, units_per_slice)
    sliced = _program(sweep.unit, width)
    run_info = _run_info(sweep, units_per_slice)
    rows: list[dict] = []
    with progress_bar(tqdm, total=total, initial=total - len(todo),
                      disable=not options.progress or sweep.rounds_bar,
                      desc=f"sweep {experiment.name}", unit="run") as bar:  # fmt: skip
        for index, start in enumerate(range(0, len(units), units_per_slice)):
            chunk = units[start : start + units_per_slice]
            if options.checkpoints is None:
                written = _run_slice(sweep, sliced, chunk, units_per_slice, run_info, index)
            else:  # one run (check_checkpoints), in segments
                written = _run_checkpointed(sweep, width, chunk, run_info, options.checkpoints)
            written = _stating_calibration(written, sweep.calibration.take())
            if results_path is not None:
                append_rows(results_path, written)
            rows += written
            bar.update(len(written))
            if options.on_slice is not None:
                options.on_slice(index)
    return rows


def _vector_width(
    name: str, program, plan: ExecutionPlan, options: SweepOptions, units_per_slice: int
) -> int:
    """Units vmapped together: ``options.vector_width``, else :func:`default_vector_width`; one
    when a per-client state table lives off the device (each run writes the one host table in
    turn). ``UsageError`` for a table off the device of a method that keeps no per-client state
    or keeps outputs read from the table, or a wider vmap asked beside one."""
    if plan.client_state is None:
        return options.vector_width or default_vector_width(units_per_slice)
    if not hasattr(program.algorithm, "client_state"):
        raise UsageError(
            f"method {name} keeps no per-client state: --client-state (a plan's client_state) "
            "applies to methods that do (scaffold, dp-scaffold, ditto, dp-ditto)"
        )
    table_outputs = [output.name for output in program.outputs.declared
                     if output.source.split(".")[:2] == ["state", "clients"]]  # fmt: skip
    if table_outputs:
        raise UsageError(
            f"method {name} keeps {table_outputs} from its per-client state table, read inside "
            "the compiled run: keep the table on the device (--client-state device)"
        )
    if options.vector_width not in (None, 1):
        raise UsageError(f"method {name}: {ONE_RUN}")
    return 1


def _sweep_of(
    experiment, program, units: list[list[Config]], shared_algorithm, plan: ExecutionPlan,
    progress: bool,
) -> _Sweep:  # fmt: skip
    """What the slices of ``units`` share: the unit function (of ``shared_algorithm`` when not
    ``None``, else of the program's algorithm), a bar over rounds when there is one run, and
    the releases a run makes as the ledger counts them (traced here, before anything runs: a
    release whose count cannot be known is refused now)."""
    shared = shared_algorithm is not None
    per_round = experiment.releases_per_round()
    per_unit = max(len(unit) for unit in units)  # shorter units are padded to this
    rounds_bar = progress and len(units) == 1 and per_unit == 1
    unit = _unit_function(
        shared_algorithm if shared else program.algorithm, program.rounds, plan,
        program.outputs, shared, report_every(program.rounds) if rounds_bar else 0,
    )  # fmt: skip
    releases = None if per_round is None else per_round * program.rounds
    return _Sweep(experiment, program, plan, unit, shared_algorithm, per_unit, rounds_bar,
                  releases)  # fmt: skip


def _calibrated_units(sweep: _Sweep, units: list[list[Config]]) -> list[tuple]:
    """Each unit's hyper-parameters (leaves ``[per_unit, ...]``, padded with its last
    configuration) and the privacy fields of each of its runs: ONE batch calibration of all the
    units' configurations on the host (:meth:`Experiment.calibrated_all`)."""
    padded = [unit + [unit[-1]] * (sweep.per_unit - len(unit)) for unit in units]
    tic = time.perf_counter()
    calibrated = sweep.experiment.calibrated_all([c for unit in padded for c in unit])
    sweep.calibration.seconds += time.perf_counter() - tic
    per_unit = [calibrated[i : i + sweep.per_unit]
                for i in range(0, len(calibrated), sweep.per_unit)]  # fmt: skip
    return [(_stack_unit([hp for hp, _ in unit], sweep.shared_algorithm),
             [fields for _, fields in unit]) for unit in per_unit]  # fmt: skip


def _slice_size(sweep: _Sweep, units: list[list[Config]], options: SweepOptions) -> int:
    """Units per compiled call: ``options.slice_size`` runs rounded down to whole units; else as
    many as the memory budget holds, at most :data:`MAX_SLICE` runs; never more than there are
    units. The slice of every unit (up to that cap) is compiled first and kept when XLA's
    memory analysis puts it within the budget (the program the sweep then runs: one
    compilation); else one unit's footprint divides the budget."""
    most = min(MAX_SLICE // sweep.per_unit, len(units))
    if options.slice_size is not None:
        units_per_slice = max(1, options.slice_size // sweep.per_unit)
    elif len(units) == 1:
        units_per_slice = 1
    elif distributed.is_distributed():
        units_per_slice = MAX_SLICE // sweep.per_unit  # (the memory analysis takes local inputs)
    else:
        ((hp, _),) = _calibrated_units(sweep, units[:1])
        width = _vector_width(sweep.experiment.name, sweep.program, sweep.plan, options, most)
        executable, _ = _compiled(
            _program(sweep.unit, width), _spec(_slice_args(sweep, [hp] * most))
        )
        if _footprint(executable) <= options.memory_budget:
            return most
        footprint = unit_footprint(sweep.unit, sweep.program.population, hp, jax.random.key(0))
        units_per_slice = max(1, min(most, options.memory_budget // footprint))
    return min(units_per_slice, len(units))


def _slice_args(sweep: _Sweep, hps: list, seeds: list[int] | None = None) -> tuple:
    """The arguments of a slice's program: the population, the units' stacked
    hyper-parameters, their keys (of ``seeds``; zeros when only the shapes matter) and the
    progress token."""
    keys = jax.vmap(jax.random.key)(np.array(seeds if seeds is not None else [0] * len(hps)))
    return (sweep.program.population, *_placed(sweep.plan, (stack(hps), keys, jnp.int32(0))))


def _run_info(sweep: _Sweep, units_per_slice: int) -> dict:
    """The fields of every row that say where and how it ran."""
    device = jax.devices()[0]
    return {
        "plan": sweep.plan.describe(),
        "device": f"{device.platform}: {device.device_kind}",
        "shared_noise": sweep.shared_algorithm is not None,
        "slice_size": units_per_slice * sweep.per_unit,
    }


def _run_slice(
    sweep: _Sweep, sliced, chunk: list[list[Config]], units_per_slice: int, run_info: dict,
    index: int,
) -> list[dict]:  # fmt: skip
    """Run slice ``index``: ``chunk``'s units (padded to ``units_per_slice`` with its last) in
    one call of the compiled program; the rows of its runs."""
    padded = chunk + [chunk[-1]] * (units_per_slice - len(chunk))
    calibrated = _calibrated_units(sweep, padded)
    args = _slice_args(sweep, [hp for hp, _ in calibrated], [u[0].seed for u in padded])
    if sweep.rounds_bar:  # the compilation inside: without a terminal, its lines say so
        with round_progress(sweep.program.rounds, sweep.experiment.name) as token:
            executable, compile_seconds = _compiled(sliced, _spec(args))
            tic = time.perf_counter()
            token_args = _placed(sweep.plan, (token,))
            outputs, counted = distributed.fetch(executable(*args[:3], *token_args))
            jax.effects_barrier()
    else:
        executable, compile_seconds = _compiled(sliced, _spec(args))
        tic = time.perf_counter()
        outputs, counted = distributed.fetch(executable(*args))
    per_run = (time.perf_counter() - tic) / sum(len(u) for u in chunk)
    row_info = dict(run_info, compile_seconds=compile_seconds, run_seconds=per_run, slice=index)
    return _rows_of_slice(sweep.experiment, chunk, [fields for _, fields in calibrated],
                          outputs, row_info, np.asarray(counted), sweep.releases)  # fmt: skip


def _run_checkpointed(
    sweep: _Sweep, width: int, chunk: list[list[Config]], run_info: dict,
    checkpoints: Checkpoints,
) -> list[dict]:  # fmt: skip
    """The one run of ``chunk`` in segments of ``checkpoints.every`` rounds, its state saved
    after each and resumed from a saved one (:func:`jfed.sweep.checkpoint.run_segments`): the
    same programs, unit by unit, as :func:`_run_slice`'s, so the same bits."""
    (config,) = [c for unit in chunk for c in unit]
    calibrated = _calibrated_units(sweep, chunk)
    hps = stack([hp for hp, _ in calibrated])
    keys = jax.vmap(jax.random.key)(np.array([config.seed]))
    rounds = sweep.program.rounds
    programs = checkpoint.programs(
        sweep.program.algorithm, rounds, sweep.plan, sweep.program.outputs, width,
        report_every(rounds) if sweep.rounds_bar else 0, counting_releases,
    )  # fmt: skip
    meta = checkpoint.identity(sweep.experiment, config)

    def compiled(program, args):
        return _compiled(program, _spec(args))

    def segments(token):
        return checkpoint.run_segments(programs, sweep.program.population, hps, keys, rounds,
                                       checkpoints, meta, sweep.plan, compiled, token)  # fmt: skip

    if sweep.rounds_bar:
        with round_progress(rounds, sweep.experiment.name) as token:
            outcome = segments(token)
            jax.effects_barrier()
    else:
        outcome = segments(jnp.int32(0))
    if outcome.resumed_at:
        print(f"jfed: resumed {checkpoints.path} at round {outcome.resumed_at} of {rounds}",
              file=sys.stderr)  # fmt: skip
    row_info = dict(run_info, compile_seconds=outcome.compile_seconds,
                    run_seconds=outcome.run_seconds, slice=0)  # fmt: skip
    return _rows_of_slice(sweep.experiment, chunk, [fields for _, fields in calibrated],
                          outcome.outputs, row_info, outcome.releases, sweep.releases)  # fmt: skip


def _stating_calibration(rows: list[dict], seconds: float) -> list[dict]:
    """``rows`` (one slice's) each stating ``calibration_seconds``, its share of the host
    ``seconds`` spent calibrating since the previous slice, after its ``run_seconds`` (as
    ``run_seconds`` is its share of the slice's run)."""
    share = seconds / max(1, len(rows))
    stated = []
    for row in rows:
        fields = list(row.items())
        at = next((i + 1 for i, (name, _) in enumerate(fields) if name == "run_seconds"),
                  len(fields))  # fmt: skip
        stated.append(dict([*fields[:at], ("calibration_seconds", share), *fields[at:]]))
    return stated


def _rows_of_slice(
    experiment, chunk: list[list[Config]], privacy: list[list[dict]], outputs, run_info: dict,
    counted: np.ndarray | None = None, releases: int | None = None,
) -> list[dict]:  # fmt: skip
    """The record of each run of ``chunk``: its outputs (leaf ``[unit, run]`` of the slice's)
    evaluated on the host, with its privacy fields and ``run_info``. Where the program counted
    its releases (``counted: i32[units]``) and the ledger's count is known (``releases``), a run
    whose two counts differ has its certificate refused (:func:`refused_certificate`)."""
    rows = []
    for g, unit_configs in enumerate(chunk):
        for e, config in enumerate(unit_configs):
            run_outputs = jax.tree.map(lambda leaf, g=g, e=e: np.asarray(leaf[g, e]), outputs)
            metrics = experiment.evaluate(run_outputs, config)
            fields = privacy[g][e]
            if counted is not None and releases is not None and int(counted[g]) != releases:
                fields = refused_certificate(fields, int(counted[g]), releases, experiment.rounds)
            rows.append(schema.row(experiment, config, fields, metrics, run_info))
    return rows


def refused_certificate(privacy: dict, counted: int, releases: int, rounds: int) -> dict:
    """The privacy fields of a run whose program made ``counted`` releases where its ledger
    composed ``releases`` over ``rounds`` rounds: no certified eps (``None``) and
    ``certificate_refused`` saying why; the rest (delta, accountant, notion, ...) as
    calibrated."""
    why = (
        f"the program made {counted} private releases as it ran, the ledger composed "
        f"{releases} ({releases // max(rounds, 1)} a round over {rounds} rounds): the "
        "guarantee would not be that of the program that ran"
    )
    return {**privacy, "epsilon_certified": None, "certificate_refused": why}
