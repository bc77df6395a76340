"""LDP-FL accuracy vs eps beside the noise-free run, mirroring the LDP-FL paper's Table 1 on the
scikit-learn digits (the paper: MNIST, which does not ship offline).

    python sims/ldp_fl_table1.py --out results/ldp_fl_table1 [--seeds 5]

Every eps and seed of the default ``jfed run ldp-fl`` configuration (the CNN, 100 clients,
fraction 1, 10 rounds, E = 5, B = 4, learning rate 0.1, fixed range [-0.15, 0.15]) runs as one
sweep (``runs.jsonl`` in ``--out``, resumable). Prints test accuracy, mean and standard deviation
over seeds, beside the noise-free run of the same seeds and the paper's MNIST numbers, and writes
``table1.png``.
"""

from __future__ import annotations

import argparse
import os

import matplotlib
import numpy as np

import jfed
from jfed.methods import LDPFL

matplotlib.use("Agg")
import matplotlib.pyplot as plt

EPSILONS = (0.1, 0.5, 1.0, 5.0, 10.0)
# the paper's Table 1, MNIST (noise-free 97.26%)
PAPER_MNIST = {"noise-free": 0.9726, 0.1: 0.1384, 0.5: 0.9536, 1.0: 0.9624, 5.0: 0.9634,
               10.0: 0.9639}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/ldp_fl_table1")
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    base = LDPFL()
    results = os.path.join(args.out, "runs.jsonl")
    rows = jfed.run_grid(base, EPSILONS, args.seeds, out=args.out, resume=os.path.exists(results))
    by_eps = {e: [r for r in rows if r["epsilon"] == e] for e in EPSILONS}
    noise_free = np.array([r["noise_free_test_accuracy"] for r in by_eps[EPSILONS[0]]])
    first = rows[0]
    print(
        f"LDP-FL on digits: {first['n_clients']} clients of {first['images_per_client']} images, "
        f"{first['selected_per_round']} per round, R = {first['rounds']}, E = "
        f"{first['local_epochs']}, B = {first['batch']}, {first['model']} "
        f"({first['weights_per_report']} weights), range [c - r, c + r] = "
        f"[{first['weight_center'] - first['weight_radius']:g}, "
        f"{first['weight_center'] + first['weight_radius']:g}]; test accuracy, mean (sd) over "
        f"{len(noise_free)} seeds"
    )
    print(
        f"{'eps':>10s} {'digits (jfed)':>16s} {'MNIST (paper)':>14s} {'client-level eps':>18s} "
        f"{'if shuffler trusted':>20s}"
    )
    print(f"{'noise-free':>10s} {noise_free.mean():>9.4f} ({noise_free.std(ddof=1):.4f}) "
          f"{PAPER_MNIST['noise-free']:>14.4f}")  # fmt: skip
    means, spreads = [], []
    for e in EPSILONS:
        accuracy = np.array([r["test_accuracy"] for r in by_eps[e]])
        means.append(accuracy.mean())
        spreads.append(accuracy.std(ddof=1))
        client, shuffled = by_eps[e][0]["epsilon_certified"], by_eps[e][0]["epsilon_shuffled"]
        print(f"{e:>10g} {accuracy.mean():>9.4f} ({accuracy.std(ddof=1):.4f}) "
              f"{PAPER_MNIST[e]:>14.4f} {client:>18.4g} {shuffled:>20.4g}")  # fmt: skip
    print(
        "eps: per reported weight per round, the paper's claim under the anonymity of split and "
        f"shuffle. client-level eps: what a run certifies, at delta = {first['delta']:.3g}, a "
        f"client's whole transcript ({first['accountant']}); if shuffler trusted: central eps by "
        "amplification by shuffling (numerical bound, composed over every position and round)"
    )
    figure, axis = plt.subplots(figsize=(5.2, 3.8))
    axis.errorbar(EPSILONS, means, yerr=spreads, marker="o", capsize=3,
                  label=f"jfed, digits (mean +- sd, {len(noise_free)} seeds)")  # fmt: skip
    axis.plot(EPSILONS, [PAPER_MNIST[e] for e in EPSILONS], "s--", label="paper, MNIST")
    axis.axhline(noise_free.mean(), color="C0", linestyle=":", label="jfed noise-free")
    axis.axhline(PAPER_MNIST["noise-free"], color="C1", linestyle=":", label="paper noise-free")
    axis.set_xscale("log")
    axis.set_ylim(0, 1)
    axis.set_xlabel("eps per weight per round (under the anonymity assumption)")
    axis.set_ylabel("test accuracy")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)
    figure.tight_layout()
    for extension in ("png", "pdf"):
        figure.savefig(os.path.join(args.out, f"table1.{extension}"), dpi=110)


if __name__ == "__main__":
    main()
