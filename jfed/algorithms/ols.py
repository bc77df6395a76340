"""Non-private ordinary least squares through the same engine: the reference line.

Clients send ``(x_i, y_i)`` in the clear, the server solves ``(S + lambda I) theta = b``. Runs on
procedural populations of any size (only ``d x d`` statistics are kept).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jfed._validation import check_int_range
from jfed.algorithms.linear import second_moments


class State(NamedTuple):
    """``theta: f32[d]`` and the ridge ``lambda`` (0 for plain OLS)."""

    theta: jax.Array
    ridge: jax.Array


def client_message(broadcast, record, key):
    """The raw record as a message ``(x, y, clipped=0)``."""
    del broadcast, key
    x, y = record
    return x, y, jnp.zeros((), x.dtype)


@dataclass(frozen=True)
class LeastSquares:
    """OLS (ridge when ``hyperparams`` is > 0) from one pass over the clients."""

    dim: int

    def __post_init__(self) -> None:
        check_int_range("dim", self.dim, 1, 10**6)

    def init(self, ridge: jax.Array, key: jax.Array) -> State:
        del key
        return State(jnp.zeros(self.dim, jnp.float32), jnp.asarray(ridge, jnp.float32))

    def round(self, state: State, hyper: jax.Array, key: jax.Array, clients):
        del hyper, key
        stats = clients.sum(client_message, None, second_moments)
        S = stats.zz / stats.count + state.ridge * jnp.eye(self.dim, dtype=stats.zz.dtype)
        theta = jnp.linalg.solve(S, stats.zy / stats.count)
        return State(theta, state.ridge), theta
