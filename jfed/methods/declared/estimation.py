"""Private mean estimation in seven trust settings and private functional mean estimation.
Their experiments are in :mod:`jfed.methods.estimation`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

from jfed import catalog
from jfed.methods.config import Config
from jfed.methods.cost import FLOAT32, KEY, Cost, CostPlan
from jfed.methods.declared.common import replications
from jfed.methods.fields import EPSILON, OPEN_UNIT, POSITIVE, Range, integers, param
from jfed.methods.registry import Method, Metrics, register

ESTIMATION_PAPER = (
    "Yu, Optimal federated learning under differential privacy constraints (talk; Kent, Berrett "
    "and Yu 2024; Li, Tian, Feng and Yu 2024; Xue, Lin and Yu 2024)"
)
TWO_STAGE = catalog.TWO_STAGE_SETTINGS
ESTIMATION_NOISES = ("discrete", "float")
"""``--noise``: the arithmetic of a release's noise (the exact integer grid, or float32)."""
EXACT_MECHANISMS = ("laplace", "gaussian")
"""The ``--mechanism`` values that have an exact release on the grid."""


@dataclass(frozen=True)
class Estimation(Config):
    """Private mean estimation: S sites of n units each, in one of seven trust settings; a run is
    ``replications`` Monte Carlo draws of the estimate."""

    setting: str = param(
        "federated", "who is trusted and what is protected: none, local-item, local-user-small, "
        "local-user-large, central-item, central-user, federated (each site a trusted curator of "
        "its own units)", choices=catalog.ESTIMATION_SETTINGS,
    )  # fmt: skip
    sites: int = param(20, "sites S (users in the local user-level settings; servers in the "
                       "federated one)", unit="sites", range=integers(1, 100_000), tunable=True,
                       group="data")  # fmt: skip
    units: int = param(50, "units n per site", unit="units", range=integers(1, 10**7),
                       tunable=True, group="data")  # fmt: skip
    data: str = param("rademacher", "data model: rademacher (values +-1, the worst case of "
                      "data in [-1, 1]) or gaussian (N(mu, 1), sub-Gaussian)",
                      choices=catalog.ESTIMATION_DATA, group="data")  # fmt: skip
    mean: float = param(0.3, "true mean mu", range=Range(-1.0, 1.0), tunable=True, group="data")
    epsilon: float = param(1.0, "eps of each release (the setting says whose data and who "
                           "sees it)", range=EPSILON, group="privacy")  # fmt: skip
    mechanism: str = param("laplace", "noise: laplace (pure eps) or gaussian (analytic "
                           "calibration, (eps, delta))", choices=catalog.ESTIMATION_MECHANISMS,
                           group="privacy")  # fmt: skip
    noise: str | None = param(
        None, "the noise's arithmetic: discrete (values rounded to an integer grid, an integer "
        "sum, exact discrete Laplace or Gaussian noise: the guarantee holds for the program as it "
        "runs) or "
        "float (float32 noise: the ideal real-valued mechanism, floating-point sampling not "
        "modelled)", kind=str, choices=ESTIMATION_NOISES, group="privacy",
        default_text="discrete",
        requires=(lambda c: c.noise != "discrete" or c.mechanism in EXACT_MECHANISMS,
                  "as discrete only with --mechanism laplace or gaussian"),
    )  # fmt: skip
    delta: float | None = param(None, "delta of each release", kind=float, range=OPEN_UNIT,
                                group="privacy", default_text="1e-5",
                                requires=(lambda c: c.mechanism == "gaussian",
                                          "only with --mechanism gaussian"))  # fmt: skip
    value_clip: float | None = param(
        None, "c: a unit's value (item-level) or a site's mean (user-level) is clipped to "
        "[-c, c]", kind=float, range=POSITIVE, group="privacy",
        default_text="1 for rademacher data; gaussian: 1 + sqrt(2 ln(20 S n)) per unit, "
        "1 + 3 / sqrt(n) per site mean",
    )  # fmt: skip
    replications: int = replications(400)

    @property
    def exact_noise(self) -> bool:
        """Whether the releases run on the integer grid (``--noise``, or its default)."""
        if self.noise is None:
            return self.mechanism in EXACT_MECHANISMS
        return self.noise == "discrete"

    def check(self) -> Self:
        super().check()
        if self.setting in TWO_STAGE and self.sites < 2:
            raise ValueError(
                f"expected --sites >= 2 for --setting {self.setting} (half the sites locate the "
                f"mean), got --sites={self.sites}"
            )
        return self


