"""Every command refuses bad input with one line naming the flag, exit status 2, no traceback and
no file written; a results folder has one writer at a time.

To cover a new flag, add a row to BAD_INPUT: the arguments and a piece of the message that must
appear (the flag as the user types it, and its range where it has one).
"""

import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

from jfed.cli.main import main
from jfed.sweep.lock import LOCK_NAME, folder_lock
from jfed.sweep.runner import read_rows

RUN_MOD = ["run", "modulated"]
SWEEP = ["sweep", "modulated-one-shot", "--seeds", "1", "--epsilon", "1"]
SWEEP_SEEDS = ["sweep", "modulated-one-shot", "--seeds", "1"]  # its --epsilon given by the case
SWEEP_EPSILON = ["sweep", "modulated-one-shot", "--epsilon", "1"]  # its --seeds given by the case
CALIBRATE = ["account", "calibrate", "--delta", "1e-5"]

BAD_INPUT = [
    # jfed run (regression)
    ([*RUN_MOD, "--epsilon", "0"], "--epsilon in [1e-06, 1e+06]"),
    ([*RUN_MOD, "--epsilon", "1e-300"], "--epsilon in [1e-06"),
    ([*RUN_MOD, "--epsilon", "nan"], "--epsilon in"),
    ([*RUN_MOD, "--delta", "1"], "--delta in (0, 1)"),
    ([*RUN_MOD, "--rounds", "1000000000"], "--rounds in [1, 1000000]"),
    ([*RUN_MOD, "--seed", "-1"], "--seed in [0,"),
    ([*RUN_MOD, "--clients", "5"], "--clients applies only with --synthetic"),
    ([*RUN_MOD, "--synthetic", "--clients", "0"], "--clients in [1,"),
    ([*RUN_MOD, "--synthetic", "--dim", "3", "--directions", "4"], "--directions in [1, 3]"),
    ([*RUN_MOD, "--psd"], "unrecognized arguments: --psd"),
    ([*RUN_MOD, "--ridge", "2"], "unrecognized arguments: --ridge"),
    (["run", "modulated-one-shot", "--step-scale", "1"], "unrecognized arguments: --step-scale"),
    (
        ["run", "modulated-one-shot", "--ridge", "1", "--ridge-scale", "2"],
        "--ridge-scale applies only without --ridge",
    ),
    ([*RUN_MOD, "--beta", "-1"], "--beta >= 0"),
    ([*RUN_MOD, "--feature-clip", "inf"], "--feature-clip > 0"),
    ([*RUN_MOD, "--clip", "1"], "unrecognized arguments: --clip"),
    (["run", "dpsgd", "--gradient-clip", "0"], "--gradient-clip > 0"),
    ([*RUN_MOD, "--chunk-size", "0"], "--chunk-size in [1,"),
    ([*RUN_MOD, "--block-size", "1000"], "--block-size a positive multiple of --chunk-size"),
    ([*RUN_MOD, "--accountant", "pld", "--epsilon", "1000"], "--epsilon <= 100 with --accountant"),
    ([*RUN_MOD, "--accountant", "magic"], "invalid choice: 'magic'"),
    ([*RUN_MOD, "--dataset", "nope"], "--dataset: invalid choice: 'nope'"),
    ([*RUN_MOD, "--epsilon", "one"], "--epsilon: invalid float value"),
    ([*RUN_MOD, "--json", "{tmp}"], "expected --json to name a file"),
    ([*RUN_MOD, "--json", "{file}/record.json"], "is a file, not a folder"),
    ([*RUN_MOD, "--json", "/proc/jfed/record.json"], "is not writable"),
    # jfed run (silos)
    (["run", "noisy-mbsgd", "--silos", "5"], "--silos applies only to the -sorted"),
    (["run", "noisy-mbsgd", "--dataset", "fair-sorted", "--silos", "0"], "--silos in [1,"),
    (["run", "noisy-mbsgd", "--mixing", "1.5"], "--mixing in [0, 1]"),
    (["run", "noisy-mbsgd", "--data-seed", "-1"], "--data-seed in [0,"),
    (["run", "noisy-mbsgd", "--batch", "0"], "--batch in [1,"),
    (["run", "noisy-mbsgd", "--available", "3"], "--available applies only with --availability"),
    (["run", "noisy-mbsgd", "--multistage"], "unrecognized arguments: --multistage"),
    (["run", "noisy-mbsgd", "--dataset", "co2"], "--dataset: invalid choice: 'co2'"),
    (["run", "noisy-mbsgd", "--epsilon", "500"], "--epsilon <= 30 with --calibration exact"),
    (["run", "noisy-mbsgd", "--accountant", "pld"], "unrecognized arguments: --accountant"),
    (["run", "mbsgd", "--epsilon", "1"], "unrecognized arguments: --epsilon"),
    # jfed sweep
    ([*SWEEP_SEEDS, "--epsilon", "1,,2"], "comma-separated list of numbers for --epsilon"),
    ([*SWEEP_SEEDS, "--epsilon", "1,x"], "a number in --epsilon, got 'x'"),
    ([*SWEEP_SEEDS, "--epsilon", "1,1"], "distinct values in --epsilon"),
    ([*SWEEP_SEEDS, "--epsilon", "-1"], "--epsilon in [1e-06"),
    (["sweep", "dpsgd", "--rounds", "1000000000"], "--rounds in [1, 1000000]"),
    ([*SWEEP, "--rounds", "2"], "unrecognized arguments: --rounds"),  # one release, always
    ([*SWEEP_EPSILON, "--seeds", "0"], "--seeds in [1,"),
    ([*SWEEP, "--slice-size", "0"], "--slice-size in [1,"),
    ([*SWEEP, "--grid", "ridge="], "expected --grid NAME=V1,V2"),
    ([*SWEEP, "--grid", "ridge=1,1"], "distinct values in --grid ridge"),
    ([*SWEEP, "--grid", "ridge=1,a"], "a number in --grid ridge, got 'a'"),
    ([*SWEEP, "--set", "beta="], "expected --set NAME=V"),
    ([*SWEEP, "--set", "betta=0.3"], "unknown --set betta"),
    ([*SWEEP, "--set", "beta=0.3", "--beta", "0.4"], "--beta is given twice"),
    ([*SWEEP, "--grid", "directions=1,2"], "unknown --grid directions"),
    ([*SWEEP, "--grid", "ridge=1,2", "--ridge", "3"], "--grid ridge also fixes it"),
    ([*SWEEP, "--set", "psd=maybe"], "expected true or false for --set psd"),
    ([*SWEEP, "--set", "accountant=magic"], "unknown --set accountant 'magic'"),
    ([*SWEEP, "--seed", "3"], "unrecognized arguments: --seed"),
    ([*SWEEP, "--set", "beta=1,2"], "one value in --set beta"),
    ([*SWEEP, "--grid", "ridge=1,-1"], "--grid ridge >= 0"),
    ([*SWEEP, "--set", "alpha=0"], "--set alpha > 0"),
    (["sweep", "noisy-mbsgd", "--grid", "step_size=0.5,0"], "--grid step_size > 0"),
    ([*SWEEP, "--accountant", "exact"], "--accountant: invalid choice: 'exact'"),
    ([*SWEEP, "--out", "{file}"], "expected --out to name a folder"),
    ([*SWEEP, "--out", "{file}/sub"], "is a file, not a folder"),
    ([*SWEEP, "--out", "/proc/jfed-results"], "is not writable"),
    (["sweep", "noisy-mbsgd", "--set", "batch=2.5"], "integer --set batch in [1,"),
    (["sweep", "noisy-mbsgd", "--set", "average_last=1.5"], "integer --set average_last in [0,"),
    (["sweep", "dpsgd", "--delta", "2"], "--delta in (0, 1)"),
    # jfed plot
    (["plot", "{tmp}/missing"], "no such sweep folder"),
    (["plot", "{file}"], "expected a sweep folder or its runs.jsonl"),
    (["plot", "{tmp}"], "no finished runs in"),
    (["plot", "{foreign}"], "is not a jfed sweep row"),
    # jfed account
    ([*CALIBRATE, "--epsilon", "1", "--sensitivity", "0"], "--sensitivity > 0"),
    ([*CALIBRATE, "--epsilon", "1", "--sensitivity", "nan"], "--sensitivity > 0"),
    ([*CALIBRATE, "--epsilon", "1e6"], "--epsilon <= 100 with --accountant pld"),
    ([*CALIBRATE, "--epsilon", "1,,2"], "comma-separated list of numbers for --epsilon"),
    ([*CALIBRATE, "--epsilon", "1", "--json", "{file}/x.json"], "is a file, not a folder"),
    (
        [
            "account",
            "gaussian",
            "--noise-multiplier",
            "1",
            "--steps",
            "1000000000000",
            "--accountant",
            "pld",
        ],
        "--steps in [1, 1000000]",
    ),
    (["account", "gaussian", "--noise-multiplier", "0"], "--noise-multiplier > 0"),
    (["account", "gaussian", "--noise-multiplier", "1", "--sampling-rate", "2"], "--sampling-rate"),
    (
        ["account", "shuffle", "--epsilon0", "1", "--n", "100", "--delta0", "1"],
        "--delta0 in [0, 1)",
    ),
    (["account", "shuffle", "--epsilon0", "1", "--n", "0"], "--n in [1,"),
    # jfed demo, and the command itself
    (["demo", "--scale-clients", "-1"], "--scale-clients in [0,"),
    (["demo", "--out", "{file}"], "expected --out to name a folder"),
    (["nonsense"], "invalid choice: 'nonsense'"),
    (["run", "modulated", "--epsilonn", "1"], "unrecognized arguments: --epsilonn"),
    # silently accepted before: now refused, each with one line naming the flag
    (
        ["run", "modulated-one-shot", "--dataset", "co2", "--synthetic"],
        "--dataset applies only without --synthetic",
    ),
    (
        ["sweep", "ols", "--seeds", "2", "--seeds", "3", "--out", "{tmp}/x"],
        "--seeds is given twice",
    ),
    ([*RUN_MOD, "--seed", "1", "--seed=2"], "--seed is given twice"),
    (["launch", "--", "run", "ols", "--seed", "1", "--seed", "2"], "--seed is given twice"),
    (["run", "ols", "--json", ""], "expected --json PATH (or - for standard output)"),
    (
        ["run", "ldp-fl", "--clients", "10", "--fraction", "0.04"],
        "--fraction applies only where --fraction x --clients rounds to at least one client",
    ),
    (["account", "calibrate", "--epsilon", "1,1"], "--epsilon lists 1 twice"),
    # a field given at its default value where it does not apply is refused all the same
    (["run", "ols", "--synthetic", "--dataset", "fair"], "--dataset applies only without"),
    (["run", "estimation", "--delta", "1e-5"], "--delta applies only with --mechanism gaussian"),
    # eps given to a setting that adds no noise
    (
        ["run", "estimation", "--setting", "none", "--epsilon", "1"],
        "--epsilon applies only to a private setting: --setting none adds no noise",
    ),
    (
        ["run", "functional-estimation", "--noise-shape", "none", "--delta", "1e-5"],
        "--delta applies only to a private setting: --noise-shape none",
    ),
    (
        ["sweep", "estimation", "--setting", "none", "--epsilon", "1,2", "--out", "{tmp}/x"],
        "--epsilon applies only to a private setting",
    ),
    # LDP-FL: one client a round has nobody to hide among in the shuffle
    (
        ["run", "ldp-fl", "--clients", "10", "--fraction", "0.12"],
        "to select at least 2 clients a round (split and shuffle hides each among the others), "
        "got 0.12 x 10 -> 1 client: raise --fraction",
    ),
    (["run", "ldp-fl", "--clients", "1"], "got 1 x 1 -> 1 client: raise --clients"),
    # the silos' exact calibration: below what its PLD resolves, beyond minutes of work
    (
        ["sweep", "noisy-mbsgd", "--epsilon", "1e-4,1e-3,0.01,0.1,1", "--out", "{tmp}/x"],
        "expected --epsilon >= 0.001 with --calibration exact",
    ),
    (["run", "noisy-mbsgd", "--epsilon", "100"], "expected --epsilon <= 30 with --calibration"),
    # what cannot fit is refused before anything compiles, naming the largest value that fits
    (
        ["run", "functional-estimation", "--functions", "1000000", "--observations", "100000"],
        "the largest --observations that fits is",
    ),
    (["launch", "--coordinator", "nowhere", "--", "run", "ols"], "expected --coordinator"),
    (
        ["account", "gaussian", "--noise-multiplier", "1", "--steps", "10000000"],
        "--steps in [1, 1000000] with --accountant pld (its privacy loss distribution grows",
    ),
    # reported as a fault of jfed before: a check of the input deep in the privacy layer
    (
        [*RUN_MOD, "--accountant", "classic", "--epsilon", "20", "--rounds", "1"],
        "expected --epsilon < 1 with --accountant classic",
    ),
    (
        [*RUN_MOD, "--accountant", "classic", "--epsilon", "30", "--rounds", "10"],
        "expected --epsilon / --rounds < 1 with --accountant classic",
    ),
    # a grid value that breaks another field's requirement, refused before any run
    (
        [
            "sweep",
            "estimation",
            "--setting",
            "central-user",
            "--grid",
            "sites=1,2",
            "--seeds",
            "1",
            "--out",
            "{tmp}/x",
        ],
        "--grid sites=1: expected --sites >= 2 for --setting central-user",
    ),
    (["methods", "--update-readme", "{binary}"], "{binary} is not UTF-8 text"),
    # a flag that does nothing in its combination, an empty value that fell back to a default
    (
        ["account", "gaussian", "--noise-multiplier", "1", "--dataset-size", "100"],
        "--dataset-size applies only with --sampling without-replacement",
    ),
    (
        ["account", "gaussian", "--noise-multiplier", "1", "--sampling", "poisson"],
        "--sampling applies only with --sampling-rate below 1",
    ),
    (
        [
            "account",
            "gaussian",
            "--noise-multiplier",
            "1",
            "--sampling-rate",
            "0.1",
            "--sampling",
            "without-replacement",
        ],
        "--sampling without-replacement needs --dataset-size",
    ),
    ([*RUN_MOD, "--compilation-cache", ""], "expected --compilation-cache DIR or off"),
    (["methods", "--update-readme", ""], "expected --update-readme PATH"),
    # vague before: the empty path is named as such
    (["plot", ""], "expected a sweep folder or its runs.jsonl, got an empty path"),
    ([*SWEEP, "--out", ""], "expected --out FOLDER, got an empty path"),
    # a choice the method cannot run is not offered; a flag that does nothing is refused
    (["run", "fedavg", "--sampling", "one-pass"], "invalid choice: 'one-pass'"),
    (["run", "local-sgd", "--sampling", "one-pass"], "invalid choice: 'one-pass'"),
    (
        ["run", "noisy-mbsgd", "--average-last", "100", "--rounds", "10"],
        "--average-last applies only up to --rounds",
    ),
]


