"""Reconstruction lower bound (Cramer-Rao) and the direct attacker, against autodiff, quadrature
and a Monte Carlo attack on the real client map."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfed.algorithms import modulated
from jfed.algorithms import modulated_reconstruction as recon

ALPHA, BETA, OMEGA = 1.0, 2.0, 1.5


def _setup(dim, k, seed=0):
    rng = np.random.default_rng(seed)
    V = np.linalg.qr(rng.normal(size=(dim, k)))[0]  # orthonormal to float64 precision
    return rng.normal(size=dim), rng.uniform(0, 2 * np.pi, size=k), V


def _broadcast(V, noise_std):
    f32 = jnp.float32
    return modulated.Broadcast(jnp.asarray(V, f32), f32(ALPHA), f32(BETA), f32(OMEGA),
                               f32(noise_std), f32(100.0))  # fmt: skip


@pytest.mark.parametrize("k", [1, 3])
def test_jacobian_gram_matches_autodiff(k):
    x, phases, V = _setup(6, k)
    broadcast = _broadcast(V, 0.0)
    jacobian = jax.jit(
        jax.jacfwd(lambda x: modulated.modulated_signal(broadcast, x, jnp.asarray(phases)))
    )(jnp.asarray(x, jnp.float32))
    autodiff = np.asarray(jacobian, np.float64).T @ np.asarray(jacobian, np.float64)
    closed = recon.jacobian_gram(phases, V, ALPHA, BETA, OMEGA, x)
    np.testing.assert_allclose(closed, autodiff, atol=1e-5)
    # negative control: without the cross term -2 alpha beta omega sin(u) the forms disagree
    wrong = (
        recon.jacobian_gram(phases, V, ALPHA, BETA, OMEGA, x)
        + 2 * ALPHA * BETA * OMEGA / (np.sqrt(k)) * (V * np.sin(OMEGA * V.T @ x + phases)) @ V.T
    )
    assert np.abs(wrong - autodiff).max() > 1e-2


@pytest.mark.parametrize("k", [1, 2])
def test_phase_average_of_the_fisher_trace(k):
    # equispaced phases integrate sin and sin^2 exactly: the average is alpha^2 d + beta^2 omega^2/2
    dim = 5
    x, _, V = _setup(dim, k, seed=3)
    grid = np.linspace(0, 2 * np.pi, 16, endpoint=False)
    traces = [
        np.trace(recon.jacobian_gram(np.array(p), V, ALPHA, BETA, OMEGA, x))
        for p in itertools.product(grid, repeat=k)
    ]
    assert np.mean(traces) == pytest.approx(ALPHA**2 * dim + BETA**2 * OMEGA**2 / 2, rel=1e-12)
    bound = recon.reconstruction_lower_bound(dim, ALPHA, BETA, OMEGA, noise_std=0.7)
    conditional = [
        recon.conditional_lower_bound(
            recon.jacobian_gram(np.array(p), V, ALPHA, BETA, OMEGA, x), 0.7
        )
        for p in itertools.product(grid, repeat=k)
    ]
    assert np.mean(conditional) >= bound  # Jensen: E[1/X] >= 1/E[X]


# every case draws n * MOST_RELEASES messages (one compiled program) and uses n * releases
MOST_RELEASES = 3


@jax.jit
def _messages(broadcast, record, keys):
    """One client's message ``z: f32[len(keys), d]`` for each key."""
    return jax.vmap(lambda key: modulated.client_message(broadcast, record, key)[0])(keys)


def _monte_carlo_errors(dim, noise_std, releases, n=20_000):
    x = np.linspace(-1.0, 1.0, dim)
    V = np.asarray(modulated.random_directions(jax.random.key(7), dim, 1))
    broadcast = _broadcast(V, noise_std)
    record = (jnp.asarray(x, jnp.float32), jnp.float32(0.0))
    keys = jax.random.split(jax.random.key(11), n * MOST_RELEASES)
    z = np.asarray(_messages(broadcast, record, keys), np.float64)[: n * releases]
    z = z.reshape(n, releases, dim)
    estimates = z.mean(axis=1) / ALPHA
    return np.sum((estimates - x) ** 2, axis=1) / dim


