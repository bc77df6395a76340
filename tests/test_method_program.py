"""The runner's protocol: a frozen program built once per sweep (``Experiment.frozen``),
calibration as one batch function of the runs' configurations (``Experiment.calibrate_all``),
then evaluation. Run on the example plug-in's method (one round, a few hundred clients)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from jfed.methods import Experiment, Output, Program, register
from jfed.methods.registry import check_experiment
from jfed.sweep import configurations, run_sweep

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture
def noisy_mean(monkeypatch, forget_registered_methods):
    """The example plug-in's module (its experiment and configuration), registered."""
    monkeypatch.syspath_prepend(str(EXAMPLES / "plugin"))  # the example, not a dependency
    plugin = importlib.import_module("jfed_noisy_mean")
    experiment_module = importlib.import_module("jfed_noisy_mean.experiment")
    register(plugin.METHOD, replace=True)
    yield plugin, experiment_module
    plugin.NoisyMeanConfig.method = ""
    for name in ("jfed_noisy_mean", "jfed_noisy_mean.experiment"):
        sys.modules.pop(name, None)


def _sweep(experiment, configs, **options) -> list[dict]:
    return run_sweep(experiment, configs, None, progress=False, **options)


class _Broken:
    """An algorithm that fails when it is traced: reaching it means the runner read the
    experiment instead of its frozen program."""

    def init(self, hyper, key):
        raise AssertionError("the runner read the experiment's algorithm after build_program")

    def round(self, state, hyper, key, clients):
        raise AssertionError("the runner read the experiment's algorithm after build_program")


def test_the_program_is_built_once_and_is_what_runs(noisy_mean):
    """``build_program`` calls ``prepare`` with the sweep's configurations and freezes the
    population, algorithm, outputs and rounds; an algorithm swapped on the experiment afterwards
    (during calibration) reaches neither the compiled program nor the ledger later slices are
    calibrated from. Negative control: the same swap before the program is built makes the run
    fail."""
    plugin, module = noisy_mean
    prepared: list[list] = []

    class Recorded(module.NoisyMean):
        def prepare(self, configs):
            prepared.append(list(configs))

        def calibrate_all(self, configs):
            results = super().calibrate_all(configs)
            self.algorithm = _Broken()  # too late: the program is frozen
            return results

    base = plugin.NoisyMeanConfig(clients=200, dim=2)
    configs = configurations(base, [1.0, 4.0], seeds=2)
    experiment = Recorded(base)
    rows = _sweep(experiment, configs, slice_size=2)
    assert [row["epsilon"] for row in rows] == [c.epsilon for c in configs]
    assert prepared == [configs]  # once, with every configuration of the sweep
    assert isinstance(experiment.running()[0], _Broken)  # outside the sweep: its own again

    program = module.NoisyMean(base).build_program(configs)
    assert isinstance(program, Program) and program.rounds == 1
    assert program.algorithm == module.NoisyMeanAlgorithm(200, 2)
    assert program.population.n_clients == 200 and program.shared_noise_algorithm is None

    early = module.NoisyMean(base)
    early.algorithm = _Broken()  # negative control: swapped before the program is built
    with pytest.raises(AssertionError, match="read the experiment's algorithm"):
        _sweep(early, configs[:1])


def test_calibration_is_one_batch_per_slice_and_once_per_configuration(noisy_mean):
    """The runner hands each slice's configurations (padding included) to ``calibrate_all`` in
    one call; the default calibrates each distinct configuration once (a padded slice repeats its
    last). Negative control: the per-slice calls would show 3 + 3 configurations without the
    padding, and ``calibrate`` would run 6 times with it counted twice."""
    plugin, module = noisy_mean
    batches: list[list] = []
    calibrated: list = []

    class Counted(module.NoisyMean):
        def calibrate_all(self, configs):
            batches.append(list(configs))
            return super().calibrate_all(configs)

        def calibrate(self, config):
            calibrated.append(config)
            return super().calibrate(config)

    base = plugin.NoisyMeanConfig(clients=200, dim=2)
    configs = configurations(base, [1.0, 2.0, 4.0], seeds=[0, 1])  # 6 runs, slices of 4
    rows = _sweep(Counted(base), configs, slice_size=4)
    assert len(rows) == 6
    assert [len(batch) for batch in batches] == [4, 4]
    assert batches[0] == configs[:4] and batches[1] == configs[4:] + [configs[-1]] * 2
    assert sorted(map(repr, calibrated)) == sorted(map(repr, configs))  # each exactly once


def test_a_batched_calibration_alone_defines_a_method(noisy_mean):
    """An experiment may give ``calibrate_all`` instead of ``calibrate`` / ``hyperparams`` (a
    batch search over every eps of a setting, say): it registers, runs, and its results are
    checked like ``calibrate``'s; a wrong count or a missing privacy field is refused naming the
    method."""
    plugin, module = noisy_mean

    class OnlyBatch(Experiment):
        outputs = (Output("w", "state"),)

        def calibrate_all(self, configs):
            return [(0.0, {}) for _ in configs]

    check_experiment("test-batch", OnlyBatch)  # accepted without calibrate / hyperparams

    class Batched(module.NoisyMean):
        def calibrate_all(self, configs):
            # one search per distinct eps, shared by its seeds (as a batch method would)
            by_eps = {c.epsilon: self.calibrate(c) for c in configs}
            return [by_eps[c.epsilon] for c in configs]

    base = plugin.NoisyMeanConfig(clients=200, dim=2)
    configs = configurations(base, [1.0, 4.0], seeds=1)
    reference = _sweep(module.NoisyMean(base), configs)
    rows = _sweep(Batched(base), configs)
    # == on host floats: the same calibrate calls in one process give the same bits
    assert [r["epsilon_certified"] for r in rows] == [r["epsilon_certified"] for r in reference]
    assert [r["squared_error"] for r in rows] == [r["squared_error"] for r in reference]

    class TooFew(module.NoisyMean):
        def calibrate_all(self, configs):
            return super().calibrate_all(configs)[:-1]

    with pytest.raises(ValueError, match="method noisy-mean: calibrate_all must return a list"):
        _sweep(TooFew(base), configs)

    class Unstated(module.NoisyMean):
        def calibrate_all(self, configs):
            return [(hyper, {}) for hyper, _ in super().calibrate_all(configs)]

    with pytest.raises(ValueError, match="method noisy-mean: calibrate's privacy lacks"):
        _sweep(Unstated(base), configs)


def test_an_experiment_with_no_calibration_at_all_is_refused():
    class Nothing(Experiment):
        outputs = (Output("w", "state"),)

    with pytest.raises(ValueError, match=r"calibrate_all\(configs\) is defined"):
        check_experiment("test-x", Nothing)
