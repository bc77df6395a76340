"""A whole eps x seed sweep in one program vs the same runs as separate jitted calls.

    python bench/sweep.py --json bench/results/sweep_cpu.json [--epsilons 20] [--seeds 10] [--smoke]

The modulated one-shot estimator on the Fair task: 20 eps x 10 seeds = 200 runs, all in this
process: (a) one program over all 200 as ``jfed.sweep`` runs it: 10 units (one per seed), each
drawing its randomness once for its 20 eps (``SharedNoise``), ``lax.map`` over the units; (a')
one program with every run on its own (``lax.map`` over 200 runs, vmapped ``width`` at a time;
widths 1 and 200 both timed); (b) 200 calls of
``jfed.engine.simulate`` (the public one-run API; one compile, hyper-parameters traced);
(c) the same 200 calls, each result read back before the next (a loop writing one row per run);
(d) 200 calls of a pre-compiled single-run executable (no Python-side work at all). Compile time
is reported apart from run time; the host calibration of the 200 noise scales is excluded.
Finally the whole ``run_sweep`` (compile, calibrate, run, evaluate rows) in new processes: with
the persistent compilation cache off, filling it, and loading from it (``--no-fresh-processes``
skips these; ``--smoke``, a few runs, does).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import jax
import numpy as np
from _common import device_name, parse_args, uptime, write_json  # bench/ is on the path when run

from jfed.data import load_regression
from jfed.engine import ExecutionPlan, run_rounds, simulate
from jfed.methods import ModulatedOneShot, build_experiment
from jfed.report import versions
from jfed.sweep import configurations
from jfed.sweep.runner import _program, _unit_function, _units, stack

FRESH_PROCESS = """
import sys, time
from jfed.engine.cache import enable_compilation_cache
enable_compilation_cache(sys.argv[1])
from jfed.methods import ModulatedOneShot
from jfed.methods import build_experiment
from jfed.sweep import configurations, run_sweep
base = ModulatedOneShot(dataset="fair")
adapter = build_experiment(base)
configs = configurations(base, [float(e) for e in sys.argv[3].split(",")], int(sys.argv[4]))
tic = time.perf_counter()
run_sweep(adapter, configs, sys.argv[2], progress=False)
print("SECONDS", time.perf_counter() - tic)
"""


def fresh_process_seconds(epsilons: str, seeds: int) -> dict:
    """``run_sweep`` of the runs in new processes: no cache, a cold cache, a warm cache
    (compilation, calibration, the program and the evaluation of the rows; imports excluded)."""
    seconds = {}
    with tempfile.TemporaryDirectory() as folder:
        cache = os.path.join(folder, "xla")
        for label, setting in (("off", "off"), ("cold", cache), ("warm", cache)):
            out = subprocess.run(
                [sys.executable, "-c", FRESH_PROCESS, setting,
                 os.path.join(folder, f"{label}.jsonl"), epsilons, str(seeds)],
                capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
            seconds[label] = float(out.split("SECONDS")[-1])
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilons", type=int, default=20, help="eps in [0.1, 100], geometric")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--no-fresh-processes", dest="fresh", action="store_false",
                        help="skip run_sweep in new processes")  # fmt: skip
    parser.add_argument("--json", metavar="PATH")
    args = parse_args(parser, argv, __file__, epsilons=2, seeds=2, fresh=False)
    epsilons = np.geomspace(0.1, 100, args.epsilons)
    load_before = uptime()
    task = load_regression("fair")
    base = ModulatedOneShot(dataset="fair")
    adapter = build_experiment(base, task=task)
    configs = configurations(base, epsilons, args.seeds)
    calibrated = [adapter.calibrate(c)[0] for c in configs]
    keys = [jax.random.key(c.seed) for c in configs]
    plan = ExecutionPlan().fitted(task.n_clients)

    def one(hp, key):
        return adapter.outputs(*run_rounds(adapter.algorithm, task.train, hp, key, 1, plan))

    hps = stack(calibrated)
    key_batch = jax.vmap(jax.random.key)(np.array([c.seed for c in configs]))

    def timed(fn, *args):
        jax.block_until_ready(fn(*args))
        times = []
        for _ in range(3):
            tic = time.perf_counter()
            jax.block_until_ready(fn(*args))
            times.append(time.perf_counter() - tic)
        return min(times)

    units = _units(configs, shared=True)
    unit = _unit_function(adapter.shared_noise_algorithm, 1, plan, adapter.outputs, True)
    shared_program = _program(unit, 1)
    unit_hps = stack([stack([adapter.calibrate(c)[0] for c in u]) for u in units])
    unit_keys = jax.vmap(jax.random.key)(np.array([u[0].seed for u in units]))
    token = np.int32(0)
    tic = time.perf_counter()
    shared_compiled = shared_program.lower(task.train, unit_hps, unit_keys, token).compile()
    shared_compile = time.perf_counter() - tic
    shared_seconds = timed(shared_compiled, task.train, unit_hps, unit_keys, token)
    shared_theta = np.asarray(shared_compiled(task.train, unit_hps, unit_keys, token)[0]["theta"])

    one_program = {}
    for width in (1, len(configs)):
        program = jax.jit(
            lambda h, k, width=width: jax.lax.map(lambda a: one(*a), (h, k), batch_size=width)
        )
        tic = time.perf_counter()
        compiled = program.lower(hps, key_batch).compile()
        one_program[width] = (timed(compiled, hps, key_batch), time.perf_counter() - tic)

    def simulate_calls():
        return [
            simulate(adapter.algorithm, task.train, hp, jax.random.key(config.seed), 1)
            for hp, config in zip(calibrated, configs, strict=True)
        ]

    simulate_seconds = timed(simulate_calls)

    def simulate_calls_read_back():
        # each result read back before the next call, as a loop writing one row per run does
        return [
            jax.device_get(
                simulate(adapter.algorithm, task.train, hp, jax.random.key(c.seed), 1)[0].theta
            )
            for hp, c in zip(calibrated, configs, strict=True)
        ]

    read_back_seconds = timed(simulate_calls_read_back)

    single = jax.jit(one)
    tic = time.perf_counter()
    single_compiled = single.lower(calibrated[0], keys[0]).compile()
    single_compile = time.perf_counter() - tic

    def compiled_calls():
        return [single_compiled(hp, key) for hp, key in zip(calibrated, keys, strict=True)]

    separate_seconds = timed(compiled_calls)
    batched_seconds, batched_compile = one_program[1]

    separate_theta = np.stack([np.asarray(r[0].theta) for r in simulate_calls()])
    # both in the order of `units` (eps within seed) vs `configs` (seed within eps)
    order = [configs.index(c) for u in units for c in u]
    separate_theta = separate_theta[order]
    gaps = np.abs(shared_theta.reshape(len(configs), -1) - separate_theta).max(axis=1)
    # relative to the run's largest coefficient; a near-singular ridge solve (an eigenvalue of
    # S_hat near -ridge) magnifies the rounding of the summed statistics
    relative_gaps = gaps / np.abs(separate_theta).max(axis=1)
    worst = int(np.argmax(relative_gaps))

    fresh = (
        fresh_process_seconds(",".join(repr(float(e)) for e in epsilons), args.seeds)
        if args.fresh
        else {"off": None, "cold": None, "warm": None}
    )

    row = {
        "runs": len(configs),
        "fresh_process_run_sweep_seconds_no_cache": fresh["off"],
        "fresh_process_run_sweep_seconds_cold_cache": fresh["cold"],
        "fresh_process_run_sweep_seconds_warm_cache": fresh["warm"],
        "units": len(units),
        "one_program_shared_noise_seconds": shared_seconds,
        "one_program_shared_noise_compile_seconds": shared_compile,
        "ratio": simulate_seconds / shared_seconds,
        "ratio_vs_read_back_calls": read_back_seconds / shared_seconds,
        "ratio_vs_precompiled_calls": separate_seconds / shared_seconds,
        "median_relative_theta_gap_vs_separate_runs": float(np.median(relative_gaps)),
        "largest_relative_theta_gap_vs_separate_runs": float(relative_gaps[worst]),
        "largest_gap_run_theta_max_abs": float(np.abs(separate_theta[worst]).max()),
        "one_program_runs_alone_seconds": batched_seconds,
        "one_program_fully_vmapped_seconds": one_program[len(configs)][0],
        "simulate_calls_seconds": simulate_seconds,
        "simulate_calls_read_back_seconds": read_back_seconds,
        "separate_calls_seconds": separate_seconds,
        "ratio_runs_alone": simulate_seconds / batched_seconds,
        "one_program_runs_alone_compile_seconds": batched_compile,
        "single_run_compile_seconds": single_compile,
    }
    print(
        f"modulated one-shot on fair (n={task.n_clients}), {len(configs)} runs "
        f"({args.epsilons} eps x {args.seeds} seeds)"
    )
    print(f"one program, {len(units)} shared-noise units: {shared_seconds:.4f} s "
          f"(compile {shared_compile:.2f} s)")  # fmt: skip
    print(f"  theta vs the separate runs, relative gap: median {np.median(relative_gaps):.1e}, "
          f"largest {relative_gaps[worst]:.1e} (a run with max |theta| "
          f"{np.abs(separate_theta[worst]).max():.1f}: near-singular ridge solve)")  # fmt: skip
    print(f"one program, runs alone, mapped 1 at a time: {batched_seconds:.3f} s "
          f"(compile {batched_compile:.2f} s) -> {row['ratio_runs_alone']:.1f}x")  # fmt: skip
    runs = len(configs)
    print(f"one program, runs alone, all {runs} vmapped: {one_program[runs][0]:.3f} s")
    print(f"{runs} simulate() calls: {simulate_seconds:.3f} s  -> ratio {row['ratio']:.1f}x")
    print(f"{runs} simulate() calls, each read back: {read_back_seconds:.3f} s  -> ratio "
          f"{row['ratio_vs_read_back_calls']:.1f}x")  # fmt: skip
    print(f"{runs} pre-compiled calls: {separate_seconds:.3f} s (compile {single_compile:.2f} s) "
          f"-> ratio {row['ratio_vs_precompiled_calls']:.1f}x")  # fmt: skip
    if args.fresh:
        print(f"run_sweep of the {runs} runs in a new process: {fresh['off']:.2f} s without the "
              f"compilation cache, {fresh['cold']:.2f} s filling it, {fresh['warm']:.2f} s "
              "loading from it")  # fmt: skip
    if args.json:
        payload = {"benchmark": "sweep", "rows": [row], "uptime": {"before": load_before,
                   "after": uptime()}, "device": device_name(), "versions": versions()}  # fmt: skip
        write_json(args.json, payload)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
