"""LDP-FL (local training, two-point weight perturbation, split and shuffle). Its experiment is
in :mod:`jfed.methods.ldp_fl`."""

from __future__ import annotations

from dataclasses import dataclass

from jfed import catalog
from jfed.methods.config import Rounds
from jfed.methods.declared.common import CLIENTS, batch, data_seed, learning_rate
from jfed.methods.fields import EPSILON, OPEN_UNIT, Range, integers, param
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
    epsilon: float = param(1.0, "eps of each reported weight (per weight, per round); a client's "
                           "guarantee composes it over every weight and round",
                           range=EPSILON, group="privacy")  # fmt: skip
    delta: float | None = param(
        None, "delta of the client-level guarantee (the composed eps is stated at it)",
        kind=float, range=OPEN_UNIT, default_text="1 / N^1.1", group="privacy",
    )  # fmt: skip
    ranges: str = param(
        "fixed", "weight ranges, public either way: fixed [c - r, c + r], or adaptive [w - r, w + "
        "r] around each previous global weight w; trained weights are clipped into the range",
        choices=catalog.WEIGHT_RANGES, group="privacy",
    )  # fmt: skip
    weight_center: float = param(
        0.0, "center c of the fixed weight range", range=Range(-10.0, 10.0), group="privacy",
        requires=(lambda c: c.ranges == "fixed", "only with --ranges fixed"),
    )  # fmt: skip
    weight_radius: float = param(
        0.15, "half-width r of the weight range (the paper used 0.075 on MNIST)",
        range=Range(0.0, 10.0, open_low=True), tunable=True, group="privacy",
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
    "local (eps, delta)-DP of a client's whole transcript (every weight of every round it "
    "reports; records also state the paper's per-weight eps and the shuffle's amplification)",
    "one client's local data (its local models), replaced by any other",
    "untrusted cloud that sees every report (the client-level eps needs no anonymity; the "
    "shuffled eps in the record assumes a trusted split-and-shuffle channel)",
    "jfed.methods.ldp_fl:LDPFLExperiment",
    LDP_FL_PAPER, "two-point weight perturbation with split and shuffle",
))  # fmt: skip
