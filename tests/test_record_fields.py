"""Every record field classified by one mechanism (jfed.methods.record_fields), for every method:

- every registered method's metrics (each one's known metrics, :data:`METRICS`) are declared
  inside the guarantee, outside it, or public by its experiment (``record_fields`` along its
  class hierarchy, its outputs' ``kind``), read from the classes without running anything; a
  method missing from :data:`METRICS` fails, so a new method is classified when it is added;
- a few methods' evaluations (on outputs of the right shapes, traced, not run; the rest under
  ``-m slow``) return exactly the metrics listed here, so the list cannot drift from the code;
- a plug-in's record lists its outside fields (and the wall-clock time) in
  ``not_private_fields``, its seed in ``secret_fields``; negative control: a metric it leaves
  unclassified is listed in ``unclassified_fields`` and counted outside.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jfed
from jfed import privacy
from jfed.data.population import ArrayClients
from jfed.methods import (
    EPSILON,
    METHODS,
    OPEN_UNIT,
    Config,
    Experiment,
    Metrics,
    Output,
    build_experiment,
    integers,
    param,
    register_method,
)
from jfed.methods.experiment import CanaryAudit
from jfed.methods.record_fields import KINDS, kinds_of, labels

SILO = ("available_per_round", "clipped_fraction", "excess_test_risk", "excess_train_risk",
        "heterogeneity", "optimum_test_error", "rounding_fallbacks", "test_error",
        "test_error_per_round")  # fmt: skip
FEDERATED = ("clipped_fraction", "clipped_fraction_per_round", "mean_cohort_size",
             "rounding_fallbacks", "test_accuracy", "test_error", "train_accuracy")  # fmt: skip
FEDAVG = (*FEDERATED, "clip_per_round", "mean_update_norm", "noise_std_per_round",
                      "overflowed_clients", "mean_survivors", "withheld_rounds",
                      "wrapped_coordinates")  # fmt: skip
REGRESSION = ("test_r2", "validation_r2", "ols_r2", "ols_validation_r2", "test_r2_per_round",
              "clipped_fraction")  # fmt: skip
ESTIMATION = ("bias", "bias_se", "clipped_fraction", "mse", "mse_se", "privacy_mse",
              "privacy_mse_se", "replications", "rounding_fallbacks", "sampling_variance",
              "theory_rate")  # fmt: skip
AUDIT = ("audit_epsilon_lower", "audit_epsilon_estimate", "audit_confidence", "audit_estimator",
         "audit_canary_count", "audit_delta", "audit_notion")  # fmt: skip
METRICS = {
    "modulated-iterative": (*REGRESSION, "test_r2_average", "step_size_per_round"),
    "modulated-one-shot": (*REGRESSION, "test_r2_raw", "test_r2_psd"),
    "dpsgd": REGRESSION, "ols": REGRESSION,
    "noisy-mbsgd": SILO, "accel-mbsgd": SILO, "shuffle-mbsgd": SILO, "local-sgd": SILO,
    "mbsgd": SILO, "fedavg": SILO,
    "ldp-fl": ("clipped_fraction", "largest_radius", "noise_free_test_accuracy",
               "test_accuracy", "test_accuracy_per_round", "train_accuracy"),
    "estimation": ESTIMATION,
    "functional-estimation": (*ESTIMATION, "theory_dense", "theory_functions", "theory_private",
                                           "theory_private_sparse", "truncation_error"),
    "dp-fedavg": FEDAVG, "fedavg-sampled": FEDAVG,
    "scaffold": (*FEDERATED, "control_norm"),
    "dp-scaffold": (*FEDERATED, "control_norm", "control_clipped_fraction"),
    "ditto": (*FEDERATED, "clients_personalised", "personal_test_accuracy",
                          "global_test_accuracy_reweighted"),
    "dp-ditto": (*FEDERATED, "clients_personalised", "personal_test_accuracy",
                             "global_test_accuracy_reweighted"),
    "dp-ftrl": FEDERATED, "blt-dp-ftrl": FEDERATED,
}  # fmt: skip
"""Every metric each built-in method's ``evaluate`` may return (audited runs add :data:`AUDIT`)."""

DIGITS = dict(dataset="digits-dirichlet", clients=30, dirichlet=0.1, batch=10, rounds=2,
              cohort_size=6)  # fmt: skip
TRACED = {"scaffold": DIGITS, "ditto": DIGITS, "mbsgd": dict(rounds=2)}
"""Methods whose evaluation is checked against :data:`METRICS` by default (cheap to build)."""
SLOW = {"dp-fedavg": DIGITS, "dp-scaffold": DIGITS, "dp-ftrl": DIGITS, "fedavg": dict(rounds=2),
        "noisy-mbsgd": dict(rounds=2), "ldp-fl": dict(rounds=2, clients=20),
        "estimation": dict(sites=4, units=10), "functional-estimation": {}}  # fmt: skip


