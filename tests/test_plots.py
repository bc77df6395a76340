"""Utility figures say what they show: clipped points look clipped, a panel mixing privacy
notions names each line's notion, long labels wrap and are kept whole."""

from __future__ import annotations

import pytest

from jfed.report import plots

ISRL = "inter-silo record-level (ISRL) (eps, delta)-DP of each silo's transcript"


def _row(method, eps, mean, notion="local (eps, delta)-DP", dataset="fair"):
    return {"method": method, "dataset": dataset, "epsilon": eps, "test_r2_mean": mean,
            "test_r2_se": 0.01, "seeds": 3, "delta": 1e-5, "accountant": "zcdp",
            "notion": notion}  # fmt: skip


@pytest.fixture
def drawn(monkeypatch, tmp_path):
    """Draw ``lines`` and return the figure's one panel (the files are written too)."""
    figures = []
    save = plots._save

    def keep(figure, prefix):
        figures.append(figure)
        return save(figure, prefix)

    monkeypatch.setattr(plots, "_save", keep)

    def draw(lines):
        paths, panels = plots._utility_panels(lines, "test_r2", str(tmp_path / "utility"))
        assert panels == 1 and all(p.endswith((".png", ".pdf")) for p in paths)
        return figures[-1].axes[0]

    return draw


def _markers(axis) -> list[tuple[str, str]]:
    return [(line.get_marker(), line.get_markerfacecolor()) for line in axis.lines]


def test_a_clipped_point_is_a_hollow_triangle_at_the_edge(drawn):
    rows = [_row("a", e, m) for e, m in ((1, -800.0), (3, 0.5), (10, 0.55), (30, 0.6),
                                         (100, 0.62), (300, 0.63))]  # fmt: skip
    axis = drawn([("a", rows)])
    low, _ = axis.get_ylim()
    hollow = [line for line in axis.lines if line.get_marker() == "v"]
    assert len(hollow) == 1 and hollow[0].get_markerfacecolor() == "none"
    assert hollow[0].get_ydata()[0] == pytest.approx(low)
    assert "hollow triangles" in axis.get_title()
    # negative control: nothing outside the range, no triangle
    axis = drawn([("a", [_row("a", e, 0.5 + 0.01 * e) for e in (1, 3, 10)])])
    assert not [m for m, _ in _markers(axis) if m in ("v", "^")]


def test_mixed_notions_are_named_per_line(drawn):
    local = [_row("modulated", e, 0.5) for e in (1, 10)]
    silos = [_row("noisy-mbsgd", e, 0.6, ISRL) for e in (1, 10)]
    axis = drawn([("modulated", local), ("noisy-mbsgd", silos)])
    labels = [text.get_text() for text in axis.get_legend().get_texts()]
    assert any("[local (eps, delta)-DP]" in t for t in labels)
    assert any("ISRL" in t for t in labels)
    assert "notions differ" in axis.get_xlabel()
    # negative control: one notion is stated once, on the axis, and no line carries it
    axis = drawn([("modulated", [_row("modulated", e, 0.5) for e in (1, 10)])])
    assert "local (eps, delta)-DP" in axis.get_xlabel()
    assert not any("[" in t.get_text() for t in axis.get_legend().get_texts())


def test_a_long_label_wraps_and_stays_in_the_saved_image(drawn):
    axis = drawn([("noisy-mbsgd", [_row("noisy-mbsgd", e, 0.6, ISRL) for e in (1, 10)])])
    label = axis.get_xlabel()
    assert "\n" in label and all(len(line) <= plots.LABEL_WIDTH for line in label.split("\n"))
    figure = axis.get_figure()
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(figure).get_renderer()
    saved = figure.get_tightbbox(renderer)  # what bbox_inches="tight" keeps, in inches
    extent = axis.xaxis.label.get_window_extent(renderer).transformed(
        figure.dpi_scale_trans.inverted()
    )
    assert saved.x0 <= extent.x0 and extent.x1 <= saved.x1 and saved.y0 <= extent.y0


def _baseline(eps=float("inf")):
    return {"method": "mbsgd", "dataset": "fair", "epsilon": eps, "test_r2_mean": 0.7,
            "test_r2_se": 0.01, "seeds": 3, "delta": 0.0, "accountant": "none",
            "notion": "none (non-private)"}  # fmt: skip


