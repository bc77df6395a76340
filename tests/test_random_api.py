"""The public draws of ``jfed.random``: named streams are fixed, distinct and independent of the
batching; the draws are standard normal / uniform (KS tests at level 1e-4 with negative
controls) and the same vmapped as alone."""

import zlib
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import jfed.random as jr
from jfed._random import PRIVATE_NORMAL_REACH, private_normals
from jfed.engine.keys import client_key

LEVEL = 1e-4


def _root():
    return jax.random.fold_in(jax.random.key(21), 4)


# the draws as a user's jitted code makes them (one program per shape, not one per operation)
_normal = jax.jit(jr.normal, static_argnums=(1, 2))
_uniform = jax.jit(jr.uniform, static_argnums=(1, 2))
_private_normal = jax.jit(jr.private_normal, static_argnums=(1, 2))


def test_a_named_stream_is_fixed_and_apart_from_the_others():
    key = client_key(_root(), 17)
    noise = _normal(jr.named(key, "noise"), (6,))
    assert np.array_equal(noise, _normal(jr.named(key, "noise"), (6,)))  # the same name
    # negative controls: another name, another client, the key's own words
    for other in (jr.named(key, "phase"), jr.named(client_key(_root(), 18), "noise"), key):
        assert not np.array_equal(_normal(other, (6,)), noise)
    # a stream's words are addressed by index: a longer draw extends a shorter one
    assert np.array_equal(_normal(jr.named(key, "noise"), (9,))[:6], noise)
    # names are hashed by a fixed function (CRC-32), not by Python's per-process hash()
    assert np.array_equal(
        jax.random.key_data(jr.named(key, "noise")),
        jax.random.key_data(jax.random.fold_in(key, np.uint32(zlib.crc32(b"noise")))),
    )


@pytest.mark.parametrize("bad", ["", None, 3])
def test_a_stream_name_must_be_a_nonempty_string(bad):
    with pytest.raises(ValueError, match="stream name"):
        jr.named(client_key(_root(), 0), bad)


def test_shapes_must_be_static_nonnegative_ints():
    with pytest.raises(ValueError, match="non-negative ints"):
        jr.normal(client_key(_root(), 0), (3, -1))
    with pytest.raises(ValueError, match="non-negative ints"):
        jr.uniform(client_key(_root(), 0), (2.5,))
    with pytest.raises(ValueError, match="non-negative ints"):
        jr.private_normal(client_key(_root(), 0), (-2,))


def _draws(i, root):
    key = client_key(root, i)
    return (
        jr.uniform(jr.named(key, "phase"), (2,)),
        jr.normal(jr.named(key, "data"), (3,)),
        jr.private_normal(jr.named(key, "noise"), (2, 2)),
    )


CLIENTS = 20_000


@pytest.fixture(scope="module")
def batched():
    """The draws of clients ``0 .. CLIENTS - 1`` under one ``vmap``: ``(f32[CLIENTS, 2],
    f32[CLIENTS, 3], f32[CLIENTS, 2, 2])``."""
    ids = jnp.arange(CLIENTS, dtype=jnp.int32)
    return jax.jit(jax.vmap(partial(_draws, root=_root())))(ids)


def test_vmapped_draws_are_each_clients_own(batched):
    alone = jax.jit(partial(_draws, root=_root()))
    for i in range(5, 5 + 24):
        for got, expected in zip(batched, alone(jnp.int32(i)), strict=True):
            assert np.array_equal(got[i], expected)
    # negative control: a neighbour's draws
    assert not np.array_equal(batched[1][5], alone(jnp.int32(6))[1])


def test_the_draws_are_standard_normal_and_uniform(batched):
    uniforms, normals, private = batched
    for sample in (np.ravel(normals), np.ravel(private)):
        sample = np.asarray(sample, np.float64)
        assert stats.kstest(sample, "norm").pvalue > LEVEL
        assert stats.kstest(1.04 * sample, "norm").pvalue < LEVEL  # negative control: scale
    uniforms = np.asarray(uniforms, np.float64).ravel()
    assert stats.kstest(uniforms, "uniform").pvalue > LEVEL
    assert stats.kstest(uniforms**1.05, "uniform").pvalue < LEVEL  # negative control
    assert np.all((uniforms >= 0.0) & (uniforms < 1.0))
    # independence across the streams of one client: correlation within 4.5 standard errors
    bound = 4.5 / np.sqrt(CLIENTS)
    assert abs(np.corrcoef(np.asarray(normals)[:, 0], np.asarray(private)[:, 0, 0])[0, 1]) < bound


def test_private_normal_is_the_privatizers_draw():
    """``jfed.random.private_normal`` is the draw of GaussianNoise (tails to 9 standard
    deviations), cast to the asked dtype."""
    key = client_key(_root(), 3)
    assert PRIVATE_NORMAL_REACH == jr.PRIVATE_NORMAL_REACH == 9.0
    expected = jax.jit(private_normals, static_argnums=1)(key, (4, 3))
    assert np.array_equal(_private_normal(key, (4, 3)), expected)
    assert _private_normal(key, (2,), jnp.bfloat16).dtype == jnp.bfloat16
    assert _normal(key).shape == () and _uniform(key, (0,)).shape == (0,)


def test_draws_accept_other_keys():
    """A threefry key (e.g. a server's round key) and another implementation's key."""
    for key in (jax.random.key(4), jax.random.key(4, impl="rbg")):
        sample = np.asarray(_normal(jr.named(key, "x"), (20_000,)), np.float64)
        assert stats.kstest(sample, "norm").pvalue > LEVEL
        assert _uniform(key, (3,)).shape == (3,)
