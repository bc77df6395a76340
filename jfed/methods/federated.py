"""What the experiments of the methods on DP-FedAvg's populations share (SCAFFOLD, Ditto, DP-FTRL):
the population and model DP-FedAvg loads for the same flags (:func:`jfed.methods.dp_fedavg.
load_population`, :func:`~jfed.methods.dp_fedavg.build_model`), its clients' local training, a
sampled cohort with its privacy bookkeeping, and accuracy on the held-out data.

Privacy of a sampled cohort (as DP-FedAvg's, docs/specs/dp_fedavg.md): the round's releases are
composed by the engine's ledger (:meth:`jfed.engine.Ledger.event`: one sampled event per cohort
and round), calibrated to the configuration's eps and certified for what ran. A Poisson cohort
runs at a capacity that keeps its overflow term (:meth:`jfed.engine.Poisson.overflow_delta`) at
most 1% of delta at the largest eps of a sweep; that term is added to the stated delta. The
releases' noise is float32: the guarantee is the ideal real-valued mechanism's (labelled), and
the delta its normals' bounded reach adds (:meth:`FederatedExperiment.reach_delta`) is reserved
from the target delta and stated (``delta_sampler``), as DP-FedAvg's float noise does.

Audit (``--audit-canaries M``, as DP-FedAvg's): the private release is wrapped by
:class:`~jfed.privacy.canary_aggregator.WithCanaries` (:meth:`FederatedExperiment.with_canaries`),
so M canary clients go through its clipping, the cohort's sampling (or the schedule's turns) and
its noise; the record gets the one-run lower bound beside the certified eps
(:class:`~jfed.methods.experiment.CanaryAudit`). A subclass declares its kept arrays as ``kept``
and where the wrapper's state lies in the run's state as ``canary_source``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jfed import privacy
from jfed.algorithms.local_training import LocalTraining
from jfed.data import FederatedData
from jfed.engine import Poisson, Uniform
from jfed.engine.cohort import poisson_capacity
from jfed.methods.declared.dp_fedavg import FederatedTraining
from jfed.methods.dp_fedavg import (
    MOMENTUM_DEFAULTS,
    NOISE_CHOICES,
    OVERFLOW_SHARE,
    CentralGridNoise,
    build_model,
    evaluate_accuracy,
    grid_noise_std,
    load_population,
)
from jfed.methods.experiment import (
    CanaryAudit,
    Experiment,
    Output,
    Outputs,
    declared_outputs,
)
from jfed.methods.record_fields import RecordFields
from jfed.privacy.canary_aggregator import WithCanaries

FLOAT_NOISE = NOISE_CHOICES["float"]
"""The noise of a method without ``--noise`` (DP-FTRL's correlated noise): float32 Gaussian (the
ideal mechanism's guarantee)."""
SAMPLED_COHORTS = {"poisson": Poisson, "uniform": Uniform}
"""The cohort kind each ``--cohort`` names (a sampled cohort)."""


def server_momentum(config: FederatedTraining) -> float:
    """``--server-momentum``, else the server optimizer's default."""
    momentum = config.server_momentum
    return MOMENTUM_DEFAULTS[config.server_optimizer] if momentum is None else momentum


class FederatedExperiment(CentralGridNoise, CanaryAudit, Experiment[FederatedTraining]):
    """The shared part of an experiment on DP-FedAvg's populations (see the module docstring);
    a subclass gives ``algorithm``, ``hyperparams``, its ``kept`` arrays and its
    ``canary_source``, and extends ``evaluate``. Tuned on the training clients' accuracy,
    reported on the held-out data."""

    record_fields = RecordFields(
        inside=("test_accuracy", "test_error"),
        outside=("train_accuracy", "clipped_fraction", "clipped_fraction_per_round",
                 "mean_cohort_size", "rounding_fallbacks"),
    )  # fmt: skip
    """The final model's accuracy on held-out data is post-processing of the noised releases;
    the training clients' accuracy, the clipped counts, the realised cohorts and the grid's
    rounding fallbacks are unnoised statistics of client data."""

    kept: tuple[Output, ...] = ()
    """The arrays the run keeps (an audited run keeps its canaries' state too)."""
    canary_source: str = "state.aggregator"
    """Where the audited aggregator's state lies in the run's state."""

    def __init__(self, config: FederatedTraining) -> None:
        super().__init__(config)
        self.data = load_population(config)
        self.population = self.data.train
        self.model = build_model(config, self.data)
        self.n_clients = int(self.population.n_clients)
        self.private = self.method.private
        noise = getattr(config, "noise", "float") if self.private else "float"
        self.noise_choice = NOISE_CHOICES[noise]
        self.grid_norm = None  # chosen by prepare() for --noise discrete
        self.cohort = self.make_cohort([config])

    @property
    def outputs(self) -> Outputs:  # type: ignore[override]
        """``kept``, the grid's diagnostics and an audited run's canaries."""
        kept = self.kept + self.grid_outputs() + self.canary_outputs(self.canary_source)
        return declared_outputs(kept, type(self).__name__)

    def with_canaries(self, inner: Any, period: int | None = None) -> Any:
        """``inner`` (a private sum that clips) with the run's canary clients, each taking part
        at the cohort's sampling rate, or under a schedule of ``period`` rounds once a period;
        ``inner`` itself without ``--audit-canaries``."""
        if not self.canaries:
            return inner
        if period is not None:
            return WithCanaries(inner, self.canaries, period=period)
        return WithCanaries(inner, self.canaries, min(1.0, self.rate))

    # -- the clients
    @property
    def n_max(self) -> int:
        """The most records a client trains on: the population's largest client, at most
        ``--records`` for real data."""
        clients = self.population
        if hasattr(clients, "counts") and hasattr(clients, "features"):  # digits
            return int(clients.features.shape[1])
        if isinstance(clients, FederatedData):
            return min(int(clients.n_max), self.config.records)
        return int(clients.n_max)

    @property
    def training(self) -> LocalTraining:
        """Each client's local training: ``--local-epochs`` epochs of batches of ``--batch``."""
        return LocalTraining(self.n_max, self.config.batch, self.config.local_epochs)

    @property
    def rate(self) -> float:
        return self.config.cohort_size / self.n_clients

    def make_cohort(self, configs: list[FederatedTraining]) -> Any:
        """The cohort kind the fixed fields name; a private Poisson cohort's capacity keeps its
        overflow term below 1% of the least delta at the largest eps of ``configs``."""
        kind = SAMPLED_COHORTS[self.config.cohort]
        if kind is Uniform:
            return Uniform(self.config.cohort_size)
        if not self.private:
            return Poisson(self.rate, capacity=poisson_capacity(self.n_clients, self.rate))
        largest = max(c.epsilon for c in configs)  # type: ignore[attr-defined]
        least = min(self.delta_of(c) for c in configs)
        return Poisson.for_privacy(self.rate, self.n_clients, self.rounds, largest, least,
                                   OVERFLOW_SHARE)  # fmt: skip

    def prepare(self, configs: list[FederatedTraining]) -> None:
        self.cohort = self.make_cohort(configs)
        if self.private and self.noise_choice.grid:
            self.choose_grid(configs)

    @property
    def expected_cohort(self) -> float:
        """The fixed denominator of an average: the cohort's expected size."""
        return float(self.config.cohort_size)

    def identity(self) -> dict:
        c = self.config
        capacity = getattr(self.cohort, "capacity", None)
        capacity = capacity(self.n_clients) if callable(capacity) else capacity or c.cohort_size
        return {"dataset": c.dataset_label, "n_clients": self.n_clients, "cohort": c.cohort,
                "cohort_size": c.cohort_size, "capacity": capacity}  # fmt: skip

    # -- privacy
    def delta_of(self, config: Any) -> float:
        """``--delta``, else ``1 / N^1.1``."""
        return config.delta if config.delta is not None else self.n_clients**-1.1

    def accountant(self, config: Any) -> Any:
        """``--accountant``, else :meth:`default_accountant` (the cohort's: PLD for Poisson and
        schedules, the grid through its coupled Gaussian)."""
        name = config.accountant
        if name:
            return privacy.accountant_named(name)
        return self.default_accountant(config)

    def calibration_fields(self, config: Any, noise_multiplier: float, hyper: Any) -> dict:
        """The noise's record fields beside the guarantee's (a grid noise the sampler cannot
        draw is refused first): the calibrated z, the noise std of one release (``sigma``), the
        mechanism and the grid's fields. The delta terms (the Poisson cohort's overflow, the
        float noise's reach, the grid's coupling) come from the releases, on the base
        experiment's one path."""
        del hyper
        z = noise_multiplier
        grid_sum = self.grid_release()
        params = self.sum_params(config.update_clip, z)
        self.check_drawable(grid_sum, params, config)
        noise_std = grid_noise_std(grid_sum, params) if self.noise_choice.grid \
            else z * config.update_clip  # fmt: skip
        fields = {"sigma": float(noise_std), "noise_multiplier": z,
                  "mechanism_model": self.noise_choice.model}  # fmt: skip
        return fields | self.grid_fields(grid_sum)

    def grid_release(self) -> Any:
        """The release whose grid the record describes and the sampler's range is checked on
        (a cohort's noised sum: :meth:`release_noise`)."""
        return self.release_noise().sum(False)

    # -- evaluation
    def accuracy(self, params: Any, records: Any) -> float:
        return evaluate_accuracy(self.model, params, records)

    def evaluate(self, outputs: dict, config: Any) -> dict:
        """Accuracy of the final global model on the held-out data and on the training sample,
        the clipped fraction (computed from unnoised updates: outside the guarantee) and the
        cohort sizes."""
        test_accuracy = self.accuracy(outputs["params"], self.data.test)
        clipped = np.asarray(outputs["clipped_fraction"], np.float64)
        return (
            {
                "test_accuracy": test_accuracy,
                "test_error": 1.0 - test_accuracy,
                "train_accuracy": self.accuracy(outputs["params"], self.data.train_sample),
                "clipped_fraction": float(clipped.mean()) if self.private else 0.0,
                "clipped_fraction_per_round": clipped.tolist() if self.private else [],
                "mean_cohort_size": float(np.mean(outputs["cohort_size"])),
            }
            | self.grid_metrics(outputs)
            | self.audit_fields(outputs, config)
        )
