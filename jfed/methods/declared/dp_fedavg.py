"""DP-FedAvg with user-level privacy and client sampling (McMahan et al. 2018; adaptive clipping,
Andrew et al. 2021; server optimizers, Reddi et al. 2021), and FedAvg with the same cohorts as its
non-private baseline. Their experiment is in :mod:`jfed.methods.dp_fedavg`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

from jfed import catalog
from jfed.methods.config import Config
from jfed.methods.declared.common import CLIENTS, batch, data_seed
from jfed.methods.fields import (
    EPSILON,
    MAX_ROUNDS,
    NONNEGATIVE,
    OPEN_UNIT,
    POSITIVE,
    UNIT,
    Range,
    integers,
    param,
)
from jfed.methods.registry import Method, register

DP_FEDAVG_PAPER = (
    "McMahan, Ramage, Talwar, Zhang, Learning Differentially Private Recurrent Language Models"
)
USER_LEVEL = "central (eps, delta)-DP, user-level"
ONE_CLIENT = "one client's whole data (all its records)"
TRUSTED = "a trusted server clips, sums and adds the noise"
EXPERIMENTS = "jfed.methods.dp_fedavg:"
SYNTHETIC_ONLY = (lambda c: c.dataset == "synthetic", "only with --dataset synthetic")


@dataclass(frozen=True)
class FederatedTraining(Config):
    """A federated population, a cohort per round, local epochs and a server optimizer."""

    dataset: str = param(
        "synthetic", "population: synthetic (Synthetic(alpha, beta), procedural, any size) or "
        "digits-dirichlet (scikit-learn digits split by a Dirichlet label split)",
        choices=catalog.FEDERATED_DATASETS, group="data",
    )  # fmt: skip
    clients: int = param(10_000, CLIENTS, unit="clients", range=integers(2, 2**31 - 1),
                         group="data")  # fmt: skip
    model_heterogeneity: float = param(
        1.0, "Synthetic(alpha, beta): model heterogeneity alpha (std of a client's model shift)",
        range=NONNEGATIVE, requires=SYNTHETIC_ONLY, group="data",
    )  # fmt: skip
    feature_heterogeneity: float = param(
        1.0, "Synthetic(alpha, beta): feature heterogeneity beta (std of a client's feature "
        "shift)", range=NONNEGATIVE, requires=SYNTHETIC_ONLY, group="data",
    )  # fmt: skip
    shared_model: bool = param(
        True, "Synthetic: one labelling model for all clients (with a model per client, as Li et "
        "al., a held-out client's label is uniform given its features: nothing to learn)",
        requires=SYNTHETIC_ONLY, group="data",
    )  # fmt: skip
    records: int = param(64, "most records a client holds (Synthetic: the cap of its "
                         "lognormal count)", unit="records", range=integers(1, 100_000),
                         requires=SYNTHETIC_ONLY, group="data")  # fmt: skip
    dirichlet: float = param(
        0.5, "Dirichlet concentration of the label split (0.1 very non-iid .. 100 near iid)",
        range=POSITIVE, requires=(lambda c: c.dataset == "digits-dirichlet",
                                  "only with --dataset digits-dirichlet"), group="data",
    )  # fmt: skip
    data_seed: int = data_seed()
    rounds: int = param(100, "rounds R", unit="rounds", range=integers(1, MAX_ROUNDS),
                        group="run")  # fmt: skip
    cohort: str = param("poisson", "how a round's clients are drawn: poisson (each client "
                        "with probability q = K / N) or uniform (exactly K, without "
                        "replacement)", choices=catalog.COHORTS)  # fmt: skip
    cohort_size: int = param(100, "cohort size K (poisson: its expected size q N)",
                             unit="clients", range=integers(1, 2**31 - 1))  # fmt: skip
    local_epochs: int = param(1, "local epochs E per round", unit="epochs",
                              range=integers(1, 1000))  # fmt: skip
    batch: int = batch(10, 100_000)
    client_learning_rate: float = param(0.1, "local SGD step eta_l", range=POSITIVE,
                                        tunable=True)  # fmt: skip
    server_optimizer: str = param("sgd", "server optimizer on -Delta: sgd (learning rate 1, no "
                                  "momentum: FedAvg), adam (FedAdam), adagrad, yogi",
                                  choices=catalog.SERVER_OPTIMIZERS)  # fmt: skip
    server_learning_rate: float = param(1.0, "server step eta_s", range=POSITIVE,
                                        tunable=True)  # fmt: skip
    server_momentum: float | None = param(
        None, "server momentum (sgd) or first-moment decay beta_1 (adam, yogi)", kind=float,
        range=Range(0.0, 1.0, open_high=True), tunable=True,
        default_text="0 for sgd, 0.9 for adam and yogi",
    )  # fmt: skip
    hidden: int = param(0, "hidden ReLU units of the model (0: multinomial logistic "
                        "regression)", unit="units", range=integers(0, 100_000))  # fmt: skip

    def check(self) -> Self:
        if self.cohort_size > self.clients:
            raise ValueError(
                f"expected --cohort-size <= --clients={self.clients}, got "
                f"--cohort-size={self.cohort_size}"
            )
        return super().check()

    @property
    def dataset_label(self) -> str:
        if self.dataset == "synthetic":
            model = "" if self.shared_model else ", model per client"
            alpha, beta = self.model_heterogeneity, self.feature_heterogeneity
            return f"synthetic({alpha:g},{beta:g}{model})"
        return f"digits-dirichlet({self.dirichlet:g})"


@dataclass(frozen=True)
class FedAvgSampled(FederatedTraining):
    """Non-private FedAvg with a cohort per round: the plain mean of the cohort's updates."""


