"""Bias of the local user-level estimators at many units and few sites, where the binary search
of ``local-user-large`` has few voters a stage (docs/papers/estimation.md).

    python sims/estimation_bias.py [--replications 2000]

Prints, for S = 100 sites of n = 10^5 units (Laplace noise, the library's default: exact, on the
integer grid), each setting, eps and true mean mu:
the bias with its standard error, the MSE and the fraction of estimating sites clipped; then the
bias of ``local-user-small`` at eps 1, mu 0 over four more seeds (how far a seed's bias strays).
About two minutes on a laptop CPU.
"""

from __future__ import annotations

import argparse

from jfed.methods import Estimation, build_experiment
from jfed.sweep.runner import run_sweep

SITES, UNITS = 100, 100_000
SEEDS = (1, 2, 3, 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replications", type=int, default=2000)
    args = parser.parse_args()
    print(f"S = {SITES} sites, n = {UNITS} units, Laplace, {args.replications} replications")
    print(f"{'setting':18s} {'eps':>4s} {'mu':>4s} {'bias':>8s} {'(se)':>8s} {'mse':>9s} "
          f"{'clipped':>8s}")  # fmt: skip
    for setting in ("local-user-small", "local-user-large"):
        for epsilon in (1.0, 4.0):
            configs = [
                Estimation(
                    setting=setting,
                    sites=SITES,
                    units=UNITS,
                    epsilon=epsilon,
                    mean=mean,
                    replications=args.replications,
                )
                for mean in (0.0, 0.3)
            ]
            for config in configs:
                (row,) = run_sweep(build_experiment(config), [config], None, progress=False)
                print(f"{setting:18s} {epsilon:>4g} {config.mean:>4g} {row['bias']:>+8.4f} "
                      f"({row['bias_se']:.4f}) {row['mse']:>9.3g} "
                      f"{row['clipped_fraction']:>8.3f}")  # fmt: skip
    seeded = Estimation(setting="local-user-small", sites=SITES, units=UNITS, epsilon=1.0,
                        mean=0.0, replications=args.replications)  # fmt: skip
    rows = run_sweep(build_experiment(seeded), [seeded.replace(seed=s) for s in SEEDS], None,
                     progress=False)  # fmt: skip
    print("local-user-small, eps 1, mu 0, bias (se) by seed: " + ", ".join(
        f"{row['seed']}: {row['bias']:+.4f} ({row['bias_se']:.4f})" for row in rows))  # fmt: skip


if __name__ == "__main__":
    main()
