"""Privatizers over pytrees: clipping and Gaussian noise (the pieces the aggregators of
:mod:`jfed.privacy.aggregators` are built from), and the local randomizer protocols.

A model update is a pytree of arrays (``flax`` parameters, a dict, a single array). The device
side is pure JAX with the key passed in; numbers that a sweep varies (clip norm, noise
multiplier) are arguments, so they can be traced and one program serves every eps.

Noise multiplier convention: ``z = noise std / clip_norm``, where ``clip_norm`` bounds one
client's contribution to the sum. Under add-or-remove adjacency ``clip_norm`` is the sum's L2
sensitivity; under replace-one neighbouring sums differ by up to ``2 clip_norm``, which
:mod:`jfed.privacy.accounting` accounts for (see its module docstring).

Example::

    clipped, was_clipped = jax.vmap(clip_tree, in_axes=(0, None))(updates, clip_norm)
    summed = jax.tree.map(lambda x: x.sum(0), clipped)
    released = jax.tree.map(jnp.add, summed,
                            gaussian_noise_tree(key, summed, noise_multiplier * clip_norm))
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp

from jfed._random import private_normals
from jfed.privacy.clipping import clip_to_ball

if TYPE_CHECKING:  # imported where an event is made: dp-accounting takes about a second to load
    import dp_accounting

PyTree = Any


@runtime_checkable
class LocalRandomizer(Protocol):
    """What a local randomizer provides: a jittable release and the event it spends.

    :class:`~jfed.privacy.GaussianMechanism`, :class:`~jfed.privacy.LaplaceMechanism`,
    :class:`~jfed.privacy.AnisotropicGaussianMechanism` and
    :class:`~jfed.privacy.TwoPointMechanism` satisfy it.
    """

    def randomize(self, key: jax.Array, x: jax.Array) -> jax.Array:
        """``x: f32[...]`` -> its randomized release, same shape (pure JAX, jit / vmap it)."""
        ...

    def dp_event(self) -> dp_accounting.DpEvent:
        """The ``dp_accounting`` event of one release (host side)."""
        ...


@runtime_checkable
class NoiseRandomizer(Protocol):
    """A local randomizer whose noise scale is a traced number, so a sweep over eps stays one
    compiled program: what a method's client applies to its clipped message, and what the run's
    accounting reads. :class:`GaussianNoise` is the built-in one; write your own to plug another
    noise into a method that takes a randomizer (e.g. ``jfed.algorithms.dpsgd``).
    """

    def perturb(self, key: jax.Array, x: jax.Array, noise_scale: jax.Array) -> jax.Array:
        """``x: f32[...]`` plus noise of scale ``noise_scale`` (pure JAX; jit / vmap it)."""
        ...

    def sensitivity(self, l2_bound: float, dim: int | None) -> float:
        """The sensitivity, in the norm this noise is calibrated in, of a message ``x: f32[dim]``
        that moves by at most ``l2_bound`` in L2 between neighbouring inputs."""
        ...

    def dp_event(self, noise_multiplier: float) -> dp_accounting.DpEvent:
        """The event of one release with ``noise_scale = noise_multiplier * sensitivity``."""
        ...


@dataclass(frozen=True)
class GaussianNoise:
    """``x + noise_scale * N(0, I)``: the Gaussian mechanism of L2 sensitivity ``l2_bound``."""

    def perturb(self, key: jax.Array, x: jax.Array, noise_scale: jax.Array) -> jax.Array:
        return x + noise_scale * private_normals(key, jnp.shape(x))

    def sensitivity(self, l2_bound: float, dim: int | None) -> float:
        del dim
        return float(l2_bound)

    def dp_event(self, noise_multiplier: float) -> dp_accounting.DpEvent:
        import dp_accounting

        return dp_accounting.GaussianDpEvent(noise_multiplier)

    def rounds_noise(
        self, accountant: Any, sensitivity: float, epsilon: float, delta: float, rounds: int
    ) -> float:
        """The accountant's calibration of Gaussian rounds (closed form where it has one)."""
        return accountant.gaussian_rounds_noise(sensitivity, epsilon, delta, rounds)


