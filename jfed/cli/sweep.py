"""``jfed sweep`` and ``jfed plot``.

    jfed sweep modulated-one-shot --dataset fair --epsilon 0.1,0.3,1,3,10 --seeds 10 \
        --grid ridge=0.5,1,2 --out results/fair-one-shot
    jfed sweep modulated-iterative --grid step_scale=0.5,0.8,1 --tune per-eps --resume ...
    jfed plot results/fair-one-shot

A sweep writes, in ``--out``: ``runs.jsonl`` (one row per run, appended and flushed as each slice
finishes; ``--resume`` continues it), ``runs.csv`` (the same, tidy), ``tuned.csv`` (the chosen
hyper-parameters per (algorithm, eps) with the rule recorded), ``utility.png/.pdf`` and
``convergence.png/.pdf``. ``jfed plot`` redraws them from ``runs.jsonl``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys

from jfed.catalog import (
    METRIC_LABELS,
    REGRESSION_SWEEP_ALGORITHMS,
    SELECTION_STATISTICS,
    SILO_ALGORITHMS,
    TUNING_RULES,
)
from jfed.cli.checks import CHECKS, parse_numbers, within_range
from jfed.cli.options import cache_flag, certification_warning, progress_flag, show_progress

TUNABLE = (
    "step_scale", "alpha", "beta", "omega", "clip", "radius", "ridge", "ridge_scale",
    "learning_rate", "step_size",
)  # fmt: skip


def add_parsers(commands) -> None:
    sweep = commands.add_parser("sweep", help="eps x seeds x hyper-parameters in one program")
    sweep.add_argument("algorithm", choices=REGRESSION_SWEEP_ALGORITHMS + SILO_ALGORITHMS)
    sweep.add_argument(
        "--dataset", default=None,
        help="task (fair for regression algorithms, digits-evenodd for silo algorithms)",
    )  # fmt: skip
    sweep.add_argument(
        "--accountant", default=None,
        help="calibration: zcdp|classic|pld (regression), exact|theorem|experiments (silos)",
    )  # fmt: skip
    sweep.add_argument("--epsilon", default="0.1,0.3,1,3,10", help="comma-separated eps grid")
    sweep.add_argument("--seeds", type=int, default=10, help="seeds per configuration (10)")
    sweep.add_argument(
        "--grid", action="append", default=[], metavar="NAME=V1,V2",
        help="a swept hyper-parameter (repeatable), e.g. step_scale=0.5,0.8,1",
    )  # fmt: skip
    sweep.add_argument("--set", action="append", default=[], metavar="NAME=V",
                       help="a fixed method parameter, e.g. beta=0.3")  # fmt: skip
    sweep.add_argument("--rounds", type=int, default=10, help="T (10)")
    sweep.add_argument(
        "--delta", type=float, default=None,
        help="delta of every run (1e-5 for the regression methods; 1/n_min^2 per silo for the silo "
        "methods, n_min the smallest silo)",
    )  # fmt: skip
    _statistic_flag(sweep)
    sweep.add_argument(
        "--extend-edges", type=int, default=2, metavar="N",
        help="when a chosen value is on the edge of its --grid, extend the grid past it and sweep "
        "again, up to N times (2; 0: only warn)",
    )  # fmt: skip
    sweep.add_argument("--tune", choices=TUNING_RULES, default="fixed",
                       help="fixed: one setting for all eps (paper); per-eps")  # fmt: skip
    sweep.add_argument("--out", default="results/sweep", help="results folder")
    sweep.add_argument("--resume", action="store_true", help="continue an interrupted sweep")
    sweep.add_argument("--slice-size", type=int, default=None, help="runs per compiled call")
    progress_flag(sweep)
    cache_flag(sweep)
    sweep.add_argument(
        "--no-shared-noise", action="store_true",
        help="run every eps on its own (default: the eps of one seed share their draws where the "
        "algorithm allows it; equal up to float32 rounding)",
    )  # fmt: skip

    plot = commands.add_parser("plot", help="redraw the tables and plots of a sweep")
    plot.add_argument("results", help="a sweep folder or its runs.jsonl")
    plot.add_argument("--tune", choices=TUNING_RULES, default="fixed")
    _statistic_flag(plot)


def _statistic_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--statistic", choices=SELECTION_STATISTICS, default="median",
        help="how a setting's validation values (over seeds, and eps for --tune fixed) are scored "
        "(median: robust to the one-shot estimator's heavy-tailed R^2)",
    )  # fmt: skip


def _pairs(items: list[str], many: bool) -> dict:
    """``--grid NAME=V1,V2`` (``many``) or ``--set NAME=V`` items as ``{name: values}``."""
    flag = "--grid" if many else "--set"
    parsed = {}
    for item in items:
        name, _, values = item.partition("=")
        name = name.strip().replace("-", "_")
        if not name or not values.strip():
            raise ValueError(f"expected {flag} NAME={'V1,V2' if many else 'V'}, got {item!r}")
        numbers = parse_numbers(f"{flag} {name}", values)
        if name in parsed:
            raise ValueError(f"{flag} {name} is given twice")
        if not many and len(numbers) != 1:
            raise ValueError(f"expected one value in --set {name}, got {values!r} (--grid sweeps)")
        if len(set(numbers)) != len(numbers):
            raise ValueError(f"expected distinct values in {flag} {name}, got {values!r}")
        if name in CHECKS:  # the same range as the flag of `jfed run`
            for number in numbers:
                CHECKS[name](f"{flag} {name}", number)
        parsed[name] = numbers if many else numbers[0]
    return parsed


def _write_csv(path: str, rows: list[dict]) -> None:
    fields = list(dict.fromkeys(k for row in rows for k in row))
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fields)
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {k: json.dumps(v) if isinstance(v, list | dict) else v for k, v in row.items()}
            )


def finish(rows: list[dict], out: str, rule: str, statistic: str = "median") -> list[dict]:
    """Write runs.csv, tuned.csv and the plots of a finished (or partial) sweep."""
    from jfed.report.plots import plot_convergence, plot_utility
    from jfed.sweep import tuned_table
    from jfed.sweep.tuning import hyper_names

    if not rows:
        raise ValueError("no finished runs to report")
    hyper = hyper_names(rows, TUNABLE)
    selection = rows[0].get("selection_metric", "validation_r2")
    report = rows[0].get("report_metric", "test_r2")
    maximize = rows[0].get("selection_maximize", True)
    table = tuned_table(rows, hyper, rule, selection, report, maximize, statistic)
    _write_csv(os.path.join(out, "runs.csv"), rows)
    _write_csv(os.path.join(out, "tuned.csv"), table)
    plot_utility(table, os.path.join(out, "utility"), report)
    plot_convergence(rows, table, hyper, os.path.join(out, "convergence"), f"{report}_per_round")
    return table


def _warn_uncertified(rows: list[dict]) -> None:
    """One stderr line per (algorithm, eps) whose certified eps differs from the target, or that
    no accountant certifies (the seed's formula calibrations)."""
    seen = set()
    for row in rows:
        key = (row["algorithm"], row["epsilon"])
        warning = None if key in seen else certification_warning(row)
        if warning:
            seen.add(key)
            print(f"jfed: warning: {row['algorithm']}: {warning} (runs.jsonl has both)",
                  file=sys.stderr)  # fmt: skip


def _print_table(table: list[dict]) -> None:
    for row in table:
        chosen = {k: v for k, v in row.items() if k in TUNABLE}
        metric = next(k[: -len("_mean")] for k in row if k.endswith("_mean"))
        reference = row.get("reference")
        reference = f"; non-private OLS {reference:.4f}" if reference is not None else ""
        print(
            f"{row['algorithm']} on {row['dataset']}: eps={row['epsilon']:g} "
            f"(delta={row['delta']:.3g}, {row['accountant']}): {METRIC_LABELS.get(metric, metric)} "
            f"{row[metric + '_mean']:.4f} +- {row[metric + '_se']:.4f} over {row['seeds']} "
            f"seeds, chosen {chosen} ({row['choice_rule']}){reference}"
            + (f" | eps: {row['notion']}" if row.get("notion") else "")
        )


REGRESSION_DELTA = 1e-5
# the numeric method parameters `--set` may fix, per regression method
REGRESSION_SETTINGS = {
    "dpsgd": ("clip", "learning_rate", "radius"),
    "modulated-iterative": (
        "alpha", "beta", "omega", "directions", "clip", "adjacency_diameter", "radius",
        "step_scale", "step_floor",
    ),
    "modulated-one-shot": (
        "alpha", "beta", "omega", "directions", "clip", "adjacency_diameter", "ridge",
        "ridge_scale",
    ),
}  # fmt: skip


def check_regression_settings(algorithm: str, fixed: dict) -> None:
    """Refuse ``--set`` names the method does not have (a misspelling would be ignored)."""
    known = REGRESSION_SETTINGS[algorithm]
    unknown = sorted(set(fixed) - set(known) - {"accountant"})
    if unknown:
        raise ValueError(
            f"unknown --set {', '.join(unknown)} for {algorithm}; expected some of {list(known)}"
        )
    if "directions" in fixed and fixed["directions"] != int(fixed["directions"]):
        raise ValueError(f"expected an integer for --set directions, got {fixed['directions']:g}")


def _silo_adapter(args: argparse.Namespace, fixed: dict):
    import dataclasses

    from jfed.data.silos import load_silos
    from jfed.run_silo import SiloSettings
    from jfed.sweep.adapters import SiloAdapter

    args.dataset = args.dataset or "digits-evenodd"
    integers = {"batch", "available", "average_last"}
    known = {f.name for f in dataclasses.fields(SiloSettings)}
    unknown = set(fixed) - known
    if unknown:
        raise ValueError(
            f"unknown silo settings {sorted(unknown)}; expected some of {sorted(known)}"
        )
    for name in integers & set(fixed):
        if fixed[name] != int(fixed[name]):
            raise ValueError(f"expected an integer for --set {name}, got {fixed[name]:g}")
    values = {k: int(v) if k in integers else v for k, v in fixed.items()}
    settings = SiloSettings(rounds=args.rounds, calibration=args.accountant or "exact", **values)
    return SiloAdapter(args.algorithm, load_silos(args.dataset), settings, args.delta)


def run(args: argparse.Namespace) -> None:
    from jfed.data import load_regression
    from jfed.sweep import RegressionAdapter, configurations, read_rows, run_sweep, tuned_table
    from jfed.sweep.lock import folder_lock
    from jfed.sweep.tuning import sweep_until_interior

    if args.command == "plot":
        path = args.results
        if not os.path.exists(path):
            raise ValueError(f"no such sweep folder or runs.jsonl: {path}")
        if os.path.isfile(path) and not path.endswith(".jsonl"):
            raise ValueError(f"expected a sweep folder or its runs.jsonl, got the file {path}")
        folder = os.path.dirname(path) if path.endswith(".jsonl") else path
        results = path if path.endswith(".jsonl") else os.path.join(path, "runs.jsonl")
        with folder_lock(folder or "."):
            rows = read_rows(results)
            if not rows:
                raise ValueError(f"no finished runs in {results}")
            _print_table(finish(rows, folder, args.tune, args.statistic))
        return
    epsilons = parse_numbers("--epsilon", args.epsilon)
    fixed = _pairs(args.set, many=False)
    if args.algorithm in SILO_ALGORITHMS:
        adapter = _silo_adapter(args, fixed)
    else:
        args.dataset = args.dataset or "fair"
        if args.accountant:
            fixed["accountant"] = args.accountant
        check_regression_settings(args.algorithm, fixed)
        adapter = RegressionAdapter(
            args.algorithm,
            load_regression(args.dataset),
            REGRESSION_DELTA if args.delta is None else args.delta,
            args.rounds,
            fixed,
        )
    grid = _pairs(args.grid, many=True)
    results = os.path.join(args.out, "runs.jsonl")
    calls = []

    def run_grid(grid: dict) -> list[dict]:
        calls.append(grid)
        return run_sweep(
            adapter, configurations(epsilons, args.seeds, grid), results,
            resume=args.resume or len(calls) > 1, slice_size=args.slice_size,
            progress=show_progress(args), identity={"dataset": args.dataset},
            share_noise=not args.no_shared_noise,
        )  # fmt: skip

    def tune(rows: list[dict]) -> list[dict]:
        return tuned_table(
            rows, tuple(sorted(grid)), args.tune, adapter.selection_metric,
            adapter.report_metric, adapter.selection_maximize, args.statistic,
        )  # fmt: skip

    with folder_lock(args.out):  # the runs and the tables written from them: one writer
        rows, _, notes = sweep_until_interior(
            run_grid, grid, tune, within_range, max_extensions=args.extend_edges
        )
        for note in notes:
            print(f"jfed: note: {note}", file=sys.stderr)
        _warn_uncertified(rows)
        _print_table(finish(rows, args.out, args.tune, args.statistic))
