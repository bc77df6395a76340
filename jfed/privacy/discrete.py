"""Exact discrete noise on device: integer arithmetic only, inside a jitted program.

The discrete Laplace and discrete Gaussian samplers of Canonne, Kamath and Steinke (2020, "The
Discrete Gaussian for Differential Privacy", Algorithms 1-3), vectorised: every coordinate is a
lane of one flat state machine run by a ``lax.while_loop`` until every lane has its draw. Every
probability the machine uses is a ratio of two ``uint32`` integers, decided exactly by comparing
it with uniform random bits (:func:`bernoulli_fraction`); there is no float anywhere in the
sampling, so the law of a draw is the mathematical one and does not depend on the backend.

What "exact" excludes, stated once:

- The int32 range. A Laplace candidate ``U + t V`` whose geometric part would leave int32 is
  redrawn (``V <= V_max = (2^31 - 1) // t - 1``): the output law is the exact law conditioned on
  an event of probability at least ``1 - 2 e^-V_max``. The discrete Gaussian's ``t`` is at most
  2^16 (``sigma^2 < 2^31``), so ``V_max >= 32,766`` and the conditioning moves any probability
  by less than ``2 e^-32766`` (about 10^-14230); the discrete Laplace's ``t = 2^20`` gives
  ``2 e^-2046`` (10^-888). :func:`int32_conditioning_mass` returns the bound, for a guarantee
  to add to its delta.
- Randomized rounding (:func:`randomized_round`) compares 24 random bits with the fractional part
  of a float32, so ``E[round(x)] - x`` lies in ``[0, 2^-24)`` (0 where ``x`` is a multiple of
  ``2^-24``); privacy never rests on it: the norm of a rounded vector is checked exactly in
  integers (:func:`squared_norm_at_most`, :func:`conditional_round`).

Parameters of the samplers (the Laplace proposal's scale numerator is a power of two, ``t =
2^k``, so its uniform draw is ``k`` random bits):

- discrete Laplace: ``P(x) ∝ exp(-|x| s / 2^k)`` for integers ``k`` and ``s >= 1``;
  :func:`discrete_laplace`, :func:`discrete_laplace_parameters`.
- discrete Gaussian ``N_Z(0, sigma^2)``: ``P(x) ∝ exp(-x^2 / (2 sigma^2))`` with
  ``sigma^2 = 2^k m`` for an integer ``m >= 1`` and ``sigma^2 < 2^31`` (the proposal's scale
  divides ``sigma^2``, so every acceptance probability is a ratio of integers);
  :func:`discrete_gaussian_parameters` turns a least variance into ``(k, m)``, on the host or on
  device, identically (the variance it gives exceeds the least one by less than ``sqrt 2``
  sigma).

The samplers run the machine's law in rounds (:func:`_round`) that settle a whole run of
Algorithm 1 from one 32-bit word where its thresholds are rationals (the Laplace proposal's U,
and every run at gamma = 1), two words per lane per run; a discrete Gaussian draw takes about 7
runs on average. Lanes run in blocks of at most 2^17, all of a block for a few rounds, then only
the pending ones in shrinking buffers (:func:`_schedule`). A word that ties with a non-dyadic
threshold (one in 2^32) makes its block run again from the same words with the tie settled by
fresh bits, so every draw has the exact law. :func:`bernoulli_exp` runs the step machine
(:func:`_run_machine`). ``bench/discrete_noise.py`` times the samplers against float normals.

References: C. Canonne, G. Kamath, T. Steinke, "The Discrete Gaussian for Differential Privacy",
NeurIPS 2020; P. Kairouz, Z. Liu, T. Steinke, "The Distributed Discrete Gaussian Mechanism for
Federated Learning with Secure Aggregation", ICML 2021 (conditional randomized rounding).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

U32 = jnp.uint32
INT32_LIMIT = 2**31 - 1
SIGMA_SQUARED_LIMIT = 2**31 - 1
"""``sigma^2 = t m`` of the discrete Gaussian must stay below this (``2 sigma^2`` is a uint32)."""

_MASK16 = np.uint32(0xFFFF)
_ALL_ONES = np.uint32(0xFFFFFFFF)

# phases of the sampling machine
_DRAW, _ACCEPT_U, _GEOMETRIC, _ACCEPT_GAUSSIAN, _DONE, _REJECTED = 0, 1, 2, 3, 4, 5


# ------------------------------------------------------------------------- 64-bit integer pieces


def multiply_wide(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(high, low)``: the exact 64-bit product ``a b = high 2^32 + low`` of ``uint32`` arrays
    (16-bit limbs, so no partial product overflows)."""
    a, b = jnp.asarray(a, U32), jnp.asarray(b, U32)
    a0, a1 = a & _MASK16, a >> 16
    b0, b1 = b & _MASK16, b >> 16
    low_low, cross_1, cross_2, high_high = a0 * b0, a1 * b0, a0 * b1, a1 * b1
    middle = (low_low >> 16) + (cross_1 & _MASK16) + (cross_2 & _MASK16)  # < 3 * 2^16
    high = high_high + (cross_1 >> 16) + (cross_2 >> 16) + (middle >> 16)
    return high, a * b


def _add_wide(
    high: jax.Array, low: jax.Array, other_high: jax.Array, other_low: jax.Array
) -> tuple[jax.Array, jax.Array]:
    low_sum = low + other_low
    return high + other_high + (low_sum < low).astype(U32), low_sum


