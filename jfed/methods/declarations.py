"""Every method jfed runs, declared once: its configuration (a frozen dataclass of typed fields),
the paper and algorithm it comes from, its privacy notion and trust model, and where its experiment
(calibration, program, evaluation) lives.

``jfed run``, ``jfed sweep``, ``jfed methods``, the run records, the resume key of a sweep and
the README's flag tables are all derived from :data:`METHODS`; no other module branches on a
method's name. Importing this module loads no numerical package, so the command line checks its
arguments against these declarations before JAX starts.

    from jfed.methods import ModulatedIterative
    config = ModulatedIterative(dataset="co2", epsilon=2.0, rounds=20, step_scale=0.5)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from jfed import catalog
from jfed.methods.fields import (
    EPSILON,
    MAX_CLIENTS,
    MAX_ROUNDS,
    MAX_SEED,
    NONNEGATIVE,
    OPEN_UNIT,
    POSITIVE,
    UNIT,
    Range,
    check_config,
    integers,
    param,
)

MODULATED_PAPER = (
    "Modulated learning for private and distributed regression with just a single sample per "
    "client device"
)
SILO_PAPER = (
    "Lowy and Razaviyayn, Private Federated Learning Without a Trusted Server: Optimal "
    "Algorithms for Convex Losses"
)
MAX_DIM = 100_000
# one help text per shared name, so that a name means one thing across methods
GRADIENT_CLIP = "clip norm of each gradient (DP-SGD: a client's, G; silos: a record's, L)"
RIDGE = "ridge (L2) regulariser lambda"
CLIENTS = "number of clients n (procedural regression clients; LDP-FL: they share the images)"
DATA_SEED = "seed of the data's split among silos or clients and of its test split"
LEARNING_RATE = "SGD learning rate (DP-SGD: the server's step; LDP-FL: each client's local step)"
BATCH = (
    "minibatch size: records per silo per round K (Local SGD: local steps), LDP-FL: images per "
    "local step B (at most a client's images)"
)


# ---------------------------------------------------------------------------- shared field groups


@dataclass(frozen=True)
class Config:
    """What every method's configuration has: the run seed. Subclasses add their fields."""

    seed: int = param(0, "run seed (client draws, noise, sampling)", range=integers(0, MAX_SEED),
                      group="run")  # fmt: skip

    method: ClassVar[str] = ""

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)

    def check(self) -> Config:
        """Every field in its declared range and given only where it applies (``ValueError``
        naming the flag otherwise); returns ``self``."""
        check_config(self)
        return self


@dataclass(frozen=True)
class RegressionData(Config):
    """A regression task: one of the real tasks, or procedural clients generated on the device."""

    dataset: str = param(
        catalog.DEFAULT_REGRESSION_DATASET,
        "real task, one record per client (statsmodels, ships offline; see `jfed datasets`)",
        choices=tuple(catalog.REGRESSION_DATASETS), group="data",
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


@dataclass(frozen=True)
class LocalPrivacy(Config):
    """(eps, delta) of the whole run and the accountant that calibrates the noise to it."""

    epsilon: float = param(1.0, "target eps of the whole run", range=EPSILON, group="privacy")
    delta: float = param(1e-5, "target delta of the whole run", range=OPEN_UNIT, group="privacy")
    accountant: str = param(
        "zcdp", "accountant that calibrates the noise (zcdp: Gaussian zCDP, converted exactly)",
        choices=catalog.ROUNDS_ACCOUNTANTS, group="privacy",
    )  # fmt: skip


@dataclass(frozen=True)
class Rounds(Config):
    rounds: int = param(10, "rounds T (releases per client)", unit="rounds",
                        range=integers(1, MAX_ROUNDS), group="run")  # fmt: skip


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
    )  # fmt: skip
    radius: float = param(10.0, "projection radius B of the parameter", unit="parameter norm",
                          range=POSITIVE, tunable=True)  # fmt: skip

    def check(self) -> Config:
        dimension = self.dimension
        if dimension is not None and not 1 <= self.directions <= dimension:
            raise ValueError(
                f"expected --directions in [1, {dimension}] (the data's dimension d), "
                f"got --directions={self.directions}"
            )
        return super().check()


