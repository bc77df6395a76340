"""Per-example convex losses on a flat parameter vector, with per-example gradients.

Parameters are always a flat ``w: f32[p]`` so that projection, noise and averaging are the same for
every loss: ``p = d`` for the squared and logistic losses and ``p = d * C`` for softmax regression
(``W = w.reshape(d, C)``).

- :class:`Squared` (``squared``): ``(x^T w - y)^2 / 2``, y real.
- :class:`Logistic` (``logistic``): ``log(1 + exp(x^T w)) - y x^T w``, y in {0, 1}.
- :class:`Softmax` (``softmax``): ``logsumexp(x^T W) - (x^T W)_y``, y in {0, ..., C-1} (stored as
  float).

Each loss is a small frozen (static, hashable) object: its device functions for one example and
a batch, and its float64 host forms for the evaluation (:mod:`jfed.algorithms.silo_metrics`).
:data:`LOSSES` maps each name to its class; :func:`Loss` makes one from its name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import expit, logsumexp, softmax


@dataclass(frozen=True)
class _Loss:
    """What every loss provides; subclasses define the per-example value, its host form and the
    prediction."""

    name: ClassVar[str]
    classes: ClassVar[int] = 1
    regression: ClassVar[bool] = False
    curvature: ClassVar[float]
    """Bound on the second derivative of the loss in the margin ``x^T w`` (the smoothness is this
    times the largest eigenvalue of ``X^T X / m``)."""

    @classmethod
    def of(cls, classes: int) -> _Loss:
        """The loss for ``classes`` classes (only softmax reads it)."""
        del classes
        return cls()

    def param_dim(self, dim: int) -> int:
        """``p``, the length of ``w`` for features of dimension ``dim``."""
        return dim * self.classes

    def value(self, w: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
        """Loss of one example ``x: f32[d]``, ``y: f32[]`` at ``w: f32[p]``."""
        raise NotImplementedError

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
        raise NotImplementedError

    def host_value_and_gradient(
        self, w: np.ndarray, X: np.ndarray, y: np.ndarray
    ) -> tuple[float, np.ndarray]:
        """Average loss and its gradient over ``(X: f64[m, d], y: f64[m])`` at ``w: f64[p]``
        (host, float64)."""
        raise NotImplementedError

    def host_predict(self, w: np.ndarray, X: np.ndarray) -> np.ndarray:
        """:meth:`predict` on the host in float64."""
        raise NotImplementedError


@dataclass(frozen=True)
class Squared(_Loss):
    """``(x^T w - y)^2 / 2`` (linear regression)."""

    name: ClassVar[str] = "squared"
    regression: ClassVar[bool] = True
    curvature: ClassVar[float] = 1.0

    def value(self, w, x, y):
        return 0.5 * (x @ w - y) ** 2

    def predict(self, w, X):
        return X @ w

    def host_value_and_gradient(self, w, X, y):
        residual = X @ w - y
        return 0.5 * float(residual @ residual) / X.shape[0], X.T @ residual / X.shape[0]

    def host_predict(self, w, X):
        return X @ w


@dataclass(frozen=True)
class Logistic(_Loss):
    """``log(1 + exp(x^T w)) - y x^T w`` (binary logistic regression, y in {0, 1})."""

    name: ClassVar[str] = "logistic"
    curvature: ClassVar[float] = 0.25

    def value(self, w, x, y):
        margin = x @ w
        return jax.nn.softplus(margin) - y * margin

    def predict(self, w, X):
        return (X @ w > 0).astype(jnp.float32)

    def host_value_and_gradient(self, w, X, y):
        margin = X @ w
        value = float(np.mean(np.logaddexp(0.0, margin) - y * margin))
        return value, X.T @ (expit(margin) - y) / X.shape[0]

    def host_predict(self, w, X):
        return (X @ w > 0).astype(float)


@dataclass(frozen=True)
class Softmax(_Loss):
    """``logsumexp(x^T W) - (x^T W)_y`` (softmax regression over ``classes`` >= 2 classes,
    ``W = w.reshape(d, C)``)."""

    classes: int = 2  # type: ignore[misc]  # a field here, the constant 1 of the other losses
    name: ClassVar[str] = "softmax"
    curvature: ClassVar[float] = 0.5

    def __post_init__(self) -> None:
        if self.classes < 2:
            raise ValueError(f"expected classes >= 2 for softmax, got classes={self.classes}")

    @classmethod
    def of(cls, classes: int) -> Softmax:
        return cls(classes)

    def value(self, w, x, y):
        logits = x @ w.reshape(x.shape[0], self.classes)
        return jax.nn.logsumexp(logits) - logits[y.astype(jnp.int32)]

    def predict(self, w, X):
        logits = X @ w.reshape(X.shape[1], self.classes)
        return jnp.argmax(logits, axis=1).astype(jnp.float32)

    def host_value_and_gradient(self, w, X, y):
        m = X.shape[0]
        logits = X @ w.reshape(X.shape[1], self.classes)
        labels = y.astype(int)
        value = float(np.mean(logsumexp(logits, axis=1) - logits[np.arange(m), labels]))
        probabilities = softmax(logits, axis=1)
        probabilities[np.arange(m), labels] -= 1.0
        return value, (X.T @ probabilities / m).ravel()

    def host_predict(self, w, X):
        return np.argmax(X @ w.reshape(X.shape[1], self.classes), axis=1)


LOSSES: dict[str, type[_Loss]] = {loss.name: loss for loss in (Squared, Logistic, Softmax)}
"""Every loss class by its name (the silo data sets name theirs)."""


def Loss(name: str, classes: int = 1) -> _Loss:  # noqa: N802 (a factory)
    """The loss ``name`` (a key of :data:`LOSSES`); ``classes`` is C for softmax (ignored by the
    others). ``ValueError`` naming the losses for an unknown one."""
    if name not in LOSSES:
        raise ValueError(f"unknown loss {name!r}; expected one of {tuple(LOSSES)}")
    return LOSSES[name].of(classes)
