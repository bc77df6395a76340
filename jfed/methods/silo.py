"""The silo methods of the inter-silo record-level DP paper as experiments (Noisy MB-SGD, its
accelerated, shuffled and local-step variants, and the non-private baselines).

Every silo's noise is calibrated on the host from its own size n_i; the program runs on the
device; the evaluation is in float64 on the host: excess train / test risk against the
constrained optimum w*, the heterogeneity upsilon_*^2, and the test error (classification) or
relative RMSE (regression). Settings are chosen on the training loss (the paper tunes its step
size on it; the silo tasks have no validation split).
"""

from __future__ import annotations

import math

import numpy as np

from jfed._validation import UsageError
from jfed.algorithms import silo_metrics, silo_privacy, silo_sgd
from jfed.algorithms.losses import Loss
from jfed.data.silos import SiloTask, load_silos
from jfed.methods import declared
from jfed.methods.experiment import Experiment, Output, guarantee_of, non_private_fields
from jfed.privacy import analytic_gaussian_epsilon


def load_task(config: declared.SiloData) -> SiloTask:
    return load_silos(
        config.dataset, mixing=config.mixing, n_silos=config.silos, seed=config.data_seed
    )


class SiloExperiment(Experiment):
    """Shared by the silo methods; subclasses name their program and their calibration."""

    selection_metric = "excess_train_risk"
    selection_maximize = False
    outputs = (
        Output("w", "state.w_average"),
        Output("w_per_round", "infos.w"),
        Output("available", "infos.available"),
        Output("clipped_fraction", "infos.clipped_fraction", reduce="mean"),
    )
    default_sampling = "with-replacement"

    def __init__(self, config: declared.SiloTraining, task: SiloTask | None = None) -> None:
        super().__init__(config)
        self.task = task if task is not None else load_task(config)
        self.counts = np.asarray(self.task.train.counts)
        self.sampling = self.choose_sampling(config)
        self.report_metric = "relative_rmse" if self.task.loss == "squared" else "test_error"
        self._noise: dict = {}
        self._optima: dict = {}

    # -- what a subclass declares
    def choose_sampling(self, config) -> str:
        return config.sampling or self.default_sampling

    def program(self, **common):
        return silo_sgd.NoisyMBSGD(**common, sampling=self.sampling)

    def calibrate_many(self, config, epsilons: list[float], delta: float) -> list[tuple]:
        """``[(noise std f64[N], privacy fields)]``, one per eps."""
        del config, delta
        fields = non_private_fields(self.method)
        return [(np.zeros(len(self.counts)), dict(fields)) for _ in epsilons]

    # -- the experiment
    @property
    def rounds(self) -> int:
        return self.config.rounds

    @property
    def delta(self) -> float:
        given = getattr(self.config, "delta", None)
        return given if given is not None else 1.0 / float(self.counts.min()) ** 2

    @property
    def algorithm(self):
        return self.program(
            loss=Loss(self.task.loss, self.task.classes), dim=self.task.dim,
            n_silos=self.task.n_silos, batch=self.config.batch, rounds=self.config.rounds,
            availability=self.config.availability, available=self.config.available or 0,
            average_last=self.config.average_last,
        )  # fmt: skip

    def identity(self) -> dict:
        return {
            "dataset": self.config.dataset_label,
            "n_clients": self.task.n_silos,
            "n_silos": self.task.n_silos,
            "records": int(self.counts.sum()),
            "dim": self.task.dim,
            "sampling": self.sampling,
        }

    def prepare(self, configs) -> None:
        """Calibrate every (eps, clip) of ``configs`` up front, the eps of one clip together (the
        exact calibration then shares its PLD work across them)."""
        wanted: dict[float, set] = {}
        for config in configs:
            epsilon = getattr(config, "epsilon", math.inf)
            wanted.setdefault(config.gradient_clip, set()).add(epsilon)
        for clip, epsilons in wanted.items():
            missing = sorted(e for e in epsilons if (e, clip) not in self._noise)
            if missing:
                results = self.calibrate_many(
                    self.config.replace(gradient_clip=clip), missing, self.delta
                )
                self._noise.update({(e, clip): r for e, r in zip(missing, results, strict=True)})

    def calibrate(self, config) -> tuple:
        key = (getattr(config, "epsilon", math.inf), config.gradient_clip)
        if key not in self._noise:
            self.prepare([config])
        noise, fields = self._noise[key]
        hp = silo_sgd.hyperparams(
            self.task.n_silos, step_size=config.step_size, clip_norm=config.gradient_clip,
            radius=config.radius, noise_std=noise, ridge=getattr(config, "ridge", 0.0),
        )  # fmt: skip
        fields = dict(fields, sigma=float(np.max(noise)))
        if not np.all(noise == noise[0]):
            fields["sigma_per_silo"] = noise.tolist()
        return hp, fields

    def _optimum(self, X, y, radius: float, split: str) -> np.ndarray:
        if (split, radius) not in self._optima:
            self._optima[(split, radius)] = silo_metrics.fit_optimum(
                self.task.loss, self.task.classes, X, y, radius
            )
        return self._optima[(split, radius)]

    def evaluate(self, outputs: dict[str, np.ndarray], config) -> dict:
        """Excess risks, heterogeneity and the task metric of the averaged iterate."""
        name, classes = self.task.loss, self.task.classes
        X_train, y_train = self.task.train.pooled()
        X_test, y_test = self.task.test
        w_star = self._optimum(X_train, y_train, config.radius, "train")
        w_star_test = self._optimum(X_test, y_test, config.radius, "test")
        if ("heterogeneity", config.radius) not in self._optima:
            X, y = np.asarray(self.task.train.features), np.asarray(self.task.train.targets)
            silos = [(X[i, :c].astype(np.float64), y[i, :c].astype(np.float64))
                     for i, c in enumerate(self.counts)]  # fmt: skip
            self._optima[("heterogeneity", config.radius)] = silo_metrics.heterogeneity(
                name, classes, w_star, silos
            )

        def report(v: np.ndarray) -> float:
            if name == "squared":
                return silo_metrics.relative_rmse(v, X_test, y_test, y_train.mean())
            return silo_metrics.test_error(name, classes, v, X_test, y_test)

        w = np.asarray(outputs["w"], np.float64)
        excess = silo_metrics.excess_risk(name, classes, w, w_star, X_train, y_train)
        metrics = {
            "excess_train_risk": excess if np.isfinite(excess) else None,
            "excess_test_risk": silo_metrics.excess_risk(
                name, classes, w, w_star_test, X_test, y_test
            ),
            "heterogeneity": self._optima[("heterogeneity", config.radius)],
            self.report_metric: report(w),
            f"{self.report_metric}_per_round": [
                report(np.asarray(v, np.float64)) for v in outputs["w_per_round"]
            ],
            "available_per_round": np.asarray(outputs["available"]).tolist(),
            "clipped_fraction": float(outputs["clipped_fraction"]),
        }
        if name != "squared":
            metrics["optimum_test_error"] = report(w_star)
        return metrics

    @staticmethod
    def summary(record: dict) -> str:
        metric = (
            f"test error {record['test_error']:.4f} (w*: {record['optimum_test_error']:.4f})"
            if "test_error" in record
            else f"relative RMSE {record['relative_rmse']:.4f}"
        )
        extra = f" | eps0={record['epsilon0']:.4g} per message" if "epsilon0" in record else ""
        return (
            f"{record['method']} on {record['dataset']} ({record['n_silos']} silos, "
            f"{record['records']} records, d={record['dim']}, R={record['rounds']}, "
            f"K={record['batch']}): {metric}, excess train risk "
            f"{record['excess_train_risk']:.4g} | privacy: {privacy_text(record)}"
            f"{extra} | {record['run_seconds']:.2f} s run, {record['compile_seconds']:.2f} s "
            "compile"
        )


