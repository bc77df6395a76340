"""How much noise each calibration of Noisy MB-SGD needs, in the seed's MNIST setting.

    python sims/silo_noise_table.py [--out results/silo_noise_table.csv]

n = 8673 records per silo, K = 10, R = 25, delta = 1/n^2, L = 1, eps in the seed's grid. For each
eps: sigma of the seed's theorem formula, of its experiment formula and of exact accounting (PLD,
Poisson sampling, replace-one), the ratio theorem / exact, and the eps the exact accountant
certifies for each formula's noise.
"""

from __future__ import annotations

import argparse
import csv
import logging

from jfed.algorithms.silo_privacy import mbsgd_noise

N_RECORDS, K, R, L = 8673, 10, 25, 1.0
EPSILONS = (0.75, 1.5, 3.0, 6.0, 12.0, 18.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="CSV path")
    args = parser.parse_args()
    logging.getLogger("absl").setLevel(logging.ERROR)
    delta = 1.0 / N_RECORDS**2
    rows = []
    for eps in EPSILONS:
        theorem = mbsgd_noise(N_RECORDS, K, R, eps, delta, L, "theorem")
        experiments = mbsgd_noise(N_RECORDS, K, R, eps, delta, L, "experiments")
        exact = mbsgd_noise(N_RECORDS, K, R, eps, delta, L, "exact")
        rows.append(
            dict(
                epsilon=eps,
                sigma_theorem=theorem.noise_std,
                sigma_experiments=experiments.noise_std,
                sigma_exact=exact.noise_std,
                theorem_over_exact=theorem.noise_std / exact.noise_std,
                exact_eps_of_theorem_noise=theorem.exact_epsilon,
                exact_eps_of_experiments_noise=experiments.exact_epsilon,
            )
        )
    print(f"n={N_RECORDS}, K={K}, R={R}, delta=1/n^2={delta:.3g}, L={L}; exact = PLD, Poisson "
          "sampling, replace-one")  # fmt: skip
    header = ("eps", "sigma theorem", "sigma exper.", "sigma exact", "theorem/exact",
              "exact eps(theorem)", "exact eps(exper.)")  # fmt: skip
    widths = (5, 13, 12, 11, 13, 18, 17)
    print(" ".join(f"{h:>{w}}" for h, w in zip(header, widths, strict=True)))
    for r in rows:
        print(f"{r['epsilon']:>5g} {r['sigma_theorem']:>13.4g} {r['sigma_experiments']:>12.4g} "
              f"{r['sigma_exact']:>11.4g} {r['theorem_over_exact']:>13.2f} "
              f"{r['exact_eps_of_theorem_noise']:>18.3g} "
              f"{r['exact_eps_of_experiments_noise']:>17.4g}")  # fmt: skip
    if args.out:
        with open(args.out, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
