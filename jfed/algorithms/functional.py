"""Private functional mean estimation across S servers (docs/specs/estimation.md, Xue, Lin and Yu).

Model: server s holds n functions, function i observed at m uniform points of [0, 1],

    Y_j = mu*(X_j) + U_i(X_j) + xi_j,   mu* = sum_l theta_l phi_l,   U_i = sum_l zeta_il phi_l,

in an orthonormal basis of L^2[0, 1] (Fourier or shifted Legendre) with ``TRUTH_TERMS`` terms,
``theta_l = (-1)^(l+1) l^-p`` and ``zeta_il = l^-p u_il``, ``u_il`` uniform with unit variance, so
both are alpha-Sobolev for ``p = alpha + 0.6``; ``xi ~ N(0, 0.5^2)``.

Estimator (written for ONE server, run by the engine over the servers): each function's
projection ``h_i = (1/m) sum_j Y_j Phi_r(X_j)`` (an unbiased estimate of ``theta + zeta_i``),
clipped per coordinate to ``[-kappa_l, kappa_l]``; then T SGD steps on disjoint batches of the
functions, ``a <- a - eta_t (a - mean_batch h_i - noise_t)`` with ``eta_t = 1 / (t + 1)``: the
gradient of the least-squares loss ``E (Y - a^T Phi_r(X))^2`` with the uniform design's Gram
matrix (the identity) in place of each function's empirical one. The noise is Gaussian, per
coordinate ``sigma_l`` (anisotropic: shaped by ``kappa_l``; isotropic: one sigma). Each server's
noisy steps are its release, made through ``clients.aggregate`` with
:class:`~jfed.algorithms.estimation_aggregators.DiscreteBatchMeans` (on an integer grid, exact
discrete Gaussian noise: a program with a ``grid_norm``) or
:class:`~jfed.algorithms.estimation_aggregators.NoisyBatchMeans` (float32 noise), a local
randomizer either way (each server the curator of its own functions only), which states its
event; the aggregator averages the S servers' iterates. The error ``||mu~ - mu*||^2_{L2}`` is
exact by orthonormality.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jfed.algorithms.estimation_aggregators import (
    BatchMeansParams,
    DiscreteBatchMeans,
    NoisyBatchMeans,
    sgd_average,
)

MAX_TERMS = 32
TRUTH_TERMS = 64
NOISE_STD = 0.5
DECAY_EXCESS = 0.6  # p = alpha + 0.6: the coefficients are alpha-Sobolev with room to spare
CLIP_LEVEL = 20.0


class Info(NamedTuple):
    """Per replication (``f32[]`` each): ``error``, ``||mu~ - mu*||^2``; ``noise_free_error``, the
    same for the estimate the same data give without the privacy noise (same functions, batches
    and clipping), so ``error - noise_free_error`` is the price of privacy with the data's own
    variation cancelled; ``clipped``, the fraction of the projections' coordinates clipped;
    ``rounding_fallbacks``, the functions whose rounding to the grid fell back to zeros (0 for
    float noise)."""

    error: jax.Array
    noise_free_error: jax.Array
    clipped: jax.Array
    rounding_fallbacks: jax.Array


class Hyperparams(NamedTuple):
    """Traced numbers of one configuration.

    Attributes:
      servers, functions, observations, terms, iterations: ``i32[]`` S, n, m, r, T.
      noise_std: ``f32[MAX_TERMS]`` sigma_l of each batch mean (zero past r).
      clip: ``f32[MAX_TERMS]`` kappa_l (zero past r).
    """

    servers: jax.Array
    functions: jax.Array
    observations: jax.Array
    terms: jax.Array
    iterations: jax.Array
    noise_std: jax.Array
    clip: jax.Array


_VECTORS = {"noise_std": jnp.float32, "clip": jnp.float32}  # the rest are i32 counts


def hyperparams(**values) -> Hyperparams:
    return Hyperparams(**{
        name: jnp.asarray(values[name], _VECTORS.get(name, jnp.int32))
        for name in Hyperparams._fields
    })  # fmt: skip


@dataclass(frozen=True)
class FourierBasis:
    """``1, sqrt2 cos(2 pi k x), sqrt2 sin(2 pi k x), ...``, orthonormal on [0, 1]."""

    def values(self, x: jax.Array, terms: int) -> jax.Array:
        """``Phi(x): f32[..., terms]``."""
        x = jnp.asarray(x, jnp.float32)[..., None]
        index = jnp.arange(terms)
        frequency = ((index + 1) // 2).astype(jnp.float32)
        angle = 2.0 * jnp.pi * frequency * x
        wave = jnp.where(index % 2 == 1, jnp.cos(angle), jnp.sin(angle))
        return jnp.where(index == 0, 1.0, math.sqrt(2.0) * wave)

    def sup_norms(self, terms: int) -> np.ndarray:
        """``sup |phi_l|``: ``f64[terms]``."""
        return np.where(np.arange(terms) == 0, 1.0, math.sqrt(2.0))


@dataclass(frozen=True)
class LegendreBasis:
    """Shifted Legendre polynomials ``sqrt(2k + 1) P_k(2x - 1)``, orthonormal on [0, 1]."""

    def values(self, x: jax.Array, terms: int) -> jax.Array:
        """``Phi(x): f32[..., terms]``."""
        t = 2.0 * jnp.asarray(x, jnp.float32) - 1.0
        values = [jnp.ones_like(t), t]
        for k in range(1, terms - 1):  # Bonnet: (k+1) P_{k+1} = (2k+1) t P_k - k P_{k-1}
            values.append(((2 * k + 1) * t * values[k] - k * values[k - 1]) / (k + 1))
        stacked = jnp.stack(values[:terms], axis=-1)
        return stacked * jnp.sqrt(2.0 * jnp.arange(terms) + 1.0)

    def sup_norms(self, terms: int) -> np.ndarray:
        return np.sqrt(2.0 * np.arange(terms) + 1.0)


BASES: dict[str, FourierBasis | LegendreBasis] = {
    "fourier": FourierBasis(),
    "legendre": LegendreBasis(),
}
"""The basis each ``--basis`` names."""


@dataclass(frozen=True)
class Model:
    """The data model: ``basis`` (an object of :data:`BASES`) and Sobolev ``smoothness`` alpha
    (host-side facts included)."""

    basis: FourierBasis | LegendreBasis
    smoothness: float

    def __post_init__(self) -> None:
        if self.basis not in BASES.values():
            raise ValueError(
                f"expected basis to be one of the objects of BASES {list(BASES)} (e.g. "
                f"BASES['fourier']), got {self.basis!r}"
            )

    @property
    def decay(self) -> float:
        return self.smoothness + DECAY_EXCESS

    def coefficients(self) -> np.ndarray:
        """theta: ``f64[TRUTH_TERMS]``."""
        index = np.arange(1, TRUTH_TERMS + 1)
        return (-1.0) ** (index + 1) * index ** (-self.decay)

    def truncation(self, terms: int) -> float:
        """``sum_{l > r} theta_l^2``: the error of the best r-term approximation."""
        return float(np.sum(self.coefficients()[terms:] ** 2))

    def clip_bounds(self, terms: int, observations: int, functions: int) -> np.ndarray:
        """kappa_l: the largest ``|theta_l + zeta_l|`` plus tau standard deviations of the m-point
        average, tau = sqrt(2 ln(20 r N)) for N functions in all."""
        index = np.arange(1, terms + 1)
        coefficient = (1.0 + math.sqrt(3.0)) * index ** (-self.decay)
        second_moment = 2.0 * np.sum(np.arange(1, TRUTH_TERMS + 1) ** (-2.0 * self.decay))
        spread = self.basis.sup_norms(terms) * math.sqrt(second_moment + NOISE_STD**2)
        tau = math.sqrt(2.0 * math.log(CLIP_LEVEL * terms * functions))
        return coefficient + tau * spread / math.sqrt(observations)


@dataclass(frozen=True)
class FunctionalMean:
    """One replication per round (static shapes: the largest n and m of the program).

    Attributes:
      model: the data model.
      max_functions, max_observations: padded sizes (the configuration's n and m are traced).
      iterations: T (static: the loop over disjoint batches).
      grid_norm: the integer grid of the exact release
        (:class:`~jfed.algorithms.estimation_aggregators.DiscreteBatchMeans`), or ``None`` for
        float32 noise (:class:`~jfed.algorithms.estimation_aggregators.NoisyBatchMeans`).
    """

    model: Model
    max_functions: int
    max_observations: int
    iterations: int
    grid_norm: int | None = None

    @property
    def release(self) -> DiscreteBatchMeans | NoisyBatchMeans:
        """The servers' release: on the grid where the program has one."""
        if self.grid_norm is None:
            return NoisyBatchMeans()
        return DiscreteBatchMeans(dimension=MAX_TERMS, grid_norm=self.grid_norm)

    def init(self, hp: Hyperparams, key: jax.Array) -> tuple:
        """No server state: every round reads the run's hyper-parameters."""
        del hp, key
        return ()

    def function_projection(self, hp: Hyperparams, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """One function's clipped projection ``h: f32[MAX_TERMS]`` and how many coordinates were
        clipped."""
        theta = jnp.asarray(self.model.coefficients(), jnp.float32)
        decay = jnp.arange(1, TRUTH_TERMS + 1, dtype=jnp.float32) ** (-self.model.decay)
        coefficient_key, point_key, noise_key = jax.random.split(key, 3)
        zeta = decay * jax.random.uniform(coefficient_key, (TRUTH_TERMS,), minval=-math.sqrt(3.0),
                                          maxval=math.sqrt(3.0))  # fmt: skip
        x = jax.random.uniform(point_key, (self.max_observations,))
        phi = self.model.basis.values(x, TRUTH_TERMS)  # [m, L]
        y = phi @ (theta + zeta) + NOISE_STD * jax.random.normal(
            noise_key, (self.max_observations,)
        )
        present = (jnp.arange(self.max_observations) < hp.observations).astype(jnp.float32)
        projection = (present * y) @ phi[:, :MAX_TERMS] / hp.observations.astype(jnp.float32)
        used = jnp.arange(MAX_TERMS) < hp.terms
        clipped = jnp.clip(projection, -hp.clip, hp.clip)
        return jnp.where(used, clipped, 0.0), jnp.sum(used & (clipped != projection))

    def server(self, hp: Hyperparams, server_id: jax.Array, key: jax.Array) -> dict:
        """One server's message to its release (:attr:`release`, which adds the noise and takes
        the T SGD steps): ``batches: f32[T, MAX_TERMS]``, the means of its clipped projections
        over T disjoint batches of its functions (function i in batch ``i mod T``); the
        projections themselves, ``projections: f32[max_functions, MAX_TERMS]``, with each one's
        batch, ``batch: i32[max_functions]`` (T for a padded function), which the grid rounds
        one by one; ``weight``, 1.0 for a server of the configuration (0.0 for padding); and
        diagnostics: ``quiet: f32[MAX_TERMS]``, the iterate of the same steps without noise,
        and ``clipped``, how many coordinates were clipped."""
        data_key = jax.random.split(key)[0]  # the functions' data (the noise is the release's)
        index = jnp.arange(self.max_functions)
        projections, clipped = jax.vmap(
            lambda i: self.function_projection(hp, jax.random.fold_in(data_key, i))
        )(index)
        present = index < hp.functions
        batch_means = []
        for t in range(self.iterations):
            member = (present & (index % self.iterations == t)).astype(jnp.float32)
            # float32 on every backend: the noise is calibrated to the clip, which a GPU's
            # default product (tf32 operands) could exceed by up to 2^-11
            batch = jnp.matmul(member, projections, precision=jax.lax.Precision.HIGHEST)
            batch_means.append(batch / jnp.maximum(jnp.sum(member), 1.0))
        batches = jnp.stack(batch_means)
        count = jnp.sum(jnp.where(present, clipped, 0)).astype(jnp.float32)
        batch = jnp.where(present, index % self.iterations, self.iterations).astype(jnp.int32)
        return {"batches": batches, "projections": projections, "batch": batch,
                "weight": (server_id < hp.servers).astype(jnp.float32),
                "diagnostics": {"quiet": sgd_average(batches), "clipped": count}}  # fmt: skip

    def squared_error(self, hp: Hyperparams, estimate: jax.Array) -> jax.Array:
        """``||mu~ - mu*||^2_{L2}`` of the r-term estimate ``estimate: f32[MAX_TERMS]`` (exact by
        orthonormality: the r coordinates' errors plus every coefficient past r)."""
        theta = jnp.asarray(self.model.coefficients(), jnp.float32)
        used = jnp.arange(MAX_TERMS) < hp.terms
        inside = jnp.sum(jnp.where(used, (estimate - theta[:MAX_TERMS]) ** 2, 0.0))
        outside = jnp.sum(jnp.where(used, 0.0, theta[:MAX_TERMS] ** 2)) + jnp.sum(
            theta[MAX_TERMS:] ** 2
        )
        return inside + outside

    def round(self, state: tuple, hp: Hyperparams, key: jax.Array, clients) -> tuple[tuple, Info]:
        params = BatchMeansParams(hp.noise_std, hp.clip, hp.functions, hp.iterations, hp.terms)
        summed, _, _ = clients.aggregate(self.release, params, (), self.server, hp, key)
        servers, diagnostics = summed["weight"], summed["diagnostics"]
        coordinates = servers * hp.functions.astype(jnp.float32) * hp.terms.astype(jnp.float32)
        return state, Info(self.squared_error(hp, summed["value"] / servers),
                           self.squared_error(hp, diagnostics["quiet"] / servers),
                           diagnostics["clipped"] / coordinates,
                           diagnostics.get("rounding_fallbacks", jnp.float32(0.0)))  # fmt: skip