def privacy_text(record: dict) -> str:
    """The privacy part of a silo run's summary line. A formula calibration certifies nothing:
    its target eps is labelled as such, beside what an accountant does give (the PLD eps of its
    noise under Poisson sampling, where computed)."""
    target = record.get("epsilon")
    if record.get("epsilon_certified") is not None or target is None or math.isinf(target):
        return guarantee_of(record).describe()
    reference = record.get("exact_epsilon")
    certified = (
        f"PLD with Poisson sampling gives its noise eps = {reference:.4g}"
        if reference is not None
        else "no accountant certifies this run"
    )
    return (
        f"target eps={target:.4g} (formula, not certified), delta={record['delta']:.3g}; "
        f"{certified} | {record['notion']} [calibration: {record['accountant']}] protecting "
        f"{record['protected']}"
    )


class MBSGDExperiment(SiloExperiment):
    """Non-private minibatch SGD."""


class FedAvgExperiment(SiloExperiment):
    """Non-private Local SGD."""

    def program(self, **common):
        return silo_sgd.LocalSGD(**common, sampling=self.sampling)


def _isrl_fields(method, epsilon_certified, accountant: str, delta: float, **extra) -> dict:
    return {
        "epsilon_certified": epsilon_certified,
        "delta": delta,
        "accountant": accountant,
        "notion": method.notion,
        "protected": method.protected,
        "trust_model": method.trust_model,
        **extra,
    }


