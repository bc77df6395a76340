"""How utility moves with the population size: procedural clients, n = 10^4 .. 10^7, at eps 1 and
10, for the three regression methods, the question a user planning a deployment asks.

    python sims/population_study.py --out results/population_study [--sizes 4,5,6,7] [--seeds 3]

Clients are procedural (``x ~ N(0, I_10)``, ``y = x^T theta* + 0.5 e``, generated on the device
from their ids; validation and test sets of 10,000 fresh records; OLS reaches R^2 0.8 = the Bayes
rate 1 / 1.25). Privacy: local (eps, delta = 1e-5)-DP, zCDP; the modulated methods protect x_i (y_i
public), DP-SGD the whole record. Settings are fixed, not tuned: the modulated map at its
defaults (alpha 1, beta 0.5, omega 1, k 1) with the feature clip C at the 95% quantile of
``||x||`` (4.28), the iterative estimator with c = 0.5 (T = 10), the one-shot estimator with its
default noise-scaled ridge and with a fixed lambda = 1 (raw, and with S_hat's PSD part), and
DP-SGD FedAvg with G = 1, step 0.2 (T = 10); none of them tuned. Every (run, n) is one sweep
(``jfed.sweep``), all eps and seeds in one program.

Writes ``population.csv`` (one row per (method, n, eps): test R^2 mean and standard error over
seeds, seconds per run) and ``population_study.png`` / ``.pdf`` (test R^2 against n, one panel
per eps), and prints the table.
"""

from __future__ import annotations

import argparse
import csv
import os

import matplotlib
import numpy as np

from jfed.methods import DPSGD, ModulatedIterative, ModulatedOneShot, build_experiment
from jfed.methods.regression import load_task, ols_reference
from jfed.sweep import configurations, run_sweep

matplotlib.use("Agg")
import matplotlib.pyplot as plt

EPSILONS = (1.0, 10.0)
DIM = 10
# run name -> (method configuration, fixed settings); the name is also the results file's stem
RUNS = {
    "modulated-iterative": (ModulatedIterative, {"step_scale": 0.5}),
    "modulated-one-shot-noise-scaled": (ModulatedOneShot, {"ridge_scale": 1.0}),
    "modulated-one-shot": (ModulatedOneShot, {"ridge": 1.0}),
    "dpsgd": (DPSGD, {"gradient_clip": 1.0, "learning_rate": 0.2}),
}
# label -> (run, the metric of its rows)
CURVES = {
    "modulated iterative (T = 10)": ("modulated-iterative", "test_r2"),
    "one-shot, noise-scaled ridge (default)": ("modulated-one-shot-noise-scaled", "test_r2"),
    "one-shot, fixed lambda = 1": ("modulated-one-shot", "test_r2"),
    "one-shot, fixed lambda = 1, PSD part of S_hat": ("modulated-one-shot", "test_r2_psd"),
    "DP-SGD FedAvg (T = 10)": ("dpsgd", "test_r2"),
}


def run(sizes: list[int], seeds: int, out: str) -> list[dict]:
    """Every (method, n) sweep; returns one row per (curve, n, eps)."""
    results = []
    for n in sizes:
        task = load_task(ModulatedOneShot(synthetic=True, clients=n, dim=DIM))
        ols = ols_reference(task)
        reference = None
        for run_name, (method, settings) in RUNS.items():
            base = method(synthetic=True, clients=n, dim=DIM, **settings)
            path = os.path.join(out, f"{run_name}-n{n}.jsonl")
            rows = run_sweep(
                build_experiment(base, task=task, reference=ols),
                configurations(base, EPSILONS, seeds), path, resume=os.path.exists(path),
            )  # fmt: skip
            reference = rows[0]["ols_r2"]
            for label, (curve_run, metric) in CURVES.items():
                if curve_run != run_name:
                    continue
                for eps in EPSILONS:
                    values = np.array([r[metric] for r in rows if r["epsilon"] == eps])
                    results.append(
                        dict(
                            curve=label, n_clients=n, epsilon=eps,
                            test_r2_mean=float(values.mean()),
                            test_r2_se=float(values.std(ddof=1) / np.sqrt(len(values))),
                            seeds=len(values), ols_r2=reference,
                            seconds_per_run=float(np.mean([r["run_seconds"] for r in rows])),
                            notion="local (eps, delta=1e-5)-DP, zCDP",
                        )
                    )  # fmt: skip
    return results


def plot(results: list[dict], prefix: str) -> None:
    figure, axes = plt.subplots(1, len(EPSILONS), figsize=(5.2 * len(EPSILONS), 4.0), sharey=True)
    for axis, eps in zip(axes, EPSILONS, strict=True):
        for index, label in enumerate(CURVES):
            rows = sorted(
                (r for r in results if r["curve"] == label and r["epsilon"] == eps),
                key=lambda r: r["n_clients"],
            )
            n = np.array([r["n_clients"] for r in rows])
            mean = np.array([r["test_r2_mean"] for r in rows])
            se = np.array([r["test_r2_se"] for r in rows])
            axis.plot(n, mean, marker="o", color=f"C{index}", label=label)
            axis.fill_between(n, mean - se, mean + se, color=f"C{index}", alpha=0.2)
        axis.axhline(results[0]["ols_r2"], color="black", linestyle="--", label="non-private OLS")
        axis.set_xscale("log")
        axis.set_ylim(-1.0, 1.0)
        axis.set_xlabel("clients n (procedural, d = 10)")
        axis.set_title(f"eps = {eps:g} (local DP, delta 1e-5, zCDP)", fontsize=9)
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("test R^2 (band: +-1 s.e. over seeds)")
    axes[0].legend(fontsize=7, loc="lower right")
    figure.tight_layout()
    for extension in ("png", "pdf"):
        figure.savefig(f"{prefix}.{extension}", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/population_study")
    parser.add_argument("--sizes", default="4,5,6,7", help="log10 of the population sizes")
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    sizes = [10 ** int(k) for k in args.sizes.split(",")]
    results = run(sizes, args.seeds, args.out)
    with open(os.path.join(args.out, "population.csv"), "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, list(results[0]))
        writer.writeheader()
        writer.writerows(results)
    plot(results, os.path.join(args.out, "population_study"))
    print("test R^2, mean (se) over seeds; local (eps, delta = 1e-5)-DP, zCDP; OLS "
          f"{results[0]['ols_r2']:.3f}")  # fmt: skip
    print(f"{'method':40s} {'eps':>4s} " + " ".join(f"{n:>14,d}" for n in sizes))
    for label in CURVES:
        for eps in EPSILONS:
            rows = sorted(
                (r for r in results if r["curve"] == label and r["epsilon"] == eps),
                key=lambda r: r["n_clients"],
            )
            cells = [f"{r['test_r2_mean']:.3f}({r['test_r2_se']:.3f})" for r in rows]
            print(f"{label:40s} {eps:>4g} " + " ".join(f"{c:>14s}" for c in cells))


if __name__ == "__main__":
    main()
