"""The two-point mechanism of LDP-FL (seed 002; docs/specs/ldp_fl.md), pure eps-LDP per scalar.

A value ``w`` in ``[c - r, c + r]`` is reported as one of two points

    c + r (e^eps + 1)/(e^eps - 1)   with probability p(w)
    c - r (e^eps + 1)/(e^eps - 1)   otherwise,

    p(w) = ((w - c)(e^eps - 1) + r (e^eps + 1)) / (2 r (e^eps + 1)).

The probability of the high point lies in [1/(e^eps + 1), e^eps/(e^eps + 1)], so any two inputs
give output probabilities within a factor e^eps: eps-LDP. ``E[w*] = w`` and
``Var[w*] = r^2 ((e^eps + 1)/(e^eps - 1))^2 - (w - c)^2``.

Sampling is exact at every eps: the high point is reported when a 64-bit uniform integer falls
below a 64-bit threshold (:mod:`jfed._random`), and every threshold is kept inside
``[G, 2^64 - G]`` with ``G / 2^64 >= 1/(e^eps + 1)`` (:func:`jfed._random.floor_threshold`), so
the realised ratio of any output's probabilities under two inputs is at most e^eps exactly. (A
comparison ``uniform(f32) < p`` resolves probabilities only to 2^-23: above eps of about 16 the low
probability rounds to 0 and the ratio is unbounded.) The probabilities are exact to about
``(64 + eps) 2^-21`` relative up to eps of about 27 and never fall below 2^-64 beyond.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jfed import _random
from jfed._validation import check_positive


def _checked(name: str, value):
    """Host values are checked; traced values (a sweep's eps) are the caller's to check."""
    return check_positive(name, value) if isinstance(value, int | float) else value


def high_probability(w: jax.Array, center, radius, epsilon) -> jax.Array:
    """Probability of reporting the high point for ``w`` (clipped to the range first), in the
    stable form ``(1 + tanh(eps/2) (w - c)/r) / 2`` (finite at every eps; near 0 it is limited by
    f32 absolute resolution: :func:`high_threshold` is what sampling uses)."""
    slope = jnp.tanh(jnp.asarray(epsilon, jnp.float32) / 2.0)
    w = jnp.clip(w, center - radius, center + radius)
    return 0.5 + 0.5 * slope * (w - center) / radius


def output_points(center, radius, epsilon) -> tuple[jax.Array, jax.Array]:
    """``(low, high)``: the two reportable values, ``c -+ r (e^eps + 1)/(e^eps - 1)``."""
    # (e^eps + 1)/(e^eps - 1) is exactly 1 in f32 from eps = 17 on; capping eps keeps it finite
    capped = jnp.minimum(jnp.asarray(epsilon, jnp.float32), 80.0)
    spread = radius * (jnp.exp(capped) + 1.0) / jnp.expm1(capped)
    return center - spread, center + spread


def high_threshold(w: jax.Array, center, radius, epsilon) -> tuple[jax.Array, jax.Array]:
    """The 64-bit threshold ``T(w)`` (``(high, low)`` words): the high point is reported with
    probability exactly ``T(w) / 2^64``, inside ``[G, 2^64 - G]`` (G from
    :func:`jfed._random.floor_threshold`).

    With ``g = 1/(e^eps + 1)`` and ``s = tanh(eps/2)``, ``p(w) = g + s (w - c + r)/(2r)`` and
    ``1 - p(w) = g + s (c + r - w)/(2r)``: the smaller of the two is computed in f32 from its own
    side (relative accuracy, no cancellation) and the larger is ``2^64`` minus it."""
    epsilon = jnp.asarray(epsilon, jnp.float32)
    floor = _random.floor_threshold(epsilon)
    slope = jnp.tanh(epsilon / 2.0)
    w = jnp.clip(w, center - radius, center + radius)
    floor_scaled = jnp.exp(np.float32(_random.LOG_TWO_64) - jax.nn.softplus(epsilon))
    span = np.float32(_random.TWO_64) * slope / (2.0 * radius)
    high_side = floor_scaled + span * (w - (center - radius))
    low_side = floor_scaled + span * ((center + radius) - w)
    smaller = _random.threshold_clip(
        _random.threshold_floor(jnp.minimum(high_side, low_side)), floor, _random.HALF
    )
    complement = _random.threshold_complement(smaller)
    high_is_smaller = high_side <= low_side
    return (
        jnp.where(high_is_smaller, smaller[0], complement[0]),
        jnp.where(high_is_smaller, smaller[1], complement[1]),
    )


def perturb(key: jax.Array, w: jax.Array, center, radius, epsilon) -> jax.Array:
    """Report every entry of ``w: f32[...]`` independently with the two-point mechanism.

    ``center``, ``radius`` and ``epsilon`` may be host floats (checked) or traced scalars, and
    ``center`` / ``radius`` may broadcast against ``w`` (a range per position). Each entry reads
    two random words (:func:`jfed._random.bernoulli_words`)."""
    radius, epsilon = _checked("radius", radius), _checked("epsilon", epsilon)
    return perturb_with_words(
        _random.bernoulli_words(key, jnp.shape(w)), w, center, radius, epsilon
    )


def perturb_with_words(
    words: tuple[jax.Array, jax.Array], w: jax.Array, center, radius, epsilon
) -> jax.Array:
    """:func:`perturb` with its random words given: ``words = (high, low): u32[...]`` each."""
    low, high = output_points(center, radius, epsilon)
    up = _random.threshold_less(words, high_threshold(w, center, radius, epsilon))
    return jnp.where(up, high, low).astype(jnp.float32)


def variance(w: float, center: float, radius: float, epsilon: float) -> float:
    """``Var[w*] = r^2 ((e^eps + 1)/(e^eps - 1))^2 - (w - c)^2``."""
    ratio = 1.0 / np.tanh(epsilon / 2.0)  # (e^eps + 1)/(e^eps - 1), finite at every eps
    return float(radius**2 * ratio**2 - (w - center) ** 2)