@dataclass(frozen=True)
class DPFedAvg(FederatedTraining):
    """DP-FedAvg: clipped updates, Gaussian noise on the sum, the fixed-denominator average,
    optional adaptive clipping; user-level (eps, delta) from the cohort's sampling."""

    epsilon: float = param(2.0, "target user-level eps of the whole run", range=EPSILON,
                           group="privacy")  # fmt: skip
    delta: float | None = param(
        None,
        "target delta of the whole run",
        kind=float,
        range=OPEN_UNIT,
        default_text="1 / N^1.1",
        group="privacy",
    )
    accountant: str | None = param(
        None, "accountant that calibrates the noise (pld: Poisson cohorts, add-or-remove; rdp: "
        "either cohort, and the only one for uniform cohorts, replace-one)", kind=str,
        choices=catalog.COHORT_ACCOUNTANTS,
        default_text="pld for poisson, rdp for uniform", group="privacy",
    )  # fmt: skip
    update_clip: float = param(1.0, "clip norm C of a client's update (adaptive: C_0)",
                        unit="update norm", range=POSITIVE, tunable=True)  # fmt: skip
    clipping: str = param("flat", "clip the whole update (flat) or each tensor to C / sqrt(L)",
                          choices=catalog.CLIPPINGS)  # fmt: skip
    adaptive_clip: bool = param(False, "adapt C towards the target quantile of update norms "
                                "(Andrew et al.)")  # fmt: skip
    target_quantile: float = param(
        0.5, "adaptive clipping: fraction gamma of unclipped updates aimed at", range=UNIT,
        requires=(lambda c: c.adaptive_clip, "only with --adaptive-clip"),
    )  # fmt: skip
    clip_learning_rate: float = param(
        0.2, "adaptive clipping: geometric step eta_C", range=POSITIVE,
        requires=(lambda c: c.adaptive_clip, "only with --adaptive-clip"),
    )  # fmt: skip
    count_noise: float | None = param(
        None, "adaptive clipping: noise std sigma_b on the count of unclipped clients",
        kind=float, unit="clients", range=POSITIVE, default_text="K / 20",
        requires=(lambda c: c.adaptive_clip, "only with --adaptive-clip"),
    )  # fmt: skip

    def check(self) -> Self:
        if self.cohort == "uniform" and self.accountant == "pld":
            raise ValueError(
                "--cohort uniform is accounted with --accountant rdp (replace-one adjacency: "
                "dp-accounting's PLD has no sampling without replacement); got --accountant pld"
            )
        return super().check()


register(Method(
    "dp-fedavg", DPFedAvg,
    "DP-FedAvg: cohorts, clipped updates, Gaussian noise, adaptive clipping, FedAdam",
    USER_LEVEL, ONE_CLIENT, TRUSTED, EXPERIMENTS + "DPFedAvgExperiment",
    DP_FEDAVG_PAPER, "DP-FedAvg (Algorithm 1; adaptive clipping of Andrew et al.)",
))  # fmt: skip
register(Method(
    "fedavg-sampled", FedAvgSampled,
    "non-private FedAvg with the same cohorts (DP-FedAvg's baseline)",
    "none", "nothing", "trusted server sees raw updates", EXPERIMENTS + "DPFedAvgExperiment",
    DP_FEDAVG_PAPER, "FedAvg with client sampling (non-private baseline)", private=False,
))  # fmt: skip
