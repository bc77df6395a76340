"""``jfed sweep METHOD`` and ``jfed plot``.

    jfed sweep modulated-one-shot --dataset fair --epsilon 0.1,0.3,1,3,10 --seeds 10 \
        --grid ridge=0.5,1,2 --out results/fair-one-shot
    jfed sweep modulated-iterative --grid step_scale=0.5,0.8,1 --tune per-eps --resume ...
    jfed plot results/fair-one-shot results/fair-dpsgd --out results/compare

A sweep takes every flag of ``jfed run METHOD`` (fixed for all its runs) except ``--epsilon``,
which becomes a list, and ``--seed``, which becomes ``--seeds N``; ``--grid NAME=V1,V2`` sweeps a
tunable field and ``--set NAME=V`` fixes any field by its name. It writes, in ``--out``:
``runs.jsonl`` (one record per run, appended and synced as each run's row is written;
``--resume`` continues it, and is refused if the folder was run with other arguments, as
``runs.sweep.json`` records), ``runs.parquet`` and ``runs.csv`` (every record of the folder as
tables, earlier invocations' included), ``tuned.csv`` (the chosen settings per (method, eps)
with the rule recorded), ``utility.png/.pdf``
and, for methods with more than one round, ``convergence.png/.pdf``. ``jfed plot`` redraws them
from one folder, or overlays several folders' methods in ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import numbers
import os
import sys

from jfed._io import remove_stale_temporaries
from jfed._validation import UsageError
from jfed.catalog import METRIC_LABELS, SELECTION_STATISTICS, TUNING_RULES
from jfed.cli import generate
from jfed.cli.checks import (
    DEFAULT_EPSILONS,
    check_epsilons,
    check_numerical_accountant,
    within_range,
)
from jfed.cli.options import (
    cache_flag,
    certification_warning,
    engine_flags,
    plan_of,
    progress_flag,
    show_progress,
)

DEFAULT_SEEDS = 10


def add_parsers(commands) -> None:
    sweep = commands.add_parser(
        "sweep", help="eps x seeds x tunable fields of a method in one compiled program"
    )

    def sweep_flags(parser: argparse.ArgumentParser, declared) -> None:
        grid = parser.add_argument_group("sweep")
        if declared.private:
            grid.add_argument(
                "--epsilon", default=DEFAULT_EPSILONS,
                help=f"comma-separated eps grid (default: {DEFAULT_EPSILONS})",
            )  # fmt: skip
        grid.add_argument(
            "--seeds", type=int, default=DEFAULT_SEEDS,
            help=f"seeds 0 .. N-1 per configuration (default: {DEFAULT_SEEDS})",
        )  # fmt: skip
        grid.add_argument(
            "--grid", action="append", default=[], metavar="NAME=V1,V2",
            help="sweep a tunable field (repeatable), e.g. step_scale=0.5,0.8,1; `jfed methods` "
            "marks the tunable fields",
        )  # fmt: skip
        grid.add_argument(
            "--set", action="append", default=[], metavar="NAME=V",
            help="fix a field by its name, e.g. beta=0.3 (same as --beta 0.3)",
        )  # fmt: skip
        _statistic_flag(grid)
        grid.add_argument(
            "--extend-edges", type=int, default=2, metavar="N",
            help="when a chosen value is on the edge of its --grid, extend the grid past it and "
            "sweep again, up to N times (default: 2; 0: only warn)",
        )  # fmt: skip
        grid.add_argument("--tune", choices=TUNING_RULES, default="fixed",
                          help="fixed: one setting for all eps (the papers' rule; default); "
                          "per-eps")  # fmt: skip
        output = parser.add_argument_group("output")
        output.add_argument(
            "--out", default="results/sweep", help="results folder (default: results/sweep)"
        )
        output.add_argument(
            "--resume", action="store_true",
            help="continue an interrupted sweep with the same arguments",
        )  # fmt: skip
        output.add_argument(
            "--slice-size", type=int, default=None,
            help="runs per compiled call (default: from a 2 GiB memory budget)",
        )  # fmt: skip
        progress_flag(output)
        cache_flag(output)
        engine_flags(parser, declared)
        output.add_argument(
            "--no-shared-noise", action="store_true",
            help="run every eps on its own (default: the eps of one seed share their draws where "
            "the method allows it; equal up to float32 rounding)",
        )  # fmt: skip

    generate.method_parsers(
        sweep.add_subparsers(dest="algorithm", required=True, metavar="METHOD"), "sweep",
        sweep_flags,
    )  # fmt: skip

    plot = commands.add_parser(
        "plot", help="redraw a sweep's tables and plots, or overlay several sweeps"
    )
    plot.add_argument("results", nargs="+", help="sweep folders (or their runs.jsonl)")
    plot.add_argument(
        "--out", default=None,
        help="folder of the figures (default: the sweep's own folder; results/plot for several)",
    )  # fmt: skip
    plot.add_argument("--tune", choices=TUNING_RULES, default="fixed")
    _statistic_flag(plot)


def _statistic_flag(parser) -> None:
    parser.add_argument(
        "--statistic", choices=SELECTION_STATISTICS, default="median",
        help="how a setting's validation values (over seeds, and eps for --tune fixed) are scored "
        "(default: median, robust to the one-shot estimator's heavy-tailed R^2)",
    )  # fmt: skip


def _write_csv(path: str, rows: list[dict]) -> None:
    from jfed._io import replacing

    fields = list(dict.fromkeys(k for row in rows for k in row))
    with replacing(path) as handle:
        writer = csv.DictWriter(handle, fields)
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {k: json.dumps(v) if isinstance(v, list | dict) else v for k, v in row.items()}
            )


def tune_rows(rows: list[dict], rule: str, statistic: str) -> tuple[list[dict], tuple]:
    """The tuned table of a sweep's rows and the swept names it chose among."""
    from jfed.sweep import tuned_table
    from jfed.sweep.tuning import swept_names

    hyper = swept_names(rows)
    first = rows[0]
    table = tuned_table(
        rows, hyper, rule, first.get("selection_metric", "validation_r2"),
        first.get("report_metric", "test_r2"), first.get("selection_maximize", True), statistic,
    )  # fmt: skip
    return table, hyper


