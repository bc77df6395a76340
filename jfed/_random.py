"""Several independent draws from ONE key with a single bit-generation call.

A client needs a few normals and uniforms per round. Splitting its key first costs as much as the
draws themselves (measured: ~0.05 s per split per million clients on 2 CPU cores), so the bits for
all of them are generated at once and cut into segments: still one key, one use.

For threefry keys the words are ``threefry_2x32(key, [0, 1, ..., n-1])`` computed directly, two
words per threefry block. ``jax.random.bits`` under the default ``jax_threefry_partitionable``
spends one block per word (measured: twice the time), and its stream changes with that global flag;
this one does not.

A client's key is a counter-addressed stream (:data:`COUNTER`, :func:`stream_key`): word j is the
first output of its block j, and the hash is written as array operations that XLA fuses into the
code consuming the words (one pass over memory). On CPU this made the two-point perturbation of
100 reports of 454,922 weights 5.9x faster than a ``fold_in`` key per client (0.034 s against
0.200 s, measured side by side).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.custom_batching import custom_vmap
from jax.extend.random import define_prng_impl, threefry_2x32

_LOWEST_OPEN = np.nextafter(np.float32(-1.0), np.float32(0.0))


def _unit_uniform(bits: jax.Array) -> jax.Array:
    """Uniform f32 in [0, 1) from uint32 bits (23 mantissa bits, as jax.random.uniform)."""
    mantissa = lax.shift_right_logical(bits, jnp.uint32(9)) | jnp.uint32(0x3F800000)
    return lax.bitcast_convert_type(mantissa, jnp.float32) - 1.0


# ---------------------------------------------------------------- counter-addressed streams
# A stream is four words (k0, k1, hi, lo): its j-th threefry block is the counter (hi, lo + j)
# under the key (k0, k1), so a stream costs nothing to open. Word j of the stream is the block's
# first output; its second output is the word's companion (the refinement of a private normal,
# the low half of a 64-bit uniform), so no draw needs words from two blocks. The engine opens
# client i's stream of a round as (round root, i + 1, 0): no hash per client (hi >= 1 keeps it
# apart from jax's fold_in of the root, the block (0, d)). Deriving a new stream (fold_in, split)
# hashes (hi, value) under a domain-separated key (one block); every stream starts at lo = 0.
_DERIVE = (np.uint32(0x243F6A88), np.uint32(0x85A308D3))
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _threefry_blocks(
    k0: jax.Array, k1: jax.Array, x0: jax.Array, x1: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Threefry-2x32 (20 rounds) of the blocks ``(x0, x1)`` under the key ``(k0, k1)``: the same
    words as ``jax.extend.random.threefry_2x32``, written as elementwise array operations so that
    XLA fuses the hash into the code that consumes its words (on CPU jax lowers its primitive to
    a loop, whose every round and output goes through memory)."""
    keys = (k0, k1, k0 ^ k1 ^ np.uint32(0x1BD11BDA))
    x0, x1 = x0 + keys[0], x1 + keys[1]
    for block in range(5):
        for rotation in _ROTATIONS[block % 2]:
            x0 = x0 + x1
            x1 = (x1 << np.uint32(rotation)) | (x1 >> np.uint32(32 - rotation))
            x1 = x0 ^ x1
        x0 = x0 + keys[(block + 1) % 3]
        x1 = x1 + keys[(block + 2) % 3] + np.uint32(block + 1)
    return x0, x1


def _stream_blocks(data: Any, first_block: int, n: int) -> tuple[jax.Array, jax.Array]:
    """``(words, companions): u32[n, *batch]`` each: the two outputs of the blocks ``first_block
    .. first_block + n - 1`` of the streams ``data``: their words ``(k0, k1, hi, lo)``, each
    ``u32[*batch]`` or a scalar (one stream: ``u32[4]``)."""
    batch = jnp.broadcast_shapes(*(jnp.shape(row) for row in data[2:]))
    counters = jnp.arange(n, dtype=jnp.uint32).reshape((n,) + (1,) * len(batch))
    low = data[3] + jnp.uint32(first_block) + counters
    return _threefry_blocks(data[0], data[1], jnp.broadcast_to(data[2], (n, *batch)), low)


def _stream_range(key: jax.Array, first_block: int, n: int) -> tuple[jax.Array, jax.Array]:
    """:func:`_stream_blocks` of a typed stream key."""
    return _stream_blocks(jax.random.key_data(key), first_block, n)


