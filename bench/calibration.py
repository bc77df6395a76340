"""Calibration speed: closed forms over an eps grid, and the PLD grid reuse against one-at-a-time.

    python bench/calibration.py [--json PATH] [--targets 100] [--check 5] [--steps 1000]
                                [--rate 0.01] [--smoke]

1. zCDP, classic and analytic Gaussian calibration of a grid of 100 eps (vectorised).
2. Subsampled Gaussian (q = 0.01, 1000 steps, delta = 1e-5) with the PLD accountant: one
   calibration by bisection (``dp_accounting.calibrate_dp_mechanism``) against the grid method
   (``calibrate_noise_multipliers``: shared noise grid, monotone interpolation, refinement) for 100
   eps in [0.5, 8]. Accuracy: ``--check`` targets of the grid are also calibrated one by one, and
   the table reports the largest relative difference of the noise and of the eps each spends.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from _common import parse_args  # bench/ is on the path

from jfed.privacy import calibration
from jfed.report import versions

DELTA, RATE, STEPS = 1e-5, 0.01, 1000


def _timed(fn, *args, **kwargs):
    start = time.perf_counter()
    value = fn(*args, **kwargs)
    return value, time.perf_counter() - start


def closed_forms(n_targets: int) -> list[dict]:
    rows = []
    for accountant, targets, steps in (
        ("zcdp", np.geomspace(0.1, 10, n_targets), 10),
        ("analytic", np.geomspace(0.1, 10, n_targets), 1),
        ("classic", np.linspace(0.01, 0.99, n_targets), 1),
    ):
        calibration.calibrate_noise_multipliers(targets[:2], DELTA, 1.0, steps, accountant)
        _, seconds = _timed(
            calibration.calibrate_noise_multipliers, targets, DELTA, 1.0, steps, accountant
        )
        rows.append({"accountant": accountant, "targets": n_targets, "seconds": seconds})
        print(f"{accountant:>9}: {n_targets} eps calibrated in {1e3 * seconds:8.2f} ms", flush=True)
    return rows


def pld_grid(
    n_targets: int, n_check: int, tolerance: float, steps: int = STEPS, rate: float = RATE
) -> dict:
    targets = np.geomspace(0.5, 8.0, n_targets)
    single, single_seconds = _timed(
        calibration.calibrate_noise_multiplier, 1.0, DELTA, rate, steps, "pld"
    )
    (grid, info), grid_seconds = _timed(
        calibration.calibrate_noise_multipliers,
        targets, DELTA, rate, steps, "pld", tolerance=tolerance,
    )  # fmt: skip
    check = np.unique(np.linspace(0, n_targets - 1, n_check).round().astype(int))
    noise_errors, eps_errors, single_eps_errors = [], [], []
    for index in check:
        exact = calibration.calibrate_noise_multiplier(targets[index], DELTA, rate, steps, "pld")
        noise_errors.append(grid[index] / exact - 1.0)
        spent = calibration.epsilon_for_noise(grid[index], DELTA, rate, steps, "pld")
        eps_errors.append(spent / targets[index] - 1.0)
        exact_spent = calibration.epsilon_for_noise(exact, DELTA, rate, steps, "pld")
        single_eps_errors.append(exact_spent / targets[index] - 1.0)
    row = {
        "setting": {"sampling_rate": rate, "steps": steps, "delta": DELTA, "eps_range": [0.5, 8]},
        "targets": n_targets,
        "tolerance": tolerance,
        "single_seconds": single_seconds,
        "single_noise_multiplier_at_eps1": single,
        "grid_seconds": grid_seconds,
        "ratio_grid_to_single": grid_seconds / single_seconds,
        "grid_evaluations": info["evaluations"],
        "checked_targets": check.tolist(),
        "max_relative_noise_difference": float(np.max(np.abs(noise_errors))),
        "grid_eps_relative_error_range": [float(np.min(eps_errors)), float(np.max(eps_errors))],
        "single_eps_relative_error_range": [
            float(np.min(single_eps_errors)),
            float(np.max(single_eps_errors)),
        ],
    }
    print(
        f"PLD, q={rate}, {steps} steps, tolerance {tolerance:g}: one calibration "
        f"{single_seconds:.2f} s; {n_targets} targets on the grid {grid_seconds:.2f} s "
        f"= {row['ratio_grid_to_single']:.2f} x one ({info['evaluations']} accountant evaluations)"
        f"\n  max |noise_grid / noise_single - 1| = {row['max_relative_noise_difference']:.2e}; "
        f"eps spent / target - 1: grid {row['grid_eps_relative_error_range']}, "
        f"single {row['single_eps_relative_error_range']}",
        flush=True,
    )
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=100)
    parser.add_argument("--check", type=int, default=5)
    parser.add_argument("--tolerances", default="1e-4,1e-5", help="grid tolerances to run")
    parser.add_argument("--steps", type=int, default=STEPS, help="PLD: Poisson rounds composed")
    parser.add_argument("--rate", type=float, default=RATE, help="PLD: their sampling rate")
    parser.add_argument("--json", metavar="PATH")
    args = parse_args(
        parser, argv, __file__, targets=3, check=1, tolerances="1e-3", steps=1, rate=1.0
    )
    payload = {
        "benchmark": "calibration",
        "closed_forms": closed_forms(args.targets),
        "pld_grid": [
            pld_grid(args.targets, args.check, float(t), args.steps, args.rate)
            for t in args.tolerances.split(",")
        ],
        "versions": versions(),
    }
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
