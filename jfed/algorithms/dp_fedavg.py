"""DP-FedAvg with user-level privacy: a cohort per round, local epochs of minibatch SGD, each
client's update clipped (flat or per layer), noise on the sum, a fixed-denominator average, an
optax server optimizer, and optional adaptive clipping (docs/specs/dp_fedavg.md). The privacy is
the round's aggregator (:mod:`jfed.privacy.aggregators`): FedAvg and DP-FedAvg are the same round
with a different aggregator, and the noise is an object (:class:`GridNoise`: exact discrete
Gaussian on an integer grid; :class:`FloatNoise`: float32 Gaussian; :class:`SecureNoise`:
distributed DP with secure aggregation).

References: McMahan, Ramage, Talwar, Zhang 2018 (DP-FedAvg); Andrew, Thakkar, McMahan,
Ramaswamy 2021 (adaptive clipping); Reddi et al. 2021 (server optimizers: FedAdam, FedYogi,
FedAdagrad).

The model is any :class:`~jfed.models.Model` (multinomial logistic regression, an MLP, the
character LSTM, the CNNs of LEAF and pfl-research, a small transformer); per-layer clipping clips
every tensor of its parameters. Clients are any population whose record has
``rows(indices) -> (X, y)`` and ``count`` (a :class:`~jfed.data.silos.SiloView`,
:class:`~jfed.data.federated.ClientRecords` or :class:`~jfed.data.ClientView`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jfed.engine.cohort import Poisson, Uniform
from jfed.privacy.aggregators import (
    CohortMean,
    FixedDenominatorMean,
    GaussianSum,
    QuantileAdaptiveGaussianSum,
)
from jfed.privacy.canary_aggregator import WithCanaries
from jfed.privacy.discrete_aggregators import DiscreteGaussianSum, DiscreteQuantileAdaptiveSum
from jfed.privacy.privatizers import tree_norm

PyTree = Any

SERVER_OPTIMIZERS = ("sgd", "adam", "adagrad", "yogi")
"""Server optimizers (Reddi et al. 2021): ``sgd`` (with momentum; learning rate 1 and momentum
0 is FedAvg), ``adam`` (FedAdam), ``adagrad`` (FedAdagrad), ``yogi`` (FedYogi)."""

ADAPTIVE_EPSILON = 1e-3
"""tau, the adaptivity of FedAdam / FedAdagrad / FedYogi (Reddi et al. use 1e-3)."""


class Hyperparams(NamedTuple):
    """The traced numbers of one run (``f32[]`` each).

    Attributes:
      client_learning_rate: eta_l, each local SGD step.
      server_learning_rate: eta_s.
      server_momentum: beta_1 of the server optimizer (SGD's momentum; Adam's and Yogi's first
        moment decay; unused by Adagrad).
      privacy: the parameters of the round's aggregator, read by it unchanged:
        :class:`~jfed.privacy.GaussianSumParams` (clip C, noise multiplier z),
        :class:`~jfed.privacy.AdaptiveClipParams` (C_0, z_delta, sigma_b, gamma, eta_C) or
        :class:`~jfed.privacy.NoParams` (FedAvg).
    """

    client_learning_rate: jax.Array
    server_learning_rate: jax.Array
    server_momentum: jax.Array
    privacy: Any


class ServerState(NamedTuple):
    """The server's state between rounds.

    Attributes:
      params: the global model, ``{"layer": {"w": f32[in, out], "b": f32[out]}}``.
      optimizer: the server optimizer's state (optax, hyper-parameters injected).
      aggregator: the aggregator's state (the adaptive clip norm C_t; empty otherwise).
    """

    params: PyTree
    optimizer: PyTree
    aggregator: PyTree


def _sgd(hyper: Hyperparams) -> optax.GradientTransformation:
    return optax.inject_hyperparams(optax.sgd)(
        learning_rate=hyper.server_learning_rate, momentum=hyper.server_momentum
    )


def _adam(hyper: Hyperparams) -> optax.GradientTransformation:
    return optax.inject_hyperparams(optax.adam)(
        learning_rate=hyper.server_learning_rate, b1=hyper.server_momentum, b2=0.99,
        eps=ADAPTIVE_EPSILON,
    )  # fmt: skip


def _adagrad(hyper: Hyperparams) -> optax.GradientTransformation:
    return optax.inject_hyperparams(optax.adagrad)(
        learning_rate=hyper.server_learning_rate, initial_accumulator_value=0.0,
        eps=ADAPTIVE_EPSILON,
    )  # fmt: skip


def _yogi(hyper: Hyperparams) -> optax.GradientTransformation:
    return optax.inject_hyperparams(optax.yogi)(
        learning_rate=hyper.server_learning_rate, b1=hyper.server_momentum, b2=0.99,
        eps=ADAPTIVE_EPSILON,
    )  # fmt: skip


SERVER_OPTIMIZER_BUILDERS = {"sgd": _sgd, "adam": _adam, "adagrad": _adagrad, "yogi": _yogi}
"""Each server optimizer's builder, by name (:data:`SERVER_OPTIMIZERS`)."""