def tree_norm(tree: PyTree) -> jax.Array:
    """Global L2 norm ``f32[]`` of every entry of every leaf of ``tree`` (0 for no leaves)."""
    leaves = jax.tree_util.tree_leaves(tree)
    if not leaves:
        return jnp.zeros((), jnp.float32)
    # at least float32: a bfloat16 sum of squares over a layer loses the norm's leading digits
    leaves = [jnp.asarray(leaf) for leaf in leaves]
    squares = [
        jnp.sum(jnp.square(leaf.astype(jnp.promote_types(leaf.dtype, jnp.float32))))
        for leaf in leaves
    ]
    return jnp.sqrt(sum(squares))


def clip_tree(tree: PyTree, clip_norm: jax.Array) -> tuple[PyTree, jax.Array]:
    """Scale the whole ``tree`` into the L2 ball of radius ``clip_norm`` (flat clipping).

    Args:
      tree: a pytree of float arrays (one client's update).
      clip_norm: ``f32[]`` radius C > 0, may be traced.

    Returns:
      ``(clipped_tree, clipped: f32[])``: ``tree * min(1, C / ||tree||)`` and 1.0 if that scale
      was below 1, else 0.0. A zero tree stays zero (no division by zero).
    """
    norm = tree_norm(tree)
    scale = jnp.minimum(1.0, clip_norm / jnp.maximum(norm, jnp.finfo(norm.dtype).tiny))
    clipped = jax.tree.map(lambda leaf: leaf * scale.astype(leaf.dtype), tree)
    return clipped, (norm > clip_norm).astype(jnp.float32)


def clip_tree_per_layer(tree: PyTree, clip_norm: jax.Array) -> tuple[PyTree, jax.Array]:
    """Clip every leaf (layer) of ``tree`` to ``C / sqrt(L)``, L the number of leaves.

    The leaves' norms then add in squares to at most C, so the sensitivity is the same as
    :func:`clip_tree`'s; a layer with a small gradient is not shrunk by a large one elsewhere.

    Args:
      tree: a pytree of float arrays with L >= 1 leaves.
      clip_norm: ``f32[]`` total radius C > 0, may be traced.

    Returns:
      ``(clipped_tree, clipped: f32[])``, ``clipped`` 1.0 if any leaf was clipped, else 0.0.
    """
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    if not leaves:
        return tree, jnp.zeros((), jnp.float32)
    radius = clip_norm / math.sqrt(len(leaves))
    pairs = [clip_to_ball(leaf, radius) for leaf in leaves]
    clipped = jnp.max(jnp.stack([flag.astype(jnp.float32) for _, flag in pairs]))
    return jax.tree_util.tree_unflatten(treedef, [leaf for leaf, _ in pairs]), clipped


def gaussian_noise_tree(key: jax.Array, tree: PyTree, stddev: jax.Array) -> PyTree:
    """``N(0, stddev^2)`` noise shaped (and typed) like ``tree``, one key per leaf.

    The leaf keys are ``jax.random.split(key, number_of_leaves)`` in ``tree_leaves`` order, and
    the noise is ``stddev * standard_normal``, so the same key with ``stddev`` s gives exactly s
    times the noise of ``stddev`` 1.

    Args:
      key: a PRNG key, used once.
      tree: a pytree of float arrays (only shapes and dtypes are read).
      stddev: ``f32[]`` noise standard deviation >= 0, may be traced.
    """
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    if not leaves:
        return tree
    keys = jax.random.split(key, len(leaves))
    normals = [
        private_normals(k, jnp.shape(leaf), jnp.result_type(leaf))
        for k, leaf in zip(keys, leaves, strict=True)
    ]
    # the barrier keeps XLA from fusing the scaling into the sampler's own arithmetic, which it
    # may reassociate (seen on CPU: an ulp off s times the stddev-1 noise under jit)
    normals = jax.lax.optimization_barrier(normals)
    noise = [jnp.asarray(stddev, n.dtype) * n for n in normals]
    return jax.tree_util.tree_unflatten(treedef, noise)
