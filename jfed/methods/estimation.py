"""Private federated estimation as experiments: the mean across S sites of n units in seven trust
settings (:mod:`jfed.algorithms.estimation`), and the functional mean across S servers
(:mod:`jfed.algorithms.functional`). A run is ``replications`` Monte Carlo draws of the estimate
(one engine round each, fresh data and noise); its record carries the mean squared error with its
standard error, the bias with its standard error, and the rate the theory states for the
configuration (constants omitted).

A sweep over sites, units and eps is one compiled program per setting: the program holds the
largest S (and, where units are drawn one by one, the largest n) of the grid and masks the rest,
so every grid point is a lane of the same executable.

The noise's arithmetic (``--noise``): by default every release is exact, an integer sum of
contributions rounded to a grid plus discrete Laplace or discrete Gaussian noise
(:class:`~jfed.algorithms.estimation_aggregators.DiscreteLaplaceNoise`,
:class:`~jfed.algorithms.estimation_aggregators.DiscreteGaussianNoise`; one grid for a sweep,
:func:`grid_norm_for`), and the record's ``mechanism_model`` says so; with ``--noise float`` the
noise is float32 and the record's notion and ``mechanism_model`` say "ideal real-valued
mechanism; floating-point sampling not modelled", as DP-FedAvg's float records do. The
functional mean's releases are exact by default too (each function's whitened projection rounded
to an integer grid, exact discrete Gaussian noise on the batch sums:
:class:`~jfed.algorithms.estimation_aggregators.DiscreteBatchMeans`, one grid for a sweep,
:func:`functional_grid_norm_for`), certified as the float release of the same sigma through the
continuous Gaussian the discrete noise is coupled to; ``--noise float`` keeps the float32
Gaussian, labelled as above.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, cast

import jax
import numpy as np

from jfed._validation import UsageError
from jfed.algorithms import estimation, functional
from jfed.algorithms.estimation_aggregators import (
    GRID_SCALE_TARGET,
    AnalyticGaussianNoise,
    BatchMeansParams,
    DiscreteBatchMeans,
    DiscreteGaussianNoise,
    DiscreteLaplaceNoise,
    LaplaceNoise,
    batch_means_grid_norm,
)
from jfed.engine.clients import refuse_repeated
from jfed.methods import declared
from jfed.methods.experiment import Experiment, Output, guarantee_of, timings
from jfed.methods.record_fields import RecordFields
from jfed.privacy import Analytic, Basic, ParallelDpEvent, discrete, spent
from jfed.privacy.discrete_accounting import coupled_gaussian, coupling_delta, delta_after_coupling
from jfed.privacy.discrete_aggregators import LAPLACE_SCALE_BITS
from jfed.privacy.gaussian import analytic_gaussian_noise
from jfed.privacy.mechanisms import AnisotropicGaussianMechanism, GaussianMechanism

if TYPE_CHECKING:
    from jfed.data.population import Population

DEFAULT_DELTA = 1e-5
"""delta of a release where the configuration leaves it unset (a Gaussian release; a Laplace
release, pure eps, states 0)."""


def delta_of(config: declared.Estimation | declared.FunctionalEstimation) -> float:
    """The configuration's delta, else :data:`DEFAULT_DELTA`."""
    return DEFAULT_DELTA if config.delta is None else config.delta


def setting_of(config: declared.Estimation) -> estimation.Setting:
    """The setting object ``--setting`` names (:data:`jfed.algorithms.estimation.SETTINGS`)."""
    return estimation.SETTINGS[config.setting]


EXACT_MODEL = (
    "exact: values rounded to an integer grid (randomized rounding, cut to the grid's bound), "
    "an integer sum, discrete {} noise sampled exactly in integer arithmetic"
)
"""What an exact release's record says of its arithmetic (``mechanism_model``), the noise's
name filled in (:func:`exact_model`)."""


def exact_model(noise: Any) -> str:
    """:data:`EXACT_MODEL` of an exact noise (discrete Laplace or discrete Gaussian)."""
    return EXACT_MODEL.format("Gaussian" if isinstance(noise, DiscreteGaussianNoise) else "Laplace")


INT32_SUM_LIMIT = 2**31
"""An integer sum on the grid, its noise 40 scales wide included, stays below this."""


