"""The seed-004 experiments on data that ships offline: ISRL-DP Noisy MB-SGD vs ISRL-DP Local SGD
vs their non-private versions, over eps, with the step size tuned per (algorithm, eps).

    python sims/silo_experiments.py --out results/silo_experiments [--repeats 3]

Experiments (specs/silo_sgd.md): logistic regression on ``digits-evenodd`` (25 silos, one
(even, odd) digit pair each, p = 0), linear regression on ``fair-sorted`` (10 silos by sorted
target), softmax regression on ``digits-bylabel`` (10 silos, one per label). R = 25, K = 10,
eps in {0.75, 1.5, 3, 6, 12, 18}, delta = 1 / n_min^2, clip L = 1, radius 10. For every
(algorithm, eps) the whole grid of 10 step sizes x repeats runs vmapped in ONE program; the step
with the lowest mean training loss is chosen (as the seed does) and its test metric reported.
Noisy MB-SGD is run with the exact calibration (PLD, Poisson sampling) and with the seed's
theorem formula (sampling with replacement).

Writes ``results.csv`` (one row per (dataset, algorithm, eps)), ``runs.csv`` (every run) and
``silo_experiments.png`` / ``.pdf`` (test metric vs eps, one panel per experiment).
"""

from __future__ import annotations

import argparse
import csv
import os
import time

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
from tqdm import tqdm

from jfed.algorithms import silo_metrics, silo_privacy, silo_sgd
from jfed.algorithms.losses import Loss
from jfed.data.silos import load_silos
from jfed.engine import ExecutionPlan, run_rounds

matplotlib.use("Agg")
import matplotlib.pyplot as plt

EPSILONS = (0.75, 1.5, 3.0, 6.0, 12.0, 18.0)
EXPERIMENTS = (("digits-evenodd", None), ("fair-sorted", 10), ("digits-bylabel", None))
R, K, CLIP, RADIUS = 25, 10, 1.0, 10.0
MB_STEPS = tuple(np.exp(np.linspace(-6, 4, 10)))
LOCAL_STEPS = tuple(np.exp(np.linspace(-8, 2, 10)))
ALGORITHMS = {
    # name: (algorithm kind, sampling, calibration, private, step grid)
    "noisy-mbsgd (exact)": ("mbsgd", "poisson", "exact", True, MB_STEPS),
    "noisy-mbsgd (seed theorem)": ("mbsgd", "with-replacement", "theorem", True, MB_STEPS),
    "isrl-dp local-sgd": ("local", None, "local", True, LOCAL_STEPS),
    "mbsgd (non-private)": ("mbsgd", "with-replacement", None, False, MB_STEPS),
    "local-sgd (non-private)": ("local", None, None, False, LOCAL_STEPS),
}


def noise_for(kind: str, calibration: str | None, counts: np.ndarray, eps: float, delta: float):
    if calibration is None:
        return np.zeros(len(counts))
    if kind == "local":
        return np.array(
            [silo_privacy.local_sgd_noise(int(n), K, R, eps, delta, CLIP).noise_std for n in counts]
        )
    cache = {
        int(n): silo_privacy.mbsgd_noise(int(n), K, R, eps, delta, CLIP, calibration).noise_std
        for n in np.unique(counts)
    }
    return np.array([cache[int(n)] for n in counts])