# --------------------------------------------------------------------------------- the methods


@dataclass(frozen=True)
class ModulatedIterative(Modulated, Rounds):
    """Modulated learning, iterative estimator: T rounds of debiased modulated gradients."""

    step_scale: float = param(0.8, "step scale c of the step size c / (L sqrt(t))",
                              range=POSITIVE, tunable=True)  # fmt: skip
    step_floor: float = param(1e-3, "smallest step size", range=POSITIVE, tunable=True)

    method: ClassVar[str] = "modulated-iterative"


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

    method: ClassVar[str] = "modulated-one-shot"


@dataclass(frozen=True)
class DPSGD(RegressionData, LocalPrivacy, Rounds):
    """DP-SGD FedAvg with one sample per client: clipped gradients, Gaussian noise per client."""

    gradient_clip: float = param(2.0, GRADIENT_CLIP, unit="gradient norm", range=POSITIVE,
                                 tunable=True)  # fmt: skip
    learning_rate: float = param(0.1, LEARNING_RATE, range=POSITIVE, tunable=True)
    radius: float = param(10.0, "projection radius B of the parameter", unit="parameter norm",
                          range=POSITIVE, tunable=True)  # fmt: skip

    method: ClassVar[str] = "dpsgd"


@dataclass(frozen=True)
class OLS(RegressionData):
    """Non-private least squares on the same clients: the reference every private method is
    compared with."""

    method: ClassVar[str] = "ols"


@dataclass(frozen=True)
class SiloData(Config):
    """Data silos: each silo holds many records of many people."""

    dataset: str = param(
        catalog.DEFAULT_SILO_DATASET,
        "silo data set: digits-evenodd, digits-bylabel, <regression task>-sorted, synthetic",
        choices=catalog.SILO_DATASETS, group="data",
    )  # fmt: skip
    silos: int | None = param(
        None, "number of silos N", kind=int, unit="silos", range=integers(1, 10**6),
        default_text="the data set's own",
        requires=(lambda c: not c.dataset.startswith("digits"),
                  "only to the -sorted and synthetic silo data sets (digits fixes its silos)"),
        group="data",
    )  # fmt: skip
    mixing: float = param(0.0, "p: 0 heterogeneous silos .. 1 iid", range=UNIT, group="data")
    data_seed: int = param(0, DATA_SEED,
                           range=integers(0, MAX_SEED), group="data")  # fmt: skip

    @property
    def dataset_label(self) -> str:
        return self.dataset


@dataclass(frozen=True)
class SiloTraining(SiloData):
    """Minibatch SGD across silos: the fields every silo algorithm has."""

    rounds: int = param(25, "communication rounds R", unit="rounds",
                        range=integers(1, MAX_ROUNDS), group="run")  # fmt: skip
    batch: int = param(10, BATCH,
                       unit="records", range=integers(1, 10**7))  # fmt: skip
    step_size: float = param(1.0, "step size eta (AC-SA: gamma)", range=POSITIVE, tunable=True)
    gradient_clip: float = param(1.0, GRADIENT_CLIP, unit="gradient norm", range=POSITIVE,
                                 tunable=True)  # fmt: skip
    radius: float = param(10.0, "projection radius B of the parameter", unit="parameter norm",
                          range=POSITIVE, tunable=True)  # fmt: skip
    availability: str = param("all", "which silos take part in a round",
                              choices=("all", "fixed", "bernoulli"))  # fmt: skip
    available: int | None = param(
        None, "silos taking part per round M (fixed) or expected (bernoulli)", kind=int,
        unit="silos", range=integers(0, 10**6), default_text="all",
        requires=(lambda c: c.availability != "all", "only with --availability fixed or bernoulli"),
    )  # fmt: skip
    average_last: int = param(0, "average the last this many iterates (0: all)", unit="rounds",
                              range=integers(0, MAX_ROUNDS))  # fmt: skip


