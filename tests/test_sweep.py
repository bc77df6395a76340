"""Sweeps: vmapped equals one-by-one, resume after interruption, validation-only tuning, plots.

The sweeps here are sized so that few programs are compiled: every shared-noise one-shot sweep
runs slices of two units of three eps (``[2, 3]``) or of two eps (``[2, 2]``), so the runner's
cache of executables serves most of them (the claims do not depend on the slice size)."""

import contextlib
import dataclasses
import io
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
ITERATIVE = ModulatedIterative(dataset="modechoice", rounds=3)
THREE_EPS = [0.5, 2.0, 8.0]
TWO_RIDGES = {"ridge": [0.5, 1.0]}


@pytest.fixture(scope="module")
def task():
    return load_regression("modechoice")


@pytest.fixture(scope="module")
def iterative_sweep(task, tmp_path_factory):
    """``(experiment, configs, rows(share_noise))``: the iterative estimator over 2 eps x 2 seeds
    x 2 step scales, each sweep run once for the tests that read it."""
    experiment = build_experiment(ITERATIVE, task=task)
    configs = configurations(ITERATIVE, [1.0, 10.0], 2, {"step_scale": [0.5, 1.0]})
    swept = {}

    def rows(share_noise: bool) -> list[dict]:
        if share_noise not in swept:
            path = str(tmp_path_factory.mktemp("iterative") / "runs.jsonl")
            swept[share_noise] = run_sweep(experiment, configs, path, slice_size=4,
                                           progress=False, share_noise=share_noise)  # fmt: skip
        return swept[share_noise]

    return experiment, configs, rows


