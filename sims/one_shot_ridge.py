"""The one-shot estimator's ridge: fixed lambda against the noise-scaled default, raw and PSD solve.

    python sims/one_shot_ridge.py [--tasks fair,modechoice,co2,n100000,n1000000] [--seeds 3]

For each task (a real one by name, or ``nN`` for N procedural clients in d = 10) and eps in
{0.5, 1, 2, 5, 10, 20, 50, 100} (local (eps, delta = 1e-5)-DP, zCDP, one release), the one-shot
estimator runs with lambda = scale * (sigma / alpha)^2 * 2 sqrt(d / n)
(:func:`jfed.algorithms.modulated.noise_scaled_ridge`) for scale in {0.1, 0.3, 1, 3}, with the raw
ridge solve and with S_hat's PSD part, and with the fixed lambda = 1 of earlier versions. Prints
test R^2, mean over seeds, one row per (lambda rule, solve).
"""

from __future__ import annotations

import argparse

import numpy as np

from jfed.methods import ModulatedOneShot
from jfed.methods.regression import load_task, ols_reference
from jfed.sweep import run

EPSILONS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
SCALES = (0.1, 0.3, 1.0, 3.0)


def r2(task, reference: dict, config: ModulatedOneShot, epsilon: float, seed: int) -> float:
    """Test R^2 of one one-shot run."""
    record = run(config.replace(epsilon=epsilon, seed=seed), task=task, reference=reference,
                 progress=False)  # fmt: skip
    return record["test_r2"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="fair,modechoice,co2,n100000,n1000000")
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    print("test R^2, mean over seeds; one-shot estimator, local (eps, delta = 1e-5)-DP, zCDP")
    print(f"{'task':12s} {'lambda':14s} {'solve':5s} " + " ".join(f"{e:>8g}" for e in EPSILONS))
    for name in args.tasks.split(","):
        if name.startswith("n"):
            base = ModulatedOneShot(synthetic=True, clients=int(name[1:]), dim=10)
        else:
            base = ModulatedOneShot(dataset=name)
        task = load_task(base)
        reference = ols_reference(task)
        rules = [(f"scale {s:g}", {"ridge": None, "ridge_scale": s}) for s in SCALES]
        rules.append(("fixed 1", {"ridge": 1.0}))
        for label, ridge in rules:
            for psd in (False, True):
                settings = base.replace(psd=psd, **ridge)

                means = [
                    np.mean([r2(task, reference, settings, eps, s) for s in range(args.seeds)])
                    for eps in EPSILONS
                ]
                solve = "PSD" if psd else "raw"
                print(f"{name:12s} {label:14s} {solve:5s} " + " ".join(f"{m:8.3f}" for m in means))
        print(f"{name:12s} {'OLS':14s} {'':5s} {reference['test_r2']:8.3f}")


if __name__ == "__main__":
    main()
