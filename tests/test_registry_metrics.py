"""Metric metadata on the method declaration: ``Method(..., metrics=Metrics(...))`` (or a function
of the fixed configuration) is what every record's selection section states and what a sweep
tunes on; the experiment's metric attributes of earlier versions are deprecated."""

from __future__ import annotations

import importlib
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

import jfed
from jfed.methods import (
    EPSILON,
    METHODS,
    Config,
    Experiment,
    Method,
    Metrics,
    Output,
    method,
    param,
    register,
)
from jfed.sweep import schema

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@dataclass(frozen=True)
class ToyConfig(Config):
    epsilon: float = param(1.0, "target eps", range=EPSILON, group="privacy")
    task: str = param("classify", "what is learned", choices=("classify", "regress"))
    step: float = param(0.1, "a step", tunable=True)


class ToyExperiment(Experiment):
    outputs = (Output("w", "state"),)

    def __init__(self, config):
        super().__init__(config)
        self.population = SimpleNamespace(n_clients=3)

    def calibrate(self, config):
        return 0.0, {}


def toy(experiment: type = ToyExperiment, **changes) -> Method:
    fields = dict(name="test-metrics", config=ToyConfig, summary="a toy", notion="central DP",
                  protected="one client", trust_model="trusted server",
                  experiment=experiment)  # fmt: skip
    return Method(**{**fields, **changes})


@pytest.fixture
def clean_registry(forget_registered_methods):
    """Forget the methods a test registers, and the toy configuration's method."""
    yield
    ToyConfig.method = ""


def selection_section(config: Config) -> dict:
    experiment = jfed.methods.build_experiment(config)
    return schema.sections(experiment, config, {}, {}, {})["selection"]


def test_the_records_selection_section_is_the_declarations(clean_registry):
    """The declared metrics are the record's selection section, a function of the fixed fields
    is asked with the run's configuration. Negative control: with no declaration (and no
    attributes of an earlier version) nothing is selected or reported by name."""
    register(toy(metrics=Metrics(selection="train_error", maximize=False, report="test_error")))
    assert selection_section(ToyConfig()) == {
        "selection_metric": "train_error", "selection_maximize": False,
        "report_metric": "test_error",
    }  # fmt: skip

    def by_task(config):
        report = "test_error" if config.task == "classify" else "relative_rmse"
        return Metrics(selection="train_risk", maximize=False, report=report)

    register(toy(metrics=by_task), replace=True)
    assert selection_section(ToyConfig(task="regress"))["report_metric"] == "relative_rmse"
    assert selection_section(ToyConfig())["report_metric"] == "test_error"
    register(toy(), replace=True)
    assert selection_section(ToyConfig()) == {
        "selection_metric": None, "selection_maximize": True, "report_metric": None,
    }  # fmt: skip


def test_a_plugin_record_states_its_declared_metrics_end_to_end(clean_registry, monkeypatch):
    """The example plug-in declares its metrics on its Method (its experiment sets none): a run
    through jfed.run records them and prints its reported metric."""
    monkeypatch.syspath_prepend(str(EXAMPLES / "plugin"))  # the example, not a dependency
    plugin = importlib.import_module("jfed_noisy_mean")
    METHOD, NoisyMeanConfig = plugin.METHOD, plugin.NoisyMeanConfig

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # nothing deprecated is read
        register(METHOD, replace=True)
        record = jfed.run(NoisyMeanConfig(clients=64, dim=2, epsilon=2.0))
    assert (record["selection_metric"], record["selection_maximize"], record["report_metric"]) \
        == ("squared_error", False, "squared_error")  # fmt: skip
    assert "noisy-mean: squared_error" in Experiment.summary(record)
    NoisyMeanConfig.method = ""
    for name in ("jfed_noisy_mean", "jfed_noisy_mean.experiment"):
        sys.modules.pop(name, None)


