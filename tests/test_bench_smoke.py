"""No benchmark can rot: every script in ``bench/`` runs at its smoke size (``--smoke``: tiny
shapes, the same code path as the real run, seconds) and writes its JSON where it is told, never
over a committed result in ``bench/results/``.

The scripts are found, not listed: a new script without ``--smoke`` fails here (argparse refuses
the flag). Every script is imported and its arguments parsed (``--smoke --help``: its imports
resolve, ``main(argv)`` builds its parser); every script runs its smoke size, in this process
(``main(argv)``: a fresh interpreter and JAX import per script would cost more than most smoke
runs), those of :data:`SLOW` only with ``-m slow`` (CI's budget: their compiles and calibrations
take 9-120 s of CPU each even at tiny sizes). One script, :data:`AS_A_USER`, runs as a user runs
it instead, ``python bench/<script>``, so the scripts' own path setup (``from _common import
...``) is checked too.
Peers that need an environment of their own are left out by the smoke sizes, which say so: pfl
(``pfl_cifar10.py --no-peer``), PyTorch (``ldp_fl.py --torch-device none``); the child
processes some scripts time (``engine.py``'s one-core row, ``sweep.py``'s fresh processes,
``startup.py``'s demo) are left out, and ``vmap_one.py`` runs its rows in this process.

    python -m pytest -n 0 -m "slow or not slow" tests/test_bench_smoke.py   # every smoke run"""

from __future__ import annotations

import ast
import glob
import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")
RESULTS = os.path.join(BENCH, "results")
SCRIPTS = sorted(
    os.path.basename(path)
    for path in glob.glob(os.path.join(BENCH, "*.py"))
    if not os.path.basename(path).startswith("_")  # helpers and peers' children, not scripts
)


AS_A_USER = "startup.py"
"""The script run in a new interpreter from the repository's root (the cheapest full run: it
times ``jfed --help`` and a refused argument, each in a child process)."""
SLOW = {
    "audit.py": 28, "client_state.py": 11, "cohort.py": 12, "correlated_noise.py": 9,
    "discrete_noise.py": 10, "engine.py": 21, "exact_noise.py": 21, "ldp_fl.py": 46,
    "ldp_fl_fraction.py": 43, "modulated_round.py": 11, "pfl_cifar10.py": 9, "plans.py": 21,
    "progress.py": 14, "shuffle_exact.py": 50, "silo_sgd.py": 29, "silo_sweep_costs.py": 123,
    "sweep.py": 27, "vmap_one.py": 20,
}  # fmt: skip
"""Scripts whose smoke run is kept out of the default run, with its CPU seconds measured on the
project's 2-core CPU under a load of 10-15 (the tests' XLA settings, one process running them
all in turn, about 440 s together): a script not named here runs in CI. The default run's:
calibration 4.5, draws 4.2, dp_fedavg 6.0, and startup (as a user runs it) about 5."""


def smoke_marks(script: str):
    """``script`` as a parameter, marked slow where it is one of :data:`SLOW`."""
    return pytest.param(script, marks=pytest.mark.slow) if script in SLOW else script


def committed_results() -> dict[str, tuple[int, int]]:
    """``{file: (mtime_ns, size)}`` of ``bench/results/``: what a smoke run must leave alone."""
    return {
        name: (os.stat(path).st_mtime_ns, os.stat(path).st_size)
        for name in sorted(os.listdir(RESULTS))
        for path in [os.path.join(RESULTS, name)]
    }


def load(script: str, monkeypatch: pytest.MonkeyPatch):
    """``bench/<script>`` imported as a module of its own name (``bench_<stem>``), with
    ``bench/`` on the path as when the script runs."""
    monkeypatch.syspath_prepend(BENCH)
    name = "bench_" + os.path.splitext(script)[0]
    spec = importlib.util.spec_from_file_location(name, os.path.join(BENCH, script))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_scripts_are_found():
    assert "dp_fedavg.py" in SCRIPTS and "calibration.py" in SCRIPTS
    assert not [s for s in SCRIPTS if s.startswith("_")]
    assert set(SLOW) <= set(SCRIPTS), "SLOW names a script that is gone"


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_parses_smoke(script, monkeypatch, capsys):
    """Every script imports and takes ``--smoke`` (``--help`` stops before any work)."""
    with pytest.raises(SystemExit) as done:
        load(script, monkeypatch).main(["--smoke", "--help"])
    assert done.value.code == 0
    assert "--smoke" in capsys.readouterr().out


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_runs_as_a_script(script):
    """``python bench/<script>`` calls ``main()``: the in-process runs below skip that line."""
    with open(os.path.join(BENCH, script), encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    last = tree.body[-1]
    assert isinstance(last, ast.If) and ast.unparse(last.test) == "__name__ == '__main__'"
    calls = [node.func.id for node in ast.walk(last) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Name)]  # fmt: skip
    assert "main" in calls, f"bench/{script}: its __main__ block does not call main()"


@pytest.mark.parametrize("script", [smoke_marks(s) for s in SCRIPTS if s != AS_A_USER])
def test_smoke(script, tmp_path, monkeypatch, capsys):
    before = committed_results()
    out = tmp_path / "result.json"
    load(script, monkeypatch).main(["--smoke", "--json", str(out)])
    assert "smoke run of" in capsys.readouterr().out
    with open(out, encoding="utf-8") as handle:
        payload = json.load(handle)
    assert isinstance(payload, dict) and payload
    assert payload.get("rows", [None]), f"bench/{script} --smoke wrote no rows"
    assert committed_results() == before, f"bench/{script} --smoke touched bench/results/"


def test_smoke_as_a_user_runs_it(tmp_path):
    """The real path: a new interpreter runs the script file from the repository's root."""
    before = committed_results()
    out = tmp_path / "startup.json"
    subprocess.run(
        [sys.executable, os.path.join("bench", AS_A_USER), "--smoke", "--json", str(out)],
        cwd=ROOT, check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    with open(out, encoding="utf-8") as handle:
        assert json.load(handle)["rows"]
    assert committed_results() == before


def test_smoke_never_writes_bench_results(monkeypatch, capsys):
    """Negative control: a smoke run told to write under bench/results/ is refused before it
    runs."""
    module = load("calibration.py", monkeypatch)
    with pytest.raises(SystemExit) as refused:
        module.main(["--smoke", "--json", os.path.join(RESULTS, "calibration_smoke.json")])
    assert refused.value.code == 2
    assert "writes no result under" in capsys.readouterr().err
    assert not os.path.exists(os.path.join(RESULTS, "calibration_smoke.json"))
