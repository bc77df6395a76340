"""DP-FedAvg and FedAvg with cohorts as one experiment, written on the public method API as a
user's method is (:class:`~jfed.methods.Experiment`, :class:`~jfed.methods.Output`, the
privacy layer's aggregators and accountants, the engine's cohorts).

Privacy (docs/specs/dp_fedavg.md). The round's aggregator states its own event and the cohort
wraps it; the run's guarantee is their composition over the rounds (the experiment states no
event by hand). ``--noise`` chooses the aggregator (:data:`NOISE_CHOICES`):

- ``discrete`` (the default): updates rounded to an integer grid, an integer sum, exact discrete
  Gaussian noise (:class:`~jfed.privacy.DiscreteGaussianSum`): the guarantee holds for the
  program as it runs. Event ``PoissonSampled(q, DiscreteGaussian(z))`` per round, certified by
  default through the continuous Gaussian the discrete noise is coupled to
  (:func:`~jfed.privacy.discrete_accounting.coupled_gaussian`: variance ``sigma^2 - 9`` grid
  units, its total variation reserved from delta as ``delta_coupling``) by PLD, which analyses
  the Poisson sampling as the Gaussian's; or (``--accountant discrete-rdp``) composed by the
  discrete RDP accountant (``DiscreteRdp()``, Zhu and Wang's looser subsampling bound).
- ``float``: float32 Gaussian noise (:class:`~jfed.privacy.GaussianSum`), certified for the
  ideal real-valued mechanism; the records say so. Adaptive clipping and uniform cohorts run
  with it only (their float releases and their sampling without replacement are accounted for
  the Gaussian alone).
- ``ddgauss`` / ``skellam``: distributed DP, no trusted server: each client adds its share of
  the noise and the server sees the secure aggregation's sum modulo ``2^bits`` (zero-out
  adjacency, at least ``min_clients`` shares a release, discrete RDP).

With float noise a round releases the noised sum of clipped updates and, with adaptive
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

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import jax
import jax.numpy as jnp
import numpy as np

from jfed import privacy
from jfed._validation import UsageError
from jfed.algorithms import dp_fedavg
from jfed.data import (
    FederatedData,
    SyntheticFederated,
    dirichlet_digits,
    load_cifar,
    load_femnist,
)
from jfed.data.shakespeare import PAD as SHAKESPEARE_PAD
from jfed.data.shakespeare import load_shakespeare
from jfed.engine import Poisson, Uniform
from jfed.engine.cohort import poisson_capacity
from jfed.methods import declared
from jfed.methods.experiment import (
    CanaryAudit,
    Experiment,
    Output,
    declared_outputs,
)
from jfed.methods.record_fields import RecordFields
from jfed.models import CharLSTM, CifarCNN, DenseClassifier, FemnistCNN, TransformerLM
from jfed.privacy.calibration import SAMPLER_SHARE as SAMPLER_SHARE  # its old home
from jfed.privacy.discrete_aggregators import largest_grid_norm
from jfed.privacy.distributed_dp import (
    DistributedDiscreteGaussianSum,
    SkellamSum,
    drawable_grid_norm,
    grid_norm_for_bits,
    padded_dimension,
)
from jfed.privacy.guarantee import IDEAL_MECHANISM

EVALUATION_CLIENTS = 500
"""Synthetic: the test set is the records of this many held-out clients, and the training
accuracy is measured on the records of the first this many training clients."""

MATERIALIZE_BYTES = 256 * 2**20
"""A synthetic population whose records take at most this much memory is generated once and
stored; a larger one is generated on the fly, client by client, in every round."""

SHAKESPEARE_MIN_LINES = 2
"""Shakespeare: a role speaking fewer lines is dropped (McMahan et al. 2017 keep roles of at least
two lines: one to train on, one to test)."""

DEFAULT_HIDDEN = 64
"""``--model mlp`` without ``--hidden``: its hidden units."""

EVALUATION_RECORDS = 20_000
"""Real data: accuracy is measured on at most this many records of each split (its first)."""
EVALUATION_BATCH = 1_000

OVERFLOW_SHARE = 0.01
"""The Poisson capacity keeps the overflow term of delta below this share of the target delta."""

CALIBRATION_DISCRETIZATION = 1e-3
"""PLD's value discretization while searching z (the certificate uses the finer 1e-4)."""
CALIBRATION_TOLERANCE = 1e-4
"""Absolute tolerance of the search for the noise multiplier z: the z found is within this of the
least z that meets the target under the SEARCH's accountant. For PLD the search runs at the
coarse :data:`CALIBRATION_DISCRETIZATION`, whose bound is pessimistic: the least z the finer
certifying PLD would accept can be lower (measured: by 1e-4 relative, 4e-4 absolute at z = 3.9,
in three settings); the certified eps is the finer PLD's at the z found, so it never exceeds the
target."""