def test_metric_attributes_of_an_earlier_version_are_read_with_a_deprecation_warning(
    clean_registry,
):
    """An experiment that still sets selection_metric / selection_maximize / report_metric, on
    a method that declares no metrics, keeps its records' selection and gets one warning naming
    the metrics= to write. Negative control: the same attributes contradicting a declaration
    are refused (which one is meant?); agreeing with it, they pass silently."""

    class Legacy(ToyExperiment):
        selection_metric, selection_maximize, report_metric = "loss", False, "test_loss"

    with pytest.warns(DeprecationWarning) as caught:
        register(toy(Legacy))
    (warning,) = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    message = str(warning.message)
    assert message.startswith(
        "method test-metrics: Legacy sets selection_metric, "
        "selection_maximize, report_metric, which are deprecated"
    )
    assert "metrics=Metrics(selection='loss', maximize=False, report='test_loss')" in message
    assert Path(warning.filename).resolve() == Path(__file__).resolve()  # the user's line
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        section = selection_section(ToyConfig())
    assert section == {"selection_metric": "loss", "selection_maximize": False,
                       "report_metric": "test_loss"}  # fmt: skip

    with pytest.raises(ValueError, match=r"Legacy.report_metric = 'test_loss' but the "
                       r"declaration states metrics.report = 'test_error'"):  # fmt: skip
        register(toy(Legacy, metrics=Metrics("loss", False, "test_error")), replace=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        register(toy(Legacy, metrics=Metrics("loss", False, "test_loss")), replace=True)


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        (Metrics(selection=""), "metrics.selection must be a metric's name or None"),
        (Metrics(report=3), "metrics.report must be a metric's name or None"),  # type: ignore[arg-type]
        (Metrics(maximize="yes"), "metrics.maximize must be True or False"),  # type: ignore[arg-type]
        ("test_error", "metrics must be a jfed.methods.Metrics or a function"),
        (lambda config: "test_error", "metrics\\(config\\) must return a jfed.methods.Metrics"),
        (lambda config: Metrics(report=f"test_{config.step}"), "step varies from run to run"),
    ],
)
def test_malformed_metrics_are_refused_at_registration(metrics, message, clean_registry):
    """Each refusal names the method and what is expected; a function that reads a field that
    varies from run to run (it would state the base value for every run) is refused too."""
    with pytest.raises(ValueError, match=message) as error:
        register(toy(metrics=metrics))
    assert str(error.value).startswith("method test-metrics:")
    assert "test-metrics" not in METHODS


def test_every_builtin_method_declares_its_metrics():
    """No built-in method is left on the deprecated attributes: loading every experiment class
    warns of nothing."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for name, declared in METHODS.items():
            if declared.built_in:
                assert declared.metrics is not None, name
                declared.load()
                assert isinstance(declared.metrics_of(declared.config()), Metrics)


@pytest.mark.parametrize("dataset", ["digits-evenodd", "digits-bylabel", "fair-sorted"])
def test_the_silo_declaration_reports_what_its_loss_is_scored_by(dataset):
    """The silo methods' report metric depends on the data set's loss (relative RMSE for the
    squared loss, else the test error rate): the declaration, which cannot load the data, agrees
    with the loss the loaded task states. (synthetic, logistic, takes seconds to generate: the
    slow variant below.)"""
    check_silo_metric(dataset)


@pytest.mark.slow
def test_the_silo_declaration_reports_what_its_loss_is_scored_by_on_every_data_set():
    from jfed import catalog

    for dataset in catalog.SILO_DATASETS:
        check_silo_metric(dataset)


def check_silo_metric(dataset: str) -> None:
    from jfed.algorithms.losses import LOSSES
    from jfed.data import load_silos

    declared = method("noisy-mbsgd")
    config = declared.config(dataset=dataset)
    regression = LOSSES[load_silos(dataset).loss].regression
    assert declared.metrics_of(config).report == ("relative_rmse" if regression else "test_error")