def unclassified(name: str) -> list[str]:
    """The metrics of method ``name`` its experiment's declarations leave without a kind."""
    cls = METHODS[name].load()
    kinds = cls.declared_kinds()
    known = METRICS[name] + (AUDIT if issubclass(cls, CanaryAudit) else ())
    return sorted(m for m in known if kinds.get(m) not in KINDS)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_registered_methods_metrics_are_classified(name):
    assert name in METRICS, f"method {name}: list its metrics in METRICS and classify them"
    assert unclassified(name) == []


def evaluated_metrics(name: str, changes: dict) -> set[str]:
    """The metrics method ``name``'s evaluation returns for outputs of the right shapes (its
    program traced with ``jax.eval_shape``, not run; zeros in every output)."""
    from jfed.engine import ExecutionPlan
    from jfed.engine.loop import run_rounds

    config = METHODS[name].config(**changes)
    experiment = build_experiment(config)
    program = experiment.build_program([config])
    if hasattr(experiment, "noise_choice"):  # the federated family: z = 1 gives the shapes
        hyper = experiment.hyperparams(config, 1.0 if experiment.method.private else None)
    else:
        hyper = experiment.calibrated(config)[0]
    plan = ExecutionPlan().fitted(program.population.n_clients)

    def outputs(hp, key):
        state, infos = run_rounds(program.algorithm, program.population, hp, key,
                                  program.rounds, plan)  # fmt: skip
        return program.outputs(state, infos)

    shapes = jax.eval_shape(outputs, hyper, jax.random.key(0))
    zeros = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes)
    return set(experiment.evaluate(zeros, config))


@pytest.mark.parametrize(
    "name", [*TRACED, *(pytest.param(n, marks=pytest.mark.slow) for n in SLOW)]
)
def test_the_listed_metrics_are_what_evaluate_returns(name):
    changes = TRACED.get(name, SLOW.get(name))
    assert evaluated_metrics(name, changes) <= set(METRICS[name])


def test_the_classification_sees_an_unclassified_metric():
    """Negative control: a metric the declarations do not know is unclassified, counted outside
    in a private record, and listed as such; the seed is secret, the wall-clock time outside."""
    sections = {"configuration": {"seed": 0, "epsilon": 1.0}, "run": {"run_seconds": 1.0},
                "metrics": {"test_error": 0.1, "leaky": 1.0},
                "privacy": {"delta": 1e-5}}  # fmt: skip
    kinds = kinds_of(sections, {"test_error": "inside"})
    assert kinds == {"seed": "secret", "epsilon": "public", "run_seconds": "outside",
                     "test_error": "inside", "leaky": None, "delta": "public"}  # fmt: skip
    assert labels(kinds, private=True) == {"not_private_fields": ["leaky", "run_seconds"],
                                           "secret_fields": ["seed"],
                                           "unclassified_fields": ["leaky"]}  # fmt: skip
    assert labels(kinds, private=False) == {"unclassified_fields": ["leaky"]}


@dataclass(frozen=True)
class KeptConfig(Config):
    epsilon: float = param(4.0, "eps of the run", range=EPSILON, group="privacy")
    delta: float = param(1e-4, "delta of the run", range=OPEN_UNIT, group="privacy")
    rounds: int = param(1, "rounds", range=integers(1, 10), group="run")


@dataclass(frozen=True)
class Summed:
    """One Gaussian sum over every client a round."""

    aggregator: ClassVar = privacy.GaussianSum()

    def init(self, h, key):
        return jnp.zeros(2)

    def round(self, w, h, key, clients):
        def client(w, record, key):
            x, _ = record
            return x - w

        total, _, info = clients.aggregate(self.aggregator, h["privacy"], (), client, w, key)
        return w + total / clients.n_clients, {"clipped": info["clipped_count"]}


@pytest.fixture(scope="module")
def kept_method():
    """A plug-in on the default evaluate: its outputs' kinds classify its metrics."""

    @register_method(
        "test-kept-kinds", config=KeptConfig, summary="outputs with kinds",
        notion="central (eps, delta)-DP", protected="one client's record",
        trust_model="trusted server adds the noise",
        metrics=Metrics(selection="norm", maximize=False, report="norm"),
    )  # fmt: skip
    class Kept(Experiment):
        outputs = (Output("w", "state", kind="inside"),
                   Output("clipped", "infos.clipped", reduce="mean", kind="outside"),
                   Output("norm", "infos.clipped", reduce="sum"))  # fmt: skip

        def __init__(self, config):
            super().__init__(config)
            rng = np.random.default_rng(0)
            self.population = ArrayClients.from_numpy(rng.normal(size=(6, 2)), np.zeros(6))
            self.algorithm = Summed()

        def hyperparams(self, config, noise_multiplier):
            z = 0.0 if noise_multiplier is None else noise_multiplier
            return {"privacy": jax.tree.map(jnp.float32, privacy.GaussianSumParams(1.0, z))}

    yield KeptConfig
    METHODS.remove("test-kept-kinds")


def test_a_plugins_record_labels_its_fields(kept_method):
    record = jfed.run(kept_method())
    assert record["not_private_fields"] == ["clipped", "norm", "run_seconds"]
    assert record["secret_fields"] == ["seed"]
    assert record["unclassified_fields"] == ["norm"]  # the negative control: no kind declared
    assert "w" not in record["not_private_fields"]
