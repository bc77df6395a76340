"""Correlated noise without amplification (DP-FTRL: tree, BLT) against independent noise at the same
user-level eps; SCAFFOLD against FedAvg on very non-iid digits at the same eps.

    python sims/dp_ftrl_study.py --out results/dp_ftrl_study [--quick]

Part 1 (the FTRL family). Synthetic(1, 1) clients with one shared labelling model (N = 2,000,
up to 64 records each), a cyclic schedule of b = N / K = 20 groups of K = 100 (every client
every 20 rounds, R = 100 rounds: k = 5 participations), one local epoch, update clip C = 1,
server SGD with momentum 0.9 on the released increments (the papers' DP-FTRLM), step 0.3. No
amplification by sampling is assumed for any of the three:

- ``independent``: ``dp-ftrl --noise-strategy independent --noise float``, DP-FedAvg under the
  schedule: fresh noise every round, its sensitivity sqrt(k) (the run is k participations'
  Gaussians);
- ``tree``: ``dp-ftrl --noise float``, tree aggregation restarted every pass of 20 rounds,
  Honaker's estimator: sensitivity sqrt(k (floor(log2 20) + 1)) = 5;
- ``blt``: ``blt-dp-ftrl``, jax-privacy's BLT optimized for (R, b, k) (at most 4 buffers).

Beside them, for context only, ``dp-fedavg`` on Poisson cohorts of the same expected size
(amplification by sampling assumed; the same eps, delta, N, R, clip and server momentum) and
non-private FedAvg (the same server momentum). Every run is user-level (eps, delta)-DP,
delta = N^-1.1, add-or-remove adjacency of one client's whole data, each certified by its
method's accountant (PLD for the FTRL family and for DP-SCAFFOLD's float noise; dp-fedavg's own
default, which its records name and the table prints). Printed: test accuracy on held-out
clients (mean, sd over seeds), the noise multiplier z, each mechanism's sensitivity and the
noise it adds: the std of one
coordinate of a round's noise increment on the released mean (averaged over the rounds) and of
the noise on the running sum of the releases after the last round (what the model carries).

Part 2 (SCAFFOLD). scikit-learn's digits split over N = 300 clients by Dirichlet(0.1) labels
(one or two labels a client), Poisson cohorts of K = 30, R = 100 rounds of 5 local epochs
(step 0.3, batches of 10): ``dp-scaffold --noise float`` (float32 Gaussian noise, PLD) against
``dp-fedavg --accountant discrete-rdp`` (the exact discrete Gaussian, discrete RDP) at the same
eps (C = 1 for both), and ``scaffold`` against
``fedavg-sampled`` without privacy. DP-SCAFFOLD's two releases (model update, control-variate
update, clip C_c) are accounted together; its C_c is chosen per eps from {0.05, 0.2, 1} by the
mean TRAINING accuracy over the seeds (that choice is not accounted for, as the paper's tuning
is not).

Outputs in ``--out``: ``runs.jsonl`` per sweep (resumable), ``dp_ftrl_study.csv`` (one row per
method and eps), ``dp_ftrl_study_table.txt`` (what is printed) and ``dp_ftrl_study.png``.

What to expect (Kairouz et al. 2021; Choquette-Choo et al. 2023; McKenna 2024): without
amplification, correlated noise beats independent noise at the same eps, and BLT beats the
tree; DP-FedAvg with amplification by sampling may beat them all at this population (the
papers' point is that sampling is often not what a deployment can guarantee). SCAFFOLD corrects
client drift on non-iid data (Karimireddy et al. 2020); under user-level DP its control
variates carry noise of their own, accumulated across rounds.
"""

from __future__ import annotations

import argparse
import csv
import os
import time

import matplotlib
import numpy as np

import jfed
from jfed.methods import declared

matplotlib.use("Agg")
import matplotlib.pyplot as plt

