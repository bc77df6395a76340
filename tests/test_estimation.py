"""Private federated mean estimation: the one-release settings' unbiasedness and exact MSE, the
privacy of every mechanism against closed forms, a slope against the theory with its tolerance
from the fit, negative controls for each, the sweep as one program, and the command line. The
user-level settings that locate the mean first are checked in
``test_estimation_user_level.py`` (with this file's configurations and runs), the functional
mean in ``test_estimation_functional.py``.

Most of the cost is compiling (one program per setting, noise, number of sites and number of
replications), so the tests of one configuration share one run (:func:`sweep_rows`), and the
configurations of a setting share their sites and replications wherever their claims allow, so
that their runs share one compiled program."""

import contextlib
import io
import json
import math

import dp_accounting
import jax
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
from jfed.privacy import discrete
from jfed.privacy.discrete_accounting import DiscreteGaussianDpEvent
from jfed.report.rates import fit_slope
from jfed.sweep.runner import run_sweep

SETTINGS = estimation.SETTINGS
# one-release settings: cheap replications, enough of them for the MSE's and the slope's checks
SMALL = dict(sites=8, units=10, epsilon=1.0, replications=4000)
# configurations where every setting's interval holds the sites' means, so clipping is rare
UNBIASED = {
    # 500 replications: every user's release samples exact discrete Laplace noise (the test's
    # tolerance is 4 standard errors of the replications themselves, whatever their number)
    "local-user-small": dict(sites=512, units=16, epsilon=2.0, replications=500),
    # at eps 4 the search's final interval misses mu in 3e-5 of the replications (its law); at
    # S = 100 and 3,000 replications the search-law test runs the same program at eps 1
    "local-user-large": dict(sites=100, units=10**6, epsilon=4.0, replications=3000),
    "central-user": dict(sites=256, units=16, epsilon=2.0, replications=2000),
}


def config_of(setting: str, mechanism: str = "laplace", **changes) -> Estimation:
    """The configuration of ``setting``'s checks (mu = 0.3): :data:`UNBIASED`'s, else
    :data:`SMALL`."""
    fields = {**UNBIASED.get(setting, SMALL), **changes}
    return Estimation(setting=setting, mechanism=mechanism, mean=0.3).replace(**fields)


class KeepsErrors(experiments.EstimationExperiment):
    """The method's experiment, every replication's error also kept in its row (``errors:
    f64[R]``); the same program, so it shares the method's compiled executable."""

    def evaluate(self, outputs, config):
        errors = np.asarray(outputs["error"], np.float64)
        return {**super().evaluate(outputs, config), "errors": errors}


def sweep_rows():
    """``row_of(config, experiment=KeepsErrors) -> row``: the row of one run of ``config``
    through the sweep (a program sized for it alone), run once by the returned function and
    shared by the tests that check it (the ``row_of`` fixture of a module)."""
    rows: dict = {}

    def row(config: Estimation, experiment=KeepsErrors) -> dict:
        if (config, experiment) not in rows:
            (rows[config, experiment],) = run_sweep(experiment(config), [config], None,
                                                    progress=False)  # fmt: skip
        return rows[config, experiment]

    return row


@pytest.fixture(scope="module")
def row_of():
    return sweep_rows()


def exact_mse(config: Estimation) -> float:
    """The MSE of the one-release settings: sampling variance plus the noise's variance on the
    estimate, each from the setting's own sensitivity (written here, not taken from jfed)."""
    S, n, eps, c = config.sites, config.units, config.epsilon, 1.0
    sensitivity = {"none": 0.0, "local-item": 2 * c, "central-item": 2 * c / (S * n),
                   "federated": 2 * c / n}[config.setting]  # fmt: skip
    averaged = {"none": 1, "local-item": S * n, "central-item": 1, "federated": S}[config.setting]
    noise = 2.0 * (sensitivity / eps) ** 2 / averaged  # Laplace(b) has variance 2 b^2
    return (1.0 - config.mean**2) / (S * n) + noise


def check_unbiased(row: dict) -> None:
    """|bias| within 4 standard errors of the replications (fixed seed); clipping rare."""
    assert abs(row["bias"]) <= 4 * row["bias_se"], row
    assert row["clipped_fraction"] < 0.05