@pytest.mark.parametrize("releases", [1, MOST_RELEASES])
def test_direct_attack_error_matches_monte_carlo(releases):
    dim, noise_std = 8, 0.5
    errors = _monte_carlo_errors(dim, noise_std, releases)
    mean, standard_error = errors.mean(), errors.std(ddof=1) / np.sqrt(len(errors))
    closed = recon.direct_attack_error(dim, ALPHA, BETA, noise_std, releases)
    assert abs(mean - closed) < 4 * standard_error
    # negative control: dropping the modulation term beta^2 / (2 alpha^2 d) is caught
    assert abs(mean - (noise_std**2 / ALPHA**2) / releases) > 4 * standard_error
    # and the unbiased attacker cannot beat the Cramer-Rao bound
    assert mean > recon.reconstruction_lower_bound(dim, ALPHA, BETA, OMEGA, noise_std, releases)


def test_direct_attack_is_never_below_the_bound():
    for dim, beta, omega, sigma, releases in itertools.product(
        (1, 8, 100), (0.0, 0.5, 3.0), (0.0, 1.0, 4.0), (0.1, 1.0, 30.0), (1, 10)
    ):
        bound = recon.reconstruction_lower_bound(dim, 1.0, beta, omega, sigma, releases)
        assert recon.direct_attack_error(dim, 1.0, beta, sigma, releases) >= bound


def test_response_information_and_its_effect():
    rng = np.random.default_rng(0)
    beta_star, s = np.array([1.0, -2.0, 0.5]), 0.5
    X = rng.normal(size=(200_000, 3))
    y = X @ beta_star + s * rng.normal(size=len(X))
    expected = float(beta_star @ beta_star) / s**2
    assert recon.response_information(X, y) == pytest.approx(expected, rel=0.01)
    without = recon.reconstruction_lower_bound(3, 1.0, 0.5, 1.0, 2.0)
    with_response = recon.reconstruction_lower_bound(
        3, 1.0, 0.5, 1.0, 2.0, response_information=expected
    )
    assert with_response < without


def test_spectral_bound_is_the_matrix_form_and_never_below_the_trace_form():
    rng = np.random.default_rng(5)
    for dim, leak in ((1, 3.0), (8, 0.0), (8, 4.1), (50, 100.0)):
        spectral = recon.reconstruction_lower_bound(
            dim, 1.0, 0.5, 1.0, 2.0, 3, leak, recon.SPECTRAL
        )
        trace = recon.reconstruction_lower_bound(dim, 1.0, 0.5, 1.0, 2.0, 3, leak)
        a = 1.0 / recon.reconstruction_lower_bound(dim, 1.0, 0.5, 1.0, 2.0, 3)
        w = rng.normal(size=dim)
        w *= np.sqrt(leak) / np.linalg.norm(w)
        direct = np.trace(np.linalg.inv(a * np.eye(dim) + np.outer(w, w))) / dim
        assert spectral == pytest.approx(direct, rel=1e-10)
        assert spectral >= trace * (1 - 1e-12)
        if leak == 0.0 or dim == 1:
            assert spectral == pytest.approx(trace, rel=1e-12)


def test_bad_parameters_raise():
    with pytest.raises(ValueError, match="noise_std"):
        recon.reconstruction_lower_bound(3, 1.0, 0.5, 1.0, 0.0)
    with pytest.raises(ValueError, match="form"):
        recon.reconstruction_lower_bound(3, 1.0, 0.5, 1.0, 1.0, form="fisher")
    # a form by its name is the form object itself
    assert recon.reconstruction_lower_bound(8, 1.0, 0.5, 1.0, 2.0, 3, 4.1, "spectral") == (
        recon.reconstruction_lower_bound(8, 1.0, 0.5, 1.0, 2.0, 3, 4.1, recon.SPECTRAL)
    )
    with pytest.raises(ValueError, match="releases"):
        recon.reconstruction_lower_bound(3, 1.0, 0.5, 1.0, 1.0, releases=0)


def test_run_record_reports_the_bounds():
    from jfed.data import load_regression
    from jfed.methods import ModulatedIterative
    from jfed.sweep import run

    task = load_regression("modechoice")
    record = run(ModulatedIterative(dataset="modechoice", epsilon=10.0, rounds=3), task=task)
    block = record["reconstruction"]
    expected = recon.reconstruction_lower_bound(task.dim, 1.0, 0.5, 1.0, record["sigma"], 3)
    assert block["releases"] == 3
    assert block["lower_bound_mse_per_coordinate"] == pytest.approx(expected)
    assert (
        block["trace_lower_bound_mse_per_coordinate_with_response"]
        <= block["lower_bound_mse_per_coordinate_with_response"]
        <= block["lower_bound_mse_per_coordinate"]
        <= block["direct_attack_mse_per_coordinate"]
    )