SAMPLINGS = ("with-replacement", "without-replacement", "poisson", "one-pass")


@dataclass(frozen=True)
class SiloPrivacy(SiloTraining):
    """Inter-silo record-level DP: each silo's transcript is (eps, delta)-DP in its records."""

    epsilon: float = param(1.0, "target eps of each silo", range=EPSILON, group="privacy")
    delta: float | None = param(
        None, "target delta of each silo", kind=float, range=OPEN_UNIT,
        default_text="1 / n_min^2, n_min the smallest silo", group="privacy",
    )  # fmt: skip


@dataclass(frozen=True)
class Calibrated(SiloPrivacy):
    calibration: str = param(
        "exact", "noise calibration: exact (PLD, Poisson sampling) or the paper's formulas",
        choices=catalog.SILO_CALIBRATIONS, group="privacy",
    )  # fmt: skip
    sampling: str | None = param(
        None, "how a silo draws its minibatch", kind=str, choices=SAMPLINGS,
        default_text="poisson with --calibration exact, else with-replacement",
    )  # fmt: skip


@dataclass(frozen=True)
class NoisyMBSGD(Calibrated):
    """ISRL-DP Noisy MB-SGD (Algorithm 2 of the silo paper)."""

    method: ClassVar[str] = "noisy-mbsgd"


@dataclass(frozen=True)
class AcceleratedMBSGD(Calibrated):
    """Accelerated (AC-SA) Noisy MB-SGD (Algorithm 1 of the silo paper): one pass, ERM, or
    multi-stage restarts."""

    sampling: str | None = param(
        None, "how a silo draws its minibatch", kind=str, choices=SAMPLINGS,
        default_text="one-pass",
    )  # fmt: skip
    ridge: float = param(0.0, RIDGE, range=NONNEGATIVE, tunable=True)
    multistage: bool = param(False, "multi-stage restarts")

    method: ClassVar[str] = "accel-mbsgd"


@dataclass(frozen=True)
class ShuffleMBSGD(SiloPrivacy):
    """Shuffle-DP Noisy MB-SGD (section 5 of the silo paper): per-record messages, amplified by
    shuffling."""

    method: ClassVar[str] = "shuffle-mbsgd"


@dataclass(frozen=True)
class LocalSGD(Calibrated):
    """ISRL-DP Local SGD: K noisy local steps per silo per round (the silo paper's baseline)."""

    method: ClassVar[str] = "local-sgd"


@dataclass(frozen=True)
class MBSGD(SiloTraining):
    """Non-private minibatch SGD across silos."""

    sampling: str | None = param(None, "how a silo draws its minibatch", kind=str,
                                 choices=SAMPLINGS, default_text="with-replacement")  # fmt: skip

    method: ClassVar[str] = "mbsgd"


@dataclass(frozen=True)
class FedAvg(SiloTraining):
    """Non-private Local SGD (FedAvg): K local steps per silo per round."""

    sampling: str | None = param(None, "how a silo draws its minibatch", kind=str,
                                 choices=SAMPLINGS, default_text="with-replacement")  # fmt: skip

    method: ClassVar[str] = "fedavg"


LDP_FL_PAPER = (
    "LDP-FL: Practical Private Aggregation in Federated Learning with Local Differential Privacy"
)