def unbiased_cases(settings, slow: dict[str, str]) -> list:
    """``(setting, mechanism)`` of every setting of ``settings`` with both mechanisms; the
    cases ``slow`` names (``setting-mechanism``: why, and which case runs their code by
    default) marked slow."""
    cases = []
    for setting in settings:
        for mechanism in ("laplace", "gaussian"):
            name = f"{setting}-{mechanism}"
            marks = [pytest.mark.slow(reason=slow[name])] if name in slow else []
            cases.append(pytest.param(setting, mechanism, id=name, marks=marks))
    return cases


# the settings of one release (the user-level ones are in test_estimation_user_level.py)
ONE_RELEASE = [setting for setting in SETTINGS if setting not in UNBIASED]
SLOW_ONE_RELEASE = {
    "none-gaussian": "nothing is released: none-laplace runs the same estimator",
    "local-item-gaussian": "a discrete Gaussian draw per unit (18 s): local-item-laplace runs the "
    "same estimator on the same grid, central-item-gaussian the same noise "
    "(tests/test_estimation_exact.py checks its mean and variance)",
}


@pytest.mark.parametrize("setting, mechanism", unbiased_cases(ONE_RELEASE, SLOW_ONE_RELEASE))
def test_every_one_release_estimator_is_unbiased(setting, mechanism, row_of):
    """|bias| within 4 standard errors of the replications (fixed seed)."""
    check_unbiased(row_of(config_of(setting, mechanism)))


def test_unbiasedness_check_catches_a_biased_estimator(row_of):
    """Negative control: dividing the pooled sum by n + 1 units per site (a counting bug)
    shrinks the estimate by n / (n + 1), a bias the same 4-standard-error check catches (on
    the replications of the federated estimator's unbiasedness check)."""
    config = config_of("federated")
    row = row_of(config)
    estimates = row["errors"] + config.mean
    shrunk = estimates * config.units / (config.units + 1) - config.mean
    se = shrunk.std(ddof=1) / math.sqrt(len(shrunk))
    assert abs(row["bias"]) <= 4 * row["bias_se"]
    assert abs(shrunk.mean()) > 4 * se


@pytest.mark.parametrize("setting", ONE_RELEASE)
def test_mse_matches_the_closed_form(setting, row_of):
    """Measured MSE within 4 standard errors of sampling variance + noise variance."""
    config = config_of(setting)
    row = row_of(config)
    assert abs(row["mse"] - exact_mse(config)) <= 4 * row["mse_se"], (row["mse"], exact_mse(config))


class HalfSensitivity(experiments.EstimationExperiment):
    """A bug to catch: the noise calibrated to half the true sensitivity (c instead of 2c)."""

    def calibrate(self, config):
        hp, fields = super().calibrate(config)
        return hp._replace(first_noise=hp.first_noise / 2), fields


def test_mse_check_catches_noise_of_the_wrong_sensitivity(row_of):
    """Negative control: a quarter of the noise's variance (0.0025 instead of 0.01 on an MSE
    of 0.021) is caught at the replications of the closed-form check."""
    config = config_of("federated")
    row = row_of(config, HalfSensitivity)
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
    config = config_of(setting, mechanism)
    hp, record = experiments.calibrate_mean(config)
    # certified from the releases' events at the f32 numbers that ran: the calibration's float64
    # noise and clip rounded to f32 (2^-24 each), which moves eps by a few 1e-8
    # (the discrete Gaussian's: the device rounds its variance up to 2^k m, by up to a
    # relative 1 / (sigma sqrt 2) in grid units, which only lowers eps)
    closeness = 1e-3 if mechanism == "gaussian" else 1e-6
    assert record["epsilon_certified"] == pytest.approx(config.epsilon, rel=closeness)
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


def shifted_discrete_gaussian_delta(epsilon: float, variance: float, shift: int) -> float:
    """``sum_y max(0, P(y) - e^eps P(y - shift))`` for ``P`` the pmf of ``N_Z(0, variance)``,
    summed here directly over 50 standard deviations."""
    reach = int(50 * math.sqrt(variance)) + shift + 50
    y = np.arange(-reach, reach + 1, dtype=np.float64)
    weights = np.exp(-(y**2) / (2 * variance))
    p = weights / weights.sum()
    q = np.exp(-((y - shift) ** 2) / (2 * variance)) / weights.sum()
    return float(np.sum(np.maximum(0.0, p - math.exp(epsilon) * q)))


