"""LDP-FL: local training of a flax model on every selected client, two-point perturbation of every
weight, split and shuffle, and the server's per-position mean (docs/specs/ldp_fl.md).

One round:

1. The server samples ``k = round(f n)`` clients without replacement: the engine's uniform
   cohort (:class:`jfed.engine.Uniform`, drawn from the round's cohort key in O(k)), and
   broadcasts the global weights.
2. Only the selected clients train: each runs :func:`local_training` for ONE client (written for
   one, vmapped by the engine over the cohort): E epochs of minibatch SGD (optax) with batch B over
   its own records, in an order drawn from its own key, and reports its trained weights (the
   engine stacks the cohort's reports, ``[k, P]``, row j from client ``ids[j]``). A round costs
   O(k) client trainings, not O(n).
3. Each report is clipped to its range ``[c - r, c + r]`` and perturbed weight by weight by the
   two-point mechanism (:mod:`jfed.privacy.two_point`) with the key of its client, addressed as
   ``fold_in(fold_in(randomizer root, round), client id)``. The simulation applies this randomizer
   to the round's buffer rather than inside the client function, because adaptive ranges come from
   an oracle over the round's trained weights (the seed's encrypted min/max aggregation): the
   function and its key are the client's.
4. Split and shuffle: for every weight position the server receives the round's ``k`` values in
   an order of its own (a per-position permutation), unlinkable across positions and rounds, and
   averages them.

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
from jfed.engine.aggregate import stack_messages
from jfed.engine.cohort import Uniform
from jfed.privacy import two_point

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
    """Traced scalars: ``learning_rate``, ``epsilon`` (per weight per report), and the fixed
    range ``center`` c and ``radius`` r (ignored with adaptive ranges)."""

    learning_rate: jax.Array
    epsilon: jax.Array
    center: jax.Array
    radius: jax.Array


def hyperparams(
    learning_rate: float = 0.03, epsilon: float = 1.0, center: float = 0.0, radius: float = 0.075
) -> Hyperparams:
    return Hyperparams(*(jnp.float32(v) for v in (learning_rate, epsilon, center, radius)))


class State(NamedTuple):
    """``weights: f32[P]``, the global model flattened; ``hyperparams``."""

    weights: jax.Array
    hyperparams: Hyperparams


class RoundInfo(NamedTuple):
    """Per round: the global ``weights: f32[P]`` after it, the ``radius: f32[]`` used (largest
    over layers) and the fraction of reported weights that were clipped."""

    weights: jax.Array
    radius: jax.Array
    clipped_fraction: jax.Array


class Broadcast(NamedTuple):
    weights: jax.Array
    learning_rate: jax.Array


def shuffled_mean(key: jax.Array, reports: jax.Array) -> jax.Array:
    """Split and shuffle, then average: every position's ``k`` values ``reports: f32[k, P]``
    arrive in their own random order (a permutation per position), and the server averages what
    it received per position. Returns ``f32[P]``."""
    k, positions = reports.shape
    order = jnp.argsort(jax.random.uniform(key, (positions, k)), axis=1)
    received = jnp.take_along_axis(reports.T, order, axis=1)  # [P, k]: no client order left
    return received.mean(axis=1)


@dataclass(frozen=True)
class LDPFL:
    """LDP-FL on ``n_clients`` clients holding ``records`` records each (side x side images).

    Attributes:
      model: one of :data:`MODELS`.
      side, classes: image side and number of classes.
      n_clients: n; ``selected``: k clients per round.
      records: records per client m; ``local_epochs``: E; ``batch``: B (``m // B`` steps per
        epoch; the last partial batch is dropped).
      ranges: ``fixed`` (c, r from the hyper-parameters) or ``adaptive`` (c = 0, r per parameter
        tensor, each layer's kernel and bias: its largest |weight| over the round's selected
        clients, an oracle standing in for the seed's encrypted min/max aggregation).
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
        flat, _ = ravel_pytree(self.initial_params(key))
        return State(flat.astype(jnp.float32), hp)

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

    def round(self, state: State, key: jax.Array, clients) -> tuple[State, RoundInfo]:
        hp = state.hyperparams
        _, randomizer_key, shuffle_key = jax.random.split(key, 3)
        broadcast = Broadcast(state.weights, hp.learning_rate)

        def client(broadcast: Broadcast, view, client_key):
            return self.local_training(
                broadcast.weights, view.features[view.silo_id, : self.records],
                view.targets[view.silo_id, : self.records], broadcast.learning_rate, client_key,
            )  # fmt: skip

        # the selected clients' trained weights, f32[k, P], row j from client selected[j]
        reports, cohort = clients(client, broadcast, stack_messages, cohort=Uniform(self.selected))
        selected = cohort.ids
        if self.private:
            center, radius = self._ranges(reports, hp)
            clipped = jnp.mean((reports < center - radius) | (reports > center + radius))
            keys = jax.vmap(lambda c: jax.random.fold_in(randomizer_key, c))(selected)
            reports = jax.vmap(lambda k, w: two_point.perturb(k, w, center, radius, hp.epsilon))(
                keys, reports
            )
            largest = jnp.max(radius)
        else:
            clipped, largest = jnp.float32(0.0), jnp.float32(0.0)
        weights = shuffled_mean(shuffle_key, reports)
        return State(weights, hp), RoundInfo(weights, largest, clipped)

    def _ranges(self, reports: jax.Array, hp: Hyperparams) -> tuple[jax.Array, jax.Array]:
        """``(center, radius)`` per position: fixed, or c = 0 and the layer's largest |w| over
        the round's reports (the min/max oracle)."""
        if self.ranges == "fixed":
            return hp.center, hp.radius
        _, tensors, _ = self.unravel()
        n_tensors = int(tensors.max()) + 1
        largest = jax.ops.segment_max(jnp.abs(reports).max(axis=0), tensors, n_tensors)
        return jnp.float32(0.0), jnp.maximum(largest[tensors], 1e-6)


@partial(jax.jit, static_argnums=0)
def accuracy(algorithm: LDPFL, weights: jax.Array, features, labels) -> jax.Array:
    """Accuracy of ``weights: f32[P]`` on ``features: f32[m, side^2]`` (compiled once per
    algorithm and shapes: it runs for every round of every evaluated run)."""
    unravel, _, _ = algorithm.unravel()
    logits = jnp.asarray(algorithm.module.apply(unravel(weights), features))
    return jnp.mean(jnp.argmax(logits, -1) == labels.astype(jnp.int32))
