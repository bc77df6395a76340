"""What a sweep needs to know about each algorithm: its static program, how a configuration
(eps, seed, hyper-parameters) becomes a traced hyper-parameter pytree, and how a finished run is
evaluated on the validation and test splits.

A configuration is a dict ``{"epsilon": float, "seed": int, **hyper}``; hyper-parameter names are
the algorithm's tunable scalars (e.g. ``step_scale`` for the iterative modulated estimator).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jfed.algorithms import dpsgd, modulated
from jfed.algorithms.linear import r2_curve, r2_score
from jfed.catalog import REGRESSION_SWEEP_ALGORITHMS, SILO_ALGORITHMS
from jfed.data import RegressionTask
from jfed.run import ModulatedSettings, modulated_hyperparams, ols_reference

SWEEP_ALGORITHMS = REGRESSION_SWEEP_ALGORITHMS


def check_hyper(name: str, tunable: tuple[str, ...], hyper: dict) -> None:
    """Raise if ``hyper`` names a parameter that ``name`` cannot sweep."""
    unknown = set(hyper) - set(tunable)
    if unknown:
        raise ValueError(
            f"unknown hyper-parameters {sorted(unknown)} for {name}; "
            f"expected some of {list(tunable)}"
        )


@dataclass
class RegressionAdapter:
    """Sweeps over a regression algorithm on one task (modulated estimators, DP-SGD FedAvg).

    Attributes:
      name: one of :data:`SWEEP_ALGORITHMS`.
      task: the regression task.
      delta: delta of every run.
      rounds: T (1 for the one-shot estimator).
      base: fixed (not swept) method parameters.
    """

    name: str
    task: RegressionTask
    delta: float = 1e-5
    rounds: int = 10
    base: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name not in SWEEP_ALGORITHMS:
            raise ValueError(f"unknown sweep algorithm {self.name!r}; expected {SWEEP_ALGORITHMS}")
        if self.name == "modulated-one-shot":
            self.rounds = 1
        self._reference = None

    @property
    def tunable(self) -> tuple[str, ...]:
        if self.name == "modulated-iterative":
            return ("step_scale", "alpha", "beta", "omega", "clip", "radius")
        if self.name == "modulated-one-shot":
            return ("ridge", "ridge_scale", "alpha", "beta", "omega", "clip")
        return ("clip", "learning_rate", "radius")

    @property
    def algorithm(self):
        if self.name == "dpsgd":
            return dpsgd.FedAvg(self.task.dim)
        k = int(self.base.get("directions", 1))
        if self.name == "modulated-iterative":
            return modulated.Iterative(self.task.dim, k)
        return modulated.OneShot(self.task.dim, k)

    def check(self, hyper: dict) -> None:
        check_hyper(self.name, self.tunable, hyper)

    @property
    def shared_noise_algorithm(self):
        """The algorithm that runs several eps of one (seed, hyper-parameters) at once, sharing
        their draws (eps changes only ``noise_std`` of a modulated estimator); ``None`` for
        DP-SGD, whose noise feeds back into the clients' gradients."""
        if self.name == "dpsgd":
            return None
        return modulated.SharedNoise(self.algorithm)

    def hyperparams(self, config: dict) -> tuple[Any, dict]:
        """Host calibration of one configuration: ``(hyperparams pytree, privacy fields)``."""
        values = {**self.base, **{k: v for k, v in config.items() if k in self.tunable}}
        if self.name == "dpsgd":
            privacy_plan = dpsgd.plan(
                config["epsilon"],
                self.delta,
                self.rounds,
                clip_norm=float(values.get("clip", 2.0)),
                accountant=values.get("accountant", "zcdp"),
            )
            sigma, guarantee = privacy_plan.noise_std, privacy_plan.guarantee
            hp = privacy_plan.hyperparams(
                learning_rate=float(values.get("learning_rate", 0.1)),
                radius=float(values.get("radius", 10.0)),
            )
        else:
            settings = ModulatedSettings(
                **{k: v for k, v in values.items() if k in ModulatedSettings.__annotations__}
            )
            hp, sigma, guarantee, _ = modulated_hyperparams(
                settings, config["epsilon"], self.delta, self.rounds, self.task.train
            )
        fields = {
            **({"ridge_used": float(hp.ridge)} if self.name == "modulated-one-shot" else {}),
            "epsilon_certified": guarantee.epsilon,
            "delta": guarantee.delta,
            "accountant": guarantee.accountant,
            "notion": f"{guarantee.notion} of {guarantee.protected}",
            "sigma": sigma,
        }
        return hp, fields

    selection_metric = "validation_r2"
    selection_maximize = True
    report_metric = "test_r2"

    @property
    def outputs(self) -> RegressionOutputs:
        """The arrays kept from a finished run (inside the compiled program)."""
        return RegressionOutputs(one_shot=self.name == "modulated-one-shot")

    def evaluate(self, outputs: dict[str, np.ndarray]) -> dict:
        """Host metrics of one run: validation and test R^2, the R^2 curve, the reference."""
        if self._reference is None:
            self._reference = ols_reference(self.task)
        theta = np.asarray(outputs["theta"], np.float64)
        metrics = {
            "validation_r2": r2_score(theta, *self.task.validation),
            "test_r2": r2_score(theta, *self.task.test),
            "ols_r2": self._reference["test_r2"],
            "ols_validation_r2": self._reference["validation_r2"],
            "test_r2_per_round": r2_curve(outputs["theta_per_round"], *self.task.test).tolist(),
        }
        if "theta_psd" in outputs:
            metrics["test_r2_psd"] = r2_score(outputs["theta_psd"], *self.task.test)
        return {
            **metrics,
            "selection_metric": self.selection_metric,
            "selection_maximize": self.selection_maximize,
            "report_metric": self.report_metric,
        }


