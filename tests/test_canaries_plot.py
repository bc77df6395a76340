"""The audit figure: a point per audited run at (certified eps, audit eps), the diagonal y = x,
lower bounds filled and estimates hollow, and the count of bounds above the diagonal."""

from __future__ import annotations

import os

import numpy as np

from jfed.privacy.canary_audit import ONE_RUN, ONE_SHOT, AuditSummary
from jfed.report import audit_plot


def _row(method, certified, summary):
    return {"method": method, "epsilon_certified": certified, "delta": 1e-5,
            "accountant": "pld", "notion": "central (eps, delta)-DP",
            **summary.to_fields()}  # fmt: skip


ROWS = [
    _row("dp-fedavg", 2.0, AuditSummary(0.4, 1e-5, ONE_RUN, 1000, 0.95)),
    _row("dp-fedavg", 2.0, AuditSummary(3.6, 1e-5, ONE_RUN, 1000, 0.95)),  # refuted
    _row("dp-fedavg", 2.0, AuditSummary(2.5, 1e-5, ONE_SHOT, 1000)),  # an estimate above
    _row("silo", 4.0, AuditSummary(1.0, 1e-5, ONE_RUN, 1000, 0.95)),
    {"method": "ols", "epsilon_certified": None},  # non-private, no audit: left out
]


def test_points_markers_diagonal_and_the_refuted_count(tmp_path):
    points = audit_plot.audited_points(ROWS)
    assert [(c, a, b) for _, c, a, b in points] == [
        (2.0, 0.4, True), (2.0, 3.6, True), (2.0, 2.5, False), (4.0, 1.0, True),
    ]  # fmt: skip
    figure = audit_plot.audit_figure(ROWS)
    axis = figure.axes[0]
    diagonal = axis.lines[0]
    np.testing.assert_array_equal(diagonal.get_xdata(), diagonal.get_ydata())
    faces = {line.get_label(): (line.get_marker(), line.get_markerfacecolor())
             for line in axis.lines[1:]}  # fmt: skip
    assert faces["dp-fedavg (lower bound)"][0] == "o"
    assert faces["dp-fedavg (lower bound)"][1] != "none"
    assert faces["dp-fedavg (estimate)"] == ("s", "none")
    assert set(faces) == {"dp-fedavg (lower bound)", "dp-fedavg (estimate)", "silo (lower bound)"}
    title = axis.get_title()
    assert "4 audited run(s); 1 lower bound(s) above the certified eps" in title
    assert "1 run(s) without an audit" in title
    assert "confidence 0.95" in axis.get_ylabel() and "delta = 1e-05" in axis.get_xlabel()
    paths = audit_plot.plot_audit(ROWS, str(tmp_path / "audit"))
    assert sorted(os.path.basename(p) for p in paths) == ["audit.pdf", "audit.png"]
    assert all(os.path.getsize(p) > 0 for p in paths)


def test_a_frame_of_records_draws_the_same_points():
    import pandas as pd

    frame = pd.DataFrame(ROWS)
    assert len(audit_plot.audited_points(frame)) == 4


def test_a_sweeps_report_draws_the_audit_figure_only_for_audited_runs(tmp_path):
    """``jfed sweep`` / ``jfed plot`` write audit.png and audit.pdf beside the utility plot when a
    run was audited, and remove an earlier sweep's audit figure when none was."""
    from jfed.cli.sweep import _plot_audit

    prefix = str(tmp_path / "audit")
    _plot_audit(ROWS, prefix)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["audit.pdf", "audit.png"]
    _plot_audit([{"method": "ols", "epsilon_certified": None}], prefix)
    assert list(tmp_path.iterdir()) == []
