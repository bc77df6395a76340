"""The regression methods of the modulated-learning paper: the modulated estimators (iterative
and one-shot), DP-SGD FedAvg with one sample per client, and the non-private OLS reference.
Their experiments are in :mod:`jfed.methods.regression`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

from jfed import catalog
from jfed.methods.config import Config, Rounds
from jfed.methods.cost import (
    CLIENT_OPERATIONS,
    DRAW_OPERATIONS,
    FLOAT32,
    FLOAT64,
    MESSAGE_COPIES,
    SOLVE_COPIES,
    Cost,
    CostPlan,
    pld_calibration_cost,
)
from jfed.methods.declared.common import (
    CLIENTS,
    MAX_DIM,
    RIDGE,
    gradient_clip,
    learning_rate,
    projection_radius,
)
from jfed.methods.fields import (
    EPSILON,
    MAX_CLIENTS,
    NONNEGATIVE,
    OPEN_UNIT,
    POSITIVE,
    integers,
    param,
)
from jfed.methods.registry import Method, Metrics, register

MODULATED_PAPER = (
    "Modulated learning for private and distributed regression with just a single sample per "
    "client device"
)
LOCAL = "local (eps, delta)-DP"
UNTRUSTED = "untrusted server; each client randomizes its own messages"
FEATURES = "one client's feature vector x_i (the response y_i is treated as public)"
RECORD = "one client's record (x_i, y_i)"
EXPERIMENTS = "jfed.methods.regression:"


@dataclass(frozen=True)
class RegressionData(Config):
    """A regression task: one of the real tasks, or procedural clients generated on the device."""

    dataset: str = param(
        catalog.DEFAULT_REGRESSION_DATASET,
        "real task, one record per client (statsmodels, ships offline; see `jfed datasets`)",
        choices=tuple(catalog.REGRESSION_DATASETS), group="data",
        requires=(lambda c: not c.synthetic, "only without --synthetic (they exclude each other)"),
    )  # fmt: skip
    synthetic: bool = param(
        False, "procedural linear clients generated on the device from their ids instead",
        group="data",
    )  # fmt: skip
    clients: int | None = param(
        None, CLIENTS, kind=int, unit="clients",
        range=integers(1, MAX_CLIENTS), default_text=str(catalog.SYNTHETIC_CLIENTS),
        requires=(lambda c: c.synthetic, "only with --synthetic"), group="data",
    )  # fmt: skip
    dim: int | None = param(
        None, "features d of the procedural clients", kind=int, unit="features",
        range=integers(1, MAX_DIM), default_text=str(catalog.SYNTHETIC_DIM),
        requires=(lambda c: c.synthetic, "only with --synthetic"), group="data",
    )  # fmt: skip

    @property
    def dimension(self) -> int | None:
        """d of the task, known without loading it (``None`` for an unknown data set)."""
        if self.synthetic:
            return self.dim or catalog.SYNTHETIC_DIM
        return catalog.REGRESSION_DATASETS.get(self.dataset)

    @property
    def dataset_label(self) -> str:
        return "synthetic" if self.synthetic else self.dataset


LOCAL_NOISES = ("float", "discrete")
"""``--noise`` of the one-sample methods: float32 Gaussian (the default) or the exact grid."""
EXACT_ACCOUNTANTS = ("zcdp",)
"""The ``--accountant`` values that compose the exact releases' discrete Gaussian events."""


@dataclass(frozen=True)
class LocalPrivacy(Config):
    """(eps, delta) of the whole run, the accountant that calibrates the noise to it, and the
    noise's arithmetic."""

    epsilon: float = param(1.0, "target eps of the whole run", range=EPSILON, group="privacy")
    delta: float = param(1e-5, "target delta of the whole run", range=OPEN_UNIT, group="privacy")
    accountant: str = param(
        "zcdp", "accountant that calibrates the noise (zcdp: Gaussian zCDP, converted exactly)",
        choices=catalog.ROUNDS_ACCOUNTANTS, group="privacy",
        requires=(lambda c: c.noise != "discrete" or c.accountant in EXACT_ACCOUNTANTS,
                  "as zcdp with --noise discrete (the discrete Gaussian's rho; classic, pld and "
                  "analytic are the continuous Gaussian's)"),
    )  # fmt: skip
    noise: str = param(
        "float", "the noise's arithmetic: float (float32 Gaussian noise: the ideal real-valued "
        "mechanism, floating-point sampling not modelled; the fast default) or discrete (each "
        "message rounded to an integer grid under an exact integer norm bound, exact discrete "
        "Gaussian noise: the guarantee holds for the program as it runs, at a speed cost)",
        choices=LOCAL_NOISES, group="privacy",
    )  # fmt: skip


