"""Fields that several method families share, each written once: a name means one thing across
methods (its help, unit and range), and every family builds its field from here."""

from __future__ import annotations

from typing import Any

from jfed._validation import UsageError
from jfed.methods.fields import MAX_SEED, POSITIVE, integers, param
from jfed.methods.registry import Metrics

MAX_DIM = 100_000
ACCURACY = Metrics(selection="train_accuracy", maximize=True, report="test_accuracy")
"""The federated training methods' metrics: tuned on the training clients' accuracy (the image
tasks have no validation split), reported on held-out clients or images."""

GRID_NOISES = {"float": False, "discrete": True}
"""Whether each ``--noise`` a method offers releases on the integer grid (exact discrete noise)
or adds float32 noise (the ideal real-valued mechanism)."""
GRADIENT_CLIP = "clip norm of each gradient (DP-SGD: a client's, G; silos: a record's, L)"
RIDGE = "ridge (L2) regulariser lambda"
CLIENTS = (
    "number of clients n (procedural regression clients; LDP-FL: they share the images; "
    "DP-FedAvg: the population, each with records of its own)"
)
LEARNING_RATE = "SGD learning rate (DP-SGD: the server's step; LDP-FL: each client's local step)"
BATCH = (
    "minibatch size: records per silo per round K (Local SGD: local steps), LDP-FL: images per "
    "local step B (at most a client's images), DP-FedAvg: records per local step B"
)
REPLICATIONS = "Monte Carlo replications of the run (fresh data and noise each)"
MODEL = (
    "the model each client trains (LDP-FL: the paper's two-layer cnn, an mlp or multinomial "
    "logistic regression on the images; DP-FedAvg and its family: logistic, mlp with --hidden "
    "units, char-lstm of McMahan et al. 2017, femnist-cnn of LEAF, cifar-cnn of pfl-research, "
    "transformer-lm)"
)
SPLIT = (
    "how the records become clients: iid, by-label (LDP-FL: sorted by label, non-iid), dirichlet "
    "(label skew, --dirichlet) or natural (femnist: one client per writer)"
)


def projection_radius() -> Any:
    """B: the parameter is projected onto the L2 ball of this radius after every step."""
    return param(10.0, "projection radius B of the parameter", unit="parameter norm",
                 range=POSITIVE, tunable=True)  # fmt: skip


def gradient_clip(default: float) -> Any:
    return param(default, GRADIENT_CLIP, unit="gradient norm", range=POSITIVE, tunable=True)


def learning_rate(default: float) -> Any:
    return param(default, LEARNING_RATE, range=POSITIVE, tunable=True)


def data_seed() -> Any:
    return param(0, "seed of the data's split among silos or clients and of its test split",
                 range=integers(0, MAX_SEED), group="data")  # fmt: skip


def batch(default: int, high: int) -> Any:
    return param(default, BATCH, unit="records", range=integers(1, high))


def replications(default: int) -> Any:
    return param(default, REPLICATIONS, unit="replications", range=integers(2, 10**6),
                 group="run")  # fmt: skip


def check_audit_canaries(canaries: int) -> None:
    """``--audit-canaries``: 0 (no audit) or at least 2, since the audit compares the included
    canaries with the excluded ones."""
    if canaries == 1:
        raise UsageError("expected --audit-canaries 0 (no audit) or at least 2 (the audit "
                         "compares included with excluded canaries), got 1")  # fmt: skip