@pytest.fixture
def places(tmp_path):
    """Paths the table refers to: an empty folder, a plain file, a file that is not jfed's."""
    folder = tmp_path / "work"
    folder.mkdir()
    plain = tmp_path / "plain.txt"
    plain.write_text("not a folder\n")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "runs.jsonl").write_text(json.dumps({"x": 1}) + "\n")
    binary = tmp_path / "README.bin"
    binary.write_bytes(bytes(range(256)))
    return {"tmp": str(folder), "file": str(plain), "foreign": str(foreign),
            "binary": str(binary)}  # fmt: skip


def _snapshot(root) -> set[str]:
    return {os.path.join(d, f) for d, _, files in os.walk(root) for f in files} | {
        os.path.join(d, s) for d, subs, _ in os.walk(root) for s in subs
    }


@pytest.mark.parametrize(
    "argv, message", BAD_INPUT, ids=[" ".join(argv)[:60] for argv, _ in BAD_INPUT]
)
def test_bad_input_is_one_line_naming_the_flag(argv, message, places, tmp_path, capsys,
                                               monkeypatch):  # fmt: skip
    monkeypatch.chdir(places["tmp"])
    argv = [a.format(**places) for a in argv]
    before = _snapshot(tmp_path)
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("jfed: error:") and "\n" not in err, err
    assert message.format(**places) in err, err
    assert "Traceback" not in captured.out + captured.err and captured.out == ""
    assert _snapshot(tmp_path) == before  # nothing written, not even a results folder


