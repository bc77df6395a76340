"""The noise the exact grid's accounting asks beside the float Gaussian's, from the population
study's two committed outputs (no run):

    python sims/dp_fedavg_population_compare.py

Reads ``sims/reference/dp_fedavg_population.csv`` (``--noise discrete``, discrete RDP) and
``sims/reference/dp_fedavg_population_float.csv`` (``--noise float``, PLD) and writes
``sims/reference/dp_fedavg_population_noise_ratio.csv``: for every population n and eps, the two
noise multipliers, their ratio, and the accuracy each reached (mean over seeds) with the
difference in units of the two runs' pooled seed standard deviation.
"""

from __future__ import annotations

import csv
import math
import os

REFERENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference")


def rows(name: str) -> dict:
    with open(os.path.join(REFERENCE, name), encoding="utf-8") as handle:
        return {(r["n"], r["epsilon"]): r for r in csv.DictReader(handle) if r["epsilon"] != "inf"}


def main() -> None:
    exact, real = rows("dp_fedavg_population.csv"), rows("dp_fedavg_population_float.csv")
    table = []
    for key, grid in exact.items():
        other = real[key]
        pooled = math.sqrt((float(grid["sd"]) ** 2 + float(other["sd"]) ** 2) / 2)
        gap = float(other["test_accuracy"]) - float(grid["test_accuracy"])
        table.append({
            "n": key[0], "epsilon": key[1],
            "z_discrete": float(grid["noise_multiplier"]),
            "z_float": float(other["noise_multiplier"]),
            "z_ratio": float(grid["noise_multiplier"]) / float(other["noise_multiplier"]),
            "accuracy_discrete": float(grid["test_accuracy"]),
            "accuracy_float": float(other["test_accuracy"]),
            "gap_in_pooled_sd": gap / pooled if pooled > 0 else math.nan,
        })  # fmt: skip
    path = os.path.join(REFERENCE, "dp_fedavg_population_noise_ratio.csv")
    temporary = f"{path}.tmp"
    with open(temporary, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(table[0]))
        writer.writeheader()
        for row in table:
            writer.writerow({k: f"{v:.4g}" if isinstance(v, float) else v for k, v in row.items()})
    os.replace(temporary, path)
    print(f"{'n':>8} {'eps':>5} {'z grid':>8} {'z float':>8} {'ratio':>6} {'gap/sd':>7}")
    for row in table:
        print(f"{row['n']:>8} {row['epsilon']:>5} {row['z_discrete']:>8.3f} {row['z_float']:>8.3f} "
              f"{row['z_ratio']:>6.2f} {row['gap_in_pooled_sd']:>7.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