def finish(
    rows: list[dict], out: str, rule: str, statistic: str = "median"
) -> tuple[list[dict], tuple]:
    """Write runs.csv, runs.parquet, tuned.csv and the plots of a finished (or partial) sweep;
    returns the tuned table and the swept names it chose among."""
    from jfed.report.plots import plot_convergence, plot_utility
    from jfed.report.results import PARQUET, write_parquet

    if not rows:
        raise UsageError("no finished runs to report")
    table, hyper = tune_rows(rows, rule, statistic)
    report = rows[0].get("report_metric", "test_r2")
    _write_csv(os.path.join(out, "runs.csv"), rows)
    write_parquet(rows, os.path.join(out, PARQUET))
    _write_csv(os.path.join(out, "tuned.csv"), table)
    plot_utility(table, os.path.join(out, "utility"), report, hyper)
    # a re-run must not leave the curves of an earlier sweep behind
    _remove_figure(os.path.join(out, "convergence"))
    plot_convergence(rows, table, hyper, os.path.join(out, "convergence"), f"{report}_per_round")
    _plot_audit(rows, os.path.join(out, "audit"))
    return table, hyper


def _remove_figure(prefix: str) -> None:
    """Remove ``prefix.png`` and ``prefix.pdf`` where an earlier run wrote them (never what is
    not a regular file jfed could have written)."""
    from jfed._io import check_replaceable

    for path in (f"{prefix}.png", f"{prefix}.pdf"):
        check_replaceable(path)
        if os.path.exists(path):
            os.remove(path)


def _plot_audit(rows: list[dict], prefix: str) -> None:
    """``prefix.png`` / ``.pdf``: audit eps against certified eps, when some run was audited
    (``--audit-canaries``); an earlier sweep's audit figure is removed when none was."""
    from jfed.report.audit_plot import audited_points, plot_audit

    if audited_points(rows):
        plot_audit(rows, prefix)
    else:
        _remove_figure(prefix)


def _warn_uncertified(rows: list[dict]) -> None:
    """One stderr line per (method, eps) whose certified eps differs from the target, or that
    no accountant certifies (the paper's formula calibrations)."""
    seen = set()
    for row in rows:
        key = (row["method"], row["epsilon"])
        warning = None if key in seen else certification_warning(row)
        if warning:
            seen.add(key)
            print(f"jfed: warning: {row['method']}: {warning} (runs.jsonl has both)",
                  file=sys.stderr)  # fmt: skip


def _print_table(table: list[dict], hyper: tuple) -> None:
    for row in table:
        chosen = {k: row[k] for k in hyper if k in row}
        metric = next(k[: -len("_mean")] for k in row if k.endswith("_mean"))
        reference = row.get("reference")
        reference = f"; non-private OLS {reference:.4f}" if reference is not None else ""
        notion = f" | eps: {row['notion']}" if row.get("notion") else ""
        if str(row.get("choice_rule", "")).startswith("none"):
            chosen_text = "at " + ", ".join(f"{k}={v}" for k, v in chosen.items())
        else:
            chosen_text = f"chosen {chosen} ({row['choice_rule']})"
        print(
            f"{row['method']} on {row['dataset']}: eps={row['epsilon']:g} "
            f"(delta={row['delta']:.3g}, {row['accountant']}): {METRIC_LABELS.get(metric, metric)} "
            f"{_metric_text(row, metric)} over {row['seeds']} seeds, {chosen_text}{reference}"
            f"{notion}"
        )


