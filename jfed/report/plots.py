"""Plots of sweep results (matplotlib, written as PNG and PDF next to the results).

- :func:`plot_utility`: the test metric vs eps (log scale) with a band of one standard error
  across seeds, one line per algorithm, the non-private reference as a dashed line; one panel per
  data set.
- :func:`plot_convergence`: the test metric per round of the chosen configurations, one line per
  eps; one panel per (data set, algorithm) that has curves.
"""

from __future__ import annotations

from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from jfed.catalog import METRIC_LABELS


def _epsilon_label(rows: list[dict]) -> str:
    """'eps' with the delta and accountant of the rows (each named once if shared)."""
    deltas = sorted({f"{row['delta']:.3g}" for row in rows if row.get("delta") is not None})
    accountants = sorted({str(row["accountant"]) for row in rows if row.get("accountant")})
    details = []
    if deltas:
        details.append(f"delta = {', '.join(deltas)}")
    if accountants:
        details.append(f"accountant: {', '.join(accountants)}")
    notions = sorted({str(row["notion"]).split(":")[0] for row in rows if row.get("notion")})
    label = f"eps ({'; '.join(details)})" if details else "eps"
    return label + ("\n" + "; ".join(notions) if notions else "")


def _save(figure, prefix: str) -> list[str]:
    paths = []
    for extension in ("png", "pdf"):
        path = f"{prefix}.{extension}"
        figure.savefig(path, dpi=110)
        paths.append(path)
    plt.close(figure)
    return paths


def plot_utility(table: list[dict], prefix: str, metric: str = "test_r2") -> tuple[list[str], int]:
    """Utility vs eps from a tuned table (:func:`jfed.sweep.tuning.tuned_table`).

    Returns the written paths and the number of panels."""
    datasets = sorted({row.get("dataset") or "" for row in table})
    figure, axes = plt.subplots(1, len(datasets), figsize=(4.6 * len(datasets), 3.8), squeeze=False)
    for axis, dataset in zip(axes[0], datasets, strict=True):
        rows = [row for row in table if (row.get("dataset") or "") == dataset]
        for index, algorithm in enumerate(sorted({row["algorithm"] for row in rows})):
            mine = sorted(
                (r for r in rows if r["algorithm"] == algorithm), key=lambda r: r["epsilon"]
            )
            eps = np.array([r["epsilon"] for r in mine])
            mean = np.array([r[f"{metric}_mean"] for r in mine])
            se = np.array([r[f"{metric}_se"] for r in mine])
            axis.plot(eps, mean, marker="o", color=f"C{index}", label=algorithm)
            axis.fill_between(eps, mean - se, mean + se, color=f"C{index}", alpha=0.2)
        references = [r["reference"] for r in rows if r.get("reference") is not None]
        if references:
            axis.axhline(references[0], color="black", linestyle="--", label="non-private OLS")
        axis.set_xscale("log")
        axis.set_xlabel(_epsilon_label(rows))
        axis.set_ylabel(METRIC_LABELS.get(metric, metric.replace("_", " ")))
        seeds = sorted({row.get("seeds") for row in rows if row.get("seeds")})
        band = f"band: +-1 standard error over {'/'.join(map(str, seeds))} seeds" if seeds else ""
        axis.set_title(f"{dataset}\n{band}" if band else dataset, fontsize=9)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.tight_layout()
    return _save(figure, prefix), len(datasets)


def plot_convergence(
    rows: list[dict], table: list[dict], hyper: tuple[str, ...], prefix: str,
    curve: str = "test_r2_per_round",
) -> tuple[list[str], int]:  # fmt: skip
    """Convergence curves (mean over seeds) of the chosen configurations, one line per eps.

    Returns the written paths and the number of panels (0 and no file when no curves)."""
    chosen = {
        (t.get("dataset"), t["algorithm"], t["epsilon"]): tuple(t[h] for h in hyper) for t in table
    }
    curves: dict = defaultdict(list)
    for row in rows:
        key = (row.get("dataset"), row["algorithm"], row["epsilon"])
        if curve in row and chosen.get(key) == tuple(row[h] for h in hyper):
            curves[(row.get("dataset") or "", row["algorithm"], row["epsilon"])].append(row[curve])
    panels = sorted({(d, a) for d, a, _ in curves})
    if not panels:
        return [], 0
    figure, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.8), squeeze=False)
    for axis, (dataset, algorithm) in zip(axes[0], panels, strict=True):
        keys = sorted(k for k in curves if k[:2] == (dataset, algorithm))
        colors = plt.cm.viridis(np.linspace(0, 0.9, len(keys)))
        for color, key in zip(colors, keys, strict=True):
            values = np.array(curves[key], np.float64)
            axis.plot(np.arange(1, values.shape[1] + 1), values.mean(0), color=color,
                      label=f"eps={key[2]:g}")  # fmt: skip
        axis.set_xlabel("round")
        axis.set_ylabel(curve.replace("_", " "))
        axis.set_title(f"{dataset}: {algorithm}")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.tight_layout()
    return _save(figure, prefix), len(panels)
