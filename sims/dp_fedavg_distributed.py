"""DP-FedAvg with distributed DP (secure aggregation, no trusted server) beside central DP at
equal eps: accuracy against eps, and against the bits per coordinate secure aggregation sends.

    python sims/dp_fedavg_distributed.py --out results/dp_fedavg_distributed [--quick]

One population (n = 10^4 Synthetic(1, 1) clients, one shared labelling model, up to 64 records
each), Poisson cohorts of expected size K = 50 (q = 0.005), R = 50 rounds, C = 1, one local
epoch of batch 10, delta = n^-1.1, user-level: every mechanism at every eps of its grid and every
seed as ONE sweep per mechanism (``jfed.run_grid``; ``runs.jsonl`` per mechanism under ``--out``,
resumable):

- central, exact (``--noise discrete``, the default): the server adds discrete Gaussian noise to
  the integer sum (a trusted server), certified through the continuous Gaussian the noise is
  coupled to (PLD: the float Gaussian's z);
- the same exact release under ``--accountant discrete-rdp`` (the discrete events, Zhu and
  Wang's subsampling bound: the secure sums' accountant, like for like);
- central, float (``--noise float``): float32 Gaussian noise, PLD (the ideal real-valued
  mechanism; floating-point sampling not modelled);
- Skellam (``--noise skellam``) at ``--bits`` 8, 12, 16 and 20: each client rotates its clipped
  update (randomized Hadamard), rounds it to the grid and adds its Skellam share of the noise;
  the server sees the sum modulo 2^bits (zero-out adjacency; discrete RDP with Agarwal, Kairouz
  and Liu's bound; the Poisson shares are floating-point draws, not modelled);
- the distributed discrete Gaussian (``--noise ddgauss``) at 16 bits, at eps 2 and 8 only: its
  shares are exact, and each client draws one for every coordinate of its message (1024 here)
  through the exact sampler, which makes it the slow one (seconds a round on two CPU cores).

``--min-clients`` is at its default, the expected cohort less 3 of its standard deviations (28
here: each share carries 1/28 of the noise, so a round of 50 clients adds sqrt(50 / 28) = 1.34
times the noise central DP adds; that is the price of not knowing who will survive).

Prints test accuracy on held-out clients, mean (sd) over seeds, the noise multiplier z, the grid
norm L, the rounding's noise inflation sqrt(B) / L and the wrapped coordinates; writes
``distributed.csv`` and ``distributed.png`` (accuracy against eps, a line per mechanism; accuracy
against bits at each eps).
"""

from __future__ import annotations

import argparse
import os

import matplotlib
import numpy as np
from dp_fedavg_population import atomic_csv  # the scripts' folder is on the path

import jfed
from jfed.methods import DPFedAvg, FedAvgSampled

matplotlib.use("Agg")
import matplotlib.pyplot as plt

CLIENTS = 10_000
EPSILONS = (1.0, 2.0, 4.0, 8.0)
BITS = (8, 12, 16, 20)
SETTING = dict(clients=CLIENTS, rounds=50, cohort_size=50, update_clip=1.0,
               client_learning_rate=0.1, batch=10)  # fmt: skip
MECHANISMS = (  # (name, DP-FedAvg's fields, its eps grid: None for every eps)
    ("central exact", dict(noise="discrete"), None),
    ("central exact discrete-rdp", dict(noise="discrete", accountant="discrete-rdp"), None),
    ("central float", dict(noise="float"), None),
    *((f"skellam {b} bits", dict(noise="skellam", bits=b), None) for b in BITS),
    ("ddgauss 16 bits", dict(noise="ddgauss", bits=16), (2.0, 8.0)),
)
QUICK = dict(epsilons=(2.0, 8.0), seeds=2, rounds=20, bits=(12, 20))


