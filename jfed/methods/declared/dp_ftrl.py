"""DP-FTRL (tree aggregation, or independent noise) and BLT-DP-FTRL: a participation schedule
instead of sampling, correlated noise, server momentum on the released increments
(:mod:`jfed.algorithms.dp_ftrl`); experiment in :mod:`jfed.methods.dp_ftrl`. Data flags as
DP-FedAvg's."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Self

from jfed._validation import UsageError
from jfed.methods.cost import Cost, CostPlan
from jfed.methods.declared.common import ACCURACY
from jfed.methods.declared.dp_fedavg import (
    USER_LEVEL,
    FederatedTraining,
    _fixed_clients,
    federated_cost,
)
from jfed.methods.declared.private_training import CENTRAL_NOISES, PrivateTraining
from jfed.methods.fields import Range, integers, param
from jfed.methods.registry import Method, register

FTRL_PAPER = (
    "Kairouz, McMahan, Song, Thakkar, Thakurta, Xu, Practical and Private (Deep) Learning "
    "without Sampling or Shuffling"
)
BLT_PAPER = (
    "Dvijotham, McMahan, Pillutla, Steinke, Thakurta, Efficient and Near-Optimal Noise "
    "Generation for Streaming Differential Privacy"
)
SCHEDULE_NAMES = ("cyclic", "shuffled", "min-separation")
FTRL_NOISES = ("tree", "independent")
ALL_PARTICIPATIONS = (
    "one client's whole data (all its records, over all its participations in the schedule; no "
    "amplification by sampling assumed)"
)
CORRELATED = "a trusted server clips, sums and adds correlated Gaussian noise"
FTRL_EXPERIMENT = "jfed.methods.dp_ftrl:FtrlExperiment"


TREE_NOISE = frozenset({"tree"})
SEPARATED = frozenset({"min-separation"})
SERVER_OPTIMIZERS = frozenset({"sgd"})
"""DP-FTRL's server step: SGD with momentum on the increments."""


def _min_separation(config) -> bool:
    return config.schedule in SEPARATED


def _refused(name: str, phrase: str) -> Any:
    """``FederatedTraining``'s field ``name`` as declared there, refused when given (``phrase``
    says why): a field that does not apply to DP-FTRL keeps its one meaning across methods."""
    parent = FederatedTraining.__dataclass_fields__[name]
    declaration = dict(parent.metadata["jfed"], requires=(lambda config: False, phrase))
    return dataclasses.field(default=parent.default, metadata={"jfed": declaration})


def check_separation(separation: int, clients: int, cohort_size: int) -> None:
    """Refuse a min-separation schedule whose ``separation`` groups of the ``clients`` cannot
    each hold a cohort of ``cohort_size`` (naming ``--separation``, the cause, and its most)."""
    most = clients // cohort_size
    if separation <= most:
        return
    if most < 1:
        raise UsageError(
            f"expected --cohort-size <= {clients} (the clients of the population), got "
            f"--cohort-size={cohort_size}"
        )
    raise UsageError(
        f"expected --separation <= {most} with {clients} clients and --cohort-size "
        f"{cohort_size} (each of the b groups of the min-separation schedule holds a round's "
        f"cohort: b K <= N), got --separation={separation}"
    )


def _tree(config) -> bool:
    return config.noise_strategy in TREE_NOISE


@dataclass(frozen=True)
class FtrlTraining(PrivateTraining):
    """DP-FTRL's round: a participation schedule instead of sampling, correlated noise, server
    momentum on the released increments."""

    cohort: str = _refused(
        "cohort", "only where rounds sample their clients (DP-FTRL's take those of --schedule)"
    )
    schedule: str = param(
        "cyclic", "participation schedule: cyclic (a fixed random partition into b = N // K "
        "groups, round t takes group t mod b), shuffled (every client once per epoch of "
        "N // K rounds, a new order each epoch), min-separation (K clients of group t mod b "
        "of a fixed partition into b groups, b = --separation)", choices=SCHEDULE_NAMES,
    )  # fmt: skip
    separation: int | None = param(
        None, "min-separation: b, the fewest rounds between two participations of a client",
        kind=int, unit="rounds", range=integers(1, 2**30), default_text="N // K",
        requires=(_min_separation, "only with --schedule min-separation"),
    )  # fmt: skip
    server_momentum: float | None = param(
        0.9, "server momentum (sgd) or first-moment decay beta_1 (adam, yogi)", kind=float,
        range=Range(0.0, 1.0, open_high=True), tunable=True,
        default_text="0.9: heavy-ball momentum on the released increments (DP-FTRLM)",
    )  # fmt: skip

    def check(self) -> Self:
        if self.server_optimizer not in SERVER_OPTIMIZERS:
            raise UsageError(
                f"--server-optimizer {self.server_optimizer}: DP-FTRL steps with SGD and "
                "momentum on the released increments; use --server-optimizer sgd"
            )
        if self.schedule in SEPARATED and self.separation is not None and _fixed_clients(self):
            check_separation(self.separation, self.clients, self.cohort_size)
        return super().check()