EPSILONS = (1.0, 2.0, 4.0, 8.0, 16.0)
SCAFFOLD_EPSILONS = (2.0, 4.0, 8.0, 16.0)
CONTROL_CLIPS = (0.05, 0.2, 1.0)
SYNTHETIC = dict(dataset="synthetic", clients=2000, rounds=100, cohort_size=100, batch=10,
                 client_learning_rate=0.1, server_learning_rate=0.3,
                 server_momentum=0.9)  # fmt: skip
FTRL = dict(SYNTHETIC, update_clip=1.0)
DIGITS = dict(dataset="digits-dirichlet", clients=300, dirichlet=0.1, rounds=100,
              cohort_size=30, batch=10, local_epochs=5, client_learning_rate=0.3)  # fmt: skip
QUICK = dict(epsilons=(2.0, 8.0), scaffold_epsilons=(4.0, 16.0), seeds=2, rounds=40)


def atomic_write(path: str, write) -> None:
    temporary = f"{path}.tmp"
    with open(temporary, "w", newline="", encoding="utf-8") as handle:
        write(handle)
    os.replace(temporary, path)


def sweep(out: str, name: str, config, epsilons, seeds: int, grid=None) -> list[dict]:
    folder = os.path.join(out, name)
    resume = os.path.exists(os.path.join(folder, "runs.jsonl"))
    start = time.perf_counter()
    rows = jfed.run_grid(config, epsilons, seeds, grid=grid, out=folder, resume=resume)
    print(f"  {name}: {len(rows)} runs, {time.perf_counter() - start:.0f} s", flush=True)
    return rows


def summary(part: str, method: str, rows: list[dict], epsilon: float, **extra) -> dict:
    accuracy = np.array([r["test_accuracy"] for r in rows])
    first = rows[0]
    return {
        "part": part, "method": method, "epsilon": epsilon, "seeds": len(rows),
        "test_accuracy": float(accuracy.mean()),
        "sd": float(accuracy.std(ddof=1)) if len(rows) > 1 else 0.0,
        "noise_multiplier": first.get("noise_multiplier") or 0.0,
        "accountant": first.get("accountant", ""),
        "sensitivity": first.get("sensitivity") or "",
        "mean_increment_noise_std": first.get("mean_increment_noise_std") or "",
        "prefix_noise_std_final": first.get("prefix_noise_std_final") or "",
        **extra,
    }  # fmt: skip


FEDAVG_ACCOUNTANT = "discrete-rdp"
"""dp-fedavg's accountant here: its exact noise's default accountant when the reference results
were made (the default since then, PLD through the coupled Gaussian, needs less noise)."""


def ftrl_part(out: str, epsilons, seeds: int, rounds: int) -> list[dict]:
    setting = dict(FTRL, rounds=rounds)
    # float noise, as the reference results ran (DP-FTRL's default became the integer grid
    # later: the same z to 1e-4, each node's noise inflated by sqrt(B) / L, other draws)
    runs = {
        "independent": sweep(
            out, "independent",
            declared.DPFTRL(**setting, noise_strategy="independent", noise="float"),
            epsilons, seeds,
        ),
        "tree": sweep(out, "tree", declared.DPFTRL(**setting, noise="float"), epsilons, seeds),
        "blt": sweep(out, "blt", declared.BltDPFTRL(**setting), epsilons, seeds),
        "dp-fedavg (Poisson, amplified)": sweep(
            out, "dp-fedavg",
            declared.DPFedAvg(**dict(SYNTHETIC, rounds=rounds), accountant=FEDAVG_ACCOUNTANT),
            epsilons, seeds,
        ),
    }  # fmt: skip
    table = []
    for method, rows in runs.items():
        for eps in epsilons:
            rows_at = [r for r in rows if r["epsilon"] == eps]
            extra = {}
            if method.startswith("dp-fedavg"):  # independent noise z C / K on the mean, sens 1
                per_round = (
                    rows_at[0]["noise_multiplier"] * FTRL["update_clip"] / FTRL["cohort_size"]
                )
                extra = {"sensitivity": 1.0, "mean_increment_noise_std": per_round,
                         "prefix_noise_std_final": per_round * rounds**0.5}  # fmt: skip
            table.append(summary("ftrl", method, rows_at, eps, **extra))
    plain = sweep(out, "fedavg", declared.FedAvgSampled(**dict(SYNTHETIC, rounds=rounds)), None,
                  seeds)  # fmt: skip
    table.append(summary("ftrl", "fedavg (non-private)", plain, float("inf")))
    return table


