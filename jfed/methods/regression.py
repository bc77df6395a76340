"""The regression methods of the modulated-learning paper as experiments: the modulated
estimators (iterative and one-shot), DP-SGD FedAvg with one sample per client, and the
non-private OLS reference.

Each private round makes one release through a local randomizer (the modulated map,
:class:`~jfed.algorithms.modulated.ModulatedMap`; DP-SGD's clipped noisy gradient,
:class:`~jfed.privacy.client_stream.ClientStreamRandomizerSum`): the noise of the T releases is
calibrated to (eps, delta) by the randomizer's own calibration (:func:`jfed.privacy.rounds_plan`:
the accountant's closed form for Gaussian noise), and what a run certifies is the composition of
the events its releases state (the experiment's ledger). Each runs on the device (engine,
through the runner) and evaluates on the host in float64: test and validation R^2 against the
non-private OLS fit of the same clients.

The noise's arithmetic (``--noise``): ``float`` (the default, the fast path) adds float32
Gaussian noise, and the record's notion and ``mechanism_model`` say "ideal real-valued
mechanism; floating-point sampling not modelled"; ``discrete`` releases every message exactly on
an integer grid (:mod:`jfed.privacy.local_discrete`: an exact integer norm bound, exact discrete
Gaussian noise, scaled back), certified by its discrete Gaussian events under zCDP (rho = 1 / (2
z^2), the continuous Gaussian's at the same z, so the calibration is the same), one grid for a
sweep (:meth:`RegressionExperiment.prepare`).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jfed.algorithms import dpsgd, modulated, ols
from jfed.algorithms import modulated_reconstruction as reconstruction
from jfed.algorithms.linear import r2_curve, r2_score
from jfed.catalog import SYNTHETIC_CLIENTS, SYNTHETIC_DIM
from jfed.data import RegressionTask, load_regression, synthetic_regression
from jfed.engine import ExecutionPlan, simulate
from jfed.methods import declared
from jfed.methods.experiment import (
    Experiment,
    Output,
    guarantee_fields,
    guarantee_of,
    non_private_fields,
    timings,
)
from jfed.methods.record_fields import RecordFields
from jfed.privacy import PrivacyGuarantee, rounds_plan
from jfed.privacy.accounting import certify, via
from jfed.privacy.local_discrete import LocalGridGaussian, grid_norm_for

SYNTHETIC_DATA_KEY = 10_007
REAL_DATA_FEATURE_CLIP = 3.0
FEATURE_CLIP_LEVEL = 0.95

EXACT_MODEL = (
    "exact: each message clipped to its radius and rounded to an integer grid (triangular "
    "dither, exact integer norm bound), discrete Gaussian noise sampled exactly in integer "
    "arithmetic, scaled back after the noise"
)
"""What an exact release's record says of its arithmetic (``mechanism_model``)."""


def float_model() -> str:
    """DP-FedAvg's words for a float mechanism's ``mechanism_model`` (the one statement)."""
    from jfed.methods.dp_fedavg import IDEAL

    return IDEAL


def load_task(config: declared.RegressionData) -> RegressionTask:
    """The task of a configuration: a real task by name, or procedural clients (``clients`` of
    dimension ``dim``; generated on the device from their ids)."""
    if config.synthetic:
        return synthetic_regression(
            jax.random.key(SYNTHETIC_DATA_KEY),
            config.clients or SYNTHETIC_CLIENTS,
            config.dim or SYNTHETIC_DIM,
        )
    return load_regression(config.dataset)


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


def ols_reference(task: RegressionTask, plan: ExecutionPlan | None = None) -> dict:
    """Non-private OLS on the training clients: its parameter and test / validation R^2."""
    state, _ = simulate(
        ols.LeastSquares(task.dim), task.train, jnp.float32(0.0), jax.random.key(0), 1, plan
    )
    theta = np.asarray(state.theta, np.float64)
    return {
        "theta": theta,
        "test_r2": r2_score(theta, *task.test),
        "validation_r2": r2_score(theta, *task.validation),
    }