def test_every_command_has_rows():
    commands = {argv[0] if argv[0] != "run" else f"run {argv[1]}" for argv, _ in BAD_INPUT}
    assert {"run modulated", "run noisy-mbsgd", "sweep", "plot", "account", "demo",
            "methods"} <= commands  # fmt: skip


def test_failed_write_prints_the_record(tmp_path, capsys, monkeypatch):
    """A write that fails after the work says so and prints the record instead (exit 1)."""
    import jfed.report

    real_write = jfed.report.write

    def failing_write(record, path):
        if path != "-":
            raise OSError(28, "No space left on device")
        real_write(record, path)

    monkeypatch.setattr(jfed.report, "write", failing_write)
    argv = ["account", "shuffle", "--epsilon0", "1", "--n", "1000", "--json"]
    assert main([*argv, str(tmp_path / "record.json")]) == 1
    captured = capsys.readouterr()
    assert "could not write the record" in captured.err and "No space left" in captured.err
    assert json.loads(captured.out[captured.out.index("{") :])["quantity"] == "epsilon"
    assert not (tmp_path / "record.json").exists()


def test_non_private_silo_runs_say_so(capsys):
    assert main(["run", "mbsgd", "--rounds", "2", "--json", "-"]) == 0
    privacy = json.loads(capsys.readouterr().out)
    assert privacy["notion"] == "none (non-private)" and privacy["protected"] == "nothing"


