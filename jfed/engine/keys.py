"""Counter-based key derivation: every random draw has a fixed address.

A run key is split once into an init key, a server stream and a client stream. Then

- key of the algorithm's init: ``init_key``
- server key of round t:      ``fold_in(server_root, t)``
- key of client i in round t: stream ``i`` of ``fold_in(client_root, t)``: the threefry blocks
  ``(i + 1, j)``, j = 0, 1, ..., under that round key (:func:`jfed._random.stream_key`)
- cohort key of round t:      ``fold_in(fold_in(client_root, t), COHORT_STREAM)``

Client ids are below 2^31 and ``COHORT_STREAM = 2^32 - 1`` is not, so the cohort's draw never
shares a key with a client, and it depends only on the run and the round.

No key is ever split by the number of clients in a block, so a client's randomness does not
depend on block size, client order or device count. Inside a client, the key is split further into
named streams (e.g. phases and noise); one key, one use.
"""

from __future__ import annotations

import jax
import numpy as np

from jfed._random import stream_key

COHORT_STREAM = np.uint32(2**32 - 1)
"""The word folded into a round's client root for its cohort draw (no client id is this big)."""


def run_streams(run_key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(init_key, server_root, client_root)`` of a run."""
    init_key, server_root, client_root = jax.random.split(run_key, 3)
    return init_key, server_root, client_root


def round_key(root: jax.Array, round_index: jax.Array | int) -> jax.Array:
    """The key of round ``round_index`` in the stream ``root``."""
    return jax.random.fold_in(root, round_index)


def client_key(round_client_root: jax.Array, client_id: jax.Array | int) -> jax.Array:
    """The key of one client in one round: the counter-addressed stream ``client_id`` of the
    round's client root (:func:`jfed._random.stream_key`; opened without a hash)."""
    return stream_key(round_client_root, client_id)


def cohort_key(round_client_root: jax.Array) -> jax.Array:
    """The key of one round's cohort draw (:func:`jfed.engine.cohort.draw_cohort`)."""
    return jax.random.fold_in(round_client_root, COHORT_STREAM)


def as_key(seed_or_key: int | jax.Array) -> jax.Array:
    """A typed PRNG key from an int seed (or the key itself)."""
    if isinstance(seed_or_key, int):
        return jax.random.key(seed_or_key)
    return seed_or_key
