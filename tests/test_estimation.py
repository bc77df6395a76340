"""Private federated estimation: unbiasedness, the exact MSE of the one-release settings, the
privacy of every mechanism against closed forms, a slope against the theory with its tolerance
from the fit, negative controls for each, the functional mean, the sweep as one program, and
the command line."""

import json
import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld.privacy_loss_mechanism import (
    DiscreteLaplacePrivacyLoss,
    GaussianPrivacyLoss,
    LaplacePrivacyLoss,
)
from scipy.optimize import brentq
from scipy.stats import norm

from jfed.algorithms import estimation, functional
from jfed.cli.main import main
from jfed.methods import Estimation, FunctionalEstimation, build_experiment
from jfed.methods import estimation as experiments
from jfed.report.rates import fit_slope
from jfed.sweep import run
from jfed.sweep.runner import run_sweep

SETTINGS = estimation.SETTINGS
# configurations where every setting's interval holds the sites' means, so clipping is rare
UNBIASED = {
    # 500 replications: every user's release samples exact discrete Laplace noise (the test's
    # tolerance is 4 standard errors of the replications themselves, whatever their number)
    "local-user-small": dict(sites=512, units=16, epsilon=2.0, replications=500),
    "local-user-large": dict(sites=400, units=10**6, epsilon=1.0, replications=500),
    "central-user": dict(sites=256, units=16, epsilon=2.0),
}


def _rows(configs, experiment_=None):
    return run_sweep(experiment_ or build_experiment(configs[0]), configs, None, progress=False)


def exact_mse(config: Estimation) -> float:
    """The MSE of the one-release settings: sampling variance plus the noise's variance on the
    estimate, each from the setting's own sensitivity (written here, not taken from jfed)."""
    S, n, eps, c = config.sites, config.units, config.epsilon, 1.0
    sensitivity = {"none": 0.0, "local-item": 2 * c, "central-item": 2 * c / (S * n),
                   "federated": 2 * c / n}[config.setting]  # fmt: skip
    averaged = {"none": 1, "local-item": S * n, "central-item": 1, "federated": S}[config.setting]
    noise = 2.0 * (sensitivity / eps) ** 2 / averaged  # Laplace(b) has variance 2 b^2
    return (1.0 - config.mean**2) / (S * n) + noise


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
@pytest.mark.parametrize("setting", SETTINGS)
def test_every_estimator_is_unbiased(setting, mechanism):
    """|bias| within 4 standard errors of the replications (fixed seed)."""
    fields = UNBIASED.get(setting, dict(sites=8, units=10, epsilon=1.0))
    fields = {"replications": 2000, **fields}
    config = Estimation(setting=setting, mechanism=mechanism, mean=0.3, **fields)
    (row,) = _rows([config])
    assert abs(row["bias"]) <= 4 * row["bias_se"], row
    assert row["clipped_fraction"] < 0.05


def test_unbiasedness_check_catches_a_biased_estimator():
    """Negative control: dividing the pooled sum by n + 1 units per site (a counting bug)
    shrinks the estimate by n / (n + 1), a bias the same 4-standard-error check catches."""
    config = Estimation(setting="federated", sites=8, units=10, epsilon=4.0, replications=2000)
    program = build_experiment(config)
    (row,) = _rows([config], program)
    state_errors = _errors(program, config)
    estimates = state_errors + config.mean
    shrunk = estimates * config.units / (config.units + 1) - config.mean
    se = shrunk.std(ddof=1) / math.sqrt(len(shrunk))
    assert abs(row["bias"]) <= 4 * row["bias_se"]
    assert abs(shrunk.mean()) > 4 * se


def _errors(program, config) -> np.ndarray:
    from jfed.engine import simulate

    hp, _ = program.calibrate(config)
    _, info = simulate(program.algorithm, program.task.train, hp, jax.random.key(config.seed),
                       config.replications)  # fmt: skip
    return np.asarray(info.error, np.float64)