class CalibratedExperiment(SiloExperiment):
    """A silo method whose noise is calibrated exactly (dp-accounting's PLD over its
    Poisson-sampled steps) or by the paper's formulas (sampling with replacement)."""

    def choose_sampling(self, config) -> str:
        """The sampler the calibration accounts for, unless ``--sampling`` names another. The
        exact (PLD) calibration covers Poisson sampling only: a run that samples otherwise under
        it is refused rather than reported with a guarantee that does not model it."""
        exact = config.calibration == "exact"
        sampling = config.sampling or ("poisson" if exact else "with-replacement")
        if exact and sampling not in ("poisson", "one-pass"):
            raise UsageError(
                f"the exact (PLD) calibration of {self.method.name} accounts Poisson sampling, "
                f"got --sampling {sampling}; use --sampling poisson, or a formula calibration "
                "(--calibration theorem)"
            )
        return sampling

    def minibatch_steps(self, config) -> tuple[int, int]:
        """(expected records per step, steps) that the calibration composes."""
        return config.batch, config.rounds

    def calibrate_many(self, config, epsilons, delta):
        """The minibatch calibration: one PLD grid per distinct silo size, shared by the eps
        (:func:`silo_privacy.mbsgd_noises`)."""
        batch, steps = self.minibatch_steps(config)
        by_size = {
            int(n): silo_privacy.mbsgd_noises(
                int(n),
                batch,
                steps,
                list(epsilons),
                delta,
                config.gradient_clip,
                config.calibration,
            )
            for n in np.unique(self.counts)
        }
        exact = config.calibration == "exact"
        calibrated = []
        for index in range(len(epsilons)):
            results = [by_size[int(n)][index] for n in self.counts]
            fields = _isrl_fields(
                self.method,
                max(r.epsilon for r in results) if exact else None,
                "pld-poisson-replace-one" if exact else f"seed-{config.calibration}-formula",
                delta,
                exact_epsilon=max(r.exact_epsilon for r in results),
            )
            calibrated.append((np.array([r.noise_std for r in results]), fields))
        return calibrated


class NoisyMBSGDExperiment(CalibratedExperiment):
    """ISRL-DP Noisy MB-SGD (Algorithm 2)."""


