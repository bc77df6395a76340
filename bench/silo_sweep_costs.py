"""Where a silo sweep's time goes, and what two of its savings are worth, side by side.

    python bench/silo_sweep_costs.py --json bench/results/silo_sweep_costs_cpu.json [--smoke]

On the seed's digits-evenodd task (25 silos, R = 25, K = 10, Noisy MB-SGD, exact calibration):

1. One run with the plan fitted to the population (25 silos vmapped 32 wide, what
   ``simulate`` does) vs the same run with the silos padded to one 4,096-wide chunk (the plan
   unfitted). Compiled beforehand; best of 5.
2. Calibrating the per-silo noise for 6 eps: one eps at a time (``calibrate_many`` with one eps,
   a bisection per distinct silo size and eps) vs all 6 together (one ``calibrate_many``, one
   shared PLD grid per distinct silo size, every answer verified). The largest relative noise
   difference is reported too.

Prints a table and writes JSON with ``rows`` (one per measurement), ``uptime`` before and after,
``device`` and ``versions``.
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np
from _common import parse_args, uptime, write_json  # bench/ is on the path when run

from jfed.algorithms import silo_sgd
from jfed.data.silos import load_silos
from jfed.engine import ExecutionPlan, run_rounds
from jfed.methods import NoisyMBSGD, build_experiment
from jfed.report import versions

EPSILONS = (0.75, 1.5, 3.0, 6.0, 12.0, 18.0)


def _best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        tic = time.perf_counter()
        fn()
        times.append(time.perf_counter() - tic)
    return min(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=25, help="R of every run")
    parser.add_argument("--epsilons", default=",".join(map(str, EPSILONS)), help="the eps")
    parser.add_argument("--repeats", type=int, default=5, help="a run's time: best of these")
    parser.add_argument("--json", metavar="PATH")
    args = parse_args(parser, argv, __file__, rounds=2, epsilons="1,3", repeats=1)
    load_before = uptime()
    task = load_silos("digits-evenodd")
    settings = NoisyMBSGD(batch=10, rounds=args.rounds)
    runner = build_experiment(settings, task=task)
    algorithm = runner.algorithm
    delta = runner.delta
    ((noise, _),) = runner.calibrate_many(settings, [1.0], delta)
    hp = silo_sgd.hyperparams(task.n_silos, step_size=1.0, clip_norm=1.0, radius=10.0,
                              noise_std=noise)  # fmt: skip
    key = jax.random.key(0)
    run_seconds = {}
    for label, plan in (
        ("fitted", ExecutionPlan().fitted(task.n_silos)),
        ("padded_to_4096", ExecutionPlan(block_size=4096, chunk_size=4096)),
    ):
        program = jax.jit(lambda hp, key, plan=plan: run_rounds(
            algorithm, task.train, hp, key, settings.rounds, plan)[0].w)  # fmt: skip
        compiled = program.lower(hp, key).compile()
        jax.block_until_ready(compiled(hp, key))
        run_seconds[label] = _best(
            lambda compiled=compiled: jax.block_until_ready(compiled(hp, key)), args.repeats
        )

    epsilons = [float(e) for e in args.epsilons.split(",")]
    tic = time.perf_counter()
    alone = [runner.calibrate_many(settings, [e], delta)[0] for e in epsilons]
    one_at_a_time = time.perf_counter() - tic
    tic = time.perf_counter()
    together = runner.calibrate_many(settings, epsilons, delta)
    shared_grid = time.perf_counter() - tic
    gap = max(
        float(np.max(np.abs(b[0] / a[0] - 1.0))) for a, b in zip(alone, together, strict=True)
    )
    rows = [
        {
            "measurement": f"one noisy-mbsgd run ({task.n_silos} silos, R = {args.rounds})",
            "fitted_plan_seconds": run_seconds["fitted"],
            "padded_to_4096_seconds": run_seconds["padded_to_4096"],
            "ratio": run_seconds["padded_to_4096"] / run_seconds["fitted"],
        },
        {
            "measurement": f"calibrating {len(epsilons)} eps (exact, PLD)",
            "distinct_silo_sizes": len(np.unique(np.asarray(task.train.counts))),
            "one_eps_at_a_time_seconds": one_at_a_time,
            "shared_grid_seconds": shared_grid,
            "ratio": one_at_a_time / shared_grid,
            "largest_relative_noise_difference": gap,
        },
    ]
    print(f"one run: fitted plan {run_seconds['fitted']:.4f} s, padded to a 4096 chunk "
          f"{run_seconds['padded_to_4096']:.4f} s -> {rows[0]['ratio']:.0f}x")  # fmt: skip
    print(f"calibrating {len(epsilons)} eps over {rows[1]['distinct_silo_sizes']} silo sizes: "
          f"one at a time {one_at_a_time:.1f} s, shared grid {shared_grid:.1f} s -> "
          f"{rows[1]['ratio']:.1f}x (largest noise difference {gap:.1e})")  # fmt: skip
    if args.json:
        payload = {"benchmark": "silo_sweep_costs", "rows": rows,
                   "uptime": {"before": load_before, "after": uptime()},
                   "device": str(jax.devices()[0]), "versions": versions()}  # fmt: skip
        write_json(args.json, payload)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
