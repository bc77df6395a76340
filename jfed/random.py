"""Draws for an algorithm's clients: named streams of a client's key, and fast draws from them.

The engine hands client i of round t its own counter-addressed stream
(:func:`jfed.engine.keys.client_key`). Ask that key for **named streams** rather than splitting
it: ``named(key, "noise")`` and ``named(key, "phase")`` are two independent streams of the
client, the same whatever the chunk, block or device the client runs in, and adding a third
stream later changes neither. Then draw what a stream is for::

    def client_message(broadcast, record, key):
        x, y = record
        phase = jfed.random.uniform(jfed.random.named(key, "phase"), (1,))
        noise = jfed.random.private_normal(jfed.random.named(key, "noise"), x.shape)
        ...

Under the engine's ``vmap`` these draws are computed for a whole chunk of clients at once with
the clients along the vectorised axis and, on CPU, held in memory once: 10 normals for each of
10^6 clients in chunks of 4,096 took a third of the time of ``jax.random.normal`` on the same
keys (``bench/draws.py``, ``bench/results/draws_cpu.json``). The numbers are the same vmapped
or not, in any chunk. ``jax.random`` functions accept every key here too (at their own speed).

A stream's words are addressed by (stream, word index): ``normal(k, (10,))`` and
``normal(k, (20,))`` share their first 10 values, so draw all of a stream's values in one call,
or use one name per purpose.
"""

from __future__ import annotations

import zlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jfed._random import (
    PRIVATE_NORMAL_REACH,
    normals_and_uniforms,
    private_normals,
    stream_key,
)


def _stream_number(name: str) -> int:
    if not isinstance(name, str) or not name:
        raise ValueError(f"expected a stream name, a non-empty str, got {name!r}")
    # a fixed hash of the name (Python's hash() changes between processes)
    return zlib.crc32(name.encode("utf-8"))


def named(key: jax.Array, name: str) -> jax.Array:
    """The stream ``name`` of ``key``: a key independent of ``key``'s other named streams and of
    its own words.

    Args:
      key: a client's key from the engine (or any ``jax.random`` key).
      name: the stream's name (``"noise"``, ``"phase"``, ``"batch"``); the same name always
        opens the same stream of a key. Names are told apart by a 32-bit hash (CRC-32): two
        names of one key collide with probability 2^-32.

    Returns:
      A typed key of the same implementation, ``fold_in(key, crc32(name))``. For a client's
      stream one threefry block hashes its address, whatever the batching.
    """
    return jax.random.fold_in(key, np.uint32(_stream_number(name)))


def _count(shape: tuple[int, ...]) -> int:
    shape = tuple(shape)
    if any(not isinstance(size, (int, np.integer)) or size < 0 for size in shape):
        raise ValueError(f"expected a shape of non-negative ints, got {shape!r}")
    return int(np.prod(shape))


def normal(key: jax.Array, shape: tuple[int, ...] = (), dtype: Any = jnp.float32) -> jax.Array:
    """Standard normals of ``shape`` from ``key``'s stream: ``sqrt(2) erfinv(2u - 1)`` on one
    23-bit uniform ``u`` per value, as ``jax.random.normal`` transforms it (so values stop near
    5.4 standard deviations; for a private release use :func:`private_normal`).

    ``shape``: static ints; the values are f32 cast to ``dtype``."""
    normals, _ = normals_and_uniforms(key, _count(shape), 0)
    return normals.reshape(shape).astype(dtype)


def private_normal(
    key: jax.Array, shape: tuple[int, ...] = (), dtype: Any = jnp.float32
) -> jax.Array:
    """Standard normals of ``shape`` for a private release (Gaussian noise): the values of
    :func:`normal` except in the uniform's two extreme cells, which are refined by a second word
    so that the tails reach ``PRIVATE_NORMAL_REACH`` (9) standard deviations, each tail
    probability resolved to 2^-64. Two words per value. :class:`jfed.privacy.GaussianNoise` and
    ``gaussian_noise_tree`` draw these."""
    _count(shape)
    return private_normals(key, tuple(shape), dtype)


def uniform(key: jax.Array, shape: tuple[int, ...] = (), dtype: Any = jnp.float32) -> jax.Array:
    """``U[0, 1)`` of ``shape`` from ``key``'s stream (23-bit, as ``jax.random.uniform``)."""
    _, uniforms = normals_and_uniforms(key, 0, _count(shape))
    return uniforms.reshape(shape).astype(dtype)


__all__ = [
    "PRIVATE_NORMAL_REACH",
    "named",
    "normal",
    "private_normal",
    "stream_key",
    "uniform",
]
