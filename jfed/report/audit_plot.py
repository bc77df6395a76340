"""The audit's eps against the certified eps, one point per run (matplotlib).

Each run record that carries an audit (:meth:`jfed.privacy.canary_audit.AuditSummary.to_fields`)
is a point: x its ``epsilon_certified`` (what the accountant proves), y its
``audit_epsilon_lower`` (a lower bound at ``audit_confidence``: a filled circle) or its
``audit_epsilon_estimate`` (an estimate: a hollow square). The diagonal is the bound: a correct
implementation keeps every lower bound on or below it (but for a ``1 - confidence`` share of
runs), so a filled point above it says that the run released more than its certificate allows.
The distance below it is the slack between what is proved and what the canaries could show.
"""

from __future__ import annotations

import textwrap
from collections import defaultdict
from collections.abc import Iterable

import numpy as np
from matplotlib.figure import Figure

from jfed.report.plots import LABEL_WIDTH, _epsilon_label, _save

LOWER = "audit_epsilon_lower"
ESTIMATE = "audit_epsilon_estimate"


def _records(rows) -> list[dict]:
    """``rows``: an iterable of record dicts or a pandas DataFrame of them."""
    if hasattr(rows, "to_dict"):
        rows = rows.to_dict("records")
    return [dict(row) for row in rows]


def _number(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if np.isfinite(number) else None


def audited_points(rows: Iterable[dict]) -> list[tuple[dict, float, float, bool]]:
    """``(row, certified eps, audit eps, is_lower_bound)`` for every row that has both a finite
    ``epsilon_certified`` and an audit eps (its lower bound, else its estimate)."""
    points = []
    for row in _records(rows):
        certified = _number(row.get("epsilon_certified"))
        lower, estimate = _number(row.get(LOWER)), _number(row.get(ESTIMATE))
        audit = lower if lower is not None else estimate
        if certified is not None and audit is not None:
            points.append((row, certified, audit, lower is not None))
    return points


def _audit_label(rows: list[dict]) -> str:
    """'audit eps' with the estimators and confidences of the rows, each named once."""
    details = []
    confidences = sorted({f"{r['audit_confidence']:g}" for r in rows
                          if _number(r.get("audit_confidence")) is not None})  # fmt: skip
    if confidences:
        details.append(f"lower bounds at confidence {', '.join(confidences)}")
    estimators = sorted({str(r["audit_estimator"]) for r in rows if r.get("audit_estimator")})
    if estimators:
        details.append("; ".join(estimators))
    label = "audit eps" + (f" ({'; '.join(details)})" if details else "")
    # the y-axis is shorter than the x-axis's LABEL_WIDTH characters: wrap sooner
    return "\n".join(textwrap.wrap(label, int(0.7 * LABEL_WIDTH)))


def audit_figure(rows) -> Figure:
    """The figure: audit eps (y) against certified eps (x), a colour per method, the diagonal
    y = x. Rows without both numbers are left out and counted in the title.

    Args:
      rows: run records (dicts, or a pandas DataFrame of them, e.g. ``jfed.load_results``).
    """
    records = _records(rows)
    points = audited_points(records)
    # matplotlib's object API, not pyplot: the caller's backend and open figures stay as they are
    figure = Figure(figsize=(7.5, 4.8))
    axis = figure.subplots()
    largest = max([max(c, a) for _, c, a, _ in points], default=1.0) * 1.08
    diagonal = np.array([0.0, largest])
    axis.fill_between(diagonal, diagonal, [largest, largest], color="C3", alpha=0.06, lw=0)
    axis.plot(diagonal, diagonal, "--", color="black", lw=1,
              label="audit eps = certified eps (a bound above: refuted)")  # fmt: skip
    by_method: dict = defaultdict(list)
    for point in points:
        by_method[str(point[0].get("method") or "")].append(point)
    refuted = 0
    for index, (method, mine) in enumerate(sorted(by_method.items())):
        for bound, marker, fill in ((True, "o", f"C{index}"), (False, "s", "none")):
            chosen = [(c, a) for _, c, a, b in mine if b == bound]
            if not chosen:
                continue
            x, y = np.array(chosen).T
            kind = "lower bound" if bound else "estimate"
            axis.plot(x, y, marker, linestyle="none", color=f"C{index}", markerfacecolor=fill,
                      label=f"{method} ({kind})" if method else kind)  # fmt: skip
            if bound:
                refuted += int(np.sum(y > x))
    axis.set_xlim(0.0, largest)
    axis.set_ylim(0.0, largest)
    axis.set_aspect("equal")
    # a record's eps may be its target alone: the axis speaks of the certified one
    certified = [{**p[0], "epsilon": p[1]} for p in points]
    axis.set_xlabel("certified " + _epsilon_label(certified))
    axis.set_ylabel(_audit_label([p[0] for p in points]))
    title = [f"{len(points)} audited run(s); {refuted} lower bound(s) above the certified eps"]
    if len(points) < len(records):
        title.append(f"{len(records) - len(points)} run(s) without an audit or a certified eps")
    axis.set_title("\n".join(title), fontsize=8)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.03, 1.0))  # beside: no point hidden
    figure.tight_layout()
    return figure


def plot_audit(rows, prefix: str) -> list[str]:
    """Write :func:`audit_figure` of ``rows`` as ``prefix.png`` and ``prefix.pdf`` (each whole or
    not at all); returns their paths."""
    return _save(audit_figure(rows), prefix)


__all__ = ["audit_figure", "audited_points", "plot_audit"]
