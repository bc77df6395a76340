"""``jfed demo``: what jfed is for, in about half a minute on two CPU cores.

It compares the three private regression methods of the modulated-learning paper on the Fair
data set (ships offline with statsmodels; 3,820 training clients of one record each) at
eps = 1, 10 and 100 against the non-private OLS reference, over three seeds; writes the figure of
test R^2 against eps; then runs one million procedural clients (generated on the device from
their ids, no host array of size n) through the one-shot estimator at eps = 1 to show the scale.

Every method runs through the sweep layer (:func:`jfed.sweep.run_sweep`): all eps and seeds of a
method are one compiled program. The method settings are the ones the modulated study
(``sims/modulated_study.py``) chose on Fair's validation split, held fixed across eps.
"""

from __future__ import annotations

import os
import time

import jax

from jfed.algorithms import dpsgd, modulated
from jfed.data import RegressionTask, load_regression
from jfed.run import ModulatedSettings, load_task, run_modulated
from jfed.sweep import RegressionAdapter, configurations, run_sweep, tuned_table

EPSILONS = (1.0, 10.0, 100.0)
SEEDS = 3
DELTA = 1e-5
ROUNDS = 10
DATASET = "fair"
# The settings the modulated study chose on Fair's validation split (one for all eps).
METHODS: dict[str, dict] = {
    "modulated-iterative": {"step_scale": 0.5},
    "modulated-one-shot": {"ridge": 2.0},
    "dpsgd": {"clip": 1.0, "learning_rate": 0.1},
}
LABELS = {
    "modulated-iterative": f"modulated, iterative (T = {ROUNDS})",
    "modulated-one-shot": "modulated, one-shot ridge",
    "dpsgd": f"DP-SGD FedAvg (T = {ROUNDS})",
}
SCALE_DIM = 10


def compare_methods(task: RegressionTask, out: str) -> tuple[list[dict], list[dict]]:
    """Run every method of :data:`METHODS` on ``task`` at :data:`EPSILONS` x :data:`SEEDS` seeds.

    Each method's runs are written to ``out/<method>.jsonl`` (replaced if present).

    Returns:
      ``(rows, table)``: one row per run, and one row per (method, eps) with ``test_r2_mean``,
      ``test_r2_se``, ``seeds`` and the OLS ``reference``.
    """
    os.makedirs(out, exist_ok=True)
    rows: list[dict] = []
    for name, settings in METHODS.items():
        path = os.path.join(out, f"{name}.jsonl")
        if os.path.exists(path):
            os.remove(path)
        adapter = RegressionAdapter(name, task, DELTA, ROUNDS, dict(settings))
        rows += run_sweep(
            adapter, configurations(list(EPSILONS), SEEDS, {}), path, progress=False,
            identity={"dataset": DATASET},
        )  # fmt: skip
    return rows, tuned_table(rows, ())


def scale_run(n_clients: int, progress: bool = False) -> dict:
    """The one-shot modulated estimator (PSD solve) on ``n_clients`` procedural clients, eps = 1.

    One release per client; the PSD solve keeps the ridge system well conditioned however large
    n grows. Returns the run record (:func:`jfed.run.run_modulated`) with ``wall_seconds``: the
    whole call, generating the task, compilation and the OLS reference included.
    """
    start = time.perf_counter()
    task = load_task(synthetic=True, n_clients=n_clients, dim=SCALE_DIM)
    settings = ModulatedSettings(estimator="one-shot", psd=True)
    record = run_modulated(task, 1.0, DELTA, 1, settings, progress=progress)
    record["wall_seconds"] = time.perf_counter() - start
    return record


def format_table(table: list[dict]) -> list[str]:
    """The comparison as aligned text lines: one line per method, one column per eps."""
    width = max(len(label) for label in LABELS.values()) + 2
    header = "".join(f"{f'eps = {eps:g}':>17s}" for eps in EPSILONS)
    lines = [f"{'method':{width}s}{header}"]
    for name, label in LABELS.items():
        cells = []
        for eps in EPSILONS:
            row = next(r for r in table if r["algorithm"] == name and r["epsilon"] == eps)
            cells.append(f"{row['test_r2_mean']:>9.3f} +- {row['test_r2_se']:.3f}")
        lines.append(f"{label:{width}s}" + "".join(f"{c:>17s}" for c in cells))
    reference = table[0]["reference"]
    lines.append(f"{'non-private OLS':{width}s}{reference:>9.3f}")
    return lines


def run_demo(out: str = "results/demo", scale_clients: int = 10**6, progress: bool = False) -> dict:
    """Print the comparison, write its figure, run the scale example; return what was printed.

    Args:
      out: folder of the figure (``utility.png`` / ``.pdf``) and the runs (JSON lines).
      scale_clients: procedural clients of the scale run (0 skips it).
      progress: a progress bar over the scale run's rounds.

    Returns:
      ``{"table": [...], "figure": path, "scale": record or None}``.
    """
    from jfed.report.plots import plot_utility

    start = time.perf_counter()
    task = load_regression(DATASET)
    rows, table = compare_methods(task, out)
    figure = plot_utility(table, os.path.join(out, "utility"))[0][0]
    print(
        f"jfed demo: private linear regression on {DATASET} (statsmodels), {task.n_clients} "
        f"training clients of one record each, d = {task.dim}"
    )
    print(
        f"test R^2, mean +- standard error over {SEEDS} seeds; privacy: local (eps, delta)-DP "
        f"per client, delta = {DELTA:g}, zCDP accountant, untrusted server"
    )
    for line in format_table(table):
        print("  " + line)
    print(f"  eps protects, modulated methods: {modulated.PROTECTED}")
    print(f"               DP-SGD:            {dpsgd.PROTECTED}")
    print(f"  figure: {figure}  ({time.perf_counter() - start:.1f} s, compilation included)")
    scale = None
    if scale_clients:
        scale = scale_run(scale_clients, progress)
        print(
            f"scale: {scale['n_clients']:,} procedural clients (d = {SCALE_DIM}, generated on the "
            f"{jax.devices()[0].platform.upper()} from their ids), modulated one-shot with PSD "
            f"solve, eps = 1, same notion: test R^2 {scale['test_r2']:.3f} (OLS "
            f"{scale['ols_r2']:.3f}) in {scale['wall_seconds']:.1f} s, compilation included"
        )
    return {"table": table, "figure": figure, "scale": scale, "rows": len(rows)}
