"""LDP-FL (local training, two-point weight perturbation, split and shuffle). Its experiment is
in :mod:`jfed.methods.ldp_fl`."""

from __future__ import annotations

from dataclasses import dataclass

from jfed import catalog
from jfed.methods.config import Rounds
from jfed.methods.declared.common import CLIENTS, batch, data_seed, learning_rate
from jfed.methods.fields import EPSILON, Range, integers, param
from jfed.methods.registry import Method, register

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
        choices=catalog.IMAGE_DATASETS, group="data",
    )  # fmt: skip
    clients: int = param(100, CLIENTS,
                         unit="clients", range=integers(1, 100_000), group="data")  # fmt: skip
    split: str = param("iid", "how images are shared: iid, or sorted by label (non-iid)",
                       choices=catalog.IMAGE_SPLITS, group="data")  # fmt: skip
    data_seed: int = data_seed()
    epsilon: float = param(1.0, "eps of each reported weight (per weight, per round)",
                           range=EPSILON, group="privacy")  # fmt: skip
    ranges: str = param(
        "fixed", "weight ranges: fixed [c - r, c + r], or adaptive per parameter tensor (c = 0, r "
        "its largest |weight| over the round's clients: an oracle for the paper's encrypted "
        "min/max aggregation)", choices=catalog.WEIGHT_RANGES, group="privacy",
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
                       "logistic regression", choices=catalog.LDP_FL_MODELS)  # fmt: skip
    fraction: float = param(
        1.0, "fraction f of the clients selected each round (f n rounded, at least one client)",
        range=Range(0.0, 1.0, open_low=True),
        requires=(lambda c: c.fraction * c.clients >= 0.5,
                  "only where --fraction x --clients rounds to at least one client"),
    )  # fmt: skip
    local_epochs: int = param(5, "local epochs E per round", unit="epochs",
                              range=integers(1, 1000))  # fmt: skip
    batch: int = batch(4, 10**6)
    learning_rate: float = learning_rate(0.1)


register(Method(
    "ldp-fl", LDPFL, "LDP-FL: local training, two-point weight perturbation, split and shuffle",
    "eps-LDP of each reported weight (the paper's claim: it needs the anonymity of split "
    "and shuffle; every record also states the budget without it)",
    "one client's local data, through each weight it reports",
    "untrusted cloud; an anonymous channel (split and shuffle) between clients and cloud",
    "jfed.methods.ldp_fl:LDPFLExperiment",
    LDP_FL_PAPER, "two-point weight perturbation with split and shuffle",
))  # fmt: skip