def _discrete_gaussian_epsilon(event, delta: float) -> float:
    """eps at delta of a one-coordinate discrete Gaussian release, the largest shift's (the
    record states the worst of every shift up to it; equal where the largest is the worst)."""
    variance = (event.noise_multiplier * event.l2_sensitivity) ** 2
    shift = round(event.l2_sensitivity)
    return brentq(lambda e: shifted_discrete_gaussian_delta(e, variance, shift) - delta,
                  0.0, 50.0, xtol=1e-13, rtol=1e-13)  # fmt: skip


def _release_epsilon(event, delta: float) -> float:
    if isinstance(event, DiscreteGaussianDpEvent):
        return _discrete_gaussian_epsilon(event, delta)
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
    gaussians = sum(isinstance(e, dp_accounting.GaussianDpEvent | DiscreteGaussianDpEvent)
                    for e in events)  # fmt: skip
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
        if grid_norm is not None and config.mechanism == "gaussian":
            # the variance the device draws: (z L)^2, z = 2 sigma / Delta in float32, with the
            # sampler's 2^-16 margin, rounded up to its 2^k m
            z = np.float32(2.0) * np.float32(scale_factor * scale) / np.float32(sensitivity)
            least = discrete.variance_at_least(z, grid_norm**2)
            bits, quotient = discrete.discrete_gaussian_parameters(np.asarray(least))
            variance = float(2 ** int(bits) * int(quotient))
            return DiscreteGaussianDpEvent(math.sqrt(variance) / (2 * grid_norm),
                                           2 * grid_norm, 2 * grid_norm, 1)  # fmt: skip
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
    exact releases' discrete events on the record's grid). Negative control: the same events
    at 0.99 times their noise multiplier are caught."""
    config = config_of(setting, mechanism)
    hp, record = experiments.calibrate_mean(config)
    delta, grid_norm = record["delta"], record["grid_norm"]
    assert grid_norm is not None  # the default arithmetic
    events, combined = released_events(config, hp, grid_norm=grid_norm)
    # the discrete Gaussian's: bisection to 1e-10, and float32 z may move its variance by one
    closeness = 1e-7 if mechanism == "gaussian" else 1e-9
    assert record["epsilon_certified"] == pytest.approx(_basic_epsilon(events, combined, delta),
                                                        rel=closeness)  # fmt: skip
    # (less noise, not more: where randomized response's eps is the worst of parallel releases,
    # only a larger eps of the noise's release moves the record)
    wrong, _ = released_events(config, hp, scale_factor=0.99, grid_norm=grid_norm)
    assert record["epsilon_certified"] != pytest.approx(_basic_epsilon(wrong, combined, delta),
                                                        rel=1e-9)  # fmt: skip


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_a_release_left_out_of_the_central_curators_event_is_caught(mechanism):
    """Negative control: the central user-level record is not the eps of its first release
    alone (the composition holds both)."""
    config = config_of("central-user", mechanism)
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


def _units_slope(row_of, experiment=KeepsErrors):
    # each n run on its own: the federated sites draw their means whole, so n is a number of
    # the program (not a shape) and every run shares the unbiasedness check's executable
    config = config_of("federated")
    rows = [row_of(config.replace(units=n), experiment) for n in (4, 8, 16, 32)]
    n = np.array([r["units"] for r in rows], np.float64)
    value = np.array([r["privacy_mse"] for r in rows])
    se = np.array([r["mse_se"] for r in rows])
    return fit_slope(n, value, se)


class UnitSensitivity(experiments.EstimationExperiment):
    """A bug to catch: the noise calibrated to a unit's sensitivity 2c, not the site mean's."""

    def calibrate(self, config):
        hp, fields = super().calibrate(config)
        return hp._replace(first_noise=hp.first_noise * config.units), fields


def test_federated_privacy_term_falls_as_n_to_the_minus_2(row_of):
    """The fitted slope of the privacy term in n is -2 (S n^-2 eps^-2) within 3 of the fit's
    standard errors. Negative control: noise calibrated to the unit-level sensitivity 2c
    instead of the site mean's 2c / n gives a slope near 0, outside that tolerance."""
    fit = _units_slope(row_of)
    assert abs(fit.slope + 2.0) <= 3 * fit.slope_se, fit
    wrong = _units_slope(row_of, UnitSensitivity)
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