def test_delivered_epsilon_differing_from_the_target_warns(capsys):
    argv = ["run", "shuffle-mbsgd", "--rounds", "2", "--epsilon", "100"]
    assert main([*argv, "--json", "-"]) == 0
    captured = capsys.readouterr()
    record = json.loads(captured.out)
    assert record["epsilon"] == 100 and record["epsilon_certified"] < 100
    assert "jfed: warning: the run certifies eps" in captured.err


# ---------------------------------------------------------------------------- one writer


LOCK_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "jfed",
                         "sweep", "lock.py")  # fmt: skip


def _hold_lock(folder: str, seconds: float) -> subprocess.Popen:
    # the lock module alone, loaded from its file: the holder starts without importing jax
    code = textwrap.dedent(
        f"""
        import importlib.util, sys, time
        spec = importlib.util.spec_from_file_location("lock", {LOCK_FILE!r})
        lock = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(lock)
        with lock.folder_lock({folder!r}):
            print("locked", flush=True)
            time.sleep({seconds})
        """
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_second_writer_is_refused_and_rows_stay_unique(tmp_path, capsys):
    out = str(tmp_path / "sweep")
    # two runs, one per compiled call: the program of `jfed run modulated-one-shot`
    argv = ["sweep", "modulated-one-shot", "--dataset", "modechoice", "--epsilon", "1,2",
            "--seeds", "1", "--no-shared-noise", "--slice-size", "1", "--no-progress",
            "--out", out]  # fmt: skip
    holder = _hold_lock(out, 30)
    try:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"is in use by process {holder.pid}" in err and "\n" not in err.strip()
        assert not os.path.exists(os.path.join(out, "runs.jsonl"))
        assert main([*argv[:-2], "--resume", "--out", out]) == 2  # a resume is refused too
    finally:
        holder.kill()
        holder.wait()
    # the holder is gone and the kernel released its lock: the lock file it left behind
    # blocks nothing (no staleness rule, no warning), the sweep runs and removes it
    assert os.path.exists(os.path.join(out, LOCK_NAME))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(argv) == 0
    assert not [w for w in caught if "lock" in str(w.message)]
    assert not os.path.exists(os.path.join(out, LOCK_NAME))
    rows = read_rows(os.path.join(out, "runs.jsonl"))
    assert len(rows) == 2 == len({row["config_key"] for row in rows})


def test_a_refusal_never_names_the_dead_process_a_lock_file_still_names(tmp_path, monkeypatch):
    """The holder has the lock but its name is not written yet: the file still names the
    process that died holding it before. The refusal names no dead process. Negative control:
    once the holder's own name is there, it is named."""
    import json as json_module

    import jfed.sweep.lock as lock

    monkeypatch.setattr(lock, "OWNER_WAIT", 0.2)
    folder = str(tmp_path / "sweep")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    holder = _hold_lock(folder, 30)
    try:
        path = os.path.join(os.path.realpath(folder), LOCK_NAME)
        live = lock.read_owner(path)
        stale = {**live, "pid": dead.pid}
        with open(path, "w") as handle:
            json_module.dump(stale, handle)
        with pytest.raises(lock.FolderLockedError) as refused:
            with folder_lock(folder):
                pass
        assert f"process {dead.pid} " not in str(refused.value)
        assert "is in use by another process" in str(refused.value)
        with open(path, "w") as handle:
            json_module.dump(live, handle)
        with pytest.raises(lock.FolderLockedError, match=f"in use by process {holder.pid} on"):
            with folder_lock(folder):
                pass
    finally:
        holder.kill()
        holder.wait()


def test_duplicated_rows_count_once(tmp_path):
    path = tmp_path / "runs.jsonl"
    row = {"config_key": "a", "method": "dpsgd", "epsilon": 1.0, "seed": 0, "test_r2": 0.5}
    other = {**row, "config_key": "b", "seed": 1}
    path.write_text("".join(json.dumps(r) + "\n" for r in (row, row, other, row)))
    assert [r["config_key"] for r in read_rows(str(path))] == ["a", "b"]


def test_lock_is_reentrant_and_released(tmp_path):
    with folder_lock(str(tmp_path)) as path:
        with folder_lock(str(tmp_path)):
            assert os.path.exists(path)
        assert os.path.exists(path)  # the inner block does not release the outer lock
    assert not os.path.exists(path)


def test_one_certification_warning_for_runs_and_sweep_rows():
    from jfed.cli.options import certification_warning

    assert certification_warning({"epsilon": 3.0, "epsilon_certified": 2.999}) is None
    assert "certifies eps = 2" in certification_warning({"epsilon": 3.0, "epsilon_certified": 2.0})
    claim = certification_warning({"epsilon": 3.0, "epsilon_certified": None, "exact_epsilon": 9.0})
    assert "no accountant here certifies" in claim and "eps = 9" in claim
    # a non-private silo row keeps its placeholder eps and certifies nothing: no warning
    assert certification_warning({"epsilon": 0.75, "epsilon_certified": float("inf")}) is None
    assert certification_warning({"epsilon": float("inf"), "epsilon_certified": None}) is None


# ------------------------------------------------------------------- the documented refusals

CLI_PAGE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "docs", "reference", "cli.md")