def reconstruction_fields(
    task: RegressionTask, config: declared.Modulated, noise_std: float, releases: int, leak: float
) -> dict:
    """What an attacker can reconstruct of one client's features from its ``releases`` messages:
    the Cramer-Rao bound on any unbiased attacker (without and with the public response's leak
    ``leak``) and the direct attacker's error, per coordinate of the standardised features."""
    common = (task.dim, config.alpha, config.beta, config.omega, noise_std, releases)
    return {
        "lower_bound_mse_per_coordinate": reconstruction.reconstruction_lower_bound(*common),
        "lower_bound_mse_per_coordinate_with_response": reconstruction.reconstruction_lower_bound(
            *common, response_information=leak, form=reconstruction.SPECTRAL
        ),
        "trace_lower_bound_mse_per_coordinate_with_response": (
            reconstruction.reconstruction_lower_bound(*common, response_information=leak)
        ),
        "direct_attack_mse_per_coordinate": reconstruction.direct_attack_error(
            task.dim, config.alpha, config.beta, noise_std, releases
        ),
        "releases": releases,
        "notion": "Cramer-Rao bounds on any unbiased attacker, averaged over phases and "
        "directions (the modulated paper's section 6; with the response: the spectral form, and "
        "the paper's trace form); features standardised, so 1 is a coordinate's variance",
    }


def response_information(population) -> float:
    """How much the public response tells about one client's features (for the bounds)."""
    if hasattr(population, "features"):
        return reconstruction.response_information(population.features, population.targets)
    theta_star = np.asarray(population.theta_star, np.float64)  # y = <x, theta*> + noise
    return float(theta_star @ theta_star) / float(population.noise_std) ** 2


@functools.lru_cache(maxsize=1024)
def rounds_multiplier(
    randomizer: Any, epsilon: float, delta: float, rounds: int, accountant: Any
) -> float:
    """The noise multiplier of ``rounds`` releases of ``randomizer`` per client at (eps, delta)
    under ``accountant`` (:func:`jfed.privacy.rounds_plan`), answered once per setting: the
    seeds of a sweep share it (a PLD search takes seconds)."""
    plan = rounds_plan(1.0, epsilon, delta, rounds, accountant=accountant, randomizer=randomizer)
    return plan.noise_multiplier


def iterate_outputs(*extra: Output) -> tuple[Output, ...]:
    """The parameter, its path over rounds and the last round's clipped fraction (plus
    ``extra``)."""
    return (
        Output("theta", "state.theta"),
        Output("theta_per_round", "infos.theta"),
        Output("clipped_fraction", "infos.clipped_fraction", reduce="last"),
        *extra,
    )


