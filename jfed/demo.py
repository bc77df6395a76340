"""``jfed demo``: what jfed is for, in about half a minute on two CPU cores.

It compares the three private regression methods of the modulated-learning paper on the Fair
data set (ships offline with statsmodels; 3,820 training clients of one record each) at
eps = 1, 10 and 100 against the non-private OLS reference, over three seeds; writes the figure of
test R^2 against eps; then runs one million procedural clients (generated on the device from
their ids, no host array of size n) through the one-shot estimator at eps = 1 and 10 to show the
scale.

Every method runs through the sweep layer (:func:`jfed.sweep.run_sweep`): all eps and seeds of a
method are one compiled program. The method settings are the ones the modulated study
(``sims/modulated_study.py``) chose on Fair's validation split, held fixed across eps.
"""

from __future__ import annotations

import os
import textwrap
import time

import jax

from jfed.algorithms import dpsgd, modulated
from jfed.data import RegressionTask, load_regression
from jfed.methods import DPSGD, ModulatedIterative, ModulatedOneShot, build_experiment
from jfed.methods.regression import ols_reference
from jfed.sweep import configurations, run_sweep, tuned_table
from jfed.sweep.schema import manifest_path

EPSILONS = (1.0, 10.0, 100.0)
SEEDS = 3
DELTA = 1e-5
ROUNDS = 10
DATASET = "fair"
# The settings the modulated study (paper grid) chose on Fair's validation split, one for all eps:
# the iterative step scale c; the one-shot estimator's default noise-scaled ridge (scale 1); and
# DP-SGD's clip and step (still on the edge of the study's grid after three extensions).
METHODS = {
    "modulated-iterative": ModulatedIterative(
        dataset=DATASET, delta=DELTA, rounds=ROUNDS, step_scale=0.5
    ),
    "modulated-one-shot": ModulatedOneShot(dataset=DATASET, delta=DELTA, ridge_scale=1.0),
    "dpsgd": DPSGD(
        dataset=DATASET, delta=DELTA, rounds=ROUNDS, gradient_clip=0.25, learning_rate=1.6
    ),
}
LABELS = {
    "modulated-iterative": f"modulated, iterative (T = {ROUNDS})",
    "modulated-one-shot": "modulated, one-shot ridge",
    "dpsgd": f"DP-SGD FedAvg (T = {ROUNDS})",
}
SCALE_DIM = 10
SCALE_EPSILONS = (1.0, 10.0)


def compare_methods(
    task: RegressionTask, out: str, progress: bool = False
) -> tuple[list[dict], list[dict]]:
    """Run every method of :data:`METHODS` on ``task`` at :data:`EPSILONS` x :data:`SEEDS` seeds.

    Each method's runs are written to ``out/<method>.jsonl`` (replaced if present).

    Returns:
      ``(rows, table)``: one row per run, and one row per (method, eps) with ``test_r2_mean``,
      ``test_r2_se``, ``seeds`` and the OLS ``reference``.
    """
    os.makedirs(out, exist_ok=True)
    rows: list[dict] = []
    reference = ols_reference(task)
    for name, base in METHODS.items():
        path = _fresh(os.path.join(out, f"{name}.jsonl"))
        runner = build_experiment(base, task=task, reference=reference)
        rows += run_sweep(runner, configurations(base, EPSILONS, SEEDS), path, progress=progress)
    return rows, tuned_table(rows, ())


def _fresh(path: str) -> str:
    """``path`` with its earlier results (and their manifest) removed."""
    for old in (path, manifest_path(path)):
        if os.path.exists(old):
            os.remove(old)
    return path


def scale_run(n_clients: int, out: str, progress: bool = False) -> dict:
    """The one-shot modulated estimator (its default noise-scaled ridge) on ``n_clients``
    procedural clients at eps 1 and 10, both in one program (one pass over the clients serves
    both eps: :class:`jfed.algorithms.modulated.SharedNoise`).

    Returns ``{"rows": [...], "wall_seconds": s}``: the whole call, generating the task,
    calibration, compilation and the OLS reference included.
    """
    start = time.perf_counter()
    base = ModulatedOneShot(synthetic=True, clients=n_clients, dim=SCALE_DIM, delta=DELTA)
    path = _fresh(os.path.join(out, "scale.jsonl"))
    rows = run_sweep(
        build_experiment(base), configurations(base, SCALE_EPSILONS, 1), path, progress=progress
    )
    return {"rows": rows, "wall_seconds": time.perf_counter() - start}