# The kept arrays as hashable values (equal for equal adapters), so the compiled program is cached
# per algorithm and shape, not per adapter object.


@dataclass(frozen=True)
class RegressionOutputs:
    """``(state, infos) -> {"theta", "theta_per_round"[, "theta_psd"]}``."""

    one_shot: bool = False

    def __call__(self, state, infos) -> dict[str, jax.Array]:
        out = {"theta": state.theta, "theta_per_round": infos.theta}
        if self.one_shot:
            out["theta_psd"] = state.theta_psd
        return out


@dataclass(frozen=True)
class SiloOutputs:
    """``(state, infos) -> {"w": the averaged iterate, "w_per_round"}``."""

    def __call__(self, state, infos) -> dict[str, jax.Array]:
        return {"w": state.w_average, "w_per_round": infos.w}


def stack(trees: list) -> Any:
    """Stack a list of identical pytrees along a new leading axis (host -> device)."""
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *trees)


SILO_SWEEP_ALGORITHMS = SILO_ALGORITHMS


@dataclass
class SiloAdapter:
    """Sweeps over a silo algorithm (seed 004) on one silo task.

    Settings are chosen on the training loss (the seed tunes its step size on it; the silo tasks
    have no validation split): ``selection_metric = "excess_train_risk"``, minimised. The reported
    metric is the test error (classification) or relative RMSE (regression).

    Attributes:
      name: one of :data:`SILO_SWEEP_ALGORITHMS`.
      task: the silos.
      settings: fixed method parameters (:class:`jfed.run_silo.SiloSettings`).
      delta: per-silo delta (default 1 / n_min^2).
    """

    name: str
    task: Any
    settings: Any = None
    delta: float | None = None

    selection_metric = "excess_train_risk"
    selection_maximize = False

    def __post_init__(self) -> None:
        from jfed.run_silo import SiloSettings, _sampling

        if self.name not in SILO_SWEEP_ALGORITHMS:
            raise ValueError(
                f"unknown silo sweep algorithm {self.name!r}; expected {SILO_SWEEP_ALGORITHMS}"
            )
        self.settings = self.settings or SiloSettings()
        self.sampling = _sampling(self.name, self.settings)
        counts = np.asarray(self.task.train.counts)
        self.delta = self.delta or 1.0 / float(counts.min()) ** 2
        self.report_metric = "relative_rmse" if self.task.loss == "squared" else "test_error"
        self._optimum = None
        self._noise: dict = {}

    @property
    def rounds(self) -> int:
        return self.settings.rounds

    @property
    def tunable(self) -> tuple[str, ...]:
        return ("step_size", "clip", "radius", "ridge")

    @property
    def algorithm(self):
        from jfed.run_silo import _algorithm

        return _algorithm(self.name, self.task, self.settings, self.sampling)

    def check(self, hyper: dict) -> None:
        check_hyper(self.name, self.tunable, hyper)

    # the noise of a silo step is added to a gradient that the next step's clients see
    shared_noise_algorithm = None

    def _settings(self, config: dict):
        import dataclasses

        overrides = {k: config[k] for k in self.tunable if k in config}
        return dataclasses.replace(self.settings, **overrides)

    def prepare(self, configs: list[dict]) -> None:
        """Calibrate every (eps, clip) of ``configs`` up front, the eps of one clip together (the
        exact calibration then shares its PLD work across them)."""
        from jfed.run_silo import calibrate_silos_many

        wanted: dict[float, set] = {}
        for config in configs:
            wanted.setdefault(self._settings(config).clip, set()).add(config["epsilon"])
        for clip, epsilons in wanted.items():
            missing = sorted(e for e in epsilons if (e, clip) not in self._noise)
            if not missing:
                continue
            settings = self._settings({"clip": clip})
            results = calibrate_silos_many(
                self.name, self.task, missing, self.delta, settings, self.sampling
            )
            self._noise.update({(e, clip): r for e, r in zip(missing, results, strict=True)})

    def hyperparams(self, config: dict) -> tuple[Any, dict]:
        from jfed.algorithms import silo_sgd
        from jfed.run_silo import PROTECTED as SILO_PROTECTED

        settings = self._settings(config)
        # the noise depends on eps and the clip only (for fixed settings): calibrate each once
        cache_key = (config["epsilon"], settings.clip)
        if cache_key not in self._noise:
            self.prepare([config])
        noise, fields = self._noise[cache_key]
        hp = silo_sgd.hyperparams(
            self.task.n_silos,
            step_size=settings.step_size,
            clip_norm=settings.clip,
            radius=settings.radius,
            noise_std=noise,
            ridge=settings.ridge,
        )
        return hp, {
            "epsilon_certified": fields["epsilon_certified"],
            # for the formula calibrations: what PLD gives their noise under Poisson sampling
            "exact_epsilon": fields.get("exact_epsilon"),
            "delta": fields["delta"],
            "accountant": fields["accountant"],
            "notion": fields.get("notion", "ISRL-DP: (eps, delta)-DP of each silo's transcript")
            + f" of {SILO_PROTECTED}",
            "sigma": float(np.max(noise)),
        }

    @property
    def outputs(self) -> SiloOutputs:
        return SiloOutputs()

    def evaluate(self, outputs: dict[str, np.ndarray]) -> dict:
        from jfed.algorithms import silo_metrics

        X_train, y_train = self.task.train.pooled()
        X_test, y_test = self.task.test
        name, classes = self.task.loss, self.task.classes
        if self._optimum is None:
            radius = self.settings.radius
            self._optimum = silo_metrics.fit_optimum(name, classes, X_train, y_train, radius)
        w = np.asarray(outputs["w"], np.float64)

        def report(v):
            if name == "squared":
                return silo_metrics.relative_rmse(v, X_test, y_test, y_train.mean())
            return silo_metrics.test_error(name, classes, v, X_test, y_test)

        excess = silo_metrics.excess_risk(name, classes, w, self._optimum, X_train, y_train)
        return {
            "excess_train_risk": excess if np.isfinite(excess) else None,
            self.report_metric: report(w),
            f"{self.report_metric}_per_round": [
                report(np.asarray(v, np.float64)) for v in outputs["w_per_round"]
            ],
            "selection_metric": self.selection_metric,
            "selection_maximize": self.selection_maximize,
            "report_metric": self.report_metric,
        }
