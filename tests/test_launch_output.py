"""``jfed launch`` prints a refusal once: process 0's own words, not each process's copy, and not
the lost connection the others report once process 0, which ran their coordinator, has ended."""

import argparse
import sys

import pytest

from jfed.cli import launch

# process 0 refuses (exit 2); the others then lose their coordinator, as Gloo's DEADLINE_EXCEEDED
# does, and report it as a fault (exit 1); with SAME, every process prints the same refusal
FAKE_PROCESS = """
import os, sys, time
index, mode = os.environ["JFED_PROCESS_ID"], sys.argv[1]
refusal = "jfed: error: --resume of a folder run with other arguments"
if index == "0":
    time.sleep(0.3)
    print(refusal, file=sys.stderr)
    sys.exit(2)
if mode == "same":
    print(refusal, file=sys.stderr)
    sys.exit(2)
time.sleep(0.5)
sys.exit("jfed: internal error: XlaRuntimeError: DEADLINE_EXCEEDED: Gloo timed out")
"""


@pytest.mark.parametrize("mode", ["lost", "same"])
def test_a_refusal_of_process_0_is_printed_once(mode, monkeypatch, capfd):
    monkeypatch.setattr(launch, "child_argv", lambda command: [sys.executable, "-c",
                                                               FAKE_PROCESS, mode])  # fmt: skip
    args = argparse.Namespace(processes=3, coordinator=None, command_line=["--", "run", "ols"])
    assert launch.run(args, launch.child_command(args)) == 2
    err = capfd.readouterr().err
    assert err.count("--resume of a folder run with other arguments") == 1, err
    assert "DEADLINE_EXCEEDED" not in err and "internal error" not in err
    assert "jfed: error: launch: process 0 of 3 exited with status 2" in err


def test_another_process_failing_first_is_shown(monkeypatch, capfd):
    """Negative control: when process 1 fails on its own (process 0 still running), its own
    error is shown and it is the one named."""
    code = ("import os, sys, time\n"
            "if os.environ['JFED_PROCESS_ID'] == '1': sys.exit('jfed: error: process 1 broke')\n"
            "time.sleep(600)\n")  # fmt: skip
    monkeypatch.setattr(launch, "child_argv", lambda command: [sys.executable, "-c", code])
    args = argparse.Namespace(processes=2, coordinator=None, command_line=["--", "run", "ols"])
    assert launch.run(args, launch.child_command(args)) == 1
    err = capfd.readouterr().err
    assert "process 1 broke" in err and "launch: process 1 of 2 exited with status 1" in err
