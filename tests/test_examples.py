"""The examples run as a user runs them: the user-written DP-FedProx (one program per sweep,
records, resume, tuning, plots, the command line, and nothing but jfed's public names) and the
third-party plug-in package installed with pip and driven through the `jfed` command."""

from __future__ import annotations

import ast
import importlib
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
PUBLIC_MODULES = ("jfed", "jfed.methods", "jfed.privacy", "jfed.data")


def public_names(module: str) -> set[str]:
    return set(importlib.import_module(module).__all__)


def jfed_references(path: Path) -> list[tuple[str, str]]:
    """Every (module, name) the file takes from jfed: its imports, and attributes read off an
    imported jfed module (``privacy.clip_tree``)."""
    tree = ast.parse(path.read_text())
    aliases, used = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("jfed"):
                    aliases[alias.asname or alias.name] = alias.name
                    used.append((alias.name, ""))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jfed"):
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                if submodule in PUBLIC_MODULES:
                    aliases[alias.asname or alias.name] = submodule
                    used.append((submodule, ""))
                else:
                    used.append((node.module, alias.name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in aliases:
                used.append((aliases[node.value.id], node.attr))
    return used


@pytest.mark.parametrize(
    "path",
    [
        EXAMPLES / "dp_fedprox.py",
        EXAMPLES / "custom_randomizer.py",
        *sorted((EXAMPLES / "plugin").rglob("*.py")),
    ],
    ids=lambda p: str(p.relative_to(EXAMPLES)),
)
def test_examples_use_only_documented_public_names(path):
    references = jfed_references(path)
    assert references, "the example uses jfed"
    for module, name in references:
        assert module in PUBLIC_MODULES, f"{path.name} imports the internal module {module}"
        if name:
            assert name in public_names(module), f"{path.name} uses {module}.{name}"


def test_a_broken_reference_is_caught(tmp_path):
    """Negative control of the check above: an internal module and a private name."""
    bad = tmp_path / "bad.py"
    bad.write_text("from jfed.methods.registry import METHODS\nfrom jfed import privacy\n"
                   "privacy.accountants\n")  # fmt: skip
    found = jfed_references(bad)
    assert ("jfed.methods.registry", "METHODS") in found
    assert any(m not in PUBLIC_MODULES for m, _ in found)
    assert "accountants" not in public_names("jfed.privacy")


def user_code_lines(path: Path) -> int:
    """Lines of code before the demo block, without imports, docstrings, comments or blanks."""
    source = path.read_text()
    tree = ast.parse(source)
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and ast.get_docstring(
            node
        ):
            skipped |= set(range(node.body[0].lineno, node.body[0].end_lineno + 1))
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            skipped |= set(range(node.lineno, node.end_lineno + 1))
    demo = next(n.lineno for n in tree.body if isinstance(n, ast.Assign)
                and getattr(n.targets[0], "id", "") == "DEMO")  # fmt: skip
    return sum(
        1
        for number, line in enumerate(source.splitlines(), 1)
        if number < demo and line.strip() and not line.strip().startswith("#")
        and number not in skipped
    )  # fmt: skip


def test_dp_fedprox_is_about_sixty_lines_of_user_code():
    assert user_code_lines(EXAMPLES / "dp_fedprox.py") <= 61


@pytest.fixture(scope="module")
def dp_fedprox():
    """The example's module, its method registered (and forgotten afterwards)."""
    from jfed.methods import METHODS

    namespace = runpy.run_path(str(EXAMPLES / "dp_fedprox.py"), run_name="dp_fedprox_example")
    yield namespace
    METHODS.remove("dp-fedprox")


def test_dp_fedprox_sweeps_eps_and_seeds_in_one_program_and_resumes(dp_fedprox, tmp_path):
    import jfed

    config = dp_fedprox["DPFedProxConfig"](rounds=3, local_steps=2)
    out = tmp_path / "sweep"
    rows = jfed.run_grid(config, [2.0, 32.0], seeds=2, grid={"mu": [0.0, 0.1]}, out=str(out))
    assert len(rows) == 8
    assert len({row["compile_seconds"] for row in rows}) == 1  # one compiled program
    assert {row["slice"] for row in rows} == {0}
    for row in rows:
        assert row["method"] == "dp-fedprox"
        assert row["epsilon_certified"] == pytest.approx(row["epsilon"], rel=1e-4)
        assert row["epsilon_certified"] <= row["epsilon"] * (1 + 1e-9)
        assert row["accountant"] == "analytic"
        assert "user-level" in row["notion"] and "add-or-remove" in row["notion"]
        assert 0.0 <= row["test_error"] <= 1.0 and 0.0 <= row["train_error"] <= 1.0
    # more noise at eps = 2 than at eps = 32: the error may not be lower on average
    by_eps = {e: [r["test_error"] for r in rows if r["epsilon"] == e] for e in (2.0, 32.0)}
    assert sum(by_eps[32.0]) <= sum(by_eps[2.0])
    again = jfed.run_grid(config, [2.0, 32.0], seeds=2, grid={"mu": [0.0, 0.1]}, out=str(out),
                          resume=True)  # fmt: skip
    assert [r["timestamp"] for r in again] == [r["timestamp"] for r in rows]  # nothing re-ran
    written = (out / "runs.jsonl").read_text().splitlines()
    assert len(written) == 8


def test_dp_fedprox_guarantee_equals_dp_accounting(dp_fedprox):
    """The certified eps against dp-accounting's PLD composed independently here."""
    import dp_accounting

    config = dp_fedprox["DPFedProxConfig"](rounds=7, epsilon=3.0, delta=1e-4)
    experiment = dp_fedprox["DPFedProx"](config)
    hyper, privacy = experiment.calibrated(config)
    multiplier = float(hyper["privacy"].noise_multiplier)
    assert privacy["noise_multiplier"] == multiplier  # the float32 number that ran
    accountant = dp_accounting.pld.PLDAccountant()
    accountant.compose(dp_accounting.GaussianDpEvent(multiplier), 7)
    assert accountant.get_epsilon(1e-4) == pytest.approx(privacy["epsilon_certified"], rel=1e-3)
    assert privacy["epsilon_certified"] == pytest.approx(3.0, rel=1e-4)
    assert privacy["epsilon_certified"] <= 3.0


def test_dp_fedprox_through_the_command_line(dp_fedprox, tmp_path, capsys):
    import jfed

    out = tmp_path / "cli"
    status = jfed.main(["sweep", "dp-fedprox", "--epsilon", "4,16", "--seeds", "2", "--rounds",
                        "2", "--local-steps", "1", "--grid", "clip=0.25,1", "--out", str(out),
                        "--no-progress"])  # fmt: skip
    assert status == 0, capsys.readouterr().err
    assert (out / "runs.jsonl").exists() and (out / "runs.parquet").exists()
    assert any(name.endswith(".png") for name in os.listdir(out))
    capsys.readouterr()
    assert jfed.main(["methods", "--json"]) == 0
    listed = {m["name"]: m for m in json.loads(capsys.readouterr().out)}
    assert listed["dp-fedprox"]["notion"] == "central (eps, delta)-DP, user-level"


def test_plugin_package_installs_and_runs_through_every_command(tmp_path):
    """pip installs examples/plugin (into a folder on PYTHONPATH, so the test environment is left
    as it was); the `jfed` command then lists, sweeps, resumes and plots its method."""
    target = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(EXAMPLES / "plugin")],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), os.environ.get(
        "PYTHONPATH", "")]))  # fmt: skip

    def jfed(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "jfed", *args]
        return subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path,
                              timeout=600, check=False)  # fmt: skip

    listed = jfed("methods", "--json")
    assert listed.returncode == 0, listed.stderr
    methods = {m["name"]: m for m in json.loads(listed.stdout)}
    assert "noisy-mean" in methods
    assert any(f["name"] == "clip" and f["tunable"] for f in methods["noisy-mean"]["fields"])
    sweep = ["sweep", "noisy-mean", "--clients", "2000", "--epsilon", "0.5,4", "--seeds", "2",
             "--grid", "clip=2,4", "--out", "folder", "--no-progress"]  # fmt: skip
    first = jfed(*sweep)
    assert first.returncode == 0, first.stderr
    rows = [json.loads(line) for line in (tmp_path / "folder" / "runs.jsonl").open()]
    # 2 eps x 2 clips x 2 seeds, and the grid extended past a chosen edge, as for any method
    assert len(rows) >= 8 and {r["method"] for r in rows} == {"noisy-mean"}
    assert {2.0, 4.0} <= {r["clip"] for r in rows}
    assert all(r["accountant"] == "analytic" for r in rows)
    resumed = jfed(*sweep, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert len((tmp_path / "folder" / "runs.jsonl").read_text().splitlines()) == len(rows)
    plotted = jfed("plot", "folder")
    assert plotted.returncode == 0, plotted.stderr
    assert "noisy-mean" in plotted.stdout
    refused = jfed("run", "noisy-mean", "--clip", "-1")
    assert refused.returncode == 2 and "--clip" in refused.stderr
    # the installed package's configuration runs through jfed.run right after its import,
    # before anything else has read the registry
    script = ("import jfed\nfrom jfed_noisy_mean import NoisyMeanConfig\n"
              "record = jfed.run(NoisyMeanConfig(clients=500, epsilon=2.0))\n"
              "print(record['method'], record['epsilon_certified'])")  # fmt: skip
    direct = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=600, check=False)  # fmt: skip
    assert direct.returncode == 0, direct.stderr
    name, epsilon = direct.stdout.split()
    assert name == "noisy-mean" and float(epsilon) == pytest.approx(2.0, rel=1e-6)