def _documented_refusals() -> list[tuple[str, str]]:
    """``(command, answer)`` of each row between the page's refusals markers."""
    import re

    with open(CLI_PAGE, encoding="utf-8") as handle:
        text = handle.read()
    table = text.split("<!-- refusals: begin -->")[1].split("<!-- refusals: end -->")[0]
    return re.findall(r"^\| `(jfed [^`]+)` \| `([^`]+)` \|$", table, flags=re.MULTILINE)


@pytest.mark.parametrize("command, answer", _documented_refusals())
def test_every_documented_refusal_is_what_jfed_answers(command, answer, tmp_path, capsys,
                                                       monkeypatch):  # fmt: skip
    """docs/reference/cli.md's examples, through jfed.main, on a machine with 16 GiB free and
    a CPU's work budget (as the page says)."""
    import shlex

    import jfed.methods.cost as cost

    monkeypatch.setattr(cost, "available_memory", lambda: 16 * 2**30)
    monkeypatch.setattr(cost, "memory_budget", lambda: 16 * 2**30)
    monkeypatch.setattr(cost, "work_budget", lambda: cost.MAX_WORK["cpu"])
    monkeypatch.chdir(tmp_path)
    assert main(shlex.split(command)[1:]) == 2
    err = capsys.readouterr().err
    assert err.startswith(answer) and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []


def test_the_page_documents_refusals():
    assert len(_documented_refusals()) >= 8
