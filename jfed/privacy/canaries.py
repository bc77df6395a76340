"""Canary clients for an empirical privacy audit inside a run: their updates and their scores.

A canary is a client whose update is a fixed random direction in model space, known to the
auditor and to nobody else's data: ``clip_norm * u_i`` with ``u_i`` uniform on the unit sphere
of the model's parameter space (a pytree shaped like the model's update, unit in the global L2
norm over all its leaves). It goes through the same clipping, sampling and noise as a real
client, so how visible it is in what the server releases measures the privacy of the release:

- **one-run auditing** (Steinke, Nasr and Jagielski 2023): each canary is included with
  probability 1/2 (:func:`canary_included`, a key of its own per canary); the auditor ranks the
  canaries by their score and guesses "included" for the top ones; the number of right guesses
  gives an eps lower bound at a stated confidence
  (:func:`jfed.privacy.canary_audit.one_run_lower_bound`).
- **one-shot estimation** (Andrew et al. 2024): every canary is included; the cosines of the
  canary directions with the released model delta are compared with those of directions never
  inserted (or with their law, ``N(0, 1/d)``), which gives an eps estimate
  (:func:`jfed.privacy.canary_audit.one_shot_estimate`).

What the auditor observes decides the score (the threat model):

================  ===========================================  =================================
observation       one-run (Steinke et al.)                     one-shot (Andrew et al.)
================  ===========================================  =================================
final model       ``<u_i, w_T - w_0>`` (:func:`inner_products`)  ``cos(u_i, w_T - w_0)``
                                                                (:func:`cosines`)
every round       ``sum_t <u_i, Delta_t>`` (``inner_product_sum``  ``max_t cos(u_i, Delta_t)``
                  of :class:`CanaryScores`)                     (``max_cosine``)
================  ===========================================  =================================

``Delta_t`` is what round t releases (the noised aggregate, or the model delta
``w_{t+1} - w_t``); a canary's update enters it with a positive sign (jfed's client updates are
``w_k - w_t``). Inner products and cosines rank canaries alike within one release (they differ
by the common factor ``||Delta||``).

Every function here is pure and jittable (the scoring functions are jitted already: scoring
draws every direction again, a program worth compiling once). A canary is addressed by
``(key, canary_id)``: its direction and its inclusion bit are two named streams of the audit's
key folded with the id, so they do not depend on how many canaries there are, on the batching,
or on each other; the audit's key is one of its own (a run's real clients never see it).

References:
  T. Steinke, M. Nasr, M. Jagielski. Privacy auditing with one (1) training run. NeurIPS 2023.
  G. Andrew, P. Kairouz, S. Oh, A. Oprea, H. B. McMahan, V. Suriyakumar. One-shot empirical
  privacy estimation for federated learning. ICLR 2024.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jfed import random as jfed_random
from jfed.privacy.privatizers import tree_norm

PyTree = Any

DIRECTION_STREAM = "canary-direction"
INCLUSION_STREAM = "canary-inclusion"
SCORE_BATCH = 32  # canaries whose directions are drawn at once when scoring (memory: 32 * d)


def _leaf_specs(template: PyTree) -> list[tuple[tuple[int, ...], Any]]:
    """(shape, dtype) of every leaf of ``template`` (arrays or ``jax.ShapeDtypeStruct``)."""
    leaves = jax.tree_util.tree_leaves(template)
    if not leaves:
        raise ValueError("expected a template with at least one array leaf, got none")
    specs = []
    for leaf in leaves:
        dtype = jnp.dtype(leaf.dtype)
        if not jnp.issubdtype(dtype, jnp.floating):
            raise ValueError(f"expected float leaves in the template, got a leaf of {dtype}")
        specs.append((tuple(leaf.shape), dtype))
    return specs


def parameter_count(template: PyTree) -> int:
    """d: the number of entries of every leaf of ``template`` (the dimension canaries live in)."""
    return sum(math.prod(shape) for shape, _ in _leaf_specs(template))


def _flat_direction(key: jax.Array, canary_id: jax.Array | int, dimension: int) -> jax.Array:
    """``f32[d]``: canary ``canary_id``'s unit direction, flat (normalised standard normals)."""
    normals = jfed_random.normal(
        jax.random.fold_in(jfed_random.named(key, DIRECTION_STREAM), canary_id), (dimension,)
    )
    return normals / jnp.linalg.norm(normals)


def _unflatten(flat: jax.Array, template: PyTree) -> PyTree:
    """``flat: f32[d]`` cut into leaves shaped (and typed) as ``template``'s, in leaf order."""
    specs = _leaf_specs(template)
    pieces, start = [], 0
    for shape, dtype in specs:
        size = math.prod(shape)
        pieces.append(flat[start : start + size].reshape(shape).astype(dtype))
        start += size
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(template), pieces)


def _flatten(tree: PyTree) -> jax.Array:
    """Every leaf of ``tree`` raveled and joined in leaf order, as ``f32[d]`` (at least f32)."""
    leaves = [jnp.asarray(leaf) for leaf in jax.tree_util.tree_leaves(tree)]
    return jnp.concatenate(
        [jnp.ravel(leaf).astype(jnp.promote_types(leaf.dtype, jnp.float32)) for leaf in leaves]
    )


