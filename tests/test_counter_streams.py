"""Counter-addressed client streams (``jfed._random.COUNTER``): the words a client key gives are
the threefry blocks ``(i + 1, j)`` of the round key, every ``jax.random`` function accepts the
key, derived keys open new streams, and the draws are standard normal and independent across
neighbouring client ids (KS tests at level 1e-4 with negative controls)."""

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
    key = client_key(root, client)
    assert jax.random.key_impl(key) == COUNTER
    assert np.array_equal(random_words(key, 5), first)
    assert np.array_equal(jax.random.bits(key, (5,), jnp.uint32), first)
    high, low = bernoulli_words(key, (5,))
    assert np.array_equal(high, first) and np.array_equal(low, second)
    assert np.array_equal(random_words(key, 5), random_words(stream_key(root, client), 5))
    # negative control: a neighbour's stream and the root's own fold_in are other words
    assert not np.array_equal(random_words(client_key(root, client + 1), 5), first)
    assert not np.array_equal(random_words(jax.random.fold_in(root, client), 5), first)


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
    key = client_key(_round_key(), 5)
    normals = jax.random.normal(key, (4,))
    assert normals.shape == (4,) and np.all(np.isfinite(normals))
    assert jax.random.uniform(key, (3,)).shape == (3,)
    assert jax.random.randint(key, (3,), 0, 10).shape == (3,)
    first, second = jax.random.split(key)
    folded = jax.random.fold_in(key, 7)
    words = {tuple(np.asarray(random_words(k, 8))) for k in (key, first, second, folded)}
    assert len(words) == 4
    # as jax's partitionable threefry: split(key)[i] is fold_in(key, i)
    assert np.array_equal(random_words(jax.random.fold_in(key, 1), 8), random_words(second, 8))
    # deterministic: the same address gives the same derived key
    assert np.array_equal(random_words(jax.random.split(key)[1], 8), random_words(second, 8))


def test_stream_key_of_another_impl_falls_back_to_fold_in():
    root = jax.random.key(3, impl="rbg")
    assert np.array_equal(
        jax.random.key_data(stream_key(root, 9)),
        jax.random.key_data(jax.random.fold_in(root, 9)),
    )


def test_client_streams_are_standard_normal_and_independent():
    root = _round_key()
    size = 100_000
    keys = jax.vmap(lambda i: client_key(root, i))(jnp.arange(size, dtype=jnp.int32))
    normals, _ = jax.vmap(lambda k: normals_and_uniforms(k, 2, 0))(keys)
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
    key = client_key(_round_key(), 2)
    size = int(np.prod(shape))
    expected, _ = private_normals_and_uniforms(key, size, 0)
    assert np.array_equal(private_normals(key, shape).reshape(-1), expected)
    x = jnp.ones(shape)
    np.testing.assert_allclose(
        GaussianNoise().perturb(key, x, 2.0), 1.0 + 2.0 * np.asarray(expected).reshape(shape)
    )
