"""What the in-scan progress bar costs: the same run with and without it, side by side.

    python bench/progress.py [--json PATH] [--smoke]

The iterative modulated estimator for T rounds on (a) a small population (cheap rounds: the
worst case for a per-round callback) and (b) a large synthetic one. Each is timed three ways in
this process, compiled beforehand, taking turns (medians of several repetitions): no progress;
the default progress (at most ~100 reports per run); a report after every round. Prints a table
and writes JSON with ``rows`` of ``{population, n_clients, rounds, seconds_off,
seconds_default, seconds_every_round, overhead_default, overhead_every_round,
microseconds_per_report}``. The bars are drawn into a buffer, not the terminal, but tqdm does
all its work.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import time

import jax
import numpy as np
from _common import parse_args  # bench/ is on the path

from jfed.algorithms import modulated
from jfed.data import SyntheticLinear, load_regression
from jfed.engine import ExecutionPlan
from jfed.engine.loop import _simulate
from jfed.engine.progress import report_every, round_progress
from jfed.report import versions


def _interleaved_medians(fns: dict, repeats: int) -> dict:
    """Median seconds of each function, the functions taking turns (shared, noisy machine)."""
    for fn in fns.values():
        jax.block_until_ready(fn())  # compile
    times: dict = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            tic = time.perf_counter()
            jax.block_until_ready(fn())
            jax.effects_barrier()
            times[name].append(time.perf_counter() - tic)
    return {name: float(np.median(values)) for name, values in times.items()}


def measure(name: str, population, rounds: int, repeats: int) -> dict:
    algorithm = modulated.Iterative(population.dim)
    hp = modulated.hyperparams(noise_std=1.0)
    key = jax.random.key(0)
    plan = ExecutionPlan().fitted(population.n_clients)

    def off():
        return _simulate(algorithm, population, hp, key, rounds, plan)

    def with_reports(every):
        def run():
            with round_progress(rounds, name) as token:
                result = _simulate(algorithm, population, hp, key, rounds, plan, token, every)
                jax.block_until_ready(result)
                jax.effects_barrier()
            return result

        return run

    every = report_every(rounds)
    with contextlib.redirect_stderr(io.StringIO()):
        medians = _interleaved_medians(
            {"off": off, "default": with_reports(every), "every": with_reports(1)}, repeats
        )
    seconds_off, seconds_default, seconds_every = (
        medians["off"],
        medians["default"],
        medians["every"],
    )
    reports = rounds
    return {
        "population": name,
        "n_clients": int(population.n_clients),
        "rounds": rounds,
        "report_every": every,
        "seconds_off": seconds_off,
        "seconds_default": seconds_default,
        "seconds_every_round": seconds_every,
        "overhead_default": seconds_default / seconds_off - 1.0,
        "overhead_every_round": seconds_every / seconds_off - 1.0,
        "microseconds_per_report": 1e6 * (seconds_every - seconds_off) / reports,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small-rounds", type=int, default=2000, help="T on modechoice")
    parser.add_argument("--large-clients", type=int, default=200_000, help="n of the synthetic")
    parser.add_argument("--large-rounds", type=int, default=50, help="T on the synthetic")
    parser.add_argument("--repeats", default="9,5", help="repetitions: small, large")
    parser.add_argument("--json", metavar="PATH")
    args = parse_args(parser, argv, __file__, small_rounds=20, large_clients=1000,
                      large_rounds=5, repeats="1,1")  # fmt: skip
    small = load_regression("modechoice").train
    large = SyntheticLinear.create(jax.random.key(1), n_clients=args.large_clients, dim=10)
    small_repeats, large_repeats = (int(r) for r in args.repeats.split(","))
    rows = [measure("modechoice", small, args.small_rounds, small_repeats),
            measure("synthetic", large, args.large_rounds, large_repeats)]  # fmt: skip
    print(f"{'population':>12} {'n':>8} {'T':>5} {'off s':>8} {'default s':>10} "
          f"{'every s':>8} {'default':>8} {'every':>8} {'us/report':>10}")  # fmt: skip
    for r in rows:
        print(f"{r['population']:>12} {r['n_clients']:>8} {r['rounds']:>5} "
              f"{r['seconds_off']:>8.3f} {r['seconds_default']:>10.3f} "
              f"{r['seconds_every_round']:>8.3f} {100 * r['overhead_default']:>7.1f}% "
              f"{100 * r['overhead_every_round']:>7.1f}% "
              f"{r['microseconds_per_report']:>10.1f}")  # fmt: skip
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"benchmark": "progress", "rows": rows, "versions": versions()}, handle,
                      indent=2)  # fmt: skip
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
