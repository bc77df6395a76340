"""The modulated-learning study: five tasks, iterative (T = 10) vs one-shot vs DP-SGD FedAvg over
an eps grid, hyper-parameters tuned on the validation split and held fixed across eps (the paper's
rule), several seeds. Built on ``jfed.sweep`` (resumable: re-run with the same --out to continue).

Tuning scores a setting by the MEDIAN validation R^2 over eps and seeds (the one-shot estimator's
R^2 is heavy-tailed), and a choice on the edge of its grid extends the grid past it and sweeps
again (up to 3 times; :func:`jfed.sweep.tuning.sweep_until_interior`); the notes say what grew
and what stays on an edge. Every method also runs with the seed's own tuned settings (its
table of c, lambda, G and step per task): the "paper's settings" arm.

    python sims/modulated_study.py --out results/modulated_study [--seeds 5] [--grid wide]

``--grid paper`` (default) tunes what the paper tunes (step scale, ridge; DP-SGD's clip and
step) with the map held at alpha 1, beta 0.5, omega 1, C 3. ``--grid wide`` also tunes the
modulated map's feature clip C in {1, 2, 3} and modulation amplitude beta in {0, 0.5} (beta = 0
is the unmodulated Gaussian map), still one setting for all eps.

Writes ``<task>/<method>.jsonl`` (every run), ``tuned.csv`` (the chosen settings and test R^2 per
(task, method, eps)), ``modulated_study.png/.pdf`` (5 panels: test R^2 vs eps with a
one-standard-error band and the non-private OLS line) and prints the table.
"""

from __future__ import annotations

import argparse
import csv
import os

import matplotlib
from modulated_eps_grid import PAPER_TUNED  # sims/ is on the path when a script runs

from jfed.cli.checks import within_range
from jfed.data import available_datasets, load_regression
from jfed.methods import DPSGD, ModulatedIterative, ModulatedOneShot, build_experiment
from jfed.sweep import configurations, run_sweep, tuned_table
from jfed.sweep.tuning import sweep_until_interior

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

EPSILONS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
METHODS = {
    "modulated-iterative": {"step_scale": [0.5, 0.8, 1.0]},
    # lambda = ridge_scale * (sigma / alpha)^2 * 2 sqrt(d / n), the default noise-scaled ridge
    "modulated-one-shot": {"ridge_scale": [0.3, 1.0, 3.0]},
    "dpsgd": {"gradient_clip": [1.0, 2.0, 3.0], "learning_rate": [0.05, 0.1, 0.2]},
}
CONFIGS = {
    "modulated-iterative": ModulatedIterative,
    "modulated-one-shot": ModulatedOneShot,
    "dpsgd": DPSGD,
}
MAP_GRID = {"feature_clip": [1.0, 2.0, 3.0], "beta": [0.0, 0.5]}
# the seed's tuned values per task (iterative c, one-shot lambda, DP-SGD G, step)
PAPER_SETTINGS = PAPER_TUNED
PAPER_ARM = " (paper's settings)"
MAX_EXTENSIONS = 3


def paper_settings(task: str, method: str) -> dict[str, list[float]]:
    """The one-point grid of the seed's tuned values for ``method`` on ``task``."""
    step_scale, ridge, clip, learning_rate = PAPER_SETTINGS[task]
    return {
        "modulated-iterative": {"step_scale": [step_scale]},
        "modulated-one-shot": {"ridge": [ridge]},
        "dpsgd": {"gradient_clip": [clip], "learning_rate": [learning_rate]},
    }[method]


