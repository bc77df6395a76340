"""Plots of sweep results (matplotlib, written as PNG and PDF next to the results).

- :func:`plot_utility`: the test metric vs eps (log scale) with a band of one standard error
  across seeds, one line per method, the non-private reference as a dashed line; one panel per
  data set. :func:`plot_overlay` does the same for the tuned tables of several sweeps at once.
- :func:`plot_convergence`: the test metric per round of the chosen configurations, one line per
  eps; one panel per (data set, method) whose runs have more than one round.

The y-range is common to the panels and ignores outliers (a failed run at small eps can sit at
R^2 = -800 and would flatten every other line): it spans the central values with a margin, and
the panel says how many points lie outside it.
"""

from __future__ import annotations

import textwrap
from collections import defaultdict

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from jfed._io import replacing
from jfed._validation import UsageError
from jfed.catalog import METRIC_LABELS

LOG_METRICS = ("mse",)
OUTLIER_FENCE = 3.0  # interquartile ranges beyond the quartiles that the y-range still shows
LABEL_WIDTH = 70  # characters per line of an axis label: a long notion wraps, never runs off
LEGEND_WIDTH = 50  # characters per line of a legend's label, beside a panel 6.4 inches wide


def _private(row: dict) -> bool:
    """Whether a row states a guarantee: a finite eps (a non-private method's rows carry none,
    or an infinite one, with a notion of "none ...")."""
    epsilon = row.get("epsilon")
    finite = isinstance(epsilon, int | float) and bool(np.isfinite(epsilon))
    return finite and not str(row.get("notion") or "").startswith("none")


def _notion(row: dict) -> str:
    return str(row["notion"]).split(":")[0] if _private(row) and row.get("notion") else ""


def _notions(rows: list[dict]) -> list[str]:
    """The privacy notions of the private rows (a non-private method has none to state); a
    notion that qualifies another one of the rows (it starts with it and says more, e.g. "...
    of the ideal real-valued Gaussian, not certified for the float32 sampler") counts as the
    notion it qualifies: its points are drawn hollow (:func:`_qualified`)."""
    stated = {_notion(r) for r in rows if _notion(r)}
    return sorted(n for n in stated if not any(n != m and n.startswith(m + " ") for m in stated))


def _qualified(row: dict, notions: list[str]) -> bool:
    """Whether the row's notion is a qualified form of one of ``notions``."""
    return bool(_notion(row)) and _notion(row) not in notions


def _epsilon_label(rows: list[dict]) -> str:
    """'eps' with the delta, accountant and notion of the private rows, each named once if
    shared (a non-private baseline beside them states none); when the lines of a panel differ
    in notion, each line's legend names its own and the label says so. Wrapped to
    :data:`LABEL_WIDTH` characters a line."""
    rows = [row for row in rows if _private(row)]
    deltas = sorted({f"{row['delta']:.3g}" for row in rows if row.get("delta") is not None})
    accountants = sorted({str(row["accountant"]) for row in rows if row.get("accountant")})
    details = []
    if deltas:
        details.append(f"delta = {', '.join(deltas)}")
    if accountants:
        details.append(f"accountant: {', '.join(accountants)}")
    label = f"eps ({'; '.join(details)})" if details else "eps"
    notions = _notions(rows)
    if len(notions) == 1:
        label += f"; {notions[0]}"
    elif notions:
        label += "; privacy notions differ: see each line"
    return "\n".join(textwrap.wrap(label, LABEL_WIDTH))


