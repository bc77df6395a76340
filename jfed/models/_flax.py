"""What every flax-backed model shares: ``init`` from an example input, ``loss`` and ``correct``
from the module's logits (one label per row, or one per position of a sequence)."""

from __future__ import annotations

import functools
from typing import cast

import flax.linen as nn
import jax
import jax.numpy as jnp

from jfed.models.base import PyTree, correct_rows, cross_entropy_rows, weighted_mean


@functools.partial(jax.jit, static_argnums=0)
def _init_params(model: FlaxClassifier, key: jax.Array) -> PyTree:
    """The module's parameters at ``key``, as one compiled program: flax's initialisers run
    eagerly would compile dozens of small programs (seconds) the first time a model is built."""
    example = jnp.zeros((1, *model.input_shape), model.input_dtype)
    return model.module().init(key, example)["params"]


class FlaxClassifier:
    """Mixin for a frozen dataclass that builds a linen module with :meth:`module` whose
    ``__call__(x, dropout_key)`` maps ``x: [b, *input_shape]`` to logits ``f32[b, classes]``
    (one label per row) or ``f32[b, T, classes]`` (a label per position).

    ``pad_label``: for sequences, targets equal to it are not scored (padding); ``None`` scores
    every position."""

    input_shape: tuple[int, ...]
    input_dtype = jnp.float32
    pad_label: int | None = None

    def module(self) -> nn.Module:
        raise NotImplementedError

    def init(self, key: jax.Array) -> PyTree:
        return _init_params(self, key)

    def logits(self, params: PyTree, X: jax.Array, key: jax.Array | None = None) -> jax.Array:
        """The module's logits for ``X: [b, *input_shape]`` (dropout only with a ``key``)."""
        # without mutable collections, apply returns the module's output alone (no state tuple)
        logits = self.module().apply({"params": params}, X.astype(self.input_dtype), key)
        return cast(jax.Array, logits)

    def _scored_logits(
        self, params: PyTree, X: jax.Array, y: jax.Array, key: jax.Array | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """``(logits, scored)``: the logits that ``y`` labels and which positions count. A
        sequence model given one label per row (``y: [b]``) is scored after its last position;
        for sequence labels (``y: [b, T]``), positions labelled ``pad_label`` do not count."""
        logits = self.logits(params, X, key)
        if logits.ndim == y.ndim + 2:
            logits = logits[:, -1]
        if y.ndim == 1 or self.pad_label is None:
            return logits, jnp.ones(y.shape, jnp.float32)
        return logits, (y != self.pad_label).astype(jnp.float32)

    def loss(self, params, X, y, weights, key=None) -> jax.Array:
        logits, scored = self._scored_logits(params, X, y, key)
        losses = cross_entropy_rows(logits, y)
        if losses.ndim == 1:
            return weighted_mean(losses, weights)
        # a sequence: the mean over every scored position of the rows of weight 1
        position_weights = scored * weights[:, None]
        return jnp.sum(position_weights * losses) / jnp.maximum(jnp.sum(position_weights), 1.0)

    def correct(self, params, X, y) -> jax.Array:
        logits, scored = self._scored_logits(params, X, y)
        right = correct_rows(logits, y)
        if right.ndim == 1:
            return right
        return jnp.sum(scored * right, axis=-1) / jnp.maximum(jnp.sum(scored, axis=-1), 1.0)