class RegressionExperiment(Experiment):
    """Shared by the regression methods: the task, the OLS reference and R^2 metrics, and the
    calibration and certificate of the private ones (T releases of a local randomizer per
    client: :meth:`calibrate`)."""

    record_fields = RecordFields(
        inside=("test_r2", "validation_r2", "test_r2_per_round", "test_r2_average",
                "test_r2_raw", "test_r2_psd", "step_size_per_round"),
        outside=("ols_r2", "ols_validation_r2", "clipped_fraction"),
    )  # fmt: skip
    """The estimate's R^2 on the test and validation splits (and the step sizes, set by the
    noised second moments) are post-processing of the releases; the non-private OLS
    reference fit on the clients' records and the clipped count are not."""

    # the noise of every client's message: the calibration follows it (DP-SGD takes another)
    randomizer: Any = dpsgd.GAUSSIAN
    # what a certificate states beside the notion: set by each private method
    protected_statement = ""
    trust_statement = ""

    def __init__(
        self,
        config: declared.RegressionData,
        task: RegressionTask | None = None,
        reference: dict | None = None,
    ) -> None:
        super().__init__(config)
        self.task = task if task is not None else load_task(config)
        self._reference = reference
        self._grid_norm: int | None = None

    @property
    def rounds(self) -> int:
        return getattr(self.config, "rounds", 1)

    # -- the noise's arithmetic
    @property
    def exact(self) -> bool:
        """Whether the messages are released on the integer grid (``--noise discrete``)."""
        return declared.common.GRID_NOISES[getattr(self.base_config, "noise", "float")]

    @property
    def grid_norm(self) -> int | None:
        """L of the exact releases (``None`` for float noise): :meth:`prepare`'s for a sweep,
        else the one of the configuration the experiment was built from."""
        if self.exact and self._grid_norm is None:
            self._grid_norm = self.grid_for([self.base_config])
        return self._grid_norm

    @property
    def grid(self) -> LocalGridGaussian:
        """The release of every message on the grid (its sensitivity, noise, event)."""
        grid_norm = self.grid_norm
        assert grid_norm is not None  # read only with --noise discrete
        return LocalGridGaussian(self.task.dim, grid_norm)

    def grid_for(self, configs: list) -> int:
        """One grid for the exact releases of ``configs``: the finest that holds the noise of
        the largest of their noise multipliers (:func:`~jfed.privacy.local_discrete.
        grid_norm_for`); the noise multiplier does not depend on the grid."""
        largest = max(self.noise_multiplier_for(c, None, *self.privacy_target(c)) for c in configs)
        return grid_norm_for(largest, self.task.dim)

    def prepare(self, configs: list) -> None:
        """With ``--noise discrete``: one grid for the whole sweep (one compiled program)."""
        if self.exact:
            self._grid_norm = self.grid_for(configs)

    def identity(self) -> dict:
        return {
            "dataset": self.config.dataset_label,
            "n_clients": self.task.n_clients,
            "dim": self.task.dim,
        }

    @property
    def reference(self) -> dict:
        if self._reference is None:
            self._reference = ols_reference(self.task)
        return self._reference

    def evaluate(self, outputs: dict[str, np.ndarray], config) -> dict:
        del config
        theta = np.asarray(outputs["theta"], np.float64)
        metrics = {
            "test_r2": r2_score(theta, *self.task.test),
            "validation_r2": r2_score(theta, *self.task.validation),
            "ols_r2": self.reference["test_r2"],
            "ols_validation_r2": self.reference["validation_r2"],
        }
        if "theta_per_round" in outputs:
            metrics["test_r2_per_round"] = r2_curve(
                outputs["theta_per_round"], *self.task.test
            ).tolist()
            metrics["clipped_fraction"] = float(outputs["clipped_fraction"])
        return metrics

    # -- privacy of the private methods
    def release_sensitivity(self, config) -> float:
        """The sensitivity of one client's message, in the randomizer's norm (host float64)."""
        raise NotImplementedError

    def noise_multiplier_for(
        self, config, build, epsilon: float, delta: float, accountant: Any,
        tolerance: float = 1e-6,
    ) -> float:  # fmt: skip
        """T releases of the randomizer per client (every client, every round): its own
        calibration (:func:`jfed.privacy.rounds_plan`; for Gaussian noise the accountant's
        closed form under zcdp, analytic and classic), the multiplier ``noise / sensitivity``."""
        del config, build, tolerance
        return rounds_multiplier(self.randomizer, float(epsilon), float(delta), self.rounds,
                                 accountant)  # fmt: skip

    def certify_run(self, hyper: Any, delta: float, accountant: Any) -> PrivacyGuarantee:
        """What ``accountant`` certifies for the releases of a run at ``hyper`` (the ledger's
        events), as the method family states it: local (eps, delta)-DP, the protected record;
        the float noise's notion says it is the ideal real-valued mechanism's."""
        notion = f"local (eps, delta)-DP{via(accountant)}"
        if not self.exact:
            notion += f" ({float_model()})"
        return certify(
            self.run_event(hyper), delta, accountant=accountant,
            adjacency=self.ledger().adjacency, notion=notion,
            protected=self.protected_statement, trust_model=self.trust_statement,
        )  # fmt: skip

    def calibrate(self, config) -> tuple[Any, dict]:
        """The noise of the run's T releases calibrated to the configuration's (eps, delta)
        (:meth:`noise_multiplier_for`), the run certified from the releases it makes
        (:meth:`certify_run`), and the record's privacy fields (:meth:`privacy_fields`)."""
        epsilon, delta, accountant = self.privacy_target(config)
        build = functools.partial(self.hyperparams, config)
        noise_multiplier = self.noise_multiplier_for(config, build, epsilon, delta, accountant)
        hyper = build(noise_multiplier)
        if self.exact:
            self._check_grid(config, hyper)
        guarantee = self.certify_run(hyper, delta, accountant)
        return hyper, self.privacy_fields(config, hyper, noise_multiplier, guarantee, accountant)

    def _check_grid(self, config, hyper) -> None:
        """UsageError naming the flags unless the run's noise fits the sweep's grid."""
        from jfed._validation import UsageError
        from jfed.privacy.local_discrete import GridGaussianParams

        try:
            self.grid.check(GridGaussianParams(1.0, float(hyper.noise_multiplier)))
        except ValueError as error:
            raise UsageError(
                f"method {self.name}: --epsilon {config.epsilon:g} with --noise discrete: "
                f"{error} (run the eps of a sweep together, so that the grid fits the smallest, "
                "or use --noise float)"
            ) from None

    def privacy_fields(self, config, hyper, noise_multiplier: float, guarantee, accountant) -> dict:
        """The record's privacy fields: the guarantee, the noise ``sigma`` (host float64, the
        device runs its float32 rounding; on the grid, the discrete Gaussian's in value units),
        the multiplier the accountant read, the sensitivity, and the arithmetic the guarantee
        is about (``mechanism_model``; on the grid, ``grid_norm`` and ``noise_inflation``)."""
        del accountant
        message_sensitivity = self.release_sensitivity(config)
        fields = guarantee_fields(guarantee, noise_multiplier * message_sensitivity)
        fields |= {"noise_multiplier": self.ran_multiplier(hyper),
                   "sensitivity": message_sensitivity,
                   "mechanism_model": EXACT_MODEL if self.exact else float_model()}  # fmt: skip
        if self.exact:
            release = self.ledger().only_release("a regression round")
            aggregator = release.aggregator
            params = aggregator.grid_params(release.params(hyper))
            fields |= {"sigma": self.grid.noise_std(params), "grid_norm": self.grid.grid_norm,
                       "noise_inflation": self.grid.noise_inflation()}  # fmt: skip
        return fields

    @staticmethod
    def summary(record: dict) -> str:
        sigma = f" | sigma={record['sigma']:.4g}" if record["sigma"] else ""
        clipped = record.get("clipped_fraction")
        clipped = f" | clipped {100 * clipped:.1f}% of clients" if clipped else ""
        return (
            f"{record['method']} on {record['dataset']} (n={record['n_clients']}, "
            f"d={record['dim']}, T={record['rounds']}): test R^2 = {record['test_r2']:.4f} "
            f"(non-private OLS {record['ols_r2']:.4f}) | privacy: "
            f"{guarantee_of(record).describe()}{sigma}{clipped} | {timings(record)}"
        )


