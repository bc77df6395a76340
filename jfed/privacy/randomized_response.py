"""Binary randomized response, exact at every eps: pure eps-LDP per reported bit.

A bit is reported as it is with probability ``e^eps / (e^eps + 1)`` and flipped otherwise, so
under any two inputs each report's probabilities differ by at most ``e^eps`` (adjacency: any two
bits; unit: one report). The flip is drawn as ``U < G`` on a 64-bit uniform integer with a 64-bit
threshold ``G >= 2^64 / (e^eps + 1)`` (:func:`jfed._random.floor_threshold`): the realised ratio
never exceeds e^eps, at any eps. (``uniform(f32) < e^eps / (e^eps + 1)`` is exact only to 2^-23:
above eps of about 16 the truthful probability rounds to 1 and the bit is never flipped.)
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jfed import _random
from jfed._validation import check_positive


def truthful_probability(epsilon: float) -> float:
    """Host: ``e^eps / (e^eps + 1)`` in float64 (no overflow at any eps)."""
    return 1.0 / (1.0 + math.exp(-check_positive("epsilon", epsilon)))


def flip_noise(epsilon: float) -> float:
    """Host: ``2 / (e^eps + 1)``, dp-accounting's randomized-response noise parameter (the
    probability of a uniform report) for one binary report of likelihood ratio e^eps, without
    overflow at any eps."""
    tail = math.exp(-check_positive("epsilon", epsilon))
    return 2.0 * tail / (1.0 + tail)


def report_event(epsilon: float):
    """The ``dp_accounting`` event of one binary report of likelihood ratio e^eps (randomized
    response; also the two-point mechanism's): ``RandomizedResponseDpEvent(2/(e^eps + 1), 2)``."""
    import dp_accounting

    return dp_accounting.RandomizedResponseDpEvent(flip_noise(epsilon), 2)


def flip_threshold(epsilon: jax.Array | float) -> tuple[jax.Array, jax.Array]:
    """The 64-bit threshold ``G`` of a flip: probability ``G / 2^64 >= 1/(e^eps + 1)``, exact to
    ``(16 + eps) 2^-21`` relative up to eps of about 27 (:func:`jfed._random.floor_threshold`)."""
    return _random.floor_threshold(epsilon)


def flip_threshold_from_truthful(truthful: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The flip threshold for a caller that holds only ``truthful``, the f32 rounding (to
    nearest) of ``e^eps / (e^eps + 1)``.

    For ``truthful`` in ``[1/2, 1]`` the exact value lies within half an ulp (``2^-25``) of it
    (plus the float64 error of the host's e^eps / (e^eps + 1), far below), so a flip probability
    of ``1 - truthful + 2^-24`` is at least the exact ``1/(e^eps + 1)``: the ratio stays below
    e^eps, with at most ``3 2^-25`` more flips than needed (above eps of about 16.6, where
    ``truthful`` is 1, the report is in fact ``ln(2^24 - 1) = 16.6``-LDP). ``(1 - truthful)
    2^64 + 2^40`` is exact in f32 (a multiple of 2^40 below 2^63)."""
    truthful = jnp.asarray(truthful, jnp.float32)
    scaled = (1.0 - truthful) * np.float32(_random.TWO_64) + np.float32(2.0**40)
    return _random.threshold_clip(_random.threshold_floor(scaled), _random.ONE, _random.HALF)


def keeps_true_bit(
    key: jax.Array, epsilon: jax.Array | float, shape: tuple[int, ...] = ()
) -> jax.Array:
    """``bool[*shape]``: whether each report keeps the true bit (probability e^eps/(e^eps + 1))."""
    return _keeps(key, flip_threshold(epsilon), shape)


def keeps_true_bit_given_truthful(
    key: jax.Array, truthful: jax.Array, shape: tuple[int, ...] = ()
) -> jax.Array:
    """:func:`keeps_true_bit` from the f32 ``truthful`` probability instead of eps
    (:func:`flip_threshold_from_truthful`). It decides as ``uniform(key) < truthful`` except in
    the one 2^-23-wide cell of the uniform that holds ``truthful``."""
    return _keeps(key, flip_threshold_from_truthful(truthful), shape)


def _keeps(key, flip, shape):
    keep = _random.threshold_complement(flip)  # the truthful side, 2^64 - G
    return _random.threshold_less(_random.bernoulli_words(key, shape), keep)


def respond(key: jax.Array, bits: jax.Array, epsilon: jax.Array | float) -> jax.Array:
    """The reports ``bool[...]`` of ``bits: bool[...]``, each kept with probability
    ``e^eps / (e^eps + 1)`` and flipped otherwise, independently."""
    bits = jnp.asarray(bits, bool)
    return jnp.where(keeps_true_bit(key, epsilon, bits.shape), bits, ~bits)