@pytest.mark.parametrize("setting", ["none", "local-item", "central-item", "federated"])
def test_mse_matches_the_closed_form(setting):
    """Measured MSE within 4 standard errors of sampling variance + noise variance."""
    config = Estimation(setting=setting, sites=8, units=10, epsilon=1.0, replications=4000)
    (row,) = _rows([config])
    assert abs(row["mse"] - exact_mse(config)) <= 4 * row["mse_se"], (row["mse"], exact_mse(config))


class HalfSensitivity(experiments.EstimationExperiment):
    """A bug to catch: the noise calibrated to half the true sensitivity (c instead of 2c)."""

    def calibrate(self, config):
        hp, fields = super().calibrate(config)
        return hp._replace(first_noise=hp.first_noise / 2), fields


def test_mse_check_catches_noise_of_the_wrong_sensitivity():
    config = Estimation(setting="federated", sites=8, units=10, epsilon=0.5, replications=4000)
    (row,) = _rows([config], HalfSensitivity(config))
    assert abs(row["mse"] - exact_mse(config)) > 4 * row["mse_se"]


# --------------------------------------------------------------------------------- privacy


def released_sensitivities(config: Estimation, hp) -> list[float]:
    """Each release's sensitivity under the setting's neighbouring relation, derived from the
    clipping the algorithm applies (intervals cut to [-c, c])."""
    S, n, c = config.sites, config.units, float(hp.clip)
    width = float(hp.width)
    if config.setting == "local-item":
        return [2 * c]
    if config.setting == "central-item":
        return [2 * c / (S * n)]
    if config.setting == "federated":
        return [2 * c / n]
    if config.setting == "local-user-small":
        return [2 * c, min(2 * width, 2 * c)]
    if config.setting == "central-user":
        return [2 * c / S, min(2 * width, 2 * c) / S]
    stages = int(hp.stages)
    return [min(2 * c * 0.75**stages + 2 * width, 2 * c)]


def gaussian_delta(sensitivity: float, std: float, epsilon: float) -> float:
    """Balle and Wang's exact delta of a Gaussian release, from scipy directly."""
    r = sensitivity / std
    return norm.cdf(r / 2 - epsilon / r) - math.exp(epsilon) * norm.cdf(-r / 2 - epsilon / r)


def _privacy_holds(config: Estimation, hp) -> bool:
    scales = [float(hp.first_noise), float(hp.second_noise)]
    if config.setting == "local-user-large":
        scales = [float(hp.second_noise)]
        truthful = float(hp.truthful)
        if truthful / (1 - truthful) > math.exp(config.epsilon) * (1 + 1e-6):
            return False  # randomized response's likelihood ratio
    share = 0.5 if config.setting == "central-user" else 1.0
    for sensitivity, scale in zip(released_sensitivities(config, hp), scales, strict=False):
        if config.mechanism == "laplace":
            # Laplace likelihood ratio of two inputs Delta apart: at most exp(Delta / b)
            if sensitivity / scale > config.epsilon * share * (1 + 1e-9):
                return False
        elif gaussian_delta(sensitivity, scale, config.epsilon * share) > (
            experiments.delta_of(config) * share * (1 + 1e-6)
        ):
            return False
    return True


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
@pytest.mark.parametrize("setting", [s for s in SETTINGS if s != "none"])
def test_every_mechanism_is_private_at_its_eps(setting, mechanism):
    """Every release's noise meets its (eps, delta) at the sensitivity of what it releases:
    Laplace ratio Delta / b <= eps; Gaussian delta from the closed form <= delta; randomized
    response's ratio = e^eps. Negative control: the same noise on a query of twice the
    sensitivity fails."""
    fields = UNBIASED.get(setting, dict(sites=8, units=10, epsilon=1.0))
    config = Estimation(setting=setting, mechanism=mechanism, **fields)
    hp, record = experiments.calibrate_mean(config)
    # certified from the releases' events at the f32 numbers that ran: the calibration's float64
    # noise and clip rounded to f32 (2^-24 each), which moves eps by a few 1e-8
    assert record["epsilon_certified"] == pytest.approx(config.epsilon, rel=1e-6)
    assert record["epsilon_certified"] <= config.epsilon * (1 + 1e-6)
    assert _privacy_holds(config, hp)
    doubled = hp._replace(first_noise=hp.first_noise / 2, second_noise=hp.second_noise / 2)
    assert not _privacy_holds(config, doubled)