class ModulatedExperiment(RegressionExperiment):
    """The modulated estimators: the noise of their T releases calibrated to (eps, delta)."""

    protected_statement = modulated.PROTECTED
    trust_statement = modulated.TRUST_MODEL
    program: type = modulated.Iterative

    def __init__(self, config, task=None, reference=None) -> None:
        super().__init__(config, task, reference)
        self._leak: float | None = None

    @property
    def algorithm(self):
        return self.program(self.task.dim, self.config.directions, self.grid_norm)

    @property
    def shared_noise_algorithm(self):
        """eps changes only ``noise_std`` of a modulated estimator: the eps of one (seed,
        settings) run as one unit that draws once (:class:`modulated.SharedNoise`). Not on the
        grid: each level draws its own discrete noise (the eps of a sweep still share one
        compiled program)."""
        return None if self.exact else modulated.SharedNoise(self.algorithm)

    def feature_clip(self, config) -> float:
        """C: the configuration's, else :func:`default_feature_clip` of the clients."""
        clip = config.feature_clip
        return default_feature_clip(self.task.train) if clip is None else clip

    def release_sensitivity(self, config) -> float:
        """``L D`` of one message (:func:`jfed.algorithms.modulated.sensitivity`); on the grid,
        ``2 sqrt(B) R / L`` with ``R = alpha C + beta`` (the bound on a message's norm:
        :class:`~jfed.algorithms.modulated.ModulatedGridMap`)."""
        if self.exact:
            radius = modulated.message_radius(config.alpha, config.beta, self.feature_clip(config))
            return self.grid.value_sensitivity(radius)
        return modulated.sensitivity(
            config.alpha, config.beta, config.omega, config.directions,
            self.feature_clip(config), config.adjacency_diameter,
        )  # fmt: skip

    def server_fields(self, config, noise_std: float) -> dict:
        """The server's own hyper-parameters (outside the map: no effect on privacy)."""
        del noise_std
        return {"radius": config.radius}

    def hyperparams(self, config, noise_multiplier: float | None) -> modulated.Hyperparams:
        """The run's traced numbers: the map's (:class:`~jfed.algorithms.modulated.MapParams`
        are read from them) with ``noise_std = z L D``, and the server's."""
        noise_std = (noise_multiplier or 0.0) * self.release_sensitivity(config)
        # the grid map reads z; the server's fields read the noise's size either way
        return modulated.hyperparams(
            alpha=config.alpha, beta=config.beta, omega=config.omega,
            noise_std=0.0 if self.exact else noise_std,
            noise_multiplier=noise_multiplier if self.exact else None,
            clip_norm=self.feature_clip(config), adjacency_diameter=config.adjacency_diameter,
            **self.server_fields(config, noise_std),
        )  # fmt: skip

    def certify_run(self, hyper: Any, delta: float, accountant: Any) -> PrivacyGuarantee:
        """The ledger's certificate, stated for the float32 sampler's reach
        (:func:`jfed.algorithms.modulated.reach_statement`; the exact map has no reach)."""
        guarantee = super().certify_run(hyper, delta, accountant)
        if self.exact:
            return guarantee
        release = self.ledger().only_release("a regression round")
        multiplier = release.aggregator.event(release.params(hyper)).noise_multiplier
        return modulated.reach_statement(guarantee, multiplier, self.rounds, accountant)

    def privacy_fields(self, config, hyper, noise_multiplier: float, guarantee, accountant) -> dict:
        fields = super().privacy_fields(config, hyper, noise_multiplier, guarantee, accountant)
        fields |= {
            "lipschitz": modulated.lipschitz_constant(
                config.alpha, config.beta, config.omega, config.directions
            ),
            "feature_clip_used": self.feature_clip(config),
        }
        if fields["sigma"] > 0 and not self.exact:  # the bounds are for Gaussian noise
            if self._leak is None:
                self._leak = response_information(self.task.train)
            fields["reconstruction"] = reconstruction_fields(
                self.task, config, fields["sigma"], self.rounds, self._leak
            )
        return fields


