"""The seed-003 Figure 2 setting: delta(eps) when only the last iterate is released, beside every
honest way to account the same algorithm when every iterate is released.

    python sims/last_iterate_figure2.py --out results/last_iterate

eta = 0.5, L = 1, rho = 1, sigma = 1.5, n = 100, q in {0.1, 0.2, 0.3}. The baselines: the
partition's every-iterate bound (each record is in one batch, so the transcript is one Gaussian
release: exact, no amplification), Poisson sampling's PLD (what the amplification of a Poisson
sampler would buy; another algorithm), and the RDP comparator that treats the batches as
independent without-replacement draws (the looser comparator an earlier version used). Then the
projection radius rho is varied at q = 0.1 to show when the contraction pays. Writes
``figure2.png``, ``figure2.csv`` and prints the tables.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from jfed.privacy import last_iterate

CURVES = {
    "last_iterate": ("last iterate (contraction)", "-"),
    "partition": ("every iterate, partition (one release)", ":"),
    "poisson": ("every iterate, Poisson sampling (PLD)", "-."),
    "standard": ("every iterate, independent w/o-replacement batches (RDP)", "--"),
}
RADII = (1.0, 0.3, 0.1, 0.03, 0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/last_iterate")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    epsilons = np.linspace(0.1, 4.0, 40)
    result = last_iterate.figure2(epsilons)
    rates = last_iterate.FIGURE2_RATES
    figure, axes = plt.subplots(1, len(rates), figsize=(4.2 * len(rates), 4.0), sharey=True)
    for axis, q in zip(axes, rates, strict=True):
        for index, (name, (label, style)) in enumerate(CURVES.items()):
            axis.semilogy(epsilons, result[name][q], color=f"C{index}", linestyle=style,
                          label=label)  # fmt: skip
        axis.set_xlabel("eps (replace-one adjacency)")
        axis.set_title(f"q = {q}", fontsize=9)
        axis.set_ylim(1e-12, 1)
        axis.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("delta")
    axes[0].legend(fontsize=6.5, loc="lower left")
    figure.suptitle("Projected noisy SGD, n=100, eta=0.5, L=1, rho=1, sigma=1.5", fontsize=9)
    figure.tight_layout()
    figure.savefig(os.path.join(args.out, "figure2.png"), dpi=120)
    with open(os.path.join(args.out, "figure2.csv"), "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["epsilon", "q", *(f"delta_{name}" for name in CURVES)])
        for q in last_iterate.FIGURE2_RATES:
            for index, e in enumerate(epsilons):
                writer.writerow([e, q, *(result[name][q][index] for name in CURVES)])
    print("eps at delta = 1e-5 (replace-one):")
    print("q    m   T  last iterate  partition  Poisson PLD  w/o-replacement RDP")
    for q in last_iterate.FIGURE2_RATES:
        setting = last_iterate.LastIterateSetting(**last_iterate.FIGURE2, sampling_rate=q)
        print(
            f"{q:<4} {setting.batch_size:<3} {setting.iterations:<2} "
            f"{last_iterate.last_iterate_epsilon(setting, 1e-5):12.4f} "
            f"{last_iterate.partition_epsilon(setting, 1e-5):10.4f} "
            f"{last_iterate.poisson_epsilon(setting, 1e-5):12.4f} "
            f"{last_iterate.standard_composition_epsilon(setting, 1e-5):20.4f}"
        )
    print("\nq = 0.1, varying the projection radius rho (b = 2 rho sqrt(m) / (eta sigma)):")
    print("rho    b      theta_1(b)  last iterate  partition")
    base = last_iterate.LastIterateSetting(**last_iterate.FIGURE2, sampling_rate=0.1)
    for radius in RADII:
        setting = dataclasses.replace(base, radius=radius)
        contraction = float(last_iterate.hockey_stick(1.0, setting.contraction_ratio))
        print(
            f"{radius:<6} {setting.contraction_ratio:<6.3f} {contraction:<11.4f} "
            f"{last_iterate.last_iterate_epsilon(setting, 1e-5):12.4f} "
            f"{last_iterate.partition_epsilon(setting, 1e-5):10.4f}"
        )
    print(f"wrote {os.path.join(args.out, 'figure2.png')}")


if __name__ == "__main__":
    main()
