"""Two local processes on JAX's distributed runtime (`jfed launch`): the client axis sharded over
both processes' devices gives the same result as one process on a mesh of as many devices, and
only process 0 prints and writes."""

import json
import os
import subprocess
import sys

import pytest

from jfed.cli.main import main
from jfed.sweep import read_rows

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = ["run", "modulated", "--synthetic", "--clients", "20000"]


def _launch(argv: list[str]) -> subprocess.CompletedProcess:
    # one CPU device per process: the two processes hold the mesh's two devices, compiled as
    # this process compiles its reference
    flags = os.environ["XLA_FLAGS"].replace("--xla_force_host_platform_device_count=8", "")
    env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu", JFED_COMPILATION_CACHE="off")
    return subprocess.run(
        [sys.executable, "-m", "jfed", "launch", "--processes", "2", "--", *argv],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False,
    )  # fmt: skip


@pytest.mark.usefixtures("on_cpu")  # the processes run on CPU devices: so does the reference
def test_two_processes_equal_one_process_on_two_devices(tmp_path):
    import jfed
    from jfed.engine import ExecutionPlan, client_mesh
    from jfed.methods import ModulatedIterative

    result = _launch([*RUN, "--json", "-"])
    assert result.returncode == 0, result.stderr
    # standard output is the record alone: gloo's own lines go to standard error (negative
    # control: they are there, so they were printed and redirected, not absent)
    record = json.loads(result.stdout)
    assert "[Gloo]" in result.stderr and "[Gloo]" not in result.stdout
    assert record["plan"]["n_shards"] == 2
    # the processes run on CPU: the reference takes the CPU's plan too, whatever the default
    # backend (on a GPU host its plan's chunks of 262,144 clients, not 4,096, summed the same
    # clients in another order: 8e-6 relative apart)
    plan = ExecutionPlan.for_backend("cpu", mesh=client_mesh(2, backend="cpu"))
    local = jfed.run(ModulatedIterative(synthetic=True, clients=20_000), plan=plan)
    assert local["plan"] == record["plan"]  # the same blocks, chunks and shards
    # the same shards reduced in the same order: bit for bit with jax 0.10 (jax 0.7's gloo
    # reduction differed by 1e-10 relative), so the bound is float32's, not 0
    assert record["sigma"] == local["sigma"]
    assert record["test_r2"] == pytest.approx(local["test_r2"], rel=1e-6)
    alone = jfed.run(
        ModulatedIterative(synthetic=True, clients=20_000), plan=ExecutionPlan.for_backend("cpu")
    )
    # against one device only the order of the final sum of two partial totals differs
    assert record["test_r2"] == pytest.approx(alone["test_r2"], rel=1e-4)


def test_a_two_process_sweep_writes_each_run_once(tmp_path):
    out = tmp_path / "sweep"
    argv = ["sweep", "modulated-one-shot", "--dataset", "modechoice", "--epsilon", "1,4",
            "--seeds", "2", "--no-progress", "--out", str(out)]  # fmt: skip
    result = _launch(argv)
    assert result.returncode == 0, result.stderr
    rows = read_rows(str(out / "runs.jsonl"))
    assert len(rows) == 4 == len({row["config_key"] for row in rows})
    assert {row["plan"]["n_shards"] for row in rows} == {2}
    assert (out / "runs.parquet").exists() and result.stdout.count("modulated-one-shot on") == 2


@pytest.mark.parametrize(
    "argv, message",
    [
        (["launch", "--processes", "0", "--", *RUN], "--processes in [1, 64]"),
        (["launch", "--", "demo"], "expected `jfed launch --processes N -- run ...`"),
        (["launch", "--", *RUN, "--epsilon", "-1"], "--epsilon in [1e-06"),
        (["launch", "--coordinator", "localhost", "--", *RUN], "expected --coordinator HOST:PORT"),
        (["launch", "--coordinator", "h:0", "--", *RUN], "expected --coordinator HOST:PORT"),
    ],
)
def test_launch_refuses_bad_input_before_starting_processes(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("jfed: error:") and message in err and "\n" not in err, err


# each fake process writes its coordinator address; process 1 fails at once, process 0 would wait
# for it forever (as in a collective)
FAKE_PROCESS = """
import os, sys, time
index = os.environ["JFED_PROCESS_ID"]
with open(os.path.join(sys.argv[1], "pid-" + index), "w") as f:
    f.write(str(os.getpid()))
with open(os.path.join(sys.argv[1], "coordinator-" + index), "w") as f:
    f.write(os.environ["JFED_COORDINATOR"])
if index == "1":
    while not os.path.exists(os.path.join(sys.argv[1], "coordinator-0")):
        time.sleep(0.01)
    sys.exit("jfed: error: process 1 failed on purpose")
time.sleep(600)
"""


@pytest.mark.parametrize("address", [None, "10.1.2.3:4567"])
def test_a_failed_process_stops_the_others_within_seconds(address, tmp_path, monkeypatch, capfd):
    import argparse

    from jfed.cli import launch

    monkeypatch.setattr(
        launch, "child_argv", lambda command: [sys.executable, "-c", FAKE_PROCESS, str(tmp_path)]
    )
    args = argparse.Namespace(processes=2, coordinator=address, command_line=["--", "run", "ols"])
    status = launch.run(args, launch.child_command(args))
    err = capfd.readouterr().err
    assert status == 1
    # the sleeping process was ended (not waited for: it sleeps 600 s): when the launcher
    # returns, no process of that pid is left
    sleeper = int((tmp_path / "pid-0").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(sleeper, 0)
    assert "process 1 failed on purpose" in err  # the process's own line
    assert "jfed: error: launch: process 1 of 2 exited with status 1" in err
    coordinators = {(tmp_path / f"coordinator-{i}").read_text() for i in range(2)}
    (coordinator,) = coordinators
    if address is None:
        assert coordinator.startswith("127.0.0.1:")  # reachable from this machine only
    else:
        assert coordinator == address