class ModulatedIterativeExperiment(ModulatedExperiment):
    """The iterative estimator; also reports the averaged iterate and the step sizes."""

    outputs = iterate_outputs(
        Output("theta_average", "state.theta_average"), Output("step_size", "infos.step_size")
    )

    def server_fields(self, config, noise_std: float) -> dict:
        return super().server_fields(config, noise_std) | {
            "step_scale": config.step_scale, "step_floor": config.step_floor,
        }  # fmt: skip

    def evaluate(self, outputs, config) -> dict:
        metrics = super().evaluate(outputs, config)
        metrics["test_r2_average"] = r2_score(
            np.asarray(outputs["theta_average"], np.float64), *self.task.test
        )
        metrics["step_size_per_round"] = np.asarray(outputs["step_size"], np.float64).tolist()
        return metrics


class ModulatedOneShotExperiment(ModulatedExperiment):
    """The one-shot estimator; ``--psd`` reports the solve with the PSD part of S_hat."""

    program = modulated.OneShot
    outputs = iterate_outputs(Output("theta_psd", "state.theta_psd"))

    def server_fields(self, config, noise_std: float) -> dict:
        """The ridge: the configuration's, else the noise-scaled one
        (:func:`jfed.algorithms.modulated.noise_scaled_ridge`)."""
        ridge = config.ridge
        if ridge is None:
            population = self.task.train
            ridge = modulated.noise_scaled_ridge(
                noise_std, config.alpha, population.n_clients, population.dim, config.ridge_scale,
            ) if noise_std > 0 else 0.0  # fmt: skip
        return super().server_fields(config, noise_std) | {"ridge": ridge}

    def privacy_fields(self, config, hyper, noise_multiplier: float, guarantee, accountant) -> dict:
        fields = super().privacy_fields(config, hyper, noise_multiplier, guarantee, accountant)
        return fields | {"ridge_used": float(hyper.ridge)}

    def evaluate(self, outputs, config) -> dict:
        raw = np.asarray(outputs["theta"], np.float64)
        psd = np.asarray(outputs["theta_psd"], np.float64)
        chosen = dict(outputs, theta=psd if config.psd else raw)
        metrics = super().evaluate(chosen, config)
        metrics["test_r2_raw"] = r2_score(raw, *self.task.test)
        metrics["test_r2_psd"] = r2_score(psd, *self.task.test)
        return metrics


