"""The jfed command: smoke runs with JSON records and one-line errors with exit code 2."""

import json
import subprocess
import sys

import pytest

from jfed.cli.main import main

RECORD_FIELDS = {
    "algorithm", "dataset", "n_clients", "dim", "rounds", "epsilon", "delta", "accountant",
    "sigma", "test_r2", "ols_r2", "seconds", "seed", "versions", "privacy",
}  # fmt: skip


def test_run_modulated_writes_record(tmp_path, capsys):
    path = tmp_path / "run.json"
    code = main(["run", "modulated", "--dataset", "modechoice", "--epsilon", "4", "--rounds", "3",
                 "--json", str(path)])  # fmt: skip
    assert code == 0
    line = capsys.readouterr().out.strip()
    assert "test R^2" in line and "non-private OLS" in line and "accountant: zcdp" in line
    record = json.loads(path.read_text())
    assert RECORD_FIELDS <= set(record)
    assert record["epsilon"] == pytest.approx(4.0) and record["rounds"] == 3
    assert record["n_clients"] == 504 and record["dim"] == 7
    assert len(record["test_r2_per_round"]) == 3
    assert record["privacy"]["protected"].startswith("one client's feature vector")


def test_run_one_shot_dpsgd_ols_and_synthetic(capsys):
    assert main(["run", "modulated", "--dataset", "modechoice", "--estimator", "one-shot",
                 "--json", "-"]) == 0  # fmt: skip
    record = json.loads(capsys.readouterr().out)
    assert record["rounds"] == 1 and "test_r2_psd" in record
    assert main(["run", "dpsgd", "--dataset", "modechoice", "--rounds", "2", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["accountant"] == "zcdp"
    assert (
        main(["run", "ols", "--synthetic", "--clients", "5000", "--dim", "3", "--json", "-"]) == 0
    )
    record = json.loads(capsys.readouterr().out)
    assert record["epsilon"] == "inf" and record["accountant"] == "none"
    assert record["n_clients"] == 5000


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--epsilon", "0"], "epsilon > 0"),
        (["--epsilon", "-2"], "epsilon > 0"),
        (["--delta", "1"], "delta in (0, 1)"),
        (["--delta", "0"], "delta in (0, 1)"),
        (["--alpha", "0"], "alpha > 0"),
        (["--directions", "9"], "directions in [1, 8]"),
        (["--directions", "0"], "directions in [1, 8]"),
        (["--dataset", "nope"], "unknown dataset 'nope'"),
        (["--rounds", "0"], "rounds in [1,"),
        (["--block-size", "1000"], "block_size a positive multiple"),
    ],
)
def test_bad_input_is_one_line_exit_2(argv, message, capsys):
    assert main(["run", "modulated", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("jfed: error:") and message in err and "\n" not in err


def test_console_entry_point_exits_2_without_traceback():
    result = subprocess.run(
        [sys.executable, "-m", "jfed", "run", "modulated", "--epsilon", "-1"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr


def test_datasets_lists_the_five_tasks(capsys):
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    for name in ("co2", "fair", "modechoice", "randhie-lncoins", "randhie-fmde"):
        assert name in out
