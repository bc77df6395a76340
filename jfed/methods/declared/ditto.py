"""Ditto and DP-Ditto: personal models kept by the engine as per-client state beside FedAvg's
global model (:mod:`jfed.algorithms.ditto`); experiment in :mod:`jfed.methods.ditto`. Data flags
as DP-FedAvg's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jfed.methods.declared.common import ACCURACY
from jfed.methods.declared.dp_fedavg import ONE_CLIENT, TRUSTED, USER_LEVEL, FederatedTraining
from jfed.methods.declared.private_training import GridTraining, with_client_state
from jfed.methods.fields import NONNEGATIVE, integers, param
from jfed.methods.registry import Method, register

DITTO_PAPER = (
    "Li, Hu, Beirami, Smith, Ditto: Fair and Robust Federated Learning Through Personalization"
)
DITTO_EXPERIMENT = "jfed.methods.ditto:DittoExperiment"
PERSONAL_WEIGHT = "Ditto's lambda: how strongly a personal model is pulled to the global one"
PERSONAL_EPOCHS = "epochs of SGD on the personal model each time a client takes part"
DEVICE_ONLY = ("device",)
"""``--client-state``'s places (jfed.cli.options): the personal models and visits a run keeps
are read from the table inside the compiled run, so the table stays on the device."""


@dataclass(frozen=True)
class Ditto(FederatedTraining):
    """Ditto: a global model trained by FedAvg and a personal model per client (kept by the
    engine), pulled towards the global one."""

    personal_weight: float = param(0.1, PERSONAL_WEIGHT, range=NONNEGATIVE, tunable=True)
    personal_epochs: int = param(1, PERSONAL_EPOCHS, unit="epochs", range=integers(1, 1000))

    client_state_places: ClassVar[tuple[str, ...]] = DEVICE_ONLY


@dataclass(frozen=True)
class DPDitto(GridTraining):
    """Ditto with DP-FedAvg's private aggregation of the global updates (the personal models
    never leave the clients)."""

    personal_weight: float = param(0.1, PERSONAL_WEIGHT, range=NONNEGATIVE, tunable=True)
    personal_epochs: int = param(1, PERSONAL_EPOCHS, unit="epochs", range=integers(1, 1000))

    client_state_places: ClassVar[tuple[str, ...]] = DEVICE_ONLY


register(Method(
    "ditto", Ditto, "Ditto: personal models (kept per client) beside FedAvg's global model",
    "none", "nothing", "trusted server sees raw updates", DITTO_EXPERIMENT, DITTO_PAPER,
    "Ditto (Algorithm 1)", private=False, cost=with_client_state(1),
    metrics=ACCURACY,
))  # fmt: skip

register(Method(
    "dp-ditto", DPDitto,
    "Ditto with DP-FedAvg's private aggregation of the global model's updates",
    USER_LEVEL, ONE_CLIENT, TRUSTED, DITTO_EXPERIMENT, DITTO_PAPER,
    "Ditto with user-level DP on the global model", cost=with_client_state(1),
    metrics=ACCURACY,
))  # fmt: skip
