"""DP-FedAvg with user-level privacy: a cohort per round, local epochs of minibatch SGD, each
client's update clipped (flat or per layer), Gaussian noise on the sum, a fixed-denominator
average, an optax server optimizer, and optional adaptive clipping (docs/specs/dp_fedavg.md).

References: McMahan, Ramage, Talwar, Zhang 2018 (DP-FedAvg); Andrew, Thakkar, McMahan,
Ramaswamy 2021 (adaptive clipping); Reddi et al. 2021 (server optimizers: FedAdam, FedYogi,
FedAdagrad).

The model is multinomial logistic regression (``hidden = 0``) or a one-hidden-layer ReLU network
on ``x: f32[d]`` with ``classes`` outputs; its parameters are a dict of layers, each
``{"w": f32[in, out], "b": f32[out]}`` (per-layer clipping clips every one of these tensors).
Clients are any population whose record has ``rows(indices) -> (X: f32[b, d], y: f32[b])`` and
``count`` (a :class:`~jfed.data.silos.SiloView` or :class:`~jfed.data.federated.ClientRecords`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jfed.engine.cohort import Poisson, Uniform
from jfed.privacy.privatizers import GaussianSumQuery, gaussian_noise_tree, tree_norm

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
      clip: C_0, the clip norm of round 0 (fixed unless adaptive clipping is on).
      update_noise: z_delta, the noise std on the sum of updates is ``z_delta * C_t``.
      count_noise: sigma_b, the noise std on the count of unclipped clients.
      target_quantile: gamma, the fraction of clients adaptive clipping aims to leave unclipped.
      clip_learning_rate: eta_C of the geometric clip update.
    """

    client_learning_rate: jax.Array
    server_learning_rate: jax.Array
    server_momentum: jax.Array
    clip: jax.Array
    update_noise: jax.Array
    count_noise: jax.Array
    target_quantile: jax.Array
    clip_learning_rate: jax.Array


class ServerState(NamedTuple):
    """The server's state between rounds.

    Attributes:
      params: the global model, ``{"layer": {"w": f32[in, out], "b": f32[out]}}``.
      optimizer: the server optimizer's state (optax, hyper-parameters injected).
      clip: ``f32[]``, C_t, the clip norm the next round uses.
      hyper: the run's :class:`Hyperparams`.
    """

    params: PyTree
    optimizer: PyTree
    clip: jax.Array
    hyper: Hyperparams


def model_shapes(dim: int, classes: int, hidden: int) -> dict:
    """The parameter shapes of the model, ``{layer: (in, out)}``."""
    if hidden == 0:
        return {"output": (dim, classes)}
    return {"hidden": (dim, hidden), "output": (hidden, classes)}


def init_params(key: jax.Array, dim: int, classes: int, hidden: int) -> PyTree:
    """Logistic regression starts at zero; a hidden layer starts at Glorot-uniform weights."""
    params = {}
    for i, (name, (fan_in, fan_out)) in enumerate(model_shapes(dim, classes, hidden).items()):
        if hidden == 0:
            w = jnp.zeros((fan_in, fan_out), jnp.float32)
        else:
            limit = math.sqrt(6.0 / (fan_in + fan_out))
            k = jax.random.fold_in(key, i)
            w = jax.random.uniform(k, (fan_in, fan_out), jnp.float32, -limit, limit)
        params[name] = {"w": w, "b": jnp.zeros((fan_out,), jnp.float32)}
    return params


def logits(params: PyTree, X: jax.Array) -> jax.Array:
    """``X: f32[b, d]`` -> ``f32[b, classes]``."""
    h = X
    if "hidden" in params:
        h = jax.nn.relu(h @ params["hidden"]["w"] + params["hidden"]["b"])
    return h @ params["output"]["w"] + params["output"]["b"]


def masked_cross_entropy(params: PyTree, X: jax.Array, y: jax.Array, weights: jax.Array):
    """Mean softmax cross-entropy over the rows with weight 1 (0 if there are none)."""
    log_p = jax.nn.log_softmax(logits(params, X))
    nll = -jnp.take_along_axis(log_p, y.astype(jnp.int32)[:, None], axis=1)[:, 0]
    return jnp.sum(weights * nll) / jnp.maximum(jnp.sum(weights), 1.0)


