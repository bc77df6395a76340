"""Private federated estimation as experiments: the mean across S sites of n units in seven trust
settings (:mod:`jfed.algorithms.estimation`), and the functional mean across S servers
(:mod:`jfed.algorithms.functional`). A run is ``replications`` Monte Carlo draws of the estimate
(one engine round each, fresh data and noise); its record carries the mean squared error with its
standard error, the bias with its standard error, and the rate the theory states for the
configuration (constants omitted).

A sweep over sites, units and eps is one compiled program per setting: the program holds the
largest S (and, where units are drawn one by one, the largest n) of the grid and masks the rest,
so every grid point is a lane of the same executable.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from jfed.algorithms import estimation, functional
from jfed.methods import declared
from jfed.methods.experiment import Experiment, Output, guarantee_of
from jfed.privacy import Analytic, Basic, spent
from jfed.privacy.gaussian import analytic_gaussian_noise
from jfed.privacy.laplace import laplace_scale
from jfed.privacy.mechanisms import AnisotropicGaussianMechanism, GaussianMechanism

# a site's mean and a located center are trusted within this many standard deviations; the
# rare site beyond is clipped (the record's clipped_fraction), which costs a little bias and no
# privacy (the noise is calibrated to the clipping interval whatever its width)
LOCATION_SPREAD = 3.0

SETTING_NOTIONS = {
    "none": ("none (non-private)", "nothing", "everyone sees the raw data"),
    "local-item": ("local item-level eps-DP", "one unit's value",
                   "nobody: each unit randomizes its own value"),
    "local-user-small": ("local user-level eps-DP", "all n units of one user (site)",
                         "nobody: each user randomizes its own mean"),
    "local-user-large": ("local user-level eps-DP", "all n units of one user (site)",
                         "nobody: each user randomizes one bit or its clipped mean"),
    "central-item": ("central item-level eps-DP", "one unit's value",
                     "one curator sees every unit; the release is private"),
    "central-user": ("central user-level eps-DP", "all n units of one site",
                     "one curator sees every unit; the release is private"),
    "federated": ("item-level eps-DP of each site's release", "one unit of one site",
                  "each site is the trusted curator of its own units only"),
}  # fmt: skip


def default_clip(config: declared.Estimation) -> float:
    """c of ``config``: 1 for ±1 data; Gaussian data: a unit's value is clipped far in its tails
    (item-level), a site's mean just past [-1, 1] (user-level)."""
    if config.value_clip is not None:
        return config.value_clip
    if config.data == "rademacher":
        return 1.0
    if config.setting in ("local-user-small", "local-user-large", "central-user"):
        return 1.0 + LOCATION_SPREAD / math.sqrt(config.units)
    # a unit is clipped past the largest of S n normal draws (rarely reached)
    return 1.0 + math.sqrt(2.0 * math.log(20.0 * config.sites * config.units))


def noise_scale(sensitivity: float, epsilon: float, delta: float, mechanism: str) -> float:
    """Laplace ``b`` (pure eps) or the analytic Gaussian std (Balle and Wang) of one release."""
    if mechanism == "laplace":
        return laplace_scale(sensitivity, epsilon)
    return float(analytic_gaussian_noise(sensitivity, epsilon, delta))


def noise_variance(scale: float, mechanism: str) -> float:
    return 2.0 * scale**2 if mechanism == "laplace" else scale**2


def difference_std(units: int, center_std: float) -> float:
    """The standard deviation of a site's mean (variance at most 1/n) minus the located center
    (``center_std``): their variances add, the locating sites being others (central-user: the
    center holds 1/S of the site's own mean, a positive correlation, so this still bounds it).
    The clipping half-width is ``LOCATION_SPREAD`` of these."""
    return math.sqrt(1.0 / units + center_std**2)


