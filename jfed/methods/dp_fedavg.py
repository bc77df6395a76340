"""DP-FedAvg and FedAvg with cohorts as one experiment, written on the public method API as a
user's method is (:class:`~jfed.methods.Experiment`, :class:`~jfed.methods.Output`, the
privacy layer's events and accountants, the engine's cohorts).

Privacy (docs/specs/dp_fedavg.md). A round releases the noised sum of clipped updates and, with
adaptive clipping, the noised count of unclipped clients; with ``b_k - 1/2`` in place of ``b_k``
the count's sensitivity is 1/2, so the round is one Gaussian mechanism of noise multiplier z with
``z^-2 = z_delta^-2 + (2 sigma_b)^-2`` (Andrew et al. 2021). The run is R such rounds on a
sampled cohort:

- Poisson cohort of rate q = K / N: ``SelfComposed(PoissonSampled(q, Gaussian(z)), R)``,
  add-or-remove adjacency, PLD (or RDP) from dp-accounting.
- Uniform cohort of exactly K: ``SelfComposed(SampledWithoutReplacement(N, K, Gaussian(z/2)),
  R)``, replace-one adjacency (a client's update swapped for another's moves the sum by 2C),
  RDP: the accountant dp-accounting has for it.

A Poisson cohort runs at a static capacity; a round whose cohort exceeds it drops clients and is
then not the Poisson mechanism the event describes. Both neighbouring runs coincide with the ideal
mechanism unless some round overflows, which happens with probability at most ``R p`` (p the
per-round overflow probability at N + 1 clients), so the run is (eps, delta_acc + (1 + e^eps) R p)-
DP when the ideal one is (eps, delta_acc). The capacity is chosen so that this term is at most
1% of the target delta at the largest eps of the sweep; ``--epsilon`` calibrates z at
``delta_acc = delta - (1 + e^eps) R p``, so the stated delta is the target, and the record
carries ``delta_overflow``.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jfed import privacy
from jfed.algorithms import dp_fedavg
from jfed.data import SyntheticFederated, dirichlet_digits
from jfed.engine import Poisson, Uniform
from jfed.engine.cohort import overflow_probability, poisson_capacity
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


def overflow_delta(epsilon: float, rounds: int, per_round: float) -> float:
    """The delta a run's overflowing rounds add: ``(1 + e^eps) R p`` (module docstring)."""
    return (1.0 + math.exp(min(epsilon, 700.0))) * rounds * per_round


def run_event(cohort: str, n_clients: int, cohort_size: int, rounds: int, z: float):
    """The event of a run at noise multiplier z (module docstring)."""
    if cohort == "uniform":
        return privacy.fixed_cohort_rounds_event(z, n_clients, cohort_size, rounds)
    return privacy.poisson_rounds_event(z, cohort_size / n_clients, rounds)


@functools.lru_cache(maxsize=256)
def noise_multiplier(cohort: str, n_clients: int, cohort_size: int, rounds: int, epsilon: float,
                     delta: float, accountant: str) -> float:  # fmt: skip
    """The least z of the run's event for (eps, delta), calibrated once per setting (a sweep's
    seeds share it). PLD searches at a coarse discretization (1e-3, 10x faster than the 1e-4
    that certifies): its bound is an upper bound at any discretization, so the z it finds
    certifies eps <= the target at the finer one too."""
    make_event = functools.partial(run_event, cohort, n_clients, cohort_size, rounds)
    search = privacy.Pld(CALIBRATION_DISCRETIZATION) if accountant == "pld" else privacy.Rdp()
    adjacency = "replace-one" if cohort == "uniform" else "add-or-remove"
    return privacy.calibrate(make_event, epsilon, delta, accountant=search, adjacency=adjacency,
                             tolerance=CALIBRATION_TOLERANCE)  # fmt: skip


