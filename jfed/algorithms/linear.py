"""Pieces shared by the linear-regression algorithms: projection, second moments, R^2."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jfed.privacy.clipping import clip_to_ball


class SecondMoments(NamedTuple):
    """Additive sufficient statistics of a set of messages ``(z_i, y_i)``.

    Attributes:
      zz: ``f32[d, d]``, ``sum_i z_i z_i^T``.
      zy: ``f32[d]``, ``sum_i z_i y_i``.
      count: ``f32[]``, number of clients.
      clipped: ``f32[]``, number of clients whose input was clipped.
    """

    zz: jax.Array
    zy: jax.Array
    count: jax.Array  # type: ignore[assignment]  # the statistic's name; shadows tuple.count
    clipped: jax.Array


def second_moments(messages: tuple[jax.Array, jax.Array, jax.Array], weights: jax.Array):
    """Engine statistic for messages ``(z: f32[c, d], y: f32[c], clipped: f32[c])`` of a chunk."""
    z, y, clipped = messages
    # HIGHEST keeps f32 matmuls in f32 on accelerators whose default is a reduced precision.
    zz = jnp.matmul(z.T, z, precision=lax.Precision.HIGHEST)
    zy = jnp.matmul(z.T, y, precision=lax.Precision.HIGHEST)
    return SecondMoments(zz, zy, jnp.sum(weights), jnp.sum(clipped))


def project_to_ball(theta: jax.Array, radius: jax.Array) -> jax.Array:
    """Euclidean projection of ``theta: f32[d]`` onto ``{||theta|| <= radius}``."""
    return clip_to_ball(theta, radius)[0]


def psd_part(matrix: jax.Array) -> jax.Array:
    """The PSD part of a symmetric ``f32[d, d]``: negative eigenvalues set to zero."""
    eigenvalues, eigenvectors = jnp.linalg.eigh(matrix)
    return (eigenvectors * jnp.maximum(eigenvalues, 0.0)) @ eigenvectors.T


def r2_score(theta: np.ndarray, features: np.ndarray, targets: np.ndarray) -> float:
    """Coefficient of determination of ``X @ theta`` on ``(X: f[n, d], y: f[n])``, in float64.

    ``1 - sum (y - X theta)^2 / sum (y - mean y)^2``; NaN parameters give NaN.
    """
    theta = np.asarray(theta, np.float64)
    residual = targets - features @ theta
    total = targets - targets.mean()
    return float(1.0 - residual @ residual / (total @ total))


def r2_curve(thetas: np.ndarray, features: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """R^2 of every row of ``thetas: f[T, d]`` (a convergence curve), float64 ``[T]``."""
    return np.array([r2_score(theta, features, targets) for theta in np.asarray(thetas)])