@dataclass(frozen=True)
class LDPFL(Rounds):
    """LDP-FL: local training of a flax model on every selected client, two-point perturbation
    of every weight, split and shuffle (the LDP-FL paper)."""

    dataset: str = param(
        "digits", "image data set: scikit-learn digits (8x8, ships offline) or procedural "
        "MNIST-shaped images (28x28, generated on the device)",
        choices=("digits", "procedural-mnist"), group="data",
    )  # fmt: skip
    clients: int = param(100, CLIENTS,
                         unit="clients", range=integers(1, 100_000), group="data")  # fmt: skip
    split: str = param("iid", "how images are shared: iid, or sorted by label (non-iid)",
                       choices=("iid", "by-label"), group="data")  # fmt: skip
    data_seed: int = param(0, DATA_SEED,
                           range=integers(0, MAX_SEED), group="data")  # fmt: skip
    epsilon: float = param(1.0, "eps of each reported weight (per weight, per round)",
                           range=EPSILON, group="privacy")  # fmt: skip
    ranges: str = param(
        "fixed", "weight ranges: fixed [c - r, c + r], or adaptive per parameter tensor (c = 0, r "
        "its largest |weight| over the round's clients: an oracle for the paper's encrypted "
        "min/max aggregation)", choices=("fixed", "adaptive"), group="privacy",
    )  # fmt: skip
    weight_center: float = param(
        0.0, "center c of the fixed weight range", range=Range(-10.0, 10.0), group="privacy",
        requires=(lambda c: c.ranges == "fixed", "only with --ranges fixed"),
    )  # fmt: skip
    weight_radius: float = param(
        0.15, "half-width r of the fixed weight range (the paper used 0.075 on MNIST)",
        range=Range(0.0, 10.0, open_low=True), tunable=True, group="privacy",
        requires=(lambda c: c.ranges == "fixed", "only with --ranges fixed"),
    )  # fmt: skip
    model: str = param("cnn", "local model: the paper's two-layer CNN, an MLP, or multinomial "
                       "logistic regression", choices=("cnn", "mlp", "logistic"))  # fmt: skip
    fraction: float = param(1.0, "fraction f of the clients selected each round",
                            range=Range(0.0, 1.0, open_low=True))  # fmt: skip
    local_epochs: int = param(5, "local epochs E per round", unit="epochs",
                              range=integers(1, 1000))  # fmt: skip
    batch: int = param(4, BATCH, unit="records", range=integers(1, 10**6))  # fmt: skip
    learning_rate: float = param(0.1, LEARNING_RATE, range=POSITIVE,
                                 tunable=True)  # fmt: skip

    method: ClassVar[str] = "ldp-fl"


ESTIMATION_PAPER = (
    "Yu, Optimal federated learning under differential privacy constraints (talk; Kent, Berrett "
    "and Yu 2024; Li, Tian, Feng and Yu 2024; Xue, Lin and Yu 2024)"
)
TWO_STAGE = ("local-user-small", "local-user-large", "central-user")
REPLICATIONS = "Monte Carlo replications of the run (fresh data and noise each)"


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
                      choices=("rademacher", "gaussian"), group="data")  # fmt: skip
    mean: float = param(0.3, "true mean mu", range=Range(-1.0, 1.0), tunable=True, group="data")
    epsilon: float = param(1.0, "eps of each release (the setting says whose data and who "
                           "sees it)", range=EPSILON, group="privacy")  # fmt: skip
    mechanism: str = param("laplace", "noise: laplace (pure eps) or gaussian (analytic "
                           "calibration, (eps, delta))", choices=("laplace", "gaussian"),
                           group="privacy")  # fmt: skip
    delta: float = param(1e-5, "delta of each release", range=OPEN_UNIT, group="privacy",
                         requires=(lambda c: c.mechanism == "gaussian",
                                   "only with --mechanism gaussian"))  # fmt: skip
    value_clip: float | None = param(
        None, "c: a unit's value (item-level) or a site's mean (user-level) is clipped to "
        "[-c, c]", kind=float, range=POSITIVE, group="privacy",
        default_text="1 for rademacher data; gaussian: 1 + sqrt(2 ln(20 S n)) per unit, "
        "1 + 3 / sqrt(n) per site mean",
    )  # fmt: skip
    replications: int = param(400, REPLICATIONS, unit="replications",
                              range=integers(2, 10**6), group="run")  # fmt: skip

    method: ClassVar[str] = "estimation"

    def check(self) -> Config:
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
                       choices=("fourier", "legendre"))  # fmt: skip
    terms: int | None = param(
        None, "basis terms r", kind=int, unit="terms", range=integers(1, 32), tunable=True,
        default_text="the rate-optimal r of the spec (S n)^(1/2a) ^ (S n m)^(1/(2a+1)) ^ "
        "(S n^2 eps^2)^(1/2a) ^ (S n^2 m eps^2)^(1/(2a+2)), at most 32",
    )  # fmt: skip
    iterations: int = param(1, "SGD iterations T per server (disjoint batches of n / T "
                            "functions)", unit="iterations", range=integers(1, 1000))  # fmt: skip
    epsilon: float = param(1.0, "eps of each server's release (user-level: one function)",
                           range=EPSILON, group="privacy")  # fmt: skip
    delta: float = param(1e-5, "delta of each server's release", range=OPEN_UNIT,
                         group="privacy")  # fmt: skip
    noise_shape: str = param("anisotropic", "Gaussian noise: anisotropic (the seed's shape, "
                           "sigma_l^2 ~ Delta_l ||Delta||_1), isotropic (one sigma, L2 "
                           "sensitivity), both scaled by the analytic Gaussian; or none",
                           choices=("anisotropic", "isotropic", "none"),
                           group="privacy")  # fmt: skip
    replications: int = param(100, REPLICATIONS, unit="replications",
                              range=integers(2, 10**6), group="run")  # fmt: skip

    method: ClassVar[str] = "functional-estimation"

    def check(self) -> Config:
        super().check()
        if self.iterations > self.functions:
            raise ValueError(
                f"expected --iterations in [1, {self.functions}] (at most --functions), got "
                f"--iterations={self.iterations}"
            )
        return self


