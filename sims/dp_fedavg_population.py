"""DP-FedAvg: the cost of user-level privacy as the population grows, at a fixed cohort size.

    python sims/dp_fedavg_population.py --out results/dp_fedavg_population [--quick]

For every population n (default 10^3, 10^4, 10^5, 10^6 procedural Synthetic(1, 1) clients with
one shared labelling model, up to 64 records each), DP-FedAvg runs R rounds on Poisson cohorts
of expected size K = 100 (rate q = K / n) at every eps of the grid and every seed: ONE sweep, one
compiled program per population (``jfed.run_grid``; ``runs.jsonl`` per population under
``--out``, resumable). delta = n^-1.1 (the library's default), add-or-remove adjacency of one
client's whole data, the library's default noise (the exact discrete Gaussian on an integer
grid, certified by the discrete RDP accountant) or ``--noise float`` (the float32 Gaussian,
PLD: the ideal real-valued mechanism, floating-point sampling not modelled). Beside it,
non-private FedAvg on the same cohorts (``fedavg-sampled``) and the same seeds.

Prints test accuracy (held-out clients), mean and standard deviation over seeds, the noise
multiplier z each (n, eps) was calibrated to and the noise std on the averaged update
(z C / K), and writes ``population.png`` (accuracy against eps, a line per population, dotted
levels for the non-private baselines) and ``population.csv``.

What to expect (McMahan et al. 2018): at a fixed cohort the sampling rate q = K / n falls as n
grows, amplification by sampling lowers the noise multiplier a target eps needs, and the noise on
the average (z C / K) falls with it: the accuracy lost to privacy shrinks as the population
grows.
"""

from __future__ import annotations

import argparse
import csv
import os

import matplotlib
import numpy as np

import jfed
from jfed.methods import DPFedAvg, FedAvgSampled
from jfed.methods.declared.dp_fedavg import DP_FEDAVG_ACCOUNTANTS, NOISES

matplotlib.use("Agg")
import matplotlib.pyplot as plt

POPULATIONS = (10**3, 10**4, 10**5, 10**6)
EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
SETTING = dict(rounds=100, cohort_size=100, update_clip=1.0, client_learning_rate=0.1, batch=10)
QUICK = dict(populations=(10**3, 10**5), epsilons=(1.0, 8.0), seeds=2, rounds=30)


