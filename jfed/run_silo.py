"""Run one configuration of a silo algorithm and describe it as a record (``jfed run noisy-mbsgd``).

Calibrates every silo's noise on the host (per silo, from its own n_i), simulates on the device,
evaluates in float64 on the host: excess train / test risk against the constrained optimum w*,
heterogeneity upsilon_*^2, test error (classification) or relative RMSE (regression).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import jax
import numpy as np

from jfed import catalog
from jfed._validation import check_int_range, check_open_unit, check_positive
from jfed.algorithms import silo_metrics, silo_privacy, silo_sgd
from jfed.algorithms.losses import Loss
from jfed.data.silos import SiloTask, load_silos
from jfed.engine import ExecutionPlan, simulate
from jfed.privacy import PrivacyGuarantee, analytic_gaussian_epsilon
from jfed.report import versions

SILO_ALGORITHMS = catalog.SILO_ALGORITHMS
PROTECTED = "one record of one silo (replace-one), against the server and the other silos"
TRUST_MODEL = "ISRL-DP: people trust their own silo, not the server or other silos"
PLD_CALIBRATED = catalog.PLD_CALIBRATED_SILO_ALGORITHMS


@dataclass(frozen=True)
class SiloSettings:
    """Method parameters of a silo run (the CLI flags), with their defaults.

    ``calibration`` is ``exact`` (PLD, Poisson sampling), ``theorem`` or ``experiments`` (the seed's
    formulas, sampling with replacement); ``sampling`` overrides the sampler that goes with it.
    """

    batch: int = 10
    rounds: int = 25
    step_size: float = 1.0
    clip: float = 1.0
    radius: float = 10.0
    calibration: str = "exact"
    availability: str = "all"
    available: int = 0
    sampling: str | None = None
    ridge: float = 0.0
    multistage: bool = False
    average_last: int = 0


def _algorithm(name: str, task: SiloTask, settings: SiloSettings, sampling: str):
    loss = Loss(task.loss, task.classes)
    common = dict(
        loss=loss,
        dim=task.dim,
        n_silos=task.n_silos,
        batch=settings.batch,
        rounds=settings.rounds,
        availability=settings.availability,
        available=settings.available,
        average_last=settings.average_last,
    )
    if name in ("noisy-mbsgd", "mbsgd"):
        return silo_sgd.NoisyMBSGD(**common, sampling=sampling)
    if name == "accel-mbsgd":
        stages = silo_sgd.multistage_schedule(settings.rounds) if settings.multistage else None
        return silo_sgd.AcceleratedMBSGD(**common, sampling=sampling, stages=stages)
    if name == "shuffle-mbsgd":
        return silo_sgd.ShuffleMBSGD(**common)
    return silo_sgd.LocalSGD(**common, sampling=sampling)


def _sampling(name: str, settings: SiloSettings) -> str:
    """The sampler a run uses: the one its calibration accounts for, unless ``settings.sampling``
    names another. The exact (PLD) calibration covers Poisson sampling only: a run that samples
    otherwise under it is refused rather than reported with a guarantee that does not model it."""
    exact = settings.calibration == "exact" and name in PLD_CALIBRATED
    if settings.sampling is not None:
        sampling = settings.sampling
    elif name == "accel-mbsgd":
        sampling = "one-pass"
    else:
        sampling = "poisson" if exact else "with-replacement"
    if exact and sampling not in ("poisson", "one-pass"):
        raise ValueError(
            f"the exact (PLD) calibration of {name} accounts Poisson sampling, got --sampling "
            f"{sampling}; use --sampling poisson, or a formula calibration (--accountant theorem)"
        )
    return sampling


def calibrate_silos(
    name: str, task: SiloTask, epsilon: float, delta: float, settings: SiloSettings, sampling: str
) -> tuple[np.ndarray, dict]:
    """Per-silo noise std ``f64[N]`` and the privacy fields of the record.

    The fields: ``accountant``; ``epsilon``, the eps of the privacy statement (what the
    accountant certifies, or a formula's claim); ``epsilon_certified``, the eps that an
    accountant certifies for the run as it samples (``None`` for the seed's formula calibrations
    of Noisy MB-SGD and Local SGD, whose ``exact_epsilon`` then reports what PLD gives their noise
    under Poisson sampling, for reference); ``delta``.
    """
    counts = np.asarray(task.train.counts)
    if name in ("mbsgd", "fedavg"):
        return np.zeros(len(counts)), {
            "accountant": "none", "epsilon": math.inf, "epsilon_certified": math.inf, "delta": 0.0
        }  # fmt: skip
    clip, batch, rounds = settings.clip, settings.batch, settings.rounds
    extra: dict = {}
    if name == "shuffle-mbsgd":
        available = settings.available if settings.availability != "all" else len(counts)
        chain = silo_privacy.shuffle_noise(available * batch, rounds, epsilon, delta, clip)
        noise = np.full(len(counts), chain.noise_std)
        label, spent = "shuffle-fmt21+advanced-composition", chain.epsilon
        extra = {
            "epsilon0": chain.epsilon0,
            "delta0": chain.delta0,
            "epsilon_per_round": chain.epsilon_round,
            "shuffled_messages_per_round": chain.messages,
        }
        notion = "central (eps, delta)-DP via shuffling; each message (eps0, delta0)-LDP"
        return noise, {"accountant": label, "epsilon": spent, "epsilon_certified": spent,
                       "delta": delta, "notion": notion, **extra}  # fmt: skip
    if name == "accel-mbsgd" and sampling == "one-pass":
        if rounds * batch > counts.min():
            raise ValueError(
                f"expected rounds * batch <= the smallest silo ({counts.min()} records) for the "
                f"one-pass algorithm, got {rounds} * {batch}"
            )
        result = silo_privacy.one_pass_noise(batch, epsilon, delta, clip, settings.calibration)
        # one Gaussian release of sensitivity 2L/K per record: its exact eps certifies any noise
        certified = float(analytic_gaussian_epsilon(2.0 * clip / batch, result.noise_std, delta))
        return np.full(len(counts), result.noise_std), {
            "accountant": f"{result.calibration}+parallel-composition",
            "epsilon": result.epsilon,
            "epsilon_certified": certified,
            "delta": delta,
        }
    if name == "local-sgd" and settings.calibration != "exact":
        results = [
            silo_privacy.local_sgd_noise(int(n), batch, rounds, epsilon, delta, clip)
            for n in counts
        ]
        return np.array([r.noise_std for r in results]), {
            "accountant": "local-sgd-seed-formula",
            "epsilon": epsilon,
            "epsilon_certified": None,
            "delta": delta,
            "exact_epsilon": max(r.exact_epsilon for r in results),
        }
    return _minibatch_calibrations(name, task, [epsilon], delta, settings)[0]


def _uses_minibatch_noise(name: str, sampling: str, calibration: str) -> bool:
    """Whether :func:`calibrate_silos` reaches its minibatch (Noisy MB-SGD) calibration: Noisy
    MB-SGD, accelerated MB-SGD beyond one pass, and Local SGD calibrated exactly (its K R local
    steps are Poisson-sampled minibatches of expected size 1)."""
    if name == "local-sgd":
        return calibration == "exact"
    return name == "noisy-mbsgd" or (name == "accel-mbsgd" and sampling != "one-pass")


def calibrate_silos_many(
    name: str,
    task: SiloTask,
    epsilons: list[float],
    delta: float,
    settings: SiloSettings,
    sampling: str,
) -> list[tuple[np.ndarray, dict]]:
    """:func:`calibrate_silos` for several eps; the minibatch algorithms' exact calibration shares
    its PLD work across them (one grid per distinct silo size, :func:`silo_privacy.mbsgd_noises`).
    """
    if not _uses_minibatch_noise(name, sampling, settings.calibration):
        return [calibrate_silos(name, task, e, delta, settings, sampling) for e in epsilons]
    return _minibatch_calibrations(name, task, epsilons, delta, settings)


def _minibatch_calibrations(
    name: str, task: SiloTask, epsilons: list[float], delta: float, settings: SiloSettings
) -> list[tuple[np.ndarray, dict]]:
    counts = np.asarray(task.train.counts)
    batch, rounds, clip, calibration = (
        settings.batch, settings.rounds, settings.clip, settings.calibration,
    )  # fmt: skip
    if name == "local-sgd":  # K R steps, each a Poisson minibatch of expected size 1
        batch, rounds = 1, settings.batch * settings.rounds
    by_size = {
        int(n): silo_privacy.mbsgd_noises(
            int(n), batch, rounds, list(epsilons), delta, clip, calibration
        )
        for n in np.unique(counts)
    }
    calibrated = []
    for index in range(len(epsilons)):
        results = [by_size[int(n)][index] for n in counts]
        fields = {
            "accountant": {"exact": "pld-poisson-replace-one"}.get(
                calibration, f"seed-{calibration}-formula"
            ),
            "epsilon": max(r.epsilon for r in results),
            "epsilon_certified": (
                max(r.epsilon for r in results) if calibration == "exact" else None
            ),
            "delta": delta,
            "exact_epsilon": max(r.exact_epsilon for r in results),
        }
        calibrated.append((np.array([r.noise_std for r in results]), fields))
    return calibrated


def run_silo(
    name: str,
    task: SiloTask,
    epsilon: float = 1.0,
    delta: float | None = None,
    settings: SiloSettings = SiloSettings(),
    seed: int = 0,
    plan: ExecutionPlan | None = None,
    progress: bool = False,
) -> dict:
    """Calibrate, simulate and evaluate one silo algorithm; return the run record.

    Args:
      name: one of :data:`SILO_ALGORITHMS`.
      task: the silos (:func:`jfed.data.silos.load_silos`).
      epsilon: per-silo target eps (ignored by the non-private ``mbsgd`` and ``fedavg``).
      delta: per-silo delta; default ``1 / n_min^2`` (n_min: the smallest silo), as the seed.
      settings: method parameters.
      seed: run seed.
      plan: engine plan (the silo axis is the client axis).
      progress: a progress bar over rounds (from inside the compiled scan).
    """
    if name not in SILO_ALGORITHMS:
        raise ValueError(f"unknown silo algorithm {name!r}; expected one of {SILO_ALGORITHMS}")
    check_positive("epsilon", epsilon)
    n_min = int(np.asarray(task.train.counts).min())
    delta = check_open_unit("delta", 1.0 / n_min**2 if delta is None else delta)
    check_int_range("rounds", settings.rounds, 1, 10**6)
    sampling = _sampling(name, settings)
    noise, privacy_fields = calibrate_silos(name, task, epsilon, delta, settings, sampling)
    algorithm = _algorithm(name, task, settings, sampling)
    hp = silo_sgd.hyperparams(
        task.n_silos,
        step_size=settings.step_size,
        clip_norm=settings.clip,
        radius=settings.radius,
        noise_std=noise,
        ridge=settings.ridge,
    )
    start = time.perf_counter()
    state, infos = simulate(
        algorithm, task.train, hp, jax.random.key(seed), settings.rounds, plan,
        progress=progress and name,
    )  # fmt: skip
    jax.block_until_ready(state)
    seconds = time.perf_counter() - start
    metrics = evaluate(task, np.asarray(state.w_average, np.float64), settings.radius)
    if math.isinf(privacy_fields["epsilon"]):  # mbsgd, fedavg: no noise, nothing protected
        guarantee = PrivacyGuarantee.non_private()
    else:
        guarantee = PrivacyGuarantee(
            epsilon=privacy_fields["epsilon"],
            delta=privacy_fields["delta"],
            accountant=privacy_fields["accountant"],
            notion=privacy_fields.get(
                "notion", "ISRL-DP: (eps, delta)-DP of each silo's transcript"
            ),
            protected=PROTECTED,
            trust_model=TRUST_MODEL,
        )
    sigma = float(noise[0]) if np.all(noise == noise[0]) else noise.tolist()
    return {
        "algorithm": name,
        "dataset": task.name,
        "n_clients": task.n_silos,
        "n_silos": task.n_silos,
        "records": int(np.asarray(task.train.counts).sum()),
        "dim": task.dim,
        "rounds": settings.rounds,
        "batch": settings.batch,
        "sampling": sampling,
        **{k: v for k, v in privacy_fields.items() if k not in ("notion",)},
        # the target; `epsilon_certified` is what an accountant certifies for the run as it ran
        "epsilon": math.inf if math.isinf(privacy_fields["epsilon"]) else float(epsilon),
        "sigma": sigma,
        "privacy": guarantee.to_dict(),
        "hyperparams": asdict(settings),
        **metrics,
        "available_per_round": np.asarray(infos.available).tolist(),
        "clipped_fraction": float(np.mean(np.asarray(infos.clipped_fraction))),
        "seconds": seconds,
        "seed": seed,
        "versions": versions(),
    }


def evaluate(task: SiloTask, w: np.ndarray, radius: float) -> dict:
    """Excess risks, heterogeneity and the task metric of ``w: f64[p]``."""
    X_train, y_train = task.train.pooled()
    X_test, y_test = task.test
    name, classes = task.loss, task.classes
    w_star = silo_metrics.fit_optimum(name, classes, X_train, y_train, radius)
    w_star_test = silo_metrics.fit_optimum(name, classes, X_test, y_test, radius)
    X, y, counts = map(np.asarray, (task.train.features, task.train.targets, task.train.counts))
    silos = [(X[i, :c].astype(np.float64), y[i, :c].astype(np.float64)) for i, c in
             enumerate(counts)]  # fmt: skip
    metrics = {
        "excess_train_risk": silo_metrics.excess_risk(name, classes, w, w_star, X_train, y_train),
        "excess_test_risk": silo_metrics.excess_risk(name, classes, w, w_star_test, X_test, y_test),
        "heterogeneity": silo_metrics.heterogeneity(name, classes, w_star, silos),
    }
    if name == "squared":
        metrics["relative_rmse"] = silo_metrics.relative_rmse(w, X_test, y_test, y_train.mean())
    else:
        metrics["test_error"] = silo_metrics.test_error(name, classes, w, X_test, y_test)
        metrics["optimum_test_error"] = silo_metrics.test_error(
            name, classes, w_star, X_test, y_test
        )
    return metrics


def summary_line(record: dict) -> str:
    """The one human line for a silo run."""
    guarantee = PrivacyGuarantee(**record["privacy"])
    metric = (
        f"test error {record['test_error']:.4f} (w*: {record['optimum_test_error']:.4f})"
        if "test_error" in record
        else f"relative RMSE {record['relative_rmse']:.4f}"
    )
    extra = f" | eps0={record['epsilon0']:.4g} per message" if "epsilon0" in record else ""
    return (
        f"{record['algorithm']} on {record['dataset']} ({record['n_silos']} silos, "
        f"{record['records']} records, d={record['dim']}, R={record['rounds']}, "
        f"K={record['batch']}): {metric}, excess train risk {record['excess_train_risk']:.4g} | "
        f"privacy: {guarantee.describe()}{extra} | {record['seconds']:.2f} s"
    )


def load_task(name: str, mixing: float = 0.0, silos: int | None = None, seed: int = 0):
    """The silo data set of a CLI run."""
    return load_silos(name, mixing=mixing, n_silos=silos, seed=seed)
