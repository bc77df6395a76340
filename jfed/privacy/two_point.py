"""The two-point mechanism of LDP-FL (seed 002; docs/specs/ldp_fl.md), pure eps-LDP per scalar.

A value ``w`` in ``[c - r, c + r]`` is reported as one of two points

    c + r (e^eps + 1)/(e^eps - 1)   with probability p(w)
    c - r (e^eps + 1)/(e^eps - 1)   otherwise,

    p(w) = ((w - c)(e^eps - 1) + r (e^eps + 1)) / (2 r (e^eps + 1)).

The probability of the high point lies in [1/(e^eps + 1), e^eps/(e^eps + 1)], so any two inputs
give output probabilities within a factor e^eps: eps-LDP. ``E[w*] = w`` and
``Var[w*] = r^2 ((e^eps + 1)/(e^eps - 1))^2 - (w - c)^2``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jfed._validation import check_positive


def _checked(name: str, value):
    """Host values are checked; traced values (a sweep's eps) are the caller's to check."""
    return check_positive(name, value) if isinstance(value, int | float) else value


def high_probability(w: jax.Array, center, radius, epsilon) -> jax.Array:
    """Probability of reporting the high point for ``w`` (clipped to the range first)."""
    e = jnp.exp(epsilon)
    w = jnp.clip(w, center - radius, center + radius)
    return ((w - center) * (e - 1.0) + radius * (e + 1.0)) / (2.0 * radius * (e + 1.0))


def output_points(center, radius, epsilon) -> tuple[jax.Array, jax.Array]:
    """``(low, high)``: the two reportable values."""
    spread = radius * (jnp.exp(epsilon) + 1.0) / jnp.expm1(epsilon)
    return center - spread, center + spread


def perturb(key: jax.Array, w: jax.Array, center, radius, epsilon) -> jax.Array:
    """Report every entry of ``w: f32[...]`` independently with the two-point mechanism.

    ``center``, ``radius`` and ``epsilon`` may be host floats (checked) or traced scalars, and
    ``center`` / ``radius`` may broadcast against ``w`` (a range per position)."""
    radius, epsilon = _checked("radius", radius), _checked("epsilon", epsilon)
    low, high = output_points(center, radius, epsilon)
    up = jax.random.uniform(key, jnp.shape(w)) < high_probability(w, center, radius, epsilon)
    return jnp.where(up, high, low).astype(jnp.float32)


def variance(w: float, center: float, radius: float, epsilon: float) -> float:
    """``Var[w*] = r^2 ((e^eps + 1)/(e^eps - 1))^2 - (w - c)^2``."""
    ratio = (np.exp(epsilon) + 1.0) / np.expm1(epsilon)
    return float(radius**2 * ratio**2 - (w - center) ** 2)
