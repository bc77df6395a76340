"""LDP-FL: local training of a flax model on every selected client, two-point perturbation of every
weight, split and shuffle, and the server's per-position mean (docs/specs/ldp_fl.md).

One round:

1. The server samples ``k = round(f n)`` clients without replacement: the engine's uniform
   cohort (:class:`jfed.engine.Uniform`, drawn from the round's cohort key in O(k)), and
   broadcasts the global weights with the round's public range: a declared center c and radius
   r (``fixed``), or the previous global weight of each position as its center and the declared
   r (``adaptive``). No range depends on what the clients trained this round.
2. Only the selected clients train: each runs :func:`local_training` for ONE client (written for
   one, vmapped by the engine over the cohort): E epochs of minibatch SGD (optax) with batch B over
   its own records, in an order drawn from its own key.
3. Each client clips its trained weights to the range ``[c - r, c + r]`` and perturbs them weight
   by weight with the two-point mechanism (:mod:`jfed.privacy.two_point`): one 64-bit uniform
   per weight, from the stream ``client id`` of ``fold_in(randomizer root, round)``
   (:func:`jfed._random.stream_key`), inside the client function, so a chunk of clients holds
   only its own reports.
4. Split and shuffle, then the per-position mean: a shuffle permutes each position's ``k``
   values and leaves their sum alone, so the server's mean is the engine's sum of the reports
   over the cohort, divided by ``k``; nothing is shuffled to compute it.
   :func:`jfed.privacy.shuffle.split_and_shuffle` builds what the server would receive, for
   whatever reads the shuffled transcript itself.

A noise-free run (``private=False``) skips step 3 only.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from jfed import catalog
from jfed._random import stream_key
from jfed.engine.cohort import Uniform
from jfed.privacy import two_point
from jfed.privacy.shuffle import split_and_shuffle

MODELS = catalog.LDP_FL_MODELS
RANGES = catalog.WEIGHT_RANGES


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


@jax.custom_vjp
def max_pool_2x2(x: jax.Array) -> jax.Array:
    """2x2 max pooling with stride 2, ``nn.max_pool(x, (2, 2), (2, 2))`` (odd edges dropped), as
    a reshape and a max; its gradient goes to the first maximum of each window in row-major
    order, as ``nn.max_pool``'s select-and-scatter does, but without it (XLA's CPU
    select-and-scatter made the CNN's steps 1.5x slower). ``x: f32[..., height, width, c]``."""
    return _windows(x).max(axis=-2)


