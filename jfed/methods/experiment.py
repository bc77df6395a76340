"""What every method's experiment provides to the runner (:mod:`jfed.sweep.runner`).

An experiment is built from a method's configuration with its fixed fields (the data set, the
rounds, the static shape of the program); each run's configuration differs from it only in eps,
the seed and the tunable fields. The runner asks it for:

- ``task``: the data (``task.train`` is the population the engine streams), ``rounds``;
- ``algorithm``: the static ``init`` + ``round`` program, and ``shared_noise_algorithm`` (the
  program that runs several eps of one seed together, sharing their draws) or ``None``;
- ``prepare(configs)``: host calibration of a whole grid at once, where that shares work;
- ``calibrate(config) -> (hyper-parameters, privacy fields)``: the traced hyper-parameters and
  what the run certifies (the privacy layer does the accounting);
- ``outputs``: a hashable ``(state, infos) -> {name: array}``, the arrays kept on the device;
- ``evaluate(outputs, config) -> metrics``: host metrics in float64;
- ``selection_metric`` / ``selection_maximize`` / ``report_metric``: how a sweep chooses among
  settings and what it reports;
- ``default_plan()``: the engine plan when the caller gives none;
- ``summary(record) -> str``: the one line ``jfed run`` prints.
"""

from __future__ import annotations

import math

from jfed.methods.declarations import Config, Method, method_of
from jfed.privacy import PrivacyGuarantee


def guarantee_fields(guarantee: PrivacyGuarantee, sigma: float) -> dict:
    """The privacy fields of a record from what the accountant certified."""
    return {
        "epsilon_certified": guarantee.epsilon,
        "delta": guarantee.delta,
        "accountant": guarantee.accountant,
        "notion": guarantee.notion,
        "protected": guarantee.protected,
        "trust_model": guarantee.trust_model,
        "sigma": float(sigma),
    }


def non_private_fields(method: Method) -> dict:
    return {
        "epsilon_certified": math.inf,
        "delta": 0.0,
        "accountant": "none",
        "notion": "none (non-private)",
        "protected": method.protected,
        "trust_model": method.trust_model,
        "sigma": 0.0,
    }


def guarantee_of(record: dict) -> PrivacyGuarantee:
    """The guarantee a record states (for its summary line)."""
    epsilon = record.get("epsilon_certified")
    return PrivacyGuarantee(
        epsilon=float(record["epsilon"] if epsilon is None else epsilon),
        delta=float(record["delta"]),
        accountant=str(record["accountant"]),
        notion=str(record["notion"]),
        protected=str(record["protected"]),
        trust_model=str(record["trust_model"]),
    )


class Experiment:
    """Base of the method experiments: the declaration and the fixed configuration."""

    selection_metric = "validation_r2"
    selection_maximize = True
    report_metric = "test_r2"
    shared_noise_algorithm = None

    def __init__(self, config: Config) -> None:
        self.config = config.check()
        self.method = method_of(config)
        self.name = self.method.name

    def prepare(self, configs: list[Config]) -> None:
        del configs  # nothing shared to calibrate up front

    def default_plan(self):
        """The engine plan when the caller gives none: sized for the backend."""
        from jfed.engine import ExecutionPlan

        return ExecutionPlan.for_backend()

    def identity(self) -> dict:
        """Fields of every record that describe the data (dataset, n_clients, dim, ...)."""
        raise NotImplementedError
