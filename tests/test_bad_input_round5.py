"""Bad input, round five (issue 55): every command a new user tried gets one line naming its real
cause (exit 2) or runs correctly; the class behind each is closed where it was opened (resources
checked before any work, overflowing derivations blamed on the flag that caused them, data files
checked against their format, record names refused at registration); a run whose stderr is not
a terminal says how far it is at least every 30 s.

Most refusals happen before JAX is imported or anything compiles; the few that need the data or
the experiment stop before compiling. Tests of what now runs check the piece that was wrong
(an overflow probability, a grid, a sampler's delta) rather than a whole compiled run.
"""

import dataclasses
import errno
import json
import os
import pickle

import numpy as np
import pytest
from data_files import write_cifar, write_leaf

from jfed.cli.main import main


@pytest.fixture
def places(tmp_path):
    """An empty folder, a plain file, CIFAR-10's python batches and LEAF FEMNIST files."""
    folder = tmp_path / "work"
    folder.mkdir()
    plain = tmp_path / "plain.txt"
    plain.write_text("not a folder\n")
    return {"tmp": str(folder), "file": str(plain)}


def _snapshot(root) -> set[str]:
    return {os.path.join(d, name) for d, subs, files in os.walk(root) for name in subs + files}


def _refused(argv: list[str], message: str, capsys) -> str:
    """``argv`` exits 2 with one line holding ``message`` and no traceback; the line."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("jfed: error:") and "\n" not in err, err
    assert message in err, err
    assert "Traceback" not in captured.err and captured.out == ""
    return err


SCAFFOLD_DISK = ["run", "scaffold", "--rounds", "1", "--clients", "10", "--cohort-size", "2",
                 "--client-state", "disk", "--client-state-dir"]  # fmt: skip

DDGAUSS = ["run", "dp-fedavg", "--noise", "ddgauss"]
SEPARATED = ["run", "dp-ftrl", "--schedule", "min-separation", "--separation"]

# refused before JAX is imported: the flags and the declarations alone
BEFORE_ANY_WORK = [
    # the table's folder is opened inside the compiled run (a host callback): checked before
    ([*SCAFFOLD_DISK, ""], "expected --client-state-dir FOLDER, got an empty path"),
    ([*SCAFFOLD_DISK, "{file}/table"], "plain.txt is a file, not a folder"),
    ([*SCAFFOLD_DISK, "/proc/jfed-table"], "cannot write --client-state-dir /proc/jfed-table"),
    # a model that cannot read the data set's records
    (
        ["run", "dp-fedavg", "--dataset", "cifar10", "--data-dir", "{tmp}", "--model", "char-lstm"],
        "--model char-lstm reads sequences of characters, which --dataset cifar10 does not "
        "hold: use --model logistic, mlp or cifar-cnn",
    ),
    (
        ["run", "fedavg-sampled", "--dataset", "shakespeare", "--model", "logistic"],
        "--model logistic reads records of numbers (not character sequences), which --dataset "
        "shakespeare does not hold: use --model char-lstm or transformer-lm",
    ),
    (["run", "scaffold", "--model", "femnist-cnn"], "--model femnist-cnn reads 28x28 grey"),
    # more silos than records (a ZeroDivisionError in the cost check before)
    (
        ["run", "noisy-mbsgd", "--silos", "1000000", "--dataset", "fair-sorted"],
        "expected --silos <= 5093 with --dataset fair-sorted (its 5093 training records",
    ),
    # more shares needed than the population has: every round withheld
    (
        [*DDGAUSS, "--min-clients", "1000", "--cohort-size", "5", "--clients", "100"],
        "expected --min-clients <= --clients=100",
    ),
    # --separation is the cause (not --cohort-size, not --noise)
    (
        [*SEPARATED, "1000", "--clients", "100", "--cohort-size", "10"],
        "expected --separation <= 10 with 100 clients and --cohort-size 10",
    ),
    (
        ["run", "blt-dp-ftrl", "--schedule", "min-separation", "--separation", "1000"],
        "expected --separation <= 100 with 10000 clients and --cohort-size 100",
    ),
    # FEMNIST's natural clients are its writers: --clients would be ignored
    (
        ["run", "dp-fedavg", "--dataset", "femnist", "--data-dir", "{tmp}", "--clients", "7"],
        "--clients applies not with --dataset shakespeare (its clients are the plays' speaking "
        "roles) nor femnist's --split natural (one client per writer)",
    ),
    # a pure eps-DP randomizer has no delta to audit
    (
        ["audit", "two-point", "--epsilon", "1", "--delta", "0.5"],
        "--delta applies only to the (eps, delta)-DP randomizers (gaussian, modulated): "
        "two-point is pure eps-DP",
    ),
    (["audit", "ldp-fl", "--epsilon", "1", "--delta", "1e-5"], "ldp-fl's two-point randomizer"),
    # Ditto reads its table inside the compiled run: not offered off the device
    (
        ["run", "ditto", "--client-state", "host"],
        "argument --client-state: invalid choice: 'host' (choose from 'device')",
    ),
]


@pytest.mark.parametrize(
    "argv, message", BEFORE_ANY_WORK, ids=[" ".join(a)[:70] for a, _ in BEFORE_ANY_WORK]
)
def test_refused_before_any_work(argv, message, places, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(places["tmp"])
    before = _snapshot(tmp_path)
    _refused([a.format(**places) for a in argv], message.format(**places), capsys)
    assert _snapshot(tmp_path) == before  # nothing written, not even the table's folder


def test_a_writable_client_state_folder_passes_the_check(tmp_path):
    """Negative control of the folder check: a folder that can be made passes (and is not
    made by the check)."""
    from jfed.cli.checks import check_output_folder

    check_output_folder("--client-state-dir", str(tmp_path / "new" / "table"))
    assert not (tmp_path / "new").exists()


def test_every_model_fits_its_own_data_set():
    """The defaults and each model's own data sets pass the fit check (negative control)."""
    from jfed.methods.declared.dp_fedavg import DEFAULT_MODELS, MODEL_INPUTS, check_model_fits

    for dataset, model in DEFAULT_MODELS.items():
        check_model_fits(model, dataset)
    for model, (_, datasets) in MODEL_INPUTS.items():
        for dataset in datasets:
            check_model_fits(model, dataset)