def server_optimizer(name: str, hyper: Hyperparams) -> optax.GradientTransformation:
    """The optax server optimizer ``name`` with the run's (traced) learning rate and momentum
    injected into its state, so a sweep over them compiles once."""
    if name == "sgd":
        return optax.inject_hyperparams(optax.sgd)(
            learning_rate=hyper.server_learning_rate, momentum=hyper.server_momentum
        )
    if name == "adam":
        return optax.inject_hyperparams(optax.adam)(
            learning_rate=hyper.server_learning_rate, b1=hyper.server_momentum, b2=0.99,
            eps=ADAPTIVE_EPSILON,
        )  # fmt: skip
    if name == "adagrad":
        return optax.inject_hyperparams(optax.adagrad)(
            learning_rate=hyper.server_learning_rate, initial_accumulator_value=0.0,
            eps=ADAPTIVE_EPSILON,
        )  # fmt: skip
    if name == "yogi":
        return optax.inject_hyperparams(optax.yogi)(
            learning_rate=hyper.server_learning_rate, b1=hyper.server_momentum, b2=0.99,
            eps=ADAPTIVE_EPSILON,
        )  # fmt: skip
    raise ValueError(
        f"unknown server optimizer {name!r}; expected one of {list(SERVER_OPTIMIZERS)}"
    )