@dataclass(frozen=True)
class Modulated(RegressionData, LocalPrivacy):
    """The modulated client map, common to both of its estimators."""

    alpha: float = param(1.0, "signal amplitude alpha", range=POSITIVE, tunable=True)
    beta: float = param(0.5, "modulation amplitude beta", range=NONNEGATIVE, tunable=True)
    omega: float = param(1.0, "modulation frequency omega", range=NONNEGATIVE, tunable=True)
    directions: int = param(1, "modulation directions k (at most d)", range=integers(1, MAX_DIM))
    feature_clip: float | None = param(
        None, "feature clip radius C: a client's features are scaled into the ball of radius C",
        kind=float, unit="feature norm", range=POSITIVE, tunable=True,
        default_text="3.0 on real tasks (standardised features); synthetic: the 95% quantile "
        "of the feature norm, 4.28 for d = 10",
    )  # fmt: skip
    adjacency_diameter: float | None = param(
        None, "adjacency diameter D: how far apart two neighbouring feature vectors may be",
        kind=float, unit="feature norm", range=POSITIVE, tunable=True,
        default_text="2 x feature clip",
        requires=(lambda c: c.noise == "float", "only with --noise float (the exact release "
                  "bounds a message by its norm: any two features in the ball)"),
    )  # fmt: skip
    radius: float = projection_radius()

    def check(self) -> Self:
        dimension = self.dimension
        if dimension is not None and not 1 <= self.directions <= dimension:
            raise ValueError(
                f"expected --directions in [1, {dimension}] (the data's dimension d), "
                f"got --directions={self.directions}"
            )
        return super().check()


@dataclass(frozen=True)
class ModulatedIterative(Modulated, Rounds):
    """Modulated learning, iterative estimator: T rounds of debiased modulated gradients."""

    step_scale: float = param(0.8, "step scale c of the step size c / (L sqrt(t))",
                              range=POSITIVE, tunable=True)  # fmt: skip
    step_floor: float = param(1e-3, "smallest step size", range=POSITIVE, tunable=True)


@dataclass(frozen=True)
class ModulatedOneShot(Modulated):
    """Modulated learning, one-shot estimator: one release, a ridge solve of the debiased
    second moments."""

    ridge: float | None = param(
        None, RIDGE, kind=float, range=NONNEGATIVE, tunable=True,
        default_text="noise-scaled: --ridge-scale x (sigma / alpha)^2 x 2 sqrt(d / n)",
    )  # fmt: skip
    ridge_scale: float = param(
        1.0, "scale s of the noise-scaled ridge", range=POSITIVE, tunable=True,
        requires=(lambda c: c.ridge is None, "only without --ridge"),
    )  # fmt: skip
    psd: bool = param(False, "solve with the positive semi-definite part of the second moments")


@dataclass(frozen=True)
class DPSGD(RegressionData, LocalPrivacy, Rounds):
    """DP-SGD FedAvg with one sample per client: clipped gradients, Gaussian noise per client."""

    gradient_clip: float = gradient_clip(2.0)
    learning_rate: float = learning_rate(0.1)
    radius: float = projection_radius()


@dataclass(frozen=True)
class OLS(RegressionData):
    """Non-private least squares on the same clients: the reference every private method is
    compared with."""


# ------------------------------------------------------------------------------------- costs
# (jfed.methods.cost) chunk: clients vmapped at once; float32 on the device, float64 on the host

LARGEST_REAL_TASK = 20_190  # records of randhie, the largest regression task (`jfed datasets`)


def _clients(config: RegressionData) -> int:
    """n of a regression configuration (the real tasks: at most the largest one's records)."""
    if config.synthetic:
        return config.clients or catalog.SYNTHETIC_CLIENTS
    return LARGEST_REAL_TASK


def _sizes(config: RegressionData) -> tuple[int, int]:
    """``(d, n)`` of a checked configuration (its data set is one the catalog knows, so d is)."""
    dimension = config.dimension
    assert dimension is not None  # the data set is one of the choices: its d is in the catalog
    return dimension, _clients(config)


def _with_accounting(cost: Cost, config: LocalPrivacy, rounds: int) -> Cost:
    """``cost`` and, with ``--accountant pld``, its calibration over the rounds: R Gaussian
    releases composed under replace-one adjacency (the closed forms cost nothing)."""
    if config.accountant != "pld":
        return cost
    return cost.plus_host(pld_calibration_cost(
        rounds, 1.0, config.epsilon, config.delta, replace_one=True,
        hint="--accountant zcdp or analytic answers at once",
    ))  # fmt: skip