# --------------------------------------------------------------------------------- the registry


@dataclass(frozen=True)
class Method:
    """One method: its configuration class and what a user needs to know before running it.

    Attributes:
      name: what the user types (``jfed run NAME``).
      config: the configuration dataclass (its fields are the flags).
      summary: one line for listings.
      paper: the source paper; ``algorithm``: the algorithm's name there.
      notion: the privacy notion of its eps (``"none"`` for the non-private references).
      protected: what one adjacency changes; ``trust_model``: who sees what.
      experiment: ``"module:Class"`` of its experiment (imported only when a run starts).
      private: whether it has an eps.
    """

    name: str
    config: type
    summary: str
    paper: str
    algorithm: str
    notion: str
    protected: str
    trust_model: str
    experiment: str
    private: bool = True

    def load(self) -> Any:
        """The experiment class (imports JAX)."""
        import importlib

        module, _, name = self.experiment.partition(":")
        return getattr(importlib.import_module(module), name)


LOCAL = "local (eps, delta)-DP"
UNTRUSTED = "untrusted server; each client randomizes its own messages"
FEATURES = "one client's feature vector x_i (the response y_i is treated as public)"
RECORD = "one client's record (x_i, y_i)"
ISRL = "inter-silo record-level (ISRL) (eps, delta)-DP of each silo's transcript"
SILO_RECORD = "one record of one silo (replace-one), against the server and the other silos"
SILO_TRUST = "people trust their own silo, not the server or other silos"
REGRESSION = "jfed.methods.regression:"
SILO = "jfed.methods.silo:"