def _hyperparams(**values: float) -> dp_fedavg.Hyperparams:
    """The traced numbers of a run, each ``f32[]``."""
    return dp_fedavg.Hyperparams(**{name: jnp.float32(v) for name, v in values.items()})


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
        self.capacity = self._capacity([config])

    # -- the program
    @property
    def rate(self) -> float:
        return self.config.cohort_size / self.n_clients

    def delta_of(self, config: declared.FederatedTraining) -> float:
        delta = _private(config).delta
        return delta if delta is not None else self.n_clients**-1.1

    def _capacity(self, configs: list[declared.FederatedTraining]) -> int | None:
        if self.config.cohort != "poisson":
            return None
        if not self.private:
            return poisson_capacity(self.n_clients, self.rate)
        # the overflow term at the largest eps of the sweep stays below 1% of the least delta
        largest = max(_private(c).epsilon for c in configs)
        least = min(self.delta_of(c) for c in configs)
        per_round = OVERFLOW_SHARE * least / ((1.0 + math.exp(min(largest, 700.0))) * self.rounds)
        return poisson_capacity(self.n_clients + 1, self.rate, min(per_round, 1e-9))

    def prepare(self, configs: list[declared.FederatedTraining]) -> None:
        self.capacity = self._capacity(configs)

    @property
    def cohort(self) -> Poisson | Uniform:
        if self.config.cohort == "uniform" or self.capacity is None:
            return Uniform(self.config.cohort_size)
        return Poisson(self.rate, capacity=min(self.capacity, self.n_clients))

    @property
    def algorithm(self) -> dp_fedavg.DPFedAvg:
        c = self.config
        n_max = int(self.population.features.shape[1]) if hasattr(self.population, "counts") \
            else self.population.n_max  # fmt: skip
        return dp_fedavg.DPFedAvg(
            dim=int(self.population.dim), classes=self.classes, n_max=n_max, cohort=self.cohort,
            denominator=float(c.cohort_size), local_epochs=c.local_epochs, batch=c.batch,
            private=self.private, per_layer=getattr(c, "clipping", "flat") == "per-layer",
            adaptive=getattr(c, "adaptive_clip", False), optimizer=c.server_optimizer,
            hidden=c.hidden,
        )  # fmt: skip

    def identity(self) -> dict:
        c = self.config
        return {"dataset": c.dataset_label, "n_clients": self.n_clients, "cohort": c.cohort,
                "cohort_size": c.cohort_size, "capacity": self.cohort.capacity
                if isinstance(self.cohort, Poisson) else c.cohort_size}  # fmt: skip

    # -- privacy
    def accountant(self, config: declared.FederatedTraining) -> privacy.Pld | privacy.Rdp:
        name = _private(config).accountant or ("pld" if config.cohort == "poisson" else "rdp")
        return privacy.Pld() if name == "pld" else privacy.Rdp()

    def event(self, config: declared.FederatedTraining, z: float):
        """The run's event at noise multiplier z (module docstring)."""
        return run_event(config.cohort, self.n_clients, config.cohort_size, config.rounds, z)

    def calibrate(self, config: declared.FederatedTraining) -> tuple[dp_fedavg.Hyperparams, dict]:
        momentum = config.server_momentum
        if momentum is None:
            momentum = MOMENTUM_DEFAULTS[config.server_optimizer]
        common = dict(client_learning_rate=config.client_learning_rate,
                      server_learning_rate=config.server_learning_rate,
                      server_momentum=momentum)  # fmt: skip
        if not self.private:
            hyper = _hyperparams(**common, clip=math.inf, update_noise=0.0, count_noise=0.0,
                                 target_quantile=0.5, clip_learning_rate=0.0)  # fmt: skip
            return hyper, non_private_fields(self.method)
        config = _private(config)
        delta = self.delta_of(config)
        cohort = self.cohort
        uniform = not isinstance(cohort, Poisson)
        per_round = 0.0
        if isinstance(cohort, Poisson) and cohort.capacity is not None:
            per_round = overflow_probability(self.n_clients + 1, self.rate, cohort.capacity)
        extra = overflow_delta(config.epsilon, config.rounds, per_round)
        if extra > OVERFLOW_SHARE * delta * 1.0001:
            raise ValueError(
                f"method {self.name}: the Poisson capacity {self.capacity} overflows too "
                f"often for eps={config.epsilon} (delta share {extra / delta:.2g}); run the "
                "configurations of a sweep together so the capacity fits the largest eps"
            )
        accountant = self.accountant(config)
        adjacency = "replace-one" if uniform else "add-or-remove"
        z = noise_multiplier(config.cohort, self.n_clients, config.cohort_size, config.rounds,
                             config.epsilon, delta - extra, type(accountant).name)  # fmt: skip
        guarantee = privacy.certify(
            self.event(config, z),
            delta - extra,
            accountant=accountant,
            adjacency=adjacency,
            notion=self.method.notion,
            protected=self.method.protected,
            trust_model=self.method.trust_model,
        )
        stated_extra = overflow_delta(guarantee.epsilon, config.rounds, per_round)
        count_noise, update_noise = 0.0, z
        if config.adaptive_clip:
            count_noise = config.count_noise or config.cohort_size / 20.0
            if 2.0 * count_noise <= z:
                raise ValueError(
                    f"method {self.name}: adaptive clipping needs 2 sigma_b > z, got sigma_b="
                    f"{count_noise:g}, z={z:.4g}: raise --count-noise"
                )
            update_noise = (z**-2 - (2.0 * count_noise) ** -2) ** -0.5
        hyper = _hyperparams(**common, clip=config.update_clip, update_noise=update_noise,
                             count_noise=count_noise, target_quantile=config.target_quantile,
                             clip_learning_rate=config.clip_learning_rate)  # fmt: skip
        fields = guarantee_fields(guarantee, update_noise * config.update_clip)
        fields |= {
            "delta": guarantee.delta + stated_extra,
            "delta_accountant": guarantee.delta,
            "delta_overflow": stated_extra,
            "overflow_probability_per_round": per_round,
            "noise_multiplier": z,
            "update_noise_multiplier": update_noise,
            "count_noise_std": count_noise,
            "sampling_rate": None if uniform else self.rate,
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