@dataclass(frozen=True)
class FunctionalEstimation(Config):
    """Private functional mean estimation: S servers, n functions each, m noisy observations
    per function; a basis expansion fitted by Gaussian-perturbed SGD at every server."""

    servers: int = param(4, "servers S", unit="servers", range=integers(1, 10_000),
                         tunable=True, group="data")  # fmt: skip
    functions: int = param(100, "functions n per server", unit="functions",
                           range=integers(1, 10**6), tunable=True, group="data")  # fmt: skip
    observations: int = param(20, "observations m per function", unit="points",
                              range=integers(1, 10**5), tunable=True, group="data")  # fmt: skip
    smoothness: float = param(2.0, "Sobolev smoothness alpha of the mean and of the random "
                              "functions", range=Range(0.5, 10.0), group="data")  # fmt: skip
    basis: str = param("fourier", "basis Phi_r: fourier or legendre (orthonormal on [0, 1])",
                       choices=catalog.FUNCTIONAL_BASES)  # fmt: skip
    terms: int | None = param(
        None, "basis terms r", kind=int, unit="terms", range=integers(1, 32), tunable=True,
        default_text="the rate-optimal r of the spec (S n)^(1/2a) ^ (S n m)^(1/(2a+1)) ^ "
        "(S n^2 eps^2)^(1/2a) ^ (S n^2 m eps^2)^(1/(2a+2)), at most 32",
    )  # fmt: skip
    iterations: int = param(1, "SGD iterations T per server (disjoint batches of n / T "
                            "functions)", unit="iterations", range=integers(1, 1000))  # fmt: skip
    epsilon: float = param(1.0, "eps of each server's release (user-level: one function)",
                           range=EPSILON, group="privacy")  # fmt: skip
    delta: float | None = param(None, "delta of each server's release", kind=float,
                                range=OPEN_UNIT, group="privacy", default_text="1e-5")  # fmt: skip
    noise_shape: str = param("anisotropic", "Gaussian noise: anisotropic (the seed's shape, "
                           "sigma_l^2 ~ Delta_l ||Delta||_1), isotropic (one sigma, L2 "
                           "sensitivity), both scaled by the analytic Gaussian; or none",
                           choices=catalog.FUNCTIONAL_NOISE_SHAPES,
                           group="privacy")  # fmt: skip
    noise: str | None = param(
        None, "the noise's arithmetic: discrete (each function's whitened projection rounded to "
        "an integer grid, integer batch sums, exact discrete Gaussian noise: the guarantee holds "
        "for the program as it runs) or float (float32 noise: the ideal real-valued mechanism, "
        "floating-point sampling not modelled)", kind=str, choices=ESTIMATION_NOISES,
        group="privacy", default_text="discrete",
        requires=(lambda c: c.noise_shape != "none",
                  "only with a private --noise-shape (none adds no noise)"),
    )  # fmt: skip
    replications: int = replications(100)

    @property
    def exact_noise(self) -> bool:
        """Whether the servers' releases run on the integer grid (``--noise``, or its default;
        never without noise)."""
        return self.noise_shape != "none" and self.noise != "float"

    def check(self) -> Self:
        super().check()
        if self.iterations > self.functions:
            raise ValueError(
                f"expected --iterations in [1, {self.functions}] (at most --functions), got "
                f"--iterations={self.iterations}"
            )
        return self