def test_ditto_help_offers_only_the_device(capsys):
    assert main(["run", "ditto", "--help"]) == 0
    shown = capsys.readouterr().out
    assert "--client-state {device}" in shown and "{device,host,disk}" not in shown
    assert main(["run", "scaffold", "--help"]) == 0
    assert "--client-state {device,host,disk}" in capsys.readouterr().out


# ------------------------------------------------------------ costs and overflows, named


@pytest.fixture
def cpu_budget(monkeypatch):
    """A CPU's work budget and 16 GiB, as docs/reference/cli.md says."""
    import jfed.methods.cost as cost

    monkeypatch.setattr(cost, "available_memory", lambda: 16 * 2**30)
    monkeypatch.setattr(cost, "memory_budget", lambda: 16 * 2**30)
    monkeypatch.setattr(cost, "work_budget", lambda: cost.MAX_WORK["cpu"])


def test_a_long_dp_ftrl_run_counts_its_noise_matrices(cpu_budget, capsys):
    """R x m float64 matrices of the correlated noise (14 TB at R = 10^6: RESOURCE_EXHAUSTED
    after the checks before): refused naming --rounds and the most that fit."""
    argv = ["run", "dp-ftrl", "--rounds", "1000000", "--schedule", "min-separation"]
    err = _refused(argv, "--rounds=1000000 needs about", capsys)
    assert "TiB of host memory" in err and "the largest --rounds that fits is" in err
    largest = int(err.rsplit(" ", 1)[1])
    from jfed.methods import method
    from jfed.methods.cost import Budget, CostPlan

    declared = method("dp-ftrl")
    budget = Budget(16 * 2**30, host_memory=16 * 2**30)
    config = declared.config(rounds=largest, schedule="min-separation")
    assert budget.excess(declared.cost(config, CostPlan(4096))) is None
    too_many = dataclasses.replace(config, rounds=2 * largest)
    assert budget.excess(declared.cost(too_many, CostPlan(4096))) is not None


