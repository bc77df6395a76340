"""The demo's printed comparison marks a run that states a qualified guarantee and says what the
qualification is (the figure draws it hollow: tests/test_plots.py)."""

from jfed import demo

BASE = "local (eps, delta)-DP via zCDP"
EXTRA = ("of the ideal real-valued Gaussian, not certified for the float32 sampler (certified up "
         "to eps 41.2)")  # fmt: skip


def _table(qualified_eps=None):
    rows = []
    for name in demo.LABELS:
        for eps in demo.EPSILONS:
            notion = f"{BASE} {EXTRA}" if (name, eps) == qualified_eps else BASE
            rows.append({"method": name, "epsilon": eps, "test_r2_mean": 0.5, "test_r2_se": 0.01,
                         "notion": notion, "reference": 0.86})  # fmt: skip
    return rows


def test_a_qualified_run_is_marked_and_explained():
    name = next(iter(demo.LABELS))
    lines = demo.format_table(_table((name, demo.EPSILONS[-1])))
    row = next(line for line in lines if line.startswith(demo.LABELS[name]))
    assert row.rstrip().endswith("*") and row.count("*") == 1
    note = " ".join(line.strip() for line in lines[lines.index(next(
        line for line in lines if line.startswith("* "))):])  # fmt: skip
    assert note == f"* {demo.LABELS[name]}, eps = {demo.EPSILONS[-1]:g}: the guarantee {EXTRA}"
    header = lines[0]
    assert len(header.rstrip()) == len(row.rstrip()) - 1  # the columns line up, marks aside
    # negative control: no qualified run, no mark and no note
    lines = demo.format_table(_table())
    assert not any("*" in line for line in lines)