MOMENTUM_DEFAULTS = {"sgd": 0.0, "adam": 0.9, "adagrad": 0.0, "yogi": 0.9}

COHORT_KINDS = {"poisson": Poisson, "uniform": Uniform}
"""The cohort kind each ``--cohort`` names."""

CLIPPINGS = {"flat": False, "per-layer": True}
"""Whether each ``--clipping`` clips every tensor to ``C / sqrt(L)`` (else the whole update)."""

IDEAL = IDEAL_MECHANISM
"""What a float mechanism's record says of its guarantee."""
SECURE_TRUST = (
    "no trusted server: secure aggregation (the server sees only the sum modulo 2^bits of the "
    "clients' rounded updates, each carrying its share of the noise)"
)
DISTRIBUTED_NOTION = "distributed (eps, delta)-DP, user-level"


@dataclass(frozen=True)
class NoiseChoice:
    """What ``--noise NAME`` runs and states.

    Attributes:
      grid: whether the sum is on an integer grid (discrete events, the discrete RDP
        accountant); else float Gaussian noise (dp-accounting's Gaussian events).
      secure: the secure sum's class for distributed DP (each client adds its share; the server
        sees the sum modulo 2^bits), else ``None`` (a trusted server adds the noise).
      model: the record's ``mechanism_model``: which arithmetic the guarantee is about.
      suffix: appended to the notion (what the guarantee does not model), or empty.
      notion, trust_model: replace the method's where not ``None``.
    """

    grid: bool
    secure: type | None
    model: str
    suffix: str = ""
    notion: str | None = None
    trust_model: str | None = None


NOISE_CHOICES = {
    "discrete": NoiseChoice(
        True, None, "exact: updates rounded to an integer grid (conditional randomized "
        "rounding), an integer sum, discrete Gaussian noise sampled exactly in integer arithmetic",
    ),
    "float": NoiseChoice(False, None, IDEAL, f" ({IDEAL})"),
    "ddgauss": NoiseChoice(
        True, DistributedDiscreteGaussianSum, "exact: updates rotated and rounded to an integer "
        "grid, each client's discrete Gaussian share sampled exactly, the sum modulo 2^bits",
        notion=DISTRIBUTED_NOTION, trust_model=SECURE_TRUST,
    ),
    "skellam": NoiseChoice(
        True, SkellamSum, "ideal Skellam shares (jax.random.poisson draws in floating point, not "
        "modelled); updates rotated and rounded to an integer grid, the sum modulo 2^bits",
        " (ideal Skellam mechanism; floating-point Poisson sampling not modelled)",
        DISTRIBUTED_NOTION, SECURE_TRUST,
    ),
}  # fmt: skip
"""Each ``--noise``'s choice (the non-private baseline has none: :data:`NO_NOISE`)."""
NO_NOISE = NOISE_CHOICES["float"]

DEFAULT_GRID_NORM = 2**12
"""The central grid's clip norm in grid units where the cohort and the noise allow it
(:func:`~jfed.privacy.discrete_aggregators.largest_grid_norm`)."""

MIN_CLIENTS_SPREAD = 3.0
"""``--min-clients`` by default: the expected survivors less this many of their standard
deviations (a round with fewer survivors is withheld)."""


class Population(NamedTuple):
    """A DP-FedAvg population and what it is evaluated on.

    Attributes:
      train: the training clients the engine streams (records with ``rows`` and ``count``).
      test: the held-out records: ``(X f64[m, ...], y f64[m])`` arrays, or a
        :class:`~jfed.data.FederatedData` of held-out records (real data).
      train_sample: training records the selection metric is measured on (same kinds).
      classes: the number of labels (a language model's vocabulary).
      model: the model trained when ``--model`` names none (a key of
        :data:`~jfed.catalog.FEDERATED_MODELS`).
    """

    train: Any
    test: Any
    train_sample: Any
    classes: int
    model: str


def _synthetic(config: declared.FederatedTraining) -> Population:
    population = SyntheticFederated.create(
        jax.random.key(config.data_seed), config.clients, config.model_heterogeneity,
        config.feature_heterogeneity,
        n_max=config.records, shared_model=config.shared_model,
    )  # fmt: skip
    sample = min(EVALUATION_CLIENTS, config.clients)
    test = population.sample_test(EVALUATION_CLIENTS)
    train = population.sample_test(sample, key=population.data_key)  # the first training clients
    stored = config.clients * config.records * (population.dim + 1) * 4 <= MATERIALIZE_BYTES
    clients = population.materialize() if stored else population
    return Population(clients, test, train, population.classes, _feature_model(config))


def _digits(config: declared.FederatedTraining) -> Population:
    task = dirichlet_digits(config.clients, config.dirichlet, config.data_seed)
    return Population(task.train, task.test, task.train.pooled(), task.classes,
                      _feature_model(config))  # fmt: skip