def test_a_formula_calibration_at_a_huge_eps_names_epsilon(cpu_budget, capsys):
    """The reference eps of the theorem's noise is composed by PLD, whose size grows as the
    noise shrinks (1 / eps): --epsilon is named, not --batch or --rounds."""
    argv = ["run", "noisy-mbsgd", "--calibration", "theorem", "--epsilon", "1e6"]
    err = _refused(argv, "--epsilon=1e+06 needs about", capsys)
    assert "the largest --epsilon that fits is about" in err and "--batch" not in err


def test_the_coupling_share_names_epsilon_and_its_limit():
    """(1 + e^eps) T grows past any delta: refused naming --epsilon and ln(delta / T - 1); a
    share below delta passes (negative control) and leaves delta minus it."""
    import math

    from jfed._validation import UsageError
    from jfed.privacy.discrete_accounting import coupling_delta, delta_after_coupling

    variation = 1e-70
    with pytest.raises(UsageError, match=r"expected --epsilon below 149\.7 .* --noise float"):
        delta_after_coupling(1e6, variation, 1e-5)
    limit = math.log(1e-5 / variation - 1.0)
    left = delta_after_coupling(0.99 * limit, variation, 1e-5)
    assert left == 1e-5 - coupling_delta(0.99 * limit, variation) and left > 0


def test_the_exact_estimation_mean_calibrates_at_eps_1e6():
    """math.exp(eps) overflowed in the discrete Gaussian's delta (OverflowError at eps 1e6):
    a shift whose e^eps term exceeds 1 has no delta; the same values below (0 difference)."""
    from jfed.privacy.discrete_accounting import (
        discrete_gaussian_delta,
        discrete_gaussian_worst_delta,
    )

    assert discrete_gaussian_worst_delta(1e6, 4.0, 3) == 0.0
    assert discrete_gaussian_worst_delta(800.0, 0.01, 1) == 0.0
    for epsilon in (0.5, 3.0, 30.0):
        assert discrete_gaussian_worst_delta(epsilon, 4.0, 3) == pytest.approx(
            discrete_gaussian_delta(epsilon, 4.0, 3), abs=1e-12
        )
    assert discrete_gaussian_worst_delta(0.5, 4.0, 3) > 0.1  # negative control: not all zero


def test_a_capacity_of_the_whole_population_never_overflows():
    """`run dp-fedavg --clients 4 --cohort-size 2` was refused ("capacity 4 overflows too
    often, delta share 1.2"): a capacity of the whole population truncates nothing."""
    from jfed.engine import Poisson

    whole = Poisson(0.5, capacity=4)
    assert whole.overflow_probability(4) == 0.0 and whole.overflow_delta(1.0, 10, 4) == 0.0
    short = Poisson(0.5, capacity=3)  # negative control: one short of the population
    assert short.overflow_probability(4) > 0.0


