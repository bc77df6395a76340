"""LDP-FL: local training of a flax model on every selected client, two-point perturbation of every
weight, split and shuffle, and the server's per-position mean (docs/specs/ldp_fl.md).

One round:

1. The server samples ``k = round(f n)`` clients without replacement: the engine's uniform
   cohort (:class:`jfed.engine.Uniform`, drawn from the round's cohort key in O(k)), and
   broadcasts the global weights with the round's public range: a declared center c and radius
   r (:data:`FIXED`), or the previous global weight of each position as its center and the
   declared r (:data:`ADAPTIVE`). No range depends on what the clients trained this round.
2. Only the selected clients train: each runs :func:`local_training` for ONE client (written for
   one, vmapped by the engine over the cohort): E epochs of minibatch SGD (optax) with batch B over
   its own records, in an order drawn from its own key.
3. Each client clips its trained weights to the range ``[c - r, c + r]`` and perturbs them weight
   by weight with the two-point mechanism: the round's aggregator, a local randomizer
   (:class:`jfed.privacy.two_point.TwoPointSum`, released through ``cohort.aggregate``), one
   64-bit uniform per weight from the client's privacy stream (the engine's
   ``fold_in(client key, PRIVACY_STREAM)``, apart from the training's key), so a chunk of
   clients holds only its own reports. A release is P pure eps-DP reports per client; the
   run's guarantee composes them over the rounds.
4. Split and shuffle, then the per-position mean: a shuffle permutes each position's ``k``
   values and leaves their sum alone, so the server's mean is the aggregator's sum of the
   reports over the cohort, divided by ``k``; nothing is shuffled to compute it.
   :func:`jfed.privacy.shuffle.split_and_shuffle` builds what the server would receive, for
   whatever reads the shuffled transcript itself.

A noise-free run (``private=False``) reports the trained weights as they are (the plain sum).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple, cast

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from jfed.engine.cohort import Uniform
from jfed.models.layers import max_pool_2x2
from jfed.privacy.aggregators import NoParams, PlainSum
from jfed.privacy.shuffle import split_and_shuffle
from jfed.privacy.two_point import TwoPointParams, TwoPointSum


class MatmulConv(nn.Module):
    """A stride-1 ``SAME`` convolution as ONE matrix product over shifted copies of the input
    (im2col by slicing), with ``nn.Conv``'s parameters (``kernel: f32[kh, kw, in, out]``,
    ``bias: f32[out]``) and initialisers; equal to ``nn.Conv`` up to float32 rounding.

    Why not ``nn.Conv``: inside a compiled loop (every jfed round runs inside the scan over
    rounds, every client inside the scan over chunks) XLA's CPU backend gives the kernel's
    gradient convolution a non-canonical layout (``f01b_i01o->01bf``) that it runs far slower
    than the canonical one it picks outside loops: 3 SGD steps of the 28x28 CNN on one client took
    0.39 s in a ``lax.scan`` with ``nn.Conv`` and 0.033 s with this layer (0.027 s for
    ``nn.Conv`` traced straight). Matrix products have no such penalty, and vmapped over clients
    they are batched products rather than grouped convolutions.

    Input ``x: f32[..., height, width, in]``; output ``f32[..., height, width, out]``.
    """

    features: int
    kernel_size: tuple[int, int]

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kh, kw = self.kernel_size
        channels = x.shape[-1]
        kernel = self.param("kernel", nn.initializers.lecun_normal(),
                            (kh, kw, channels, self.features))  # fmt: skip
        bias = self.param("bias", nn.initializers.zeros_init(), (self.features,))
        height, width = x.shape[-3], x.shape[-2]
        spatial = [((kh - 1) // 2, kh // 2), ((kw - 1) // 2, kw // 2), (0, 0)]
        padded = jnp.pad(x, [(0, 0)] * (x.ndim - 3) + spatial)
        patches = jnp.concatenate(
            [padded[..., i : i + height, j : j + width, :] for i in range(kh) for j in range(kw)],
            axis=-1,
        )  # [..., height, width, kh * kw * in], ordered as the kernel's (i, j, channel)
        return patches @ kernel.reshape(kh * kw * channels, self.features) + bias


class CNN(nn.Module):
    """The seed's two-layer CNN (conv-pool, conv-pool, dense, dense), sized to the image: 3x3
    kernels of 16 and 32 channels for 8x8 digits, 5x5 of 32 and 64 for 28x28 images. The
    convolutions are :class:`MatmulConv` (the parameters and their names are ``nn.Conv``'s), the
    pooling :func:`max_pool_2x2`."""

    side: int
    classes: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel, width = ((5, 5), 32) if self.side >= 16 else ((3, 3), 16)
        x = x.reshape((*x.shape[:-1], self.side, self.side, 1))
        x = max_pool_2x2(nn.relu(MatmulConv(width, kernel, name="Conv_0")(x)))
        x = max_pool_2x2(nn.relu(MatmulConv(2 * width, kernel, name="Conv_1")(x)))
        x = x.reshape((*x.shape[:-3], -1))
        x = nn.relu(nn.Dense(4 * width)(x))
        return nn.Dense(self.classes)(x)


class MLP(nn.Module):
    """One hidden layer of 64 units."""

    classes: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.Dense(self.classes)(nn.relu(nn.Dense(64)(x)))


class Logistic(nn.Module):
    """Multinomial logistic regression."""

    classes: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.Dense(self.classes)(x)


@dataclass(frozen=True)
class ModelKind:
    """A model family: ``build(side, classes) -> nn.Module`` for ``side x side`` images.

    Attributes:
      name: its name on the command line (``--model``).
      build: the module's constructor.
    """

    name: str
    build: Callable[[int, int], nn.Module]


def _cnn(side: int, classes: int) -> nn.Module:
    return CNN(side, classes)


def _mlp(side: int, classes: int) -> nn.Module:
    del side
    return MLP(classes)


def _logistic(side: int, classes: int) -> nn.Module:
    del side
    return Logistic(classes)


MODELS: dict[str, ModelKind] = {
    kind.name: kind
    for kind in (ModelKind("cnn", _cnn), ModelKind("mlp", _mlp), ModelKind("logistic", _logistic))
}
"""The model families by name."""


@dataclass(frozen=True)
class FixedRange:
    """The declared center c of every position (``hp.center``)."""

    name = "fixed"

    def center(self, weights: jax.Array, hp: Hyperparams) -> jax.Array:
        del weights
        return hp.center


@dataclass(frozen=True)
class AdaptiveRange:
    """Each position's previous global weight as its center (what every client starts from)."""

    name = "adaptive"

    def center(self, weights: jax.Array, hp: Hyperparams) -> jax.Array:
        del hp
        return weights


FIXED = FixedRange()
ADAPTIVE = AdaptiveRange()
RANGES: dict[str, FixedRange | AdaptiveRange] = {rule.name: rule for rule in (FIXED, ADAPTIVE)}
"""The range rules by name: both public, neither reads what the clients trained."""


def _named(table: dict[str, Any], value: Any, what: str) -> Any:
    """``value`` as an entry of ``table``: an entry as it is, a name looked up (``ValueError``
    listing the names)."""
    if not isinstance(value, str):
        return value
    if value not in table:
        raise ValueError(f"unknown {what} {value!r}; expected one of {list(table)}")
    return table[value]


def build_model(name: str, side: int, classes: int) -> nn.Module:
    """The flax module of the model family ``name`` (a key of :data:`MODELS`) for ``side x side``
    images."""
    return _named(MODELS, name, "model").build(side, classes)


class Hyperparams(NamedTuple):
    """Traced scalars: ``learning_rate``, ``epsilon`` (per weight per report), the range's
    ``center`` c (``fixed`` ranges only) and ``radius`` r (both range rules)."""

    learning_rate: jax.Array
    epsilon: jax.Array
    center: jax.Array
    radius: jax.Array


def hyperparams(
    learning_rate: float = 0.03, epsilon: float = 1.0, center: float = 0.0, radius: float = 0.075
) -> Hyperparams:
    return Hyperparams(*(jnp.float32(v) for v in (learning_rate, epsilon, center, radius)))


class State(NamedTuple):
    """``weights: f32[P]``, the global model flattened."""

    weights: jax.Array


class RoundInfo(NamedTuple):
    """Per round: the global ``weights: f32[P]`` after it, the range ``radius: f32[]`` used and
    the fraction of reported weights that were clipped into the range."""

    weights: jax.Array
    radius: jax.Array
    clipped_fraction: jax.Array


class Broadcast(NamedTuple):
    """What the server sends: the global ``weights: f32[P]`` and the ``learning_rate``."""

    weights: jax.Array
    learning_rate: jax.Array


def shuffled_mean(key: jax.Array, reports: jax.Array) -> jax.Array:
    """The per-position mean of what a split and shuffle delivers
    (:func:`jfed.privacy.shuffle.split_and_shuffle` of ``reports: f32[k, P]``); equal to
    ``reports.mean(0)`` up to float32 summation order, which is how a round computes it.
    Returns ``f32[P]``."""
    return split_and_shuffle(key, reports).mean(axis=1)


@dataclass(frozen=True)
class LDPFL:
    """LDP-FL on ``n_clients`` clients holding ``records`` records each (side x side images).

    Attributes:
      model: a :class:`ModelKind` (or its name, a key of :data:`MODELS`, looked up once).
      side, classes: image side and number of classes.
      n_clients: n; ``selected``: k clients per round.
      records: records per client m; ``local_epochs``: E; ``batch``: B (``m // B`` steps per
        epoch; the last partial batch is dropped).
      ranges: the range rule, :data:`FIXED` (c and r from the hyper-parameters) or
        :data:`ADAPTIVE` (c per position: the previous global weight, broadcast to every
        client; r from the hyper-parameters), or its name (a key of :data:`RANGES`). Both are
        public: no range is read from the clients' trained weights.
      private: perturb the reports (``False``: the noise-free run of the same protocol).
      unroll_steps: trace the local steps one after another instead of looping over them (how
        models with ``nn.Conv`` run fast on CPU; jfed's own CNN needs no unrolling).
    """

    model: ModelKind | str
    side: int
    classes: int
    n_clients: int
    selected: int
    records: int
    local_epochs: int = 1
    batch: int = 8
    ranges: FixedRange | AdaptiveRange | str = FIXED
    private: bool = True
    unroll_steps: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.selected <= self.n_clients:
            raise ValueError(
                f"expected 1 <= selected clients <= {self.n_clients}, got {self.selected}"
            )
        if not 1 <= self.batch <= self.records:
            raise ValueError(
                f"expected --batch in [1, {self.records}] (the records of a client), got "
                f"--batch={self.batch}"
            )
        # names become their objects once, here (a frozen dataclass: set through object)
        object.__setattr__(self, "model", _named(MODELS, self.model, "model"))
        object.__setattr__(self, "ranges", _named(RANGES, self.ranges, "range rule"))

    @property
    def module(self) -> nn.Module:
        return cast(ModelKind, self.model).build(self.side, self.classes)

    @property
    def aggregator(self) -> TwoPointSum | PlainSum:
        """Every selected client's report: the two-point mechanism on every weight (a local
        randomizer), or the trained weights as they are (the noise-free run)."""
        return TwoPointSum(self.unravel()[2]) if self.private else PlainSum()

    def aggregator_params(self, hp: Hyperparams) -> TwoPointParams | NoParams:
        """The aggregator's parameters, the very leaves of ``hp`` (the ledger reads them)."""
        return TwoPointParams(hp.epsilon, hp.radius) if self.private else NoParams()

    def initial_params(self, key: jax.Array):
        return self.module.init(key, jnp.zeros((1, self.side * self.side), jnp.float32))

    def unravel(self):
        """``flat f32[P] -> params``, the parameter tensor of every position (``i32[P]``, host
        numpy: each layer's kernel and bias are tensors of their own) and P."""
        params = jax.eval_shape(self.initial_params, jax.random.key(0))
        _, unravel = ravel_pytree(jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), params))
        sizes = [int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(params)]
        tensors = np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)
        return unravel, tensors, int(sum(sizes))

    def init(self, hp: Hyperparams, key: jax.Array) -> State:
        del hp
        flat, _ = ravel_pytree(self.initial_params(key))
        return State(flat.astype(jnp.float32))

    def local_training(self, weights: jax.Array, features, targets, learning_rate, key):
        """E epochs of minibatch SGD from ``weights: f32[P]`` on one client's ``features:
        f32[m, side^2]`` and integer ``targets: f32[m]``; returns the trained ``f32[P]``."""
        unravel, _, _ = self.unravel()
        optimizer = optax.sgd(learning_rate)
        steps = self.records // self.batch
        labels = targets.astype(jnp.int32)

        def loss(flat, x, y):
            logits = self.module.apply(unravel(flat), x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        def step(carry, batch_ids):
            flat, opt_state = carry
            grads = jax.grad(loss)(flat, features[batch_ids], labels[batch_ids])
            updates, opt_state = optimizer.update(grads, opt_state, flat)
            return (optax.apply_updates(flat, updates), opt_state), None

        def epoch(carry, epoch_key):
            order = jax.random.permutation(epoch_key, self.records)
            batches = order[: steps * self.batch].reshape(steps, self.batch)
            return jax.lax.scan(step, carry, batches, unroll=self.unroll_steps)[0], None

        carry = (weights, optimizer.init(weights))
        for epoch_key in jax.random.split(key, self.local_epochs):
            carry, _ = epoch(carry, epoch_key)
        return carry[0]

    def round(
        self, state: State, hp: Hyperparams, key: jax.Array, clients
    ) -> tuple[State, RoundInfo]:
        broadcast = Broadcast(state.weights, hp.learning_rate)

        def client(broadcast: Broadcast, view, client_key) -> jax.Array:
            return self.local_training(
                broadcast.weights, view.features[view.silo_id, : self.records],
                view.targets[view.silo_id, : self.records], broadcast.learning_rate, client_key,
            )  # fmt: skip

        # the reports summed over the cohort: the mean a split-and-shuffled transcript gives;
        # the release adds no noise (the server key is not read)
        center = self.center(state.weights, hp)
        total, _, diagnostics = clients.sample(Uniform(self.selected)).aggregate(
            self.aggregator, self.aggregator_params(hp), center, client, broadcast, key
        )
        weights = total / self.selected
        positions = self.unravel()[2]
        clipped = diagnostics["clipped_count"] / (self.selected * positions)
        radius = hp.radius if self.private else jnp.float32(0.0)
        return State(weights), RoundInfo(weights, radius, clipped)

    def center(self, weights: jax.Array, hp: Hyperparams) -> jax.Array:
        """The range's center by the range rule: the declared c (:data:`FIXED`), or the global
        ``weights: f32[P]`` the clients start from (:data:`ADAPTIVE`): public either way."""
        return cast(FixedRange | AdaptiveRange, self.ranges).center(weights, hp)


EVALUATED_AT_ONCE = 512
"""Images whose activations :func:`accuracy` holds at once (a CNN's on all 60,000 training images
of procedural MNIST took 70 GiB; in blocks of 512, 0.78 GiB, the same accuracy)."""


@partial(jax.jit, static_argnums=0)
def accuracy(algorithm: LDPFL, weights: jax.Array, features, labels) -> jax.Array:
    """Accuracy of ``weights: f32[P]`` on ``features: f32[m, side^2]``, evaluated
    :data:`EVALUATED_AT_ONCE` images at a time (compiled once per algorithm and shapes: it runs
    for every round of every evaluated run)."""
    unravel, _, _ = algorithm.unravel()
    params = unravel(weights)

    def correct(block):
        x, y = block
        logits = jnp.asarray(algorithm.module.apply(params, x[None]))[0]
        return jnp.argmax(logits, -1) == y.astype(jnp.int32)

    hits = jax.lax.map(correct, (features, labels), batch_size=EVALUATED_AT_ONCE)
    return jnp.mean(hits)
