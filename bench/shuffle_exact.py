"""What exact messages cost a shuffle-mbsgd round: ``--noise discrete`` against ``--noise float``.

    python bench/shuffle_exact.py [--rounds 5] [--repeats 3] [--json PATH]

The setting: shuffle-DP Noisy MB-SGD through ``jfed.run`` (the method as a user runs it) on two
built-in silo data sets, once with each noise, at the default eps 1:

- ``digits-evenodd``: 25 silos, K = 20 messages a silo (500 a round), p = 50 coordinates;
- ``digits-bylabel``: 10 silos, K = 60 messages a silo (600 a round), p = 640 coordinates (a
  softmax of 64 features x 10 classes).

- ``float`` (the default): every record's clipped gradient plus float32 Gaussian noise, a silo's
  K noises drawn at once as one ``N(0, K sigma0^2 I)`` (the ideal real-valued mechanism's
  accounting; floating-point sampling not modelled);
- ``discrete``: every message its record's clipped gradient rounded onto the integer grid by
  conditional randomized rounding (redrawn until its exact integer norm bound holds) plus its
  own exact discrete Gaussian noise sampled in integer arithmetic
  (:class:`jfed.algorithms.silo_aggregators.ShuffledGridMessages`): K p draws a silo where the
  float messages draw p.

Both calibrate to the same sigma0 (the exact message is certified through the continuous
Gaussian its noise is coupled to), so the rows time the same round. Each figure is the median of
``--repeats`` runs of ``--rounds`` rounds, the rows taking turns in a new (seeded) order each
turn so that all see the same load; a run's time is its record's ``run_seconds`` (the compiled
program, compilation excluded: every program is compiled once before timing). ``x_float``: the
row's time over the float row's on the same data set.

JSON (default ``bench/results/shuffle_exact_cpu.json``): ``rows`` of ``{noise, dataset, silos,
batch, dim, rounds, seconds_per_round, x_float, sigma, grid_norm}``, ``uptime`` before and
after, ``device``, ``versions``.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
from _common import finish, parse_args, uptime  # bench/ is on the path

import jfed
from jfed.methods import declared

NOISES = ("float", "discrete")
SETTINGS = {"digits-evenodd": 20, "digits-bylabel": 60}
"""The data sets and their messages a silo K (the shuffling bound needs enough a round)."""


def config(dataset: str, rounds: int, noise: str) -> declared.ShuffleMBSGD:
    """The benchmarked run: shuffle-mbsgd's defaults but the data, K, R and the noise."""
    return declared.ShuffleMBSGD(dataset=dataset, batch=SETTINGS[dataset], rounds=rounds,
                                 noise=noise)  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", metavar="PATH", default="bench/results/shuffle_exact_cpu.json")
    args = parse_args(parser, argv, __file__, rounds=1, repeats=1)
    load_before = uptime()
    configs = {(noise, data): config(data, args.rounds, noise)
               for data in SETTINGS for noise in NOISES}  # fmt: skip
    first = {name: jfed.run(run_config) for name, run_config in configs.items()}  # compiles
    seconds: dict[tuple[str, str], list[float]] = {name: [] for name in configs}
    order = np.random.default_rng(0)
    names = list(configs)
    for _ in range(args.repeats):
        for index in order.permutation(len(names)):
            seconds[names[index]].append(jfed.run(configs[names[index]])["run_seconds"])
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    rows = [
        {"noise": noise, "dataset": data, "silos": first[noise, data]["n_silos"],
         "batch": SETTINGS[data], "dim": first[noise, data]["dim"], "rounds": args.rounds,
         "seconds_per_round": medians[noise, data] / args.rounds,
         "x_float": medians[noise, data] / medians["float", data],
         "sigma": first[noise, data]["sigma"], "grid_norm": first[noise, data].get("grid_norm")}
        for (noise, data) in names
    ]  # fmt: skip
    load_after = uptime()
    setting = (f"shuffle-mbsgd (jfed.run), default eps, {args.rounds} rounds; median of "
               f"{args.repeats} runs each, in turns")  # fmt: skip
    print(setting)
    print(f"{'noise':>9} {'data':>15} {'K':>4} {'ms/round':>10} {'x float':>9} {'sigma0':>8}")
    for row in rows:
        print(f"{row['noise']:>9} {row['dataset']:>15} {row['batch']:>4} "
              f"{1e3 * row['seconds_per_round']:>10.2f} {row['x_float']:>9.1f} "
              f"{row['sigma']:>8.3f}")  # fmt: skip
    finish(args.json, setting, rows, load_before, load_after)


if __name__ == "__main__":
    main()
