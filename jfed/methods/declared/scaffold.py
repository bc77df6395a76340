"""SCAFFOLD and DP-SCAFFOLD: control variates against client drift, the clients' own kept by the
engine as per-client state (:mod:`jfed.algorithms.scaffold`); experiment in
:mod:`jfed.methods.scaffold`. Data flags as DP-FedAvg's."""

from __future__ import annotations

from dataclasses import dataclass

from jfed.methods.declared.common import ACCURACY
from jfed.methods.declared.dp_fedavg import ONE_CLIENT, TRUSTED, USER_LEVEL, FederatedTraining
from jfed.methods.declared.private_training import GridTraining, with_client_state
from jfed.methods.fields import POSITIVE, param
from jfed.methods.registry import Method, register

SCAFFOLD_PAPER = (
    "Karimireddy, Kale, Mohri, Reddi, Stich, Suresh, SCAFFOLD: Stochastic Controlled Averaging "
    "for Federated Learning"
)
SCAFFOLD_EXPERIMENT = "jfed.methods.scaffold:ScaffoldExperiment"


@dataclass(frozen=True)
class Scaffold(FederatedTraining):
    """SCAFFOLD: local steps corrected by control variates (the clients' kept by the engine)."""


@dataclass(frozen=True)
class DPScaffold(GridTraining):
    """DP-SCAFFOLD: SCAFFOLD with the model updates and the control-variate updates each
    clipped and noised (two releases a round, accounted together)."""

    control_clip: float = param(
        1.0, "clip norm C_c of a client's control-variate update Delta c_i (its release's "
        "noise std is z C_c)", unit="control norm", range=POSITIVE, tunable=True,
    )  # fmt: skip


register(Method(
    "scaffold", Scaffold, "SCAFFOLD: control variates (kept per client) against client drift",
    "none", "nothing", "trusted server sees raw updates", SCAFFOLD_EXPERIMENT, SCAFFOLD_PAPER,
    "SCAFFOLD (Algorithm 1, option II)", private=False, cost=with_client_state(1),
    metrics=ACCURACY,
))  # fmt: skip

register(Method(
    "dp-scaffold", DPScaffold,
    "DP-SCAFFOLD: SCAFFOLD's two statistics clipped and noised, both releases accounted",
    USER_LEVEL, ONE_CLIENT, TRUSTED, SCAFFOLD_EXPERIMENT, SCAFFOLD_PAPER,
    "SCAFFOLD with user-level DP on both statistics", cost=with_client_state(1),
    metrics=ACCURACY,
))  # fmt: skip