def _stream_bits(data: jax.Array, bit_width: int, shape: tuple[int, ...]) -> jax.Array:
    """COUNTER's ``random_bits``: word j of the stream (with its companion, for 64 bits) is the
    j-th value of ``shape``. Under ``vmap`` the batch's words are computed in the minor axis
    (:func:`_client_minor`), then laid out as ``jax.random`` lays out a batch."""
    core_static = (bit_width, tuple(int(size) for size in shape))
    return _client_minor(_stream_bits_of_rows, core_static, _STREAM_GATE, 2)(data)


def _stream_bits_of_rows(data: Any, bit_width: int, shape: tuple[int, ...]) -> jax.Array:
    """``uint{bit_width}[*shape, *batch]``: the bits of the streams ``data`` (as
    :func:`_stream_blocks`)."""
    words, companions = _stream_blocks(data, 0, int(np.prod(shape)))
    if bit_width == 64:
        words = words.astype(jnp.uint64) << jnp.uint64(32) | companions.astype(jnp.uint64)
    elif bit_width < 32:
        words = words.astype(jnp.dtype(f"uint{bit_width}"))
    return words.reshape(shape + words.shape[1:])


def _stream_fold_in(data: jax.Array, value: Any) -> jax.Array:
    # one block, (hi, value), under the domain-separated key: every stream jfed opens starts at
    # block lo = 0, so (k0, k1, hi) is its whole address
    value = jnp.asarray(value).astype(jnp.uint32)
    derived = _threefry_blocks(data[0] ^ _DERIVE[0], data[1] ^ _DERIVE[1], data[2], value)
    return jnp.stack([derived[0], derived[1], jnp.uint32(0), jnp.uint32(0)])