@dataclass(frozen=True)
class DPFedAvg:
    """DP-FedAvg (``private=True``) or FedAvg with a cohort (``private=False``), one round:

    1. each cohort client runs ``local_epochs`` epochs of minibatch SGD (``batch`` records a step,
       its records in a fresh random order each epoch) from the server model w_t, and reports
       ``delta_k = w_k - w_t``;
    2. private: ``delta_k`` is clipped to ``C_t`` (whole, or each tensor to ``C_t / sqrt(L)``),
       ``b_k = 1[||delta_k|| <= C_t]``; the server adds ``N(0, (z_delta C_t)^2)`` to the sum and
       divides by the fixed denominator (``q N`` for a Poisson cohort, ``K`` for a uniform one);
       non-private: the plain mean over the cohort;
    3. the server optimizer takes ``-Delta`` as its gradient;
    4. adaptive clipping: ``b_bar = (sum_k (b_k - 1/2) + N(0, sigma_b^2)) / denominator + 1/2``
       and ``C_{t+1} = C_t exp(-eta_C (b_bar - gamma))``.

    Attributes (static):
      dim, classes, hidden: the model (``hidden = 0``: logistic regression).
      n_max: the most records a client holds (the local epoch's static number of steps is
        ``ceil(n_max / batch)``; steps past a client's own records do nothing).
      cohort: :class:`~jfed.engine.Uniform` or :class:`~jfed.engine.Poisson`.
      denominator: ``q N`` (Poisson) or ``K`` (uniform): the fixed denominator.
      local_epochs: E >= 1.
      batch: B >= 1 records per local step.
      private: clip, noise and the fixed denominator (else FedAvg's plain cohort mean).
      per_layer: clip each tensor to ``C / sqrt(L)`` instead of the whole update to C.
      adaptive: update the clip norm towards the target quantile.
      optimizer: one of :data:`SERVER_OPTIMIZERS`.
    """

    dim: int
    classes: int
    n_max: int
    cohort: Uniform | Poisson
    denominator: float
    local_epochs: int = 1
    batch: int = 10
    private: bool = True
    per_layer: bool = False
    adaptive: bool = False
    optimizer: str = "sgd"
    hidden: int = 0

    def init(self, hyper: Hyperparams, key: jax.Array) -> ServerState:
        params = init_params(key, self.dim, self.classes, self.hidden)
        opt_state = server_optimizer(self.optimizer, hyper).init(params)
        return ServerState(params, opt_state, jnp.asarray(hyper.clip, jnp.float32), hyper)

    # -- one client
    def local_update(self, params: PyTree, records: Any, key: jax.Array, learning_rate) -> PyTree:
        """``delta_k``: E epochs of minibatch SGD on the client's ``records.count`` records."""
        steps = -(-self.n_max // self.batch)
        count = records.count
        real = jnp.arange(self.n_max) < count

        def epoch(params, epoch_key):
            # real records first, in a random order; the tail of the last batch is masked
            order = jnp.argsort(jnp.where(real, jax.random.uniform(epoch_key, (self.n_max,)), 2.0))
            order = jnp.pad(order, (0, steps * self.batch - self.n_max))

            def step(params, s):
                position = s * self.batch + jnp.arange(self.batch)
                X, y = records.rows(jax.lax.dynamic_slice(order, (s * self.batch,), (self.batch,)))
                weights = (position < count).astype(jnp.float32)
                grads = jax.grad(masked_cross_entropy)(params, X, y, weights)
                active = (s * self.batch < count).astype(jnp.float32)
                return jax.tree.map(
                    lambda p, g: p - learning_rate * active * g, params, grads
                ), None

            params, _ = jax.lax.scan(step, params, jnp.arange(steps))
            return params, None

        local, _ = jax.lax.scan(epoch, params, jax.random.split(key, self.local_epochs))
        return jax.tree.map(jnp.subtract, local, params)

    def client(self, broadcast: tuple, records: Any, key: jax.Array) -> dict:
        """One client's message: its (clipped) update, ``b_k - 1/2``, whether it was clipped,
        and its update's norm before clipping."""
        params, clip, learning_rate = broadcast
        delta = self.local_update(params, records, key, learning_rate)
        norm = tree_norm(delta)
        if self.private:
            delta, clipped = GaussianSumQuery(self.per_layer).preprocess(delta, clip)
        else:
            clipped = (norm > clip).astype(jnp.float32)
        below = (norm <= clip).astype(jnp.float32)
        return {"update": delta, "below": below - 0.5, "clipped": clipped, "norm": norm}

    # -- one round
    def round(self, state: ServerState, key: jax.Array, clients) -> tuple[ServerState, dict]:
        params, opt_state, clip, hyper = state
        sums, info = clients(
            self.client, (params, clip, hyper.client_learning_rate), cohort=self.cohort
        )
        size = info.size.astype(jnp.float32)
        update_key, count_key = jax.random.split(key)
        if self.private:
            total = GaussianSumQuery(self.per_layer).noised_sum(
                update_key, sums["update"], clip, hyper.update_noise
            )
            average = jax.tree.map(lambda s: s / self.denominator, total)
        else:
            average = jax.tree.map(lambda s: s / jnp.maximum(size, 1.0), sums["update"])
        pseudo_gradient = jax.tree.map(jnp.negative, average)
        tx = server_optimizer(self.optimizer, hyper)
        updates, opt_state = tx.update(pseudo_gradient, opt_state, params)
        new_params = optax.apply_updates(params, updates)
        next_clip = clip
        if self.adaptive:
            noise = gaussian_noise_tree(count_key, sums["below"], hyper.count_noise)
            unclipped = (sums["below"] + noise) / self.denominator + 0.5
            next_clip = clip * jnp.exp(
                -hyper.clip_learning_rate * (unclipped - hyper.target_quantile)
            )
        infos = {
            "clip": clip,
            "clipped_fraction": sums["clipped"] / jnp.maximum(size, 1.0),
            "mean_update_norm": sums["norm"] / jnp.maximum(size, 1.0),
            "cohort_size": info.size,
            "overflow": info.overflow,
            "server_update_norm": tree_norm(average),
        }
        return ServerState(new_params, opt_state, next_clip, hyper), infos


def accuracy(params: PyTree, X: jax.Array, y: jax.Array) -> jax.Array:
    """Fraction of rows of ``X: f32[m, d]`` whose arg-max class is ``y: f32[m]``."""
    return jnp.mean(jnp.argmax(logits(params, X), axis=-1) == y.astype(jnp.int32))
