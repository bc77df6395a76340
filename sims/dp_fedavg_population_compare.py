"""The noise each accounting of the exact grid asks beside the float Gaussian's, from the
population study's committed outputs (no run):

    python sims/dp_fedavg_population_compare.py

Reads ``sims/reference/dp_fedavg_population.csv`` (``--noise discrete``, the default: PLD through
the continuous Gaussian the exact noise is coupled to), ``dp_fedavg_population_discrete_rdp.csv``
(``--noise discrete --accountant discrete-rdp``: the discrete events, Zhu and Wang's subsampling
bound) and ``dp_fedavg_population_float.csv`` (``--noise float``, PLD), and writes
``sims/reference/dp_fedavg_population_noise_ratio.csv``: for every population n and eps, the
three noise multipliers, each exact one's ratio to the float one, the accuracy each reached (mean
over seeds) and each exact run's difference from the float run in units of the two runs'
pooled seed standard deviation (positive: the exact run is less accurate).
"""

from __future__ import annotations

import csv
import math
import os

REFERENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference")
EXACT = {"coupled": "dp_fedavg_population.csv",
         "discrete_rdp": "dp_fedavg_population_discrete_rdp.csv"}  # fmt: skip


def rows(name: str) -> dict:
    with open(os.path.join(REFERENCE, name), encoding="utf-8") as handle:
        return {(r["n"], r["epsilon"]): r for r in csv.DictReader(handle) if r["epsilon"] != "inf"}


def gap_in_pooled_sd(exact: dict, real: dict) -> float:
    """(float accuracy - exact accuracy) / the pooled seed sd of the two runs."""
    pooled = math.sqrt((float(exact["sd"]) ** 2 + float(real["sd"]) ** 2) / 2)
    gap = float(real["test_accuracy"]) - float(exact["test_accuracy"])
    return gap / pooled if pooled > 0 else math.nan


def main() -> None:
    real = rows("dp_fedavg_population_float.csv")
    exact = {name: rows(file) for name, file in EXACT.items()}
    table = []
    for key, other in real.items():
        row: dict = {"n": key[0], "epsilon": key[1], "z_float": float(other["noise_multiplier"]),
                     "accuracy_float": float(other["test_accuracy"])}  # fmt: skip
        for name, runs in exact.items():
            mine = runs[key]
            row[f"z_{name}"] = float(mine["noise_multiplier"])
            row[f"z_ratio_{name}"] = row[f"z_{name}"] / row["z_float"]
            row[f"accuracy_{name}"] = float(mine["test_accuracy"])
            row[f"gap_in_pooled_sd_{name}"] = gap_in_pooled_sd(mine, other)
        table.append(row)
    path = os.path.join(REFERENCE, "dp_fedavg_population_noise_ratio.csv")
    temporary = f"{path}.tmp"
    with open(temporary, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(table[0]))
        writer.writeheader()
        for row in table:
            writer.writerow({k: f"{v:.4g}" if isinstance(v, float) else v for k, v in row.items()})
    os.replace(temporary, path)
    print(f"{'n':>8} {'eps':>5} {'z float':>8} | {'z coupled':>9} {'ratio':>6} {'gap/sd':>7} | "
          f"{'z d-rdp':>8} {'ratio':>6} {'gap/sd':>7}")  # fmt: skip
    for row in table:
        print(
            f"{row['n']:>8} {row['epsilon']:>5} {row['z_float']:>8.3f} | "
            f"{row['z_coupled']:>9.3f} {row['z_ratio_coupled']:>6.4f} "
            f"{row['gap_in_pooled_sd_coupled']:>7.1f} | {row['z_discrete_rdp']:>8.3f} "
            f"{row['z_ratio_discrete_rdp']:>6.2f} {row['gap_in_pooled_sd_discrete_rdp']:>7.1f}"
        )


if __name__ == "__main__":
    main()