def sweep(folder: str, config, epsilons, seeds) -> list[dict]:
    resume = os.path.exists(os.path.join(folder, "runs.jsonl"))
    return jfed.run_grid(config, None if epsilons is None else list(epsilons), seeds, out=folder,
                         resume=resume)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/dp_fedavg_distributed")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="two eps, two bits, 30 rounds")
    args = parser.parse_args()
    epsilons, seeds, setting, bits = EPSILONS, args.seeds, dict(SETTING), BITS
    mechanisms = MECHANISMS
    if args.quick:
        epsilons, seeds, bits = QUICK["epsilons"], QUICK["seeds"], QUICK["bits"]
        setting["rounds"] = QUICK["rounds"]
        mechanisms = [m for m in MECHANISMS if m[1].get("bits", bits[0]) in bits
                      and m[1]["noise"] != "ddgauss"]  # fmt: skip
    os.makedirs(args.out, exist_ok=True)
    baseline_setting = {k: v for k, v in setting.items() if k != "update_clip"}
    baseline = sweep(os.path.join(args.out, "baseline"), FedAvgSampled(**baseline_setting), None,
                     seeds)  # fmt: skip
    accuracy = np.array([r["test_accuracy"] for r in baseline])
    table = [{"mechanism": "non-private", "bits": "", "epsilon": float("inf"), "z": 0.0,
              "grid_norm": "", "inflation": "", "test_accuracy": accuracy.mean(),
              "sd": accuracy.std(ddof=1), "seeds": len(accuracy), "wrapped": 0,
              "trust_model": baseline[0]["trust_model"]}]  # fmt: skip
    for name, changes, grid in mechanisms:
        folder = os.path.join(args.out, name.replace(" ", "-"))
        grid = [e for e in epsilons if grid is None or e in grid]
        rows = sweep(folder, DPFedAvg(**setting, **changes), grid, seeds)
        for eps in grid:
            runs = [r for r in rows if r["epsilon"] == eps]
            accuracy = np.array([r["test_accuracy"] for r in runs])
            first = runs[0]
            table.append({
                "mechanism": name, "bits": changes.get("bits", ""), "epsilon": eps,
                "z": first["noise_multiplier"], "grid_norm": first.get("grid_norm") or "",
                "inflation": first.get("noise_inflation") or "",
                "test_accuracy": accuracy.mean(), "sd": accuracy.std(ddof=1),
                "seeds": len(accuracy),
                "wrapped": int(sum(r.get("wrapped_coordinates") or 0 for r in runs)),
                "trust_model": first["trust_model"],
            })  # fmt: skip
    atomic_csv(os.path.join(args.out, "distributed.csv"), table)
    print(f"DP-FedAvg on Synthetic(1,1) (shared model), n = {CLIENTS}, Poisson cohorts of K = "
          f"{setting['cohort_size']}, R = {setting['rounds']}, C = {setting['update_clip']}, "
          f"delta = n^-1.1, user-level; test accuracy on held-out clients, mean (sd) over "
          f"{seeds} seeds")  # fmt: skip
    print(f"{'mechanism':>17} {'eps':>5} {'z':>7} {'L':>7} {'sqrt(B)/L':>9} {'accuracy':>17} "
          f"{'wrapped':>7}")  # fmt: skip
    for row in table:
        eps = "inf" if np.isinf(row["epsilon"]) else f"{row['epsilon']:g}"
        inflation = f"{row['inflation']:.4f}" if row["inflation"] != "" else ""
        print(f"{row['mechanism']:>17} {eps:>5} {row['z']:>7.3f} {row['grid_norm']!s:>7} "
              f"{inflation:>9} {row['test_accuracy']:>8.4f} ({row['sd']:.4f}) "
              f"{row['wrapped']:>7}")  # fmt: skip
    figure, (axis, bits_axis) = plt.subplots(1, 2, figsize=(10.0, 4.0), layout="constrained")
    names = [name for name, _, _ in mechanisms]
    for i, name in enumerate(names):
        rows = [r for r in table if r["mechanism"] == name]
        axis.errorbar([r["epsilon"] for r in rows], [r["test_accuracy"] for r in rows],
                      yerr=[r["sd"] for r in rows], marker="o", capsize=3, color=f"C{i}",
                      label=name)  # fmt: skip
    axis.axhline(table[0]["test_accuracy"], color="k", linestyle=":", linewidth=1,
                 label="non-private FedAvg")  # fmt: skip
    axis.set_xscale("log")
    axis.set_xticks(list(epsilons), [f"{e:g}" for e in epsilons])
    axis.minorticks_off()
    axis.set_xlabel("user-level eps (delta = n^-1.1)")
    axis.set_ylabel("test accuracy (held-out clients)")
    axis.set_title(f"n = {CLIENTS}, K = {setting['cohort_size']}, R = {setting['rounds']}",
                   fontsize=9)  # fmt: skip
    axis.grid(alpha=0.3)
    for j, eps in enumerate(epsilons):
        rows = [r for r in table if r["epsilon"] == eps and r["mechanism"].startswith("skellam")]
        bits_axis.errorbar([r["bits"] for r in rows], [r["test_accuracy"] for r in rows],
                           yerr=[r["sd"] for r in rows], marker="o", capsize=3, color=f"C{j}",
                           label=f"skellam, eps = {eps:g}")  # fmt: skip
        central = next(r for r in table if r["epsilon"] == eps
                       and r["mechanism"] == "central exact")  # fmt: skip
        bits_axis.axhline(central["test_accuracy"], color=f"C{j}", linestyle="--", linewidth=1)
    bits_axis.plot([], [], "k--", linewidth=1, label="central exact (same eps)")
    bits_axis.set_xticks(list(bits))
    bits_axis.set_xlabel("secure aggregation bits per coordinate")
    bits_axis.set_ylabel("test accuracy")
    bits_axis.set_title("distributed DP against the field's size", fontsize=9)
    bits_axis.grid(alpha=0.3)
    figure.legend(*axis.get_legend_handles_labels(), loc="outside right upper", fontsize=7)
    bits_axis.legend(fontsize=7)
    temporary = os.path.join(args.out, "distributed.tmp.png")
    figure.savefig(temporary, dpi=110)
    os.replace(temporary, os.path.join(args.out, "distributed.png"))


if __name__ == "__main__":
    main()