def robust_limits(values: np.ndarray) -> tuple[float, float]:
    """A y-range holding the central values: the quartiles widened by :data:`OUTLIER_FENCE`
    interquartile ranges, cut to the data, with a 5% margin."""
    values = np.asarray(values, np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return 0.0, 1.0
    q1, q3 = np.percentile(values, [25, 75])
    spread = max(q3 - q1, 1e-3 * max(1.0, abs(q3)))
    low = max(values.min(), q1 - OUTLIER_FENCE * spread)
    high = min(values.max(), q3 + OUTLIER_FENCE * spread)
    margin = 0.05 * max(high - low, 1e-6)
    return low - margin, high + margin


def _figure(panels: int) -> tuple[Figure, np.ndarray]:
    """A figure of ``panels`` side by side, ``axes: [1, panels]``. Built with matplotlib's object
    API, not pyplot: writing a plot changes neither the caller's backend nor its open figures
    (a notebook's inline backend stays as it is)."""
    # constrained layout keeps each panel's legend, beside it, clear of the next panel
    figure = Figure(figsize=(6.4 * panels, 4.0), layout="constrained")
    return figure, figure.subplots(1, panels, squeeze=False)


def _save(figure, prefix: str) -> list[str]:
    """Write ``figure`` as ``prefix.png`` and ``prefix.pdf``, each whole or not at all."""
    paths = []
    for extension in ("png", "pdf"):
        path = f"{prefix}.{extension}"
        with replacing(path, "wb") as handle:
            # "tight": a long label or legend is kept whole, not cut at the figure's edge
            figure.savefig(handle, format=extension, dpi=110, bbox_inches="tight")
        paths.append(path)
    return paths


def _number(value) -> float:
    """A metric or eps of a row as a float: ``None`` (not finite in the record) is NaN."""
    return float("nan") if value is None else float(value)


def _legend(axis) -> None:
    """The legend beside the panel, never over its points (``bbox_inches="tight"`` keeps it)."""
    handles, labels = axis.get_legend_handles_labels()
    if handles:
        # wrapped: a legend as wide as a long label would squeeze the panel to nothing
        wrapped = ["\n".join(textwrap.wrap(label, LEGEND_WIDTH)) for label in labels]
        axis.legend(handles, wrapped, fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                    borderaxespad=0.0)  # fmt: skip


def _utility_panels(lines: list[tuple[str, list[dict]]], metric: str, prefix: str):
    """``lines``: (label, tuned rows of one method) each; one panel per data set."""
    datasets = sorted({row.get("dataset") or "" for _, rows in lines for row in rows})
    figure, axes = _figure(len(datasets))
    values = [_number(r.get(f"{metric}_mean")) for _, rows in lines for r in rows]
    values += [r["reference"] for _, rows in lines for r in rows if r.get("reference") is not None]
    logarithmic = metric in LOG_METRICS  # errors spanning decades: every point shown, log axis
    if logarithmic:
        positive = np.array([v for v in values if v > 0 and np.isfinite(v)], np.float64)
        low, high = (positive.min() / 1.5, positive.max() * 1.5) if positive.size else (1e-6, 1.0)
    else:
        low, high = robust_limits(np.array(values, np.float64))
    for axis, dataset in zip(axes[0], datasets, strict=True):
        shown = []
        outside = missing = 0
        private_shown = False
        panel = [r for _, rows in lines for r in rows if (r.get("dataset") or "") == dataset]
        notions = _notions(panel)
        mixed = len(notions) > 1
        qualified_shown = 0
        for index, (label, rows) in enumerate(lines):
            mine = sorted(
                (r for r in rows if (r.get("dataset") or "") == dataset),
                key=lambda r: r["epsilon"],
            )
            if not mine:
                continue
            if mixed and _notions(mine):
                label = f"{label} [{'; '.join(_notions(mine))}]"
            shown += mine
            eps = np.array([_number(r["epsilon"]) for r in mine], np.float64)
            mean = np.array([_number(r.get(f"{metric}_mean")) for r in mine], np.float64)
            se = np.array([_number(r.get(f"{metric}_se")) for r in mine], np.float64)
            se = np.where(np.isfinite(se), se, 0.0)
            drawn = np.isfinite(mean)  # a metric that was not finite in any seed has no point
            missing += int(np.sum(~drawn))
            if not drawn.any():
                continue
            eps, mean, se = eps[drawn], mean[drawn], se[drawn]
            outside += int(np.sum((mean < low) | (mean > high)))
            if not np.isfinite(eps).any():  # a non-private method: one level at every eps
                named = label if "non-private" in label else f"{label} (non-private)"
                axis.axhline(np.clip(mean[0], low, high), color=f"C{index}", linestyle=":",
                             label=named)  # fmt: skip
                axis.axhspan(np.clip(mean[0] - se[0], low, high),
                             np.clip(mean[0] + se[0], low, high), color=f"C{index}",
                             alpha=0.1)  # fmt: skip
                continue
            private_shown = True
            inside = (mean >= low) & (mean <= high)
            axis.plot(eps, np.clip(mean, low, high), color=f"C{index}", label=label)
            qualified = np.array([_qualified(r, notions) for r in mine])[drawn]
            qualified_shown += int(np.sum(qualified & inside))
            for hollow in (False, True):
                chosen = inside & (qualified == hollow)
                axis.plot(eps[chosen], mean[chosen], "o", color=f"C{index}",
                          markerfacecolor="white" if hollow else f"C{index}")  # fmt: skip
            for edge, beyond, marker in ((low, mean < low, "v"), (high, mean > high, "^")):
                if beyond.any():  # a clipped point: hollow, pointing to where it lies
                    axis.plot(eps[beyond], np.full(beyond.sum(), edge), marker, color=f"C{index}",
                              markerfacecolor="none", markersize=9, clip_on=False)  # fmt: skip
            axis.fill_between(eps, np.clip(mean - se, low, high), np.clip(mean + se, low, high),
                              color=f"C{index}", alpha=0.2)  # fmt: skip
        references = [r["reference"] for r in shown if r.get("reference") is not None]
        if references:
            axis.axhline(references[0], color="black", linestyle="--", label="non-private OLS")
        axis.set_xscale("log")
        if not private_shown:
            axis.set_xlim(0.1, 10.0)  # no eps to span: the level of the non-private method(s)
        if logarithmic:
            axis.set_yscale("log")
        axis.set_ylim(low, high)
        axis.set_xlabel(_epsilon_label(shown))
        axis.set_ylabel(METRIC_LABELS.get(metric, metric.replace("_", " ")))
        seeds = sorted({int(row["seeds"]) for row in shown if row.get("seeds")})
        title = [dataset]
        if seeds:
            title.append(f"mean; band +-1 standard error over {'/'.join(map(str, seeds))} seeds")
        if outside:
            title.append(f"{outside} point(s) outside the y-range: hollow triangles at its edge")
        if missing:
            title.append(f"{missing} point(s) not drawn: the metric was not finite")
        if qualified_shown:
            title.append(f"hollow circles: {qualified_shown} point(s) whose run states a "
                         "qualified guarantee (its record's notion says how)")  # fmt: skip
        axis.set_title("\n".join(title), fontsize=8)
        axis.grid(alpha=0.3)
        _legend(axis)
    return _save(figure, prefix), len(datasets)


def plot_utility(
    table: list[dict], prefix: str, metric: str = "test_r2", swept: tuple[str, ...] = ()
) -> tuple[list[str], int]:
    """Utility vs eps from a tuned table (:func:`jfed.sweep.tuning.tuned_table`): a line per
    method, or per (method, swept values) where the table reports every setting (nothing was
    chosen).

    Returns the written paths and the number of panels."""
    lines: dict = defaultdict(list)
    for row in table:
        every = str(row.get("choice_rule", "")).startswith("none")
        label = row["method"]
        if every and swept:
            label += " (" + ", ".join(f"{name}={row[name]}" for name in swept) + ")"
        lines[label].append(row)
    return _utility_panels(sorted(lines.items()), metric, prefix)


def plot_overlay(tables: list[tuple[str, list[dict]]], prefix: str) -> tuple[list[str], int]:
    """The tuned tables of several sweeps (``(folder, table)`` each) in one figure: a line per
    (folder, method), labelled by the method (and the folder where a method repeats). Every
    table must report the same metric."""
    reported = {
        folder: sorted({k[: -len("_mean")] for row in table for k in row if k.endswith("_mean")})
        for folder, table in tables
    }
    metrics = {metric for names in reported.values() for metric in names}
    if len(metrics) != 1:
        said = "; ".join(f"{folder}: {', '.join(names)}" for folder, names in reported.items())
        raise UsageError(
            f"jfed plot overlays sweeps that report one metric, got {said}: plot each folder on "
            "its own"
        )
    lines = []
    for folder, table in tables:
        for method in sorted({row["method"] for row in table}):
            repeated = len({f for f, t in tables if any(r["method"] == method for r in t)}) > 1
            label = f"{method} ({folder})" if repeated else method
            lines.append((label, [row for row in table if row["method"] == method]))
    return _utility_panels(lines, metrics.pop(), prefix)


def plot_convergence(
    rows: list[dict], table: list[dict], hyper: tuple[str, ...], prefix: str,
    curve: str = "test_r2_per_round",
) -> tuple[list[str], int]:  # fmt: skip
    """Convergence curves (mean over seeds) of the chosen configurations, one line per eps.

    Returns the written paths and the number of panels (0 and no file when no run has more than
    one round: a one-shot method has no curve to draw)."""
    chosen = {
        (t.get("dataset"), t["method"], t["epsilon"]): tuple(t[h] for h in hyper) for t in table
    }
    curves: dict = defaultdict(list)
    for row in rows:
        key = (row.get("dataset"), row["method"], row["epsilon"])
        values = row.get(curve)
        if (
            values is not None
            and len(values) > 1
            and chosen.get(key) == tuple(row[h] for h in hyper)
        ):
            curves[(row.get("dataset") or "", row["method"], row["epsilon"])].append(values)
    panels = sorted({(d, a) for d, a, _ in curves})
    if not panels:
        return [], 0
    figure, axes = _figure(len(panels))
    means = [np.mean(np.array(c, np.float64), 0) for c in curves.values()]
    low, high = robust_limits(np.concatenate(means))
    for axis, (dataset, method) in zip(axes[0], panels, strict=True):
        keys = sorted(k for k in curves if k[:2] == (dataset, method))
        colors = matplotlib.colormaps["viridis"](np.linspace(0, 0.9, len(keys)))
        seeds = set()
        for color, key in zip(colors, keys, strict=True):
            values = np.array(curves[key], np.float64)
            seeds.add(values.shape[0])
            axis.plot(np.arange(1, values.shape[1] + 1), np.clip(values.mean(0), low, high),
                      color=color, label=f"eps={key[2]:g}")  # fmt: skip
        axis.set_ylim(low, high)
        axis.set_xlabel("round")
        metric = curve.removesuffix("_per_round")
        axis.set_ylabel(METRIC_LABELS.get(metric, metric.replace("_", " ")))
        axis.set_title(
            f"{dataset}: {method}\nmean over {'/'.join(map(str, sorted(seeds)))} seeds; "
            "y-range ignores outliers",
            fontsize=8,
        )
        axis.grid(alpha=0.3)
        _legend(axis)
    return _save(figure, prefix), len(panels)
