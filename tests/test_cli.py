"""The jfed command: smoke runs with JSON records and one-line errors with exit code 2."""

import json
import subprocess
import sys

import pytest

from jfed.cli.main import main

# What a record states of its guarantee: a run's, a sweep row's and `jfed account`'s answers.
PRIVACY_RECORD_FIELDS = {
    "epsilon", "epsilon_certified", "delta", "accountant", "notion", "protected", "trust_model",
    "adjacency",
}  # fmt: skip
RECORD_FIELDS = PRIVACY_RECORD_FIELDS | {
    "method", "algorithm", "paper", "dataset", "n_clients", "dim", "rounds", "sigma",
    "test_r2", "ols_r2", "run_seconds", "compile_seconds", "seed", "versions", "schema_version",
    "timestamp", "jfed_version", "git_commit", "config_key",
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
    assert record["protected"].startswith("one client's feature vector")
    assert record["method"] == "modulated-iterative" and record["step_scale"] == 0.8


def test_run_one_shot_dpsgd_ols_and_synthetic(capsys):
    assert main(["run", "modulated-one-shot", "--dataset", "modechoice", "--json", "-"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["rounds"] == 1 and "test_r2_psd" in record
    assert main(["run", "dpsgd", "--dataset", "modechoice", "--rounds", "2", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["accountant"] == "zcdp"
    # the procedural population of tests/test_data.py: its non-private reference's program
    argv = ["run", "ols", "--synthetic", "--clients", "20000", "--dim", "10", "--json", "-"]
    assert main(argv) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["epsilon"] == "inf" and record["accountant"] == "none"
    assert record["n_clients"] == 20000 and record["dim"] == 10


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--epsilon", "0"], "--epsilon in [1e-06, 1e+06]"),
        (["--epsilon", "-2"], "--epsilon in [1e-06, 1e+06]"),
        (["--delta", "1"], "delta in (0, 1)"),
        (["--delta", "0"], "delta in (0, 1)"),
        (["--alpha", "0"], "alpha > 0"),
        (["--directions", "9"], "directions in [1, 8]"),
        (["--directions", "0"], "directions in [1, 8]"),
        (["--dataset", "nope"], "invalid choice: 'nope'"),
        (["--rounds", "0"], "rounds in [1,"),
        (["--block-size", "1000"], "--block-size a positive multiple"),
        (["--clients", "0", "--synthetic"], "--clients in [1,"),
        (["--synthetic", "--dim", "3", "--directions", "4"], "--directions in [1, 3]"),
        (["--dataset", "nope"], "--dataset: invalid choice"),
        (["--estimator", "one-shot"], "unrecognized arguments: --estimator"),
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


def test_datasets_lists_every_built_in_data_set(capsys):
    from jfed import catalog

    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    names = (*catalog.REGRESSION_DATASETS, *catalog.SILO_DATASETS, *catalog.IMAGE_DATASETS,
             *catalog.FEDERATED_DATASETS)  # fmt: skip
    listed = {line.split()[0] for line in out.splitlines() if line.startswith("  ")}
    generators = {"--synthetic", "--data", "--basis"}  # procedural: regression, estimation
    assert listed == set(names) | generators
    assert "1438 records" in out and "silos" in out  # sizes, not just names
    assert "any --clients (default 100,000) and --dim (default 10)" in out


def test_methods_text_is_never_cut(capsys):
    """Every field's allowed values and help appear whole (they were cut to fixed widths)."""
    from jfed.methods import METHODS
    from jfed.methods.fields import fields_of

    assert main(["methods"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    for declared in METHODS.values():
        private = (declared.notion, declared.trust_model) if declared.private else ()
        for text in (declared.summary, declared.paper, *private):
            assert " ".join(text.split()) in out
        for field in fields_of(declared.config):
            assert " ".join(field.help.split()) in out
            if field.choices:
                assert ", ".join(field.choices) in out


def test_account_commands(capsys):
    argv = ["account", "gaussian", "--noise-multiplier", "1.1", "--sampling-rate", "0.01",
            "--steps", "1000", "--delta", "1e-5", "--accountant", "rdp", "--json", "-"]  # fmt: skip
    assert main(argv) == 0
    record = json.loads(capsys.readouterr().out)
    for field in ("epsilon", "delta", "noise_multiplier", "sampling_rate", "steps", "accountant"):
        assert field in record
    assert record["accountant"] == "rdp" and 1.0 < record["epsilon"] < 3.0

    assert main(["account", "calibrate", "--epsilon", "1", "--delta", "1e-5", "--accountant",
                 "analytic", "--sensitivity", "2", "--json", "-"]) == 0  # fmt: skip
    record = json.loads(capsys.readouterr().out)
    assert record["sigma"] == pytest.approx(2 * record["noise_multiplier"])
    assert record["quantity"] == "noise_multiplier"

    assert main(["account", "calibrate", "--epsilon", "0.5,1,2", "--delta", "1e-5",
                 "--accountant", "zcdp", "--steps", "10"]) == 0  # fmt: skip
    assert capsys.readouterr().out.count("noise multiplier") == 3

    assert main(["account", "last-iterate", "--eta", "0.5", "--lipschitz", "1", "--radius", "1",
                 "--sigma", "1.5", "--n", "100", "--sampling-rate", "0.1", "--epsilon", "1",
                 "--json", "-"]) == 0  # fmt: skip
    record = json.loads(capsys.readouterr().out)
    assert record["quantity"] == "delta" and 0 < record["delta"] < 1
    assert "every_iterate_delta" in record and record["steps"] == 10

    assert main(["account", "shuffle", "--epsilon0", "1", "--n", "10000", "--delta", "1e-6"]) == 0
    assert "central" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, adjacency",
    [
        (["gaussian", "--noise-multiplier", "1", "--neighboring", "replace-one"], "replace-one"),
        (["calibrate", "--epsilon", "1"], "add-or-remove"),
        (["last-iterate", "--eta", "0.5", "--lipschitz", "1", "--radius", "1", "--sigma", "1.5",
          "--n", "100", "--sampling-rate", "0.1", "--epsilon", "1"], "replace-one"),
        (["shuffle", "--epsilon0", "1", "--n", "10000"], "replace-one"),
    ],
)  # fmt: skip
def test_every_account_answer_states_adjacency_unit_and_sensitivity(argv, adjacency, tmp_path,
                                                                     capsys):  # fmt: skip
    """The human line and the record both say under which adjacency, for which protected unit
    and with which sensitivity the number holds (one answer: the line it prints and the record
    it writes to --json PATH)."""
    path = tmp_path / "answer.json"
    assert main(["account", *argv, "--json", str(path)]) == 0
    line = capsys.readouterr().out.strip()
    assert "\n" not in line
    assert f"adjacency: {adjacency}" in line and "protected unit: " in line
    assert "sensitivity" in line or "LDP randomizer" in line
    record = json.loads(path.read_text())
    assert record["adjacency"].startswith(adjacency)
    assert record["protected"] and record["sensitivity"]
    assert f"protected unit: {record['protected']}" in line


ACCOUNT_QUESTIONS = [
    ["gaussian", "--noise-multiplier", "1", "--steps", "100", "--sampling-rate", "0.01"],
    ["calibrate", "--epsilon", "1", "--sensitivity", "2"],
    ["calibrate", "--epsilon", "1,2", "--accountant", "zcdp", "--steps", "10"],
    ["last-iterate", "--eta", "0.5", "--lipschitz", "1", "--radius", "1", "--sigma", "1.5",
     "--n", "100", "--sampling-rate", "0.1", "--epsilon", "1"],
    ["last-iterate", "--eta", "0.5", "--lipschitz", "1", "--radius", "1", "--sigma", "1.5",
     "--n", "100", "--sampling-rate", "0.1", "--delta", "1e-5"],
    ["shuffle", "--epsilon0", "1", "--n", "10000"],
]  # fmt: skip


def privacy_schema_errors(record: dict) -> list[str]:
    """How ``record`` departs from the privacy section every run record states."""
    errors = [f"lacks {name}" for name in sorted(PRIVACY_RECORD_FIELDS - set(record))]
    errors += [f"states {name}" for name in ("protected_unit", "neighboring") if name in record]
    return errors


def test_account_states_the_privacy_section_of_a_run_record(capsys):
    """Every question's answer states its guarantee under the names a run record uses (the
    runner's required fields, the adjacency, the target eps); a record missing one is caught."""
    import argparse

    from jfed.cli import account
    from jfed.methods.experiment import PRIVACY_FIELDS
    from jfed.privacy import Adjacency

    assert PRIVACY_RECORD_FIELDS == {*PRIVACY_FIELDS, "adjacency", "epsilon"}
    parser = argparse.ArgumentParser()
    account.add_parser(parser.add_subparsers())
    (questions,) = (
        action.choices
        for command in parser._actions  # argparse has no public walk of its subcommands
        if isinstance(command, argparse._SubParsersAction)
        for action in command.choices["account"]._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    assert {argv[0] for argv in ACCOUNT_QUESTIONS} == set(questions)
    for argv in ACCOUNT_QUESTIONS:
        assert main(["account", *argv, "--json", "-"]) == 0
        record = json.loads(capsys.readouterr().out)
        assert privacy_schema_errors(record) == [], argv
        assert record["epsilon_certified"] == record["epsilon"]
        assert record["trust_model"] and Adjacency.of(record["adjacency"])
        for name in PRIVACY_RECORD_FIELDS:  # negative control: the same check catches a gap
            assert privacy_schema_errors({k: v for k, v in record.items() if k != name})
        renamed = {**record, "protected_unit": record["protected"]}
        del renamed["protected"]
        assert privacy_schema_errors(renamed) == ["lacks protected", "states protected_unit"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["gaussian", "--noise-multiplier", "-1"], "--noise-multiplier > 0"),
        (
            ["gaussian", "--noise-multiplier", "1", "--sampling-rate", "2"],
            "--sampling-rate in (0, 1]",
        ),
        (["gaussian", "--noise-multiplier", "1", "--delta", "0"], "delta in (0, 1)"),
        (["calibrate", "--epsilon", "0"], "--epsilon in [1e-06, 1e+06]"),
        (["shuffle", "--epsilon0", "9", "--n", "1000"], "the bound does not apply"),
    ],
)
def test_account_bad_input(argv, message, capsys):
    assert main(["account", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("jfed: error:") and message in err and "\n" not in err


def test_version_is_one_number_everywhere(capsys):
    """`jfed --version`, `jfed.__version__` and the installed metadata agree (where jfed is
    installed: a checkout on the path alone has no metadata to compare with)."""
    from importlib.metadata import PackageNotFoundError, version

    import jfed

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"jfed {jfed.__version__}"
    try:
        installed = version("jfed")
    except PackageNotFoundError:
        pytest.skip("jfed is not installed here (no package metadata): nothing to compare")
    assert installed == jfed.__version__