GRID_DRAW_OPERATIONS = 300 * DRAW_OPERATIONS
"""An exact discrete Gaussian draw of ``--noise discrete`` (its sampler's steps, vmapped over a
chunk's clients): measured 140 times a float round of d = 10 on 2 CPU cores
(bench/modulated_round.py)."""
GRID_COPIES = 30
"""Per-coordinate words of a chunk's discrete sampler (its state and a step's temporaries):
measured 4.8 MB against 0.8 MB for a chunk of 4,096 clients of d = 10."""


def _grid_cost(config: LocalPrivacy, d: int, n: int, chunk: int) -> tuple[int, int]:
    """``(memory, work per client and round)`` the exact release adds (none with float)."""
    if config.noise != "discrete":
        return 0, 0
    return FLOAT32 * GRID_COPIES * min(chunk, n) * d, GRID_DRAW_OPERATIONS * d


def modulated_cost(config: Modulated, plan: CostPlan) -> Cost:
    """A chunk's messages ``[chunk, m]`` with ``m = d`` (``2 d`` when a sweep's eps share their
    draws), their second moments ``[m, m]`` summed chunk by chunk, a solve of ``[d, d]``, the
    directions ``[d, k]``. Work per client and round: its draws (m of them) and ``m^2``; on the
    grid, d exact draws more (:data:`GRID_DRAW_OPERATIONS`)."""
    d, n = _sizes(config)
    m = 2 * d if plan.shared else d
    rounds = getattr(config, "rounds", 1)
    grid_memory, grid_work = _grid_cost(config, d, n, plan.chunk)
    memory = grid_memory + FLOAT32 * (
        MESSAGE_COPIES * min(plan.chunk, n) * m + SOLVE_COPIES * m * m + d * config.directions
    )
    work = rounds * n * (CLIENT_OPERATIONS + DRAW_OPERATIONS * m + m * m + grid_work)
    return _with_accounting(Cost(memory, work, ("dim", "clients", "rounds")), config, rounds)


def dpsgd_cost(config: DPSGD, plan: CostPlan) -> Cost:
    """``[chunk, d]`` gradients and their noise. Work per client and round: 2 d draws (on the
    grid, d exact draws more)."""
    d, n = _sizes(config)
    grid_memory, grid_work = _grid_cost(config, d, n, plan.chunk)
    memory = grid_memory + FLOAT32 * MESSAGE_COPIES * min(plan.chunk, n) * d
    work = config.rounds * n * (CLIENT_OPERATIONS + 2 * DRAW_OPERATIONS * d + grid_work)
    cost = Cost(memory, work, ("dim", "clients", "rounds"))
    return _with_accounting(cost, config, config.rounds)


def ols_cost(config: OLS, plan: CostPlan) -> Cost:
    """``[chunk, d]`` and ``[d, d]`` on the device, the solve in float64 on the host."""
    d, n = _sizes(config)
    memory = FLOAT32 * (MESSAGE_COPIES * min(plan.chunk, n) * d + SOLVE_COPIES * d * d)
    work = n * (CLIENT_OPERATIONS + d * d)
    return Cost(memory + FLOAT64 * SOLVE_COPIES * d * d, work, ("dim", "clients"))


R2 = Metrics(selection="validation_r2", maximize=True, report="test_r2")
"""The regression methods' metrics: tuned on the validation split's R^2, reported on the test's."""


register(Method(
    "modulated-iterative", ModulatedIterative,
    "modulated learning, iterative estimator: T rounds of debiased modulated gradients",
    LOCAL, FEATURES, UNTRUSTED, EXPERIMENTS + "ModulatedIterativeExperiment",
    MODULATED_PAPER, "iterative modulated estimator", cost=modulated_cost,
    metrics=R2,
))  # fmt: skip
register(Method(
    "modulated-one-shot", ModulatedOneShot,
    "modulated learning, one-shot estimator: one release, a ridge solve",
    LOCAL, FEATURES, UNTRUSTED, EXPERIMENTS + "ModulatedOneShotExperiment",
    MODULATED_PAPER, "one-shot modulated estimator", cost=modulated_cost,
    metrics=R2,
))  # fmt: skip
register(Method(
    "dpsgd", DPSGD, "DP-SGD FedAvg, one sample per client (the modulated paper's baseline)",
    LOCAL, RECORD, UNTRUSTED, EXPERIMENTS + "DPSGDExperiment",
    MODULATED_PAPER, "DP-SGD FedAvg baseline", cost=dpsgd_cost, metrics=R2,
))  # fmt: skip
register(Method(
    "ols", OLS, "non-private least squares (the reference)",
    "none", "nothing", "trusted server sees raw data", EXPERIMENTS + "OLSExperiment",
    MODULATED_PAPER, "ordinary least squares", private=False, cost=ols_cost,
    metrics=R2,
))  # fmt: skip
