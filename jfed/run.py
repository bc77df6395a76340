"""Run one configuration of a regression method on a task and describe it as a record.

This is what ``jfed run`` calls; sims and sweeps build on it. Each function calibrates on the host
(privacy layer), simulates on the device (engine), evaluates on the host in float64 and returns a
JSON-ready dict with the fields of DESIGN.md (algorithm, dataset, n_clients, dim, rounds,
epsilon, delta, accountant, sigma, metrics, the non-private reference, seconds, seed, versions).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from jfed._validation import check_int_range, check_open_unit, check_positive
from jfed.algorithms import dpsgd, modulated, ols
from jfed.algorithms import modulated_reconstruction as reconstruction
from jfed.algorithms.linear import r2_curve, r2_score
from jfed.catalog import MODULATED_ESTIMATORS
from jfed.data import RegressionTask, load_regression, synthetic_regression
from jfed.engine import ExecutionPlan, simulate
from jfed.privacy import PrivacyGuarantee
from jfed.report import versions

ESTIMATORS = MODULATED_ESTIMATORS


def load_task(
    dataset: str = "fair",
    synthetic: bool = False,
    n_clients: int = 100_000,
    dim: int = 10,
    seed: int = 0,
) -> RegressionTask:
    """A real task by name, or a procedural synthetic one with ``n_clients`` clients in ``dim``."""
    if synthetic:
        return synthetic_regression(jax.random.key(10_007 + seed), n_clients, dim)
    return load_regression(dataset)


def _timed_simulate(algorithm, task, hp, seed, rounds, plan, progress=False):
    """Simulate and time it: ``(state, infos, timing)`` with ``timing`` the record fields
    ``seconds`` (the whole call), ``compile_seconds`` and ``run_seconds`` (apart, except with a
    progress bar), the ``plan`` used and the ``device``."""
    plan = (plan or ExecutionPlan.for_backend()).fitted(task.train.n_clients)
    timings: dict = {}
    start = time.perf_counter()
    state, infos = simulate(
        algorithm, task.train, hp, jax.random.key(seed), rounds, plan, progress=progress,
        timings=None if progress else timings,
    )  # fmt: skip
    jax.block_until_ready((state, infos))
    device = jax.devices()[0]
    timing = {
        "seconds": time.perf_counter() - start,
        "compile_seconds": timings.get("compile_seconds"),
        "run_seconds": timings.get("run_seconds"),
        "plan": plan.describe(),
        "device": f"{device.platform}: {device.device_kind}",
    }
    return state, infos, timing


def ols_reference(task: RegressionTask, plan: ExecutionPlan | None = None) -> dict:
    """Non-private OLS on the training clients: its parameter and test / validation R^2."""
    state, _, timing = _timed_simulate(
        ols.LeastSquares(task.dim), task, jnp.float32(0.0), 0, 1, plan
    )
    theta = np.asarray(state.theta, np.float64)
    return {
        "theta": theta,
        "test_r2": r2_score(theta, *task.test),
        "validation_r2": r2_score(theta, *task.validation),
        "seconds": timing["seconds"],
        "timing": timing,
    }


def reconstruction_fields(
    task: RegressionTask, settings: ModulatedSettings, noise_std: float, releases: int
) -> dict:
    """What an attacker can reconstruct of one client's features from its ``releases`` messages:
    the Cramer-Rao bound on any unbiased attacker (without and with the public response's leak)
    and the direct attacker's error, per coordinate of the standardised features."""
    population = task.train
    if hasattr(population, "features"):
        leak = reconstruction.response_information(population.features, population.targets)
    else:  # procedural clients: y = <x, theta_star> + noise
        theta_star = np.asarray(population.theta_star, np.float64)
        leak = float(theta_star @ theta_star) / float(population.noise_std) ** 2
    common = (task.dim, settings.alpha, settings.beta, settings.omega, noise_std, releases)
    return {
        "lower_bound_mse_per_coordinate": reconstruction.reconstruction_lower_bound(*common),
        "lower_bound_mse_per_coordinate_with_response": reconstruction.reconstruction_lower_bound(
            *common, response_information=leak, form="spectral"
        ),
        "trace_lower_bound_mse_per_coordinate_with_response": (
            reconstruction.reconstruction_lower_bound(*common, response_information=leak)
        ),
        "direct_attack_mse_per_coordinate": reconstruction.direct_attack_error(
            task.dim, settings.alpha, settings.beta, noise_std, releases
        ),
        "releases": releases,
        "notion": "Cramer-Rao bounds on any unbiased attacker, averaged over phases and "
        "directions (seed 001 section 6; with the response: the spectral form, and the seed's "
        "trace form); features standardised, so 1 is a coordinate's variance",
    }


def _base_record(algorithm: str, task: RegressionTask, rounds: int, seed: int) -> dict:
    return {
        "algorithm": algorithm,
        "dataset": task.info.name,
        "n_clients": task.n_clients,
        "dim": task.dim,
        "rounds": rounds,
        "seed": seed,
    }


def _privacy_fields(guarantee: PrivacyGuarantee, sigma: float, target: float) -> dict:
    """``epsilon`` is the target, ``epsilon_certified`` what the accountant certifies for the
    noise used (at most the target; equal up to float rounding for closed forms)."""
    return {
        "epsilon": target,
        "epsilon_certified": guarantee.epsilon,
        "delta": guarantee.delta,
        "accountant": guarantee.accountant,
        "sigma": sigma,
        "privacy": guarantee.to_dict(),
    }


@dataclass(frozen=True)
class ModulatedSettings:
    """The method parameters of a modulated run (CLI flags), with their defaults.

    ``clip`` is the feature radius C; ``None`` (the default) takes :func:`default_feature_clip`
    of the population. ``adjacency_diameter`` defaults to 2C. ``ridge`` is the one-shot
    estimator's lambda; ``None`` (the default) scales it with the noise in S_hat,
    ``ridge_scale`` times :func:`jfed.algorithms.modulated.noise_scaled_ridge`.
    """

    estimator: str = "iterative"
    alpha: float = 1.0
    beta: float = 0.5
    omega: float = 1.0
    directions: int = 1
    clip: float | None = None
    radius: float = 10.0
    ridge: float | None = None
    ridge_scale: float = 1.0
    step_scale: float = 0.8
    step_floor: float = 1e-3
    psd: bool = False
    accountant: str = "zcdp"
    adjacency_diameter: float | None = None


REAL_DATA_FEATURE_CLIP = 3.0
FEATURE_CLIP_LEVEL = 0.95


def default_feature_clip(population) -> float:
    """The feature clip C of the modulated map when none is given.

    Procedural clients: the 95% quantile of their feature norm
    (:meth:`jfed.data.SyntheticLinear.feature_norm_quantile`; 4.28 for d = 10, which clips 5% of
    the clients, where a fixed C = 3 clipped 53% and capped test R^2 at 0.60 against OLS 0.81).
    Real tasks: 3.0 (their features are standardised, so a record has norm about sqrt(d), with
    d = 7 to 9; 27% of Fair's clients are clipped).
    """
    if hasattr(population, "feature_norm_quantile"):
        return population.feature_norm_quantile(FEATURE_CLIP_LEVEL)
    return REAL_DATA_FEATURE_CLIP


def modulated_hyperparams(
    settings: ModulatedSettings,
    epsilon: float,
    delta: float,
    rounds: int,
    population=None,
) -> tuple[modulated.Hyperparams, float, PrivacyGuarantee, float]:
    """Calibrate the noise of ``rounds`` releases (:func:`jfed.algorithms.modulated.plan`) and
    build the traced hyper-parameters from the plan. ``population`` sets the default feature clip
    (:func:`default_feature_clip`) when ``settings.clip`` is ``None``.

    Returns ``(hyperparams, sigma, guarantee, message_sensitivity)``.
    """
    clip = settings.clip if settings.clip is not None else default_feature_clip(population)
    privacy_plan = modulated.plan(
        epsilon, delta, rounds, alpha=settings.alpha, beta=settings.beta, omega=settings.omega,
        directions=settings.directions, clip_norm=clip,
        adjacency_diameter=settings.adjacency_diameter, accountant=settings.accountant,
    )  # fmt: skip
    ridge = settings.ridge
    if ridge is None:
        if population is None:
            raise ValueError("a noise-scaled ridge (ridge=None) needs the population's size")
        ridge = modulated.noise_scaled_ridge(
            privacy_plan.noise_std, settings.alpha, population.n_clients, population.dim,
            settings.ridge_scale,
        ) if privacy_plan.noise_std > 0 else 0.0  # fmt: skip
    hp = privacy_plan.hyperparams(
        radius=settings.radius, step_scale=settings.step_scale, step_floor=settings.step_floor,
        ridge=ridge,
    )  # fmt: skip
    return hp, privacy_plan.noise_std, privacy_plan.guarantee, privacy_plan.sensitivity


def run_modulated(
    task: RegressionTask,
    epsilon: float,
    delta: float,
    rounds: int = 10,
    settings: ModulatedSettings = ModulatedSettings(),
    seed: int = 0,
    plan: ExecutionPlan | None = None,
    reference: dict | None = None,
    progress: bool = False,
) -> dict:
    """Calibrate, simulate and evaluate the modulated estimator; return the run record.

    Args:
      task: the regression task (training clients and host validation / test splits).
      epsilon, delta: the target (eps, delta) for the whole run (all rounds).
      rounds: T for the iterative estimator; the one-shot estimator always releases once.
      settings: method parameters (:class:`ModulatedSettings`).
      seed: run seed (client phases, noise, directions).
      plan: engine batching plan.
      reference: a precomputed :func:`ols_reference` (computed when ``None``).
      progress: a progress bar over rounds (from inside the compiled scan).
    """
    if settings.estimator not in ESTIMATORS:
        raise ValueError(f"unknown estimator {settings.estimator!r}; expected one of {ESTIMATORS}")
    check_open_unit("delta", delta)
    rounds = 1 if settings.estimator == "one-shot" else check_int_range("rounds", rounds, 1, 10**6)
    check_int_range("directions", settings.directions, 1, task.dim)
    if settings.clip is None:
        settings = dataclasses.replace(settings, clip=default_feature_clip(task.train))
    hp, sigma, guarantee, message_sensitivity = modulated_hyperparams(
        settings, epsilon, delta, rounds, task.train
    )
    if settings.estimator == "one-shot":
        algorithm = modulated.OneShot(task.dim, settings.directions)
    else:
        algorithm = modulated.Iterative(task.dim, settings.directions)
    state, infos, timing = _timed_simulate(
        algorithm, task, hp, seed, rounds, plan, progress and f"modulated {settings.estimator}"
    )
    reference = reference or ols_reference(task, plan)

    metrics: dict = {"clipped_fraction": float(infos.clipped_fraction[-1])}
    if settings.estimator == "one-shot":
        raw, psd = np.asarray(state.theta), np.asarray(state.theta_psd)
        chosen = psd if settings.psd else raw
        metrics |= {
            "test_r2_raw": r2_score(raw, *task.test),
            "test_r2_psd": r2_score(psd, *task.test),
        }
    else:
        chosen = np.asarray(state.theta)
        metrics |= {
            "test_r2_average": r2_score(np.asarray(state.theta_average), *task.test),
            "test_r2_per_round": r2_curve(np.asarray(infos.theta), *task.test).tolist(),
            "step_size_per_round": np.asarray(infos.step_size, np.float64).tolist(),
        }
    metrics = {
        "test_r2": r2_score(chosen, *task.test),
        "validation_r2": r2_score(chosen, *task.validation),
        **metrics,
    }
    return {
        **_base_record("modulated", task, rounds, seed),
        "estimator": settings.estimator,
        **_privacy_fields(guarantee, sigma, float(epsilon)),
        "sensitivity": message_sensitivity,
        "lipschitz": modulated.lipschitz_constant(
            settings.alpha, settings.beta, settings.omega, settings.directions
        ),
        "hyperparams": {k: v for k, v in vars(settings).items()},
        **({"ridge_used": float(hp.ridge)} if settings.estimator == "one-shot" else {}),
        **metrics,
        "reconstruction": reconstruction_fields(task, settings, sigma, rounds)
        if sigma > 0
        else None,
        "ols_r2": reference["test_r2"],
        **timing,
        "versions": versions(),
    }


def run_dpsgd(
    task: RegressionTask,
    epsilon: float,
    delta: float,
    rounds: int = 10,
    clip: float = 2.0,
    learning_rate: float = 0.1,
    radius: float = 10.0,
    seed: int = 0,
    plan: ExecutionPlan | None = None,
    reference: dict | None = None,
    accountant: str = "zcdp",
    progress: bool = False,
) -> dict:
    """Calibrate, simulate and evaluate DP-SGD FedAvg (one sample per client); return the record.

    ``progress`` shows a progress bar over rounds (from inside the compiled scan)."""
    rounds = check_int_range("rounds", rounds, 1, 10**6)
    check_positive("epsilon", epsilon)
    privacy_plan = dpsgd.plan(epsilon, delta, rounds, clip_norm=clip, accountant=accountant)
    sigma, guarantee = privacy_plan.noise_std, privacy_plan.guarantee
    hp = privacy_plan.hyperparams(learning_rate=learning_rate, radius=radius)
    state, infos, timing = _timed_simulate(
        dpsgd.FedAvg(task.dim), task, hp, seed, rounds, plan, progress and "dpsgd"
    )
    reference = reference or ols_reference(task, plan)
    theta = np.asarray(state.theta)
    return {
        **_base_record("dpsgd", task, rounds, seed),
        **_privacy_fields(guarantee, sigma, float(epsilon)),
        "sensitivity": dpsgd.sensitivity(clip),
        "hyperparams": {"clip": clip, "learning_rate": learning_rate, "radius": radius},
        "test_r2": r2_score(theta, *task.test),
        "validation_r2": r2_score(theta, *task.validation),
        "test_r2_per_round": r2_curve(np.asarray(infos.theta), *task.test).tolist(),
        "clipped_fraction": float(infos.clipped_fraction[-1]),
        "ols_r2": reference["test_r2"],
        **timing,
        "versions": versions(),
    }


def run_ols(task: RegressionTask, plan: ExecutionPlan | None = None) -> dict:
    """The non-private OLS reference as a record (eps = inf)."""
    reference = ols_reference(task, plan)
    guarantee = PrivacyGuarantee.non_private()
    return {
        **_base_record("ols", task, 1, 0),
        **_privacy_fields(guarantee, 0.0, guarantee.epsilon),
        "test_r2": reference["test_r2"],
        "validation_r2": reference["validation_r2"],
        "ols_r2": reference["test_r2"],
        **reference["timing"],
        "versions": versions(),
    }


def summary_line(record: dict) -> str:
    """The one human line ``jfed run`` prints."""
    name = record["algorithm"] + (f"/{record['estimator']}" if "estimator" in record else "")
    guarantee = PrivacyGuarantee(**record["privacy"])
    sigma = f" | sigma={record['sigma']:.4g}" if record["sigma"] else ""
    clipped = record.get("clipped_fraction")
    clipped = f" | clipped {100 * clipped:.1f}% of clients" if clipped else ""
    return (
        f"{name} on {record['dataset']} (n={record['n_clients']}, d={record['dim']}, "
        f"T={record['rounds']}): test R^2 = {record['test_r2']:.4f} "
        f"(non-private OLS {record['ols_r2']:.4f}) | privacy: {guarantee.describe()}"
        f"{sigma}{clipped} | {record['seconds']:.2f} s"
    )