def test_a_skellam_share_at_a_high_dropout_rate_gets_a_grid_it_can_draw():
    """--dropout-rate 0.99 makes --min-clients 1: one share carries the whole noise, which the
    field's grid (sized for the sum) put beyond the sampler ("lower grid_norm")."""
    from jfed.privacy.discrete import rounded_squared_norm_bound
    from jfed.privacy.discrete_aggregators import check_variance
    from jfed.privacy.distributed_dp import (
        DEFAULT_BETA,
        drawable_grid_norm,
        grid_norm_for_bits,
        padded_dimension,
    )

    dimension = padded_dimension(610, True)
    field = grid_norm_for_bits(32, 22, 0.78, dimension)
    with pytest.raises(ValueError, match="lower grid_norm"):  # the field's grid alone
        check_variance(0.78, rounded_squared_norm_bound(field, dimension, DEFAULT_BETA), 1, field)
    grid = drawable_grid_norm(field, 0.78, dimension, 1)
    assert 1 <= grid < field
    check_variance(0.78, rounded_squared_norm_bound(grid, dimension, DEFAULT_BETA), 1, grid)
    assert drawable_grid_norm(field, 0.78, dimension, 10**6) == field  # many shares: unchanged


# ------------------------------------------------------- refused after the data, before compile


def test_a_batch_beyond_the_smallest_silo_is_refused(capsys):
    """The Poisson rate K / n was capped at 1 silently (the minibatch not what --batch says)."""
    argv = ["run", "noisy-mbsgd", "--batch", "100000", "--rounds", "1"]
    _refused(argv, "expected --batch <= the smallest silo (47 records): Poisson sampling", capsys)


@pytest.mark.slow  # the experiment is built (20 s); the declaration's check is fast, above
def test_min_clients_no_round_reaches_is_refused(capsys):
    """Cohorts of about 5 of 100 clients never gather 40 shares: every round withheld, and
    the run printed an accuracy and an eps as if it had trained."""
    argv = ["run", "dp-fedavg", "--noise", "ddgauss", "--min-clients", "40", "--cohort-size",
            "5", "--clients", "100", "--records", "4", "--rounds", "2"]  # fmt: skip
    _refused(argv, "every one of the 2 rounds would be withheld", capsys)


# -------------------------------------------------------------------------------- data files


def _rewrite_batch(folder, name, change, protocol=2):
    with open(folder / name, "rb") as handle:
        batch = pickle.load(handle, encoding="bytes")
    change(batch)
    with open(folder / name, "wb") as handle:
        pickle.dump(batch, handle, protocol=protocol)


CIFAR_RUN = ["run", "fedavg-sampled", "--dataset", "cifar10", "--clients", "4", "--cohort-size",
             "1", "--records", "2", "--rounds", "1", "--data-dir"]  # fmt: skip


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda b: b.__setitem__(b"labels", [12, *b[b"labels"][1:]]), ", 12]"),
        (lambda b: b.__setitem__(b"labels", [-1, *b[b"labels"][1:]]), "got labels in [-1,"),
        (lambda b: b.__setitem__(b"labels", [2.5] * len(b[b"labels"])), "integer labels"),
        (lambda b: b.__setitem__(b"data", b[b"data"] / 255.0), "got float64 in [0.0, 1.0]"),
    ],
    ids=["label 12", "label -1", "float labels", "float pixels"],
)
def test_a_cifar_batch_outside_the_format_is_refused(tmp_path, capsys, change, message):
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar(folder)
    _rewrite_batch(folder, "data_batch_3", change)
    err = _refused([*CIFAR_RUN, str(folder)], "cannot read the CIFAR batch", capsys)
    assert "data_batch_3" in err and message in err


def test_cifar_labels_are_checked_against_the_number_of_classes(tmp_path):
    """Label 42 is a CIFAR-100 class, not a CIFAR-10 one (negative control of the range)."""
    from jfed.data.cifar import read_batch
    from jfed.data.clients import DataFileError

    folder = tmp_path / "cifar-10-batches-py"
    write_cifar(folder)
    _rewrite_batch(folder, "test_batch", lambda b: b.__setitem__(b"labels", [42] * 6))
    assert read_batch(str(folder / "test_batch"), b"labels", 100)[1].tolist() == [42] * 6
    with pytest.raises(DataFileError, match=r"expected labels in \[0, 9\]"):
        read_batch(str(folder / "test_batch"), b"labels", 10)


