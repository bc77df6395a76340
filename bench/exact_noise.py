"""What the exact noise costs a round: ``--noise discrete`` against ``--noise float``, for DP-FedAvg
and DP-FTRL.

    python bench/exact_noise.py [--methods dp-fedavg,dp-ftrl] [--cohorts 100,1000] [--rounds 10]
        [--repeats 5] [--json PATH]

The setting: each method through ``jfed.run`` (as a user runs it: Synthetic(1, 1) clients, d =
610 parameters, one local epoch, flat clipping) at N = 10 K clients and the same target eps:
DP-FedAvg on a Poisson cohort of expected size K, DP-FTRL on its default cyclic schedule of
groups of K and its default tree (Honaker's estimator: up to log2(10) + 1 node draws a round),
once with each noise:

- ``discrete`` (the default): every client's clipped update rounded onto the integer grid by
  conditional randomized rounding (redrawn until its exact integer norm bound holds), the integer
  sum, exact discrete Gaussian noise sampled in integer arithmetic
  (:class:`jfed.privacy.discrete_aggregators.DiscreteGaussianSum`; DP-FTRL's tree nodes:
  :class:`jfed.privacy.DiscreteTreeSum`);
- ``float``: the clipped updates' float32 sum plus float32 Gaussian noise (the ideal real-valued
  mechanism's accounting; floating-point sampling not modelled).

Both noises calibrate to the same noise multiplier at the same eps (to about 1e-4: the exact noise
is certified through the continuous Gaussian it is coupled to); the rows time each noise at its
own calibration. Each figure is the median of ``--repeats`` runs of
``--rounds`` rounds, the rows taking turns in a new (seeded) order each turn so that all see the
same load; a run's time is its record's ``run_seconds`` (the compiled program, compilation
excluded: every program is compiled once before timing). ``x_float``: the row's time over the
float row's at the same cohort.

JSON (default ``bench/results/exact_noise_cpu.json``): ``rows`` of ``{method, noise, cohort,
clients, rounds, seconds_per_round, x_float, noise_multiplier}``, ``uptime`` before and after,
``device``, ``versions``.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import numpy as np
from _common import finish, parse_args, uptime  # bench/ is on the path

import jfed
from jfed.methods import declared

NOISES = ("float", "discrete")


METHODS = {"dp-fedavg": declared.DPFedAvg, "dp-ftrl": declared.DPFTRL}


def config(method: str, cohort: int, rounds: int, noise: str) -> Any:
    """The benchmarked run: N = 10 K clients, the method's defaults otherwise."""
    return METHODS[method](clients=10 * cohort, cohort_size=cohort, rounds=rounds, noise=noise)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--methods", default="dp-fedavg,dp-ftrl", help="comma-separated methods")
    parser.add_argument("--cohorts", default="100,1000", help="comma-separated K values")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", metavar="PATH", default="bench/results/exact_noise_cpu.json")
    args = parse_args(
        parser, argv, __file__, methods="dp-fedavg,dp-ftrl", cohorts="10", rounds=2, repeats=1
    )
    cohorts = [int(value) for value in args.cohorts.split(",")]
    load_before = uptime()
    methods = args.methods.split(",")
    configs = {(method, noise, k): config(method, k, args.rounds, noise)
               for method in methods for k in cohorts for noise in NOISES}  # fmt: skip
    multipliers = {}
    for name, run_config in configs.items():  # compiles each program before any timing
        record = jfed.run(run_config)
        multipliers[name] = float(record["noise_multiplier"])
    seconds: dict[tuple[str, str, int], list[float]] = {name: [] for name in configs}
    order = np.random.default_rng(0)
    names = list(configs)
    for _ in range(args.repeats):
        for index in order.permutation(len(names)):
            seconds[names[index]].append(jfed.run(configs[names[index]])["run_seconds"])
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    rows = [
        {"method": method, "noise": noise, "cohort": k, "clients": 10 * k,
         "rounds": args.rounds, "seconds_per_round": medians[method, noise, k] / args.rounds,
         "x_float": medians[method, noise, k] / medians[method, "float", k],
         "noise_multiplier": multipliers[method, noise, k]}
        for (method, noise, k) in names
    ]  # fmt: skip
    load_after = uptime()
    setting = (f"jfed.run, Synthetic(1,1), N = 10 K clients, DP-FedAvg: Poisson cohort of "
               f"expected size K; DP-FTRL: cyclic groups of K, its tree; {args.rounds} rounds, "
               f"default eps; median of {args.repeats} runs each, in turns")  # fmt: skip
    print(setting)
    print(f"{'method':>9} {'noise':>9} {'K':>6} {'ms/round':>10} {'x float':>8} {'z':>7}")
    for row in rows:
        print(f"{row['method']:>9} {row['noise']:>9} {row['cohort']:>6} "
              f"{1e3 * row['seconds_per_round']:>10.2f} {row['x_float']:>8.3f} "
              f"{row['noise_multiplier']:>7.3f}")  # fmt: skip
    finish(args.json, setting, rows, load_before, load_after)


if __name__ == "__main__":
    main()
