"""What the exact noise costs a DP-FedAvg round: ``--noise discrete`` against ``--noise float``.

    python bench/exact_noise.py [--cohorts 100,1000] [--rounds 10] [--repeats 5] [--json PATH]

The setting: DP-FedAvg through ``jfed.run`` (the method as a user runs it: Synthetic(1, 1)
clients, d = 610 parameters, a Poisson cohort of expected size K, one local epoch, flat clipping)
at N = 10 K clients and the same target eps, once with each noise:

- ``discrete`` (the default): every client's clipped update rounded onto the integer grid by
  conditional randomized rounding (redrawn until its exact integer norm bound holds), the integer
  sum, exact discrete Gaussian noise sampled in integer arithmetic
  (:class:`jfed.privacy.discrete_aggregators.DiscreteGaussianSum`);
- ``float``: the clipped updates' float32 sum plus float32 Gaussian noise (the ideal real-valued
  mechanism's accounting; floating-point sampling not modelled).

The two noises calibrate to different noise multipliers at the same eps (the discrete Gaussian's
subsampling is certified by a looser bound), which changes no operation count: the rows time the
same round at each noise's own calibration. Each figure is the median of ``--repeats`` runs of
``--rounds`` rounds, the rows taking turns in a new (seeded) order each turn so that all see the
same load; a run's time is its record's ``run_seconds`` (the compiled program, compilation
excluded: every program is compiled once before timing). ``x_float``: the row's time over the
float row's at the same cohort.

JSON (default ``bench/results/exact_noise_cpu.json``): ``rows`` of ``{noise, cohort, clients,
rounds, seconds_per_round, x_float, noise_multiplier}``, ``uptime`` before and after,
``device``, ``versions``.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
from _common import device_name, uptime, write_json  # bench/ is on the path

import jfed
from jfed.methods import declared
from jfed.report import versions

NOISES = ("float", "discrete")


def config(cohort: int, rounds: int, noise: str) -> declared.DPFedAvg:
    """The benchmarked run: N = 10 K clients, DP-FedAvg's defaults otherwise."""
    return declared.DPFedAvg(clients=10 * cohort, cohort_size=cohort, rounds=rounds, noise=noise)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cohorts", default="100,1000", help="comma-separated K values")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", metavar="PATH", default="bench/results/exact_noise_cpu.json")
    args = parser.parse_args()
    cohorts = [int(value) for value in args.cohorts.split(",")]
    load_before = uptime()
    configs = {(noise, k): config(k, args.rounds, noise) for k in cohorts for noise in NOISES}
    multipliers = {}
    for name, run_config in configs.items():  # compiles each program before any timing
        record = jfed.run(run_config)
        multipliers[name] = float(record["noise_multiplier"])
    seconds: dict[tuple[str, int], list[float]] = {name: [] for name in configs}
    order = np.random.default_rng(0)
    names = list(configs)
    for _ in range(args.repeats):
        for index in order.permutation(len(names)):
            seconds[names[index]].append(jfed.run(configs[names[index]])["run_seconds"])
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    rows = [
        {"noise": noise, "cohort": k, "clients": 10 * k, "rounds": args.rounds,
         "seconds_per_round": medians[noise, k] / args.rounds,
         "x_float": medians[noise, k] / medians["float", k],
         "noise_multiplier": multipliers[noise, k]}
        for (noise, k) in names
    ]  # fmt: skip
    load_after = uptime()
    setting = (f"DP-FedAvg (jfed.run), Synthetic(1,1), N = 10 K clients, Poisson cohort of "
               f"expected size K, {args.rounds} rounds, default eps; median of {args.repeats} "
               f"runs each, in turns")  # fmt: skip
    print(setting)
    print(f"{'noise':>9} {'K':>6} {'ms/round':>10} {'x float':>8} {'z':>7}")
    for row in rows:
        print(f"{row['noise']:>9} {row['cohort']:>6} {1e3 * row['seconds_per_round']:>10.2f} "
              f"{row['x_float']:>8.3f} {row['noise_multiplier']:>7.3f}")  # fmt: skip
    print(f"load before: {load_before}\nload after:  {load_after}")
    if args.json:
        write_json(args.json, {"setting": setting, "rows": rows, "device": device_name(),
                               "uptime": {"before": load_before, "after": load_after},
                               "versions": versions()})  # fmt: skip


if __name__ == "__main__":
    main()