def exact_sum(values: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(high, low)``: the exact sum of ``values: u32[n]`` (n <= 2^31) as ``high 2^32 + low``.

    Every reduction sums numbers small enough that no ``uint32`` partial sum can overflow, in any
    order XLA chooses: the 16-bit halves of the values in blocks of 2^15, then the 16-bit halves
    of the block sums (at most 2^16 blocks)."""
    values = jnp.ravel(jnp.asarray(values, U32))
    size = values.shape[0]
    block = max(1, min(2**15, size))
    padded = -(-size // block) * block
    blocks = jnp.pad(values, (0, padded - size)).reshape(-1, block)
    low_halves = jnp.sum(blocks & _MASK16, axis=1, dtype=U32)  # < 2^31 each
    high_halves = jnp.sum(blocks >> 16, axis=1, dtype=U32)
    a_low = jnp.sum(low_halves & _MASK16, dtype=U32)  # < 2^32: at most 2^16 blocks
    a_high = jnp.sum(low_halves >> 16, dtype=U32)
    b_low = jnp.sum(high_halves & _MASK16, dtype=U32)
    b_high = jnp.sum(high_halves >> 16, dtype=U32)
    # total = a_low + 2^16 (a_high + b_low) + 2^32 b_high
    middle = a_high + b_low
    carry = (middle < a_high).astype(U32)
    high = b_high + (middle >> 16) + (carry << 16)
    return _add_wide(high, middle << 16, jnp.zeros((), U32), a_low)


def _at_most(high: jax.Array, low: jax.Array, bound: int) -> jax.Array:
    """``high 2^32 + low <= bound`` for a Python integer ``0 <= bound < 2^64``."""
    bound_high, bound_low = np.uint32(bound >> 32), np.uint32(bound & 0xFFFFFFFF)
    return (high < bound_high) | ((high == bound_high) & (low <= bound_low))


def squared_norm_at_most(vector: jax.Array, bound: int) -> jax.Array:
    """``bool[]``: whether ``||vector||_2^2 <= bound``, decided exactly for ``vector: i32[...]``
    (``|x| < 2^31``) and a Python integer ``0 <= bound < 2^64``."""
    magnitude = jnp.abs(jnp.ravel(vector)).astype(U32)
    square_high, square_low = multiply_wide(magnitude, magnitude)
    low_high, low_low = exact_sum(square_low)
    high_high, high_low = exact_sum(square_high)
    # sum = low_low + 2^32 (low_high + high_low) + 2^64 high_high
    middle = low_high + high_low
    fits = (high_high == 0) & (middle >= low_high)
    return fits & _at_most(middle, low_low, bound)


def absolute_sum_at_most(vector: jax.Array, bound: int) -> jax.Array:
    """``bool[]``: whether ``||vector||_1 <= bound``, exactly, for ``vector: i32[...]``."""
    high, low = exact_sum(jnp.abs(jnp.ravel(vector)).astype(U32))
    return _at_most(high, low, bound)


# ---------------------------------------------------------------------------- exact Bernoullis


def _words(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    return jax.random.bits(key, shape, U32)


def _fraction_from_word(word, numerator, denominator):
    """One 32-bit word's verdict on ``U < numerator / denominator``: ``(below, tie,
    next_numerator)``; where ``tie``, the answer is Bernoulli(next_numerator / denominator) of
    the next bits (see :func:`bernoulli_fraction`)."""
    high, low = multiply_wide(word, denominator)
    below = (high + 1 < numerator) | (
        (high + 1 == numerator) & (low <= (_ALL_ONES - denominator) + 1)
    )
    tie = (high + 1 == numerator) & ~below
    return below, tie, U32(0) - low


def _bernoulli_from_word(key, word, numerator, denominator):
    """Bernoulli(numerator / denominator) whose first 32 bits are ``word`` (drawn by the caller);
    the rare ties (one word in 2^32) continue on fresh words from ``key``."""
    below, tie, numerator = _fraction_from_word(word, numerator, denominator)
    return _settled(key, numerator, denominator, below, tie)


def _settled(key, numerator, denominator, below, tie):
    """``below`` where no word tied; each ``tie`` settled as Bernoulli(numerator / denominator)
    of fresh words from ``key`` (the tied word's continuation, :func:`_fraction_from_word`), by a
    loop that runs only while some lane is tied."""

    def body(state):
        turn, numerator, result, pending = state
        word = _words(jax.random.fold_in(key, turn), numerator.shape)
        below, tie, numerator_next = _fraction_from_word(word, numerator, denominator)
        result = jnp.where(pending & below, True, result)
        return turn + 1, jnp.where(tie, numerator_next, numerator), result, pending & tie

    state = (0, numerator, below, tie)
    return lax.while_loop(lambda s: jnp.any(s[3]), body, state)[2]


def bernoulli_fraction(key: jax.Array, numerator: jax.Array, denominator: jax.Array) -> jax.Array:
    """``bool[...]``: Bernoulli(numerator / denominator), exactly (``uint32``, ``0 <= numerator``,
    ``1 <= denominator``; a numerator >= the denominator gives True: the word always decides).

    A uniform ``U`` in [0, 1) is read 32 bits at a time: with the word ``W``, ``U den`` lies in
    ``[h + l / 2^32, h + (l + den) / 2^32)`` where ``W den = h 2^32 + l``, which decides
    ``U den < num`` unless ``h = num - 1`` and ``l + den > 2^32`` (one word in 2^32); then the
    answer is ``V < (2^32 - l) / den`` for the next bits ``V``, a fresh Bernoulli of the same
    form, drawn by a loop that runs only while some lane is tied."""
    numerator, denominator = jnp.broadcast_arrays(
        jnp.asarray(numerator, U32), jnp.asarray(denominator, U32)
    )
    first, rest = jax.random.split(key)
    return _bernoulli_from_word(rest, _words(first, numerator.shape), numerator, denominator)


def _top_bits(word: jax.Array, bits: Any) -> jax.Array:
    """The top ``bits`` bits of ``word`` (0 <= bits <= 31): uniform on ``[0, 2^bits)``."""
    bits = jnp.asarray(bits, U32)
    return jnp.where(bits == 0, U32(0), word >> jnp.where(bits == 0, U32(1), U32(32) - bits))


# ----------------------------------------------------------------------------- the machine


def _odd(value: jax.Array) -> jax.Array:
    return (value & 1) == 1


def _piece(units_left: jax.Array, magnitude: jax.Array, denominator: jax.Array):
    """The next piece of ``exp(-units magnitude / den)``: ``units`` taken (as many as keep
    ``units * magnitude < 2^32``), the units left, the piece's whole part (a count of
    ``exp(-1)`` runs) and its remainder (numerator over ``den``)."""
    per_piece = _ALL_ONES // jnp.maximum(magnitude, 1)
    units = jnp.minimum(per_piece, units_left)
    numerator = units * magnitude
    return units_left - units, numerator // denominator, numerator % denominator


class _Machine(NamedTuple):
    """What one sampler runs: ``k`` (the Laplace proposal's scale numerator is ``t = 2^k``, so
    its uniform ``U`` is ``k`` random bits), ``s`` (the scale's denominator), ``m``
    (``sigma^2 / t``), whether candidates go through the Gaussian acceptance, and whether the
    machine only judges (``bernoulli_exp``). Numbers may be traced; the flags are static."""

    scale_bits: Any
    divisor: Any
    quotient: Any
    gaussian: bool
    judge_only: bool = False


def _step(machine: _Machine, key: jax.Array, s: dict) -> dict:
    """One step of every lane (Canonne, Kamath and Steinke's Algorithms 1-3 as one machine)."""
    laplace_scale = U32(1) << jnp.asarray(machine.scale_bits, U32)
    divisor, quotient = jnp.asarray(machine.divisor, U32), jnp.asarray(machine.quotient, U32)
    phase, trials = s["phase"], s["trials"]
    shape = phase.shape
    words = _words(key, (3, *shape))
    rest = jax.random.split(jax.random.fold_in(key, 1), 1)

    # one Bernoulli(gamma / K) per step, as Bernoulli(gamma) and Bernoulli(1 / K)
    whole_runs = s["whole_runs"] > 0
    in_u, in_geometric = phase == _ACCEPT_U, phase == _GEOMETRIC
    one = jnp.ones(shape, U32)
    gamma_numerator = jnp.where(in_u, s["u"], jnp.where(whole_runs, one, s["remainder"]))
    gamma_denominator = jnp.where(in_u, laplace_scale, jnp.where(whole_runs, one, s["denominator"]))
    gamma_numerator = jnp.where(in_geometric, one, gamma_numerator)
    gamma_denominator = jnp.where(in_geometric, one, gamma_denominator)
    both = _bernoulli_from_word(
        rest[0],
        words[:2],
        jnp.stack([gamma_numerator, one]),
        jnp.stack([gamma_denominator, trials]),
    )
    step = both[0] & both[1]
    run_over = ~step  # a run of Algorithm 1 ends, returning "K is odd"
    run_true = run_over & _odd(trials)
    trials = jnp.where(step, trials + 1, U32(1))

    # _DRAW: a uniform U in [0, t) and a sign
    drawing = phase == _DRAW
    u = jnp.where(drawing, _top_bits(words[2], machine.scale_bits), s["u"])
    sign = jnp.where(drawing, (words[2] & 1) == 1, s["sign"])
    geometric = jnp.where(drawing, U32(0), s["geometric"])
    trials = jnp.where(drawing, U32(1), trials)  # Algorithm 1 starts at K = 1
    next_phase = jnp.where(drawing, _ACCEPT_U, phase)

    # _ACCEPT_U: Bernoulli(exp(-U / t)) keeps U, else a new U
    accepting_u = in_u & run_over
    next_phase = jnp.where(accepting_u, jnp.where(run_true, _GEOMETRIC, _DRAW), next_phase)

    # _GEOMETRIC: V counts Bernoulli(exp(-1)) successes before the first failure
    counting = in_geometric & run_over
    success = counting & run_true
    geometric = jnp.where(success, geometric + 1, geometric)
    too_far = success & (geometric > U32(INT32_LIMIT) // laplace_scale - 1)  # leaves int32
    finished = counting & ~run_true
    magnitude = (u + laplace_scale * geometric) // divisor
    rejected_zero = finished & sign & (magnitude == 0)  # -0 is redrawn (Algorithm 2)
    signed = magnitude.astype(jnp.int32)
    emitted = finished & ~rejected_zero
    value = jnp.where(emitted, jnp.where(sign, -signed, signed), s["value"])
    next_phase = jnp.where(too_far | rejected_zero, _DRAW, next_phase)

    units_left, whole, remainder = s["units_left"], s["whole_runs"], s["remainder"]
    magnitude_g, denominator = s["magnitude"], s["denominator"]
    if machine.gaussian:
        # Algorithm 3 accepts Y with probability exp(-(|Y| - sigma^2 / t)^2 / (2 sigma^2))
        # = exp(-c^2 / (2 t m)) for c = | |Y| - m |, decided in pieces u c / (2 t m)
        c = jnp.abs(jnp.abs(value) - quotient.astype(jnp.int32)).astype(U32)
        gaussian_denominator = 2 * laplace_scale * quotient  # 2 sigma^2 < 2^32
        first = _piece(c, c, gaussian_denominator)
        next_phase = jnp.where(emitted, _ACCEPT_GAUSSIAN, next_phase)
        units_left = jnp.where(emitted, first[0], units_left)
        whole = jnp.where(emitted, first[1], whole)
        remainder = jnp.where(emitted, first[2], remainder)
        magnitude_g = jnp.where(emitted, c, magnitude_g)
        denominator = jnp.where(emitted, gaussian_denominator, denominator)
    else:
        next_phase = jnp.where(emitted, _DONE, next_phase)

    # _ACCEPT_GAUSSIAN: the runs of exp(-1) (a piece's whole part), then its remainder's run
    judging = (phase == _ACCEPT_GAUSSIAN) & run_over
    failed = judging & ~run_true
    next_phase = jnp.where(failed, _REJECTED if machine.judge_only else _DRAW, next_phase)
    passed = judging & run_true
    whole = jnp.where(passed & whole_runs, whole - 1, whole)
    piece_passed = passed & ~whole_runs
    next_phase = jnp.where(piece_passed & (units_left == 0), _DONE, next_phase)
    more = piece_passed & (units_left > 0)
    following = _piece(units_left, magnitude_g, jnp.maximum(denominator, 1))
    units_left = jnp.where(more, following[0], units_left)
    whole = jnp.where(more, following[1], whole)
    remainder = jnp.where(more, following[2], remainder)

    return {
        "phase": jnp.where(phase >= _DONE, phase, next_phase),
        "trials": trials,
        "u": u,
        "sign": sign,
        "geometric": geometric,
        "value": value,
        "units_left": units_left,
        "whole_runs": whole,
        "remainder": remainder,
        "magnitude": magnitude_g,
        "denominator": denominator,
    }


def _pending(state: dict) -> jax.Array:
    return state["phase"] < _DONE


def _until_done(machine: _Machine, key: jax.Array, state: dict) -> dict:
    """Step every lane until all are done (a ``lax.while_loop``)."""

    def body(carry):
        turn, state = carry
        return turn + 1, _step(machine, jax.random.fold_in(key, turn), state)

    return lax.while_loop(lambda c: jnp.any(_pending(c[1])), body, (0, state))[1]


# Most lanes finish in a few dozen steps (13 on average for the discrete Gaussian); the slowest
# of 10^6 take about 150, and a lane is still pending after t steps with probability about
# exp(-t / 12). So the machine runs all lanes for _FIRST_STEPS steps, then, while some lane is
# pending, moves up to an eighth of the lanes (the pending ones first) into a buffer that runs
# _BUFFER_STEPS steps, and back. Every lane runs the same steps on fresh random words in
# whichever array it is, so the law of every draw is the same; only the work shrinks (3x fewer
# lane-steps for 10^6 draws), with two compiled copies of a step.
_FIRST_STEPS = 32
_BUFFER_STEPS = 16
_BUFFER_FRACTION = 8
_SMALLEST = 4096


def _steps(machine: _Machine, key: jax.Array, state: dict, count: int) -> dict:
    def one(turn, s):
        return _step(machine, jax.random.fold_in(key, turn), s)

    return lax.fori_loop(0, count, one, state)


def _run_machine(machine: _Machine, key: jax.Array, state: dict) -> dict:
    """Run every lane of ``state`` until it is done (``_DONE`` or, judging only, ``_REJECTED``)."""
    flat = jax.tree.map(jnp.ravel, state)
    size = flat["phase"].shape[0]
    first_key, rounds_key = jax.random.split(key)
    if size <= _SMALLEST:
        flat = _until_done(machine, first_key, flat)
    else:
        flat = _steps(machine, first_key, flat, _FIRST_STEPS)
        buffer = size // _BUFFER_FRACTION

        def compacted_round(carry):
            turn, flat = carry
            (slots,) = jnp.nonzero(_pending(flat), size=buffer, fill_value=size)
            lanes = jax.tree.map(lambda x: x.at[slots].get(mode="fill", fill_value=0), flat)
            lanes["phase"] = jnp.where(slots < size, lanes["phase"], _DONE)  # padding idles
            lanes = _steps(machine, jax.random.fold_in(rounds_key, turn), lanes, _BUFFER_STEPS)
            flat = jax.tree.map(lambda x, g: x.at[slots].set(g, mode="drop"), flat, lanes)
            return turn + 1, flat

        flat = lax.while_loop(lambda c: jnp.any(_pending(c[1])), compacted_round, (0, flat))[1]
    return jax.tree.map(lambda x: x.reshape(state["phase"].shape), flat)


def _initial_state(shape: tuple[int, ...], phase: int) -> dict:
    zeros = jnp.zeros(shape, U32)
    return {
        "phase": jnp.full(shape, phase, jnp.int32),
        "trials": jnp.ones(shape, U32),
        "u": zeros,
        "sign": jnp.zeros(shape, bool),
        "geometric": zeros,
        "value": jnp.zeros(shape, jnp.int32),
        "units_left": zeros,
        "whole_runs": zeros,
        "remainder": zeros,
        "magnitude": zeros,
        "denominator": jnp.ones(shape, U32),
    }


# ------------------------------------------------------------------ the sampler's fast schedule
#
# The samplers run the machine's law in rounds that each settle a whole run of Algorithm 1 where
# one 32-bit word can: a run's length K* (the first K with A_K = 0) has P(K* > j) = gamma^j / j!,
# so one uniform G gives it by inversion, K* > j exactly when G < gamma^j / j!. The thresholds
# used are rationals: U / t and U^2 / (2 t^2) for the Laplace proposal's U (powers of two in the
# denominator, t = 2^k, k <= 15: no ties), and 1 / j! for gamma = 1 (j <= 6). Any other run takes
# one Alg-1 step per round (Bernoulli(gamma) and Bernoulli(1 / K) from two words, as the machine).
# A run that is not settled (K* beyond the thresholds) continues at K = j + 1, where the machine
# would be. A round draws two words per lane (the draw's U and sign, or Bernoulli(1 / K); the
# run's word): rather than the machine's three per Algorithm-1 step.
#
# Ties: a word decides ``G < p`` for a non-dyadic p unless it falls in p's cell (2^-32). A round
# is computed first with every tie unresolved; if any lane in it used a tied word (about one
# round in 500 at 10^6 lanes), the round is recomputed from the same words with each tie settled
# by fresh bits (:func:`_bernoulli_from_word`), so the result is always the exact round's.

_ROUND_WORDS = 2
_FACTORIALS = (2, 6, 24, 120, 720)  # j! for j = 2..6: P(K* > j) at gamma = 1
_DYADIC_LIMIT = 15  # U^2 / (2 t^2) has a 32-bit dyadic threshold for k <= 15


def _factorial_threshold(word, factorial: int):
    """``(below, tie)`` of ``G < 1 / factorial`` for the uniform G whose first 32 bits are
    ``word``: below when ``word < floor(2^32 / j!)``; the cell at the threshold ties unless
    ``j!`` divides 2^32 (the word and the next bits decide it, :func:`_fraction_from_word`)."""
    threshold = np.uint32(2**32 // factorial)
    tie = (word == threshold) if 2**32 % factorial else jnp.zeros(word.shape, bool)
    return word < threshold, tie


def _per_piece(magnitude):
    """``u32``: the units of a piece, ``floor((2^32 - 1) / c)`` for ``c >= 2^16`` (then below
    2^16), any value >= ``c`` below (one piece takes all ``c`` units): a float32 estimate within
    one of it, settled by exact products (no integer division)."""
    big = magnitude >= 65536
    estimate = jnp.floor(np.float32(2.0**32) / jnp.maximum(magnitude, 1).astype(jnp.float32))
    estimate = jnp.minimum(estimate, np.float32(65536.0)).astype(U32)

    def fits(units):
        return multiply_wide(units, magnitude)[0] == 0

    exact = jnp.where(
        fits(estimate + 1), estimate + 1, jnp.where(fits(estimate), estimate, estimate - 1)
    )
    return jnp.where(big, exact, _ALL_ONES)


def _settle_run(machine: _Machine, a, b, s, decide):
    """``(state, run_over, run_true, next_trials)``: every lane's current Algorithm-1 run
    settled or stepped, after a ``_DRAW`` lane's draw (from ``a``). ``decide(requests)`` gives
    one ``bool`` array per request ``(word, fraction, used)``: Bernoulli(fraction) read from
    ``word`` (``fraction`` a factorial ``j!`` for ``1 / j!``, or ``(numerator, denominator)``),
    needed where ``used``."""
    scale_bits = jnp.asarray(machine.scale_bits, U32)
    laplace_scale = U32(1) << scale_bits
    phase, trials = s["phase"], s["trials"]
    drawing = phase == _DRAW
    u = jnp.where(drawing, _top_bits(a, scale_bits), s["u"])
    sign = jnp.where(drawing, (a & 1) == 1, s["sign"])
    geometric = jnp.where(drawing, U32(0), s["geometric"])
    trials = jnp.where(drawing, U32(1), trials)  # Algorithm 1 starts at K = 1
    phase = jnp.where(drawing, _ACCEPT_U, phase)

    in_u, in_geometric = phase == _ACCEPT_U, phase == _GEOMETRIC
    in_gaussian = phase == _ACCEPT_GAUSSIAN
    unit = in_geometric | (in_gaussian & (s["remainder"] >= s["denominator"]))  # gamma = 1
    one = jnp.ones_like(trials)
    numerator = jnp.where(in_u, u, jnp.where(unit, one, s["remainder"]))
    denominator = jnp.where(in_u, laplace_scale, jnp.where(unit, one, s["denominator"]))
    running = in_u | in_geometric | in_gaussian

    # U's run from K = 1 in one word (1 <= k <= 15): K* > 1 iff b < U 2^(32-k), K* > 2 iff
    # b < U^2 2^(31-2k) (dyadic thresholds: no ties)
    first_u = in_u & (trials == 1) & (scale_bits <= _DYADIC_LIMIT) & (scale_bits >= 1)
    shift = jnp.where(first_u, U32(32) - scale_bits, U32(1))
    past_one = b < (u << shift)
    square_shift = jnp.where(first_u, U32(31) - 2 * scale_bits, U32(0))
    past_two = b < ((u * u) << square_shift)
    # a gamma = 1 run from K = 1 in one word: K* > j iff G < 1 / j!
    first_unit = unit & (trials == 1)
    # any other run: one step, A_K = Bernoulli(gamma) and Bernoulli(1 / K)
    generic = running & ~first_u & ~first_unit
    *thresholds, gamma_step, inverse_k_step = decide(
        [(b, factorial, first_unit) for factorial in _FACTORIALS]
        + [(b, (numerator, denominator), generic), (a, (one, trials), generic)]
    )
    passed = functools.reduce(jnp.add, [below.astype(U32) for below in thresholds])
    step = gamma_step & inverse_k_step

    over, ended_at, next_trials = ~step, trials, trials + 1
    over = jnp.where(first_u, ~past_two, over)
    ended_at = jnp.where(first_u, jnp.where(past_one, U32(2), U32(1)), ended_at)
    next_trials = jnp.where(first_u, U32(3), next_trials)
    # a unit run ends at K* = 2 + (thresholds passed), or goes on at K = 7 past them all
    over = jnp.where(first_unit, passed < len(_FACTORIALS), over)
    ended_at = jnp.where(first_unit, U32(2) + passed, ended_at)
    next_trials = jnp.where(first_unit, U32(len(_FACTORIALS) + 2), next_trials)

    over = over & running
    run_true = over & _odd(ended_at)
    next_trials = jnp.where(over, U32(1), jnp.where(running, next_trials, s["trials"]))
    drawn = dict(s, phase=phase, u=u, sign=sign, geometric=geometric)
    return drawn, over, run_true, next_trials


def _after_run(machine: _Machine, s: dict, run_over, run_true, trials) -> dict:
    """The machine's transitions (as in :func:`_step`) once every lane's run is settled. A
    piece of the Gaussian acceptance is held as its numerator left (``remainder``) over ``2
    sigma^2`` (``denominator``): a run at gamma = 1 while the numerator is at least the
    denominator (taking one off), then one at their ratio (no integer division)."""
    scale_bits = jnp.asarray(machine.scale_bits, U32)
    laplace_scale = U32(1) << scale_bits
    quotient = jnp.asarray(machine.quotient, U32)
    phase = s["phase"]
    in_u, in_geometric = phase == _ACCEPT_U, phase == _GEOMETRIC

    accepting_u = in_u & run_over
    next_phase = jnp.where(accepting_u, jnp.where(run_true, _GEOMETRIC, _DRAW), phase)

    counting = in_geometric & run_over
    success = counting & run_true
    geometric = jnp.where(success, s["geometric"] + 1, s["geometric"])
    too_far = success & (geometric > (U32(INT32_LIMIT) >> scale_bits) - 1)  # leaves int32
    finished = counting & ~run_true
    magnitude = s["u"] + laplace_scale * geometric
    if not (isinstance(machine.divisor, int) and machine.divisor == 1):
        magnitude = magnitude // jnp.asarray(machine.divisor, U32)
    rejected_zero = finished & s["sign"] & (magnitude == 0)  # -0 is redrawn (Algorithm 2)
    signed = magnitude.astype(jnp.int32)
    emitted = finished & ~rejected_zero
    value = jnp.where(emitted, jnp.where(s["sign"], -signed, signed), s["value"])
    next_phase = jnp.where(too_far | rejected_zero, _DRAW, next_phase)

    units_left, left, c, denominator = (
        s["units_left"], s["remainder"], s["magnitude"], s["denominator"]
    )  # fmt: skip
    if machine.gaussian:
        # Algorithm 3 accepts Y with probability exp(-c^2 / (2 t m)), c = | |Y| - m |
        emitted_c = jnp.abs(jnp.abs(value) - quotient.astype(jnp.int32)).astype(U32)
        units = jnp.minimum(_per_piece(emitted_c), emitted_c)
        next_phase = jnp.where(emitted, _ACCEPT_GAUSSIAN, next_phase)
        units_left = jnp.where(emitted, emitted_c - units, units_left)
        left = jnp.where(emitted, units * emitted_c, left)
        c = jnp.where(emitted, emitted_c, c)
        denominator = jnp.where(emitted, 2 * laplace_scale * quotient, denominator)
    else:
        next_phase = jnp.where(emitted, _DONE, next_phase)

    judging = (phase == _ACCEPT_GAUSSIAN) & run_over
    unit = s["remainder"] >= s["denominator"]
    failed = judging & ~run_true
    next_phase = jnp.where(failed, _REJECTED if machine.judge_only else _DRAW, next_phase)
    passed = judging & run_true
    left = jnp.where(passed & unit, left - denominator, left)
    piece_passed = passed & ~unit
    next_phase = jnp.where(piece_passed & (units_left == 0), _DONE, next_phase)
    more = piece_passed & (units_left > 0)
    units = jnp.minimum(_per_piece(c), units_left)
    left = jnp.where(more, units * c, left)
    units_left = jnp.where(more, units_left - units, units_left)

    return {
        "phase": jnp.where(phase >= _DONE, phase, next_phase),
        "trials": trials,
        "u": s["u"],
        "sign": s["sign"],
        "geometric": geometric,
        "value": value,
        "units_left": units_left,
        "remainder": left,
        "magnitude": c,
        "denominator": denominator,
    }


def _round_state(shape: tuple[int, ...]) -> dict:
    """Every lane about to draw, in the rounds' state (the machine's, pieces held as the
    numerator left)."""
    state = _initial_state(shape, _DRAW)
    del state["whole_runs"]
    return state


# the sites of a substep's decisions, whose tie-breaking keys are folded from the round's key
# (16 i + site at substep i): the five factorial thresholds, then the two generic Bernoullis
_SITES = (0, 1, 2, 3, 4, 10, 11)


def _settle_ties(key, offset: int, numerators, denominators, below, tie):
    """``bool[sites, ...]``: the verdicts ``below`` with each ``tie`` settled by fresh words
    (site ``j``'s from ``key`` folded with ``offset + _SITES[j]``), as
    :func:`_bernoulli_from_word` settles one site's."""
    site_keys = jax.vmap(lambda site: jax.random.fold_in(key, site))(jnp.asarray(_SITES) + offset)
    return jax.vmap(_settled)(site_keys, numerators, denominators, below, tie)


def _round(machine: _Machine, key: jax.Array, carry: tuple, exact: jax.Array) -> tuple:
    """``(state, tied)`` after ``_SUBSTEPS`` settled runs of every lane (see the section's
    comment). Fast (``exact`` False, a traced ``bool[]``): a tied word reads as not below and
    ``tied`` records that one was used; exact: ties are settled by fresh bits. One compiled
    substep serves both, and every substep."""
    tie_key = jax.random.fold_in(key, _SUBSTEPS)

    def substep(i, carry):
        s, tied = carry
        a, b = _words(jax.random.fold_in(key, i), (_ROUND_WORDS, *s["phase"].shape))
        ties: list[jax.Array] = []

        def decide(requests):
            verdicts = []
            for word, fraction, used in requests:
                if isinstance(fraction, int):
                    below, tie = _factorial_threshold(word, fraction)
                    following = U32(0) - word * U32(fraction)  # the low word of word j!
                    denominator = jnp.full_like(word, fraction)
                else:
                    below, tie, following = _fraction_from_word(word, *fraction)
                    denominator = fraction[1]
                ties.append(tie & used)
                verdicts.append((below, tie, following, denominator))
            stacked = (jnp.stack(column) for column in zip(*verdicts, strict=True))
            below, tie, following, denominators = stacked
            settled = lax.cond(
                exact,
                lambda: _settle_ties(tie_key, 16 * i, following, denominators, below, tie),
                lambda: below,
            )
            return list(settled)

        drawn, over, run_true, trials = _settle_run(machine, a, b, s, decide)
        s = _after_run(machine, drawn, over, run_true, trials)
        # one reduction per substep, not one per decision (they would split fusion)
        return s, tied | (~exact & jnp.any(functools.reduce(jnp.logical_or, ties)))

    return lax.fori_loop(0, _SUBSTEPS, substep, carry)


def _rounds(machine: _Machine, key: jax.Array, carry: tuple, count: int, exact: jax.Array) -> tuple:
    def one(turn, c):
        return _round(machine, jax.random.fold_in(key, turn), c, exact)

    return lax.fori_loop(0, count, one, carry)


# A discrete Gaussian lane is settled after about 7 runs on average, and a lane is still pending
# after 2 r runs with probability about 0.8^r. The schedule runs every lane _FIRST_ROUNDS rounds,
# then the pending ones in buffers of a quarter, a sixteenth, ... of the lanes (the first
# pending ones first), each _BUFFER_ROUNDS rounds at a time while more lanes are pending than
# the next buffer holds, and the last buffer until none is. Lanes are run in equal blocks of at
# most _BLOCK (a block's state stays in cache; block b draws from the key folded with b), so the
# draws are a function of the key and the shape only.
_SUBSTEPS = 2
_FIRST_ROUNDS = 4
_BUFFER_ROUNDS = 4
_BLOCK = 2**17
_LAST_BUFFER = 1024


def _compacted(machine, key, carry, buffer: int, exact: jax.Array, more_than: int):
    """Rounds of the pending lanes, ``buffer`` at a time, while more than ``more_than`` are
    pending."""
    size = carry[0]["phase"].shape[0]

    def body(c):
        turn, (flat, tied) = c
        (slots,) = jnp.nonzero(_pending(flat), size=buffer, fill_value=size)
        lanes = jax.tree.map(lambda x: x.at[slots].get(mode="fill", fill_value=0), flat)
        lanes["phase"] = jnp.where(slots < size, lanes["phase"], _DONE)  # padding idles
        lanes, tied = _rounds(
            machine, jax.random.fold_in(key, turn), (lanes, tied), _BUFFER_ROUNDS, exact
        )
        flat = jax.tree.map(lambda x, g: x.at[slots].set(g, mode="drop"), flat, lanes)
        return turn + 1, (flat, tied)

    def going(c):
        return jnp.sum(_pending(c[1][0])) > more_than

    return lax.while_loop(going, body, (0, carry))[1]


def _schedule(machine: _Machine, key: jax.Array, flat: dict, exact: jax.Array) -> tuple:
    """``(state, tied)``: every lane of the flat ``state`` run until done."""
    size = flat["phase"].shape[0]
    first_key, rounds_key = jax.random.split(key)
    carry = (flat, jnp.zeros((), bool))
    if size <= _LAST_BUFFER:

        def body(c):
            turn, carry = c
            return turn + 1, _round(machine, jax.random.fold_in(first_key, turn), carry, exact)

        return lax.while_loop(lambda c: jnp.any(_pending(c[1][0])), body, (0, carry))[1]
    carry = _rounds(machine, first_key, carry, _FIRST_ROUNDS, exact)
    buffer, stage = size // 4, 0
    while buffer > _LAST_BUFFER:
        stage_key = jax.random.fold_in(rounds_key, stage)
        carry = _compacted(machine, stage_key, carry, buffer, exact, buffer // 4)
        buffer, stage = buffer // 4, stage + 1
    stage_key = jax.random.fold_in(rounds_key, stage)
    return _compacted(machine, stage_key, carry, max(buffer, 1), exact, 0)


def _run_block(machine: _Machine, key: jax.Array, flat: dict) -> dict:
    """One block's lanes until done (:func:`_schedule`): fast, and again with ties settled
    (the same words, so the same draws wherever no tie was read) where the fast run read a
    tied word (a few calls in a thousand at 10^6 lanes)."""

    def attempt(carry):
        turn, _, _ = carry
        state, tied = _schedule(machine, key, flat, exact=turn > 0)
        return turn + 1, state, tied

    # the fast attempt, then the exact one only where the fast one read a tie: one compiled
    # schedule (its exactness a traced flag) serves both
    start = (0, flat, jnp.ones((), bool))
    return lax.while_loop(lambda c: (c[0] == 0) | c[2], attempt, start)[1]


def _run_rounds(machine: _Machine, key: jax.Array, state: dict) -> dict:
    """Run every lane of ``state`` until it is done, in rounds (:func:`_round`), block by
    block."""
    flat = jax.tree.map(jnp.ravel, state)
    size = flat["phase"].shape[0]
    if size <= _BLOCK:
        flat = _run_block(machine, key, flat)
    else:
        blocks = -(-size // _BLOCK)
        width = -(-size // blocks)  # blocks of equal width, at most _BLOCK lanes

        def split(x):
            return jnp.pad(x, (0, blocks * width - size)).reshape(blocks, width)

        keys = jax.vmap(lambda b: jax.random.fold_in(key, b))(jnp.arange(blocks))
        done = lax.map(
            lambda kb: _run_block(machine, kb[0], kb[1]), (keys, jax.tree.map(split, flat))
        )
        flat = jax.tree.map(lambda x: x.reshape(-1)[:size], done)
    return jax.tree.map(lambda x: x.reshape(state["phase"].shape), flat)


def discrete_laplace(
    key: jax.Array, shape: tuple[int, ...], scale_bits: Any, divisor: Any = 1
) -> jax.Array:
    """``i32[shape]`` i.i.d. discrete Laplace of scale ``b = 2^k / s``: ``P(x) ∝ exp(-|x| / b)``.

    Canonne, Kamath and Steinke's Algorithm 2, exactly: ``U`` uniform on ``[0, t)`` (``t =
    2^k``: ``k`` random bits) kept with probability ``exp(-U / t)``, ``V`` the number of
    Bernoulli(exp(-1)) successes before a failure, ``|x| = floor((U + t V) / s)``, a random
    sign (``-0`` redrawn). :func:`discrete_laplace_parameters` picks ``(k, s)`` for a least
    scale.

    Args:
      key: a PRNG key, used once.
      shape: the output shape.
      scale_bits: ``k`` in ``[0, 24]`` (``u32[]``/``i32[]``, may be traced).
      divisor: ``s >= 1`` (may be traced).
    """
    if isinstance(divisor, int) and divisor == 1:
        return _sampled(key, scale_bits, 1, shape=tuple(shape), gaussian=False)
    return _sampled(key, scale_bits, 1, divisor, shape=tuple(shape), gaussian=False)


def discrete_gaussian(
    key: jax.Array, shape: tuple[int, ...], scale_bits: Any, quotient: Any
) -> jax.Array:
    """``i32[shape]`` i.i.d. discrete Gaussian ``N_Z(0, sigma^2)``, ``sigma^2 = 2^k m``:
    ``P(x) = exp(-x^2 / (2 sigma^2)) / sum_y exp(-y^2 / (2 sigma^2))``.

    Canonne, Kamath and Steinke's Algorithm 3, exactly: a discrete Laplace candidate ``Y`` of
    scale ``t = 2^k`` accepted with probability ``exp(-(|Y| - sigma^2 / t)^2 / (2 sigma^2))``.
    With ``sigma^2 = t m`` that is ``exp(-c^2 / (2 t m))`` for the integer ``c = ||Y| - m|``,
    decided by Algorithm 1 on pieces ``u c / (2 t m)`` whose numerators stay below 2^32. Any
    ``t`` gives this law; ``t`` near sigma is the fastest (acceptance at least 0.65 for ``t`` in
    ``(sigma / sqrt 2, sigma sqrt 2]``): :func:`discrete_gaussian_parameters`.

    Args:
      key: a PRNG key, used once.
      shape: the output shape.
      scale_bits: ``k`` in ``[0, 16]`` (integer array scalar, may be traced).
      quotient: ``m >= 1`` with ``2^k m < 2^31`` (may be traced).
    """
    return _sampled(key, scale_bits, quotient, shape=tuple(shape), gaussian=True)


@functools.partial(jax.jit, static_argnames=("shape", "gaussian"))
def _sampled(key, scale_bits, quotient, divisor=None, *, shape, gaussian):
    """The samplers' draws ``i32[shape]``, one jitted function: a program that draws several
    times (a release per round, per tree node, per site) traces the machine once per shape,
    not once per call. ``divisor=None`` is a divisor known to be 1 (no division compiled)."""
    divisor = 1 if divisor is None else divisor
    machine = _Machine(scale_bits, divisor, quotient, gaussian=gaussian)
    return _run_rounds(machine, key, _round_state(shape))["value"]


def bernoulli_exp(key: jax.Array, numerator: jax.Array, denominator: jax.Array) -> jax.Array:
    """``bool[...]``: Bernoulli(exp(-numerator / denominator)) exactly, for ``uint32``
    ``numerator >= 0`` and ``denominator >= 1``: ``floor(gamma)`` runs of Algorithm 1 at
    ``gamma = 1``, then one at the fractional part (Canonne, Kamath and Steinke, Algorithm 1),
    the machine's own acceptance step run alone."""
    numerator, denominator = jnp.broadcast_arrays(
        jnp.asarray(numerator, U32), jnp.asarray(denominator, U32)
    )
    state = _initial_state(numerator.shape, _ACCEPT_GAUSSIAN)
    state["units_left"], state["whole_runs"], state["remainder"] = _piece(
        jnp.ones_like(numerator), numerator, denominator
    )
    state["magnitude"], state["denominator"] = numerator, denominator
    state = _run_machine(_Machine(0, 1, 1, gaussian=True, judge_only=True), key, state)
    return state["phase"] == _DONE


# ------------------------------------------------------------------------- parameters, rounding


def _array_module(value):
    return jnp if isinstance(value, jax.Array) else np


def discrete_gaussian_parameters(least_variance):
    """``(k, m)`` with ``2^k m >= v`` for :func:`discrete_gaussian`: ``k`` with ``4^k <= 2 v <
    4^(k+1)`` (so ``t = 2^k`` lies in ``(sigma / sqrt 2, sigma sqrt 2]``), ``m = ceil(v / t)``,
    so ``v <= t m < v + t``. Integer comparisons only, so the host (numpy) and the device (jax,
    traced) get the same pair for the same ``v``.

    Args:
      least_variance: an integer ``1 <= v < 2^31 - 2^16`` (``uint32``/``int32``, numpy or jax).
    """
    xp = _array_module(least_variance)
    variance = xp.maximum(xp.asarray(least_variance, xp.uint32), 1)
    doubled = variance.astype(xp.uint32) * 2  # < 2^32
    bits = sum((doubled >= 4**j).astype(xp.uint32) for j in range(1, 16))
    scale = xp.asarray(1, xp.uint32) << bits
    return bits, (variance + scale - 1) // scale


def discrete_laplace_parameters(least_scale: float, scale_bits: int = 20) -> tuple[int, int]:
    """Host: ``(k, s)`` with ``2^k / s >= least_scale`` for :func:`discrete_laplace`:
    ``s = floor(2^k / b)``, so the scale exceeds ``b`` by a factor below ``1 + b / 2^k``.
    ``k = 20`` keeps the int32 conditioning below ``2 e^-2046`` (module docstring)."""
    if not 0 < least_scale <= 2.0**scale_bits:
        raise ValueError(f"expected a discrete Laplace scale in (0, 2^{scale_bits}], got "
                         f"{least_scale}")  # fmt: skip
    return scale_bits, max(1, math.floor(2.0**scale_bits / least_scale))


def variance_at_least(
    noise_multiplier: jax.Array, squared_sensitivity: int, shares: int = 1
) -> jax.Array:
    """``u32[]``: an integer ``v >= z^2 Delta^2 / shares`` for the float ``z`` (``f32[]``,
    traced), an integer ``Delta^2`` and ``shares`` (each of ``shares`` noise shares carries
    ``v``, so together at least ``z^2 Delta^2``): computed in float32 with a relative margin of
    2^-16 (larger than the rounding of the four float operations, and of a float64 z rounded to
    float32), then rounded up. Values at or past 2^31 come back as 2^31
    (:func:`variance_in_range` is False)."""
    z = jnp.asarray(noise_multiplier, jnp.float32)
    product = z * z * np.float32(squared_sensitivity) * np.float32(1.0 + 2.0**-16)
    product = product / np.float32(shares)
    product = jnp.minimum(jnp.ceil(product), np.float32(2.0**31))
    return product.astype(U32)


def variance_in_range(variance: jax.Array) -> jax.Array:
    """``bool[]``: ``1 <= v < 2^31 - 2^16``, where :func:`discrete_gaussian_parameters` gives
    ``t m < 2^31``."""
    return (variance >= 1) & (variance < SIGMA_SQUARED_LIMIT - 2**16)


def randomized_round(key: jax.Array, values: jax.Array) -> jax.Array:
    """``i32[...]``: ``floor(x)`` or ``floor(x) + 1``, the latter with probability the fractional
    part of ``x`` (24 random bits against it: unbiased to within 2^-24). ``values: f32[...]``
    with ``|x| < 2^31``."""
    values = jnp.asarray(values, jnp.float32)
    floor = jnp.floor(values)
    fraction = values - floor  # exact in float32
    bits = (_words(key, values.shape) >> 8).astype(jnp.float32)  # 24-bit integers, exact
    up = bits < fraction * np.float32(2.0**24)
    return floor.astype(jnp.int32) + up.astype(jnp.int32)


def conditional_round(
    key: jax.Array, values: jax.Array, bound: int, max_tries: int,
    within: Callable[[jax.Array, int], jax.Array] = squared_norm_at_most,
) -> tuple[jax.Array, jax.Array]:  # fmt: skip
    """``(vector: i32[...], fell_back: f32[])``: :func:`randomized_round` of ``values`` redrawn
    until ``within(vector, bound)``: ``||vector||^2 <= bound`` (:func:`squared_norm_at_most`,
    the default) or ``||vector||_1 <= bound`` (:func:`absolute_sum_at_most`), checked exactly in
    integers (Kairouz, Liu and Steinke's conditional randomized rounding); after ``max_tries``
    failures the vector is zeros and ``fell_back`` is 1. Whatever happens, the returned vector
    meets the bound: the sensitivity the accountant uses holds exactly."""
    check = within

    def body(state):
        tries, vector, accepted = state
        fresh = randomized_round(jax.random.fold_in(key, tries), values)
        ok = check(fresh, bound)
        vector = jnp.where(accepted, vector, fresh)
        return tries + 1, vector, accepted | ok

    initial = (0, jnp.zeros(values.shape, jnp.int32), jnp.zeros((), bool))
    tries, vector, accepted = lax.while_loop(lambda s: (~s[2]) & (s[0] < max_tries), body, initial)
    del tries
    return jnp.where(accepted, vector, 0), (~accepted).astype(jnp.float32)


# ------------------------------------------------------------------------------- host helpers


def rounded_squared_norm_bound(grid_norm: float, dimension: int, beta: float) -> int:
    """The integer bound on ``||round(x)||_2^2`` for ``||x||_2 <= grid_norm`` (grid units) in
    ``dimension`` coordinates, that conditional rounding enforces: the smaller of the
    deterministic ``(L + sqrt(d))^2`` and Kairouz, Liu and Steinke's (2021, Theorem 1)
    ``L^2 + d / 4 + sqrt(2 ln(1 / beta)) (L + sqrt(d) / 2)``, which a single rounding exceeds
    with probability at most ``beta`` (``beta = 0``: the deterministic bound)."""
    deterministic = (grid_norm + math.sqrt(dimension)) ** 2
    if beta <= 0.0:
        return math.ceil(deterministic)
    concentrated = (
        grid_norm**2
        + dimension / 4.0
        + math.sqrt(2.0 * math.log(1.0 / beta)) * (grid_norm + math.sqrt(dimension) / 2.0)
    )
    return math.ceil(min(deterministic, concentrated))


def rounded_absolute_sum_bound(grid_norm: int, dimension: int, beta: float) -> int:
    """The integer bound on ``||round(x)||_1`` for ``||x||_1 <= grid_norm`` (an integer, grid
    units): the deterministic ``L + d - 1`` (each coordinate rounds to at most ``ceil|x_j|``)
    or, smaller for large d, Hoeffding's ``L + sqrt(d ln(1 / beta) / 2)`` (``|round(x_j)|`` is an
    unbiased rounding of ``|x_j|``), exceeded with probability at most ``beta``."""
    deterministic = grid_norm + dimension - 1
    if beta <= 0.0:
        return deterministic
    return min(deterministic, math.ceil(grid_norm + math.sqrt(dimension * math.log(1 / beta) / 2)))


def int32_conditioning_mass(scale_bits: int) -> float:
    """Upper bound on the probability that the int32 range conditions away (see the module
    docstring) for a Laplace proposal of scale numerator ``t = 2^k``: ``2 exp(-V_max)``,
    ``V_max = (2^31 - 1) // t - 1``; 0.0 where it underflows float64."""
    limit = INT32_LIMIT // 2 ** int(scale_bits) - 1
    return 2.0 * math.exp(-limit) if limit < 745 else 0.0


def discrete_gaussian_log_pmf(values: np.ndarray, sigma_squared: float) -> np.ndarray:
    """Host, float64: ``log P(x)`` of ``N_Z(0, sigma^2)`` at the integers ``values`` (the
    normaliser summed over ``|y| <= 40 sigma + 40``, beyond which the mass is below 1e-340)."""
    reach = int(40 * math.sqrt(sigma_squared)) + 40
    support = np.arange(-reach, reach + 1, dtype=np.float64)
    exponents = -(support**2) / (2.0 * sigma_squared)
    top = exponents.max()
    log_normaliser = top + math.log(float(np.sum(np.exp(exponents - top))))
    values = np.asarray(values, np.float64)
    return -(values**2) / (2.0 * sigma_squared) - log_normaliser


def discrete_laplace_log_pmf(values: np.ndarray, scale: float) -> np.ndarray:
    """Host, float64: ``log P(x)`` of ``DLap(scale)``: ``P(x) = tanh(1 / (2 scale))
    exp(-|x| / scale)``."""
    values = np.asarray(values, np.float64)
    return math.log(math.tanh(0.5 / scale)) - np.abs(values) / scale
