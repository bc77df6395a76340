"""Client populations: who the clients are and how a block of them is fetched on device.

A population answers one question for the engine: given a vector of client ids, return their
records. Two kinds exist:

- :class:`ArrayClients` holds every record in device arrays (real data sets).
- :class:`SyntheticLinear` holds only a key and a parameter vector; client ``i``'s record is
  generated on device from ``fold_in(data_key, i)``, so 10^8 clients need no host memory and any
  client is reproducible on its own.

Both are pytrees (``jax.tree_util.register_dataclass``) whose client count is static metadata, so a
jitted program is specialised to the population size but not to its values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from jfed._random import normals_and_uniforms
from jfed._validation import check_finite_array, check_int_range, check_nonnegative

Record = Any
"""What ``population.record(i)`` hands a client function: ``(x, y)`` of a one-record client, or
a view of a silo's or a federated client's records (``SiloView``, ``ClientRecords``)."""


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class ArrayClients:
    """One record ``(x_i, y_i)`` per client, held in arrays.

    Attributes:
      features: ``X: f32[n, d]``.
      targets: ``y: f32[n]``.
    """

    features: jax.Array
    targets: jax.Array

    @classmethod
    def from_numpy(cls, features: np.ndarray, targets: np.ndarray) -> ArrayClients:
        """Validate host arrays (finite, matching lengths) and move them to the device as f32."""
        features = check_finite_array("features", np.asarray(features, dtype=np.float64))
        targets = check_finite_array("targets", np.asarray(targets, dtype=np.float64))
        if features.ndim != 2 or targets.ndim != 1 or features.shape[0] != targets.shape[0]:
            raise ValueError(
                "expected features of shape [n, d] and targets of shape [n], got "
                f"{features.shape} and {targets.shape}"
            )
        if features.shape[0] < 1:
            raise ValueError("expected at least one client, got n=0")
        return cls(jnp.asarray(features, jnp.float32), jnp.asarray(targets, jnp.float32))

    @property
    def n_clients(self) -> int:
        return self.features.shape[0]

    @property
    def dim(self) -> int:
        return self.features.shape[1]

    def record(self, client_id: jax.Array) -> Record:
        """The record ``(x: f32[d], y: f32[])`` of one client."""
        return self.features[client_id], self.targets[client_id]

    def records(self, client_ids: jax.Array) -> Record:
        """``(X[ids], y[ids])`` for ``ids: i32[b]``; ids past the end are clamped (the engine masks
        them), so a padded block never reads out of bounds."""
        ids = jnp.minimum(client_ids, self.n_clients - 1)
        return self.features[ids], self.targets[ids]

    def to_numpy(self) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(self.features, np.float64), np.asarray(self.targets, np.float64)


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class SyntheticLinear:
    """Procedural linear-regression clients: ``x ~ N(0, I_d)``, ``y = x^T theta_star + s e``.

    Client ``i`` is generated from ``fold_in(data_key, i)``, independently of every other client
    and of how clients are blocked or sharded.

    Attributes:
      data_key: the population's key (typed PRNG key).
      theta_star: ``f32[d]``, the true parameter.
      noise_std: ``f32[]``, the response noise ``s``.
      n_clients: number of clients (static).
    """

    data_key: jax.Array
    theta_star: jax.Array
    noise_std: jax.Array
    n_clients: int = field(metadata=dict(static=True))

    @classmethod
    def create(
        cls, key: jax.Array, n_clients: int, dim: int, noise_std: float = 0.5
    ) -> SyntheticLinear:
        """A population with ``theta_star`` drawn uniformly on the unit sphere from ``key``.

        With ``||theta_star|| = 1`` the Bayes-optimal R^2 is ``1 / (1 + noise_std^2)``.
        """
        n_clients = check_int_range("n_clients", n_clients, 1, 2**31 - 1)
        dim = check_int_range("dim", dim, 1, 100_000)
        noise_std = check_nonnegative("noise_std", noise_std)
        theta_key, data_key = jax.random.split(key)
        theta = jax.random.normal(theta_key, (dim,))
        theta = theta / jnp.linalg.norm(theta)
        return cls(data_key, theta, jnp.asarray(noise_std, jnp.float32), n_clients)

    @property
    def dim(self) -> int:
        return self.theta_star.shape[0]

    def feature_norm_quantile(self, level: float) -> float:
        """The ``level`` quantile of ``||x||`` (x ~ N(0, I_d), so ``||x||^2`` is chi-square with d
        degrees of freedom): a clip radius that clips a fraction ``1 - level`` of the clients."""
        from scipy.stats import chi2

        if not 0.0 < level < 1.0:
            raise ValueError(f"expected level in (0, 1), got level={level}")
        return float(np.sqrt(chi2.ppf(level, self.dim)))

    def record(self, client_id: jax.Array) -> Record:
        """The record ``(x: f32[d], y: f32[])`` of one client."""
        normals, _ = normals_and_uniforms(
            jax.random.fold_in(self.data_key, client_id), self.dim + 1, 0
        )
        x = normals[: self.dim]
        y = x @ self.theta_star + self.noise_std * normals[self.dim]
        return x, y

    def records(self, client_ids: jax.Array) -> Record:
        """Records of ``ids: i32[b]`` as ``(X: f32[b, d], y: f32[b])``."""
        return jax.vmap(self.record)(client_ids)

    def sample(self, n: int, stream: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """A host sample of ``n`` fresh records from the same distribution (a held-out split).

        ``stream`` selects a key stream disjoint from the training clients'.
        """
        other = SyntheticLinear(
            jax.random.fold_in(self.data_key, 2**31 + stream),
            self.theta_star,
            self.noise_std,
            n,
        )
        X, y = jax.jit(other.records)(jnp.arange(n))
        return np.asarray(X, np.float64), np.asarray(y, np.float64)


class Population(Protocol):
    """What the engine streams: ``n_clients`` clients, client i's data from ``record(i)``
    (:class:`ArrayClients`, :class:`SyntheticLinear`, ``SiloData``, ``SyntheticFederated``)."""

    @property
    def n_clients(self) -> int: ...

    @property
    def dim(self) -> int: ...

    def record(self, client_id: jax.Array) -> Record: ...
