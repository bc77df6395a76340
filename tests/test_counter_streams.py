"""Counter-addressed client streams (``jfed._random.COUNTER``): the words a client key gives are
the threefry blocks ``(i + 1, j)`` of the round key, every ``jax.random`` function accepts the
key, derived keys open new streams, and the draws are standard normal and independent across
neighbouring client ids (KS tests at level 1e-4 with negative controls)."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.random import threefry_2x32
from scipy import stats

from jfed._random import (
    COUNTER,
    _threefry_blocks,
    bernoulli_words,
    normals_and_uniforms,
    private_normals,
    private_normals_and_uniforms,
    random_words,
    stream_key,
)
from jfed.engine.keys import client_key
from jfed.privacy.privatizers import GaussianNoise

LEVEL = 1e-4


def _round_key():
    return jax.random.fold_in(jax.random.key(7), 3)


def test_a_client_stream_is_the_threefry_blocks_of_its_id():
    """Independent reference: threefry_2x32 called on the blocks ``(i + 1, j)`` directly (it reads
    the first half of its counters as the blocks' high words, the second half as their low words,
    and returns the blocks' first outputs, then their second outputs). Word j is block j's first
    output; its companion (a 64-bit uniform's low half, a private normal's refinement) the
    second."""
    root = _round_key()
    client = 41
    key_words = tuple(jax.random.key_data(root))
    counters = jnp.array([client + 1] * 5 + [0, 1, 2, 3, 4], jnp.uint32)
    reference = np.asarray(threefry_2x32(key_words, counters))
    first, second = reference[:5], reference[5:]
    assert jax.random.key_impl(client_key(root, client)) == COUNTER

    @jax.jit
    def words(root):
        key = client_key(root, client)
        return {
            "words": random_words(key, 5),
            "bits": jax.random.bits(key, (5,), jnp.uint32),
            "bernoulli": bernoulli_words(key, (5,)),
            "stream key": random_words(stream_key(root, client), 5),
            "neighbour": random_words(client_key(root, client + 1), 5),
            "fold_in": random_words(jax.random.fold_in(root, client), 5),
        }

    drawn = jax.tree.map(np.asarray, words(root))
    assert np.array_equal(drawn["words"], first)
    assert np.array_equal(drawn["bits"], first)
    high, low = drawn["bernoulli"]
    assert np.array_equal(high, first) and np.array_equal(low, second)
    assert np.array_equal(drawn["stream key"], first)
    # negative control: a neighbour's stream and the root's own fold_in are other words
    assert not np.array_equal(drawn["neighbour"], first)
    assert not np.array_equal(drawn["fold_in"], first)


def test_the_fused_hash_is_threefry():
    """``_threefry_blocks`` (elementwise, fusable) against jax's threefry primitive on random
    keys and counters."""
    words = np.asarray(jax.random.bits(jax.random.key(11), (6, 1000), jnp.uint32))
    for k0, k1 in words[:2, :3].T:
        x0, x1 = words[2], words[3]
        reference = np.asarray(threefry_2x32((k0, k1), np.concatenate([x0, x1])))
        ours = np.concatenate(_threefry_blocks(jnp.uint32(k0), jnp.uint32(k1), x0, x1))
        assert np.array_equal(ours, reference)


def test_jax_random_accepts_stream_keys_and_derived_keys_open_new_streams():
    @jax.jit
    def draws(root):
        key = client_key(root, 5)
        first, second = jax.random.split(key)
        return {
            "normal": jax.random.normal(key, (4,)),
            "uniform": jax.random.uniform(key, (3,)),
            "randint": jax.random.randint(key, (3,), 0, 10),
            "words": [random_words(k, 8) for k in (key, first, second, jax.random.fold_in(key, 7))],
            "fold_in 1": random_words(jax.random.fold_in(key, 1), 8),
            "split again": random_words(jax.random.split(key)[1], 8),
        }

    drawn = jax.tree.map(np.asarray, draws(_round_key()))
    assert drawn["normal"].shape == (4,) and np.all(np.isfinite(drawn["normal"]))
    assert drawn["uniform"].shape == (3,) and drawn["randint"].shape == (3,)
    assert len({tuple(words) for words in drawn["words"]}) == 4
    second = drawn["words"][2]
    # as jax's partitionable threefry: split(key)[i] is fold_in(key, i)
    assert np.array_equal(drawn["fold_in 1"], second)
    # deterministic: the same address gives the same derived key
    assert np.array_equal(drawn["split again"], second)


def test_stream_key_of_another_impl_falls_back_to_fold_in():
    root = jax.random.key(3, impl="rbg")
    assert np.array_equal(
        jax.random.key_data(stream_key(root, 9)),
        jax.random.key_data(jax.random.fold_in(root, 9)),
    )


def test_client_streams_are_standard_normal_and_independent():
    root = _round_key()
    size = 100_000
    normals, _ = jax.jit(jax.vmap(lambda i: normals_and_uniforms(client_key(root, i), 2, 0)))(
        jnp.arange(size, dtype=jnp.int32)
    )
    normals = np.asarray(normals, np.float64)
    pooled = normals.reshape(-1)
    assert stats.kstest(pooled, "norm").pvalue > LEVEL
    assert stats.kstest(1.03 * pooled, "norm").pvalue < LEVEL  # negative control: scale
    # correlations of independent samples have standard error 1 / sqrt(n)
    bound = 4.5 / np.sqrt(size)
    assert abs(np.corrcoef(normals[:-1, 0], normals[1:, 0])[0, 1]) < bound
    assert abs(np.corrcoef(normals[:, 0], normals[:, 1])[0, 1]) < bound
    # negative control: a client reading its neighbour's stream is caught
    shifted = np.roll(normals[:, 0], 1)
    assert abs(np.corrcoef(shifted[1:], normals[:-1, 0])[0, 1]) > 0.99


@pytest.mark.parametrize("shape", [(7,), (3, 4)])
def test_gaussian_noise_draws_the_private_normals(shape):
    """Private releases draw tailed normals (two words each): GaussianNoise adds exactly
    ``scale * private_normals``, which equal private_normals_and_uniforms' normals."""
    size = int(np.prod(shape))

    @jax.jit
    def draws(root):
        key = client_key(root, 2)
        return (
            private_normals_and_uniforms(key, size, 0)[0],
            private_normals(key, shape),
            GaussianNoise().perturb(key, jnp.ones(shape), 2.0),
        )

    expected, normals, perturbed = map(np.asarray, draws(_round_key()))
    assert np.array_equal(normals.reshape(-1), expected)
    np.testing.assert_allclose(perturbed, 1.0 + 2.0 * expected.reshape(shape))


# ------------------------------------------------------------------ draws of a vmapped chunk
# Under vmap a chunk's draws are computed with the clients in the minor axis and, on CPU, held in
# memory once (jfed._random._client_minor): the numbers must be those of each client alone.

CHUNK_IDS = jnp.arange(0, 7 * 1001, 7, dtype=jnp.int32)  # 1,001 clients: not a multiple of 8


def _one_by_one(draw, make_key, ids):
    """Each client's draws computed alone (traceable: a loop over the clients, each traced
    without vmap, in the plain layout), stacked."""
    return jax.lax.map(lambda i: draw(make_key(i)), ids)


def _assert_same(batched, alone):
    for got, expected in zip(jax.tree.leaves(batched), jax.tree.leaves(alone), strict=True):
        assert got.shape == expected.shape
        assert np.array_equal(np.asarray(got), np.asarray(expected))


@pytest.mark.parametrize(
    "draw",
    [
        lambda k: normals_and_uniforms(k, 10, 1),
        # the same function with no uniform, and jax.random.normal's scalar: slow
        pytest.param(lambda k: normals_and_uniforms(k, 3, 0), marks=pytest.mark.slow),
        lambda k: private_normals_and_uniforms(k, 10, 1),
        # private_normals are the same draws reshaped (test_gaussian_noise_draws_...): slow
        pytest.param(lambda k: private_normals(k, (2, 5)), marks=pytest.mark.slow),
        lambda k: jax.random.normal(k, (3,)),
        pytest.param(lambda k: jax.random.normal(k), marks=pytest.mark.slow),
        lambda k: jax.random.bits(k, (2, 3), jnp.uint8),
        lambda k: jax.random.permutation(k, 5),
        lambda k: jax.random.uniform(jax.random.split(k)[1], (4,)),
    ],
    ids=["normals+uniform", "normals", "private+uniform", "private 2x5", "jax normal",
         "jax normal scalar", "jax bits u8 2x3", "jax permutation", "jax uniform of split"],
)  # fmt: skip
def test_a_vmapped_chunk_of_streams_draws_what_each_client_draws_alone(draw):
    root = _round_key()
    ids = CHUNK_IDS[:40]  # the reference runs one client at a time

    @jax.jit
    def draws(ids):
        def of(i):
            return draw(client_key(root, i))

        return (
            jax.vmap(of)(ids),
            _one_by_one(draw, partial(client_key, root), ids),
            jax.vmap(jax.vmap(of))(ids.reshape(5, 8)),  # a sweep over a chunk
        )

    batched, alone, nested = draws(ids)
    _assert_same(batched, alone)
    # nested vmap: the same numbers again
    _assert_same(jax.tree.map(lambda x: x.reshape(40, *x.shape[2:]), nested), batched)
    # negative control: each client's draws are not the next client's
    first_batched, first_alone = np.asarray(jax.tree.leaves(batched)[0]), jax.tree.leaves(alone)[0]
    assert not np.array_equal(first_batched[:-1], np.asarray(first_alone)[1:])


def _root_with(root, word, flip):
    """``root`` with its key word ``word`` (0 or 1) xor-ed with ``flip``."""
    words = jax.random.key_data(root)
    return jax.random.wrap_key_data(words.at[word].set(words[word] ^ flip.astype(jnp.uint32)))


MAKE_KEYS = {
    "three roots": lambda root, i: client_key(jax.random.fold_in(root, i % 3), i),
    "first root word differs": lambda root, i: client_key(_root_with(root, 0, i % 2), i),
    "second root word differs": lambda root, i: client_key(_root_with(root, 1, i % 2), i),
}
ROOTED_DRAWS = {
    "private+uniform": lambda k: private_normals_and_uniforms(k, 10, 1),
    "jax normal": lambda k: jax.random.normal(k, (3,)),
}


@pytest.mark.parametrize(
    "make_key, draw, sweep",
    [
        pytest.param(
            MAKE_KEYS[roots],
            ROOTED_DRAWS[draw],
            roots == "three roots",  # the sweep's claim is the same for every kind of roots
            id=f"{draw}-{roots}",
            # jax's normals through the roots that differ in one word: the branch the private
            # draws take there, reached by the normals of three roots (slow)
            marks=[pytest.mark.slow] if draw == "jax normal" and roots != "three roots" else [],
        )
        for draw in ROOTED_DRAWS
        for roots in MAKE_KEYS
    ],
)
def test_a_vmapped_chunk_of_streams_from_different_roots_draws_each_clients_own(
    make_key, draw, sweep
):
    """A chunk whose streams do not share their root (a user vmapping over keys of their own)
    takes the branch that reads every root word per client: the numbers are still each client's
    alone. (On CPU a chunk sharing its root is hashed under the root as scalars; a test of only
    one root word would send the last two cases there and fail here.) With three roots, also a
    sweep of such a chunk beside one that shares its root."""
    root = _round_key()
    ids = CHUNK_IDS[:24]

    @jax.jit
    def draws(ids):
        drawn = {
            "batched": jax.vmap(lambda i: draw(make_key(root, i)))(ids),
            "alone": _one_by_one(draw, partial(make_key, root), ids),
            "shared": jax.vmap(lambda i: draw(client_key(root, i)))(ids),
        }
        if sweep:  # a sweep of a chunk that shares its root beside one that does not
            drawn["swept"] = jax.vmap(
                lambda is_mixed: jax.vmap(
                    lambda i: draw(jax.lax.cond(is_mixed, make_key, client_key, root, i))
                )(ids)
            )(jnp.array([False, True]))
        return drawn

    drawn = draws(ids)
    batched, shared = drawn["batched"], drawn["shared"]
    _assert_same(batched, drawn["alone"])
    # negative control: the same ids under the shared root draw other numbers
    assert not np.array_equal(jax.tree.leaves(shared)[0], jax.tree.leaves(batched)[0])
    if sweep:
        # each chunk keeps its draws (both take the branch for any roots; a test of any chunk
        # instead of every one would not)
        _assert_same(jax.tree.map(lambda x: x[0], drawn["swept"]), shared)
        _assert_same(jax.tree.map(lambda x: x[1], drawn["swept"]), batched)


def test_a_sweep_over_roots_of_vmapped_chunks_draws_each_clients_own():
    """A sweep (an outer vmap over runs' roots) of chunks that share their run's root: the root
    test is reduced over the runs and the chunk is hashed under each run's own root; each client
    still draws its own numbers (negative control: another run's draws are not these)."""
    roots = jax.random.split(_round_key(), 3)
    ids = CHUNK_IDS[:16]

    def draw(key):
        return normals_and_uniforms(key, 10, 1)

    swept, alone = jax.jit(
        lambda roots: (
            jax.vmap(lambda r: jax.vmap(lambda i: draw(client_key(r, i)))(ids))(roots),
            [_one_by_one(draw, partial(client_key, roots[run]), ids) for run in range(3)],
        )
    )(roots)
    for run in range(3):
        _assert_same(jax.tree.map(lambda x, run=run: x[run], swept), alone[run])
    assert not np.array_equal(np.asarray(swept[0][1]), np.asarray(swept[0][0]))


@pytest.mark.parametrize(
    "n_normal, n_uniform",
    # odd and even counts, with uniforms; a single normal (odd, as 11) is slow
    [(11, 0), (10, 0), (4, 3), pytest.param(1, 0, marks=pytest.mark.slow)],
)
def test_a_vmapped_chunk_of_threefry_keys_draws_jax_threefry_words(n_normal, n_uniform):
    """A procedural population's draws (threefry keys from ``fold_in``): the words of a vmapped
    chunk are jax's ``threefry_2x32(key, arange(n))`` for each client, odd n included (jax pads
    its counters), transformed as ``jax.random.normal`` and ``uniform`` do."""
    root = _round_key()
    ids = CHUNK_IDS[:24]
    n = n_normal + n_uniform

    def reference(i):
        """jax's words for client ``i`` alone, transformed as jax.random does."""
        words = threefry_2x32(
            tuple(jax.random.key_data(jax.random.fold_in(root, i))),
            jnp.arange(n, dtype=jnp.uint32),
        )
        unit = jax.lax.bitcast_convert_type((words >> 9) | 0x3F800000, jnp.float32) - 1.0
        normal = np.sqrt(np.float32(2.0)) * jax.lax.erf_inv(
            jnp.maximum(np.nextafter(np.float32(-1.0), np.float32(0.0)), 2.0 * unit - 1.0)
        )
        return normal[:n_normal], unit[n_normal:]

    @jax.jit
    def draws(ids):
        batched = jax.vmap(
            lambda i: normals_and_uniforms(jax.random.fold_in(root, i), n_normal, n_uniform)
        )(ids)
        # negative control: the words of the first client's neighbour
        neighbour = normals_and_uniforms(jax.random.fold_in(root, ids[0] + 1), n_normal, n_uniform)
        return batched, jax.lax.map(reference, ids), neighbour

    (normals, uniforms), (expected_normals, expected_uniforms), other = draws(ids)
    assert np.array_equal(normals, expected_normals) and np.array_equal(uniforms, expected_uniforms)
    assert not np.array_equal(np.asarray(other[0]), np.asarray(normals[0]))


def _client_with_an_extreme_cell(root, n_normal):
    """The first client id whose first ``n_normal`` words hold a uniform in an extreme 2^-23 cell
    (probability about n_normal 2^-22 per client: found within a few million ids)."""
    k0, k1 = jax.random.key_data(root)
    step = 1 << 20

    @jax.jit
    def extreme_rows(start):
        ids = start + jnp.arange(step, dtype=jnp.uint32)
        words = _threefry_blocks(
            k0, k1, (ids + 1)[:, None], jnp.arange(n_normal, dtype=jnp.uint32)[None, :]
        )[0]
        cells = words >> 9
        return jnp.any((cells == 0) | (cells == 2**23 - 1), axis=1)

    for start in range(0, 64 * step, step):
        rows = np.flatnonzero(np.asarray(extreme_rows(jnp.uint32(start))))
        if rows.size:
            return start + int(rows[0])
    raise AssertionError("no extreme cell in 2^26 clients")


@pytest.fixture(scope="module")
def extreme():
    """The first client of the round key whose 10 private normals' words hold an extreme cell."""
    return _client_with_an_extreme_cell(_round_key(), 10)


def test_a_vmapped_chunk_with_an_extreme_cell_draws_its_tail(extreme):
    """The tail branch of a chunk's private normals (taken when any word of the chunk lies in an
    extreme cell): every client's draws are still its own, and the extreme one lies beyond the
    bulk transform's reach (5.17 standard deviations) or on its edge's refined side."""
    root = _round_key()
    # the extreme client's chunk, and a chunk beside it that drew no extreme cell
    chunks = jnp.stack(
        [extreme - 3 + jnp.arange(8, dtype=jnp.int32), jnp.arange(8, dtype=jnp.int32)]
    )

    def draw(key):
        return private_normals_and_uniforms(key, 10, 1)

    @jax.jit
    def draws(chunks):
        def alone(ids):
            return _one_by_one(draw, partial(client_key, root), ids)

        return (
            jax.vmap(lambda i: draw(client_key(root, i)))(chunks[0]),
            alone(chunks[0]),
            alone(chunks[1]),
            jax.vmap(jax.vmap(lambda i: draw(client_key(root, i))))(chunks),
            normals_and_uniforms(client_key(root, extreme), 10, 0)[0],
        )

    batched, alone, alone_beside, swept, plain = jax.tree.map(np.asarray, draws(chunks))
    _assert_same(batched, alone)
    tailed = batched[0][3]
    differs = tailed != plain  # the refined words, and only those
    assert differs.sum() >= 1 and np.all(np.abs(tailed[differs]) > 5.0)
    assert np.array_equal(tailed[~differs], plain[~differs])
    # a sweep of the two chunks, only one of which drew an extreme cell: each keeps its own draws
    # (the tail branch runs for both; a test of every chunk instead of any would send the
    # extreme chunk down the bulk branch)
    _assert_same(jax.tree.map(lambda x: x[0], swept), batched)
    _assert_same(jax.tree.map(lambda x: x[1], swept), alone_beside)


def test_private_normals_are_the_same_on_every_backend(both_branches, extreme):
    """The branches other backends than the CPU lower (no draws held in memory by a conditional),
    forced here: a chunk with an extreme cell (its tail computed) and the chunk beside it, vmapped
    and swept, draw the same words."""
    root = _round_key()
    ids = jnp.stack([extreme - 3 + jnp.arange(8, dtype=jnp.int32), jnp.arange(8, dtype=jnp.int32)])

    draw = jax.vmap(lambda i: private_normals_and_uniforms(client_key(root, i), 10, 1))
    swept_and_one = jax.jit(lambda ids: (jax.vmap(draw)(ids), draw(ids[0])))

    def compute():
        return swept_and_one(ids)

    on_cpu, elsewhere = both_branches(compute)
    _assert_same(elsewhere, on_cpu)
    # negative control: the extreme client's tail was drawn (a bulk-only branch would miss it)
    assert np.abs(elsewhere[1][0][3]).max() > 5.0