def canary_direction(key: jax.Array, canary_id: jax.Array | int, template: PyTree) -> PyTree:
    """Canary ``canary_id``'s direction ``u_i``: uniform on the unit sphere of the parameter space.

    Args:
      key: the audit's key (its own: no other draw of the run uses it).
      canary_id: ``i32[]`` the canary's index (0, 1, ...; may be traced, e.g. under ``vmap``).
      template: a pytree shaped like one client's update (arrays or ``jax.ShapeDtypeStruct``,
        float leaves); only shapes and dtypes are read.

    Returns:
      A pytree like ``template`` of global L2 norm 1 (over all leaves together; up to the
      rounding of the leaves' dtype), the same for the same ``(key, canary_id)`` whatever else
      is drawn.
    """
    flat = _flat_direction(key, canary_id, parameter_count(template))
    return _unflatten(flat, template)


def canary_update(
    key: jax.Array, canary_id: jax.Array | int, template: PyTree, clip_norm: jax.Array | float
) -> PyTree:
    """What canary ``canary_id`` sends: ``clip_norm * u_i`` (:func:`canary_direction`), an update
    whose norm is the clip norm C, so clipping keeps it whole and it moves the sum as far as any
    one client can.

    Args:
      key, canary_id, template: as :func:`canary_direction`.
      clip_norm: ``f32[]`` C > 0 (may be traced: an adaptive clip norm of the round).
    """
    direction = canary_direction(key, canary_id, template)
    return jax.tree.map(lambda leaf: leaf * jnp.asarray(clip_norm, leaf.dtype), direction)


def canary_included(key: jax.Array, canary_id: jax.Array | int) -> jax.Array:
    """``bool[]``: whether canary ``canary_id`` takes part (probability 1/2, a key of its own:
    the inclusion stream of ``key`` folded with the id, independent of its direction)."""
    stream = jax.random.fold_in(jfed_random.named(key, INCLUSION_STREAM), canary_id)
    return jfed_random.uniform(stream) < 0.5


@functools.partial(jax.jit, static_argnames=("count",))
def canaries_included(key: jax.Array, count: int) -> jax.Array:
    """``bool[count]``: :func:`canary_included` of canaries ``0 .. count - 1``."""
    return jax.vmap(lambda i: canary_included(key, i))(jnp.arange(count, dtype=jnp.int32))


@jax.jit
def inner_products(key: jax.Array, canary_ids: jax.Array, released: PyTree) -> jax.Array:
    """``f32[M]``: ``<u_i, released>`` for the canaries ``canary_ids: i32[M]``.

    Directions are drawn again here (``SCORE_BATCH`` canaries at a time, never all ``M x d`` at
    once), from the same ``key`` the canaries' updates were drawn from.

    Args:
      key: the audit's key.
      canary_ids: ``i32[M]`` the canaries to score (ids never inserted give the null's scores).
      released: a pytree like the update: what the server released (the noised sum of a round,
        or the model delta ``w_T - w_0``).
    """
    flat = _flatten(released)
    dimension = flat.shape[0]

    def score(canary_id):
        return jnp.dot(_flat_direction(key, canary_id, dimension), flat)

    ids = jnp.asarray(canary_ids, jnp.int32)
    return jax.lax.map(score, ids, batch_size=min(SCORE_BATCH, max(int(ids.shape[0]), 1)))


def _as_cosines(products: jax.Array, released: PyTree) -> jax.Array:
    """``products / ||released||``; 0 for a zero release (it carries no evidence either way)."""
    norm = tree_norm(released)
    return jnp.where(norm > 0, products / jnp.where(norm > 0, norm, 1.0), 0.0)


@jax.jit
def cosines(key: jax.Array, canary_ids: jax.Array, released: PyTree) -> jax.Array:
    """``f32[M]``: ``cos(u_i, released) = <u_i, released> / ||released||`` (0 for a zero
    release). Arguments as :func:`inner_products`."""
    return _as_cosines(inner_products(key, canary_ids, released), released)


class CanaryScores(NamedTuple):
    """The canaries' scores accumulated over the rounds an auditor observes.

    Attributes:
      inner_product_sum: ``f32[M]`` ``sum_t <u_i, Delta_t>``: one-run auditing's score when every
        round's release is observed (white box).
      max_cosine: ``f32[M]`` ``max_t cos(u_i, Delta_t)``: one-shot estimation's score when every
        round's release is observed (starts at -1, the smallest cosine).
      rounds: ``i32[]`` rounds accumulated.
    """

    inner_product_sum: jax.Array
    max_cosine: jax.Array
    rounds: jax.Array


def init_scores(count: int) -> CanaryScores:
    """Scores of ``count`` canaries before any round."""
    return CanaryScores(
        inner_product_sum=jnp.zeros((count,), jnp.float32),
        max_cosine=jnp.full((count,), -1.0, jnp.float32),
        rounds=jnp.zeros((), jnp.int32),
    )


@jax.jit
def update_scores(
    scores: CanaryScores, key: jax.Array, canary_ids: jax.Array, released: PyTree
) -> CanaryScores:
    """The scores after one more round whose release is ``released`` (a pytree like the update).

    Args:
      scores: the scores so far, ``M`` canaries.
      key: the audit's key.
      canary_ids: ``i32[M]`` the ids the scores belong to (the same every round).
      released: this round's release ``Delta_t``.
    """
    products = inner_products(key, canary_ids, released)
    return CanaryScores(
        inner_product_sum=scores.inner_product_sum + products,
        max_cosine=jnp.maximum(scores.max_cosine, _as_cosines(products, released)),
        rounds=scores.rounds + 1,
    )


__all__ = [
    "CanaryScores",
    "canaries_included",
    "canary_direction",
    "canary_included",
    "canary_update",
    "cosines",
    "init_scores",
    "inner_products",
    "parameter_count",
    "update_scores",
]
