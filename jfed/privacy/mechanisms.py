"""Mechanisms as small objects that both sample (jittable, key in) and describe themselves.

Each is a frozen dataclass of host floats. ``noise(key, shape)`` / ``randomize(key, x)`` are pure
JAX functions (jit and vmap them); ``dp_event()`` is the ``dp_accounting`` event an accountant
composes; ``epsilon(delta)`` is the single-release guarantee. Calibration classmethods return a
new mechanism for a target (eps, delta) and never mutate one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from jfed._random import private_normals
from jfed._validation import check_finite_array, check_nonnegative, check_positive
from jfed.privacy import anisotropic, gaussian, laplace, randomized_response, two_point

if TYPE_CHECKING:  # imported where an event is made: dp-accounting takes about a second to load
    import dp_accounting


@dataclass(frozen=True)
class GaussianMechanism:
    """Adds ``N(0, noise_std^2 I)`` to a query of L2 sensitivity ``sensitivity``."""

    sensitivity: float
    noise_std: float

    def __post_init__(self) -> None:
        check_positive("sensitivity", self.sensitivity)
        check_positive("noise_std", self.noise_std)

    @classmethod
    def calibrate(
        cls, sensitivity: float, epsilon: float, delta: float, accountant: Any = None
    ) -> GaussianMechanism:
        """The least noise for one (eps, delta)-DP release through ``accountant`` (a spec of
        :data:`~jfed.privacy.ACCOUNTANTS` or its key; default :class:`~jfed.privacy.Analytic`,
        exact; ``Classic()`` and ``Zcdp()`` are upper bounds)."""
        from jfed.privacy.accounting import Analytic, as_accountant

        spec = Analytic() if accountant is None else as_accountant(accountant)
        noise = spec.gaussian_rounds_noise(sensitivity, epsilon, delta, 1)
        return cls(float(sensitivity), float(noise))

    @property
    def noise_multiplier(self) -> float:
        return self.noise_std / self.sensitivity

    def noise(self, key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
        return self.noise_std * private_normals(key, shape)

    def randomize(self, key: jax.Array, x: jax.Array) -> jax.Array:
        return x + self.noise(key, jnp.shape(x))

    def dp_event(self) -> dp_accounting.DpEvent:
        import dp_accounting

        return dp_accounting.GaussianDpEvent(self.noise_multiplier)

    def epsilon(self, delta: float) -> float:
        """Exact eps of one release (analytic Gaussian)."""
        return float(gaussian.analytic_gaussian_epsilon(self.sensitivity, self.noise_std, delta))

    def delta(self, epsilon: float) -> float:
        """Exact delta of one release at ``epsilon``."""
        check_nonnegative("epsilon", epsilon)
        return float(gaussian.analytic_gaussian_delta(self.sensitivity, self.noise_std, epsilon))


@dataclass(frozen=True)
class LaplaceMechanism:
    """Adds i.i.d. ``Laplace(scale)`` noise to a query of L1 sensitivity ``l1_sensitivity``."""

    l1_sensitivity: float
    scale: float

    def __post_init__(self) -> None:
        check_positive("l1_sensitivity", self.l1_sensitivity)
        check_positive("scale", self.scale)

    @classmethod
    def calibrate(cls, l1_sensitivity: float, epsilon: float) -> LaplaceMechanism:
        return cls(float(l1_sensitivity), laplace.laplace_scale(l1_sensitivity, epsilon))

    def noise(self, key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
        return self.scale * jax.random.laplace(key, shape)

    def randomize(self, key: jax.Array, x: jax.Array) -> jax.Array:
        return x + self.noise(key, jnp.shape(x))

    def dp_event(self) -> dp_accounting.DpEvent:
        import dp_accounting

        return dp_accounting.LaplaceDpEvent(self.scale / self.l1_sensitivity)

    def epsilon(self, delta: float = 0.0) -> float:
        """Pure eps (``delta`` is accepted for a uniform interface and ignored)."""
        del delta
        return laplace.laplace_epsilon(self.l1_sensitivity, self.scale)


@dataclass(frozen=True)
class AnisotropicGaussianMechanism:
    """Adds ``N(0, diag(noise_std^2))`` to a query with per-coordinate sensitivities."""

    sensitivities: tuple[float, ...]
    noise_std: tuple[float, ...]

    def __post_init__(self) -> None:
        sens = check_finite_array("sensitivities", np.asarray(self.sensitivities))
        std = check_finite_array("noise_std", np.asarray(self.noise_std))
        if sens.shape != std.shape or np.any(std <= 0) or np.any(sens < 0):
            raise ValueError("expected sensitivities >= 0 and noise_std > 0 of the same length")

    @classmethod
    def calibrate(
        cls, sensitivities: np.ndarray, epsilon: float, delta: float
    ) -> AnisotropicGaussianMechanism:
        """The seed's calibration ``sigma_l^2 = 4 ln(2/delta) Delta_l ||Delta||_1 / eps^2``."""
        noise = anisotropic.anisotropic_noise(sensitivities, epsilon, delta)
        return cls(tuple(map(float, sensitivities)), tuple(map(float, noise)))

    def noise(self, key: jax.Array, shape: tuple[int, ...] | None = None) -> jax.Array:
        std = jnp.asarray(self.noise_std, jnp.float32)
        return std * private_normals(key, shape or std.shape)

    def randomize(self, key: jax.Array, x: jax.Array) -> jax.Array:
        return x + self.noise(key, jnp.shape(x))

    def dp_event(self) -> dp_accounting.DpEvent:
        """Exact: whitened, it is an isotropic Gaussian with sensitivity ``||Delta / sigma||_2``."""
        import dp_accounting

        return dp_accounting.GaussianDpEvent(
            anisotropic.anisotropic_noise_multiplier(
                np.asarray(self.sensitivities), np.asarray(self.noise_std)
            )
        )

    def epsilon(self, delta: float) -> float:
        """Exact eps of one release (analytic Gaussian of the whitened mechanism)."""
        multiplier = self.dp_event().noise_multiplier
        return float(gaussian.analytic_gaussian_epsilon(1.0, multiplier, delta))


