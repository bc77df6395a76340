"""Clipping: what bounds the sensitivity, counted so nothing is clipped silently."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def clip_to_ball(x: jax.Array, radius: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``x: f32[d]`` scaled into the L2 ball of ``radius``; also 1.0 if it was clipped, else 0.0."""
    norm = jnp.linalg.norm(x)
    scale = jnp.minimum(1.0, radius / jnp.maximum(norm, jnp.finfo(x.dtype).tiny))
    return x * scale, (norm > radius).astype(x.dtype)


def clip_per_example(vectors: jax.Array, radius: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Clip every row of ``vectors: f32[b, d]`` to norm ``radius``; also ``clipped: f32[b]``."""
    return jax.vmap(clip_to_ball, in_axes=(0, None))(vectors, radius)
