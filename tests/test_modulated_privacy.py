"""Sensitivity of the client map, checked empirically, and the modulated calibration."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfed import privacy
from jfed.algorithms import dpsgd, modulated

ALPHA, BETA, OMEGA, DIM = 0.7, 1.1, 2.5, 6


def _broadcast(V):
    hp = modulated.hyperparams(alpha=ALPHA, beta=BETA, omega=OMEGA, clip_norm=1.0)
    return modulated.Broadcast(jnp.asarray(V, jnp.float32), hp.alpha, hp.beta, hp.omega, 0.0, 1.0)


def _noise_free_map(V):
    broadcast = _broadcast(V)
    zero_noise = jnp.zeros(V.shape[0])
    return jax.jit(jax.vmap(lambda x, phases: modulated.encode(broadcast, x, phases, zero_noise)))


@pytest.mark.parametrize("k", [1, 3, 6])
def test_random_pairs_respect_lipschitz_bound(k):
    rng = np.random.default_rng(k)
    V = np.linalg.qr(rng.normal(size=(DIM, k)))[0]
    f = _noise_free_map(V)
    L = modulated.lipschitz_constant(ALPHA, BETA, OMEGA, k)
    x = rng.normal(size=(20_000, DIM)) * rng.uniform(0, 1, (20_000, 1)) / math.sqrt(DIM)
    x_other = x + rng.normal(size=x.shape) * rng.choice([1e-3, 1e-1, 1.0], size=(20_000, 1))
    phases = rng.uniform(0, 2 * np.pi, size=(20_000, k))
    fx, fy = np.asarray(f(x, phases), np.float64), np.asarray(f(x_other, phases), np.float64)
    distance = np.linalg.norm(x - x_other, axis=1)
    ratio = np.linalg.norm(fx - fy, axis=1) / distance
    # float32 rounding of each message (a few ulps of its norm, dot products of length d) is
    # magnified by 1 / ||x - x'|| for close pairs: the bound allows exactly that, pair by pair
    rounding = 4 * DIM * np.finfo(np.float32).eps
    slack = rounding * (np.linalg.norm(fx, axis=1) + np.linalg.norm(fy, axis=1)) / distance
    assert np.all(ratio <= L + slack), float(np.max(ratio - L - slack))


@pytest.mark.parametrize("k", [1, 2, 4])
def test_adversarial_pairs_along_directions_reach_the_bound(k):
    """Along u = sum_j v_j / sqrt(k) with every sin(omega <v_j, x> + phi_j) = -1, the map stretches
    by exactly L: the bound is tight, so an understated L (or sensitivity) would be caught."""
    V = np.linalg.qr(np.random.default_rng(7).normal(size=(DIM, k)))[0]
    f = _noise_free_map(V)
    L = modulated.lipschitz_constant(ALPHA, BETA, OMEGA, k)
    u = V.sum(1) / math.sqrt(k)
    x = 0.1 * u
    phases = (-np.pi / 2 - OMEGA * (V.T @ x)) % (2 * np.pi)
    step = 1e-3
    difference = np.asarray(f((x + step * u)[None], phases[None]) - f(x[None], phases[None]))
    ratio = np.linalg.norm(difference) / step
    assert ratio == pytest.approx(L, rel=2e-3)
    assert ratio > 0.99 * L  # negative control: a claimed L of 0.99 L is violated here


def test_sensitivity_is_lipschitz_times_diameter():
    s = modulated.sensitivity(ALPHA, BETA, OMEGA, 2, clip_norm=3.0)
    assert s == pytest.approx((ALPHA + BETA * OMEGA / math.sqrt(2)) * 6.0)
    assert modulated.sensitivity(
        ALPHA, BETA, OMEGA, 2, 3.0, adjacency_diameter=1.0
    ) == pytest.approx(ALPHA + BETA * OMEGA / math.sqrt(2))
    with pytest.raises(ValueError, match="adjacency_diameter"):
        modulated.sensitivity(ALPHA, BETA, OMEGA, 2, 3.0, adjacency_diameter=7.0)


@pytest.mark.parametrize("rounds", [1, 10])
def test_calibration_spends_the_target(rounds):
    sensitivity = modulated.sensitivity(1.0, 0.5, 1.0, 1, 3.0)
    sigma, guarantee = modulated.calibrate(2.0, 1e-6, rounds, sensitivity)
    assert guarantee.epsilon == pytest.approx(2.0, rel=1e-10)
    assert guarantee.accountant == "zcdp" and "x_i" in guarantee.protected
    assert guarantee.rho == pytest.approx(rounds * sensitivity**2 / (2 * sigma**2))
    assert privacy.epsilon_of_gaussian(sensitivity, sigma, 1e-6, rounds) == pytest.approx(2.0)


def test_classic_accountant_needs_more_noise_than_zcdp_over_rounds():
    sensitivity = 4.5
    zcdp_sigma, _ = modulated.calibrate(5.0, 1e-5, 10, sensitivity, privacy.Zcdp())
    classic_sigma, guarantee = modulated.calibrate(5.0, 1e-5, 10, sensitivity, privacy.Classic())
    assert guarantee.accountant == "classic-gaussian+basic-composition"
    assert classic_sigma > zcdp_sigma


def _zcdp_epsilon(rounds, sensitivity, noise_std, delta):
    """eps of T Gaussian releases by the zCDP closed form, written out independently."""
    rho = rounds * sensitivity**2 / (2 * noise_std**2)
    return rho + 2 * math.sqrt(rho * math.log(1 / delta))


def test_a_plan_bundles_the_clip_the_noise_and_the_guarantee():
    """The plan's guarantee is what its noise certifies for ITS clip (independent closed form),
    and its hyper-parameters carry that clip and noise; the privacy-carrying parameters cannot be
    passed again. Negative control: the drift a plan prevents (noise for clip 1 used with clip 3)
    certifies far more than the eps it would report."""
    privacy_plan = modulated.plan(2.0, 1e-6, 10, clip_norm=1.0, beta=0.5)
    lipschitz = 1.0 + 0.5 * 1.0 / 1.0
    certified = _zcdp_epsilon(10, lipschitz * 2 * 1.0, privacy_plan.noise_std, 1e-6)
    assert certified == pytest.approx(privacy_plan.guarantee.epsilon, rel=1e-9)
    assert certified == pytest.approx(2.0, rel=1e-6)
    hp = privacy_plan.hyperparams(step_scale=0.5, ridge=2.0)
    assert float(hp.clip_norm) == 1.0 and float(hp.beta) == 0.5
    assert float(hp.noise_std) == pytest.approx(privacy_plan.noise_std, rel=1e-6)
    with pytest.raises(TypeError):
        privacy_plan.hyperparams(clip_norm=3.0)
    drifted = _zcdp_epsilon(10, lipschitz * 2 * 3.0, privacy_plan.noise_std, 1e-6)
    assert drifted > 3 * privacy_plan.guarantee.epsilon

    sgd_plan = dpsgd.plan(1.0, 1e-5, 10, clip_norm=0.5)
    assert _zcdp_epsilon(10, 2 * 0.5, sgd_plan.noise_std, 1e-5) == pytest.approx(
        sgd_plan.guarantee.epsilon, rel=1e-9
    )
    sgd_hp = sgd_plan.hyperparams(learning_rate=0.05)
    assert float(sgd_hp.clip_norm) == 0.5
    assert float(sgd_hp.noise_std) == pytest.approx(sgd_plan.noise_std, rel=1e-6)
    with pytest.raises(TypeError):
        sgd_plan.hyperparams(clip_norm=2.0)