GRIDS = {
    "paper": METHODS,
    "wide": {m: {**g, **MAP_GRID} if m.startswith("modulated") else g for m, g in METHODS.items()},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/modulated_study")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--tasks", default=",".join(available_datasets()))
    parser.add_argument("--grid", choices=sorted(GRIDS), default="paper")
    args = parser.parse_args()
    methods = GRIDS[args.grid]
    table, notes = [], []
    tasks = args.tasks.split(",")
    for name in tasks:
        task = load_regression(name)
        os.makedirs(os.path.join(args.out, name), exist_ok=True)
        for method, grid in methods.items():
            for arm, arm_grid in (
                (method, grid),
                (method + PAPER_ARM, paper_settings(name, method)),
            ):
                _, tuned, arm_notes = run_arm(task, name, method, arm, arm_grid, args)
                table += tuned
                notes += [f"{name}: {note}" for note in arm_notes]
    fields = list(dict.fromkeys(k for row in table for k in row))
    with open(os.path.join(args.out, "tuned.csv"), "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fields)
        writer.writeheader()
        writer.writerows(table)
    plot(table, tasks, os.path.join(args.out, "modulated_study"))
    print_table(table, tasks, methods)
    print("\ngrid edges:" if notes else "\nno choice on a grid edge")
    for note in notes:
        print(f"  {note}")


def run_arm(task, name: str, method: str, arm: str, grid: dict, args) -> tuple:
    """Sweep one arm (a method with a grid) on one task, extending the grid past edge choices;
    its rows and tuned table are labelled with the arm's name."""
    base = CONFIGS[method](dataset=name)
    runner = build_experiment(base, task=task)
    path = os.path.join(args.out, name, arm.replace(" ", "_").replace("'", "") + ".jsonl")
    hyper = tuple(sorted(grid))

    def run_grid(grid: dict) -> list[dict]:
        rows = run_sweep(
            runner, configurations(base, EPSILONS, args.seeds, grid), path,
            resume=os.path.exists(path), swept=hyper,
        )  # fmt: skip
        for row in rows:
            row["method"] = arm
        return rows

    def tune(rows: list[dict]) -> list[dict]:
        return tuned_table(rows, hyper, rule="fixed")

    allowed = within_range(type(base))
    return sweep_until_interior(run_grid, grid, tune, allowed, MAX_EXTENSIONS)


def plot(table: list[dict], tasks: list[str], prefix: str) -> None:
    figure, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.6), squeeze=False)
    for axis, name in zip(axes[0], tasks, strict=True):
        rows = [r for r in table if r["dataset"] == name]
        for index, method in enumerate(METHODS):
            for arm, style in ((method, "-"), (method + PAPER_ARM, ":")):
                mine = sorted((r for r in rows if r["method"] == arm), key=lambda r: r["epsilon"])
                eps = np.array([r["epsilon"] for r in mine])
                mean = np.array([r["test_r2_mean"] for r in mine])
                se = np.array([r["test_r2_se"] for r in mine])
                axis.plot(eps, mean, marker="o" if style == "-" else ".", linestyle=style,
                          color=f"C{index}", label=arm)  # fmt: skip
                if style == "-":
                    axis.fill_between(eps, mean - se, mean + se, color=f"C{index}", alpha=0.2)
        axis.axhline(rows[0]["reference"], color="black", linestyle="--", label="OLS")
        axis.set_xscale("log")
        axis.set_ylim(-0.5, 1.05)
        axis.set_xlabel("eps (local DP; delta 1e-5; zCDP)")
        axis.set_title(name)
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel("test R^2 (band: +-1 s.e. over seeds)")
    axes[0][0].legend(fontsize=6)
    figure.tight_layout()
    for extension in ("png", "pdf"):
        figure.savefig(f"{prefix}.{extension}", dpi=110)


def print_table(table: list[dict], tasks: list[str], methods: dict) -> None:
    print(
        "test R^2, mean (se) over seeds; eps: local (eps, delta = 1e-5)-DP, zCDP accountant "
        "(modulated: x_i protected, y_i public; DP-SGD: (x_i, y_i)); settings chosen on "
        "validation by the median over eps and seeds, fixed across eps"
    )
    print(f"{'task':16s} {'method':38s} " + " ".join(f"{e:>13g}" for e in EPSILONS))
    for name in tasks:
        for method in METHODS:
            for arm in (method, method + PAPER_ARM):
                rows = sorted(
                    (r for r in table if r["dataset"] == name and r["method"] == arm),
                    key=lambda r: r["epsilon"],
                )
                cells = [f"{r['test_r2_mean']:.3f}({r['test_r2_se']:.3f})" for r in rows]
                names = set(methods[method]) | set(paper_settings(name, method))
                chosen = {k: rows[0][k] for k in sorted(names) if k in rows[0]}
                print(
                    f"{name:16s} {arm:38s} " + " ".join(f"{c:>13s}" for c in cells) + f"  {chosen}"
                )
        print(f"{name:16s} {'OLS':20s} {rows[0]['reference']:.3f}")


if __name__ == "__main__":
    main()