def test_a_non_private_baseline_states_no_guarantee(drawn):
    """Overlaid on private lines of one notion, a baseline adds no delta, accountant or notion
    to the axis, and its legend says "(non-private)" once."""
    private = [_row("noisy-mbsgd", e, 0.6, ISRL) for e in (1, 10)]
    other = [{**_row("noisy-mbsgd", e, 0.5, ISRL), "accountant": "pld"} for e in (1, 10)]
    axis = drawn([("noisy-mbsgd", private), ("local-sgd", other),
                  ("mbsgd (non-private)", [_baseline()])])  # fmt: skip
    label = axis.get_xlabel().replace("\n", " ")
    assert "delta = 1e-05;" in label and "accountant: pld, zcdp" in label and ISRL[:40] in label
    assert "none" not in label and "differ" not in label and "delta = 0" not in label
    texts = [t.get_text() for t in axis.get_legend().get_texts()]
    assert [t.count("non-private") for t in texts if "mbsgd (" in t] == [1]
    # negative control: a second private notion is still said to differ
    mixed = drawn([("noisy-mbsgd", private), ("modulated", [_row("modulated", 1, 0.5)]),
                   ("mbsgd", [_baseline()])])  # fmt: skip
    assert "notions differ" in mixed.get_xlabel().replace("\n", " ")


def test_the_legend_lies_beside_the_points(drawn):
    axis = drawn([(f"method-{i}", [_row(f"method-{i}", e, 0.5 + 0.01 * i) for e in (1, 3, 10)])
                  for i in range(4)])  # fmt: skip
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(axis.get_figure()).get_renderer()
    legend = axis.get_legend().get_window_extent(renderer)
    assert legend.x0 >= axis.get_window_extent(renderer).x1  # wholly right of the panel


def test_a_metric_that_was_not_finite_is_not_drawn_and_said(drawn):
    rows = [{**_row("a", e, float("nan")), "test_r2_se": None} for e in (1, 10)]
    rows.append(_row("a", 100, 0.5))
    axis = drawn([("a", rows)])
    assert "2 point(s) not drawn: the metric was not finite" in axis.get_title()
    axis = drawn([("a", rows[:2])])  # nothing finite at all: an empty panel, no log-scale error
    assert "not drawn" in axis.get_title()


def test_an_overlay_of_two_metrics_is_refused_naming_the_folders(tmp_path):
    from jfed._validation import UsageError

    accuracy = [{**_row("ldp-fl", 1, 0.9), "test_accuracy_mean": 0.9}]
    for row in accuracy:
        del row["test_r2_mean"]
    with pytest.raises(UsageError, match=r"one metric, got a: test_r2; b: test_accuracy"):
        plots.plot_overlay([("a", [_row("x", 1, 0.5)]), ("b", accuracy)], str(tmp_path / "u"))
    assert list(tmp_path.iterdir()) == []


QUALIFIED = ("local (eps, delta)-DP of the ideal real-valued Gaussian, not certified for the "
             "float32 sampler (its noise reaches 9 sd, the sensitivity is 10.1 sd: up to 0.3 more "
             "delta; certified up to eps 41.2)")  # fmt: skip


def test_a_qualified_guarantee_is_a_hollow_point_of_its_notion(drawn):
    """A run whose notion qualifies its method's (the ideal mechanism's guarantee only, at a large
    eps) is a hollow circle on its line, under the one notion the axis states: not a second
    notion in a legend as long as the qualification (which squeezed the panel to nothing)."""
    import warnings

    rows = [_row("modulated", 1, 0.1), _row("modulated", 10, 0.5),
            _row("modulated", 100, 0.8, QUALIFIED)]  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "constrained_layout not applied"
        axis = drawn([("modulated", rows), ("dpsgd", [_row("dpsgd", e, 0.7) for e in (1, 10)])])
    hollow = [line for line in axis.lines
              if line.get_marker() == "o" and line.get_markerfacecolor() == "white"]  # fmt: skip
    assert [list(line.get_xdata()) for line in hollow if len(line.get_xdata())] == [[100.0]]
    assert "hollow circles: 1 point(s)" in axis.get_title()
    assert "notions differ" not in axis.get_xlabel().replace("\n", " ")
    assert "local (eps, delta)-DP" in axis.get_xlabel()
    # negative control: the same runs without the qualification have no hollow circle
    axis = drawn([("modulated", [dict(r, notion="local (eps, delta)-DP") for r in rows])])
    assert not [line for line in axis.lines if line.get_marker() == "o"
                and line.get_markerfacecolor() == "white" and len(line.get_xdata())]  # fmt: skip
    assert "hollow circles" not in axis.get_title()


def test_a_long_legend_label_wraps(drawn):
    axis = drawn([("a method with a long name " * 4, [_row("m", e, 0.5) for e in (1, 10)])])
    (text,) = axis.get_legend().get_texts()
    lines = text.get_text().split("\n")
    assert len(lines) > 1 and all(len(line) <= plots.LEGEND_WIDTH for line in lines)