def run_grid(algorithm, task, noises: list[np.ndarray], steps, repeats: int) -> np.ndarray:
    """``w_average`` of every (noise level, step, repeat), in one vmapped program."""
    grid = [(i, s, r) for i in range(len(noises)) for s in steps for r in range(repeats)]
    batch = silo_sgd.Hyperparams(
        step_size=jnp.asarray([s for _, s, _ in grid], jnp.float32),
        clip_norm=jnp.full(len(grid), CLIP, jnp.float32),
        radius=jnp.full(len(grid), RADIUS, jnp.float32),
        noise_std=jnp.asarray(np.stack([noises[i] for i, _, _ in grid]), jnp.float32),
        ridge=jnp.zeros(len(grid), jnp.float32),
    )
    keys = jax.vmap(jax.random.key)(jnp.asarray([1000 * i + r for i, _, r in grid]))
    plan = ExecutionPlan(block_size=64, chunk_size=64)
    program = jax.jit(
        jax.vmap(lambda hp, key: run_rounds(algorithm, task.train, hp, key, R, plan)[0].w_average)
    )
    return np.asarray(program(batch, keys), np.float64).reshape(
        len(noises), len(steps), repeats, -1
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/silo_experiments")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    results, runs = [], []
    progress = tqdm(total=len(EXPERIMENTS) * len(ALGORITHMS), desc="silo experiments")
    for dataset, n_silos in EXPERIMENTS:
        task = load_silos(dataset, n_silos=n_silos)
        counts = np.asarray(task.train.counts)
        delta = 1.0 / counts.min() ** 2
        X_train, y_train = task.train.pooled()
        X_test, y_test = task.test
        loss = Loss(task.loss, task.classes)
        metric_name = "relative_rmse" if task.loss == "squared" else "test_error"
        for label, (kind, sampling, calibration, private, steps) in ALGORITHMS.items():
            start = time.perf_counter()
            common = dict(loss=loss, dim=task.dim, n_silos=task.n_silos, batch=K, rounds=R)
            algorithm = (
                silo_sgd.NoisyMBSGD(**common, sampling=sampling)
                if kind == "mbsgd"
                else silo_sgd.LocalSGD(**common)
            )
            epsilons = EPSILONS if private else (np.inf,)
            noises = [noise_for(kind, calibration, counts, e, delta) for e in epsilons]
            weights = run_grid(algorithm, task, noises, steps, args.repeats)
            seconds = time.perf_counter() - start
            for i, eps in enumerate(epsilons):
                train_loss = np.array(
                    [
                        [
                            silo_metrics.loss_and_gradient(
                                task.loss, task.classes, w, X_train, y_train
                            )[0]
                            for w in weights[i, s]
                        ]
                        for s in range(len(steps))
                    ]
                )
                train_loss = np.where(np.isfinite(train_loss), train_loss, np.inf)
                best = int(np.argmin(train_loss.mean(1)))
                metric = []
                for r, w in enumerate(weights[i, best]):
                    value = (
                        silo_metrics.relative_rmse(w, X_test, y_test, y_train.mean())
                        if metric_name == "relative_rmse"
                        else silo_metrics.test_error(task.loss, task.classes, w, X_test, y_test)
                    )
                    metric.append(value)
                    runs.append(dict(dataset=dataset, algorithm=label, epsilon=eps,
                                     step=steps[best], repeat=r, metric=metric_name,
                                     value=value))  # fmt: skip
                results.append(
                    dict(
                        dataset=dataset,
                        algorithm=label,
                        epsilon=eps,
                        delta=delta if private else 0.0,
                        accountant=calibration or "none",
                        step=steps[best],
                        metric=metric_name,
                        mean=float(np.mean(metric)),
                        se=float(np.std(metric, ddof=1) / np.sqrt(len(metric))),
                        train_loss=float(train_loss[best].mean()),
                        repeats=args.repeats,
                        grid_seconds=seconds,
                    )
                )
            progress.update()
    progress.close()
    for name, rows in (("results.csv", results), ("runs.csv", runs)):
        with open(os.path.join(args.out, name), "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    plot(results, args.out)
    print_table(results)


def plot(results: list[dict], out: str) -> None:
    figure, axes = plt.subplots(1, len(EXPERIMENTS), figsize=(5 * len(EXPERIMENTS), 4))
    for axis, (dataset, _) in zip(axes, EXPERIMENTS, strict=True):
        rows = [r for r in results if r["dataset"] == dataset]
        for index, label in enumerate(ALGORITHMS):
            mine = [r for r in rows if r["algorithm"] == label]
            if np.isinf(mine[0]["epsilon"]):
                axis.axhline(mine[0]["mean"], color=f"C{index}", linestyle="--", label=label)
                continue
            eps = [r["epsilon"] for r in mine]
            mean = np.array([r["mean"] for r in mine])
            se = np.array([r["se"] for r in mine])
            axis.plot(eps, mean, marker="o", color=f"C{index}", label=label)
            axis.fill_between(eps, mean - se, mean + se, color=f"C{index}", alpha=0.2)
        axis.set_xscale("log")
        axis.set_xlabel("eps (per silo, ISRL-DP)")
        axis.set_ylabel(rows[0]["metric"].replace("_", " "))
        axis.set_title(dataset)
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    figure.tight_layout()
    for extension in ("png", "pdf"):
        figure.savefig(os.path.join(out, f"silo_experiments.{extension}"), dpi=110)


def print_table(results: list[dict]) -> None:
    print(f"{'dataset':16s} {'algorithm':28s} " + " ".join(f"{e:>12g}" for e in EPSILONS))
    for dataset, _ in EXPERIMENTS:
        for label in ALGORITHMS:
            rows = [r for r in results if r["dataset"] == dataset and r["algorithm"] == label]
            cells = [f"{r['mean']:.3f}({r['se']:.3f})" for r in rows]
            if len(cells) == 1:
                cells = cells * len(EPSILONS)
            print(f"{dataset:16s} {label:28s} " + " ".join(f"{c:>12s}" for c in cells))


if __name__ == "__main__":
    main()