@dataclass(frozen=True)
class DPFTRL(FtrlTraining):
    """DP-FTRL: tree aggregation with restarts and Honaker's estimator (or independent noise,
    DP-FedAvg under the schedule without amplification)."""

    noise_strategy: str = param(
        "tree", "how the noise is correlated across rounds: tree (tree aggregation, Kairouz et "
        "al.) or independent (fresh noise every round, accounted for the schedule's "
        "participations: DP-FedAvg without amplification)", choices=FTRL_NOISES,
    )  # fmt: skip
    tree_restart: int | None = param(
        None, "tree: rounds per tree (a restart after each)", kind=int, unit="rounds",
        range=integers(1, 2**30), default_text="the schedule's period (one tree per pass)",
        requires=(_tree, "only with --noise-strategy tree"),
    )  # fmt: skip
    honaker: bool = param(
        True, "tree: Honaker's estimator (every node drawn, combined by inverse variance)",
        requires=(_tree, "only with --noise-strategy tree"),
    )  # fmt: skip
    noise: str = param(
        "discrete", "the noise of every node (or round): discrete (exact discrete Gaussian on "
        "the tree's integer node sums, added by a trusted server; certified through the "
        "continuous Gaussian it is coupled to) or float (float32 Gaussian: the ideal real-valued "
        "mechanism, floating-point sampling not modelled)", choices=CENTRAL_NOISES,
        group="privacy",
    )  # fmt: skip


@dataclass(frozen=True)
class BltDPFTRL(FtrlTraining):
    """BLT-DP-FTRL: buffered linear Toeplitz noise, jax-privacy's strategy optimized for the
    schedule's participation pattern. float32 noise only (no ``--noise``): the released noise is
    ``C^{-1} z`` with a real-valued inverse, which does not keep a release on an integer grid;
    its record says "ideal real-valued mechanism; floating-point sampling not modelled"."""

    blt_buffers: int = param(4, "the most buffers of the optimized BLT strategy", unit="buffers",
                             range=integers(1, 10))  # fmt: skip


NOISE_MATRIX_COPIES = 2  # the scan's output and the host's copy (jfed.privacy.correlated)


def ftrl_cost(config: FtrlTraining, plan: CostPlan) -> Cost:
    """:func:`federated_cost` plus the host's matrices of the correlated noise: the released
    increments' noise map ``f64[R, m]`` over the run's m draws (a Honaker tree draws about 2
    a round, other strategies 1) and the strategy's ``f64[R, R]`` matrices, 8 R m bytes each,
    which grow as R^2 (R = 10^6 rounds: terabytes)."""
    honaker = getattr(config, "noise_strategy", None) == "tree" and getattr(config, "honaker",
                                                                            False)  # fmt: skip
    draws = config.rounds * (2 if honaker else 1)
    matrices = Cost(0, 0, host_memory=NOISE_MATRIX_COPIES * 8 * config.rounds * draws,
                    hint="lower --rounds")  # fmt: skip
    return federated_cost(config, plan).plus_host(matrices)


register(Method(
    "dp-ftrl", DPFTRL,
    "DP-FTRL: a participation schedule, tree-aggregated noise, momentum; no amplification",
    USER_LEVEL, ALL_PARTICIPATIONS, CORRELATED, FTRL_EXPERIMENT, FTRL_PAPER,
    "DP-FTRLM with tree restarts (Algorithm 1 with momentum)", cost=ftrl_cost,
    metrics=ACCURACY,
))  # fmt: skip

register(Method(
    "blt-dp-ftrl", BltDPFTRL,
    "BLT-DP-FTRL: a participation schedule, buffered-linear-Toeplitz noise, momentum",
    USER_LEVEL, ALL_PARTICIPATIONS, CORRELATED, FTRL_EXPERIMENT, BLT_PAPER,
    "DP-FTRL with BLT noise (min-separation sensitivity)", cost=ftrl_cost,
    metrics=ACCURACY,
))  # fmt: skip