def scaffold_part(out: str, epsilons, seeds: int, rounds: int) -> list[dict]:
    setting = dict(DIGITS, rounds=rounds)
    digits_fedavg = declared.DPFedAvg(**setting, accountant=FEDAVG_ACCOUNTANT)
    fedavg = sweep(out, "digits-dp-fedavg", digits_fedavg, epsilons, seeds)
    # float noise, accounted by PLD: what the reference results ran (the grid became the
    # default later; it would move the numbers by its noise inflation and its RDP accountant)
    scaffold = sweep(out, "digits-dp-scaffold", declared.DPScaffold(**setting, noise="float"),
                     epsilons, seeds, grid={"control_clip": list(CONTROL_CLIPS)})  # fmt: skip
    table = []
    for eps in epsilons:
        table.append(summary("scaffold", "dp-fedavg", [r for r in fedavg if r["epsilon"] == eps],
                             eps))  # fmt: skip

        def train(clip: float, eps: float = eps) -> float:
            runs = [r for r in scaffold if r["epsilon"] == eps and r["control_clip"] == clip]
            return float(np.mean([r["train_accuracy"] for r in runs]))

        chosen = max(CONTROL_CLIPS, key=train)
        runs = [r for r in scaffold if r["epsilon"] == eps and r["control_clip"] == chosen]
        table.append(summary("scaffold", "dp-scaffold", runs, eps, control_clip=chosen))
    for method, config in (("fedavg (non-private)", declared.FedAvgSampled(**setting)),
                           ("scaffold (non-private)", declared.Scaffold(**setting))):  # fmt: skip
        rows = sweep(out, "digits-" + method.split()[0], config, None, seeds)
        table.append(summary("scaffold", method, rows, float("inf")))
    return table


def printed(table: list[dict], seeds: int, rounds: int) -> str:
    lines = [
        f"Part 1: DP-FTRL family on Synthetic(1,1), N = {FTRL['clients']}, cyclic schedule of "
        f"b = 20 groups of K = {FTRL['cohort_size']}, R = {rounds}; user-level (eps, delta)-DP, "
        "delta = N^-1.1, add-or-remove one client's whole data, each certified by the "
        "accountant shown; no amplification for the FTRL family; dp-fedavg assumes Poisson "
        "sampling (context). Test accuracy on held-out clients, mean (sd) over "
        f"{seeds} seeds; noise on the released mean (C = 1).",
        f"{'method':<32} {'eps':>5} {'accountant':>12} {'z':>7} {'sens':>6} {'noise/round':>11}"
        f" {'prefix noise':>12} {'accuracy':>16}",
    ]  # fmt: skip
    for part in ("ftrl", "scaffold"):
        if part == "scaffold":
            header = (f"{'method':<32} {'eps':>5} {'accountant':>12} {'z':>7} {'C_c':>6} "
                      f"{'accuracy':>16}")  # fmt: skip
            lines += ["", f"Part 2: SCAFFOLD against FedAvg, digits Dirichlet(0.1), N = "
                      f"{DIGITS['clients']}, Poisson cohorts of K = {DIGITS['cohort_size']}, "
                      f"R = {rounds}, 5 local epochs; user-level, delta = N^-1.1, each "
                      "certified by the accountant shown.", header]  # fmt: skip
        for row in (r for r in table if r["part"] == part):
            eps = "inf" if np.isinf(row["epsilon"]) else f"{row['epsilon']:g}"
            accuracy = f"{row['test_accuracy']:.4f} ({row['sd']:.4f})"
            if part == "ftrl":
                sens, noise, prefix = (row[k] for k in ("sensitivity", "mean_increment_noise_std",
                                                        "prefix_noise_std_final"))  # fmt: skip
                cells = [f"{v:>{w}.4g}" if v != "" else f"{'':>{w}}"
                         for v, w in ((sens, 6), (noise, 11), (prefix, 12))]  # fmt: skip
                lines.append(f"{row['method']:<32} {eps:>5} {row['accountant']:>12} "
                             f"{row['noise_multiplier']:>7.3f} {' '.join(cells)} "
                             f"{accuracy:>16}")  # fmt: skip
            else:
                clip = row.get("control_clip", "")
                clip = f"{clip:>6g}" if clip != "" else f"{'':>6}"
                lines.append(f"{row['method']:<32} {eps:>5} {row['accountant']:>12} "
                             f"{row['noise_multiplier']:>7.3f} {clip} {accuracy:>16}")  # fmt: skip
    return "\n".join(lines)