def test_a_cifar_pickle_of_protocol_5_is_read(tmp_path):
    """Protocol 5 rebuilds an array with numpy's _frombuffer (refused before: "not
    numpy._core.numeric._frombuffer"); it reads the same arrays."""
    from jfed.data.cifar import read_cifar

    folder = tmp_path / "cifar-10-batches-py"
    written = write_cifar(folder)
    for name in written:
        _rewrite_batch(folder, name, lambda b: None, protocol=5)
    _, y_train, x_test, y_test = read_cifar(str(folder))
    data, labels = written["test_batch"]
    assert np.array_equal(x_test, data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    assert y_test.tolist() == labels and len(y_train) == 30


def test_leaf_labels_that_are_not_integers_are_refused(tmp_path, capsys):
    write_leaf(tmp_path, ["f0001", "f0002"])
    path = tmp_path / "train" / "all_data_0_niid_1_keep_0_train_9.json"
    data = json.loads(path.read_text())
    data["user_data"]["f0002"]["y"][1] = 2.5
    path.write_text(json.dumps(data))
    argv = ["run", "fedavg-sampled", "--dataset", "femnist", "--data-dir", str(tmp_path),
            "--cohort-size", "1", "--rounds", "1"]  # fmt: skip
    err = _refused(argv, "cannot read the LEAF FEMNIST file", capsys)
    assert "user f0002: expected integer labels (classes 0-61), got 2.5" in err
    from jfed.data.femnist import read_leaf_files

    data["user_data"]["f0002"]["y"][1] = 3.0  # an integer written as a float: read as 3
    path.write_text(json.dumps(data))
    assert 3 in read_leaf_files([str(path)])[1].tolist()


# ------------------------------------------------------------------- results folders and plots


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory):
    """A finished sweep of two runs (one compiled program), run as from a batch job: stderr not
    a terminal, progress on (its lines every 5 ms here, not 30 s); ``(folder, its stderr)``."""
    import contextlib
    import io

    from jfed.engine import progress

    out = tmp_path_factory.mktemp("round5") / "sweep"
    argv = ["sweep", "modulated-one-shot", "--dataset", "modechoice", "--epsilon", "1,2",
            "--seeds", "1", "--out", str(out)]  # fmt: skip
    err = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stderr(err):
        patch.setattr(progress, "LINE_SECONDS", 0.005)
        assert main(argv) == 0
    return out, err.getvalue()


@pytest.fixture
def sweep_folder(sweep_run):
    return sweep_run[0]


def _copy_runs(source, target, change=None):
    target.mkdir()
    rows = [json.loads(line) for line in (source / "runs.jsonl").read_text().splitlines()]
    with open(target / "runs.jsonl", "w") as handle:
        for row in rows:
            handle.write(json.dumps(change(row) if change else row) + "\n")
    return target


@pytest.mark.parametrize("stored", [float("nan"), "nan", None], ids=["NaN", "'nan'", "null"])
def test_plot_of_metrics_that_are_not_finite_says_so(sweep_folder, tmp_path, capsys, stored):
    folder = _copy_runs(sweep_folder, tmp_path / "nan",
                        lambda row: dict(row, test_r2=stored, validation_r2=stored))  # fmt: skip
    capsys.readouterr()
    assert main(["plot", str(folder)]) == 0
    captured = capsys.readouterr()
    assert "nan +- nan" not in captured.out
    assert "test R^2 not finite (a run's metric is NaN" in captured.out
    warning = [line for line in captured.err.splitlines() if "no finite" in line]
    assert warning == [f"jfed: warning: 2 of the 2 runs in {folder / 'runs.jsonl'} hold no "
                       "finite test_r2 (NaN: diverged or failed); their cells say so instead "
                       "of a mean"]  # fmt: skip