@pytest.fixture(scope="module")
def laplace_dpsgd():
    """examples/custom_randomizer.py's module, its method registered (forgotten afterwards)."""
    from jfed.methods import METHODS

    namespace = runpy.run_path(str(EXAMPLES / "custom_randomizer.py"), run_name="laplace_example")
    yield namespace
    METHODS.remove("dpsgd-laplace")


def test_custom_randomizer_is_what_the_clients_run(laplace_dpsgd):
    """The plugged-in randomizer is the clients' noise: mean |noise| / b is 1 for Laplace(b)
    (sd of |X| / b is 1, so the tolerance is 5 / sqrt(n)); negative control: Gaussian noise of
    the same variance has mean |noise| / b = 2 / sqrt(pi) = 1.128, rejected."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jfed.algorithms import dpsgd

    n, scale = 200_000, 0.7
    hp = dpsgd.hyperparams(clip_norm=1e-6, noise_std=scale)  # the clipped gradient is ~0
    record = (jnp.ones(2), jnp.float32(1.0))
    keys = jax.random.split(jax.random.key(3), n // 2)

    def noise(randomizer):
        message = jax.vmap(lambda k: dpsgd.client_message((jnp.zeros(2), hp), record, k,
                                                          randomizer)[0])(keys)  # fmt: skip
        return np.abs(np.asarray(message, np.float64)).mean() / scale

    tolerance = 5 / np.sqrt(n)
    assert abs(noise(laplace_dpsgd["LaplaceNoise"]()) - 1.0) < tolerance
    # Gaussian of std sqrt(2) b (Laplace(b)'s variance): mean |noise| / b = 2 / sqrt(pi)
    gaussian_same_variance = noise(dpsgd.GaussianNoise()) * np.sqrt(2)
    assert gaussian_same_variance == pytest.approx(2 / np.sqrt(np.pi), abs=tolerance)
    assert abs(gaussian_same_variance - 1.0) > tolerance


def test_custom_randomizer_guarantee_equals_dp_accounting(laplace_dpsgd):
    """eps of T Laplace releases of L1 sensitivity sqrt(d) 2G, against dp-accounting's PLD
    composed here; the default-noise method's record is unchanged by the plug."""
    import math

    import dp_accounting

    import jfed
    from jfed.methods import DPSGD

    config = laplace_dpsgd["LaplaceDPSGD"](epsilon=3.0, rounds=4, accountant="pld")
    record = jfed.run(config)
    l1 = math.sqrt(record["dim"]) * 2 * config.gradient_clip
    assert record["sensitivity"] == pytest.approx(l1)
    accountant = dp_accounting.pld.PLDAccountant()
    accountant.compose(dp_accounting.LaplaceDpEvent(record["sigma"] / l1), 4)
    assert accountant.get_epsilon(config.delta) == pytest.approx(record["epsilon_certified"],
                                                                  rel=1e-3)  # fmt: skip
    assert record["epsilon_certified"] <= 3.0 * (1 + 1e-6)
    assert record["method"] == "dpsgd-laplace"
    gaussian = jfed.run(DPSGD(epsilon=3.0, rounds=4, accountant="pld"))
    assert gaussian["sensitivity"] == pytest.approx(2 * config.gradient_clip)
    assert gaussian["sigma"] != record["sigma"]