def server_optimizer(name: str, hyper: Hyperparams) -> optax.GradientTransformation:
    """The optax server optimizer ``name`` with the run's (traced) learning rate and momentum
    injected into its state, so a sweep over them compiles once."""
    if name not in SERVER_OPTIMIZER_BUILDERS:
        raise ValueError(
            f"unknown server optimizer {name!r}; expected one of {list(SERVER_OPTIMIZERS)}"
        )
    return SERVER_OPTIMIZER_BUILDERS[name](hyper)


@dataclass(frozen=True)
class FloatNoise:
    """float32 Gaussian noise on the float sum (:class:`~jfed.privacy.GaussianSum`): its
    guarantee is the ideal real-valued mechanism's; the floating-point sampling (and the f32 grid
    of the noised sum) is not modelled."""

    exact: ClassVar[bool] = False

    def sum(self, per_layer: bool) -> Any:
        return GaussianSum(per_layer)

    def adaptive_sum(self, denominator: float, per_layer: bool) -> Any:
        """Quantile-adaptive clipping's two float Gaussian releases."""
        return QuantileAdaptiveGaussianSum(denominator, per_layer)


@dataclass(frozen=True)
class GridNoise:
    """Exact discrete Gaussian noise on an integer grid, added by the server
    (:class:`~jfed.privacy.DiscreteGaussianSum`): the guarantee holds for the program as it runs.

    Attributes:
      dimension: the model's parameter count d.
      grid_norm: L, the clip norm in grid units (:func:`~jfed.privacy.discrete_aggregators.
        largest_grid_norm` picks it for a cohort).
    """

    dimension: int
    grid_norm: int = 2**12
    exact: ClassVar[bool] = True

    def sum(self, per_layer: bool) -> Any:
        return DiscreteGaussianSum(self.dimension, self.grid_norm, per_layer=per_layer)

    def adaptive_sum(self, denominator: float, per_layer: bool) -> Any:
        """Quantile-adaptive clipping's two releases on the grid, each exact
        (:class:`~jfed.privacy.DiscreteQuantileAdaptiveSum`)."""
        return DiscreteQuantileAdaptiveSum(self.dimension, self.grid_norm, per_layer=per_layer,
                                           expected_count=denominator)  # fmt: skip


@dataclass(frozen=True)
class SecureNoise:
    """Distributed DP: each client rounds its update to the grid and adds its share of the noise
    (:class:`~jfed.privacy.DistributedDiscreteGaussianSum` or :class:`~jfed.privacy.SkellamSum`);
    the server sees only the sum modulo ``2^bits`` (secure aggregation, simulated).

    Attributes:
      mechanism: the secure sum's class.
      dimension: d; min_clients: the shares a release needs; bits: the field; grid_norm: L.
    """

    mechanism: type
    dimension: int
    min_clients: int
    bits: int
    grid_norm: int
    exact: ClassVar[bool] = True

    def sum(self, per_layer: bool) -> Any:
        if per_layer:
            raise ValueError("a secure sum rotates and rounds the whole update: no per-layer clip")
        return self.mechanism(self.dimension, self.min_clients, self.bits, self.grid_norm)

    def adaptive_sum(self, denominator: float, per_layer: bool) -> Any:
        raise ValueError("adaptive clipping needs a trusted server's count: no secure sum")