class AcceleratedExperiment(CalibratedExperiment):
    """Accelerated Noisy MB-SGD: one pass over each silo (the default), or minibatches beyond."""

    def choose_sampling(self, config) -> str:
        if config.sampling is None:
            return "one-pass"
        return super().choose_sampling(config)

    def program(self, **common):
        stages = (
            silo_sgd.multistage_schedule(self.config.rounds) if self.config.multistage else None
        )
        return silo_sgd.AcceleratedMBSGD(**common, sampling=self.sampling, stages=stages)

    def calibrate_many(self, config, epsilons, delta):
        if self.sampling != "one-pass":
            return super().calibrate_many(config, epsilons, delta)
        batch = config.batch
        if config.rounds * batch > self.counts.min():
            raise UsageError(
                f"expected rounds * batch <= the smallest silo ({self.counts.min()} records) for "
                f"the one-pass algorithm, got {config.rounds} * {batch}"
            )
        calibrated = []
        for epsilon in epsilons:
            result = silo_privacy.one_pass_noise(
                batch, epsilon, delta, config.gradient_clip, config.calibration
            )
            # one Gaussian release of sensitivity 2L/K per record: its exact eps certifies it
            certified = float(analytic_gaussian_epsilon(
                2.0 * config.gradient_clip / batch, result.noise_std, delta
            ))  # fmt: skip
            fields = _isrl_fields(
                self.method, certified, f"{result.calibration}+parallel-composition", delta
            )
            calibrated.append((np.full(len(self.counts), result.noise_std), fields))
        return calibrated


class LocalSGDExperiment(CalibratedExperiment):
    """ISRL-DP Local SGD: exact calibration over its K R Poisson-sampled local steps of expected
    size 1, or the paper's formula."""

    def program(self, **common):
        return silo_sgd.LocalSGD(**common, sampling=self.sampling)

    def minibatch_steps(self, config) -> tuple[int, int]:
        return 1, config.batch * config.rounds

    def calibrate_many(self, config, epsilons, delta):
        if config.calibration == "exact":
            return super().calibrate_many(config, epsilons, delta)
        calibrated = []
        for epsilon in epsilons:
            results = [
                silo_privacy.local_sgd_noise(
                    int(n), config.batch, config.rounds, epsilon, delta, config.gradient_clip
                )
                for n in self.counts
            ]
            fields = _isrl_fields(
                self.method, None, "local-sgd-seed-formula", delta,
                exact_epsilon=max(r.exact_epsilon for r in results),
            )  # fmt: skip
            calibrated.append((np.array([r.noise_std for r in results]), fields))
        return calibrated


class ShuffleExperiment(SiloExperiment):
    """Shuffle-DP Noisy MB-SGD: per-record messages, central eps by amplification by shuffling
    and advanced composition over the rounds (closed form)."""

    def choose_sampling(self, config) -> str:
        return "with-replacement"

    def program(self, **common):
        return silo_sgd.ShuffleMBSGD(**common)

    def calibrate_many(self, config, epsilons, delta):
        available = (config.available or 0) if config.availability != "all" else len(self.counts)
        messages = available * config.batch
        # the shuffling bound's own split of delta: a third over the rounds
        if silo_privacy.shuffle_validity_limit(messages, delta / (3 * config.rounds)) <= 0:
            raise UsageError(
                f"expected more shuffled messages per round: {available} silos x --batch "
                f"{config.batch} = {messages} messages cover no eps0 > 0 of the shuffling bound "
                f"at --delta {delta:g} over {config.rounds} rounds (it needs n > 16 ln(2/delta)); "
                "raise --batch or --delta"
            )
        calibrated = []
        for epsilon in epsilons:
            chain = silo_privacy.shuffle_noise(
                available * config.batch, config.rounds, epsilon, delta, config.gradient_clip
            )
            fields = _isrl_fields(
                self.method, chain.epsilon, "shuffle-fmt21+advanced-composition", delta,
                epsilon0=chain.epsilon0, delta0=chain.delta0,
                epsilon_per_round=chain.epsilon_round,
                shuffled_messages_per_round=chain.messages,
            )  # fmt: skip
            calibrated.append((np.full(len(self.counts), chain.noise_std), fields))
        return calibrated