@pytest.mark.parametrize("share_noise", [True, False])
def test_vmapped_sweep_equals_runs_one_by_one(task, iterative_sweep, share_noise):
    runner, configs, sweep_rows = iterative_sweep
    rows = sweep_rows(share_noise)
    assert len(rows) == len(configs)
    assert all(row["shared_noise"] is share_noise for row in rows)
    by_key = {config_key(c): c for c in configs}
    for row in rows:
        config = by_key[row["config_key"]]
        hp, fields = runner.calibrate(config)
        state, infos = simulate(runner.algorithm, task.train, hp, jax.random.key(row["seed"]),
                                ITERATIVE.rounds)  # fmt: skip
        single = runner.evaluate(jax.device_get(runner.outputs(state, infos)), config)
        assert row["sigma"] == fields["sigma"]  # one host calibration, in one process: same bits
        assert row["test_r2"] == pytest.approx(single["test_r2"], rel=1e-4, abs=1e-5)
        assert row["validation_r2"] == pytest.approx(single["validation_r2"], rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("share_noise, rows_per_slice", [(True, 6), (False, 4)])
def test_resume_after_interruption_loses_and_duplicates_nothing(
    task, tmp_path, share_noise, rows_per_slice
):
    # a slice of 6 runs holds two units of 3 eps with shared noise; 4 single runs without
    adapter = build_experiment(ONE_SHOT, task=task)
    configs = configurations(ONE_SHOT, THREE_EPS, 2, TWO_RIDGES)  # 12 runs
    options = dict(slice_size=rows_per_slice, progress=False, share_noise=share_noise)
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

    configs = configurations(ONE_SHOT, THREE_EPS, 2, TWO_RIDGES)
    first = build_experiment(ONE_SHOT, task=task)
    run_sweep(first, configs, str(tmp_path / "first.jsonl"), slice_size=6, progress=False)
    compiled = runner._compiled.cache_info().currsize
    second = build_experiment(ONE_SHOT, task=task)  # as a new script would build it
    rows = run_sweep(second, configs, str(tmp_path / "second.jsonl"), slice_size=6,
                     progress=False)  # fmt: skip
    assert program(second) is program(first)
    assert runner._compiled.cache_info().currsize == compiled  # one executable served both
    assert len({row["compile_seconds"] for row in rows}) == 1


def test_extending_the_eps_grid_runs_only_the_new_eps(task, tmp_path):
    # resumed units hold only the missing eps (shorter units than a fresh sweep's)
    adapter = build_experiment(ONE_SHOT, task=task)
    path = str(tmp_path / "grown.jsonl")
    options = dict(slice_size=4, progress=False)
    run_sweep(adapter, configurations(ONE_SHOT, THREE_EPS[:2], 2, TWO_RIDGES), path, **options)
    grown = run_sweep(adapter, configurations(ONE_SHOT, THREE_EPS, 2, TWO_RIDGES), path,
                      resume=True, **options)  # fmt: skip
    fresh = run_sweep(adapter, configurations(ONE_SHOT, THREE_EPS, 2, TWO_RIDGES),
                      str(tmp_path / "fresh.jsonl"), slice_size=6, progress=False)  # fmt: skip
    assert len(read_rows(path)) == len(grown) == 12
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
        rows = run_sweep(adapter, configs, str(tmp_path / f"{name}.jsonl"), slice_size=4,
                         progress=False)  # fmt: skip
        chosen.append(choose(rows, ("ridge",), "per-eps"))
    assert chosen[0] == chosen[1]


def test_plots_from_a_results_file(iterative_sweep, tmp_path):
    # two data sets, one panel each: the second is the first's rows under another name (what
    # is drawn does not depend on where the numbers came from)
    _, _, sweep_rows = iterative_sweep
    rows = sweep_rows(True)
    rows = rows + [dict(row, dataset="co2", config_key=f"co2-{row['config_key']}") for row in rows]
    table = tuned_table(rows, ("step_scale",))
    paths, panels = plot_utility(table, str(tmp_path / "utility"))
    assert panels == 2 and all((tmp_path / p).stat().st_size > 1000 for p in paths)
    paths, panels = plot_convergence(rows, table, ("step_scale",), str(tmp_path / "convergence"))
    assert panels == 2 and [p.rsplit(".", 1)[1] for p in paths] == ["png", "pdf"]


def test_sweep_and_plot_commands(tmp_path, capsys):
    out = str(tmp_path / "sweep")
    argv = ["sweep", "modulated-one-shot", "--dataset", "modechoice", "--epsilon", "1,10",
            "--seeds", "2", "--grid", "ridge=0.5,2", "--out", out, "--no-progress",
            "--extend-edges", "0", "--slice-size", "4"]  # fmt: skip
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


SILO_SWEEP = NoisyMBSGD(rounds=4, batch=5, calibration="theorem")


@pytest.fixture(scope="module")
def silo_sweep(tmp_path_factory):
    """``(status, printed, folder, calls)`` of one ``jfed sweep noisy-mbsgd`` over 2 eps x 2 clips
    x 2 step sizes x 2 seeds (16 runs), with the eps each calibration call received."""
    from jfed.methods import silo

    calls = []
    original = silo.CalibratedExperiment.calibrate_many

    def counting(self, config, epsilons, delta):
        calls.append((config.gradient_clip, tuple(epsilons)))
        return original(self, config, epsilons, delta)

    out = tmp_path_factory.mktemp("silo") / "sweep"
    argv = ["sweep", "noisy-mbsgd", "--epsilon", "2,8", "--seeds", "2", "--rounds", "4",
            "--grid", "step_size=0.5,2", "--grid", "gradient_clip=0.5,1", "--set", "batch=5",
            "--calibration", "theorem", "--out", str(out), "--no-progress",
            "--extend-edges", "0", "--slice-size", "16"]  # fmt: skip
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(printed):
        patch.setattr(silo.CalibratedExperiment, "calibrate_many", counting)
        status = main(argv)
    return status, printed.getvalue(), out, calls


def test_silo_sweep_tunes_on_training_loss_and_reports_test_error(silo_sweep, tmp_path):
    status, printed, out, _ = silo_sweep
    assert status == 0
    assert "test error" in printed
    rows = read_rows(str(out / "runs.jsonl"))
    assert len(rows) == 16 and {r["selection_metric"] for r in rows} == {"excess_train_risk"}
    assert all(len(r["test_error_per_round"]) == 4 for r in rows)
    tuned = (out / "tuned.csv").read_text()
    assert "fixed on excess_train_risk" in tuned and "test_error_mean" in tuned
    assert (out / "utility.png").stat().st_size > 1000
    assert main(["sweep", "noisy-mbsgd", "--set", "bogus=1", "--out", str(tmp_path / "y")]) == 2


def test_silo_sweep_calibrates_all_eps_of_a_clip_together(silo_sweep):
    from jfed.methods import silo

    _, _, out, calls = silo_sweep
    # every call calibrates all eps of its clip together (an exact run's grid, once narrowed to
    # the largest noise, calibrates them together again)
    assert sorted(set(calls)) == [(0.5, (2.0, 8.0)), (1.0, (2.0, 8.0))]
    experiment = build_experiment(SILO_SWEEP)
    # on the sweep's grid (narrowed to the largest noise of its eps and clips), eps 8 alone
    experiment.prepare([SILO_SWEEP.replace(epsilon=e, gradient_clip=c)
                        for e in (2.0, 8.0) for c in (0.5, 1.0)])  # fmt: skip
    ((alone, _),) = silo.CalibratedExperiment.calibrate_many(experiment, SILO_SWEEP, [8.0],
                                                             experiment.delta)  # fmt: skip
    rows = read_rows(str(out / "runs.jsonl"))
    row = next(r for r in rows if r["epsilon"] == 8.0 and r["gradient_clip"] == 1.0)
    assert row["sigma"] == pytest.approx(float(np.max(alone)))


def test_a_formula_calibration_says_its_eps_is_a_target_not_certified(silo_sweep):
    """The summary of a formula-calibrated run (a row of the theorem-calibrated sweep above: runs
    and sweeps write one record schema) labels its eps as the formula's target and puts the
    accountant's eps of its noise beside it; a record whose eps an accountant certified states
    that accountant (negative control: no such label)."""
    from jfed.methods.silo import privacy_text

    _, _, out, _ = silo_sweep
    record = next(r for r in read_rows(str(out / "runs.jsonl")) if r["epsilon"] == 2.0)
    line = privacy_text(record)
    assert line.startswith("target eps=2 (formula, not certified)")
    assert "PLD with Poisson sampling gives its noise eps = " in line
    assert "[calibration: seed-theorem-formula]" in line
    certified = dict(record, epsilon_certified=2.0, accountant="pld-poisson-replace-one")
    line = privacy_text(certified)
    assert "not certified" not in line and "[accountant: pld-poisson-replace-one]" in line


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