def test_a_plot_with_finite_metrics_warns_of_nothing(sweep_folder, tmp_path, capsys):
    folder = _copy_runs(sweep_folder, tmp_path / "fine")
    capsys.readouterr()
    assert main(["plot", str(folder)]) == 0
    captured = capsys.readouterr()
    assert " +- " in captured.out and "no finite" not in captured.err


def test_a_plot_removes_the_temporary_files_a_killed_plot_left(sweep_folder, tmp_path, capsys):
    """A kill during plotting left `.utility.pdf.*.tmp`, which survived every later plot and
    resume; a writer holding the folder's lock removes jfed's temporaries, nothing else."""
    folder = _copy_runs(sweep_folder, tmp_path / "killed")
    stale = folder / ".utility.pdf.k2j4_x9a.tmp"
    stale.write_bytes(b"%PDF half")
    kept = [folder / ".notes.tmp", folder / "mine.tmp", folder / ".utility.pdf.keep"]
    for path in kept:
        path.write_text("the user's\n")
    assert main(["plot", str(folder)]) == 0
    capsys.readouterr()
    assert not stale.exists() and all(path.exists() for path in kept)


def test_a_full_disk_names_the_folder_and_what_was_kept(sweep_folder, tmp_path, capsys,
                                                        monkeypatch):  # fmt: skip
    """ENOSPC raised by a write that names no file: the line names the output folder and says
    the sweeps' rows are unchanged (it said "No space left on device" alone)."""
    import jfed.report.plots

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(jfed.report.plots, "plot_overlay", full)
    out = tmp_path / "overlay"
    assert main(["plot", str(sweep_folder), str(sweep_folder), "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (f"jfed: error: No space left on device: {out}; the sweeps' runs.jsonl are "
                   "unchanged (only tables and figures were written)")  # fmt: skip


def test_a_full_disk_during_a_sweep_says_its_finished_runs_are_kept():
    import argparse

    from jfed.cli.faults import file_system_fault

    args = argparse.Namespace(command="sweep", out="results/x")
    error = OSError(errno.ENOSPC, "No space left on device", "results/x/runs.jsonl")
    assert file_system_fault(error, args) == (
        "jfed: error: No space left on device: results/x/runs.jsonl; the runs finished before "
        "it are kept in results/x/runs.jsonl (the same command with --resume continues from "
        "them once there is room)"
    )


# ------------------------------------------------------------------ record names, registered


def test_a_non_private_field_named_like_a_privacy_field_is_refused_at_registration():
    """`delta` of a non-private method's configuration collided with the record's delta 0 only
    after the run; a private method's delta is its target (negative control: dp-fedavg)."""
    from jfed.methods import OLS, Method, method, param
    from jfed.methods.registry import check_method

    @dataclasses.dataclass(frozen=True)
    class OLSDelta(OLS):
        delta: float = param(1e-5, "a user's delta")

    declared = Method("ols-delta", OLSDelta, "x", "none", "nothing", "t",
                      method("ols").experiment, private=False)  # fmt: skip
    with pytest.raises(ValueError, match="field 'delta' of OLSDelta is named like a privacy"):
        check_method(declared)
    assert "delta" in {f.name for f in dataclasses.fields(method("dp-fedavg").config)}


def test_a_metric_named_like_a_record_field_is_refused_at_registration():
    from jfed.methods import Method, Metrics, method
    from jfed.methods.registry import check_method

    ols = method("ols")
    for name in ("dataset", "delta", "epsilon_certified"):
        declared = dataclasses.replace(
            ols, name="ols-metric", metrics=Metrics(report=name), private=False
        )
        assert isinstance(declared, Method)
        with pytest.raises(ValueError, match=f"metric '{name}' is named like a field"):
            check_method(declared)


def test_a_kept_output_named_like_a_record_field_is_refused_at_registration():
    """The default evaluate keeps every output as a metric of its name: an output `delta` or
    `dataset` (a new user's update and data) collided with the privacy and data sections only
    after a 2-minute run. An own evaluate names its own metrics (negative control)."""
    from jfed.methods import Experiment, Output, method
    from jfed.methods.registry import check_experiment

    declared = dataclasses.replace(method("ols"), name="ols-kept", private=False)

    def experiment(name: str, **members) -> type:
        members = {"outputs": (Output(name, "state"),), "hyperparams": lambda s, c, z: None,
                   **members}  # fmt: skip
        return type(f"Kept_{name}", (Experiment,), members)

    for name in ("delta", "dataset", "dim"):  # privacy, data, a configuration field
        with pytest.raises(ValueError, match=f"output '{name}' is kept as a metric"):
            check_experiment("ols-kept", experiment(name), declared)
        own = experiment(name, evaluate=lambda self, outputs, config: {"error": 0.0})
        check_experiment("ols-kept", own, declared)
    check_experiment("ols-kept", experiment("update"), declared)


def test_every_privacy_field_of_a_non_private_record_is_reserved_for_it():
    """NON_PRIVATE_STATED covers what non_private_fields states beyond RECORD_RESERVED."""
    from jfed.methods import method
    from jfed.methods.experiment import non_private_fields
    from jfed.methods.registry import NON_PRIVATE_STATED, RECORD_RESERVED

    stated = set(non_private_fields(method("ols")))
    assert stated - RECORD_RESERVED <= NON_PRIVATE_STATED


# ------------------------------------------------------------------ progress without a terminal


def test_a_sweep_without_a_terminal_prints_progress_lines(sweep_run):
    """stderr is not a terminal: lines, not a bar, every LINE_SECONDS (5 ms here), from the
    start (the compilation) to the end, saying how many runs are done."""
    lines = [line for line in sweep_run[1].splitlines() if line.startswith("jfed: progress:")]
    assert lines and all(line.startswith("jfed: progress: sweep modulated-one-shot: run ")
                         for line in lines), lines  # fmt: skip
    assert "\r" not in sweep_run[1] and any("/2, none done after" in line for line in lines)


def test_a_run_without_a_terminal_reports_its_rounds_in_lines(monkeypatch):
    """A run's rounds report from inside the compiled scan to a LineProgress (no bar)."""
    from jfed.engine import progress

    monkeypatch.setattr(progress, "_terminal", lambda: False)
    with progress.round_progress(3, "fit") as token:
        display = progress._open_bars[int(token)]
        assert isinstance(display, progress.LineProgress)
        progress._advance(token, np.int32(2))
        assert display.line().startswith("jfed: progress: fit: round 2/3, ")
    assert int(token) not in progress._open_bars


def test_quiet_and_no_progress_turn_progress_off():
    from jfed.cli.main import build_parser
    from jfed.cli.options import show_progress

    run = ["run", "mbsgd"]
    assert show_progress(build_parser().parse_args(run))  # on by default, terminal or not
    assert not show_progress(build_parser().parse_args([*run, "--quiet"]))
    assert not show_progress(build_parser().parse_args([*run, "--no-progress"]))
    sweep = ["sweep", "mbsgd", "--quiet"]
    assert not show_progress(build_parser().parse_args(sweep))


def test_line_progress_states_round_rate_and_eta(monkeypatch):
    from jfed.engine import progress

    clock = iter([0.0, 10.0, 10.0, 20.0, 20.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    bar = progress.LineProgress(total=100, desc="fit", unit="round", disable=True)  # at 0 s
    assert bar.line() == "jfed: progress: fit: round 0/100, none done after 10 s (compiling)"
    bar.update(10)  # first report at 10 s (its rate unknown: since the start)
    assert bar.line() == "jfed: progress: fit: round 10/100, 0.5 rounds/s, eta 3.0 min"
    bar.update(20)  # 20 more rounds in 10 s: 2 a second, 70 left
    assert bar.line() == "jfed: progress: fit: round 30/100, 2 rounds/s, eta 35 s"
