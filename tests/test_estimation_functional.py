"""Private functional mean estimation: the bases, the unbiased projection, SGD over disjoint
batches, the noise shapes' calibration, and the price of privacy paired with the noise-free
estimate (its certified eps against dp-accounting is in ``test_estimation.py``, with the other
certified eps). Every device computation here is one jitted program: the per-server functions
called eagerly would compile each of their operations on its own."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfed.algorithms import functional
from jfed.methods import FunctionalEstimation, build_experiment
from jfed.methods import estimation as experiments
from jfed.sweep import run
from jfed.sweep.runner import run_sweep


@pytest.mark.parametrize("basis", ["fourier", "legendre"])
def test_basis_is_orthonormal_on_the_unit_interval(basis):
    x = (np.arange(20_000) + 0.5) / 20_000
    values = jax.jit(functional.BASES[basis].values, static_argnums=1)
    phi = np.asarray(values(jnp.asarray(x), 12), np.float64)
    gram = phi.T @ phi / len(x)
    np.testing.assert_allclose(gram, np.eye(12), atol=2e-3)


@functools.partial(jax.jit, static_argnums=0)
def _iterates(program, hp, keys):
    """The servers' SGD iterates without noise (their message's noise-free diagnostic), one
    per key: ``f32[len(keys), MAX_TERMS]``."""
    return jax.vmap(lambda key: program.server(hp, jnp.int32(0), key)["diagnostics"]["quiet"])(keys)


def test_functional_projection_is_unbiased_and_the_check_catches_a_bias():
    """Each server's non-private iterate has mean theta (first r coefficients) within 4 standard
    errors per coordinate. Negative control: the projection averaged over m + 1 points instead
    of m is shrunk and caught."""
    model = functional.Model(functional.BASES["legendre"], 2.0)
    program = functional.FunctionalMean(model, 30, 4, 1)
    hp = functional.hyperparams(servers=1, functions=30, observations=4, terms=6, iterations=1,
                                noise_std=np.zeros(functional.MAX_TERMS),
                                clip=np.full(functional.MAX_TERMS, 1e6))  # fmt: skip
    keys = jax.random.split(jax.random.key(0), 3000)
    iterates = np.asarray(_iterates(program, hp, keys), np.float64)[:, :6]
    theta = model.coefficients()[:6]
    se = iterates.std(0, ddof=1) / math.sqrt(len(iterates))
    assert np.all(np.abs(iterates.mean(0) - theta) <= 4 * se)
    shrunk = iterates * 4 / 5
    assert np.any(np.abs(shrunk.mean(0) - theta) > 4 * se)


def test_sgd_over_disjoint_batches_averages_the_batch_means():
    """Without noise, T steps with eta_t = 1/(t + 1) over T equal disjoint batches end at the mean
    of all projections, the one-step (T = 1) iterate. Negative control: a constant step 1/2
    would weight the batches unequally and differ."""
    model = functional.Model(functional.BASES["fourier"], 2.0)
    common = dict(servers=1, functions=40, observations=6, terms=5,
                  noise_std=np.zeros(functional.MAX_TERMS),
                  clip=np.full(functional.MAX_TERMS, 1e6))  # fmt: skip
    hp = functional.hyperparams(iterations=4, **common)  # the server reads T from its program
    one_step, four_steps = (functional.FunctionalMean(model, 40, 6, t) for t in (1, 4))

    @jax.jit  # one program: the three share their draws, which XLA computes once
    def iterates_and_projections(key):
        data_key = jax.random.split(key)[0]  # the server's data stream, as in ``server``
        projections = jax.vmap(
            lambda i: four_steps.function_projection(hp, jax.random.fold_in(data_key, i))[0]
        )(jnp.arange(40))
        quiet = [p.server(hp, jnp.int32(0), key)["diagnostics"]["quiet"]
                 for p in (one_step, four_steps)]  # fmt: skip
        return *quiet, projections

    one, four, projections = iterates_and_projections(jax.random.key(4))
    np.testing.assert_allclose(four, one, atol=1e-5)
    projections = np.asarray(projections, np.float64)
    batch_means = [projections[np.arange(40) % 4 == t].mean(0) for t in range(4)]
    np.testing.assert_allclose(np.mean(batch_means, axis=0), one, atol=1e-5)
    constant = np.zeros(functional.MAX_TERMS)
    for batch in batch_means:
        constant = constant - 0.5 * (constant - batch)
    assert not np.allclose(constant, one, atol=1e-3)


def test_anisotropic_and_isotropic_are_at_the_same_eps_and_anisotropic_adds_less_noise():
    """Both mechanisms certify the target eps (analytic Gaussian, whitened for the anisotropic
    one); the anisotropic noise's total variance is at most the isotropic one's
    (Cauchy-Schwarz, ||Delta||_1^2 <= r ||Delta||_2^2); the seed's own constant would spend more
    noise than (eps, delta) needs."""
    config = FunctionalEstimation(observations=200, terms=12, epsilon=1.0)
    _, anisotropic = experiments.calibrate_functional(config, 12)
    _, isotropic = experiments.calibrate_functional(config.replace(noise_shape="isotropic"), 12)
    assert anisotropic["epsilon_certified"] == pytest.approx(1.0, rel=1e-6)
    assert isotropic["epsilon_certified"] == pytest.approx(1.0, rel=1e-6)
    assert anisotropic["noise_total_variance"] < isotropic["noise_total_variance"]
    assert anisotropic["seed_formula_noise_factor"] > 1.0
    assert anisotropic["seed_formula_epsilon"] < 1.0


PRIVATE = FunctionalEstimation(servers=2, functions=20, observations=16, terms=3, iterations=2,
                               epsilon=0.5, replications=100)  # fmt: skip
"""The grid's run. Its statistical checks hold with room at 100 replications (measured at this
seed: the noise-variance check 0.02 standard errors from its mean and its negative control
12.4; the grid-against-float MSE 0.3 and its negative control 9.2)."""
PINNED = PRIVATE.replace(replications=400)
"""The float release's run, at the size its MSE was recorded before the grid existed."""