def grid_norm_for(configs: list[declared.Estimation]) -> int:
    """Host: the grid of a sweep's exact releases, ``L`` (a contribution interval's half-width
    in grid units): the largest power of two at most
    :data:`~jfed.algorithms.estimation_aggregators.DEFAULT_GRID_NORM` such that, for every
    private configuration (``z = 2 / eps`` of its releases' share of eps):

    - the discrete Laplace's scale ``z L`` is at most 2^20 (the sampler's) and, where ``L >= 2``
      allows, at most :data:`~jfed.algorithms.estimation_aggregators.GRID_SCALE_TARGET` (so the
      scale the device rounds to is within 2^-10 + 2^-15 of ``z L``);
    - the integer sum stays exact in int32: ``N L + 40 z L < 2^31``, N the most contributions
      one release sums (:meth:`~jfed.algorithms.estimation.Setting.largest_sum`).

    With ``--mechanism gaussian`` the same holds of the discrete Gaussian's standard deviation
    ``z L`` (``z`` twice the analytic Gaussian's multiplier at the releases' share of eps and
    delta), at most :data:`GAUSSIAN_GRID_SIGMA_TARGET` where ``L >= 2`` allows (it keeps the
    exact (eps, delta)'s sums short), its variance in the sampler's range.

    :class:`~jfed._validation.UsageError` naming the flags if no grid holds them."""
    grid_norm = DiscreteLaplaceNoise.grid_norm
    for config in configs:
        setting = setting_of(config)
        if not setting.private:
            continue
        share = setting.release_share
        gaussian = isinstance(estimation.MECHANISMS[config.mechanism], AnalyticGaussianNoise)
        if gaussian:
            sigma = analytic_gaussian_noise(1.0, config.epsilon * share, delta_of(config) * share)
            z = 2.0 * float(sigma)
        else:
            z = 2.0 / (config.epsilon * share)
        largest = setting.largest_sum(config.sites, config.units)
        holds = _gaussian_grid_holds if gaussian else _grid_holds
        while grid_norm >= 1 and not holds(grid_norm, z, largest):
            grid_norm //= 2
        if grid_norm < 1:
            raise UsageError(
                f"--noise discrete: no integer grid holds the exact int32 sum of {largest} "
                f"contributions at --epsilon={config.epsilon:g} (--setting {config.setting}, "
                f"--sites {config.sites}, --units {config.units}): use fewer units or sites, "
                "or --noise float"
            )
    return grid_norm


def _grid_holds(grid_norm: int, z: float, largest: int) -> bool:
    scale = z * grid_norm * (1 + 2.0**-16)
    fine = z * grid_norm <= GRID_SCALE_TARGET or grid_norm == 1
    exact_sum = largest * grid_norm + 40.0 * scale < INT32_SUM_LIMIT
    return fine and scale <= 2.0**LAPLACE_SCALE_BITS and exact_sum


GAUSSIAN_GRID_SIGMA_TARGET = 2**12
"""The grid chooser keeps the discrete Gaussian's standard deviation at most this many grid units
(where ``L >= 2`` allows)."""


def _gaussian_grid_holds(grid_norm: int, z: float, largest: int) -> bool:
    sigma = 1.01 * z * grid_norm  # the exact calibration's sigma is within 1% of the analytic's
    fine = sigma <= GAUSSIAN_GRID_SIGMA_TARGET or grid_norm == 1
    in_range = sigma**2 * (1 + 2.0**-15) + 1 < discrete.SIGMA_SQUARED_LIMIT - 2**16
    return fine and in_range and largest * grid_norm + 40.0 * sigma < INT32_SUM_LIMIT


def noise_of(config: declared.Estimation, grid_norm: int | None = None) -> Any:
    """The noise object of ``config``: the exact noise on a grid of ``grid_norm`` (default
    :func:`grid_norm_for` of ``config`` alone) or the float noise ``--mechanism`` names."""
    if config.exact_noise:
        grid_norm = grid_norm_for([config]) if grid_norm is None else grid_norm
        return estimation.EXACT_MECHANISMS[config.mechanism](grid_norm)
    return estimation.MECHANISMS[config.mechanism]


def program_of(
    config: declared.Estimation, max_units: int = 1, grid_norm: int | None = None
) -> estimation.MeanEstimation:
    """The static program of ``config``: its setting, noise (on a grid of ``grid_norm``, see
    :func:`noise_of`) and data model as objects (units drawn one by one are padded to
    ``max_units`` where the setting draws them so)."""
    program = estimation.MeanEstimation(
        setting_of(config), noise_of(config, grid_norm), estimation.DATA_MODELS[config.data], 1
    )
    return dataclasses.replace(program, max_units=max_units) if program.per_unit else program


def default_clip(config: declared.Estimation) -> float:
    """c of ``config``: 1 for ±1 data; Gaussian data: a unit's value is clipped far in its tails
    (item-level), a site's mean just past [-1, 1] (user-level)."""
    if config.value_clip is not None:
        return config.value_clip
    return estimation.DATA_MODELS[config.data].default_clip(
        setting_of(config).user_level, config.sites, config.units
    )


@functools.lru_cache(maxsize=64)
def round_ledger(algorithm: Any, n_clients: int) -> Any:
    """The releases one round of ``algorithm`` makes over ``n_clients`` clients, found by
    tracing it (:func:`jfed.engine.trace_releases`; nothing runs), once per program."""
    from jfed.engine import trace_releases

    # Sites has no ``dim`` (its data is drawn on the device): tracing reads only the count and
    # ``record``
    sites = cast("Population", estimation.Sites(n_clients))
    return trace_releases(algorithm, sites, _structure(algorithm))