def _metric_text(row: dict, metric: str) -> str:
    """``mean +- se`` of a table cell, or what a cell without a finite mean holds instead of
    ``nan +- nan``: its runs' metric is NaN (stored as ``NaN``, ``"nan"`` or null)."""
    mean, se = row[metric + "_mean"], row[metric + "_se"]
    if _finite(mean):
        return f"{mean:.4f} +- {f'{se:.4f}' if _finite(se) else '(no se)'}"
    return "not finite (a run's metric is NaN: it diverged or failed; see runs.jsonl)"


def _finite(value) -> bool:
    """A finite real number (not a bool; an int beyond a float counts as not finite)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _warn_not_finite(rows: list[dict], results: str) -> None:
    """One line on stderr where runs of ``results`` hold no finite report metric."""
    metric = rows[0].get("report_metric", "test_r2") if rows else "test_r2"
    missing = sum(not _finite(row.get(metric)) for row in rows)
    if missing:
        print(
            f"jfed: warning: {missing} of the {len(rows)} runs in {results} hold no finite "
            f"{metric} (NaN: diverged or failed); their cells say so instead of a mean",
            file=sys.stderr,
        )


def _is_metric_value(value) -> bool:
    """A number, or ``None`` where a run's metric was not finite."""
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def reported_rows(results: str) -> list[dict]:
    """Every row of a sweep's ``runs.jsonl``, checked to hold the metrics its tables need (the
    selection metric, where the method chooses, and the report metric).

    Raises:
      UsageError: no rows, a damaged line, or a row lacking a metric (naming the line).
    """
    from jfed.report.rows import scan_rows, torn_note

    scan = scan_rows(results)
    if scan.torn is not None:
        print(torn_note(results, scan.torn, "ignoring it (a --resume runs it again)"),
              file=sys.stderr)  # fmt: skip
    if not scan.rows:
        raise UsageError(f"no finished runs in {results}")
    from jfed.methods import ALIASES, METHODS

    known = set(METHODS) | set(ALIASES)
    first = scan.rows[0][1]
    # the tables score every row on the first row's metrics (one method per folder)
    wanted = (first.get("selection_metric"), first.get("report_metric", "test_r2"))
    for number, row in scan.rows:
        if row["method"] not in known:
            raise UsageError(
                f"{results} line {number} is a run of {row['method']!r}, a method this jfed does "
                "not know (from a plug-in that is not installed?)"
            )
        named = (row.get("selection_metric"), row.get("report_metric", "test_r2"))
        if not isinstance(named[0], str | None) or not isinstance(named[1], str):
            raise UsageError(f"{results} line {number} names its metrics with other than text")
        for metric in (m for m in wanted if m is not None):
            if metric not in row:
                raise UsageError(
                    f"{results} line {number} lacks the metric {metric} that its tables report "
                    "(a row of another jfed, or edited?)"
                )
            if not _is_metric_value(row[metric]):
                raise UsageError(
                    f"{results} line {number} holds {row[metric]!r} as its {metric}, not a number"
                )
    rows = [row for _, row in scan.rows]
    _warn_not_finite(rows, results)
    return rows


def _plot(args: argparse.Namespace) -> None:
    from jfed.report.plots import plot_overlay
    from jfed.sweep.lock import folder_lock

    sources = []
    for path in args.results:
        if not path.strip():
            raise UsageError("expected a sweep folder or its runs.jsonl, got an empty path")
        if not os.path.exists(path):
            raise UsageError(f"no such sweep folder or runs.jsonl: {path}")
        if os.path.isfile(path) and not path.endswith(".jsonl"):
            raise UsageError(f"expected a sweep folder or its runs.jsonl, got the file {path}")
        folder = os.path.dirname(path) if path.endswith(".jsonl") else path
        results = path if path.endswith(".jsonl") else os.path.join(path, "runs.jsonl")
        sources.append((folder or ".", results))
    if len(sources) == 1 and args.out is None:
        folder, results = sources[0]
        with folder_lock(folder):
            remove_stale_temporaries(folder)  # a killed writer's: this one holds the lock
            _print_table(*finish(reported_rows(results), folder, args.tune, args.statistic))
        return
    out = args.out or "results/plot"
    tables = []
    rows_of = [(folder, reported_rows(results)) for folder, results in sources]
    for folder, rows in rows_of:  # every source is read and checked before anything is written
        table, hyper = tune_rows(rows, args.tune, args.statistic)
        _print_table(table, hyper)
        tables.append((folder, table))
    with folder_lock(out):  # one writer of the figures; a killed one's temporaries removed
        remove_stale_temporaries(out)
        paths, _ = plot_overlay(tables, os.path.join(out, "utility"))
        print(f"figure: {paths[0]}")
        audited = [row for _, rows in rows_of for row in rows]
        _plot_audit(audited, os.path.join(out, "audit"))
    if os.path.exists(os.path.join(out, "audit.png")):
        print(f"figure: {os.path.join(out, 'audit.png')}")