def _feature_model(config: declared.FederatedTraining) -> str:
    return "mlp" if config.hidden > 0 else "logistic"


def _shakespeare(config: declared.FederatedTraining) -> Population:
    task = load_shakespeare("lines", min_lines=SHAKESPEARE_MIN_LINES)
    return Population(task.train, task.test, task.train, task.classes, "char-lstm")


def _data_dir(config: declared.FederatedTraining) -> str:
    """``--data-dir`` of a data set read from files (``check`` refuses such a one without)."""
    assert config.data_dir is not None  # FederatedTraining.check requires it for these sets
    return config.data_dir


def _cifar(config: declared.FederatedTraining, classes: int) -> Population:
    task = load_cifar(_data_dir(config), classes, config.clients, config.split or "iid",
                      config.dirichlet, config.data_seed)  # fmt: skip
    return Population(task.train, task.test, task.train, task.classes, "cifar-cnn")


NATURAL_CLIENTS = {"natural": True, "iid": False, "dirichlet": False}
"""Whether each ``--split`` keeps the data's own clients (its writers) rather than ``--clients``."""


def _femnist(config: declared.FederatedTraining) -> Population:
    split = config.split or "natural"
    clients = None if NATURAL_CLIENTS[split] else config.clients
    task = load_femnist(_data_dir(config), clients, split, config.dirichlet, config.data_seed)
    return Population(task.train, task.test, task.train, task.classes, "femnist-cnn")


POPULATIONS: dict[str, Callable[[declared.FederatedTraining], Population]] = {
    "synthetic": _synthetic,
    "digits-dirichlet": _digits,
    "shakespeare": _shakespeare,
    "cifar10": functools.partial(_cifar, classes=10),
    "cifar100": functools.partial(_cifar, classes=100),
    "femnist": _femnist,
}
"""Each ``--dataset``'s loader."""


def load_population(config: declared.FederatedTraining) -> Population:
    """The population ``config`` names (:data:`POPULATIONS`)."""
    return POPULATIONS[config.dataset](config)


def evaluate_accuracy(model: Any, params: Any, records: Any) -> float:
    """The model's accuracy on ``records``: ``(X, y)`` arrays, or every record of a
    :class:`~jfed.data.FederatedData` (at most :data:`EVALUATION_RECORDS`, its first), scored in
    batches (a sequence record counts its scored positions' mean)."""
    if not isinstance(records, FederatedData):
        X, y = records
        return float(dp_fedavg.accuracy(model, params, jnp.asarray(X), jnp.asarray(y)))
    positions = records.positions()[:EVALUATION_RECORDS]
    correct = _correct_batch(model)
    total = 0.0
    for start in range(0, len(positions), EVALUATION_BATCH):
        batch = positions[start : start + EVALUATION_BATCH]
        padded = np.pad(batch, (0, EVALUATION_BATCH - len(batch)), mode="edge")
        X, y = records.store.gather(jnp.asarray(padded, jnp.int32))
        total += float(np.sum(np.asarray(correct(params, X, y))[: len(batch)]))
    return total / max(len(positions), 1)


@functools.lru_cache(maxsize=8)
def _correct_batch(model: Any):
    return jax.jit(model.correct)


def _record_shape(clients: Any) -> tuple[int, ...]:
    if hasattr(clients, "record_shape"):
        return tuple(clients.record_shape)
    return (int(clients.dim),)


def _dense(shape: tuple, classes: int, config: Any, hidden: int = 0) -> DenseClassifier:
    return DenseClassifier(int(np.prod(shape)), classes, hidden)


def _mlp(shape: tuple, classes: int, config: Any) -> DenseClassifier:
    return _dense(shape, classes, config, config.hidden or DEFAULT_HIDDEN)


def _char_lstm(shape: tuple, classes: int, config: Any) -> CharLSTM:
    return CharLSTM(vocabulary=classes, sequence=shape[-1], pad_label=SHAKESPEARE_PAD)


def _transformer(shape: tuple, classes: int, config: Any) -> TransformerLM:
    return TransformerLM(vocabulary=classes, sequence=shape[-1])


MODELS = {
    "logistic": _dense,
    "mlp": _mlp,
    "char-lstm": _char_lstm,
    "femnist-cnn": lambda shape, classes, config: FemnistCNN(classes=classes),
    "cifar-cnn": lambda shape, classes, config: CifarCNN(classes=classes),
    "transformer-lm": _transformer,
}
"""Each ``--model``'s builder from the population's record shape, its classes and the config."""


def build_model(config: declared.FederatedTraining, population: Population) -> Any:
    """The model ``--model`` names, else the population's own, shaped to its records."""
    name = config.model or population.model
    return MODELS[name](_record_shape(population.train), population.classes, config)


