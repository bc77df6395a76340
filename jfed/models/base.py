"""The model interface every federated algorithm trains: a static, hashable object with pure
functions of the parameters, written for ONE client's minibatch (the engine vmaps it over
clients).

A :class:`Model` is a frozen dataclass (so it can be a ``jax.jit`` static argument and a field of
an algorithm's static configuration). Its parameters are a plain pytree (nested dicts of arrays),
so clipping, noise and server optimizers treat every model alike.

Shapes (``b``: rows of the minibatch; a row is one record of the data set: ``f32[h, w, c]`` for
an image, ``i32[80]`` for a character window, ``f32[d]`` for a feature vector):

- ``init(key) -> params``;
- ``loss(params, X, y, weights, key=None) -> f32[]``: the mean loss over the rows of weight 1
  (0 when every weight is 0), ``weights: f32[b]`` in {0, 1} (padding rows have weight 0).
  ``key`` (optional) drives dropout where a model has it; ``None`` trains without dropout;
- ``correct(params, X, y) -> f32[b]``: per row, the fraction of correct predictions (1 or 0 for
  one label; the mean over the scored positions for a sequence);
- ``parameter_count() -> int``: host-side, from the architecture alone (no JAX).

The models here are flax ``linen`` modules wrapped in such dataclasses. linen rather than nnx:
linen modules are frozen dataclasses whose ``apply`` is a pure function of an explicit parameter
pytree, which is exactly what a vmapped, scanned, jitted client function needs; nnx modules are
mutable Python objects holding their state, which would have to be split into (graph, state)
and merged back at every client step.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp

PyTree = Any


@runtime_checkable
class Model(Protocol):
    """What an algorithm needs of a model (see the module's docstring for the shapes)."""

    name: str

    def init(self, key: jax.Array) -> PyTree: ...

    def loss(
        self,
        params: PyTree,
        X: jax.Array,
        y: jax.Array,
        weights: jax.Array,
        key: jax.Array | None = None,
    ) -> jax.Array: ...

    def correct(self, params: PyTree, X: jax.Array, y: jax.Array) -> jax.Array: ...

    def parameter_count(self) -> int: ...


def weighted_mean(values: jax.Array, weights: jax.Array) -> jax.Array:
    """``sum(w v) / max(sum(w), 1)``: the mean over the rows of weight 1, 0 when there are none.
    ``values, weights: f32[b]``."""
    return jnp.sum(weights * values) / jnp.maximum(jnp.sum(weights), 1.0)


def cross_entropy_rows(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Softmax cross-entropy of each row: ``logits: f32[b, classes]``, ``labels: int[b]`` (or
    floats holding class indices) -> ``f32[b]``."""
    log_p = jax.nn.log_softmax(logits.astype(jnp.float32))
    labels = labels.astype(jnp.int32)
    return -jnp.take_along_axis(log_p, labels[..., None], axis=-1)[..., 0]


def correct_rows(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """``f32[b]``: 1 where the arg-max class of a row is its label, else 0."""
    return (jnp.argmax(logits, axis=-1) == labels.astype(jnp.int32)).astype(jnp.float32)


def tree_size(params: PyTree) -> int:
    """The number of scalars in a parameter pytree (for checking :meth:`Model.parameter_count`
    against what ``init`` builds)."""
    return sum(int(leaf.size) for leaf in jax.tree.leaves(params))