# ------------------------------------------------------------------ the sweep, command line

# a local-item (S, n, eps) grid of 8 points, 2 seeds each: its units drawn one by one, so both
# S and n are padded; all 16 runs in one slice
GRID_ARGV = ["sweep", "estimation", "--setting", "local-item", "--epsilon", "0.5,2",
             "--grid", "sites=2,6", "--grid", "units=3,7", "--seeds", "2",
             "--replications", "50", "--slice-size", "16"]  # fmt: skip


@pytest.fixture(scope="module")
def cli_sweep(tmp_path_factory):
    """``(printed lines, results folder, rows)`` of :data:`GRID_ARGV` run once through the
    command line on the host CPU (the grid test's claim of equal bits is the CPU's)."""
    out = tmp_path_factory.mktemp("estimation") / "sweep"
    printed = io.StringIO()
    with jax.default_device(jax.devices("cpu")[0]), contextlib.redirect_stdout(printed):
        assert main([*GRID_ARGV, "--out", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    return [line for line in printed.getvalue().splitlines() if line], out, rows


@pytest.mark.usefixtures("on_cpu")  # the same bits at another vector width: the CPU's claim
def test_a_grid_of_sites_units_and_eps_is_one_program_and_padding_changes_no_draw(cli_sweep):
    """Every point of an (S, n, eps) grid runs in one compiled program, and a point's row is the
    same bits as the point run alone (its draws are addressed by replication, site and unit)."""
    _, _, rows = cli_sweep
    assert len(rows) == 16
    assert len({r["compile_seconds"] for r in rows}) == 1
    assert {r["slice"] for r in rows} == {0}
    point = Estimation(setting="local-item", sites=2, units=7, epsilon=0.5, replications=50)
    (alone,) = run_sweep(build_experiment(point), [point], None, progress=False)
    (padded,) = [r for r in rows if r["config_key"] == alone["config_key"]]
    assert alone["mse"] == padded["mse"] and alone["bias"] == padded["bias"]


def test_cli_sweep_estimation_reports_every_grid_point(cli_sweep):
    lines, out, _ = cli_sweep
    assert len(lines) == 8 and all("at sites=" in line for line in lines), lines
    assert (out / "utility.png").exists()


def test_cli_run_estimation(capsys):
    # the configuration of the federated checks above: the same compiled program
    argv = ["run", "estimation", "--setting", "federated", "--sites", "8", "--units", "10",
            "--epsilon", "1", "--replications", "4000", "--json", "-"]  # fmt: skip
    assert main(argv) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["setting"] == "federated" and record["sites"] == 8
    assert record["notion"] == "item-level eps-DP of each site's release"
    assert record["accountant"] == "discrete Laplace mechanism on an integer grid (pure eps)"
    assert record["mechanism_model"].startswith("exact") and record["grid_norm"] >= 1
    assert record["theory_rate"] == pytest.approx(max(1 / 80, 1 / (8 * 100)))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "estimation", "--epsilon", "0"], "--epsilon in"),
        (["run", "estimation", "--sites", "0"], "--sites in [1,"),
        (["run", "estimation", "--units", "0"], "--units in [1,"),
        (["run", "estimation", "--setting", "local-user-small", "--sites", "1"], "--sites >= 2"),
        (["run", "estimation", "--setting", "secret"], "invalid choice: 'secret'"),
        (["run", "estimation", "--delta", "1e-6"], "only with --mechanism gaussian"),
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


def test_huge_epsilon_is_calibrated_without_overflow():
    hp, record = experiments.calibrate_mean(
        Estimation(setting="local-user-large", sites=40, units=10**6, epsilon=1e4)
    )
    assert float(hp.truthful) == 1.0
    assert record["epsilon_certified"] == pytest.approx(1e4, rel=1e-6)


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