# ------------------------------------------------- certified eps: dp-accounting's for what ran


def _laplace_epsilon(event: dp_accounting.LaplaceDpEvent) -> float:
    """Pure eps of a Laplace release: dp-accounting's privacy loss at its extremes (|x| past
    the sensitivity 1)."""
    loss = LaplacePrivacyLoss(event.noise_multiplier, sensitivity=1.0)
    return max(loss.privacy_loss(-2.0), loss.privacy_loss(2.0))


def _gaussian_epsilon(event: dp_accounting.GaussianDpEvent, delta: float) -> float:
    """eps at delta of a Gaussian release: dp-accounting's exact hockey-stick divergence
    (Balle and Wang's formula), inverted."""
    loss = GaussianPrivacyLoss(event.noise_multiplier, sensitivity=1.0)
    return brentq(lambda e: loss.get_delta_for_epsilon(e) - delta, 0.0, 1e3, xtol=1e-15,
                  rtol=1e-15)  # fmt: skip


def _discrete_laplace_epsilon(event: dp_event.DiscreteLaplaceDpEvent) -> float:
    """Pure eps of a discrete Laplace release on the grid: dp-accounting's privacy loss at its
    extremes (integers past the sensitivity)."""
    loss = DiscreteLaplacePrivacyLoss(event.noise_parameter, sensitivity=event.sensitivity)
    return max(loss.privacy_loss(-2 * event.sensitivity), loss.privacy_loss(2 * event.sensitivity))


def _release_epsilon(event, delta: float) -> float:
    if isinstance(event, dp_accounting.LaplaceDpEvent):
        return _laplace_epsilon(event)
    if isinstance(event, dp_event.DiscreteLaplaceDpEvent):
        return _discrete_laplace_epsilon(event)
    if isinstance(event, dp_accounting.GaussianDpEvent):
        return _gaussian_epsilon(event, delta)
    # binary randomized response (dp-accounting has no privacy loss for it): the closed form
    assert isinstance(event, dp_accounting.RandomizedResponseDpEvent)
    p, k = event.noise_parameter, event.num_buckets
    return math.log1p(k * (1 - p) / p)


def _basic_epsilon(events: list, combined: str, delta: float) -> float:
    """Basic composition of exact releases, written here: composed releases add their eps,
    delta shared equally by the Gaussian ones; releases on disjoint users ("parallel") take the
    worst."""
    if combined == "parallel":
        return max(_release_epsilon(e, delta) for e in events)
    gaussians = sum(isinstance(e, dp_accounting.GaussianDpEvent) for e in events)
    return sum(_release_epsilon(e, delta / max(gaussians, 1)) for e in events)