def calibrate_mean(config: declared.Estimation) -> tuple[estimation.Hyperparams, dict]:
    """The setting's noise, clipping and search parameters for ``config``, and its privacy
    fields: every release is calibrated to (eps, delta) of the setting's neighbouring relation
    (the central user-level curator splits eps and delta in two halves, basic composition)."""
    S, n, eps = config.sites, config.units, config.epsilon
    mechanism, setting = config.mechanism, config.setting
    delta = config.delta if mechanism == "gaussian" else 0.0
    clip = default_clip(config)
    tau = LOCATION_SPREAD
    first = second = width = 0.0
    stages = 0

    releases = []  # (scale, sensitivity) of each release, for the events the run emits

    def scale(sensitivity, share=1.0):
        releases.append((noise_scale(sensitivity, eps * share, delta * share, mechanism),
                         sensitivity))  # fmt: skip
        return releases[-1][0]

    if setting == "local-item":
        first = scale(2.0 * clip)
    elif setting == "central-item":
        first = scale(2.0 * clip / (S * n))
    elif setting == "federated":
        first = scale(2.0 * clip / n)
    elif setting == "local-user-small":
        first = scale(2.0 * clip)
        center_std = math.sqrt((noise_variance(first, mechanism) + 1.0 / n) / (S // 2))
        width = tau * difference_std(n, center_std)
        second = scale(min(2.0 * width, 2.0 * clip))
    elif setting == "central-user":
        first = scale(2.0 * clip / S, 0.5)
        center_std = math.sqrt(noise_variance(first, mechanism) + 1.0 / (S * n))
        width = tau * difference_std(n, center_std)
        second = scale(min(2.0 * width, 2.0 * clip) / S, 0.5)
    elif setting == "local-user-large":
        width = tau / math.sqrt(n)  # a site mean's spread
        # halve (to 3/4) until the interval is 4 spreads wide: every site then votes alike
        wanted = math.log(2.0 * clip / (4.0 * width)) / math.log(4.0 / 3.0)
        stages = int(min(max(math.ceil(wanted), 0), S // 2))
        final = 2.0 * clip * 0.75**stages + 2.0 * width
        second = scale(min(final, 2.0 * clip))
    truthful = 1.0 / (1.0 + math.exp(-eps))  # e^eps / (1 + e^eps)
    hp = estimation.hyperparams(
        sites=S, units=n, mean=config.mean, clip=clip, first_noise=first, second_noise=second,
        width=width, stages=stages, truthful=truthful,
    )  # fmt: skip
    # the variance the final release's noise adds to the estimate (the located center's error
    # and the search's wrong turns enter only through clipping, not counted here)
    estimate_noise = {
        "none": 0.0,
        "local-item": noise_variance(first, mechanism) / (S * n),
        "central-item": noise_variance(first, mechanism),
        "federated": noise_variance(first, mechanism) / S,
        "local-user-small": noise_variance(second, mechanism) / (S - S // 2),
        "local-user-large": noise_variance(second, mechanism) / (S - S // 2),
        "central-user": noise_variance(second, mechanism),
    }[setting]
    notion, protected, trust = SETTING_NOTIONS[setting]
    private = setting != "none"
    if not private:
        accountant = "none"
    elif mechanism == "laplace":
        accountant = "Laplace mechanism (pure eps)"
    else:
        accountant = "analytic Gaussian (Balle and Wang)"
    if setting == "local-user-large":
        accountant += "; randomized response (pure eps) for the search bits"
    if setting == "central-user":
        accountant += "; two releases at eps/2 (and delta/2), basic composition"
    if setting.startswith("local-user"):
        accountant += "; each user releases once"
    if mechanism == "gaussian" and private:
        notion = notion.replace("eps-DP", "(eps, delta)-DP")
    certified = math.inf
    if private:
        event = mean_event(setting, mechanism, releases, stages, eps)
        certified = spent(event, delta, accountant=Basic(), adjacency="bounded")
    return hp, {
        "epsilon_certified": certified,
        "delta": delta,
        "accountant": accountant,
        "notion": notion,
        "protected": protected,
        "trust_model": trust,
        "sigma": max(first, second),
        "clip_used": clip,
        "search_stages": stages,
        "noise_variance": estimate_noise,
    }


def mean_event(setting: str, mechanism: str, releases: list, stages: int, epsilon: float):
    """The event of what one protected unit's data takes part in, in ``setting``: one release
    (item-level, federated), the two halves of the central user-level curator (composed), or,
    in the local user-level settings, the one release each user makes (the locating stage's or
    the final one: disjoint users, parallel composition). ``releases``: (scale, sensitivity) of
    each release in order."""
    import dp_accounting

    from jfed.privacy import ApproximateDpEvent, ParallelDpEvent

    kind = dp_accounting.LaplaceDpEvent if mechanism == "laplace" else dp_accounting.GaussianDpEvent
    made = [kind(scale / sensitivity) for scale, sensitivity in releases]
    if setting == "central-user":
        return dp_accounting.ComposedDpEvent(made)
    if setting == "local-user-small":
        return ParallelDpEvent(tuple(made))
    if setting == "local-user-large":
        # a search bit: randomized response, truthful with probability e^eps / (1 + e^eps),
        # eps-DP by its closed form (stated exactly: its noise parameter underflows at huge eps)
        vote = ApproximateDpEvent(epsilon, 0.0)
        return ParallelDpEvent((vote, *made)) if stages else made[0]
    return made[0]


def theory_rate(setting: str, sites: float, units: float, epsilon: float) -> float:
    """The minimax rate of the spec's table for ``setting`` (constants omitted)."""
    S, n, e2 = sites, units, epsilon**2
    return {
        "none": 1.0 / (S * n),
        "local-item": 1.0 / (S * n * e2),
        "local-user-small": 1.0 / (S * n * e2),
        "local-user-large": math.exp(-S * e2),
        "central-item": max(1.0 / (S * n), 1.0 / (S**2 * n**2 * e2)),
        "central-user": max(1.0 / (S * n), 1.0 / (S**2 * n * e2)),
        "federated": max(1.0 / (S * n), 1.0 / (S * n**2 * e2)),
    }[setting]


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

    if config.setting != "local-user-large" or config.data != "rademacher":
        raise ValueError("the search's law is computed for local-user-large on rademacher data")
    if config.mechanism != "laplace":
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
    variance = 1.0 - config.mean**2 if config.data == "rademacher" else 1.0
    sites = config.sites
    if config.setting in ("local-user-small", "local-user-large"):
        sites -= config.sites // 2
    return variance / (sites * config.units)


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
    grid point (``selection_metric`` None)."""

    selection_metric = None
    selection_maximize = False
    report_metric = "mse"

    @property
    def rounds(self) -> int:
        return self.config.replications

    outputs = MONTE_CARLO_OUTPUTS


class EstimationExperiment(MonteCarloExperiment):
    """Mean estimation in one of the seven settings."""

    def __init__(self, config: declared.Estimation) -> None:
        super().__init__(config)
        self._max_sites, self._max_units = config.sites, config.units

    def prepare(self, configs: list[declared.Estimation]) -> None:
        """Size the program for the largest S and n of the grid (the rest are masked)."""
        self._max_sites = max(c.sites for c in configs)
        self._max_units = max(c.units for c in configs)

    @property
    def task(self) -> Task:
        return Task(estimation.Sites(self._max_sites))

    @property
    def algorithm(self) -> estimation.MeanEstimation:
        program = estimation.MeanEstimation(
            self.config.setting, self.config.mechanism, self.config.data, 1
        )
        # padded to the grid's largest n only where units are drawn one by one
        return (
            dataclasses.replace(program, max_units=self._max_units) if program.per_unit else program
        )

    def identity(self) -> dict:
        return {"dataset": f"synthetic {self.config.data}"}

    def calibrate(self, config: declared.Estimation):
        return calibrate_mean(config)

    def evaluate(self, outputs: dict, config: declared.Estimation) -> dict:
        result = monte_carlo(outputs["error"])
        sampling = sampling_variance(config)
        return {
            **result,
            "sampling_variance": sampling,
            "privacy_mse": result["mse"] - sampling,
            "clipped_fraction": float(np.mean(outputs["clipped"])),
            "theory_rate": theory_rate(config.setting, config.sites, config.units, config.epsilon),
        }

    @staticmethod
    def summary(record: dict) -> str:
        return (
            f"estimation ({record['setting']}, {record['mechanism']}, {record['dataset']} data, "
            f"mu={record['mean']:g}): S={record['sites']} sites x n={record['units']} units, "
            f"MSE {record['mse']:.4g} +- {record['mse_se']:.2g} (bias {record['bias']:.2g} +- "
            f"{record['bias_se']:.2g}) over {record['replications']} replications; theory rate "
            f"{record['theory_rate']:.3g} (constants omitted) | privacy: "
            f"{guarantee_of(record).describe()} | {record['run_seconds']:.2f} s run, "
            f"{record['compile_seconds']:.2f} s compile"
        )


# ------------------------------------------------------------------ functional mean estimation


def optimal_terms(config: declared.FunctionalEstimation) -> int:
    """The spec's rate-optimal r for S servers, n functions, m observations, eps (at most the
    basis limit :data:`functional.MAX_TERMS`)."""
    a = config.smoothness
    S, n, m = config.servers, config.functions, config.observations
    e2 = config.epsilon**2 if config.noise_shape != "none" else math.inf
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
    if config.noise_shape != "none":
        e2 = config.epsilon**2
        terms["theory_private"] = 1.0 / (S * n**2 * e2)
        terms["theory_private_sparse"] = (1.0 / (S * n**2 * m * e2)) ** (2 * a / (2 * a + 2))
    return {**terms, "theory_rate": max(terms.values())}


def calibrate_functional(config: declared.FunctionalEstimation, terms: int):
    """Per-coordinate clipping bounds of a function's projection, the noise of each server's
    batch means, and the privacy fields (certified exactly: the whitened mechanism is an
    isotropic Gaussian, analytic calibration)."""
    model = functional.Model(config.basis, config.smoothness)
    bounds = model.clip_bounds(terms, config.observations, config.servers * config.functions)
    batch = config.functions // config.iterations
    sensitivities = 2.0 * bounds / batch  # replace one function of a batch
    if config.noise_shape == "none":
        std = np.zeros(terms)
        fields = {"epsilon_certified": math.inf, "delta": 0.0, "accountant": "none",
                  "notion": "none (non-private)", "sigma": 0.0}  # fmt: skip
    else:
        multiplier = float(analytic_gaussian_noise(1.0, config.epsilon, config.delta))
        if config.noise_shape == "anisotropic":
            # the seed's shape sigma_l ~ sqrt(Delta_l ||Delta||_1) (it minimises the total
            # variance at a given whitened sensitivity), scaled exactly: the seed's constant
            # sqrt(4 ln(2/delta)) / eps spends more noise than (eps, delta) needs
            shape = np.sqrt(sensitivities * sensitivities.sum())
            mechanism = AnisotropicGaussianMechanism(
                tuple(map(float, sensitivities)), tuple(map(float, multiplier * shape))
            )
            std = np.asarray(mechanism.noise_std)
            seed = AnisotropicGaussianMechanism.calibrate(
                sensitivities, config.epsilon, config.delta
            )
            extra = {"seed_formula_noise_factor": float(seed.noise_std[0] / std[0]),
                     "seed_formula_epsilon": seed.epsilon(config.delta)}  # fmt: skip
            accountant = ("anisotropic Gaussian: the seed's shape sigma_l^2 ~ Delta_l ||Delta||_1, "
                          "scaled by the analytic Gaussian of the whitened mechanism")  # fmt: skip
            certified = spent(mechanism.dp_event(), config.delta, accountant=Analytic(),
                              adjacency="bounded")  # fmt: skip
        else:
            sensitivity = float(np.linalg.norm(sensitivities))
            gaussian = GaussianMechanism(sensitivity, multiplier * sensitivity)
            std = np.full(terms, gaussian.noise_std)
            extra = {}
            accountant = "analytic Gaussian (Balle and Wang), L2 sensitivity"
            certified = spent(gaussian.dp_event(), config.delta, accountant=Analytic(),
                              adjacency="bounded")  # fmt: skip
        fields = {
            "epsilon_certified": float(certified),
            "delta": config.delta,
            "accountant": accountant + "; disjoint batches, so each function is in one release",
            "notion": "user-level (eps, delta)-DP of each server's release",
            "sigma": float(std.max()),
            **extra,
        }
    padded = np.zeros(functional.MAX_TERMS)
    padded_std, padded_bounds = padded.copy(), padded.copy()
    padded_std[:terms], padded_bounds[:terms] = std, bounds
    hp = functional.hyperparams(
        servers=config.servers, functions=config.functions, observations=config.observations,
        terms=terms, iterations=config.iterations, noise_std=padded_std, clip=padded_bounds,
    )  # fmt: skip
    return hp, {
        **fields,
        "protected": "one function of one server (all its observations)",
        "trust_model": "each server a trusted curator of its own functions",
        "terms_used": terms,
        "noise_total_variance": float(np.sum(std**2)),
    }


class FunctionalExperiment(MonteCarloExperiment):
    """Functional mean estimation."""

    outputs = (*MONTE_CARLO_OUTPUTS, Output("noise_free_error", "infos.noise_free_error"))

    def __init__(self, config: declared.FunctionalEstimation) -> None:
        super().__init__(config)
        self._max = (config.servers, config.functions, config.observations)

    def prepare(self, configs: list[declared.FunctionalEstimation]) -> None:
        self._max = tuple(max(getattr(c, name) for c in configs)
                          for name in ("servers", "functions", "observations"))  # fmt: skip

    @property
    def task(self) -> Task:
        return Task(estimation.Sites(self._max[0]))

    @property
    def algorithm(self) -> functional.FunctionalMean:
        _, functions, observations = self._max
        return functional.FunctionalMean(
            functional.Model(self.config.basis, self.config.smoothness), functions,
            observations, self.config.iterations,
        )  # fmt: skip

    def identity(self) -> dict:
        return {"dataset": f"synthetic {self.config.basis} Sobolev functions"}

    def terms_of(self, config: declared.FunctionalEstimation) -> int:
        return config.terms if config.terms is not None else optimal_terms(config)

    def calibrate(self, config: declared.FunctionalEstimation):
        return calibrate_functional(config, self.terms_of(config))

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
            "truncation_error": functional.Model(config.basis, config.smoothness).truncation(
                self.terms_of(config)
            ),
            **functional_theory(config),
        }

    @staticmethod
    def summary(record: dict) -> str:
        return (
            f"functional-estimation ({record['basis']}, r={record['terms_used']}, "
            f"{record['noise_shape']}): S={record['servers']} x n={record['functions']} "
            f"functions x m={record['observations']} points: L2 MSE {record['mse']:.4g} +- "
            f"{record['mse_se']:.2g} (truncation {record['truncation_error']:.2g}) over "
            f"{record['replications']} replications; theory rate {record['theory_rate']:.3g} "
            f"(constants omitted) | privacy: {guarantee_of(record).describe()} | "
            f"{record['run_seconds']:.2f} s run, {record['compile_seconds']:.2f} s compile"
        )