class DPSGDExperiment(RegressionExperiment):
    """DP-SGD FedAvg: its noise feeds the next round's gradients, so every run is its own unit."""

    outputs = iterate_outputs()
    protected_statement = dpsgd.PROTECTED
    trust_statement = dpsgd.TRUST_MODEL
    # the local randomizer of every message: subclass and set another to plug in your own
    # (a jfed.privacy.NoiseRandomizer); calibration and accounting follow it
    randomizer = dpsgd.GAUSSIAN

    @property
    def algorithm(self):
        return dpsgd.FedAvg(self.task.dim, self.randomizer, self.grid_norm)

    def release_sensitivity(self, config) -> float:
        """The randomizer's sensitivity of a gradient moving by ``2G``, in its own norm; on the
        grid, ``2 sqrt(B) G / L``."""
        if self.exact:
            return self.grid.value_sensitivity(config.gradient_clip)
        return self.randomizer.sensitivity(dpsgd.sensitivity(config.gradient_clip), self.task.dim)

    def hyperparams(self, config, noise_multiplier: float | None) -> dpsgd.Hyperparams:
        """The run's traced numbers (the aggregator's clip and noise among them), the noise
        ``z`` times the randomizer's sensitivity of a message (on the grid: ``z`` itself)."""
        noise_std = (noise_multiplier or 0.0) * self.release_sensitivity(config)
        return dpsgd.hyperparams(
            clip_norm=config.gradient_clip, learning_rate=config.learning_rate,
            noise_std=0.0 if self.exact else noise_std,
            noise_multiplier=noise_multiplier if self.exact else None, radius=config.radius,
        )  # fmt: skip


class OLSExperiment(RegressionExperiment):
    """The non-private least-squares reference (eps = inf)."""

    outputs = (Output("theta", "state.theta"),)

    @property
    def algorithm(self):
        return ols.LeastSquares(self.task.dim)

    def calibrate(self, config) -> tuple[jax.Array, dict]:
        del config
        return jnp.float32(0.0), non_private_fields(self.method)
