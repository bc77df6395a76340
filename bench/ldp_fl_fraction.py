"""LDP-FL's round cost follows the selected clients, not the population.

    python bench/ldp_fl_fraction.py [--clients 1000] [--fractions 0.01,0.1] [--json PATH]

``jfed run ldp-fl --clients 1000 --batch 1 --rounds 2 --fraction f`` (digits, the CNN, eps 1) for
each fraction, through ``jfed.run``: ``run_seconds`` is the compiled program's run (compile
excluded), the median of ``--repeats`` runs taken in turn (f1, f2, f1, f2, ...) so that every
fraction sees the same load of a shared machine. ``x_largest`` is a fraction's time over the
largest fraction's. JSON (default ``bench/results/ldp_fl_fraction.json``): ``rows`` of
``{fraction, selected, run_seconds, x_largest}``, ``uptime`` before and after, ``versions``.
"""

from __future__ import annotations

import argparse
import statistics

from _common import parse_args, uptime, write_json

import jfed
from jfed.methods import LDPFL
from jfed.report import versions


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--fractions", default="0.01,0.1")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", metavar="PATH", default="bench/results/ldp_fl_fraction.json")
    args = parse_args(parser, argv, __file__, clients=20, fractions="0.1,0.5", repeats=1)
    fractions = [float(f) for f in args.fractions.split(",")]
    load_before = uptime()
    seconds: dict[float, list[float]] = {f: [] for f in fractions}
    selected = {}
    for repeat in range(args.repeats + 1):  # the first pass compiles
        for fraction in fractions:
            record = jfed.run(LDPFL(clients=args.clients, batch=1, rounds=2, fraction=fraction))
            selected[fraction] = record["selected_per_round"]
            if repeat:
                seconds[fraction].append(record["run_seconds"])
    load_after = uptime()
    largest = statistics.median(seconds[max(fractions)])
    rows = [{"fraction": f, "selected": selected[f], "run_seconds": statistics.median(seconds[f]),
             "x_largest": statistics.median(seconds[f]) / largest} for f in fractions]  # fmt: skip
    print(f"LDP-FL, digits, CNN, {args.clients} clients, --batch 1 --rounds 2 (median of "
          f"{args.repeats} runs)")  # fmt: skip
    print(f"{'fraction':>9} {'selected':>9} {'run s':>8} {'x largest':>10}")
    for row in rows:
        print(f"{row['fraction']:>9g} {row['selected']:>9} {row['run_seconds']:>8.3f} "
              f"{row['x_largest']:>10.2f}")  # fmt: skip
    print(f"load before: {load_before}\nload after:  {load_after}")
    if args.json:
        payload = {"rows": rows, "uptime": {"before": load_before, "after": load_after},
                   "versions": versions()}  # fmt: skip
        write_json(args.json, payload)


if __name__ == "__main__":
    main()