def _hyperparams(privacy_params, **values: float) -> dp_fedavg.Hyperparams:
    """The traced numbers of a run, each ``f32[]``."""
    f32 = {name: jnp.float32(v) for name, v in values.items()}
    return dp_fedavg.Hyperparams(**f32, privacy=jax.tree.map(jnp.float32, privacy_params))


def _private(config: declared.FederatedTraining) -> declared.DPFedAvg:
    """The private configuration (only DP-FedAvg's experiment asks for its privacy fields)."""
    if not isinstance(config, declared.DPFedAvg):
        raise TypeError(f"expected a DP-FedAvg configuration, got {type(config).__name__}")
    return config


OUTPUTS = declared_outputs(
    (
        Output("params", "state.params"),
        Output("clip", "infos.clip"),
        Output("clipped_fraction", "infos.clipped_fraction"),
        Output("cohort_size", "infos.cohort_size"),
        Output("overflow", "infos.overflow", reduce="sum"),
        Output("mean_update_norm", "infos.mean_update_norm", reduce="mean"),
        Output("noise_std", "infos.noise_std"),
    ),
    "DPFedAvgExperiment.outputs",
)

GRID_OUTPUTS = (Output("rounding_fallbacks", "infos.rounding_fallbacks", reduce="sum"),)
SECURE_OUTPUTS = (
    Output("survivors", "infos.survivors", reduce="mean"),
    Output("withheld", "infos.withheld", reduce="sum"),
    Output("wrapped_coordinates", "infos.wrapped_coordinates", reduce="sum"),
)
"""What the grid and secure sums add to the kept arrays (diagnostics outside the guarantee)."""

NOT_PRIVATE_FIELDS = (
    "clipped_fraction", "clipped_fraction_per_round", "mean_update_norm", "mean_cohort_size",
    "overflowed_clients", "train_accuracy", "run_seconds",
)  # fmt: skip
"""A private run's record fields computed from unnoised client data or from who took part (the
clipped counts, the norms before clipping, the realised cohort sizes, the accuracy on training
clients) or a side channel no guarantee here models (the run's wall-clock time): outside the
guarantee, listed in every private record's ``not_private_fields`` (through the experiment's
``record_fields``)."""
GRID_NOT_PRIVATE = ("rounding_fallbacks",)
SECURE_NOT_PRIVATE = ("mean_survivors", "withheld_rounds", "wrapped_coordinates")