def _windows(x: jax.Array) -> jax.Array:
    """``f32[..., height // 2, width // 2, 4, c]``: each 2x2 window in row-major order."""
    *lead, height, width, channels = x.shape
    x = x[..., : height - height % 2, : width - width % 2, :]
    x = x.reshape(*lead, height // 2, 2, width // 2, 2, channels)
    x = jnp.moveaxis(x, -4, -3)  # [..., h/2, w/2, 2, 2, c]
    return x.reshape(*lead, height // 2, width // 2, 4, channels)


def _max_pool_forward(x: jax.Array):
    return max_pool_2x2(x), x


def _max_pool_backward(x: jax.Array, gradient: jax.Array):
    *lead, height, width, channels = x.shape
    first = jnp.argmax(_windows(x), axis=-2)  # ties: the first in the window
    spread = jax.nn.one_hot(first, 4, axis=-2, dtype=gradient.dtype) * gradient[..., None, :]
    spread = spread.reshape(*lead, height // 2, width // 2, 2, 2, channels)
    spread = jnp.moveaxis(spread, -3, -4).reshape(
        *lead, height - height % 2, width - width % 2, channels
    )
    pad = [(0, 0)] * len(lead) + [(0, height % 2), (0, width % 2), (0, 0)]
    return (jnp.pad(spread, pad),)


max_pool_2x2.defvjp(_max_pool_forward, _max_pool_backward)


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


def build_model(name: str, side: int, classes: int) -> nn.Module:
    """The flax module ``name`` (one of :data:`MODELS`) for ``side x side`` images."""
    if name == "cnn":
        return CNN(side, classes)
    if name == "mlp":
        return MLP(classes)
    if name == "logistic":
        return Logistic(classes)
    raise ValueError(f"unknown model {name!r}; expected one of {MODELS}")


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


class Randomizer(NamedTuple):
    """What a selected client needs to perturb its report, all of it public: the round's
    randomizer root ``key`` (a client opens its stream, ``stream_key(key, id)``), the range
    ``center`` (``f32[]`` or ``f32[P]``, the previous global model) and ``radius: f32[]``, and
    ``epsilon`` per weight."""

    key: jax.Array
    center: jax.Array
    radius: jax.Array
    epsilon: jax.Array


class Broadcast(NamedTuple):
    """What the server sends: the global ``weights: f32[P]``, the ``learning_rate``, and the
    ``randomizer`` (``None``: report the trained weights as they are, the noise-free run)."""

    weights: jax.Array
    learning_rate: jax.Array
    randomizer: Randomizer | None = None


class Report(NamedTuple):
    """One client's message: its reported ``weights: f32[P]`` and the number ``clipped: f32[]``
    of its trained weights that lay outside the range. The engine sums both over the cohort."""

    weights: jax.Array
    clipped: jax.Array


def perturbed_report(randomizer: Randomizer, client_id: jax.Array, trained: jax.Array) -> Report:
    """The report of the client ``client_id`` that trained ``trained: f32[P]``: clipped to the
    range and perturbed by the two-point mechanism, one 64-bit uniform per weight (one threefry
    block) from the client's stream of ``randomizer.key`` (:func:`jfed._random.stream_key`)."""
    center, radius = randomizer.center, randomizer.radius
    clipped = jnp.sum((trained < center - radius) | (trained > center + radius))
    key = stream_key(randomizer.key, client_id)
    reported = two_point.perturb(key, trained, center, radius, randomizer.epsilon)
    return Report(reported, clipped.astype(jnp.float32))


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
      model: one of :data:`MODELS`.
      side, classes: image side and number of classes.
      n_clients: n; ``selected``: k clients per round.
      records: records per client m; ``local_epochs``: E; ``batch``: B (``m // B`` steps per
        epoch; the last partial batch is dropped).
      ranges: ``fixed`` (c and r from the hyper-parameters) or ``adaptive`` (c per position:
        the previous global weight, broadcast to every client; r from the hyper-parameters).
        Both are public: no range is read from the clients' trained weights.
      private: perturb the reports (``False``: the noise-free run of the same protocol).
      unroll_steps: trace the local steps one after another instead of looping over them (how
        models with ``nn.Conv`` run fast on CPU; jfed's own CNN needs no unrolling).
    """

    model: str
    side: int
    classes: int
    n_clients: int
    selected: int
    records: int
    local_epochs: int = 1
    batch: int = 8
    ranges: str = "fixed"
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
        if self.ranges not in RANGES:
            raise ValueError(f"unknown range rule {self.ranges!r}; expected one of {RANGES}")

    @property
    def module(self) -> nn.Module:
        return build_model(self.model, self.side, self.classes)

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
        _, randomizer_key, _ = jax.random.split(key, 3)
        randomizer = None
        if self.private:
            randomizer = Randomizer(randomizer_key, self.center(state.weights, hp), hp.radius,
                                    hp.epsilon)  # fmt: skip
        broadcast = Broadcast(state.weights, hp.learning_rate, randomizer)

        def client(broadcast: Broadcast, view, client_key) -> Report:
            trained = self.local_training(
                broadcast.weights, view.features[view.silo_id, : self.records],
                view.targets[view.silo_id, : self.records], broadcast.learning_rate, client_key,
            )  # fmt: skip
            if broadcast.randomizer is None:
                return Report(trained, jnp.float32(0.0))
            return perturbed_report(broadcast.randomizer, view.silo_id, trained)

        # summed over the cohort: the mean a split-and-shuffled transcript gives
        total = clients.sample(Uniform(self.selected)).sum(client, broadcast)
        weights = total.weights / self.selected
        positions = self.unravel()[2]
        clipped = total.clipped / (self.selected * positions)
        radius = hp.radius if self.private else jnp.float32(0.0)
        return State(weights), RoundInfo(weights, radius, clipped)

    def center(self, weights: jax.Array, hp: Hyperparams) -> jax.Array:
        """The range's center: the declared c (``fixed``), or the global ``weights: f32[P]``
        the clients start from (``adaptive``): public either way."""
        return hp.center if self.ranges == "fixed" else weights


@partial(jax.jit, static_argnums=0)
def accuracy(algorithm: LDPFL, weights: jax.Array, features, labels) -> jax.Array:
    """Accuracy of ``weights: f32[P]`` on ``features: f32[m, side^2]`` (compiled once per
    algorithm and shapes: it runs for every round of every evaluated run)."""
    unravel, _, _ = algorithm.unravel()
    logits = jnp.asarray(algorithm.module.apply(unravel(weights), features))
    return jnp.mean(jnp.argmax(logits, -1) == labels.astype(jnp.int32))
