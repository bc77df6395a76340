"""What an audit costs: DP-FedAvg rounds with M canary clients against the same rounds without.

    python bench/audit.py [--cohort 1000] [--canaries 1000] [--rounds 10] [--repeats 5]
                          [--noise discrete] [--json PATH]

The setting: DP-FedAvg through ``jfed.run`` (the method as a user runs it: Synthetic(1, 1)
clients, a Poisson cohort of expected size K, one local epoch, flat clipping, the exact
discrete Gaussian on the integer grid by default) at N = 10 K clients, with and without
``--audit-canaries M``. The canaries are M more rows clipped and noised with the cohort's
updates (``jfed.privacy.canary_aggregator.WithCanaries``) plus their scores against every
release. Each figure is the median of ``--repeats`` runs of ``--rounds`` rounds, the two runs
taking turns (shuffled) so that both see the same load; a run's time is its record's
``run_seconds`` (the compiled program, compilation excluded: the programs are compiled once
before timing). ``x_plain``: the audited run's time over the plain run's (the target: <= 1.2 at
K = 1,000 with 1,000 canaries); ``x_plain_paired``: the median over the repeats of the audited
run's time over the plain run's of the same repeat (next to each other in time, so less moved
by a load that changes during the benchmark). Time it on an otherwise idle machine: the load
before and after is recorded.

JSON (default ``bench/results/audit_cpu.json``): ``rows`` of ``{run, cohort, canaries,
seconds_per_round, x_plain, x_plain_paired}``, ``uptime`` before and after, ``device``,
``versions``.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
from _common import finish, parse_args, uptime

import jfed
from jfed.methods import declared


def config(cohort: int, rounds: int, canaries: int, noise: str) -> declared.DPFedAvg:
    return declared.DPFedAvg(clients=10 * cohort, cohort_size=cohort, rounds=rounds,
                             audit_canaries=canaries, noise=noise)  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cohort", type=int, default=1000)
    parser.add_argument("--canaries", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--noise", default="discrete", choices=("discrete", "float"))
    parser.add_argument("--json", metavar="PATH", default="bench/results/audit_cpu.json")
    args = parse_args(parser, argv, __file__, cohort=10, canaries=10, rounds=2, repeats=1)
    load_before = uptime()
    configs = {
        "plain": config(args.cohort, args.rounds, 0, args.noise),
        "audited": config(args.cohort, args.rounds, args.canaries, args.noise),
    }
    for run_config in configs.values():  # compiles, and checks the audit is in the record
        record = jfed.run(run_config)
    assert record["audit_canary_count"] == args.canaries
    seconds: dict[str, list[float]] = {name: [] for name in configs}
    order = np.random.default_rng(0)
    names = list(configs)
    for _ in range(args.repeats):
        for index in order.permutation(len(names)):
            seconds[names[index]].append(jfed.run(configs[names[index]])["run_seconds"])
    plain = statistics.median(seconds["plain"])
    rows = [
        {"run": name, "cohort": args.cohort, "canaries": 0 if name == "plain" else args.canaries,
         "seconds_per_round": statistics.median(values) / args.rounds,
         "x_plain": statistics.median(values) / plain,
         "x_plain_paired": statistics.median(
             [run / alone for run, alone in zip(values, seconds["plain"], strict=True)])}
        for name, values in seconds.items()
    ]  # fmt: skip
    load_after = uptime()
    setting = (f"DP-FedAvg (jfed.run), Synthetic(1,1), N = {10 * args.cohort} clients, Poisson "
               f"cohort K = {args.cohort}, {args.rounds} rounds, --noise {args.noise}; median of "
               f"{args.repeats} runs each, in turns")  # fmt: skip
    print(setting)
    print(f"{'run':>8} {'K':>6} {'canaries':>9} {'ms/round':>10} {'x plain':>8} {'paired':>7}")
    for row in rows:
        print(f"{row['run']:>8} {row['cohort']:>6} {row['canaries']:>9} "
              f"{1e3 * row['seconds_per_round']:>10.2f} {row['x_plain']:>8.3f} "
              f"{row['x_plain_paired']:>7.3f}")  # fmt: skip
    finish(args.json, setting, rows, load_before, load_after)


if __name__ == "__main__":
    main()