def _structure(algorithm: Any) -> Any:
    """Hyper-parameters of ``algorithm``'s structure (any values: only shapes are traced)."""
    if isinstance(algorithm, functional.FunctionalMean):
        terms = np.ones(functional.MAX_TERMS)
        return functional.hyperparams(servers=1, functions=1, observations=1, terms=1,
                                      iterations=1, noise_std=terms, clip=terms)  # fmt: skip
    return estimation.hyperparams(**{name: 1 for name in estimation.Hyperparams._fields})


def round_event(ledger: Any, hyper: Any, disjoint: bool = False) -> Any:
    """The ``DpEvent`` of one round's releases at host hyper-parameters ``hyper``: each release's
    event is its aggregator's, at its parameters as they ran (float32, arrays included), composed
    over the round; where every unit takes part in one release of the round at most
    (``disjoint``: the sites are split between the releases), the worst release's (parallel
    composition).

    A run's replications draw fresh data every round, so no unit takes part in two rounds: the
    run's guarantee is one round's. (What :meth:`jfed.engine.Ledger.event` composes, with two
    additions it lacks: releases on disjoint units, and parameters that are arrays.)"""
    import dp_accounting

    leaves = dict(jax.tree_util.tree_flatten_with_path(hyper)[0])
    events = []
    for release in ledger.releases:
        refuse_repeated(release, "an estimation round")
        # as Release.params reads them (the f32 numbers that ran), arrays included
        arrays = [np.asarray(leaves[path], np.float32).astype(np.float64)
                  for path in release.params_paths]  # fmt: skip
        values = [value.item() if value.ndim == 0 else value for value in arrays]
        params = jax.tree_util.tree_unflatten(release.params_treedef, values)
        event = release.aggregator.event(params)
        if not getattr(release.aggregator, "local", False):
            event = release.cohort.sampled_event(event, release.n_clients)
        events.append(event)
    if not events:
        return dp_accounting.NoOpDpEvent()
    if len(events) == 1:
        return events[0]
    return ParallelDpEvent(tuple(events)) if disjoint else dp_accounting.ComposedDpEvent(events)


def float_model() -> str:
    """DP-FedAvg's words for a float mechanism's ``mechanism_model`` (the one statement)."""
    from jfed.methods.dp_fedavg import IDEAL

    return IDEAL


def calibrate_mean(
    config: declared.Estimation, ledger: Any = None, grid_norm: int | None = None
) -> tuple[estimation.Hyperparams, dict]:
    """The setting's noise, clipping and search parameters for ``config``, and its privacy
    fields: every release is calibrated to (eps, delta) of the setting's neighbouring relation
    (the central user-level curator splits eps and delta in two halves, basic composition), and
    the record certifies what the round's releases state (:func:`round_event`, basic
    composition of the exact releases) at the numbers that ran.

    ``ledger``: the round's releases (default: traced from the program of ``config``);
    ``grid_norm``: the exact releases' grid (default: :func:`grid_norm_for` of ``config``)."""
    setting = setting_of(config)
    noise = noise_of(config, grid_norm)
    S, n, eps = config.sites, config.units, config.epsilon
    delta = noise.delta(delta_of(config))
    clip = default_clip(config)
    releases = setting.calibrate(noise, S, n, eps, delta, clip)
    truthful = 1.0 / (1.0 + math.exp(-eps))  # e^eps / (1 + e^eps)
    hp = estimation.hyperparams(
        sites=S, units=n, mean=config.mean, clip=clip, first_noise=releases.first_noise,
        second_noise=releases.second_noise, width=releases.width, stages=releases.stages,
        truthful=truthful,
    )  # fmt: skip
    accountant, notion, certified, model = "none", setting.notion, math.inf, None
    if setting.private:
        accountant = noise.accountant + setting.accountant_notes
        notion = notion.replace("eps-DP", noise.guarantee)
        model = exact_model(noise) if noise.exact else float_model()
        if not noise.exact:
            notion += f" ({model})"
        if ledger is None:
            ledger = round_ledger(program_of(config, grid_norm=getattr(noise, "grid_norm", None)),
                                  S)  # fmt: skip
        event = round_event(ledger, hp, setting.disjoint_releases)
        certified = spent(event, delta, accountant=Basic(), adjacency=ledger.adjacency)
    return hp, {
        "epsilon_certified": certified,
        "delta": delta,
        "accountant": accountant,
        "notion": notion,
        "protected": setting.protected,
        "trust_model": setting.trust_model,
        "sigma": max(releases.first_noise, releases.second_noise),
        "clip_used": clip,
        "search_stages": releases.stages,
        "noise_variance": setting.estimate_variance(noise, releases, S, n),
        "mechanism_model": model,
        "grid_norm": getattr(noise, "grid_norm", None) if setting.private else None,
    }


SEARCH_LAW_MAX_STAGES = 22
""":func:`search_law` holds 2^B paths (4 M at B = 22, about 100 MB of float64 arrays)."""


