"""The seed-004 experiments on data that ships offline: ISRL-DP Noisy MB-SGD vs ISRL-DP Local SGD
vs their non-private versions, over eps, with the step size tuned per (algorithm, eps).

    python sims/silo_experiments.py --out results/silo_experiments [--repeats 3]
        [--experiments fair-sorted digits-bylabel] [--noise discrete|float]

Experiments (docs/specs/silo_sgd.md): logistic regression on ``digits-evenodd`` (25 silos, one
(even, odd) digit pair each, p = 0), linear regression on ``fair-sorted`` (10 silos by sorted
target), softmax regression on ``digits-bylabel`` (10 silos, one per label). R = 25, K = 10,
eps in {0.75, 1.5, 3, 6, 12, 18}, delta = 1 / n_min^2, clip L = 1, radius 10. Built on
``jfed.sweep`` (resumable: re-run with the same --out to continue after an interruption): for
every (experiment, algorithm) the grid eps x 10 step sizes x repeats runs in one compiled program;
per eps the step with the lowest median training loss is chosen (as the seed does, with a median
over repeats) and its test metric reported; a step on the edge of the grid extends it (up to 3
times) and the notes say so. Noisy MB-SGD is run with the exact calibration (PLD,
Poisson sampling) and with the seed's theorem formula (sampling with replacement; its eps is the
formula's claim, not certified); ISRL-DP Local SGD with the exact calibration (PLD over its K R
Poisson-sampled local steps), so the two private methods are compared at equal certified eps.
The private arms release with ``--noise`` (discrete: exact discrete Gaussian noise on an integer
grid, the methods' default; float: float32 Gaussian noise, what ``sims/reference/`` was first
computed with); ``--experiments`` runs some of the three.

Writes ``<dataset>/<algorithm>.jsonl`` (every run), ``results.csv`` (one row per (dataset,
algorithm, eps)) and ``silo_experiments.png`` / ``.pdf`` (test metric vs eps, one panel per
experiment), and prints the table.
"""

from __future__ import annotations

import argparse
import csv
import math
import os

import matplotlib
import numpy as np

from jfed.data.silos import load_silos
from jfed.methods import MBSGD, FedAvg, LocalSGD, NoisyMBSGD, build_experiment
from jfed.sweep import configurations, run_sweep, tuned_table
from jfed.sweep.tuning import sweep_until_interior

matplotlib.use("Agg")
import matplotlib.pyplot as plt

EPSILONS = (0.75, 1.5, 3.0, 6.0, 12.0, 18.0)
EXPERIMENTS = (("digits-evenodd", None), ("fair-sorted", 10), ("digits-bylabel", None))
R, K, CLIP, RADIUS = 25, 10, 1.0, 10.0
MB_STEPS = tuple(float(s) for s in np.exp(np.linspace(-6, 4, 10)))
LOCAL_STEPS = tuple(float(s) for s in np.exp(np.linspace(-8, 2, 10)))
ALGORITHMS = {
    # label: (sweep algorithm, calibration (exact: Poisson sampling), private, step grid)
    "noisy-mbsgd (exact)": ("noisy-mbsgd", "exact", True, MB_STEPS),
    "noisy-mbsgd (seed theorem)": ("noisy-mbsgd", "theorem", True, MB_STEPS),
    "isrl-dp local-sgd": ("local-sgd", "exact", True, LOCAL_STEPS),
    "mbsgd (non-private)": ("mbsgd", "exact", False, MB_STEPS),
    "local-sgd (non-private)": ("fedavg", "exact", False, LOCAL_STEPS),
}
CONFIGS = {"noisy-mbsgd": NoisyMBSGD, "local-sgd": LocalSGD, "mbsgd": MBSGD, "fedavg": FedAvg}