class CentralGridNoise:
    """``--noise discrete|float`` for an experiment whose trusted server noises its releases
    (DP-FedAvg, DP-SCAFFOLD, DP-Ditto): the noise each release draws (:meth:`release_noise`), the
    finest integer grid every configuration of a sweep fits (:meth:`choose_grid`, called by
    ``prepare``), the grid's record fields, diagnostics and refusals. The experiment gives
    ``noise_choice``, ``model``, ``cohort``, ``config``, ``canaries``, ``name``, ``delta_of``
    and ``accountant`` (its :meth:`privacy_target`). Its calibration is the base experiment's
    one path (:meth:`jfed.methods.Experiment.calibrate`: the cohort's overflow, the float
    noise's reach and the grid's coupling come from the releases), at DP-FedAvg's search
    settings."""

    search_discretization: float | None = CALIBRATION_DISCRETIZATION
    calibration_tolerance = CALIBRATION_TOLERANCE
    overflow_share = OVERFLOW_SHARE

    noise_choice: NoiseChoice
    grid_norm: int | None = None
    config: Any
    model: Any
    cohort: Any
    canaries: int
    name: str

    @property
    def dimension(self) -> int:
        """d, the model's parameter count (a client's update's coordinates)."""
        return int(self.model.parameter_count())

    @property
    def most_clients(self) -> int:
        """The most records one release sums: the Poisson cohort's capacity (or K), plus the
        canaries."""
        capacity = self.cohort.capacity if isinstance(self.cohort, Poisson) else None
        size = capacity if capacity is not None else self.config.cohort_size
        return int(size) + self.canaries

    def _central_grid(self, noise_multiplier: float) -> int:
        try:
            return largest_grid_norm(self.dimension, self.most_clients, noise_multiplier,
                                     most=DEFAULT_GRID_NORM)  # fmt: skip
        except ValueError as error:
            raise UsageError(
                f"method {self.name}: {error}: lower --cohort-size or use --noise float"
            ) from None

    def _grid_for(self, noise_multiplier: float) -> int:
        return self._central_grid(noise_multiplier)

    def choose_grid(self, configs: list) -> None:
        """The static grid of a sweep: the finest that every configuration's noise fits (the
        central grid's event does not depend on it; a secure sum's does, weakly: its noise
        multiplier is searched again on the grid it picks, until the grid holds)."""
        self.grid_norm = self._grid_for(1.0)
        for _ in range(8):
            largest = max(self.drawn_multiplier(c) for c in configs)
            grid = self._grid_for(largest)
            if grid >= self.grid_norm:
                return
            self.grid_norm = grid
        raise UsageError(f"method {self.name}: no grid holds the noise of every eps of the sweep")

    def drawn_multiplier(self, config: Any) -> float:
        """The largest noise multiplier a release of ``config`` draws on the grid (default: the
        calibrated z, :meth:`jfed.methods.Experiment.calibrate_noise`)."""
        experiment: Any = self
        return float(experiment.calibrate_noise(config).noise_multiplier)

    def privacy_target(self, config: Any) -> tuple[float, float, Any]:
        """``(eps, delta, accountant)`` of a run: ``--epsilon``, ``--delta`` (else ``1 /
        N^1.1``) and :meth:`accountant`; the grid of a configuration calibrated alone (no sweep
        chose one) is chosen for it first."""
        experiment: Any = self  # the experiment's members (see the class docstring)
        if self.noise_choice.grid and self.grid_norm is None:
            self.choose_grid([config])
        return config.epsilon, experiment.delta_of(config), experiment.accountant(config)

    def default_accountant(self, config: Any) -> Any:
        """The accountant without ``--accountant``: the cohort's (PLD for a Poisson cohort or a
        schedule, RDP for a uniform one), which certifies the central grid through the
        continuous Gaussian its exact noise is coupled to (:attr:`coupled`); the discrete RDP
        accountant for a secure sum's shares and for a grid release whose noise is too small to
        couple (:meth:`coupling_applies`)."""
        choice = self.noise_choice
        if choice.grid and (choice.secure is not None or not self.coupling_applies(config)):
            return privacy.DiscreteRdp()
        return self.cohort.accountant()

    def coupling_applies(self, config: Any) -> bool:
        """Whether every discrete Gaussian of a grid run has more than the coupling's variance
        (9 grid units; default: yes, the update sums' variance is ``z^2 B`` with B in the
        millions)."""
        return True

    @property
    def coupled(self) -> bool:
        """Whether the run is certified through the continuous Gaussian its exact noise is
        coupled to (:func:`jfed.engine.delta_terms.couples`): central grid noise under a
        continuous accountant (the default, PLD; or ``rdp``), which analyses the cohort's
        sampling as the Gaussian's. Else the grid's own events certify it (the discrete RDP
        accountant), or the noise is float (or a secure sum's shares, which are never
        coupled)."""
        from jfed.engine import delta_terms

        experiment: Any = self
        accountant = experiment.accountant(experiment.base_config)
        return delta_terms.couples(experiment.ledger(), accountant)

    def coupling_advice(self) -> str:
        """With ``--adaptive-clip`` a count whose noise is too small to couple is raised."""
        adaptive = getattr(self.config, "adaptive_clip", False)
        count = " (with --adaptive-clip, raise --count-noise)" if adaptive else ""
        return f"{count}; or use --accountant discrete-rdp"

    def release_noise(self) -> Any:
        """The releases' noise (:mod:`jfed.algorithms.dp_fedavg`): float, or exact discrete
        Gaussian on the chosen grid."""
        if not self.noise_choice.grid:
            return dp_fedavg.FloatNoise()
        if self.grid_norm is None:
            self.grid_norm = self._grid_for(1.0)
        return dp_fedavg.GridNoise(self.dimension, self.grid_norm)

    def sum_params(self, clip_norm: float, noise_multiplier: float) -> Any:
        """A release's parameters for the noise's sum (discrete or float Gaussian)."""
        if self.noise_choice.grid:
            return privacy.DiscreteGaussianSumParams(clip_norm, noise_multiplier)
        return privacy.GaussianSumParams(clip_norm, noise_multiplier)

    def check_drawable(self, aggregator: Any, params: Any, config: Any) -> None:
        """A grid noise the sampler cannot draw on this grid (``aggregator.check(params)``) is
        refused, naming the flags; float noise passes."""
        if not self.noise_choice.grid:
            return
        params = jax.tree.map(lambda v: float(np.float32(v)), params)
        try:
            aggregator.check(params)
        except ValueError as error:
            raise UsageError(
                f"method {self.name}: eps={config.epsilon} with --noise {config.noise}: {error} "
                "(run the eps of a sweep together so the grid fits the smallest, or use --noise "
                "float)"
            ) from None

    def grid_fields(self, aggregator: Any) -> dict:
        """A grid run's record fields: the grid's clip norm L and the noise's inflation over the
        float Gaussian's ``z C`` (``sqrt(B) / L``); none for float noise."""
        if not self.noise_choice.grid:
            return {}
        inflation = math.sqrt(aggregator.squared_bound) / aggregator.grid_norm
        return {"grid_norm": aggregator.grid_norm, "noise_inflation": inflation}

    def grid_outputs(self) -> tuple[Output, ...]:
        """The grid's diagnostics among the kept arrays (outside the guarantee)."""
        return GRID_OUTPUTS if self.noise_choice.grid else ()

    def grid_metrics(self, outputs: dict) -> dict:
        """A grid run's ``rounding_fallbacks`` (clients whose rounding fell back to zeros);
        none for float noise."""
        if not self.noise_choice.grid:
            return {}
        return {"rounding_fallbacks": int(outputs["rounding_fallbacks"])}