def qualifications(table: list[dict]) -> dict[tuple[str, float], str]:
    """``{(method, eps): what the run's notion adds}`` for the runs whose notion qualifies their
    method's (e.g. at eps 100 the modulated methods certify the ideal real-valued Gaussian, not
    the float32 sampler the program runs: the notion says so and up to which eps the sampler
    itself is certified)."""
    found = {}
    for name in LABELS:
        notions = [str(r.get("notion") or "") for r in table if r["method"] == name]
        base = min(notions, key=len, default="")
        for row in table:
            notion = str(row.get("notion") or "")
            if row["method"] == name and notion != base and notion.startswith(base):
                found[name, row["epsilon"]] = notion[len(base) :].strip()
    return found


def format_table(table: list[dict]) -> list[str]:
    """The comparison as aligned text lines: one line per method, one column per eps; a cell
    whose run states a qualified guarantee is marked ``*`` and explained below the table."""
    width = max(len(label) for label in LABELS.values()) + 2
    header = "".join(f"{f'eps = {eps:g}':>18s} " for eps in EPSILONS)
    lines = [f"{'method':{width}s}{header}"]
    qualified = qualifications(table)
    for name, label in LABELS.items():
        cells = []
        for eps in EPSILONS:
            row = next(r for r in table if r["method"] == name and r["epsilon"] == eps)
            mark = "*" if (name, eps) in qualified else " "
            cells.append(f"{row['test_r2_mean']:>9.3f} +- {row['test_r2_se']:.3f}{mark}")
        lines.append(f"{label:{width}s}" + "".join(f"{c:>19s}" for c in cells))
    reference = table[0]["reference"]
    lines.append(f"{'non-private OLS':{width}s}{reference:>9.3f}")
    for (name, eps), note in qualified.items():
        note = f"* {LABELS[name]}, eps = {eps:g}: the guarantee {note}"
        lines += textwrap.wrap(note, 100, subsequent_indent="    ")
    return [line.rstrip() for line in lines]


def run_demo(out: str = "results/demo", scale_clients: int = 10**6, progress: bool = False) -> dict:
    """Print the comparison, write its figure, run the scale example; return what was printed.

    Args:
      out: folder of the figure (``utility.png`` / ``.pdf``) and the runs (JSON lines).
      scale_clients: procedural clients of the scale run (0 skips it).
      progress: progress bars over the runs (per compiled slice).

    Returns:
      ``{"table": [...], "figure": path, "scale": record or None}``.
    """
    from jfed.report.plots import plot_utility

    start = time.perf_counter()
    task = load_regression(DATASET)
    rows, table = compare_methods(task, out, progress)
    figure = plot_utility(table, os.path.join(out, "utility"))[0][0]
    print(
        f"jfed demo: private linear regression on {DATASET} (statsmodels), {task.n_clients} "
        f"training clients of one record each, d = {task.dim}"
    )
    print(
        f"test R^2, mean +- standard error over {SEEDS} seeds; privacy: local (eps, delta)-DP "
        f"per client, delta = {DELTA:g}, zCDP accountant, untrusted server"
    )
    models = sorted({str(r["mechanism_model"]) for r in rows if r.get("mechanism_model")})
    if models:  # what the guarantee assumes of the noise the program draws
        print(f"  mechanism certified: {'; '.join(models)}")
    for line in format_table(table):
        print("  " + line)
    print(f"  eps protects, modulated methods: {modulated.PROTECTED}")
    print(f"               DP-SGD:            {dpsgd.PROTECTED}")
    print(f"  figure: {figure}  ({time.perf_counter() - start:.1f} s, compilation included)")
    scale = None
    if scale_clients:
        scale = scale_run(scale_clients, out, progress)
        by_eps = {row["epsilon"]: row for row in scale["rows"]}
        results = ", ".join(f"{by_eps[e]['test_r2']:.3f} at eps {e:g}" for e in SCALE_EPSILONS)
        print(
            f"scale: {scale_clients:,} procedural clients (d = {SCALE_DIM}, generated on the "
            f"{jax.devices()[0].platform.upper()} from their ids), modulated one-shot (default "
            f"noise-scaled ridge), same notion: test R^2 {results} (OLS "
            f"{by_eps[SCALE_EPSILONS[0]]['ols_r2']:.3f}); both eps in one program, "
            f"{scale['wall_seconds']:.1f} s, compilation included"
        )
    return {"table": table, "figure": figure, "scale": scale, "rows": len(rows)}