Noise = FloatNoise | GridNoise | SecureNoise


def aggregator_of(
    private: bool,
    denominator: float,
    per_layer: bool = False,
    adaptive: bool = False,
    canaries: int = 0,
    participation: float = 1.0,
    noise: Noise = FloatNoise(),
) -> Any:
    """DP-FedAvg's aggregator: the mean of clipped updates plus noise over the fixed denominator
    (``private``: the ``noise``'s sum, :class:`FloatNoise` by default; quantile-adaptive clipping
    with ``adaptive``, float or on the grid, not a secure sum), or FedAvg's plain mean over the
    cohort. With
    ``canaries`` > 0 the private sum also carries that many canary clients for an audit of the
    run (:class:`~jfed.privacy.canary_aggregator.WithCanaries`; they take part at the cohort's
    rate ``participation``)."""
    if not private:
        return CohortMean()
    inner = noise.adaptive_sum(denominator, per_layer) if adaptive else noise.sum(per_layer)
    if canaries:
        inner = WithCanaries(inner, canaries, participation)
    return FixedDenominatorMean(inner, denominator)


@dataclass(frozen=True)
class DPFedAvg:
    """DP-FedAvg or FedAvg with a cohort, one round (the aggregator decides which):

    1. each cohort client runs ``local_epochs`` epochs of minibatch SGD (``batch`` records a step,
       its records in a fresh random order each epoch) from the server model w_t, and reports
       ``delta_k = w_k - w_t``;
    2. the aggregator (:func:`aggregator_of`) releases the average: DP-FedAvg clips ``delta_k``
       to ``C_t`` (whole, or each tensor to ``C_t / sqrt(L)``), adds ``N(0, (z_delta C_t)^2)`` to
       the sum and divides by the fixed denominator (``q N`` for a Poisson cohort, ``K`` for a
       uniform one), and with adaptive clipping moves ``C_t`` towards the target quantile
       (:class:`~jfed.privacy.QuantileAdaptiveGaussianSum`); FedAvg takes the plain mean over
       the cohort (:class:`~jfed.privacy.CohortMean`);
    3. the server optimizer takes ``-Delta`` as its gradient.

    Attributes (static):
      model: the :class:`~jfed.models.Model` trained.
      n_max: the most records a client trains on (the local epoch's static number of steps is
        ``ceil(n_max / batch)``; steps past a client's own records do nothing; a client holding
        more uses its first ``n_max``).
      cohort: :class:`~jfed.engine.Uniform` or :class:`~jfed.engine.Poisson`.
      aggregator: a static aggregator whose release is the round's average
        (:func:`aggregator_of`).
      local_epochs: E >= 1.
      batch: B >= 1 records per local step.
      optimizer: one of :data:`SERVER_OPTIMIZERS`.
    """

    model: Any
    n_max: int
    cohort: Uniform | Poisson
    aggregator: Any
    local_epochs: int = 1
    batch: int = 10
    optimizer: str = "sgd"

    def init(self, hyper: Hyperparams, key: jax.Array) -> ServerState:
        params = self.model.init(key)
        opt_state = server_optimizer(self.optimizer, hyper).init(params)
        return ServerState(params, opt_state, self.aggregator.init(hyper.privacy, params))

    # -- one client
    def local_update(self, params: PyTree, records: Any, key: jax.Array, learning_rate) -> PyTree:
        """``delta_k``: E epochs of minibatch SGD on the client's ``records.count`` records (at
        most ``n_max``)."""
        steps = -(-self.n_max // self.batch)
        count = jnp.minimum(records.count, self.n_max)
        real = jnp.arange(self.n_max) < count

        def epoch(params, epoch_key):
            # real records first, in a random order; the tail of the last batch is masked
            order = jnp.argsort(jnp.where(real, jax.random.uniform(epoch_key, (self.n_max,)), 2.0))
            order = jnp.pad(order, (0, steps * self.batch - self.n_max))

            def step(params, s):
                position = s * self.batch + jnp.arange(self.batch)
                X, y = records.rows(jax.lax.dynamic_slice(order, (s * self.batch,), (self.batch,)))
                weights = (position < count).astype(jnp.float32)
                # a step's dropout (where the model has it) from a stream of the epoch's key
                step_key = jax.random.fold_in(epoch_key, s + 1)
                grads = jax.grad(self.model.loss)(params, X, y, weights, step_key)
                active = (s * self.batch < count).astype(jnp.float32)
                return jax.tree.map(
                    lambda p, g: p - learning_rate * active * g, params, grads
                ), None

            params, _ = jax.lax.scan(step, params, jnp.arange(steps))
            return params, None

        local, _ = jax.lax.scan(epoch, params, jax.random.split(key, self.local_epochs))
        return jax.tree.map(jnp.subtract, local, params)

    def client(self, broadcast: tuple, records: Any, key: jax.Array) -> PyTree:
        """One client's update ``delta_k`` (the aggregator clips it)."""
        params, learning_rate = broadcast
        return self.local_update(params, records, key, learning_rate)

    # -- one round
    def round(
        self, state: ServerState, hyper: Hyperparams, key: jax.Array, clients: Any
    ) -> tuple[ServerState, dict]:
        cohort = clients.sample(self.cohort)
        average, aggregator_state, diagnostics = cohort.aggregate(
            self.aggregator, hyper.privacy, state.aggregator, self.client,
            (state.params, hyper.client_learning_rate), key,
        )  # fmt: skip
        pseudo_gradient = jax.tree.map(jnp.negative, average)
        tx = server_optimizer(self.optimizer, hyper)
        updates, opt_state = tx.update(pseudo_gradient, state.optimizer, state.params)
        new_params = optax.apply_updates(state.params, updates)
        size = jnp.maximum(cohort.info.size.astype(jnp.float32), 1.0)
        infos = {
            "clip": diagnostics["clip"],
            "clipped_fraction": diagnostics["clipped_count"] / size,
            "mean_update_norm": diagnostics["norm_sum"] / size,
            "cohort_size": cohort.info.size,
            "overflow": cohort.info.overflow,
            "server_update_norm": tree_norm(average),
            "noise_std": noise_std(diagnostics, hyper.privacy),
        }
        infos |= {name: diagnostics[name] for name in SECURE_DIAGNOSTICS if name in diagnostics}
        return ServerState(new_params, opt_state, aggregator_state), infos


SECURE_DIAGNOSTICS = ("rounding_fallbacks", "survivors", "withheld", "wrapped_coordinates")
"""Diagnostics of the grid and secure sums a round keeps (outside the guarantee: computed from
unnoised updates or from who took part; :data:`jfed.privacy.NOT_PRIVATE`)."""


def noise_std(diagnostics: dict, params: Any) -> jax.Array:
    """``f32[]``: the std of the noise a round added to the sum (model units): the grid's
    realised variance (``noise_std``), a secure sum's least one, else ``z C_t`` of the float
    Gaussian at the round's clip norm (adaptive clipping: ``z_delta C_t``, the update sum's); 0
    without noise."""
    for name in ("noise_std", "noise_std_at_least"):
        if name in diagnostics:
            return diagnostics[name]
    multiplier = getattr(params, "noise_multiplier", 0.0)
    return jnp.asarray(multiplier, jnp.float32) * jnp.where(
        jnp.isfinite(diagnostics["clip"]), diagnostics["clip"], 0.0
    )


def accuracy(model: Any, params: PyTree, X: jax.Array, y: jax.Array) -> jax.Array:
    """The mean of ``model.correct`` over the rows of ``X`` (arg-max class = label)."""
    return jnp.mean(model.correct(params, X, y))