def search_law(config: declared.Estimation) -> dict:
    """The ``local-user-large`` estimator's MSE computed from the exact law of its votes, for
    ±1 data with Laplace noise: the theory's exp(-c S eps^2) with this search's own c.

    Every outcome of the B stages' votes is enumerated (2^B paths, each stage's vote up or
    down): a voter's site mean exceeds the stage's middle with its exact binomial probability,
    its report keeps the bit with probability e^eps / (1 + e^eps), a stage's k voters go up on a
    strict majority and on a tie by the fair coin, so each path's probability is exact, and so
    is its final interval. The estimate given the interval is the average over the S - S/2
    estimating sites of their means clipped to it plus Laplace noise; the clipped mean's first
    two moments are those of the normal law of a site mean (n units: the binomial's normal
    limit, exact enough at the n of this regime, n >= 10^4). Returns ``mse``, ``privacy_mse``
    (``mse`` minus :func:`sampling_variance`) and ``miss`` (the probability that the final
    interval, widened by the half-width, misses mu).
    """
    from scipy.stats import binom, norm

    searching = isinstance(setting_of(config), estimation.LocalUserLarge)
    if not searching or not isinstance(estimation.DATA_MODELS[config.data],
                                       estimation.RademacherData):  # fmt: skip
        raise ValueError("the search's law is computed for local-user-large on rademacher data")
    if not isinstance(estimation.MECHANISMS[config.mechanism], LaplaceNoise):
        raise ValueError("the search's law is computed for Laplace noise")
    hp, fields = calibrate_mean(config)
    S, n, mu, eps = config.sites, config.units, config.mean, config.epsilon
    clip, width, stages = float(hp.clip), float(hp.width), int(hp.stages)
    if stages > SEARCH_LAW_MAX_STAGES:
        raise ValueError(
            f"the search's law enumerates 2^B vote outcomes: B = {stages} stages here, at most "
            f"{SEARCH_LAW_MAX_STAGES} (n = {n} units); use fewer units"
        )
    locating, truthful = S // 2, 1.0 / (1.0 + math.exp(-eps))
    low, high, weight = np.array([-clip]), np.array([clip]), np.array([1.0])
    for stage in range(stages):
        voters = len(range(stage, locating, stages))
        middle = (low + high) / 2.0
        above = binom.sf(np.floor(n * (1.0 + middle) / 2.0), n, (1.0 + mu) / 2.0)
        reports_above = truthful * above + (1.0 - truthful) * (1.0 - above)
        wins = binom.sf(voters // 2, voters, reports_above)  # strictly more than half
        ties = binom.pmf(voters // 2, voters, reports_above) if voters % 2 == 0 else 0.0
        up = wins + 0.5 * ties
        quarter = (high - low) / 4.0
        low = np.concatenate([middle - quarter, low])
        high = np.concatenate([high, middle + quarter])
        weight = np.concatenate([weight * up, weight * (1.0 - up)])
    a, b = np.maximum(low - width, -clip), np.minimum(high + width, clip)
    spread = math.sqrt((1.0 - mu**2) / n)
    alpha, beta = (a - mu) / spread, (b - mu) / spread
    inside = norm.cdf(beta) - norm.cdf(alpha)
    # E and E^2 of clip(X, a, b) for X ~ N(mu, spread^2)
    first = (a * norm.cdf(alpha) + b * norm.sf(beta)
             + mu * inside + spread * (norm.pdf(alpha) - norm.pdf(beta)))  # fmt: skip
    second = (a**2 * norm.cdf(alpha) + b**2 * norm.sf(beta)
              + (mu**2 + spread**2) * inside
              + spread * ((a + mu) * norm.pdf(alpha) - (b + mu) * norm.pdf(beta)))  # fmt: skip
    estimating = S - S // 2
    noise = fields["noise_variance"]  # the final release's noise over the estimating sites
    per_path = (first - mu) ** 2 + (second - first**2) / estimating + noise
    mse = float(np.sum(weight * per_path))
    miss = float(np.sum(weight * ((mu < a) | (mu > b))))
    return {"mse": mse, "privacy_mse": mse - sampling_variance(config), "miss": miss}


def sampling_variance(config: declared.Estimation) -> float:
    """The variance the estimator would have without any noise: Var(X) / (units it averages),
    where the local user-level estimators average only the half of the sites that do not locate
    (clipping ignored). ``mse - sampling_variance`` is the price of privacy."""
    variance = estimation.DATA_MODELS[config.data].variance(config.mean)
    return variance / (setting_of(config).estimating_sites(config.sites) * config.units)


def monte_carlo(errors: np.ndarray) -> dict:
    """MSE and bias of the replications' errors, each with its standard error."""
    errors = np.asarray(errors, np.float64)
    squared = errors**2
    count = len(errors)
    return {
        "mse": float(squared.mean()),
        "mse_se": float(squared.std(ddof=1) / math.sqrt(count)),
        "bias": float(errors.mean()),
        "bias_se": float(errors.std(ddof=1) / math.sqrt(count)),
        "replications": count,
    }


@dataclass(frozen=True)
class Task:
    """What the runner streams: the sites."""

    train: estimation.Sites


# every replication's error and clipped fraction (f32[R])
MONTE_CARLO_OUTPUTS: tuple[Output, ...] = (
    Output("error", "infos.error"),
    Output("clipped", "infos.clipped"),
)


class MonteCarloExperiment(Experiment):
    """A run is ``replications`` engine rounds; nothing to choose among, so a sweep reports every
    grid point (the declarations' metrics select nothing). Every round draws fresh data, so a
    run certifies what one round's releases state (:meth:`run_event`)."""

    record_fields = RecordFields(
        outside=("bias", "bias_se", "mse", "mse_se", "privacy_mse", "privacy_mse_se",
                 "sampling_variance", "truncation_error", "clipped_fraction",
                 "rounding_fallbacks"),
        public=("replications", "theory_rate", "theory_dense", "theory_functions",
                "theory_private", "theory_private_sparse"),
    )  # fmt: skip
    """The estimate's errors are measured against the unnoised truth, and the clipped counts
    and rounding fallbacks are unnoised: outside the guarantee; the theory's rates are
    formulas of the settings."""

    disjoint_releases = False

    @property
    def rounds(self) -> int:
        return self.config.replications

    outputs = MONTE_CARLO_OUTPUTS

    def ledger(self) -> Any:
        """The releases one round of the running algorithm makes (:meth:`running`, traced once
        per program)."""
        algorithm, population = self.running()
        return round_ledger(algorithm, int(population.n_clients))

    def run_event(self, hyper: Any) -> Any:
        """One round's event (:func:`round_event`): no unit takes part in two rounds."""
        return round_event(self.ledger(), hyper, self.disjoint_releases)


class EstimationExperiment(MonteCarloExperiment):
    """Mean estimation in one of the seven settings."""

    def __init__(self, config: declared.Estimation) -> None:
        super().__init__(config)
        self._max_sites, self._max_units = config.sites, config.units
        self._grid_norm = grid_norm_for([config]) if config.exact_noise else None
        self.disjoint_releases = setting_of(config).disjoint_releases

    def prepare(self, configs: list[declared.Estimation]) -> None:
        """Size the program for the largest S and n of the grid (the rest are masked), and
        choose one integer grid that holds every configuration's exact releases."""
        self._max_sites = max(c.sites for c in configs)
        self._max_units = max(c.units for c in configs)
        if self._grid_norm is not None:
            self._grid_norm = grid_norm_for(configs)

    @property
    def task(self) -> Task:
        return Task(estimation.Sites(self._max_sites))

    @property
    def algorithm(self) -> estimation.MeanEstimation:
        # padded to the grid's largest n only where units are drawn one by one
        return program_of(self.config, self._max_units, self._grid_norm)

    def identity(self) -> dict:
        return {"dataset": f"synthetic {self.config.data}"}

    def calibrate(self, config: declared.Estimation):
        return calibrate_mean(config, self.ledger(), self._grid_norm)

    def evaluate(self, outputs: dict, config: declared.Estimation) -> dict:
        result = monte_carlo(outputs["error"])
        sampling = sampling_variance(config)
        return {
            **result,
            "sampling_variance": sampling,
            "privacy_mse": result["mse"] - sampling,
            "clipped_fraction": float(np.mean(outputs["clipped"])),
            "theory_rate": setting_of(config).theory_rate(
                config.sites, config.units, config.epsilon
            ),
        }

    @staticmethod
    def summary(record: dict) -> str:
        grid = " on an integer grid" if record.get("grid_norm") else ""
        return (
            f"estimation ({record['setting']}, {record['mechanism']}{grid}, {record['dataset']} "
            "data, "
            f"mu={record['mean']:g}): S={record['sites']} sites x n={record['units']} units, "
            f"MSE {record['mse']:.4g} +- {record['mse_se']:.2g} (bias {record['bias']:.2g} +- "
            f"{record['bias_se']:.2g}) over {record['replications']} replications; theory rate "
            f"{record['theory_rate']:.3g} (constants omitted) | privacy: "
            f"{guarantee_of(record).describe()} | {timings(record)}"
        )


# ------------------------------------------------------------------ functional mean estimation


@dataclass(frozen=True)
class AnisotropicShape:
    """The seed's shape ``sigma_l ~ sqrt(Delta_l ||Delta||_1)`` (it minimises the total variance
    at a given whitened sensitivity), scaled exactly by the analytic Gaussian of the whitened
    mechanism: the seed's constant ``sqrt(4 ln(2/delta)) / eps`` spends more noise than
    (eps, delta) needs (the records say how much)."""

    private: ClassVar[Literal[True]] = True
    accountant: ClassVar[str] = ("anisotropic Gaussian: the seed's shape sigma_l^2 ~ Delta_l "
                                 "||Delta||_1, scaled by the analytic Gaussian of the whitened "
                                 "mechanism")  # fmt: skip

    def noise_std(self, sensitivities: np.ndarray, multiplier: float) -> np.ndarray:
        """sigma: ``f64[r]`` for per-coordinate sensitivities ``Delta: f64[r]``."""
        mechanism = AnisotropicGaussianMechanism(
            tuple(map(float, sensitivities)),
            tuple(map(float, multiplier * np.sqrt(sensitivities * sensitivities.sum()))),
        )  # fmt: skip
        return np.asarray(mechanism.noise_std)

    def extra(self, sensitivities: np.ndarray, std: np.ndarray, epsilon: float,
              delta: float) -> dict:  # fmt: skip
        """The seed formula's noise against this one, and the eps it would certify."""
        seed = AnisotropicGaussianMechanism.calibrate(sensitivities, epsilon, delta)
        return {"seed_formula_noise_factor": float(seed.noise_std[0] / std[0]),
                "seed_formula_epsilon": seed.epsilon(delta)}  # fmt: skip


@dataclass(frozen=True)
class IsotropicShape:
    """One sigma for every coordinate, the analytic Gaussian's for the L2 sensitivity."""

    private: ClassVar[Literal[True]] = True
    accountant: ClassVar[str] = "analytic Gaussian (Balle and Wang), L2 sensitivity"

    def noise_std(self, sensitivities: np.ndarray, multiplier: float) -> np.ndarray:
        sensitivity = float(np.linalg.norm(sensitivities))
        gaussian = GaussianMechanism(sensitivity, multiplier * sensitivity)
        return np.full(len(sensitivities), gaussian.noise_std)

    def extra(self, sensitivities, std, epsilon, delta) -> dict:
        del sensitivities, std, epsilon, delta
        return {}


@dataclass(frozen=True)
class NoNoiseShape:
    """No noise: the non-private estimate."""

    private: ClassVar[Literal[False]] = False


NOISE_SHAPES: dict[str, AnisotropicShape | IsotropicShape | NoNoiseShape] = {
    "anisotropic": AnisotropicShape(),
    "isotropic": IsotropicShape(),
    "none": NoNoiseShape(),
}
"""The noise each ``--noise-shape`` names."""


def model_of(config: declared.FunctionalEstimation) -> functional.Model:
    """The data model ``config`` names (its basis an object of :data:`functional.BASES`)."""
    return functional.Model(functional.BASES[config.basis], config.smoothness)


def optimal_terms(config: declared.FunctionalEstimation) -> int:
    """The spec's rate-optimal r for S servers, n functions, m observations, eps (at most the
    basis limit :data:`functional.MAX_TERMS`)."""
    a = config.smoothness
    S, n, m = config.servers, config.functions, config.observations
    e2 = config.epsilon**2 if NOISE_SHAPES[config.noise_shape].private else math.inf
    candidates = [(S * n) ** (1 / (2 * a)), (S * n * m) ** (1 / (2 * a + 1))]
    if math.isfinite(e2):
        candidates += [(S * n**2 * e2) ** (1 / (2 * a)), (S * n**2 * m * e2) ** (1 / (2 * a + 2))]
    return int(min(max(round(min(candidates)), 1), functional.MAX_TERMS))


def functional_theory(config: declared.FunctionalEstimation) -> dict:
    """The four terms of the spec's upper bound for ``config`` (constants omitted) and their
    maximum."""
    a = config.smoothness
    S, n, m = config.servers, config.functions, config.observations
    terms = {
        "theory_functions": 1.0 / (S * n),
        "theory_dense": (1.0 / (S * n * m)) ** (2 * a / (2 * a + 1)),
    }
    if NOISE_SHAPES[config.noise_shape].private:
        e2 = config.epsilon**2
        terms["theory_private"] = 1.0 / (S * n**2 * e2)
        terms["theory_private_sparse"] = (1.0 / (S * n**2 * m * e2)) ** (2 * a / (2 * a + 2))
    return {**terms, "theory_rate": max(terms.values())}


FUNCTIONAL_EXACT_MODEL = (
    "exact: each function's clipped projection whitened by the noise (coordinate l over "
    "sigma_l) and rounded to an integer grid (conditional randomized rounding, its norm bound "
    "checked in integers), each batch's integer sum, discrete Gaussian noise sampled exactly in "
    "integer arithmetic, scaled back after the noise; certified as the float release of the "
    "same sigma through the continuous Gaussian the discrete noise is coupled to (its variance "
    "less 9 grid units), the coupling's total variation added to delta"
)
"""What an exact functional release's record says of its arithmetic (``mechanism_model``)."""

FUNCTIONAL_GRID_NORM = 2**12
"""The finest grid :func:`functional_grid_norm_for` chooses (the whitened radius in grid units)."""


def functional_grid_norm_for(configs: list[declared.FunctionalEstimation]) -> int | None:
    """Host: the grid of a sweep's exact functional releases (``None`` where none is exact):
    the finest power of two at most :data:`FUNCTIONAL_GRID_NORM` on which every exact
    configuration's largest batch (``ceil(n / T)`` functions) sums exactly in int32 with its
    noise in the sampler's range (:func:`~jfed.algorithms.estimation_aggregators.
    batch_means_grid_norm`). A batch sum's noise std over ``sqrt(B)`` is ``n_t / R`` with the
    whitened radius ``R = n_b / (2 z)``, i.e. ``2 z n_t / n_b``, z the whitened multiplier of
    (eps, delta) (the analytic Gaussian's, which both noise shapes meet exactly).
    :class:`~jfed._validation.UsageError` naming the flags if no grid holds them."""
    grid_norm = None
    for config in configs:
        if not config.exact_noise:
            continue
        multiplier = float(analytic_gaussian_noise(1.0, config.epsilon, delta_of(config)))
        largest = -(-config.functions // config.iterations)
        smallest = config.functions // config.iterations
        # a relative 2^-20 above: the float32 numbers that run may round the noise up a little
        per_sum = 2.0 * multiplier * largest / smallest * (1.0 + 2.0**-20)
        try:
            grid_norm = batch_means_grid_norm(functional.MAX_TERMS, largest, per_sum,
                                              grid_norm or FUNCTIONAL_GRID_NORM)  # fmt: skip
        except ValueError as error:
            raise UsageError(
                f"--noise discrete: {error} (--functions {config.functions}, --iterations "
                f"{config.iterations}, --epsilon {config.epsilon:g}): use --noise float"
            ) from None
    return grid_norm


def _functional_program(config: declared.FunctionalEstimation,
                        grid_norm: int | None) -> functional.FunctionalMean:  # fmt: skip
    return functional.FunctionalMean(model_of(config), config.functions, config.observations,
                                     config.iterations, grid_norm)  # fmt: skip


def calibrate_functional(
    config: declared.FunctionalEstimation, terms: int, ledger: Any = None,
    grid_norm: int | None = None,
):  # fmt: skip
    """Per-coordinate clipping bounds of a function's projection, the noise of each server's
    batch means, and the privacy fields: certified exactly (analytic Gaussian) from what the
    round's release states at the numbers that ran (the whitened mechanism is an isotropic
    Gaussian; :class:`~jfed.algorithms.estimation_aggregators.NoisyBatchMeans`). On the grid
    (``config.exact_noise``) the release is
    :class:`~jfed.algorithms.estimation_aggregators.DiscreteBatchMeans`, accounted as the
    continuous Gaussian its noise is coupled to: sigma is calibrated at delta less the
    coupling's share (``delta_accountant``; ``delta_coupling`` is ``(1 + e^eps)`` times the
    coupling's total variation over one server's release), and the record states the grid.

    ``ledger``: the round's releases (default: traced from the program of ``config``);
    ``grid_norm``: the exact release's grid (default: :func:`functional_grid_norm_for` of
    ``config``)."""
    model = model_of(config)
    bounds = model.clip_bounds(terms, config.observations, config.servers * config.functions)
    batch = config.functions // config.iterations
    sensitivities = 2.0 * bounds / batch  # replace one function of a batch
    shape, delta = NOISE_SHAPES[config.noise_shape], delta_of(config)
    exact = config.exact_noise
    if exact and grid_norm is None:
        grid_norm = functional_grid_norm_for([config])
    coupling = 0.0
    if exact:
        grid = DiscreteBatchMeans(functional.MAX_TERMS, cast(int, grid_norm))
        variation = grid.coupling_total_variation(config.iterations)
        delta_after_coupling(config.epsilon, variation, delta)  # refused where none is left
        coupling = coupling_delta(config.epsilon, variation)
    std = np.zeros(terms)
    if shape.private:
        multiplier = float(analytic_gaussian_noise(1.0, config.epsilon, delta - coupling))
        std = shape.noise_std(sensitivities, multiplier)
    padded = np.zeros(functional.MAX_TERMS)
    padded_std, padded_bounds = padded.copy(), padded.copy()
    padded_std[:terms], padded_bounds[:terms] = std, bounds
    hp = functional.hyperparams(
        servers=config.servers, functions=config.functions, observations=config.observations,
        terms=terms, iterations=config.iterations, noise_std=padded_std, clip=padded_bounds,
    )  # fmt: skip
    fields = {"epsilon_certified": math.inf, "delta": 0.0, "accountant": "none",
              "notion": "none (non-private)", "sigma": 0.0}  # fmt: skip
    total_variance = float(np.sum(std**2))
    if shape.private:
        if ledger is None:
            ledger = round_ledger(_functional_program(config, grid_norm), config.servers)
        release = ledger.only_release("a functional-estimation round")
        event = coupled_gaussian(round_event(ledger, hp))
        certified = spent(event, delta - coupling, accountant=Analytic(),
                          adjacency=ledger.adjacency)  # fmt: skip
        notion = "user-level (eps, delta)-DP of each server's release"
        fields = {
            "epsilon_certified": float(certified),
            "delta": delta,
            "accountant": shape.accountant + "; disjoint batches, so each function is in one "
            "release",
            "notion": f"{notion} ({float_model()})",
            "mechanism_model": float_model(),
            "sigma": float(std.max()),
            **shape.extra(sensitivities, std, config.epsilon, delta),
        }
        if exact:
            aggregator = release.aggregator
            params = BatchMeansParams(*(np.asarray(value, np.float64) for value in (
                np.asarray(hp.noise_std, np.float32), np.asarray(hp.clip, np.float32),
                config.functions, config.iterations, terms)))  # fmt: skip
            try:
                aggregator.check(params)
            except ValueError as error:
                raise UsageError(f"--noise discrete: {error}, or --noise float") from None
            total_variance *= aggregator.noise_variance_factor(params)
            fields.update({
                "accountant": f"{fields['accountant']}; on the integer grid, the continuous "
                "Gaussian the discrete noise is coupled to",
                "notion": notion, "mechanism_model": FUNCTIONAL_EXACT_MODEL,
                "delta_accountant": delta - coupling, "delta_coupling": coupling,
                "grid_norm": aggregator.grid_norm,
                "noise_inflation": aggregator.grid.noise_inflation(),
            })  # fmt: skip
    return hp, {
        **fields,
        "protected": "one function of one server (all its observations)",
        "trust_model": "each server a trusted curator of its own functions",
        "terms_used": terms,
        "noise_total_variance": total_variance,
    }


class FunctionalExperiment(MonteCarloExperiment):
    """Functional mean estimation."""

    outputs = (*MONTE_CARLO_OUTPUTS, Output("noise_free_error", "infos.noise_free_error"),
               Output("rounding_fallbacks", "infos.rounding_fallbacks", reduce="sum"))  # fmt: skip

    def __init__(self, config: declared.FunctionalEstimation) -> None:
        super().__init__(config)
        self._max = (config.servers, config.functions, config.observations)
        self._grid_norm = functional_grid_norm_for([config])

    def prepare(self, configs: list[declared.FunctionalEstimation]) -> None:
        """Size the program for the largest S, n and m of the grid, and choose one integer grid
        that holds every configuration's exact release."""
        self._max = tuple(max(getattr(c, name) for c in configs)
                          for name in ("servers", "functions", "observations"))  # fmt: skip
        arithmetic = {c.exact_noise for c in configs if NOISE_SHAPES[c.noise_shape].private}
        if len(arithmetic) > 1:
            raise UsageError(
                "--noise: one sweep runs one program, on the integer grid or with float32 noise, "
                "not both: sweep --noise discrete and --noise float apart"
            )
        self._grid_norm = functional_grid_norm_for(configs)

    @property
    def task(self) -> Task:
        return Task(estimation.Sites(self._max[0]))

    @property
    def algorithm(self) -> functional.FunctionalMean:
        _, functions, observations = self._max
        return functional.FunctionalMean(model_of(self.config), functions, observations,
                                         self.config.iterations, self._grid_norm)  # fmt: skip

    def identity(self) -> dict:
        return {"dataset": f"synthetic {self.config.basis} Sobolev functions"}

    def terms_of(self, config: declared.FunctionalEstimation) -> int:
        return config.terms if config.terms is not None else optimal_terms(config)

    def calibrate(self, config: declared.FunctionalEstimation):
        return calibrate_functional(config, self.terms_of(config), self.ledger(), self._grid_norm)

    def evaluate(self, outputs: dict, config: declared.FunctionalEstimation) -> dict:
        squared = np.asarray(outputs["error"], np.float64)  # already ||mu~ - mu*||^2
        # paired with the noise-free estimate of the same data: the price of privacy alone
        price = squared - np.asarray(outputs["noise_free_error"], np.float64)
        count = len(squared)
        return {
            "mse": float(squared.mean()),
            "mse_se": float(squared.std(ddof=1) / math.sqrt(count)),
            "privacy_mse": float(price.mean()),
            "privacy_mse_se": float(price.std(ddof=1) / math.sqrt(count)),
            "replications": count,
            "clipped_fraction": float(np.mean(outputs["clipped"])),
            "truncation_error": model_of(config).truncation(self.terms_of(config)),
            **functional_theory(config),
            # functions whose rounding fell back to zeros (outside the guarantee: not private)
            **({"rounding_fallbacks": int(outputs["rounding_fallbacks"])}
               if config.exact_noise else {}),
        }  # fmt: skip

    @staticmethod
    def summary(record: dict) -> str:
        grid = " on an integer grid" if record.get("grid_norm") else ""
        return (
            f"functional-estimation ({record['basis']}, r={record['terms_used']}, "
            f"{record['noise_shape']}{grid}): S={record['servers']} x n={record['functions']} "
            f"functions x m={record['observations']} points: L2 MSE {record['mse']:.4g} +- "
            f"{record['mse_se']:.2g} (truncation {record['truncation_error']:.2g}) over "
            f"{record['replications']} replications; theory rate {record['theory_rate']:.3g} "
            f"(constants omitted) | privacy: {guarantee_of(record).describe()} | "
            f"{timings(record)}"
        )