# ------------------------------------------------------------------------------------- costs
# (jfed.methods.cost) measured on CPU: a site whose units are drawn as one sum (a binomial or a
# normal) took 370 ns, a unit drawn on its own 30 ns, an observation of one basis term 32 ns

PER_UNIT_BYTES = 2 * KEY + 4 * FLOAT32  # a unit's data and noise keys, value, noise, mask, clip
SITE_OPERATIONS = 4000
UNIT_OPERATIONS = 300
TERM_OPERATIONS = 300
TRUTH_TERMS = 64  # basis terms of the functional model (jfed.algorithms.functional.TRUTH_TERMS)
MAX_TERMS = 32  # coordinates of a function's projection (jfed.algorithms.functional.MAX_TERMS)


def _per_unit(config: Estimation) -> bool:
    """Whether the estimation program draws a site's units one by one (mirrors
    ``jfed.algorithms.estimation.MeanEstimation.per_unit``)."""
    if config.setting == "local-item":
        return True
    return config.data == "gaussian" and config.setting in ("central-item", "federated")


def estimation_cost(config: Estimation, plan: CostPlan) -> Cost:
    """Units drawn one by one (item-level clipping or noise) hold ``[chunk, n]`` values, keys
    and masks per site; else a site is a few scalars. Work: ``replications S`` sites (each
    ``n`` units, where drawn one by one)."""
    sites = min(plan.chunk, config.sites)
    if not _per_unit(config):
        work = config.replications * config.sites * SITE_OPERATIONS
        return Cost(PER_UNIT_BYTES * sites, work, ("replications", "sites"))
    memory = PER_UNIT_BYTES * sites * config.units
    work = config.replications * config.sites * config.units * UNIT_OPERATIONS
    return Cost(memory, work, ("units", "sites", "replications"))


def functional_cost(config: FunctionalEstimation, plan: CostPlan) -> Cost:
    """Each function's basis matrix ``[m, 64]`` over ``n`` functions and a chunk of servers:
    ``[chunk, n, m, 64]``, and its projection with, on the grid, its rounded and scaled copies
    (``3 x 32`` numbers). Work: ``replications S n m 64`` terms."""
    per_server = config.functions * (config.observations * (TRUTH_TERMS + 2) + 3 * MAX_TERMS)
    memory = FLOAT32 * min(plan.chunk, config.servers) * per_server
    work = config.replications * config.servers * per_server * TERM_OPERATIONS
    return Cost(memory, work, ("observations", "functions", "servers", "replications"))


MONTE_CARLO = Metrics(selection=None, maximize=False, report="mse")
"""Nothing to choose among (a sweep reports every grid point: a design grid); reported as the
mean squared error over the replications."""


register(Method(
    "estimation", Estimation,
    "private mean estimation across S sites of n units, seven trust settings",
    "eps-DP (Laplace) or (eps, delta)-DP (Gaussian); local or central, of one unit or of "
    "one site's units: --setting says which (every record names it)",
    "one unit (item-level) or all n units of one site (user-level), per --setting",
    "per --setting: nobody, one curator, or each site for its own units",
    "jfed.methods.estimation:EstimationExperiment",
    ESTIMATION_PAPER, "mean estimation (the talk's table of minimax rates)",
    cost=estimation_cost, metrics=MONTE_CARLO,
))  # fmt: skip
register(Method(
    "functional-estimation", FunctionalEstimation,
    "private functional mean estimation: basis expansion, Gaussian-perturbed SGD per server",
    "(eps, delta)-DP of each server's release, user-level (one function with its m "
    "observations)", "one function of one server, with all its observations",
    "each server a trusted curator of its own functions; the aggregator sees releases",
    "jfed.methods.estimation:FunctionalExperiment",
    ESTIMATION_PAPER, "private distributed functional mean estimation (Xue, Lin and Yu)",
    cost=functional_cost, metrics=MONTE_CARLO,
))  # fmt: skip
