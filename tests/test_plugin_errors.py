"""An exception raised by a plug-in's own code, or by jfed running a plug-in's declaration, is
reported as the plug-in's: one line naming the method, its package (or module), and its file and
line; never "internal error ... a fault of jfed". The plug-ins here are built on the example
package of examples/plugin, defined in this file (outside the jfed package)."""

import importlib
import os
import sys
from dataclasses import dataclass

import pytest

from jfed.cli.main import main
from jfed.methods import Method, Output, register
from jfed.methods.registry import METHODS

# the repository's own example plug-in (examples/plugin), from its folder: not a dependency. The
# folder leaves sys.path once imported: the build metadata a pip install leaves there would
# otherwise register the package's method, through its entry point, in every later test file
# this process runs
PLUGIN_FOLDER = os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples", "plugin")
sys.path.insert(0, PLUGIN_FOLDER)
try:
    NoisyMeanConfig = importlib.import_module("jfed_noisy_mean").NoisyMeanConfig
    _example = importlib.import_module("jfed_noisy_mean.experiment")
finally:
    sys.path.remove(PLUGIN_FOLDER)
NoisyMean, NoisyMeanAlgorithm = _example.NoisyMean, _example.NoisyMeanAlgorithm


@dataclass(frozen=True)
class BrokenRoundAlgorithm(NoisyMeanAlgorithm):
    def round(self, mean, hyper, key, clients):
        table = {}
        return table["w"]  # the plug-in's own bug


RAISING_LINE = BrokenRoundAlgorithm.round.__code__.co_firstlineno + 2  # its failing line


class BrokenRound(NoisyMean):
    def __init__(self, config):
        super().__init__(config)
        self.algorithm = BrokenRoundAlgorithm(config.clients, config.dim)


class WrongOutput(NoisyMean):
    outputs = (Output("mean", "state"), Output("clipped", "infos.no_such_info", reduce="last"))


@dataclass(frozen=True)
class BrokenRoundConfig(NoisyMeanConfig):
    pass


@dataclass(frozen=True)
class WrongOutputConfig(NoisyMeanConfig):
    pass


@dataclass(frozen=True)
class MistypedConfig(NoisyMeanConfig):
    pass


def _method(name, config, experiment):
    return Method(name=name, config=config, summary="a plug-in that fails",
                  notion="central (eps, delta)-DP", protected="one client's feature vector",
                  trust_model="trusted server adds the noise", experiment=experiment)  # fmt: skip


@pytest.fixture
def registered():
    """Register ``(name, config, experiment)`` for one test and forget it after."""
    names = []

    def add(name, config, experiment):
        register(_method(name, config, experiment), replace=True)
        names.append((name, config))

    yield add
    for name, config in names:
        METHODS.remove(name)
        type.__setattr__(config, "method", "")


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "internal error" not in err and "a fault of jfed" not in err and "Traceback" not in err
    return err


def test_a_key_error_in_the_plugins_round_names_its_file_and_line(registered, capsys,
                                                                  monkeypatch):  # fmt: skip
    monkeypatch.delenv("JFED_TRACEBACK", raising=False)
    registered("broken-round", BrokenRoundConfig, BrokenRound)
    assert main(["run", "broken-round", "--clients", "100"]) == 1
    err = _one_line(capsys)
    assert err.startswith("jfed: error: plug-in method broken-round (module test_plugin_errors)")
    assert f"{__file__}:{RAISING_LINE} (in round)" in err and "KeyError: 'w'" in err
    assert "a fault of the plug-in, not of jfed" in err


def test_a_wrong_output_path_is_the_plugins(registered, capsys, monkeypatch):
    """Raised by jfed while it reads the plug-in's declared outputs: the plug-in's experiment
    class is named with its file and line."""
    monkeypatch.delenv("JFED_TRACEBACK", raising=False)
    try:
        registered("wrong-output", WrongOutputConfig, WrongOutput)
    except ValueError as refused:  # refused at registration: as good, and said at once
        assert "no_such_info" in str(refused)
        return
    assert main(["run", "wrong-output", "--clients", "100"]) == 1
    err = _one_line(capsys)
    assert err.startswith("jfed: error: plug-in method wrong-output (module test_plugin_errors, "
                          f"its experiment declared at {__file__}:")  # fmt: skip


def test_a_mistyped_experiment_name_is_the_plugins(registered, capsys, monkeypatch):
    monkeypatch.delenv("JFED_TRACEBACK", raising=False)
    registered("mistyped", MistypedConfig, "jfed_noisy_mean.experimnt:NoisyMean")
    assert main(["run", "mistyped", "--clients", "100"]) == 1
    err = _one_line(capsys)
    assert err.startswith("jfed: error: plug-in method mistyped (")  # its package, if installed
    assert ("its experiment 'jfed_noisy_mean.experimnt:NoisyMean' cannot be loaded: "
            "ModuleNotFoundError") in err  # fmt: skip


def test_the_same_fault_in_jfeds_own_method_is_jfeds(capsys, monkeypatch):
    """Negative control: a KeyError raised while running a built-in method is jfed's."""
    import jfed.cli.main as cli

    monkeypatch.delenv("JFED_TRACEBACK", raising=False)
    monkeypatch.setattr(cli, "_run", lambda args, config: {}["w"])
    assert main(["run", "ols", "--synthetic", "--clients", "10"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("jfed: internal error: KeyError: 'w'") and "fault of jfed" in err


def test_an_installed_package_is_named_with_its_version():
    from importlib import metadata

    from jfed.cli.faults import _package

    assert _package("numpy.linalg") == f"package numpy {metadata.version('numpy')}"
    assert _package("not_installed_anywhere") == "module not_installed_anywhere"
