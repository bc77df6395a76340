"""DP-FedAvg and FedAvg with cohorts as one experiment, written on the public method API as a
user's method is (:class:`~jfed.methods.Experiment`, :class:`~jfed.methods.Output`, the
privacy layer's aggregators and accountants, the engine's cohorts).

Privacy (docs/specs/dp_fedavg.md). The round's aggregator states its own event and the cohort
wraps it; the run's guarantee is their composition over the rounds (the experiment states no
event by hand). A round releases the noised sum of clipped updates and, with adaptive
clipping, the noised count of unclipped clients: one Gaussian mechanism of multiplier z with
``z^-2 = z_delta^-2 + (2 sigma_b)^-2`` (:class:`~jfed.privacy.QuantileAdaptiveGaussianSum`).
So the run's event is:

- Poisson cohort of rate q = K / N: ``SelfComposed(PoissonSampled(q, Gaussian(z)), R)``,
  add-or-remove adjacency, PLD (or RDP) from dp-accounting.
- Uniform cohort of exactly K: ``SelfComposed(SampledWithoutReplacement(N, K, Gaussian(z/2)),
  R)``, replace-one adjacency (a client's update swapped for another's moves the sum by 2C),
  RDP: the accountant dp-accounting has for it.

A Poisson cohort runs at a static capacity; a round whose cohort exceeds it drops clients and is
then not the Poisson mechanism the event describes: the cohort's overflow term
(:meth:`jfed.engine.Poisson.overflow_delta`) is added to delta. The capacity is chosen
(:meth:`jfed.engine.Poisson.for_privacy`) so that this term is at most 1% of the target delta at
the largest eps of the sweep; ``--epsilon`` calibrates z at ``delta_acc = delta - overflow``, so
the stated delta is the target, and the record carries ``delta_overflow``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jfed import privacy
from jfed._validation import UsageError
from jfed.algorithms import dp_fedavg
from jfed.data import SyntheticFederated, dirichlet_digits
from jfed.engine import Poisson, Uniform
from jfed.engine.cohort import poisson_capacity
from jfed.methods import declared
from jfed.methods.experiment import Experiment, Output, guarantee_fields, non_private_fields

EVALUATION_CLIENTS = 500
"""Synthetic: the test set is the records of this many held-out clients, and the training
accuracy is measured on the records of the first this many training clients."""

MATERIALIZE_BYTES = 256 * 2**20
"""A synthetic population whose records take at most this much memory is generated once and
stored; a larger one is generated on the fly, client by client, in every round."""

OVERFLOW_SHARE = 0.01
"""The Poisson capacity keeps the overflow term of delta below this share of the target delta."""

CALIBRATION_DISCRETIZATION = 1e-3
CALIBRATION_TOLERANCE = 1e-4
"""Absolute tolerance on the noise multiplier z (the z found is at most this much above the
least one)."""

MOMENTUM_DEFAULTS = {"sgd": 0.0, "adam": 0.9, "adagrad": 0.0, "yogi": 0.9}

COHORT_KINDS = {"poisson": Poisson, "uniform": Uniform}
"""The cohort kind each ``--cohort`` names."""

CLIPPINGS = {"flat": False, "per-layer": True}
"""Whether each ``--clipping`` clips every tensor to ``C / sqrt(L)`` (else the whole update)."""


def load_population(config: declared.FederatedTraining):
    """``(clients, test (X f64[m, d], y f64[m]), train sample (X, y), classes)``."""
    if config.dataset == "digits-dirichlet":
        task = dirichlet_digits(config.clients, config.dirichlet, config.data_seed)
        return task.train, task.test, task.train.pooled(), task.classes
    population = SyntheticFederated.create(
        jax.random.key(config.data_seed), config.clients, config.model_heterogeneity,
        config.feature_heterogeneity,
        n_max=config.records, shared_model=config.shared_model,
    )  # fmt: skip
    sample = min(EVALUATION_CLIENTS, config.clients)
    test = population.sample_test(EVALUATION_CLIENTS)
    train = population.sample_test(sample, key=population.data_key)  # the first training clients
    classes = population.classes
    if config.clients * config.records * (population.dim + 1) * 4 <= MATERIALIZE_BYTES:
        return population.materialize(), test, train, classes
    return population, test, train, classes


def _hyperparams(privacy_params, **values: float) -> dp_fedavg.Hyperparams:
    """The traced numbers of a run, each ``f32[]``."""
    f32 = {name: jnp.float32(v) for name, v in values.items()}
    return dp_fedavg.Hyperparams(**f32, privacy=jax.tree.map(jnp.float32, privacy_params))


def _private(config: declared.FederatedTraining) -> declared.DPFedAvg:
    """The private configuration (only DP-FedAvg's experiment asks for its privacy fields)."""
    if not isinstance(config, declared.DPFedAvg):
        raise TypeError(f"expected a DP-FedAvg configuration, got {type(config).__name__}")
    return config


class DPFedAvgExperiment(Experiment[declared.FederatedTraining]):
    """DP-FedAvg (``dp-fedavg``) or its non-private baseline (``fedavg-sampled``): tuned on the
    training clients' accuracy, reported on held-out clients (synthetic) or held-out images."""

    selection_metric = "train_accuracy"
    selection_maximize = True
    report_metric = "test_accuracy"
    outputs = (
        Output("params", "state.params"),
        Output("clip", "infos.clip"),
        Output("clipped_fraction", "infos.clipped_fraction"),
        Output("cohort_size", "infos.cohort_size"),
        Output("overflow", "infos.overflow", reduce="sum"),
        Output("mean_update_norm", "infos.mean_update_norm", reduce="mean"),
    )

    def __init__(self, config: declared.FederatedTraining) -> None:
        super().__init__(config)
        self.population, self.test, self.train, self.classes = load_population(config)
        self.n_clients = int(self.population.n_clients)
        self.private = self.method.private
        self.cohort = self._cohort([config])

    # -- the program
    @property
    def rate(self) -> float:
        return self.config.cohort_size / self.n_clients

    def delta_of(self, config: declared.FederatedTraining) -> float:
        delta = _private(config).delta
        return delta if delta is not None else self.n_clients**-1.1

    def _cohort(self, configs: list[declared.FederatedTraining]) -> Poisson | Uniform:
        """The cohort kind the fixed fields name; a private Poisson cohort's capacity keeps its
        overflow term below 1% of the least delta at the largest eps of ``configs``."""
        kind = COHORT_KINDS[self.config.cohort]
        if kind is Uniform:
            return Uniform(self.config.cohort_size)
        if not self.private:
            return Poisson(self.rate, capacity=poisson_capacity(self.n_clients, self.rate))
        largest = max(_private(c).epsilon for c in configs)
        least = min(self.delta_of(c) for c in configs)
        return Poisson.for_privacy(self.rate, self.n_clients, self.rounds, largest, least,
                                   OVERFLOW_SHARE)  # fmt: skip

    def prepare(self, configs: list[declared.FederatedTraining]) -> None:
        self.cohort = self._cohort(configs)

    @property
    def capacity(self) -> int | None:
        """The Poisson cohort's static capacity (``None`` for a uniform cohort)."""
        return self.cohort.capacity if isinstance(self.cohort, Poisson) else None

    @property
    def algorithm(self) -> dp_fedavg.DPFedAvg:
        c = self.config
        n_max = int(self.population.features.shape[1]) if hasattr(self.population, "counts") \
            else self.population.n_max  # fmt: skip
        aggregator = dp_fedavg.aggregator_of(
            self.private, float(c.cohort_size), CLIPPINGS[getattr(c, "clipping", "flat")],
            getattr(c, "adaptive_clip", False),
        )  # fmt: skip
        return dp_fedavg.DPFedAvg(
            dim=int(self.population.dim), classes=self.classes, n_max=n_max, cohort=self.cohort,
            aggregator=aggregator, local_epochs=c.local_epochs, batch=c.batch,
            optimizer=c.server_optimizer, hidden=c.hidden,
        )  # fmt: skip

    def identity(self) -> dict:
        c = self.config
        capacity = self.capacity if self.capacity is not None else c.cohort_size
        return {"dataset": c.dataset_label, "n_clients": self.n_clients, "cohort": c.cohort,
                "cohort_size": c.cohort_size, "capacity": capacity}  # fmt: skip

    # -- privacy
    def accountant(self, config: declared.FederatedTraining) -> privacy.Pld | privacy.Rdp:
        """The accountant that certifies: ``--accountant``, else the cohort's own (PLD for a
        Poisson cohort, RDP for a uniform one)."""
        name = _private(config).accountant
        return privacy.accountant_named(name) if name else self.cohort.accountant()

    def hyperparams(
        self, config: declared.FederatedTraining, noise_multiplier: float | None
    ) -> dp_fedavg.Hyperparams:
        """The run's traced numbers; the aggregator's noise multiplier is ``noise_multiplier``
        (the combined z of both releases with adaptive clipping)."""
        momentum = config.server_momentum
        if momentum is None:
            momentum = MOMENTUM_DEFAULTS[config.server_optimizer]
        common = dict(client_learning_rate=config.client_learning_rate,
                      server_learning_rate=config.server_learning_rate,
                      server_momentum=momentum)  # fmt: skip
        if noise_multiplier is None:
            return _hyperparams(privacy.NoParams(), **common)
        config = _private(config)
        if not config.adaptive_clip:
            params = privacy.GaussianSumParams(config.update_clip, noise_multiplier)
            return _hyperparams(params, **common)
        count_noise = self.count_noise(config)
        try:
            update_noise = privacy.update_noise_multiplier(noise_multiplier, count_noise)
        except ValueError as error:
            raise UsageError(f"method {self.name}: {error} (--count-noise)") from None
        params = privacy.AdaptiveClipParams(config.update_clip, update_noise, count_noise,
                                            config.target_quantile, config.clip_learning_rate)
        return _hyperparams(params, **common)

    def count_noise(self, config: declared.DPFedAvg) -> float:
        """sigma_b: ``--count-noise``, else K / 20."""
        return config.count_noise or config.cohort_size / 20.0

    def calibrate(self, config: declared.FederatedTraining) -> tuple[dp_fedavg.Hyperparams, dict]:
        if not self.private:
            return self.hyperparams(config, None), non_private_fields(self.method)
        config = _private(config)
        delta = self.delta_of(config)
        cohort = self.cohort
        per_round, extra = 0.0, 0.0
        if isinstance(cohort, Poisson):
            per_round = cohort.overflow_probability(self.n_clients)
            extra = cohort.overflow_delta(config.epsilon, config.rounds, self.n_clients)
        if extra > OVERFLOW_SHARE * delta * 1.0001:
            raise UsageError(
                f"method {self.name}: the Poisson capacity {self.capacity} overflows too "
                f"often for eps={config.epsilon} (delta share {extra / delta:.2g}); run the "
                "configurations of a sweep together so the capacity fits the largest eps"
            )
        accountant = self.accountant(config)
        # PLD searches at a coarse discretization (1e-3, 10x faster than the 1e-4 that
        # certifies): its bound is an upper bound at any discretization, so the z it finds
        # certifies eps <= the target at the finer one too
        search = privacy.Pld(CALIBRATION_DISCRETIZATION) if isinstance(accountant, privacy.Pld) \
            else accountant  # fmt: skip
        z = self.noise_multiplier_for(
            config, functools.partial(self.hyperparams, config), config.epsilon, delta - extra,
            search, CALIBRATION_TOLERANCE,
        )  # fmt: skip
        hyper = self.hyperparams(config, z)
        guarantee = self.certify_run(hyper, delta - extra, accountant)
        stated_extra = 0.0
        if isinstance(cohort, Poisson):
            stated_extra = cohort.overflow_delta(guarantee.epsilon, config.rounds, self.n_clients)
        update_noise = float(hyper.privacy.noise_multiplier)
        count_noise = float(getattr(hyper.privacy, "count_noise", 0.0))
        fields = guarantee_fields(guarantee, update_noise * config.update_clip)
        fields |= {
            "delta": guarantee.delta + stated_extra,
            "delta_accountant": guarantee.delta,
            "delta_overflow": stated_extra,
            "overflow_probability_per_round": per_round,
            "noise_multiplier": self.ran_multiplier(hyper),
            "update_noise_multiplier": update_noise,
            "count_noise_std": count_noise,
            "sampling_rate": self.rate if isinstance(cohort, Poisson) else None,
        }
        return hyper, fields

    # -- evaluation
    def evaluate(self, outputs: dict, config: declared.FederatedTraining) -> dict:
        def accuracy(X, y) -> float:
            return float(dp_fedavg.accuracy(outputs["params"], jnp.asarray(X), jnp.asarray(y)))

        test_accuracy = accuracy(*self.test)
        clipped = np.asarray(outputs["clipped_fraction"], np.float64)
        return {
            "test_accuracy": test_accuracy,
            "test_error": 1.0 - test_accuracy,
            "train_accuracy": accuracy(*self.train),
            "clipped_fraction": float(clipped.mean()) if self.private else 0.0,
            "clipped_fraction_per_round": clipped.tolist() if self.private else [],
            "clip_per_round": np.asarray(outputs["clip"], np.float64).tolist(),
            "mean_cohort_size": float(np.mean(outputs["cohort_size"])),
            "overflowed_clients": int(outputs["overflow"]),
            "mean_update_norm": float(outputs["mean_update_norm"]),
        }