def released_events(
    config: Estimation, hp, scale_factor: float = 1.0, grid_norm: int | None = None
) -> tuple[list, str]:
    """The events of one round's releases, built here with dp-accounting's classes from the f32
    numbers that ran and the sensitivities of :func:`released_sensitivities`, and how they
    combine. On the grid of ``grid_norm`` L (the default Laplace releases): a contribution moves
    the integer sum by at most 2 L, the noise's scale is ``b / Delta`` times that, so the event
    is ``DiscreteLaplaceDpEvent(Delta / (2 L b), 2 L)``. ``local-user-large``'s votes:
    randomized response whose flip probability is the sampler's from the f32 ``truthful``
    (``1 - truthful + 2^-24``, at most 1/2)."""
    sensitivities = released_sensitivities(config, hp)
    scales = [float(hp.first_noise), float(hp.second_noise)]
    if config.setting == "local-user-large":
        scales = [float(hp.second_noise)]

    def event(scale: float, sensitivity: float):
        if grid_norm is not None:
            return dp_event.DiscreteLaplaceDpEvent(
                sensitivity / (2 * grid_norm * scale_factor * scale), 2 * grid_norm
            )
        if config.mechanism == "laplace":
            return dp_accounting.LaplaceDpEvent(scale_factor * scale / sensitivity)
        return dp_accounting.GaussianDpEvent(scale_factor * scale / sensitivity)

    events = [event(scale, sensitivity)
              for scale, sensitivity in zip(scales, sensitivities, strict=False)]  # fmt: skip
    if config.setting == "local-user-large":
        flip = min(1.0 - float(hp.truthful) + 2.0**-24, 0.5)
        events.insert(0, dp_accounting.RandomizedResponseDpEvent(2.0 * flip, 2))
    return events, "composed" if config.setting == "central-user" else "parallel"


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
@pytest.mark.parametrize("setting", [s for s in SETTINGS if s != "none"])
def test_certified_epsilon_is_dp_accountings_for_the_releases_that_ran(setting, mechanism):
    """The record's eps equals, to 1e-9, basic composition of dp-accounting's exact eps for the
    round's releases as built here (composed for the central user-level curator, the worst
    release for the settings whose users release once or whose releases are one each; the
    Laplace releases' discrete events on the record's grid). Negative control: the same events
    at 1.01 times their noise multiplier are caught."""
    fields = UNBIASED.get(setting, dict(sites=8, units=10, epsilon=1.0))
    config = Estimation(setting=setting, mechanism=mechanism, **fields)
    hp, record = experiments.calibrate_mean(config)
    delta, grid_norm = record["delta"], record["grid_norm"]
    assert (grid_norm is not None) == (mechanism == "laplace")  # the default arithmetic
    events, combined = released_events(config, hp, grid_norm=grid_norm)
    assert record["epsilon_certified"] == pytest.approx(_basic_epsilon(events, combined, delta),
                                                        rel=1e-9)  # fmt: skip
    wrong, _ = released_events(config, hp, scale_factor=1.01, grid_norm=grid_norm)
    assert record["epsilon_certified"] != pytest.approx(_basic_epsilon(wrong, combined, delta),
                                                        rel=1e-9)  # fmt: skip


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_a_release_left_out_of_the_central_curators_event_is_caught(mechanism):
    """Negative control: the central user-level record is not the eps of its first release
    alone (the composition holds both)."""
    config = Estimation(setting="central-user", mechanism=mechanism, **UNBIASED["central-user"])
    hp, record = experiments.calibrate_mean(config)
    events, combined = released_events(config, hp, grid_norm=record["grid_norm"])
    left_out = _basic_epsilon(events[:1], combined, record["delta"])
    assert record["epsilon_certified"] != pytest.approx(left_out, rel=1e-9)
    assert left_out < 0.6 * record["epsilon_certified"]  # about half: one release of two