def run_experiment(
    dataset: str, n_silos: int | None, task, label: str, out: str, repeats: int,
    noise: str = "discrete",
) -> list[dict]:  # fmt: skip
    """The tuned rows (one per eps) of one algorithm on one experiment (its private releases
    with ``noise``)."""
    name, calibration, private, steps = ALGORITHMS[label]
    fields = dict(dataset=dataset, silos=n_silos, batch=K, rounds=R, gradient_clip=CLIP,
                  radius=RADIUS)  # fmt: skip
    if private:
        fields["calibration"] = calibration
        fields["noise"] = noise
    base = CONFIGS[name](**fields)
    adapter = build_experiment(base, task=task)
    # the non-private runs have no eps: they are reported as eps = inf
    epsilons = EPSILONS if private else None
    path = os.path.join(out, dataset, label.replace(" ", "_").replace("(", "").replace(")", "")
                        + ".jsonl")  # fmt: skip
    metric = adapter.report_metric

    def run_grid(grid: dict) -> list[dict]:
        rows = run_sweep(
            adapter, configurations(base, epsilons, repeats, grid), path,
            resume=os.path.exists(path), swept=("step_size",),
        )  # fmt: skip
        for row in rows:
            row["method"] = label
        return rows

    def tune(rows: list[dict]) -> list[dict]:
        return tuned_table(rows, ("step_size",), "per-eps", adapter.selection_metric, metric, False)

    rows, table, notes = sweep_until_interior(run_grid, {"step_size": list(steps)}, tune)
    for note in notes:
        print(f"{dataset}: {note}")
    train_risk = tuned_table(
        rows, ("step_size",), "per-eps", adapter.selection_metric, adapter.selection_metric, False
    )
    results = []
    for tuned, risk in zip(table, train_risk, strict=True):
        results.append(
            dict(
                dataset=dataset,
                algorithm=label,
                epsilon=tuned["epsilon"] if private else math.inf,
                delta=tuned["delta"],
                accountant=tuned["accountant"],
                step=tuned["step_size"],
                metric=metric,
                mean=tuned[f"{metric}_mean"],
                se=tuned[f"{metric}_se"],
                excess_train_risk=risk[f"{adapter.selection_metric}_mean"],
                repeats=tuned["seeds"],
                choice_rule=tuned["choice_rule"],
            )
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/silo_experiments")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--experiments", nargs="+", choices=[d for d, _ in EXPERIMENTS],
                        default=[d for d, _ in EXPERIMENTS])  # fmt: skip
    parser.add_argument("--noise", choices=("discrete", "float"), default="discrete")
    args = parser.parse_args()
    experiments = [(d, n) for d, n in EXPERIMENTS if d in args.experiments]
    results = []
    for dataset, n_silos in experiments:
        task = load_silos(dataset, n_silos=n_silos)
        os.makedirs(os.path.join(args.out, dataset), exist_ok=True)
        for label in ALGORITHMS:
            results += run_experiment(dataset, n_silos, task, label, args.out, args.repeats,
                                      args.noise)  # fmt: skip
    with open(os.path.join(args.out, "results.csv"), "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, list(results[0]))
        writer.writeheader()
        writer.writerows(results)
    plot(results, args.out, experiments)
    print_table(results, experiments)


def plot(results: list[dict], out: str, experiments=EXPERIMENTS) -> None:
    figure, axes = plt.subplots(1, len(experiments), figsize=(5 * len(experiments), 4),
                                squeeze=False)  # fmt: skip
    for axis, (dataset, _) in zip(axes[0], experiments, strict=True):
        rows = [r for r in results if r["dataset"] == dataset]
        for index, label in enumerate(ALGORITHMS):
            mine = [r for r in rows if r["algorithm"] == label]
            if np.isinf(mine[0]["epsilon"]):
                axis.axhline(mine[0]["mean"], color=f"C{index}", linestyle="--", label=label)
                continue
            eps = [r["epsilon"] for r in mine]
            mean = np.array([r["mean"] for r in mine])
            se = np.array([r["se"] for r in mine])
            axis.plot(eps, mean, marker="o", color=f"C{index}", label=label)
            axis.fill_between(eps, mean - se, mean + se, color=f"C{index}", alpha=0.2)
        axis.set_xscale("log")
        axis.set_xlabel("eps (ISRL-DP per record of a silo; PLD, replace-one)")
        axis.set_ylabel(rows[0]["metric"].replace("_", " "))
        axis.set_title(dataset)
        axis.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    figure.tight_layout()
    for extension in ("png", "pdf"):
        figure.savefig(os.path.join(out, f"silo_experiments.{extension}"), dpi=110)


def print_table(results: list[dict], experiments=EXPERIMENTS) -> None:
    print(
        "test metric, mean (se) over repeats; eps: ISRL-DP per record of a silo (replace-one), "
        "certified by PLD with Poisson sampling for the exact arms; the seed theorem arm's eps "
        "is the formula's claim, not certified"
    )
    print(f"{'dataset':16s} {'algorithm':28s} " + " ".join(f"{e:>12g}" for e in EPSILONS))
    for dataset, _ in experiments:
        for label in ALGORITHMS:
            rows = [r for r in results if r["dataset"] == dataset and r["algorithm"] == label]
            cells = [f"{r['mean']:.3f}({r['se']:.3f})" for r in rows]
            if len(cells) == 1:
                cells = cells * len(EPSILONS)
            print(f"{dataset:16s} {label:28s} " + " ".join(f"{c:>12s}" for c in cells))


if __name__ == "__main__":
    main()