@pytest.fixture(scope="module")
def functional_rows():
    """The records of :data:`PRIVATE` (on the integer grid, the default) and of the same run
    without noise (same seed, same r), swept together: the noise shape is a number of the
    program, so one compiled program serves both."""
    configs = [PRIVATE, PRIVATE.replace(noise_shape="none")]
    noisy, silent = run_sweep(build_experiment(PRIVATE), configs, None, progress=False,
                              share_noise=False)  # fmt: skip
    return noisy, silent


@pytest.fixture(scope="module")
def float_row():
    """:data:`PINNED` with ``--noise float`` (float32 Gaussian noise)."""
    return run(PINNED.replace(noise="float"))


def test_functional_run_reports_mse_and_the_theory(functional_rows):
    record, _ = functional_rows
    assert record["mse"] > record["truncation_error"] >= 0
    assert record["theory_rate"] == max(
        record[k] for k in ("theory_functions", "theory_dense", "theory_private",
                            "theory_private_sparse")
    )  # fmt: skip
    assert record["notion"].startswith("user-level (eps, delta)-DP")


def test_the_functional_price_of_privacy_is_paired_with_the_noise_free_estimate(functional_rows):
    """``privacy_mse`` = MSE minus the same data's noise-free MSE: a non-private run of the same
    program (same seed, same r) has exactly the private run's noise-free MSE, and the mean price
    is the noise's variance on the average of the S servers' iterates, sum_l sigma_l^2 / (S T),
    within 4 standard errors. Negative control: twice that variance is caught."""
    noisy, silent = functional_rows
    assert (noisy["noise_shape"], silent["noise_shape"]) == ("anisotropic", "none")
    assert abs(silent["privacy_mse"]) <= 1e-6 * silent["mse"]  # float rounding of the steps
    assert noisy["mse"] - noisy["privacy_mse"] == pytest.approx(silent["mse"], rel=1e-6)
    variance = noisy["noise_total_variance"] / (PRIVATE.servers * PRIVATE.iterations)
    assert abs(noisy["privacy_mse"] - variance) <= 4 * noisy["privacy_mse_se"]
    assert abs(noisy["privacy_mse"] - 2 * variance) > 4 * noisy["privacy_mse_se"]


FLOAT_MSE_BEFORE_THE_GRID = 37.835867483317855
"""The MSE of :data:`PINNED` with float32 noise, as the program ran before the integer grid
existed (its noise was then the only one)."""


def test_float_noise_draws_what_it_drew_before_the_grid(float_row):
    """``--noise float`` runs the float32 release of before: the same MSE at the same seed (to
    1e-6: a draw that changed would move it by percents), labelled as the ideal real-valued
    mechanism, and no grid in its record."""
    assert float_row["mse"] == pytest.approx(FLOAT_MSE_BEFORE_THE_GRID, rel=1e-6)
    assert float_row["mechanism_model"].startswith("ideal real-valued mechanism")
    assert "ideal real-valued mechanism" in float_row["notion"]
    assert "grid_norm" not in float_row and "rounding_fallbacks" not in float_row


def test_the_exact_estimator_has_the_float_estimators_mse(functional_rows, float_row):
    """The grid's MSE (:data:`PRIVATE`) and the float release's (:data:`PINNED`: the same seed
    and 400 replications, other noise draws) differ by less than 3
    standard errors of their difference (taken as independent, which the shared data only makes
    larger than it is), and the grid's noise variance is the float one's
    times the rounding's inflation squared (within 10^-4: the integer variance's rounding up).
    Negative control: an estimator with twice the float noise's variance (expected MSE the float
    one's plus that variance) is rejected by the same tolerance."""
    exact, _ = functional_rows
    assert exact["mechanism_model"].startswith("exact") and exact["rounding_fallbacks"] == 0
    tolerance = 3.0 * math.hypot(exact["mse_se"], float_row["mse_se"])
    assert abs(exact["mse"] - float_row["mse"]) <= tolerance
    # the integer variance rounds up by 2^-16 of it and by less than sqrt(2) sigma grid units
    # (the sampler's form 2^k m; sigma is tens of thousands of grid units here)
    inflation = exact["noise_inflation"] ** 2
    assert exact["noise_total_variance"] == pytest.approx(
        float_row["noise_total_variance"] * inflation, rel=1e-4
    )
    doubled = float_row["mse"] + float_row["noise_total_variance"] / (
        PRIVATE.servers * PRIVATE.iterations
    )
    assert abs(exact["mse"] - doubled) > tolerance