@dataclass(frozen=True)
class TwoPointMechanism:
    """LDP-FL's two-point randomizer for scalars in ``[center - radius, center + radius]``."""

    center: float
    radius: float
    epsilon_per_report: float

    def __post_init__(self) -> None:
        check_positive("radius", self.radius)
        check_positive("epsilon", self.epsilon_per_report)

    def randomize(self, key: jax.Array, w: jax.Array) -> jax.Array:
        return two_point.perturb(key, w, self.center, self.radius, self.epsilon_per_report)

    def dp_event(self) -> dp_accounting.DpEvent:
        """Binary randomized response with the same likelihood ratio ``e^eps``."""
        return randomized_response.report_event(self.epsilon_per_report)

    def epsilon(self, delta: float = 0.0) -> float:
        """Pure eps per reported scalar."""
        del delta
        return self.epsilon_per_report


@dataclass(frozen=True)
class RandomizedResponseMechanism:
    """Binary randomized response: each bit kept with probability ``e^eps/(e^eps + 1)``, exact at
    every eps (:mod:`jfed.privacy.randomized_response`)."""

    epsilon_per_report: float

    def __post_init__(self) -> None:
        check_positive("epsilon", self.epsilon_per_report)

    def randomize(self, key: jax.Array, bits: jax.Array) -> jax.Array:
        """``bool[...]`` reports of ``bits: bool[...]``."""
        return randomized_response.respond(key, bits, self.epsilon_per_report)

    def dp_event(self) -> dp_accounting.DpEvent:
        """With probability ``2/(e^eps + 1)`` a uniform bit, else the true one."""
        return randomized_response.report_event(self.epsilon_per_report)

    def epsilon(self, delta: float = 0.0) -> float:
        """Pure eps per reported bit."""
        del delta
        return self.epsilon_per_report