def grid_noise_std(aggregator: Any, params: Any) -> float:
    """The std of a central grid sum's discrete Gaussian noise in model units (``sqrt(2^k m)``
    grid units, times ``C / L``)."""
    bits, quotient, _ = aggregator.noise_parameters(params)
    scale = float(params.clip_norm) / aggregator.grid_norm
    return math.sqrt(2.0 ** int(bits) * int(quotient)) * scale


class DPFedAvgExperiment(CentralGridNoise, CanaryAudit, Experiment[declared.FederatedTraining]):
    """DP-FedAvg (``dp-fedavg``) or its non-private baseline (``fedavg-sampled``): tuned on the
    training clients' accuracy, reported on held-out clients (synthetic) or held-out images."""

    record_fields = RecordFields(
        inside=("test_accuracy", "test_error", "clip_per_round"),
        outside=NOT_PRIVATE_FIELDS + GRID_NOT_PRIVATE + SECURE_NOT_PRIVATE,
        public=("noise_std_per_round",),
    )
    """The accuracy on held-out clients and the adaptive clip (moved by the noised count) are
    post-processing of the noised releases; the noise per round is the settings'; the rest
    (:data:`NOT_PRIVATE_FIELDS`) is outside the guarantee."""

    def __init__(self, config: declared.FederatedTraining) -> None:
        super().__init__(config)
        self.data = load_population(config)
        self.population = self.data.train
        self.model = build_model(config, self.data)
        self.n_clients = int(self.population.n_clients)
        self.private = self.method.private
        self.noise_choice = NOISE_CHOICES[_private(config).noise] if self.private else NO_NOISE
        self.cohort = self._cohort([config])
        self.grid_norm: int | None = None  # chosen by prepare() for the grid noises

    # -- the program
    @property
    def _dp_config(self) -> declared.DPFedAvg:
        """:attr:`config` where only a private run reads it (the noise, the secure sum, the
        clipping): DP-FedAvg's fixed fields, which the non-private baseline lacks."""
        return cast("declared.DPFedAvg", self.config)

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
        if self.private and self.noise_choice.grid:
            self.choose_grid(configs)

    @property
    def capacity(self) -> int | None:
        """The Poisson cohort's static capacity (``None`` for a uniform cohort)."""
        return self.cohort.capacity if isinstance(self.cohort, Poisson) else None

    # -- the integer grid
    @property
    def min_clients(self) -> int:
        """The shares a secure release needs: ``--min-clients``, else the expected survivors
        less :data:`MIN_CLIENTS_SPREAD` of their standard deviations (at least 1)."""
        given = self._dp_config.min_clients
        if given is not None:
            return int(given)
        kept = self.rate * (1.0 - self._dp_config.dropout_rate)
        mean, spread = self.n_clients * kept, math.sqrt(self.n_clients * kept * (1.0 - kept))
        return max(1, math.floor(mean - MIN_CLIENTS_SPREAD * spread))

    def _check_min_clients(self) -> None:
        """Refuse a ``--min-clients`` that fewer than one round is expected to reach: every
        release would be withheld, a run that trains nothing and still reports its accuracy."""
        from scipy.stats import binom

        given, config = self._dp_config.min_clients, self._dp_config
        if given is None:
            return
        kept = self.rate * (1.0 - config.dropout_rate)
        most = min(self.n_clients, self.capacity or self.n_clients)
        reached = 0.0 if given > most else float(binom.sf(given - 1, self.n_clients, kept))
        if reached * config.rounds >= 1.0:
            return
        raise UsageError(
            f"expected --min-clients at most a round's surviving clients (about "
            f"{self.n_clients * kept:.3g} of cohorts of {config.cohort_size} after "
            f"--dropout-rate {config.dropout_rate:g}, at most {most}), got --min-clients="
            f"{given}: every one of the {config.rounds} rounds would be withheld; lower "
            "--min-clients (or leave it out) or raise --cohort-size"
        )

    def _field_grid(self, noise_multiplier: float) -> int:
        """The secure sum's grid: the finest whose sum of the cohort stays in the field."""
        dimension, bits = padded_dimension(self.dimension, True), self._dp_config.bits
        try:
            field = grid_norm_for_bits(bits, self.most_clients, noise_multiplier, dimension)
            return drawable_grid_norm(field, noise_multiplier, dimension, self.min_clients)
        except ValueError as error:
            raise UsageError(f"method {self.name}: --bits {bits}: {error}") from None

    def _grid_for(self, noise_multiplier: float) -> int:
        if self.noise_choice.secure is not None:
            return self._field_grid(noise_multiplier)
        return super()._grid_for(noise_multiplier)

    def release_noise(self) -> Any:
        """The round's noise (:mod:`jfed.algorithms.dp_fedavg`: float, grid or secure)."""
        choice = self.noise_choice
        if choice.secure is None:
            return super().release_noise()
        self._check_min_clients()
        if self.grid_norm is None:
            self.grid_norm = self._grid_for(1.0)
        return dp_fedavg.SecureNoise(choice.secure, self.dimension, self.min_clients,
                                     self._dp_config.bits, self.grid_norm)  # fmt: skip

    @property
    def algorithm(self) -> dp_fedavg.DPFedAvg:
        c = self.config
        aggregator = dp_fedavg.aggregator_of(
            self.private, float(c.cohort_size), CLIPPINGS[getattr(c, "clipping", "flat")],
            getattr(c, "adaptive_clip", False), self.canaries, self.rate, self.release_noise(),
        )  # fmt: skip
        return dp_fedavg.DPFedAvg(
            model=self.model, n_max=self.n_max, cohort=self.cohort, aggregator=aggregator,
            local_epochs=c.local_epochs, batch=c.batch, optimizer=c.server_optimizer,
        )  # fmt: skip

    @property
    def outputs(self):
        """The kept arrays; the grid and secure sums' diagnostics; an audited run also keeps its
        canaries' final state."""
        declared_ = OUTPUTS.declared
        if self.private and self.noise_choice.grid:
            declared_ += SECURE_OUTPUTS if self.noise_choice.secure else ()
            declared_ += self.grid_outputs()
        declared_ += self.canary_outputs("state.aggregator")
        if declared_ == OUTPUTS.declared:
            return OUTPUTS
        return declared_outputs(declared_, type(self).__name__)

    @property
    def n_max(self) -> int:
        """The most records a client trains on: the population's largest client (synthetic
        data is already capped by ``--records``), at most ``--records`` for real data."""
        clients = self.population
        if hasattr(clients, "counts") and hasattr(clients, "features"):  # digits
            return int(clients.features.shape[1])
        if isinstance(clients, FederatedData):
            return min(int(clients.n_max), self.config.records)
        return int(clients.n_max)

    def identity(self) -> dict:
        c = self.config
        capacity = self.capacity if self.capacity is not None else c.cohort_size
        return {"dataset": c.dataset_label, "n_clients": self.n_clients, "cohort": c.cohort,
                "cohort_size": c.cohort_size, "capacity": capacity}  # fmt: skip

    # -- privacy
    def accountant(self, config: declared.FederatedTraining) -> Any:
        """The accountant that certifies: ``--accountant``, else :meth:`default_accountant`."""
        name = _private(config).accountant
        if name:
            return privacy.accountant_named(name)
        return self.default_accountant(config)

    def coupling_applies(self, config: Any) -> bool:
        """With ``--adaptive-clip`` on the grid the count's noise ``N_Z(0, (2 sigma_b)^2)`` must
        exceed the coupling's 9 grid units: ``sigma_b > 1.5``."""
        from jfed.privacy.discrete_accounting import COUPLING_VARIANCE

        if not getattr(config, "adaptive_clip", False):
            return True
        return (2.0 * self.count_noise(config)) ** 2 > COUPLING_VARIANCE

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
        if self.noise_choice.secure is not None:
            params = privacy.DistributedSumParams(config.update_clip, noise_multiplier,
                                                  config.dropout_rate)  # fmt: skip
            return _hyperparams(params, **common)
        if not config.adaptive_clip:
            params = self.sum_params(config.update_clip, noise_multiplier)
            return _hyperparams(params, **common)
        count_noise = self.count_noise(config)
        try:
            update_noise = privacy.update_noise_multiplier(noise_multiplier, count_noise)
        except ValueError as error:
            raise UsageError(f"method {self.name}: {error} (--count-noise)") from None
        params = privacy.AdaptiveClipParams(
            config.update_clip,
            update_noise,
            count_noise,
            config.target_quantile,
            config.clip_learning_rate,
        )
        return _hyperparams(params, **common)

    def count_noise(self, config: declared.DPFedAvg) -> float:
        """sigma_b: ``--count-noise``, else K / 20."""
        return config.count_noise or config.cohort_size / 20.0

    def _aggregator(self) -> Any:
        """The noise's own sum (without the mean and the canaries around it): adaptive
        clipping's pair of releases with ``--adaptive-clip``."""
        per_layer = CLIPPINGS[self._dp_config.clipping]
        if getattr(self._dp_config, "adaptive_clip", False):
            return self.release_noise().adaptive_sum(float(self.config.cohort_size), per_layer)
        return self.release_noise().sum(per_layer)

    def drawn_multiplier(self, config: Any) -> float:
        """The calibrated z, or with adaptive clipping the update sum's z_delta (larger: the
        count's noise carries the rest)."""
        hyper = self.hyperparams(_private(config), self.calibrate_noise(config).noise_multiplier)
        return float(hyper.privacy.noise_multiplier)

    def _noise_std(self, hyper: dp_fedavg.Hyperparams) -> float:
        """The std of the noise on one release's sum (model units), as the device draws it:
        ``z C`` for float noise (``z_delta C_0`` with adaptive clipping, at the first round),
        the grid's integer variance scaled back by ``C / L``, a secure sum's least one."""
        params = hyper.privacy
        if isinstance(params, privacy.AdaptiveClipParams):
            params = self.sum_params(params.initial_clip, params.noise_multiplier)
        if not self.noise_choice.grid:
            return float(params.noise_multiplier) * float(params.clip_norm)
        aggregator = self._aggregator()
        if self.noise_choice.secure is None:
            return grid_noise_std(aggregator, params)
        scale = float(params.clip_norm) / aggregator.grid_norm
        share = int(aggregator.share_variance(params))
        return math.sqrt(share * aggregator.min_clients) * scale

    def calibration_fields(
        self, config: declared.FederatedTraining, noise_multiplier: float,
        hyper: dp_fedavg.Hyperparams,
    ) -> dict:  # fmt: skip
        """The noise's record fields beside the guarantee's (a grid noise the sampler cannot
        draw is refused first): the noise std of one release (``sigma``), the multiplier as
        it ran (both grid releases' joint z with adaptive clipping), the update sum's and the
        count's, the mechanism, the grid's fields and a secure sum's ``min_clients``."""
        del noise_multiplier  # read back from hyper, as the device ran it
        config = _private(config)
        self.check_drawable(self._aggregator(), hyper.privacy, config)
        update_noise = float(hyper.privacy.noise_multiplier)
        count_noise = float(getattr(hyper.privacy, "count_noise", 0.0))
        ran = self.ran_multiplier(hyper)
        if ran is None and count_noise:  # the grid's pair of discrete releases: their joint z
            ran = privacy.combined_noise_multiplier(update_noise, count_noise)
        fields = {
            "sigma": self._noise_std(hyper),
            "noise_multiplier": ran,
            "update_noise_multiplier": update_noise,
            "count_noise_std": count_noise,
            "mechanism_model": self.noise_choice.model,
        }
        fields |= self.grid_fields(self._aggregator())
        if self.noise_choice.secure is not None:
            fields["min_clients"] = self.min_clients
        return fields

    def statement(self, guarantee: privacy.PrivacyGuarantee) -> privacy.PrivacyGuarantee:
        """The guarantee as the noise states it: its notion (distributed DP for the secure sums),
        what it does not model (float sampling) and its trust model."""
        choice = self.noise_choice
        adjacency = guarantee.adjacency or privacy.Adjacency.ADD_OR_REMOVE
        notion = adjacency.states(choice.notion or self.method.notion) + choice.suffix
        trust_model = choice.trust_model or guarantee.trust_model
        return dataclasses.replace(guarantee, notion=notion, trust_model=trust_model)

    # -- evaluation
    def evaluate(self, outputs: dict, config: declared.FederatedTraining) -> dict:
        def accuracy(records) -> float:
            return evaluate_accuracy(self.model, outputs["params"], records)

        test_accuracy = accuracy(self.data.test)
        clipped = np.asarray(outputs["clipped_fraction"], np.float64)
        metrics = {
            "test_accuracy": test_accuracy,
            "test_error": 1.0 - test_accuracy,
            "train_accuracy": accuracy(self.data.train_sample),
            "clipped_fraction": float(clipped.mean()) if self.private else 0.0,
            "clipped_fraction_per_round": clipped.tolist() if self.private else [],
            "clip_per_round": np.asarray(outputs["clip"], np.float64).tolist(),
            "noise_std_per_round": np.asarray(outputs["noise_std"], np.float64).tolist(),
            "mean_cohort_size": float(np.mean(outputs["cohort_size"])),
            "overflowed_clients": int(outputs["overflow"]),
            "mean_update_norm": float(outputs["mean_update_norm"]),
        }
        # what is outside the guarantee is listed by the record's classification
        # (record_fields; jfed.methods.record_fields), as for every method
        if self.private and self.noise_choice.grid:
            metrics |= self.grid_metrics(outputs)
        if self.private and self.noise_choice.secure is not None:
            metrics |= {"mean_survivors": float(outputs["survivors"]),
                        "withheld_rounds": int(outputs["withheld"]),
                        "wrapped_coordinates": int(outputs["wrapped_coordinates"])}  # fmt: skip
        return metrics | self.audit_fields(outputs, config)