_METHODS = (
    Method("modulated-iterative", ModulatedIterative,
           "modulated learning, iterative estimator: T rounds of debiased modulated gradients",
           MODULATED_PAPER, "iterative modulated estimator", LOCAL, FEATURES, UNTRUSTED,
           REGRESSION + "ModulatedIterativeExperiment"),
    Method("modulated-one-shot", ModulatedOneShot,
           "modulated learning, one-shot estimator: one release, a ridge solve",
           MODULATED_PAPER, "one-shot modulated estimator", LOCAL, FEATURES, UNTRUSTED,
           REGRESSION + "ModulatedOneShotExperiment"),
    Method("dpsgd", DPSGD, "DP-SGD FedAvg, one sample per client (the modulated paper's baseline)",
           MODULATED_PAPER, "DP-SGD FedAvg baseline", LOCAL, RECORD, UNTRUSTED,
           REGRESSION + "DPSGDExperiment"),
    Method("ols", OLS, "non-private least squares (the reference)", MODULATED_PAPER,
           "ordinary least squares", "none", "nothing", "trusted server sees raw data",
           REGRESSION + "OLSExperiment", private=False),
    Method("noisy-mbsgd", NoisyMBSGD, "ISRL-DP Noisy MB-SGD across data silos", SILO_PAPER,
           "Noisy MB-SGD (Algorithm 2)", ISRL, SILO_RECORD, SILO_TRUST,
           SILO + "NoisyMBSGDExperiment"),
    Method("accel-mbsgd", AcceleratedMBSGD,
           "accelerated (AC-SA) Noisy MB-SGD: one pass, ERM, multi-stage", SILO_PAPER,
           "One-pass Accelerated Noisy MB-SGD (Algorithm 1)", ISRL, SILO_RECORD, SILO_TRUST,
           SILO + "AcceleratedExperiment"),
    Method("shuffle-mbsgd", ShuffleMBSGD,
           "shuffle-DP Noisy MB-SGD: per-record messages, amplification by shuffling", SILO_PAPER,
           "Noisy MB-SGD with a shuffler (section 5)",
           "central (eps, delta)-DP via shuffling; each message (eps0, delta0)-LDP", SILO_RECORD,
           "a trusted shuffler; the server sees shuffled messages", SILO + "ShuffleExperiment"),
    Method("local-sgd", LocalSGD, "ISRL-DP Local SGD: K noisy local steps per silo", SILO_PAPER,
           "Noisy Local SGD (baseline)", ISRL, SILO_RECORD, SILO_TRUST,
           SILO + "LocalSGDExperiment"),
    Method("ldp-fl", LDPFL,
           "LDP-FL: local training, two-point weight perturbation, split and shuffle",
           LDP_FL_PAPER, "two-point weight perturbation with split and shuffle",
           "eps-LDP of each reported weight (the paper's claim: it needs the anonymity of split "
           "and shuffle; every record also states the budget without it)",
           "one client's local data, through each weight it reports",
           "untrusted cloud; an anonymous channel (split and shuffle) between clients and cloud",
           "jfed.methods.ldp_fl:LDPFLExperiment"),
    Method("estimation", Estimation,
           "private mean estimation across S sites of n units, seven trust settings",
           ESTIMATION_PAPER, "mean estimation (the talk's table of minimax rates)",
           "eps-DP (Laplace) or (eps, delta)-DP (Gaussian); local or central, of one unit or of "
           "one site's units: --setting says which (every record names it)",
           "one unit (item-level) or all n units of one site (user-level), per --setting",
           "per --setting: nobody, one curator, or each site for its own units",
           "jfed.methods.estimation:EstimationExperiment"),
    Method("functional-estimation", FunctionalEstimation,
           "private functional mean estimation: basis expansion, Gaussian-perturbed SGD per server",
           ESTIMATION_PAPER, "private distributed functional mean estimation (Xue, Lin and Yu)",
           "(eps, delta)-DP of each server's release, user-level (one function with its m "
           "observations)", "one function of one server, with all its observations",
           "each server a trusted curator of its own functions; the aggregator sees releases",
           "jfed.methods.estimation:FunctionalExperiment"),
    Method("mbsgd", MBSGD, "non-private minibatch SGD across silos", SILO_PAPER,
           "minibatch SGD (non-private baseline)", "none", "nothing",
           "trusted server sees raw gradients", SILO + "MBSGDExperiment", private=False),
    Method("fedavg", FedAvg, "non-private Local SGD (FedAvg)", SILO_PAPER,
           "Local SGD / FedAvg (non-private baseline)", "none", "nothing",
           "trusted server sees raw updates", SILO + "FedAvgExperiment", private=False),
)  # fmt: skip

METHODS: dict[str, Method] = {method.name: method for method in _METHODS}
# names kept for the commands of earlier versions
ALIASES = {"modulated": "modulated-iterative"}


def method(name: str) -> Method:
    """The declaration of ``name`` (or an alias of it); ``ValueError`` listing the names."""
    name = ALIASES.get(name, name)
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; expected one of {list(METHODS)}")
    return METHODS[name]


def method_of(config: Config) -> Method:
    return method(type(config).method)
