"""Per-example convex losses on a flat parameter vector, with per-example gradients.

Parameters are always a flat ``w: f32[p]`` so that projection, noise and averaging are the same for
every loss: ``p = d`` for the squared and logistic losses and ``p = d * C`` for softmax regression
(``W = w.reshape(d, C)``).

- ``squared``: ``(x^T w - y)^2 / 2``, y real.
- ``logistic``: ``log(1 + exp(x^T w)) - y x^T w``, y in {0, 1}.
- ``softmax``: ``logsumexp(x^T W) - (x^T W)_y``, y in {0, ..., C-1} (stored as float).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

LOSSES = ("squared", "logistic", "softmax")


@dataclass(frozen=True)
class Loss:
    """A per-example loss (static, hashable).

    Attributes:
      name: one of ``LOSSES``.
      classes: number of classes C (softmax only; 1 otherwise).
    """

    name: str
    classes: int = 1

    def __post_init__(self) -> None:
        if self.name not in LOSSES:
            raise ValueError(f"unknown loss {self.name!r}; expected one of {LOSSES}")
        if self.name == "softmax" and self.classes < 2:
            raise ValueError(f"expected classes >= 2 for softmax, got classes={self.classes}")

    def param_dim(self, dim: int) -> int:
        return dim * self.classes if self.name == "softmax" else dim

    def value(self, w: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
        """Loss of one example ``x: f32[d]``, ``y: f32[]`` at ``w: f32[p]``."""
        if self.name == "squared":
            return 0.5 * (x @ w - y) ** 2
        if self.name == "logistic":
            margin = x @ w
            return jax.nn.softplus(margin) - y * margin
        logits = x @ w.reshape(x.shape[0], self.classes)
        return jax.nn.logsumexp(logits) - logits[y.astype(jnp.int32)]

    def gradient(self, w: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
        """Gradient ``f32[p]`` of one example's loss."""
        return jax.grad(self.value)(w, x, y)

    def per_example_gradients(self, w: jax.Array, X: jax.Array, y: jax.Array) -> jax.Array:
        """Gradients ``f32[b, p]`` of a batch ``X: f32[b, d]``, ``y: f32[b]``."""
        return jax.vmap(self.gradient, in_axes=(None, 0, 0))(w, X, y)

    def mean_value(self, w: jax.Array, X: jax.Array, y: jax.Array) -> jax.Array:
        """Average loss over a batch."""
        return jnp.mean(jax.vmap(self.value, in_axes=(None, 0, 0))(w, X, y))

    def predict(self, w: jax.Array, X: jax.Array) -> jax.Array:
        """Predictions: real values (squared), labels in {0, 1} (logistic) or {0..C-1}."""
        if self.name == "squared":
            return X @ w
        if self.name == "logistic":
            return (X @ w > 0).astype(jnp.float32)
        return jnp.argmax(X @ w.reshape(X.shape[1], self.classes), axis=1).astype(jnp.float32)
