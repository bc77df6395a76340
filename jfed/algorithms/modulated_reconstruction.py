"""How well can an attacker reconstruct a client's features from its modulated messages?

A Cramer-Rao lower bound on the mean squared error of ANY unbiased attacker
(docs/specs/modulated.md,
"Reconstruction lower bound"; seed 001 section 6), and the error of a simple unbiased attacker for
comparison. The attacker sees the message ``z = f(x) + sigma xi`` (and the public response ``y``)
and knows every public parameter.

For ``f(x) = alpha x + (beta / sqrt(k)) V cos(omega V^T x + phi)`` with orthonormal ``V: [d, k]``
and ``u_j = omega <v_j, x> + phi_j``, the Jacobian is
``J = alpha I - (beta omega / sqrt(k)) sum_j sin(u_j) v_j v_j^T``, so
``J^T J = alpha^2 I + sum_j c_j v_j v_j^T`` with
``c_j = (beta^2 omega^2 / k) sin^2(u_j) - (2 alpha beta omega / sqrt(k)) sin(u_j)`` (the cross
terms vanish because the directions are orthonormal; k = 1 is the seed's case). The Fisher
information about ``x`` is ``J^T J / sigma^2`` per message, plus ``beta_* beta_*^T / s^2`` from a
response ``y = <x, beta_*> + noise`` of variance ``s^2`` (public, so an irreducible leak). For any
unbiased attacker ``(1/d) E||x_hat - x||^2 >= (1/d) tr(I^{-1}) >= d / tr(I)``.

Averaged over the uniform phases (``E sin = 0``, ``E sin^2 = 1/2``, and ``E[1/X] >= 1/E[X]``):

    (1/d) E||x_hat - x||^2 >= d / (T (alpha^2 d + beta^2 omega^2 / 2) / sigma^2 + ||b||^2 / s^2)

(``b = beta_*``) after ``T`` releases with fresh phases and noise (Fisher information adds over
conditionally independent messages; the response is seen once). With ``T = 1`` this is the
seed's bound (19).

That trace form treats the response's information as if spread over all ``d`` coordinates; it
tells about ``beta_*`` only. The tighter *spectral* form keeps the matrix: for every attacker,
``(1/d) E||x_hat - x||^2 >= (1/d) E tr(I^{-1}) >= (1/d) tr((E I)^{-1})`` (the inverse is operator
convex), and averaged over the phases and Haar-random directions
``E I = a I + beta_* beta_*^T / s^2`` with ``a = T (alpha^2 + beta^2 omega^2 / (2 d)) / sigma^2``,
so ``(1/d) tr((E I)^{-1}) = ((d - 1) / a + 1 / (a + ||beta_*||^2 / s^2)) / d`` (Sherman-Morrison).
Without a response the two forms coincide.

The simple attacker ``x_hat = mean_t z_t / alpha`` is unbiased (the modulation averages to zero
over the phase); its error is ``(beta^2 / (2 alpha^2 d) + sigma^2 / alpha^2) / T`` per coordinate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from jfed._validation import check_int_range, check_nonnegative, check_positive


def jacobian_gram(
    phases: np.ndarray, directions: np.ndarray, alpha: float, beta: float, omega: float,
    x: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """``J^T J: f64[d, d]`` of the noise-free client map at ``x: f[d]`` for ``phases: f[k]`` and
    orthonormal ``directions V: f[d, k]`` (closed form, see the module doc)."""
    V = np.asarray(directions, np.float64)
    dim, k = V.shape
    u = omega * (V.T @ np.asarray(x, np.float64)) + np.asarray(phases, np.float64)
    c = (beta**2 * omega**2 / k) * np.sin(u) ** 2 - (
        2 * alpha * beta * omega / math.sqrt(k)
    ) * np.sin(u)
    return alpha**2 * np.eye(dim) + (V * c) @ V.T


def conditional_lower_bound(
    gram: np.ndarray, noise_std: float, response_information: float = 0.0
) -> float:
    """The bound at fixed phases (seed's (18)): ``d / tr(I)`` per coordinate, with
    ``tr(I) = tr(J^T J) / sigma^2 + ||beta_*||^2 / s^2``.

    Args:
      gram: ``J^T J: f[d, d]`` (:func:`jacobian_gram`).
      noise_std: sigma (> 0).
      response_information: ``||beta_*||^2 / s^2`` (0: the response is not used).
    """
    noise_std = check_positive("noise_std", noise_std)
    response_information = check_nonnegative("response_information", response_information)
    dim = gram.shape[0]
    return dim / (np.trace(gram) / noise_std**2 + response_information)


@dataclass(frozen=True)
class TraceForm:
    """The seed's (19): ``d / (I + leak)``, ``I`` the messages' Fisher information summed over
    the coordinates, the response's leak spread as if over every coordinate."""

    name: ClassVar[str] = "trace"

    def per_coordinate(self, dim: int, information: float, leak: float) -> float:
        """The bound per coordinate from the messages' total ``information`` and the leak."""
        return dim / (information + leak)


@dataclass(frozen=True)
class SpectralForm:
    """``((d - 1) / a + 1 / (a + leak)) / d``, ``a = I / d`` per coordinate: the leak tells
    about one direction only (Sherman-Morrison on the expected information matrix); tighter
    than :class:`TraceForm` with a leak, equal without."""

    name: ClassVar[str] = "spectral"

    def per_coordinate(self, dim: int, information: float, leak: float) -> float:
        per_coordinate = information / dim
        return ((dim - 1) / per_coordinate + 1.0 / (per_coordinate + leak)) / dim


TRACE = TraceForm()
SPECTRAL = SpectralForm()
FORMS: dict[str, TraceForm | SpectralForm] = {form.name: form for form in (TRACE, SPECTRAL)}
"""The bound's forms by name."""


def bound_form(form: TraceForm | SpectralForm | str) -> TraceForm | SpectralForm:
    """``form`` as a form object: an object as it is, a name through :data:`FORMS`
    (``ValueError`` listing the names)."""
    if isinstance(form, str):
        if form not in FORMS:
            raise ValueError(f"unknown bound form {form!r}; expected one of {list(FORMS)}")
        return FORMS[form]
    return form


def reconstruction_lower_bound(
    dim: int,
    alpha: float,
    beta: float,
    omega: float,
    noise_std: float,
    releases: int = 1,
    response_information: float = 0.0,
    form: TraceForm | SpectralForm | str = TRACE,
) -> float:
    """Lower bound on any unbiased attacker's per-coordinate squared error, averaged over the
    phases (and Haar-random directions), in squared feature units (features are standardised, so
    1 is the variance of a coordinate).

    :data:`TRACE` (the seed's (19)): ``d / (T (alpha^2 d + beta^2 omega^2 / 2) / sigma^2 +
    leak)``; :data:`SPECTRAL`: ``((d - 1) / a + 1 / (a + leak)) / d`` with ``a`` the messages'
    information per coordinate, tighter when there is a leak and equal without (module doc).

    Args:
      dim: d.
      alpha, beta, omega: the map's parameters.
      noise_std: sigma per coordinate (> 0).
      releases: T, messages the attacker sees from the client (fresh phases and noise).
      response_information: the leak ``||beta_*||^2 / s^2`` of a public response (0: ignore it).
      form: :data:`TRACE` or :data:`SPECTRAL` (or its name).
    """
    dim = check_int_range("dim", dim, 1, 10**9)
    alpha = check_positive("alpha", alpha)
    beta = check_nonnegative("beta", beta)
    omega = check_nonnegative("omega", omega)
    noise_std = check_positive("noise_std", noise_std)
    releases = check_int_range("releases", releases, 1, 10**9)
    leak = check_nonnegative("response_information", response_information)
    per_release = (alpha**2 * dim + beta**2 * omega**2 / 2.0) / noise_std**2
    return bound_form(form).per_coordinate(dim, releases * per_release, leak)


def direct_attack(messages: np.ndarray, alpha: float) -> np.ndarray:
    """The simple unbiased attacker ``x_hat = mean_t z_t / alpha`` from ``messages: f[T, d]``."""
    return np.mean(np.asarray(messages, np.float64), axis=0) / check_positive("alpha", alpha)


def direct_attack_error(
    dim: int, alpha: float, beta: float, noise_std: float, releases: int = 1
) -> float:
    """Per-coordinate mean squared error of :func:`direct_attack`:
    ``(beta^2 / (2 alpha^2 d) + sigma^2 / alpha^2) / T`` (uniform phases)."""
    dim = check_int_range("dim", dim, 1, 10**9)
    alpha = check_positive("alpha", alpha)
    beta = check_nonnegative("beta", beta)
    noise_std = check_nonnegative("noise_std", noise_std)
    releases = check_int_range("releases", releases, 1, 10**9)
    return (beta**2 / (2 * alpha**2 * dim) + noise_std**2 / alpha**2) / releases


def response_information(features: np.ndarray, targets: np.ndarray) -> float:
    """``||beta_*||^2 / s^2`` estimated by least squares on ``(features: f[n, d], targets: f[n])``
    (what a public response leaks about x, for the bound's irreducible term)."""
    X = np.asarray(features, np.float64)
    y = np.asarray(targets, np.float64)
    coefficients, *_ = np.linalg.lstsq(X, y, rcond=None)
    residual_variance = float(np.mean((y - X @ coefficients) ** 2))
    return float(coefficients @ coefficients) / max(residual_variance, 1e-300)
