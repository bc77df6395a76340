"""Sweeps: vmapped equals one-by-one, resume after interruption, validation-only tuning, plots."""

import dataclasses
import json

import jax
import numpy as np
import pytest

from jfed.cli.main import main
from jfed.data import load_regression
from jfed.engine import simulate
from jfed.methods import ModulatedIterative, ModulatedOneShot, NoisyMBSGD, build_experiment
from jfed.report.plots import plot_convergence, plot_utility
from jfed.sweep import choose, config_key, configurations, read_rows, run_sweep, tuned_table
from jfed.sweep.tuning import beyond_edge, edge_choices, sweep_until_interior

ONE_SHOT = ModulatedOneShot(dataset="modechoice")


@pytest.fixture(scope="module")
def task():
    return load_regression("modechoice")


@pytest.fixture(scope="module")
def one_shot(task):
    return build_experiment(ONE_SHOT, task=task)


@pytest.mark.parametrize("share_noise", [True, False])
def test_vmapped_sweep_equals_runs_one_by_one(task, tmp_path, share_noise):
    base = ModulatedIterative(dataset="modechoice", rounds=3)
    runner = build_experiment(base, task=task)
    configs = configurations(base, [1.0, 10.0], 2, {"step_scale": [0.5, 1.0]})
    path = str(tmp_path / "runs.jsonl")
    rows = run_sweep(runner, configs, path, progress=False, share_noise=share_noise)
    assert len(rows) == len(configs)
    assert all(row["shared_noise"] is share_noise for row in rows)
    by_key = {config_key(c): c for c in configs}
    for row in rows:
        config = by_key[row["config_key"]]
        hp, fields = runner.calibrate(config)
        state, infos = simulate(runner.algorithm, task.train, hp, jax.random.key(row["seed"]), 3)
        single = runner.evaluate(jax.device_get(runner.outputs(state, infos)), config)
        assert row["sigma"] == fields["sigma"]
        assert row["test_r2"] == pytest.approx(single["test_r2"], rel=1e-4, abs=1e-5)
        assert row["validation_r2"] == pytest.approx(single["validation_r2"], rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("share_noise, rows_per_slice", [(True, 3), (False, 4)])
def test_resume_after_interruption_loses_and_duplicates_nothing(
    task, tmp_path, share_noise, rows_per_slice
):
    # a slice of 4 runs holds one unit of 3 eps with shared noise, 4 single runs without
    adapter = build_experiment(ONE_SHOT, task=task)
    configs = configurations(ONE_SHOT, [0.5, 2.0, 8.0], 2, {"ridge": [0.5, 1.0]})  # 12 runs
    options = dict(slice_size=4, progress=False, share_noise=share_noise)
    full = run_sweep(adapter, configs, str(tmp_path / "full.jsonl"), **options)

    class InterruptError(Exception):
        pass

    def stop_after_first(index):
        if index == 0:
            raise InterruptError

    path = str(tmp_path / "interrupted.jsonl")
    with pytest.raises(InterruptError):
        run_sweep(adapter, configs, path, on_slice=stop_after_first, **options)
    assert len(read_rows(path)) == rows_per_slice
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('{"config_key": "torn by kill -9')  # a line cut mid-write
    with pytest.raises(ValueError, match="exists"):
        run_sweep(adapter, configs, path, **options)
    resumed = run_sweep(adapter, configs, path, resume=True, **options)
    assert len(resumed) == len(configs)
    assert len({row["config_key"] for row in resumed}) == len(configs)  # no duplicates

    def table(rows):
        return {r["config_key"]: (r["test_r2"], r["validation_r2"], r["sigma"]) for r in rows}

    assert table(resumed) == table(full)


def test_rerunning_a_sweep_with_a_new_experiment_does_not_recompile(task, tmp_path):
    from jfed.sweep import runner

    def program(adapter):
        plan = runner.ExecutionPlan.for_backend().fitted(task.train.n_clients)
        unit = runner._unit_function(adapter.shared_noise_algorithm, 1, plan, adapter.outputs, True)
        return runner._program(unit, 1)

    configs = configurations(ONE_SHOT, [0.5, 2.0, 4.0], 2, {"ridge": [0.5, 1.0]})
    first = build_experiment(ONE_SHOT, task=task)
    run_sweep(first, configs, str(tmp_path / "first.jsonl"), progress=False)
    compiled = runner._compiled.cache_info().currsize
    second = build_experiment(ONE_SHOT, task=task)  # as a new script would build it
    rows = run_sweep(second, configs, str(tmp_path / "second.jsonl"), progress=False)
    assert program(second) is program(first)
    assert runner._compiled.cache_info().currsize == compiled  # one executable served both
    assert len({row["compile_seconds"] for row in rows}) == 1


def test_extending_the_eps_grid_runs_only_the_new_eps(task, tmp_path):
    # resumed units hold only the missing eps (shorter units than a fresh sweep's)
    adapter = build_experiment(ONE_SHOT, task=task)
    path = str(tmp_path / "grown.jsonl")
    run_sweep(adapter, configurations(ONE_SHOT, [0.5, 2.0], 2), path, progress=False)
    grown = run_sweep(adapter, configurations(ONE_SHOT, [0.5, 2.0, 8.0], 2), path, resume=True,
                      progress=False)  # fmt: skip
    fresh = run_sweep(adapter, configurations(ONE_SHOT, [0.5, 2.0, 8.0], 2),
                      str(tmp_path / "fresh.jsonl"), progress=False)  # fmt: skip
    assert len(read_rows(path)) == len(grown) == 6
    by_key = {row["config_key"]: row for row in fresh}
    for row in grown:
        assert row["test_r2"] == pytest.approx(by_key[row["config_key"]]["test_r2"], abs=1e-5)


def test_choice_reads_only_the_validation_metric():
    rows = []
    for seed in range(3):
        for ridge, validation, test in ((0.5, 0.8, 0.1), (2.0, 0.6, 0.9)):  # test is poisoned
            rows.append(dict(config_key=f"{seed}-{ridge}", method="a", epsilon=1.0, seed=seed,
                             ridge=ridge, validation_r2=validation, test_r2=test))  # fmt: skip
    assert choose(rows, ("ridge",), "per-eps")[(None, "a", 1.0)] == (0.5,)
    (row,) = tuned_table(rows, ("ridge",), "fixed")
    assert row["ridge"] == 0.5 and row["test_r2_mean"] == pytest.approx(0.1)
    assert row["choice_rule"] == "fixed on validation_r2 (median)"


def test_poisoning_the_test_split_does_not_change_the_choice(task, tmp_path):
    rng = np.random.default_rng(0)
    poisoned = dataclasses.replace(
        task, test=(task.test[0], rng.normal(size=task.test[1].shape) * 100)
    )
    configs = configurations(ONE_SHOT, [2.0, 20.0], 2, {"ridge": [0.1, 1.0, 10.0]})
    chosen = []
    for name, which in (("clean", task), ("poisoned", poisoned)):
        adapter = build_experiment(ONE_SHOT, task=which)
        rows = run_sweep(adapter, configs, str(tmp_path / f"{name}.jsonl"), progress=False)
        chosen.append(choose(rows, ("ridge",), "per-eps"))
    assert chosen[0] == chosen[1]


def test_plots_from_a_results_file(task, tmp_path):
    rows = []
    for dataset in ("modechoice", "co2"):
        base = ModulatedIterative(dataset=dataset, rounds=2)
        rows += run_sweep(
            build_experiment(base, task=load_regression(dataset)),
            configurations(base, [1.0, 10.0], 2, {"step_scale": [0.5, 1.0]}),
            str(tmp_path / f"{dataset}.jsonl"),
            progress=False,
        )
    table = tuned_table(rows, ("step_scale",))
    paths, panels = plot_utility(table, str(tmp_path / "utility"))
    assert panels == 2 and all((tmp_path / p).stat().st_size > 1000 for p in paths)
    paths, panels = plot_convergence(rows, table, ("step_scale",), str(tmp_path / "convergence"))
    assert panels == 2 and [p.rsplit(".", 1)[1] for p in paths] == ["png", "pdf"]


def test_sweep_and_plot_commands(tmp_path, capsys):
    out = str(tmp_path / "sweep")
    argv = ["sweep", "modulated-one-shot", "--dataset", "modechoice", "--epsilon", "1,10",
            "--seeds", "2", "--grid", "ridge=0.5,2", "--out", out, "--no-progress",
            "--extend-edges", "0"]  # fmt: skip
    assert main(argv) == 0
    assert "test R^2" in capsys.readouterr().out
    for name in ("runs.jsonl", "runs.csv", "tuned.csv", "utility.png", "utility.pdf"):
        assert (tmp_path / "sweep" / name).stat().st_size > 0
    assert main(argv) == 2  # exists without --resume
    assert main([*argv, "--resume"]) == 0
    assert len(read_rows(out + "/runs.jsonl")) == 8
    assert main(["plot", out, "--tune", "per-eps"]) == 0
    tuned = (tmp_path / "sweep" / "tuned.csv").read_text()
    assert "per-eps on validation_r2" in tuned
    assert main(["sweep", "dpsgd", "--grid", "bogus=1", "--out", str(tmp_path / "x")]) == 2
    json.loads((tmp_path / "sweep" / "runs.jsonl").read_text().splitlines()[0])


def test_silo_sweep_tunes_on_training_loss_and_reports_test_error(tmp_path, capsys):
    out = str(tmp_path / "silo")
    argv = ["sweep", "noisy-mbsgd", "--epsilon", "2,8", "--seeds", "2", "--rounds", "4",
            "--grid", "step_size=0.5,2", "--set", "batch=5", "--calibration", "theorem",
            "--out", out, "--no-progress", "--extend-edges", "0"]  # fmt: skip
    assert main(argv) == 0
    assert "test error" in capsys.readouterr().out
    rows = read_rows(out + "/runs.jsonl")
    assert len(rows) == 8 and {r["selection_metric"] for r in rows} == {"excess_train_risk"}
    assert all(len(r["test_error_per_round"]) == 4 for r in rows)
    tuned = (tmp_path / "silo" / "tuned.csv").read_text()
    assert "fixed on excess_train_risk" in tuned and "test_error_mean" in tuned
    assert (tmp_path / "silo" / "utility.png").stat().st_size > 1000
    assert main(["sweep", "noisy-mbsgd", "--set", "bogus=1", "--out", str(tmp_path / "y")]) == 2


def test_silo_sweep_calibrates_all_eps_of_a_clip_together(tmp_path, monkeypatch):
    from jfed.methods import silo

    calls = []
    original = silo.CalibratedExperiment.calibrate_many

    def counting(self, config, epsilons, delta):
        calls.append(tuple(epsilons))
        return original(self, config, epsilons, delta)

    monkeypatch.setattr(silo.CalibratedExperiment, "calibrate_many", counting)
    base = NoisyMBSGD(rounds=3, batch=5, calibration="theorem")
    adapter = build_experiment(base)
    configs = configurations(base, [1.0, 4.0, 16.0], 1,
                             {"gradient_clip": [0.5, 1.0], "step_size": [1.0]})  # fmt: skip
    rows = run_sweep(adapter, configs, str(tmp_path / "runs.jsonl"), progress=False)
    assert sorted(calls) == [(1.0, 4.0, 16.0), (1.0, 4.0, 16.0)]  # one call per clip
    ((alone, _),) = original(build_experiment(base), base, [4.0], adapter.delta)
    row = next(r for r in rows if r["epsilon"] == 4.0 and r["gradient_clip"] == 1.0)
    assert row["sigma"] == pytest.approx(float(np.max(alone)))


def _rows(scores: dict, seeds: int = 5, epsilons=(1.0,)) -> list[dict]:
    """Synthetic sweep rows: validation value per (ridge, eps, seed) from ``scores``."""
    return [
        dict(
            config_key=f"{r}-{e}-{s}",
            method="a",
            epsilon=e,
            seed=s,
            ridge=r,
            validation_r2=scores[r](e, s),
            test_r2=0.0,
        )
        for r in scores
        for e in epsilons
        for s in range(seeds)
    ]


def test_median_choice_resists_an_outlier_that_the_mean_follows():
    """One-shot R^2 is heavy-tailed: one run of -800 must not decide. Negative control: the mean
    is decided by it."""
    rows = _rows({
        1.0: lambda e, s: 0.60 if s else -800.0,  # better in 4 of 5 seeds, one disaster
        2.0: lambda e, s: 0.50,
    })  # fmt: skip
    assert choose(rows, ("ridge",), "fixed", statistic="median")[(None, "a", 1.0)] == (1.0,)
    assert choose(rows, ("ridge",), "fixed", statistic="mean")[(None, "a", 1.0)] == (2.0,)
    (row,) = tuned_table(rows, ("ridge",), "fixed", statistic="trimmed-mean")
    assert row["choice_rule"] == "fixed on validation_r2 (trimmed-mean)"


def test_edge_choices_and_the_step_past_them():
    rows = _rows({0.5: lambda e, s: 0.1, 1.0: lambda e, s: 0.2, 2.0: lambda e, s: 0.3})
    table = tuned_table(rows, ("ridge",), "fixed")
    (edge,) = edge_choices(rows, table, ("ridge",))
    assert (edge["name"], edge["value"], edge["side"]) == ("ridge", 2.0, "upper")
    assert beyond_edge([0.5, 1.0, 2.0], "upper") == 4.0
    assert beyond_edge([0.5, 1.0, 2.0], "lower") == 0.25
    assert beyond_edge([0.0, 0.5], "lower") == -0.5  # arithmetic when the grid reaches 0
    interior = _rows({0.5: lambda e, s: 0.1, 1.0: lambda e, s: 0.3, 2.0: lambda e, s: 0.2})
    assert edge_choices(interior, tuned_table(interior, ("ridge",), "fixed"), ("ridge",)) == []


def test_sweep_until_interior_extends_to_the_peak_and_stops_at_the_range():
    """The validation score peaks at ridge = 8: a grid of 0.5..2 grows 4, 8, 16 and stops with 8
    inside. A grid that would step below the allowed range (ridge >= 0.3 here) is reported."""
    ran = []

    def score(ridge):
        return -abs(np.log2(ridge) - 3.0)

    def run_grid(grid):
        ran.append(list(grid["ridge"]))
        return _rows({r: (lambda e, s, r=r: score(r)) for r in grid["ridge"]}, seeds=2)

    def tune(rows):
        return tuned_table(rows, ("ridge",), "fixed")

    _, table, notes = sweep_until_interior(run_grid, {"ridge": [0.5, 1.0, 2.0]}, tune)
    assert table[0]["ridge"] == 8.0 and ran[-1] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0]
    assert len(notes) == 3 and "grows to 16" in notes[-1]

    def low_score_run(grid):
        return _rows({r: (lambda e, s, r=r: -r) for r in grid["ridge"]}, seeds=2)

    _, table, notes = sweep_until_interior(
        low_score_run, {"ridge": [0.5, 1.0]}, tune, allowed=lambda name, value: value >= 0.3
    )
    assert table[0]["ridge"] == 0.5 and "outside the allowed range" in notes[-1]
    _, _, notes = sweep_until_interior(low_score_run, {"ridge": [0.5, 1.0]}, tune,
                                       max_extensions=0)  # fmt: skip
    assert notes == ["a: the choice ridge = 0.5 is on the lower edge of the grid (the extensions "
                     "ran out)"]  # fmt: skip


def test_plotting_leaves_the_callers_matplotlib_backend_alone(tmp_path):
    """Plots are drawn with matplotlib's object API: importing and using jfed's plotting changes
    neither the backend a notebook chose nor pyplot's open figures."""
    import subprocess
    import sys

    script = (
        "import matplotlib; matplotlib.use('svg'); import matplotlib.pyplot as plt\n"
        "plt.figure()\n"
        "from jfed.report import plots\n"
        "rows = [{'method': 'm', 'dataset': 'd', 'epsilon': e, 'seeds': 2, 'test_r2_mean': 0.5,\n"
        "         'test_r2_se': 0.1, 'delta': 1e-5, 'accountant': 'pld', 'notion': 'central'}\n"
        "        for e in (1.0, 2.0)]\n"
        f"plots.plot_utility(rows, {str(tmp_path / 'u')!r}, 'test_r2')\n"
        "print(matplotlib.get_backend(), len(plt.get_fignums()))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout.split()  # fmt: skip
    assert out == ["svg", "1"]
    assert (tmp_path / "u.png").stat().st_size > 0