def _stream_split(data: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    count = int(np.prod(shape))
    keys = jax.vmap(lambda i: _stream_fold_in(data, i))(jnp.arange(count, dtype=jnp.uint32))
    return keys.reshape(*shape, 4)


def _stream_seed(seed: jax.Array) -> jax.Array:
    seed = jnp.asarray(seed).astype(jnp.uint32)
    zero = jnp.uint32(0)
    return jnp.stack([zero, seed, zero, zero])


COUNTER = define_prng_impl(key_shape=(4,), seed=_stream_seed, split=_stream_split,
                           random_bits=_stream_bits, fold_in=_stream_fold_in,
                           name="jfed_counter", tag="jfc")  # fmt: skip
"""The PRNG implementation of counter-addressed streams (a ``jax.random`` key impl)."""


def stream_key(root: jax.Array, stream: jax.Array | int) -> jax.Array:
    """The counter-addressed stream ``stream`` (``< 2^32 - 1``) of the threefry key ``root``: a
    typed key of :data:`COUNTER` (every ``jax.random`` function takes it), opened without a
    hash. Other root implementations: ``fold_in(root, stream)``."""
    if jax.random.key_impl(root) != jax.random.key_impl(jax.random.key(0)):
        return jax.random.fold_in(root, stream)
    words = jax.random.key_data(root)
    high = jnp.asarray(stream).astype(jnp.uint32) + jnp.uint32(1)
    return jax.random.wrap_key_data(jnp.stack([words[0], words[1], high, jnp.uint32(0)]),
                                    impl=COUNTER)  # fmt: skip


_STREAM_GATE = 2
"""The row of a stream's words that names it (``hi``, from the client id): what a conditional
over a chunk's draws reads (:func:`_client_minor`), a word XLA cannot know."""


def _is_stream(key: jax.Array) -> bool:
    return jax.random.key_impl(key) == COUNTER


def random_words(key: jax.Array, n: int) -> jax.Array:
    """``n`` random ``uint32`` words from one key (threefry counter mode; other impls: jax's)."""
    if _is_stream(key):
        return _stream_range(key, 0, n)[0]
    if jax.random.key_impl(key) != jax.random.key_impl(jax.random.key(0)):
        return jax.random.bits(key, (n,), jnp.uint32)
    key_words = jax.random.key_data(key)
    return threefry_2x32((key_words[0], key_words[1]), jnp.arange(n, dtype=jnp.uint32))


def normals_and_uniforms(
    key: jax.Array, n_normal: int, n_uniform: int
) -> tuple[jax.Array, jax.Array]:
    """``(N(0, 1): f32[n_normal], U[0, 1): f32[n_uniform])``, independent, from one key.

    Normals use the inverse-CDF transform ``sqrt(2) erfinv(v)`` on ``v`` uniform in (-1, 1), as
    ``jax.random.normal`` does. (Box-Muller was measured slower on CPU: XLA's sin and cos cost more
    than the erfinv polynomial.)
    """
    if _is_stream(key):  # each range its own fused hash (a slice would stop the fusion)
        return _client_minor(_stream_draws, (n_normal, n_uniform, False), _STREAM_GATE, 2)(
            jax.random.key_data(key)
        )
    if jax.random.key_impl(key) == jax.random.key_impl(jax.random.key(0)):
        return _client_minor(_threefry_draws, (n_normal, n_uniform), 0)(jax.random.key_data(key))
    words = random_words(key, n_normal + n_uniform)
    return normals_from_words(words[:n_normal]), _unit_uniform(words[n_normal:])


def normals_from_words(words: jax.Array) -> jax.Array:
    """``N(0, 1)`` of the shape of ``words: u32[...]``, one word each: ``sqrt(2) erfinv(2u - 1)``
    on the word's 23-bit uniform ``u`` (kept off -1), as ``jax.random.normal``."""
    symmetric = jnp.maximum(_LOWEST_OPEN, 2.0 * _unit_uniform(words) - 1.0)
    return np.float32(np.sqrt(2.0)) * lax.erf_inv(symmetric)


# The normals of a private release need their tails: the inverse-CDF transform of a 23-bit
# uniform never leaves [-5.42, 5.17], so a Gaussian mechanism whose sensitivity is s noise
# standard deviations puts its output outside the other input's reach with probability about
# Q(5.17 - s) (Q the normal tail), which is not covered by delta once s exceeds about 1. The
# two extreme cells of the uniform are refined by the word's 9 unused bits and one more word,
# which moves that edge to PRIVATE_NORMAL_REACH and changes no other draw.
TAIL_RESOLUTION = 2.0**-64
# every draw lies within +-9.155 (the quantile of 2^-65): bounds with 9.0 are conservative
PRIVATE_NORMAL_REACH = 9.0
_LAST_CELL = 2**23 - 1


def _words_after(key: jax.Array, start: int, n: int) -> jax.Array:
    """``n`` words from counters ``start .. start + n - 1``, none shared with
    :func:`random_words` ``(key, start)`` (whose threefry blocks pair counters below ``start``)."""
    if jax.random.key_impl(key) != jax.random.key_impl(jax.random.key(0)):
        return jax.random.bits(key, (start + n,), jnp.uint32)[start:]
    key_words = jax.random.key_data(key)
    counts = jnp.arange(start, start + n, dtype=jnp.uint32)
    return threefry_2x32((key_words[0], key_words[1]), counts)


# Cephes' ndtri coefficients for p <= exp(-2) (jax.scipy.special.ndtri uses the same): P1/Q1 where
# z = sqrt(-2 log p) < 8, P2/Q2 beyond
# fmt: off
_TAIL_P1 = (4.0554489230596245, 31.525109459989388, 57.16281922464213, 44.08050738932008,
            14.684956192885803, 2.1866330685079025, -0.1402560791713545, -0.03504246268278482,
            -0.0008574567851546854)
_TAIL_Q1 = (1.0, 15.779988325646675, 45.39076351288792, 41.3172038254672, 15.04253856929075,
            2.504649462083094, -0.14218292285478779, -0.03808064076915783, -0.0009332594808954574)
_TAIL_P2 = (3.2377489177694603, 6.915228890689842, 3.9388102529247444, 1.3330346081580755,
            0.20148538954917908, 0.012371663481782003, 0.00030158155350823543,
            2.6580697468673755e-06, 6.239745391849833e-09)
_TAIL_Q2 = (1.0, 6.02427039364742, 3.6798356385616087, 1.3770209948908132, 0.21623699359449663,
            0.013420400608854318, 0.00032801446468212774, 2.8924786474538068e-06,
            6.790194080099813e-09)
# fmt: on


def _lower_tail_quantile(p: jax.Array) -> jax.Array:
    """``ndtri(p)`` for ``p: f32[...]`` in ``(0, exp(-2)]``, as ``jax.scipy.special.ndtri``
    computes it there (the same operations: equal to it, tested), without the branch for the
    bulk and with one rational function per draw instead of two."""
    z = lax.sqrt(np.float32(-2.0) * lax.log(p))
    inverse = 1 / z
    far = z >= np.float32(8.0)

    def horner(near: tuple[float, ...], beyond: tuple[float, ...]) -> jax.Array:
        value = jnp.zeros_like(z)
        for a, b in zip(near, beyond, strict=True):
            value = value * inverse + jnp.where(far, np.float32(b), np.float32(a))
        return value

    second = horner(_TAIL_P1, _TAIL_P2) / horner(_TAIL_Q1, _TAIL_Q2) / z
    return -((z - lax.log(z) / z) - second)


def _normals_with_tails(words: jax.Array, refinements: jax.Array) -> jax.Array:
    """``N(0, 1)`` from ``words`` as :func:`normals_and_uniforms` draws them, except in the
    uniform's first and last 2^-23 cells, where the 64-bit uniform (the word, then
    ``refinements``) goes through the normal quantile of its tail probability."""
    bulk = normals_from_words(words)
    cell = lax.shift_right_logical(words, jnp.uint32(9))
    unused = (words & jnp.uint32(0x1FF)).astype(jnp.float32)
    lower = unused * np.float32(2.0**32) + refinements.astype(jnp.float32) + 0.5
    upper = (511.0 - unused) * np.float32(2.0**32) + (~refinements).astype(jnp.float32) + 0.5
    # one quantile per draw: the lower cell's, or minus the upper cell's
    low_cell = cell == 0
    quantile = _lower_tail_quantile(jnp.where(low_cell, lower, upper) * np.float32(TAIL_RESOLUTION))
    tail = jnp.where(low_cell, quantile, -quantile)
    return jnp.where(low_cell | (cell == _LAST_CELL), tail, bulk)


def _extreme_cells(words: jax.Array) -> jax.Array:
    cell = lax.shift_right_logical(words, jnp.uint32(9))
    return (cell == 0) | (cell == _LAST_CELL)


def _across_batch(reduction: Callable[[jax.Array], jax.Array]) -> Callable[[jax.Array], jax.Array]:
    """``flag: bool[] -> bool[]``, the flag itself; under ``vmap``, ``reduction`` (``jnp.all`` or
    ``jnp.any``) of the batch's flags, unbatched. A conditional on it stays a conditional under
    any enclosing ``vmap`` (a sweep over runs), where a batched predicate would turn it into a
    select that computes both branches: for conditionals whose branches agree wherever the
    predicate's reduction lets both run."""

    @custom_vmap
    def unbatched(flag: jax.Array) -> jax.Array:
        return flag

    @unbatched.def_vmap
    def _batched(axis_size: int, in_batched: list[bool], flag: jax.Array) -> Any:
        del axis_size
        return (reduction(flag) if in_batched[0] else flag), False

    return unbatched


_everywhere = _across_batch(jnp.all)
_anywhere = _across_batch(jnp.any)


def _private_normals_from_words(words: jax.Array, refinements: jax.Array) -> jax.Array:
    """:func:`_normals_with_tails`, computing the tails only when some word of the batch fell in
    an extreme cell (probability 2^-22 per word): the same numbers, and a vmapped client pays for
    the tail quantile (a log, a square root and two rational functions per word, which XLA's CPU
    backend does not vectorise across a batch of short vectors) in about one chunk of 4,096
    clients x 10 normals in a hundred instead of on every word (measured side by side: private
    normals for 10^6 clients x 10 cost 2.4x the bare normals when every word paid, 1.07x so).
    Under ``vmap`` the condition is the whole batch's (:func:`_across_batch`)."""
    return lax.cond(
        _anywhere(jnp.any(_extreme_cells(words))),
        _normals_with_tails,
        lambda w, r: normals_from_words(w),
        words,
        refinements,
    )


# ------------------------------------------------------------------ clients in the minor axis
# The engine vmaps a one-client function over a chunk of clients, so a client's n draws become an
# array [chunk, n] whose minor axis is the client's own (n = 10 for d = 10). XLA's CPU backend
# vectorises an elementwise loop along the minor axis only: the hash and the transforms (erfinv,
# log) then run n lanes wide with a remainder. Under vmap a draw is computed instead as [n, chunk]
# (the clients minor) and transposed where it is read. Every word and every float is the same
# (elementwise operations on the same inputs; tested). The bits that ``jax.random`` functions
# draw from a stream key (COUNTER's random_bits) are computed the same way; jax's transforms of
# them (e.g. normal's erfinv) then run in the client-major layout, as jax computes them.
#
# On CPU the draws of a chunk are also computed once, into memory, as the result of a
# conditional: XLA copies a cheap producer (the hash, the last steps of erfinv) into every fusion
# that reads it, so a client's draws read by its clipping, its message and its statistic would
# be hashed again in each (lax.optimization_barrier does not stop that: XLA's CPU pipeline drops
# barriers before fusion). Measured on 2 CPU cores, a modulated round on 10^6 procedural clients:
# about 2.5x faster than with the batched form (0.16 s against 0.40 s, runs alternated). For
# threefry keys the conditional's predicate is one XLA cannot fold (x != ~x, always true). For
# streams it is that the chunk's streams were opened from one root key (their address word
# hi != 0, and equal root words: the engine's client keys of a round always are): that branch
# hashes under the root as two scalars, so the key schedule is computed once per chunk instead of
# once per client. Other batches of streams take the other branch, with the same words; a stream
# derived by fold_in or split has hi = 0, so XLA folds its conditional away (its constant address
# under a scalar root would send XLA's simplifier into a loop). The keys reach the draws row by
# row (``u32[chunk]`` each, read in place). Measured on 2 CPU cores, runs alternated: 10 private
# normals for each of 10^6 clients 0.036 s with the keys as rows against 0.043 s with a transposed
# copy ``[4, chunk]``; the W round of bench/engine.py at 10^6 clients 0.0580 s with the root
# test against 0.0612 s without.
#
# Under an enclosing vmap (a sweep over runs) these predicates would be batched, and a batched
# predicate turns a conditional into a select that computes both branches (here: the tails of
# every private normal, and no draws held in memory): each predicate is reduced over the sweep
# instead (:func:`_across_batch`: the root test must hold in every run, a tail is computed if any
# run drew one). Measured on 2 CPU cores, a sweep of 4 runs at 2 x 10^5 clients (one program):
# 0.045 s against 0.290 s for W, 0.056 s against 0.294 s for the modulated round (separate
# processes, ad hoc). Other backends compute the same draws without the conditional
# (lax.platform_dependent chooses when the program is lowered): a GPU would wait on its host for
# every predicate. (Measured once on an H100, bench/plans.py --with-conditionals, jax 0.11.2: the
# CPU's branches, this conditional and the engine's masking one, cost no more there, a modulated
# round on 10^8 clients 0.053 s against 0.056 s. The private normals' own conditional is kept on
# every backend: that round took 0.056 s with every tail computed and tf32 products, 0.045 s with
# the conditional and float32 products; two changes between the runs, not separated.)


@functools.cache
def _client_minor(
    core: Callable[..., Any], static: tuple[Any, ...], gate_row: int, root_rows: int = 0
) -> Callable[..., Any]:
    """``core(rows, *static)`` (a pytree of arrays ``[n, *batch]``) as a function of one key's
    ``data: u32[k]``, whose ``vmap`` computes the batch in the minor axis (on CPU, into memory
    once). ``rows`` is a sequence of the ``k`` words of the keys, ``u32[*batch]`` each (one key:
    ``data`` itself), and ``core`` broadcasts them.

    ``gate_row`` names a row the conditional's predicate reads, one whose words XLA cannot know
    (a client's id, not a constant). The first ``root_rows`` rows are the keys' root: where the
    whole batch shares it (under an enclosing ``vmap``: where every run's batch shares its own),
    ``core`` gets those rows as scalars (one per run)."""

    def drawn(rows: Any) -> Any:
        return core(rows, *static)

    @custom_vmap
    def draw(data: jax.Array) -> Any:
        return drawn(data)

    def materialised(rows: tuple[jax.Array, ...]) -> Any:
        gate = rows[gate_row][0]
        if not root_rows:
            return lax.cond(_everywhere(gate != ~gate), drawn, never, rows)
        # a derived stream's gate word is 0: XLA then folds the conditional to its plain branch
        # (under the shared root, its constant address would make every client's words equal,
        # and XLA's simplifier loop over that broadcast)
        shared = functools.reduce(
            jnp.logical_and, (jnp.all(row == row[0]) for row in rows[:root_rows]), gate != 0
        )
        return lax.cond(_everywhere(shared), under_shared_root, drawn, rows)

    def never(rows: tuple[jax.Array, ...]) -> Any:
        return jax.tree.map(jnp.zeros_like, jax.eval_shape(drawn, rows))

    def under_shared_root(rows: tuple[jax.Array, ...]) -> Any:
        return drawn(tuple(row[0] for row in rows[:root_rows]) + rows[root_rows:])

    @draw.def_vmap
    def _batched(axis_size: int, in_batched: list[bool], data: jax.Array) -> Any:
        del axis_size, in_batched  # the rule runs only when its one argument is batched
        rows = tuple(data[:, word] for word in range(data.shape[1]))
        out = lax.platform_dependent(rows, cpu=materialised, default=drawn)
        return jax.tree.map(lambda leaf: jnp.moveaxis(leaf, -1, 0), out), jax.tree.map(
            lambda _: True, out
        )

    return draw


def _stream_draws(
    data: Any, n_normal: int, n_uniform: int, private: bool
) -> tuple[jax.Array, jax.Array]:
    """``(normals: f32[n_normal, *batch], uniforms: f32[n_uniform, *batch])`` of the streams
    ``data`` (their words ``(k0, k1, hi, lo)``, as :func:`_stream_blocks`): word j of the
    normals' range is normal j (refined by its companion where ``private``), the uniforms' range
    follows it.

    Private normals are :func:`_normals_with_tails`, whose tails are computed only when some word
    of the batch fell in an extreme cell (probability 2^-22 per word): the branches rehash their
    words from ``data``, so that the common branch hashes each word once more than the test and
    nothing else (a conditional's operands are held in memory)."""

    def uniforms(data: Any) -> jax.Array:
        return _unit_uniform(_stream_blocks(data, n_normal, n_uniform)[0])

    def bulk(data: Any) -> tuple[jax.Array, jax.Array]:
        return normals_from_words(_stream_blocks(data, 0, n_normal)[0]), uniforms(data)

    if not private:
        return bulk(data)

    def tails(data: Any) -> tuple[jax.Array, jax.Array]:
        return _normals_with_tails(*_stream_blocks(data, 0, n_normal)), uniforms(data)

    extreme = jnp.any(_extreme_cells(_stream_blocks(data, 0, n_normal)[0]))
    return lax.cond(_anywhere(extreme), tails, bulk, data)


def _threefry_words(data: Any, n: int, start: int, count: int) -> jax.Array:
    """``u32[count, *batch]``: the words ``start .. start + count - 1`` of ``threefry_2x32(key,
    arange(n))`` for the threefry keys ``data`` (their words ``(k0, k1)``, each
    ``u32[*batch]``). jax pairs the first half of the counters with the second (an odd count
    padded with a zero) and returns the blocks' first outputs, then their second: each word here
    hashes its own block and keeps its output, so no concatenation or slice stands between the
    hash and the code that reads the words."""
    batch = jnp.broadcast_shapes(*(jnp.shape(row) for row in data[:2]))
    half = (n + 1) // 2
    index = np.arange(start, start + count)
    first = np.where(index < half, index, index - half)
    second = np.where(first + half == n, 0, first + half)
    shape = (count,) + (1,) * len(batch)

    def counters(values: np.ndarray) -> jax.Array:
        return jnp.broadcast_to(values.astype(np.uint32).reshape(shape), (count, *batch))

    outputs = _threefry_blocks(data[0], data[1], counters(first), counters(second))
    return jnp.where((index >= half).reshape(shape), outputs[1], outputs[0])


def _threefry_draws(data: Any, n_normal: int, n_uniform: int) -> tuple[jax.Array, jax.Array]:
    """:func:`normals_and_uniforms` of the threefry keys ``data`` (as :func:`_threefry_words`)."""
    n = n_normal + n_uniform
    normals = normals_from_words(_threefry_words(data, n, 0, n_normal))
    return normals, _unit_uniform(_threefry_words(data, n, n_normal, n_uniform))


def private_normals_and_uniforms(
    key: jax.Array, n_normal: int, n_uniform: int
) -> tuple[jax.Array, jax.Array]:
    """:func:`normals_and_uniforms` with the normals' tails reaching
    :data:`PRIVATE_NORMAL_REACH` standard deviations instead of 5.17: the same draws but in the
    uniform's two extreme cells (probability 2^-22 per normal), for one more word per normal.

    Within its reach every tail probability is resolved to 2^-64; what lies beyond (probability
    below 2^-65 on each side) is never drawn, which :func:`normal_reach_mass` states for the
    privacy guarantee. (As for any floating-point Gaussian, the f32 grid of the draws is not
    modelled.)"""
    if _is_stream(key):  # a normal's refinement is its block's companion
        return _client_minor(_stream_draws, (n_normal, n_uniform, True), _STREAM_GATE, 2)(
            jax.random.key_data(key)
        )
    all_words = random_words(key, n_normal + n_uniform)
    words, uniform_words = all_words[:n_normal], all_words[n_normal:]
    refinements = _words_after(key, n_normal + n_uniform, n_normal)
    return _private_normals_from_words(words, refinements), _unit_uniform(uniform_words)


def private_normals(key: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
    """``N(0, 1)`` of ``shape`` (cast to ``dtype``) for a private release: the normals of
    :func:`private_normals_and_uniforms`, whose tails reach :data:`PRIVATE_NORMAL_REACH`
    standard deviations (``jax.random.normal`` stops near 5.4). Two words per normal."""
    normals, _ = private_normals_and_uniforms(key, int(np.prod(shape)), 0)
    return normals.reshape(shape).astype(dtype)


def normal_reach_mass(shift: float) -> float:
    """Host: ``Q(PRIVATE_NORMAL_REACH - shift)``, an upper bound on the probability that one
    coordinate of ``mean + N(0, 1)`` noise (drawn by :func:`private_normals_and_uniforms`) lands
    where the same noise around ``mean -+ shift`` never reaches."""
    from statistics import NormalDist

    return NormalDist().cdf(shift - PRIVATE_NORMAL_REACH)


def _reduce_to_span(higher: jax.Array, lower: jax.Array, span: jax.Array) -> jax.Array:
    """``(higher 2^32 + lower) mod span`` in uint32 arithmetic (jax.random.randint's reduction):
    integers in ``[0, span)`` with bias of order ``span / 2^64``."""
    span = jnp.asarray(span, jnp.uint32)
    multiplier = lax.rem(jnp.uint32(2**16), span)
    multiplier = lax.rem(multiplier * multiplier, span)
    return lax.rem(lax.rem(higher, span) * multiplier + lax.rem(lower, span), span)


def integers_and_normals(
    key: jax.Array, n_integer: int, span: jax.Array, n_normal: int
) -> tuple[jax.Array, jax.Array]:
    """``(U{0..span-1}: i32[n_integer], N(0, 1): f32[n_normal])``, independent, from one key (two
    words per integer, as ``jax.random.randint``; the normals are private ones, tails reaching
    :data:`PRIVATE_NORMAL_REACH`, two words each)."""
    if _is_stream(key):
        higher = _stream_range(key, 0, n_integer)[0]
        lower = _stream_range(key, n_integer, n_integer)[0]
        words, refinements = _stream_range(key, 2 * n_integer, n_normal)
    else:
        all_words = random_words(key, 2 * n_integer + n_normal)
        higher, lower = all_words[:n_integer], all_words[n_integer : 2 * n_integer]
        words = all_words[2 * n_integer :]
        refinements = _words_after(key, 2 * n_integer + n_normal, n_normal)
    integers = _reduce_to_span(higher, lower, span)
    return integers.astype(jnp.int32), _private_normals_from_words(words, refinements)


# ----------------------------------------------------------------------------- exact Bernoulli
#
# A Bernoulli(p) draw as ``U < T / 2^64`` on a 64-bit uniform integer ``U`` (two words) and a
# 64-bit threshold ``T`` (two words, high then low): its probability is exactly ``T / 2^64``, so
# a randomizer that keeps every threshold inside ``[G, 2^64 - G]`` has output probabilities
# whose ratio is at most ``(2^64 - G) / G``, exactly, whatever rounding happened before. The high
# word is the word ``jax.random.uniform(key, shape)`` reads, so ``U < T`` and ``uniform < p``
# decide alike except when U falls in the one 2^-23-wide cell that holds ``p``.

# a 64-bit threshold as (high word, low word): device arrays, or numpy constants
Threshold = tuple[Any, Any]  # u32 words: jax.Array, or np.uint32 constants

TWO_32 = 2.0**32
TWO_64 = 2.0**64
LOG_TWO_64 = 64.0 * float(np.log(2.0))


def bernoulli_words(key: jax.Array, shape: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
    """``(high, low): u32[*shape]`` each, the 64-bit uniform integer of every draw from one key.

    ``high`` is ``jax.random.bits(key, shape)`` (the word ``jax.random.uniform`` uses): a
    stream's words, with their blocks' companions as ``low`` (one block per draw); under jax's
    default partitionable threefry, ``low`` comes from the following counters."""
    if _is_stream(key):
        high, low = _stream_range(key, 0, int(np.prod(shape)))
        return high.reshape(shape), low.reshape(shape)
    words = jax.random.bits(key, (2, *shape), jnp.uint32)
    return words[0], words[1]


def threshold_floor(scaled: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``floor(scaled)`` as a 64-bit ``(high, low)`` pair, for f32 ``scaled`` in ``[0, 2^64)``.

    Exact: ``scaled / 2^32`` and the remainder are exact in f32 (a power-of-two scaling and the
    low part of one f32 mantissa)."""
    scaled = jnp.clip(scaled, 0.0, np.float32(np.nextafter(np.float32(TWO_64), np.float32(0))))
    high = jnp.floor(scaled * np.float32(1.0 / TWO_32))
    low = jnp.floor(scaled - high * np.float32(TWO_32))
    return high.astype(jnp.uint32), low.astype(jnp.uint32)


def threshold_add_one(threshold: Threshold) -> tuple[jax.Array, jax.Array]:
    """``T + 1`` with the carry (``T < 2^64 - 1``)."""
    high, low = threshold
    low = low + jnp.uint32(1)
    return high + (low == 0).astype(jnp.uint32), low


def threshold_complement(threshold: Threshold) -> tuple[jax.Array, jax.Array]:
    """``2^64 - T`` for ``1 <= T <= 2^64 - 1``: the threshold of the complementary event."""
    high, low = threshold
    return threshold_add_one((~high, ~low))


def threshold_less(a: Threshold, b: Threshold) -> jax.Array:
    """``a < b`` for 64-bit ``(high, low)`` pairs."""
    return (a[0] < b[0]) | ((a[0] == b[0]) & (a[1] < b[1]))


def threshold_clip(
    threshold: Threshold,
    low: Threshold,
    high: Threshold,
) -> tuple[jax.Array, jax.Array]:
    """``min(max(threshold, low), high)`` on 64-bit pairs."""

    def pick(condition, a, b):
        return jnp.where(condition, a[0], b[0]), jnp.where(condition, a[1], b[1])

    raised = pick(threshold_less(threshold, low), low, threshold)
    return pick(threshold_less(high, raised), high, raised)


def threshold_value(threshold: Threshold) -> np.ndarray:
    """Host: the exact integer ``T`` of a pair (Python ints in an object array), for checks."""
    high = np.asarray(threshold[0]).astype(object)
    low = np.asarray(threshold[1]).astype(object)
    return high * (1 << 32) + low


def floor_threshold(epsilon: jax.Array | float) -> tuple[jax.Array, jax.Array]:
    """The least threshold ``G`` of an eps-LDP binary randomizer: ``G / 2^64 >= 1 / (e^eps + 1)``
    guaranteed, and at most ``2^63``.

    ``log(2^64 / (e^eps + 1)) = 64 ln 2 - softplus(eps)`` is computed in f32 (no overflow at any
    eps) and raised by ``(16 + eps) 2^-21``, which bounds in the log domain the rounding of eps to
    f32 (eps 2^-24), softplus (2 ulps: 4 eps 2^-24), the constant and the subtraction (half an ulp
    of 44 each: 64 2^-24) and exp (2 ulps: 4 2^-24) with room to spare; rounding up then adds one.
    So the probability is exact to ``(16 + eps) 2^-21`` relative (8e-6 at eps 1, 2.2e-5 at 30) for
    eps up to about 27 (where ``2^64 / (e^eps + 1) >= 2^24``), within one part in
    ``2^64 / (e^eps + 1)`` up to 44, and is ``2^-64`` beyond: a randomizer more private than
    claimed, never less.
    """
    epsilon = jnp.asarray(epsilon, jnp.float32)
    log_scaled = np.float32(LOG_TWO_64) - jax.nn.softplus(epsilon)
    raised = log_scaled + (np.float32(16.0) + epsilon) * np.float32(2.0**-21)
    scaled = jnp.exp(jnp.minimum(raised, np.float32(63.0 * np.log(2.0))))
    return threshold_clip(threshold_add_one(threshold_floor(scaled)), ONE, HALF)


ONE = (np.uint32(0), np.uint32(1))  # the threshold 1: probability 2^-64
HALF = (np.uint32(2**31), np.uint32(0))  # the threshold 2^63: probability 1/2