def checked(args: argparse.Namespace) -> tuple:
    """The sweep's arguments checked before JAX is imported: ``(method, eps list or None,
    grid, base configuration)``."""
    declared = generate.chosen_method(args)
    epsilons = check_epsilons(args.epsilon) if declared.private else None
    fixed = generate.parse_pairs(args.set, declared.config, many=False)
    grid = generate.parse_pairs(args.grid, declared.config, many=True)
    base = generate.build_config(args, fixed)
    for name in sorted(set(grid) & (set(fixed) | set(generate.given_fields(args, base)))):
        raise UsageError(f"--grid {name} also fixes it: give it once")
    check_numerical_accountant(base, epsilons or [])
    generate.check_given(args, base, fixed)
    check_grid_points(base, grid)
    return declared, epsilons, grid, base


MAX_CHECKED_POINTS = 10_000  # grid points checked together; beyond, each value on its own


def check_grid_points(base, grid: dict) -> None:
    """Every grid value is a valid configuration with the fixed fields (``--grid sites=1`` with
    ``--setting central-user`` is refused here, naming it, not after the first runs): each
    value on its own, and every combination of them when there are at most
    :data:`MAX_CHECKED_POINTS`."""
    import itertools
    import math

    names = sorted(grid)
    points = [{name: value} for name in names for value in grid[name]]
    if math.prod(len(grid[name]) for name in names) <= MAX_CHECKED_POINTS:
        points += [dict(zip(names, values, strict=True))
                   for values in itertools.product(*(grid[n] for n in names))]  # fmt: skip
    for point in points:
        given = " ".join(f"--grid {name}={value}" for name, value in point.items())
        generate.checked_config(lambda point=point: base.replace(**point).check(), f"{given}: ")


def _finished(results: str) -> set[str]:
    """The configuration keys of the runs ``results`` holds."""
    from jfed.report.rows import scan_rows

    return {row["config_key"] for _, row in scan_rows(results).rows}


def run(args: argparse.Namespace, sweep: tuple | None = None) -> None:
    if args.command == "plot":
        _plot(args)
        return
    declared, epsilons, grid, base = sweep or checked(args)
    from jfed.methods import build_experiment
    from jfed.sweep import configurations, run_sweep, tuned_table
    from jfed.sweep.lock import folder_lock
    from jfed.sweep.tuning import sweep_until_interior

    runner = build_experiment(base)
    metrics = declared.metrics_of(base, runner)
    results = os.path.join(args.out, "runs.jsonl")
    calls = []

    def run_grid(values: dict) -> list[dict]:
        calls.append(values)
        return run_sweep(
            runner, configurations(base, epsilons, args.seeds, values), results,
            resume=args.resume or len(calls) > 1, slice_size=args.slice_size,
            plan=plan_of(args), progress=show_progress(args),
            share_noise=not args.no_shared_noise, swept=tuple(sorted(grid)),
        )  # fmt: skip

    def tune(rows: list[dict]) -> list[dict]:
        return tuned_table(
            rows, tuple(sorted(grid)), args.tune, metrics.selection, metrics.report,
            metrics.maximize, args.statistic,
        )  # fmt: skip

    from jfed.engine.distributed import is_primary

    primary = is_primary()  # in a multi-process run, process 0 writes and prints
    with folder_lock(args.out) if primary else contextlib.nullcontext():
        if primary:  # temporaries a killed writer left (a resume must not keep them)
            remove_stale_temporaries(args.out)
        done = _finished(results) if args.resume and primary else None
        rows, _, notes = sweep_until_interior(
            run_grid,
            grid,
            tune,
            within_range(declared.config),
            # a design grid (nothing chosen, e.g. estimation's sites) is never extended
            max_extensions=args.extend_edges if metrics.selection is not None else 0,
        )
        if not primary:
            return
        if done is not None and _finished(results) == done:
            print(f"jfed: note: --resume: every run of this sweep is already in {results} "
                  f"({len(done)} runs): nothing left to run; the tables and plots are "
                  "redrawn", file=sys.stderr)  # fmt: skip
        for note in notes if metrics.selection is not None else ():
            print(f"jfed: note: {note}", file=sys.stderr)
        # the tables are of every run in the folder: a resume with other eps, seeds or grid
        # values adds to the runs an earlier invocation wrote
        rows = reported_rows(results)
        _warn_uncertified(rows)
        _print_table(finish(rows, args.out, args.tune, args.statistic)[0], tuple(sorted(grid)))