def figure(table: list[dict], path: str) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.0, 4.2))
    styles = {"independent": ("C0", "o"), "tree": ("C1", "s"), "blt": ("C2", "^"),
              "dp-fedavg (Poisson, amplified)": ("C7", "x"), "dp-fedavg": ("C0", "o"),
              "dp-scaffold": ("C3", "D")}  # fmt: skip
    for axis, part in ((left, "ftrl"), (right, "scaffold")):
        rows = [r for r in table if r["part"] == part]
        for method in dict.fromkeys(r["method"] for r in rows if np.isfinite(r["epsilon"])):
            points = [r for r in rows if r["method"] == method]
            color, marker = styles[method]
            dashed = "--" if "amplified" in method else "-"
            axis.errorbar([r["epsilon"] for r in points], [r["test_accuracy"] for r in points],
                          yerr=[r["sd"] for r in points], color=color, marker=marker,
                          linestyle=dashed, capsize=3, label=method)  # fmt: skip
        for i, row in enumerate(r for r in rows if np.isinf(r["epsilon"])):
            axis.axhline(row["test_accuracy"], color=f"C{4 + i}", linestyle=":", linewidth=1,
                         label=row["method"])  # fmt: skip
        axis.set_xscale("log")
        epsilons = sorted({r["epsilon"] for r in rows if np.isfinite(r["epsilon"])})
        axis.set_xticks(epsilons, [f"{e:g}" for e in epsilons])
        axis.minorticks_off()
        axis.set_xlabel("user-level eps (delta = N^-1.1, add-or-remove)")
        axis.set_ylabel("test accuracy")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7, loc="lower right")
    left.set_title("no amplification: independent, tree, BLT noise (synthetic)", fontsize=9)
    right.set_title("SCAFFOLD against FedAvg, digits Dirichlet(0.1)", fontsize=9)
    fig.tight_layout()
    temporary = path + ".tmp.png"
    fig.savefig(temporary, dpi=110)
    os.replace(temporary, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/dp_ftrl_study")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="two eps each, 2 seeds, 40 rounds")
    args = parser.parse_args()
    epsilons, scaffold_epsilons, seeds, rounds = EPSILONS, SCAFFOLD_EPSILONS, args.seeds, 100
    if args.quick:
        epsilons, scaffold_epsilons = QUICK["epsilons"], QUICK["scaffold_epsilons"]
        seeds, rounds = QUICK["seeds"], QUICK["rounds"]
    os.makedirs(args.out, exist_ok=True)
    start = time.perf_counter()
    table = ftrl_part(args.out, epsilons, seeds, rounds)
    table += scaffold_part(args.out, scaffold_epsilons, seeds, rounds)
    text = printed(table, seeds, rounds)
    print(text)
    print(f"{time.perf_counter() - start:.0f} s in all")

    def write_csv(handle) -> None:
        fields = list(dict.fromkeys(k for row in table for k in row))
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(table)

    atomic_write(os.path.join(args.out, "dp_ftrl_study.csv"), write_csv)
    atomic_write(os.path.join(args.out, "dp_ftrl_study_table.txt"),
                 lambda handle: handle.write(text + "\n"))  # fmt: skip
    figure(table, os.path.join(args.out, "dp_ftrl_study.png"))


if __name__ == "__main__":
    main()
