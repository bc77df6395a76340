"""Bad input is jfed's own UsageError (exit 2, one line); any other exception is a fault of jfed,
said to be one (exit 1, one line asking for a report), never passed off as bad input."""

import subprocess
import sys

import pytest

from jfed import _validation
from jfed._validation import UsageError
from jfed.cli import main as cli


@pytest.mark.parametrize(
    "check, args",
    [
        (_validation.check_positive, ("sigma", -1.0)),
        (_validation.check_nonnegative, ("clip", float("nan"))),
        (_validation.check_open_unit, ("delta", 1.0)),
        (_validation.check_int_range, ("rounds", 0, 1, 10)),
        (_validation.check_finite_array, ("x", [1.0, float("inf")])),
        (_validation.check_orthonormal, ("V", [[1.0, 1.0], [0.0, 1.0]])),
    ],
)
def test_every_validation_helper_raises_usage_error_a_value_error(check, args):
    with pytest.raises(UsageError) as raised:
        check(*args)
    assert isinstance(raised.value, ValueError)  # `except ValueError` still catches it
    assert args[0] in str(raised.value) and "\n" not in str(raised.value)


def test_a_library_refusal_during_a_run_is_bad_input(monkeypatch, capsys):
    """A UsageError raised while the run works (after the argument checks) is exit 2."""

    def refuse(args, config):
        raise UsageError("expected --thing in [1, 2], got --thing=3")

    monkeypatch.setattr(cli, "_run", refuse)
    monkeypatch.setattr(cli, "check_cost", lambda *a: None)
    assert cli.main(["run", "ols", "--synthetic", "--clients", "10"]) == 2
    captured = capsys.readouterr()
    assert captured.err == "jfed: error: expected --thing in [1, 2], got --thing=3\n"


@pytest.mark.parametrize(
    "error",
    [ValueError("x must contain only finite values"), KeyError("w"), RuntimeError("boom")],
)
def test_any_other_exception_is_a_fault_of_jfed_not_bad_input(error, monkeypatch, capsys):
    """A plain ValueError (scipy's, say) is a fault of jfed: exit 1, one line saying so.
    Negative control: the same message as a UsageError is exit 2 (above)."""

    def fail(args, config):
        raise error

    monkeypatch.setattr(cli, "_run", fail)
    monkeypatch.setattr(cli, "check_cost", lambda *a: None)
    monkeypatch.delenv("JFED_TRACEBACK", raising=False)
    assert cli.main(["run", "ols", "--synthetic", "--clients", "10"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("jfed: internal error:")
    assert type(error).__name__ in err and "please report it" in err
    assert "jfed: error:" not in err  # never dressed up as a refusal of the input


def test_jfed_traceback_shows_the_fault(monkeypatch):
    monkeypatch.setattr(cli, "_run", lambda args, config: 1 / 0)
    monkeypatch.setattr(cli, "check_cost", lambda *a: None)
    monkeypatch.setenv("JFED_TRACEBACK", "1")
    with pytest.raises(ZeroDivisionError):
        cli.main(["run", "ols", "--synthetic", "--clients", "10"])


def test_declaration_range_checks_are_bad_input(capsys):
    """The declarations' ValueErrors, raised while the arguments are checked, are refusals."""
    assert cli.main(["run", "modulated", "--directions", "9"]) == 2
    assert capsys.readouterr().err.startswith("jfed: error: expected --directions in [1, 8]")


def test_an_internal_error_from_the_console_is_one_line_exit_1(tmp_path):
    """Through the console entry point: a fault inside a command is exit 1 without a traceback."""
    script = (
        "import sys; from jfed.cli import main as cli\n"
        "cli._datasets = lambda: {}['missing']\n"
        "sys.exit(cli.main(['datasets']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1
    assert "internal error: KeyError" in result.stderr


def test_a_configuration_refusal_is_a_configuration_error_a_usage_error():
    """Whatever check refuses a configuration built from the flags (a plain ValueError of a
    declaration's own check), it reaches the command line as one ConfigurationError."""
    from jfed._validation import ConfigurationError
    from jfed.cli.generate import checked_config

    def refuse():
        raise ValueError("expected --mu >= 0, got --mu=-1")

    with pytest.raises(ConfigurationError, match=r"^--grid mu=-1: expected --mu >= 0") as raised:
        checked_config(refuse, "--grid mu=-1: ")
    assert isinstance(raised.value, UsageError)
    assert checked_config(lambda: 3) == 3  # negative control: an accepted one passes through