@pytest.mark.parametrize("shape", ["anisotropic", "isotropic"])
def test_functional_certified_epsilon_is_dp_accountings_for_the_release_that_ran(shape):
    """The functional mean's record eps equals dp-accounting's for ``GaussianDpEvent(1 /
    ||Delta / sigma||_2)`` built here from the f32 clip bounds and noise that ran (Delta_l = 2
    kappa_l / (n // T)), to 1e-9. Negative controls: sigma 1% larger, and the sensitivity of
    a batch one function larger, are caught."""
    config = FunctionalEstimation(servers=2, functions=41, observations=20, terms=6,
                                  iterations=2, epsilon=0.7, noise_shape=shape)  # fmt: skip
    hp, record = experiments.calibrate_functional(config, 6)
    clip, std = np.asarray(hp.clip, np.float64)[:6], np.asarray(hp.noise_std, np.float64)[:6]

    def epsilon(batch: int, noise_factor: float = 1.0) -> float:
        whitened = (2.0 * clip / batch) / (noise_factor * std)
        event = dp_accounting.GaussianDpEvent(1.0 / np.linalg.norm(whitened))
        return _gaussian_epsilon(event, record["delta"])

    assert record["epsilon_certified"] == pytest.approx(epsilon(41 // 2), rel=1e-9)
    assert record["epsilon_certified"] != pytest.approx(epsilon(41 // 2, 1.01), rel=1e-9)
    assert record["epsilon_certified"] != pytest.approx(epsilon(41 // 2 + 1), rel=1e-9)


def test_randomized_response_keeps_the_true_bit_at_e_eps_odds():
    config = Estimation(setting="local-user-large", sites=40, units=10**6, epsilon=0.7)
    hp, _ = experiments.calibrate_mean(config)
    truthful = float(hp.truthful)
    assert truthful / (1 - truthful) == pytest.approx(math.exp(0.7), rel=1e-6)


# ------------------------------------------------------------------------------------ rates


def _units_slope(program):
    # as many replications as the program runs (the experiment's configuration fixes them)
    configs = [program.config.replace(units=n) for n in (4, 8, 16, 32)]
    rows = run_sweep(program, configs, None, progress=False)
    n = np.array([r["units"] for r in rows], np.float64)
    value = np.array([r["privacy_mse"] for r in rows])
    se = np.array([r["mse_se"] for r in rows])
    return fit_slope(n, value, se)


def test_federated_privacy_term_falls_as_n_to_the_minus_2():
    """The fitted slope of the privacy term in n is -2 (S n^-2 eps^-2) within 3 of the fit's
    standard errors. Negative control: noise calibrated to the unit-level sensitivity 2c
    instead of the site mean's 2c / n gives a slope near 0, outside that tolerance."""
    config = Estimation(setting="federated", sites=8, units=4, epsilon=0.5)
    fit = _units_slope(build_experiment(config))
    assert abs(fit.slope + 2.0) <= 3 * fit.slope_se, fit

    class UnitSensitivity(experiments.EstimationExperiment):
        def calibrate(self, config):
            hp, fields = super().calibrate(config)
            return hp._replace(first_noise=hp.first_noise * config.units), fields

    wrong = _units_slope(UnitSensitivity(config))
    assert abs(wrong.slope + 2.0) > 3 * wrong.slope_se, wrong
    assert abs(wrong.slope) < 0.3


def test_slope_fit_recovers_a_known_power_and_its_error():
    x = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    rng = np.random.default_rng(0)
    slopes = []
    for _ in range(400):
        y = 3.0 * x**-1.5 * np.exp(0.05 * rng.standard_normal(5))
        slopes.append(fit_slope(x, y, 0.05 * y).slope)
    fit = fit_slope(x, 3.0 * x**-1.5, 0.05 * 3.0 * x**-1.5)
    assert np.mean(slopes) == pytest.approx(-1.5, abs=0.01)
    assert np.std(slopes) == pytest.approx(fit.slope_se, rel=0.15)


# ----------------------------------------------------------------------------- the sweep


@pytest.mark.usefixtures("on_cpu")  # the same bits at another vector width: the CPU's claim
def test_a_grid_of_sites_units_and_eps_is_one_program_and_padding_changes_no_draw():
    """Every point of an (S, n, eps) grid runs in one compiled program, and a point's row is the
    same bits as the point run alone (its draws are addressed by replication, site and unit)."""
    base = Estimation(setting="local-item", replications=50)
    configs = [base.replace(sites=s, units=n, epsilon=e)
               for s in (2, 6) for n in (3, 7) for e in (0.5, 2.0)]  # fmt: skip
    rows = _rows(configs)
    assert len({r["compile_seconds"] for r in rows}) == 1
    assert {r["slice"] for r in rows} == {0}
    (alone,) = _rows([configs[2]])
    assert alone["mse"] == rows[2]["mse"] and alone["bias"] == rows[2]["bias"]


# ---------------------------------------------------------------------------- functional


@pytest.mark.parametrize("basis", ["fourier", "legendre"])
def test_basis_is_orthonormal_on_the_unit_interval(basis):
    x = (np.arange(20_000) + 0.5) / 20_000
    phi = np.asarray(functional.BASES[basis].values(jnp.asarray(x), 12), np.float64)
    gram = phi.T @ phi / len(x)
    np.testing.assert_allclose(gram, np.eye(12), atol=2e-3)


def _iterate(program, hp, key):
    """A server's SGD iterate without noise (its message's noise-free diagnostic)."""
    return program.server(hp, jnp.int32(0), key)["diagnostics"]["quiet"]


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
    iterates = jax.vmap(lambda k: _iterate(program, hp, k))(keys)
    iterates = np.asarray(iterates, np.float64)[:, :6]
    theta = model.coefficients()[:6]
    se = iterates.std(0, ddof=1) / math.sqrt(len(iterates))
    assert np.all(np.abs(iterates.mean(0) - theta) <= 4 * se)
    shrunk = iterates * 4 / 5
    assert np.any(np.abs(shrunk.mean(0) - theta) > 4 * se)


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


def test_functional_run_reports_mse_and_the_theory():
    record = run(FunctionalEstimation(servers=2, functions=40, observations=8, replications=20))
    assert record["mse"] > record["truncation_error"] >= 0
    assert record["theory_rate"] == max(
        record[k] for k in ("theory_functions", "theory_dense", "theory_private",
                            "theory_private_sparse")
    )  # fmt: skip
    assert record["notion"].startswith("user-level (eps, delta)-DP")


# ------------------------------------------------------------------------------- command line


def test_cli_run_estimation(capsys):
    argv = ["run", "estimation", "--setting", "federated", "--sites", "8", "--units", "20",
            "--epsilon", "1", "--replications", "50", "--json", "-"]  # fmt: skip
    assert main(argv) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["setting"] == "federated" and record["sites"] == 8
    assert record["notion"] == "item-level eps-DP of each site's release"
    assert record["accountant"] == "discrete Laplace mechanism on an integer grid (pure eps)"
    assert record["mechanism_model"].startswith("exact") and record["grid_norm"] >= 1
    assert record["theory_rate"] == pytest.approx(max(1 / 160, 1 / (8 * 400)))


def test_cli_sweep_estimation_reports_every_grid_point(tmp_path, capsys):
    out = str(tmp_path / "sweep")
    argv = ["sweep", "estimation", "--setting", "central-item", "--epsilon", "0.5,2",
            "--grid", "sites=2,4", "--replications", "20", "--out", out]  # fmt: skip
    assert main(argv) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line]
    assert len(lines) == 4 and all("at sites=" in line for line in lines)
    assert (tmp_path / "sweep" / "utility.png").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "estimation", "--epsilon", "0"], "--epsilon in"),
        (["run", "estimation", "--sites", "0"], "--sites in [1,"),
        (["run", "estimation", "--units", "0"], "--units in [1,"),
        (["run", "estimation", "--setting", "local-user-small", "--sites", "1"], "--sites >= 2"),
        (["run", "estimation", "--setting", "secret"], "invalid choice: 'secret'"),
        (["run", "estimation", "--delta", "1e-6"], "only with --mechanism gaussian"),
        (
            ["run", "estimation", "--mechanism", "gaussian", "--noise", "discrete"],
            "--noise applies as discrete only with --mechanism laplace",
        ),
        (["run", "functional-estimation", "--observations", "0"], "--observations in [1,"),
        (["run", "functional-estimation", "--terms", "0"], "--terms in [1,"),
        (["run", "functional-estimation", "--servers", "0"], "--servers in [1,"),
        (["run", "functional-estimation", "--functions", "0"], "--functions in [1,"),
        (["run", "functional-estimation", "--basis", "wavelet"], "invalid choice: 'wavelet'"),
        (["run", "functional-estimation", "--epsilon", "-1"], "--epsilon in"),
    ],
)
def test_bad_input_is_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("jfed: error:") and message in err and "\n" not in err, err


def test_sgd_over_disjoint_batches_averages_the_batch_means():
    """Without noise, T steps with eta_t = 1/(t + 1) over T equal disjoint batches end at the mean
    of all projections, the one-step (T = 1) iterate. Negative control: a constant step 1/2
    would weight the batches unequally and differ."""
    model = functional.Model(functional.BASES["fourier"], 2.0)
    common = dict(servers=1, functions=40, observations=6, terms=5,
                  noise_std=np.zeros(functional.MAX_TERMS),
                  clip=np.full(functional.MAX_TERMS, 1e6))  # fmt: skip
    key = jax.random.key(4)
    one = _iterate(functional.FunctionalMean(model, 40, 6, 1),
                   functional.hyperparams(iterations=1, **common), key)  # fmt: skip
    four = _iterate(functional.FunctionalMean(model, 40, 6, 4),
                    functional.hyperparams(iterations=4, **common), key)  # fmt: skip
    np.testing.assert_allclose(four, one, atol=1e-5)
    program = functional.FunctionalMean(model, 40, 6, 4)
    hp = functional.hyperparams(iterations=4, **common)
    data_key = jax.random.split(key)[0]  # the server's data stream, as in ``server``
    projections = jax.vmap(
        lambda i: program.function_projection(hp, jax.random.fold_in(data_key, i))[0]
    )(jnp.arange(40))
    batch_means = [projections[np.arange(40) % 4 == t].mean(0) for t in range(4)]
    np.testing.assert_allclose(np.mean(batch_means, axis=0), one, atol=1e-5)
    constant = jnp.zeros(functional.MAX_TERMS)
    for batch in batch_means:
        constant = constant - 0.5 * (constant - batch)
    assert not np.allclose(constant, one, atol=1e-3)


def test_huge_epsilon_is_calibrated_without_overflow():
    hp, record = experiments.calibrate_mean(
        Estimation(setting="local-user-large", sites=40, units=10**6, epsilon=1e4)
    )
    assert float(hp.truthful) == 1.0
    assert record["epsilon_certified"] == pytest.approx(1e4, rel=1e-6)


def test_the_central_user_estimate_is_projected_onto_the_parameter_set():
    """At eps 0.05 on 8 sites the curator's noise often carries the average past +-1 (mu = 0.9):
    every estimate lies in [-1, 1]. Negative control, in the same run: over 10% of the estimates
    sit exactly at +-1, where continuous noise puts no mass, so without the projection those
    would have left [-1, 1]."""
    config = Estimation(setting="central-user", sites=8, units=16, epsilon=0.05, mean=0.9,
                        replications=400)  # fmt: skip
    estimates = _errors(build_experiment(config), config) + config.mean
    assert np.all(np.abs(estimates) <= 1.0 + 1e-6)
    assert np.mean(np.isclose(np.abs(estimates), 1.0, atol=1e-6)) > 0.1


def test_the_search_law_matches_the_simulated_local_user_large_mse():
    """``search_law`` (the local-user-large MSE from the exact law of its votes, its 2^B vote
    outcomes enumerated) against 3,000 simulated replications at S = 100, n = 10^6, eps 1, where
    wrong turns are frequent (about 3 voters a stage): within 4 standard errors. Negative
    control: the law of the same search at eps 0.8 (votes flip more often) is caught."""
    config = Estimation(setting="local-user-large", sites=100, units=10**6, epsilon=1.0,
                        replications=3000)  # fmt: skip
    (row,) = _rows([config])
    law = experiments.search_law(config)
    assert abs(row["privacy_mse"] - law["privacy_mse"]) <= 4 * row["mse_se"]
    assert 0.1 < law["miss"] < 0.9  # the regime where the search's law matters
    noisier = experiments.search_law(config.replace(epsilon=0.8))
    assert abs(row["privacy_mse"] - noisier["privacy_mse"]) > 4 * row["mse_se"]
    with pytest.raises(ValueError, match="2\\^B vote outcomes: B = 30 stages"):
        experiments.search_law(config.replace(units=10**9))  # 2^30 paths: refused


def test_the_functional_price_of_privacy_is_paired_with_the_noise_free_estimate():
    """``privacy_mse`` = MSE minus the same data's noise-free MSE: a non-private run of the same
    program (same seed, same r) has exactly the private run's noise-free MSE, and the mean price
    is the noise's variance on the average of the S servers' iterates, sum_l sigma_l^2 / (S T),
    within 4 standard errors. Negative control: twice that variance is caught."""
    private = FunctionalEstimation(servers=2, functions=20, observations=16, terms=3,
                                   iterations=2, epsilon=0.5, replications=400)  # fmt: skip
    quiet = private.replace(noise_shape="none")
    rows = _rows([private, quiet])
    noisy, silent = (next(r for r in rows if r["noise_shape"] == shape)
                     for shape in ("anisotropic", "none"))  # fmt: skip
    assert abs(silent["privacy_mse"]) <= 1e-6 * silent["mse"]  # float rounding of the steps
    assert noisy["mse"] - noisy["privacy_mse"] == pytest.approx(silent["mse"], rel=1e-6)
    variance = noisy["noise_total_variance"] / (private.servers * private.iterations)
    assert abs(noisy["privacy_mse"] - variance) <= 4 * noisy["privacy_mse_se"]
    assert abs(noisy["privacy_mse"] - 2 * variance) > 4 * noisy["privacy_mse_se"]


# ------------------------------------------------------------------------- dispatch by objects


def test_every_name_of_the_catalog_is_an_object_of_its_table():
    """The settings, data models, noises, bases and noise shapes the command line accepts are
    the keys of the tables the code looks them up in (in the catalog's order)."""
    from jfed import catalog

    assert tuple(estimation.SETTINGS) == catalog.ESTIMATION_SETTINGS
    assert all(s.name == name for name, s in estimation.SETTINGS.items())
    assert tuple(estimation.DATA_MODELS) == catalog.ESTIMATION_DATA
    assert tuple(estimation.MECHANISMS) == catalog.ESTIMATION_MECHANISMS
    assert tuple(functional.BASES) == catalog.FUNCTIONAL_BASES
    assert tuple(experiments.NOISE_SHAPES) == catalog.FUNCTIONAL_NOISE_SHAPES
    assert {n for n, s in estimation.SETTINGS.items() if s.locates_first} == set(
        catalog.TWO_STAGE_SETTINGS
    ) - {"central-user"}


def _string_comparisons(path) -> list[str]:
    import ast

    def literal(node) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str)
        return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(map(literal, node.elts))

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare) and any(map(literal, [node.left, *node.comparators])):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_estimation_code_compares_no_name_with_a_string(tmp_path):
    """No ``== "..."`` / ``in ("...", ...)`` in the estimation methods and algorithms: names
    are looked up once in their tables. Negative control: the walk finds the comparison in a
    line written for it."""
    import pathlib

    import jfed

    root = pathlib.Path(jfed.__file__).parent
    paths = [root / "methods" / "estimation.py", root / "algorithms" / "estimation.py",
             root / "algorithms" / "functional.py",
             root / "algorithms" / "estimation_aggregators.py"]  # fmt: skip
    assert [line for path in paths for line in _string_comparisons(path)] == []
    control = tmp_path / "control.py"
    control.write_text('if config.setting in ("none", "local-item"):\n    pass\n')
    assert len(_string_comparisons(control)) == 1