def atomic_csv(path: str, rows: list[dict]) -> None:
    temporary = f"{path}.tmp"
    with open(temporary, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    os.replace(temporary, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/dp_fedavg_population")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="two populations, two eps, 30 rounds")
    parser.add_argument("--noise", choices=NOISES, default=None,
                        help="DP-FedAvg's --noise (default: the library's, discrete)")  # fmt: skip
    parser.add_argument("--accountant", choices=DP_FEDAVG_ACCOUNTANTS, default=None,
                        help="DP-FedAvg's --accountant (default: the noise's own; pld with "
                        "--noise discrete: through the coupled continuous Gaussian)")  # fmt: skip
    args = parser.parse_args()
    populations, epsilons, seeds, setting = POPULATIONS, EPSILONS, args.seeds, dict(SETTING)
    if args.noise is not None:
        setting["noise"] = args.noise
    if args.accountant is not None:
        setting["accountant"] = args.accountant
    if args.quick:
        populations, epsilons, seeds = QUICK["populations"], QUICK["epsilons"], QUICK["seeds"]
        setting["rounds"] = QUICK["rounds"]
    os.makedirs(args.out, exist_ok=True)
    table, statement = [], ""
    for n in populations:
        folder = os.path.join(args.out, f"n{n}")
        resume = os.path.exists(os.path.join(folder, "runs.jsonl"))
        private = jfed.run_grid(DPFedAvg(clients=n, **setting), list(epsilons), seeds,
                                out=folder, resume=resume)  # fmt: skip
        baseline_folder = os.path.join(args.out, f"n{n}-baseline")
        baseline_setting = {k: v for k, v in setting.items()
                            if k not in ("update_clip", "noise", "accountant")}  # fmt: skip
        baseline = jfed.run_grid(
            FedAvgSampled(clients=n, **baseline_setting), None, seeds,
            out=baseline_folder, resume=os.path.exists(os.path.join(baseline_folder, "runs.jsonl")),
        )  # fmt: skip
        accuracy = np.array([r["test_accuracy"] for r in baseline])
        table.append({"n": n, "epsilon": float("inf"), "noise_multiplier": 0.0,
                      "noise_std_of_average": 0.0, "test_accuracy": accuracy.mean(),
                      "sd": accuracy.std(ddof=1), "seeds": len(accuracy),
                      "clipped_fraction": 0.0})  # fmt: skip
        for eps in epsilons:
            runs = [r for r in private if r["epsilon"] == eps]
            statement = f"{runs[0]['accountant']} accountant, {runs[0]['mechanism_model']}"
            accuracy = np.array([r["test_accuracy"] for r in runs])
            z = runs[0]["noise_multiplier"]
            table.append({
                "n": n, "epsilon": eps, "noise_multiplier": z,
                "noise_std_of_average": z * setting["update_clip"] / setting["cohort_size"],
                "test_accuracy": accuracy.mean(), "sd": accuracy.std(ddof=1),
                "seeds": len(accuracy),
                "clipped_fraction": float(np.mean([r["clipped_fraction"] for r in runs])),
            })  # fmt: skip
    atomic_csv(os.path.join(args.out, "population.csv"), table)
    print(f"DP-FedAvg on Synthetic(1,1) (shared model), Poisson cohorts of K = "
          f"{setting['cohort_size']}, R = {setting['rounds']}, C = {setting['update_clip']}, "
          f"delta = n^-1.1, add-or-remove one client, {statement}; test accuracy on held-out "
          f"clients, mean (sd) over {seeds} seeds")  # fmt: skip
    print(f"{'n':>9} {'eps':>6} {'z':>8} {'zC/K':>9} {'accuracy':>18} {'clipped':>8}")
    for row in table:
        eps = "inf" if np.isinf(row["epsilon"]) else f"{row['epsilon']:g}"
        print(f"{row['n']:>9} {eps:>6} {row['noise_multiplier']:>8.3f} "
              f"{row['noise_std_of_average']:>9.5f} {row['test_accuracy']:>9.4f} ({row['sd']:.4f}) "
              f"{row['clipped_fraction']:>8.2f}")  # fmt: skip
    figure, (axis, gap_axis) = plt.subplots(1, 2, figsize=(10.0, 4.0))
    for i, n in enumerate(populations):
        rows = [r for r in table if r["n"] == n and np.isfinite(r["epsilon"])]
        axis.errorbar([r["epsilon"] for r in rows], [r["test_accuracy"] for r in rows],
                      yerr=[r["sd"] for r in rows], marker="o", capsize=3, color=f"C{i}",
                      label=f"n = {n:.0e}")  # fmt: skip
        level = next(r for r in table if r["n"] == n and np.isinf(r["epsilon"]))
        axis.axhline(level["test_accuracy"], color=f"C{i}", linestyle=":", linewidth=1)
    axis.plot([], [], "k:", linewidth=1, label="non-private FedAvg (same n)")
    axis.set_xscale("log")
    axis.set_xticks(list(epsilons), [f"{e:g}" for e in epsilons])
    axis.minorticks_off()
    axis.set_xlabel(f"user-level eps (delta = n^-1.1, {statement.split(',')[0]})")
    axis.set_ylabel("test accuracy (held-out clients)")
    axis.set_title(f"DP-FedAvg, Poisson cohorts of K = {setting['cohort_size']}, "
                   f"R = {setting['rounds']}", fontsize=9)  # fmt: skip
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)
    for j, eps in enumerate(epsilons):  # the accuracy privacy costs, against the population
        gaps = []
        for n in populations:
            level = next(r for r in table if r["n"] == n and np.isinf(r["epsilon"]))
            private = next(r for r in table if r["n"] == n and r["epsilon"] == eps)
            gaps.append(level["test_accuracy"] - private["test_accuracy"])
        gap_axis.plot(populations, gaps, marker="o", color=f"C{j}", label=f"eps = {eps:g}")
    gap_axis.axhline(0.0, color="k", linewidth=0.8)
    gap_axis.set_xscale("log")
    gap_axis.set_xlabel("population n (cohort K fixed, so q = K / n)")
    gap_axis.set_ylabel("non-private minus private accuracy")
    gap_axis.set_title("the cost of user-level privacy, by population", fontsize=9)
    gap_axis.grid(alpha=0.3)
    gap_axis.legend(fontsize=7)
    figure.tight_layout()
    temporary = os.path.join(args.out, "population.tmp.png")
    figure.savefig(temporary, dpi=110)
    os.replace(temporary, os.path.join(args.out, "population.png"))


if __name__ == "__main__":
    main()
