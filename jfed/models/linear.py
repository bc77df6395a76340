"""Multinomial logistic regression and a one-hidden-layer ReLU network on ``x: f32[d]``.

These are DP-FedAvg's original models (docs/specs/dp_fedavg.md) as :class:`~jfed.models.Model`
objects, with the same parameter pytree ``{layer: {"w": f32[in, out], "b": f32[out]}}`` (layers
``"output"``, or ``"hidden"`` then ``"output"``), the same initialisation (logistic regression at
zero; with a hidden layer, Glorot-uniform weights, the i-th layer from ``fold_in(key, i)``, zero
biases) and the same numbers. Plain ``jax.numpy`` rather than flax: the parameter names and the
draws are part of what existing results were computed with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from jfed.models.base import PyTree, correct_rows, cross_entropy_rows, weighted_mean


@dataclass(frozen=True)
class DenseClassifier:
    """Softmax regression (``hidden = 0``) or one hidden ReLU layer of ``hidden`` units.

    Attributes:
      dim: d, the length of a feature vector (a record ``x: f32[d]``; an image record is
        flattened first).
      classes: the number of classes (labels are class indices, ``int`` or ``f32``).
      hidden: units of the hidden layer; 0 is multinomial logistic regression.
    """

    dim: int
    classes: int
    hidden: int = 0

    @property
    def name(self) -> str:
        return "logistic" if self.hidden == 0 else f"mlp-{self.hidden}"

    def shapes(self) -> dict[str, tuple[int, int]]:
        """``{layer: (in, out)}``."""
        if self.hidden == 0:
            return {"output": (self.dim, self.classes)}
        return {"hidden": (self.dim, self.hidden), "output": (self.hidden, self.classes)}

    def init(self, key: jax.Array) -> PyTree:
        params = {}
        for i, (name, (fan_in, fan_out)) in enumerate(self.shapes().items()):
            if self.hidden == 0:
                w = jnp.zeros((fan_in, fan_out), jnp.float32)
            else:
                limit = math.sqrt(6.0 / (fan_in + fan_out))
                w = jax.random.uniform(
                    jax.random.fold_in(key, i), (fan_in, fan_out), jnp.float32, -limit, limit
                )
            params[name] = {"w": w, "b": jnp.zeros((fan_out,), jnp.float32)}
        return params

    def logits(self, params: PyTree, X: jax.Array) -> jax.Array:
        """``X: f32[b, ...]`` (flattened to ``[b, d]``) -> ``f32[b, classes]``."""
        h = X.reshape(X.shape[0], -1).astype(jnp.float32)
        if "hidden" in params:
            h = jax.nn.relu(h @ params["hidden"]["w"] + params["hidden"]["b"])
        return h @ params["output"]["w"] + params["output"]["b"]

    def loss(self, params, X, y, weights, key=None) -> jax.Array:
        del key  # no dropout
        return weighted_mean(cross_entropy_rows(self.logits(params, X), y), weights)

    def correct(self, params, X, y) -> jax.Array:
        return correct_rows(self.logits(params, X), y)

    def parameter_count(self) -> int:
        return sum(fan_in * fan_out + fan_out for fan_in, fan_out in self.shapes().values())
