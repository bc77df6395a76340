"""LDP-FL (local training, two-point weight perturbation, split and shuffle). Its experiment is
in :mod:`jfed.methods.ldp_fl`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

from jfed import catalog
from jfed._validation import UsageError
from jfed.methods.config import Rounds
from jfed.methods.cost import (
    CLIENT_OPERATIONS,
    FLOAT32,
    MATMUL_OPERATIONS,
    MESSAGE_COPIES,
    Cost,
    CostPlan,
)
from jfed.methods.declared.common import (
    ACCURACY,
    CLIENTS,
    MODEL,
    SPLIT,
    batch,
    data_seed,
    learning_rate,
)
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
    split: str = param("iid", SPLIT, choices=catalog.IMAGE_SPLITS, group="data")
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
    model: str = param("cnn", MODEL, choices=catalog.LDP_FL_MODELS)
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

    def check(self) -> Self:
        super().check()  # the fields' ranges first: the shares below divide by --clients
        check_image_shares(self)
        check_shuffled_clients(self)
        return self


def check_image_shares(config: LDPFL) -> None:
    """Each client gets ``images // clients`` training images: at least one, and at least a
    local batch of them."""
    images = IMAGES[config.dataset][1]
    if config.clients > images:
        raise UsageError(
            f"expected --clients in [1, {images}] (the training images of {config.dataset}), "
            f"got --clients={config.clients}"
        )
    share = images // config.clients
    if config.batch > share:
        raise UsageError(
            f"expected --batch in [1, {share}] (the images of each of {config.clients} clients), "
            f"got --batch={config.batch}"
        )


def check_shuffled_clients(config: LDPFL) -> None:
    """A round selects ``max(1, round(fraction x clients))`` clients and shuffles their reports:
    it must select at least two, since one client alone has nobody to hide among and the
    anonymity its eps assumes is void."""
    selected = max(1, round(config.fraction * config.clients))
    if selected < 2:
        # raising --fraction helps only where it is below 1
        flag = "--fraction" if config.fraction < 1.0 else "--clients"
        raise UsageError(
            f"expected --fraction x --clients to select at least 2 clients a round (split and "
            f"shuffle hides each among the others), got {config.fraction:g} x {config.clients} "
            f"-> {selected} client: raise {flag}"
        )


# ------------------------------------------------------------------------------------- costs
# (jfed.methods.cost) the image data sets: side, training and test images; the models' shapes
# are jfed.algorithms.ldp_fl's (the CNN: 3x3 kernels of 16 and 32 channels below 16 pixels a
# side, else 5x5 of 32 and 64; two 2x2 poolings; a dense layer of 4 x channels). XLA held 1.4x
# the activations counted here when it evaluated the CNN (70 GiB for 60,000 28x28 images).

IMAGES = {"digits": (8, 1438, 359), "procedural-mnist": (28, 60_000, 10_000)}
CLASSES = 10
ACTIVATION_COPIES = 1.5  # evaluation; training holds the backward pass's too: 3x
HIDDEN = 64  # the MLP's hidden units
# images jfed.algorithms.ldp_fl.accuracy evaluates at once (its EVALUATED_AT_ONCE; None: all)
EVALUATED_AT_ONCE: int | None = 512


def model_shape(model: str, side: int) -> tuple[int, int, int]:
    """``(parameters P, activations per image, multiply-adds per image)`` of a forward pass."""
    pixels = side * side
    if model == "logistic":
        return pixels * CLASSES + CLASSES, CLASSES, pixels * CLASSES
    if model == "mlp":
        weights = pixels * HIDDEN + HIDDEN * CLASSES
        return weights + HIDDEN + CLASSES, HIDDEN + CLASSES, weights
    kernel, width = (25, 32) if side >= 16 else (9, 16)
    half, flat = (side // 2) ** 2, (side // 4) ** 2 * 2 * width
    parameters = (kernel * width + width) + (kernel * width * 2 * width + 2 * width)
    parameters += (flat * 4 * width + 4 * width) + (4 * width * CLASSES + CLASSES)
    activations = pixels * (kernel + width) + half * (width + kernel * width + 2 * width) + flat
    products = pixels * kernel * width + half * kernel * width * 2 * width + flat * 4 * width
    return parameters, activations + 4 * width + CLASSES, products + 4 * width * CLASSES


def ldp_fl_cost(config: LDPFL, plan: CostPlan) -> Cost:
    """The clients' images on the device; per chunk of the round's cohort, a client's weights,
    optimizer state and report (``[P]`` each) and the activations of one local batch (3x for
    the backward pass); the evaluation of every round's model on the test images and of the
    last on the pooled training images, all of them at once (as ``jfed.algorithms.ldp_fl.
    accuracy`` evaluates today). Work: the local steps' forward and backward passes, the
    evaluations, and one two-point draw per weight."""
    side, training, test = IMAGES[config.dataset]
    clients = max(1, min(config.clients, training))
    images = training // clients  # per client
    pooled = images * clients
    selected = max(1, round(config.fraction * config.clients))
    parameters, activations, products = model_shape(config.model, side)
    batch = min(config.batch, max(images, 1))
    steps = config.local_epochs * (images // batch)
    data = FLOAT32 * (pooled + test) * (side * side + 1)
    training_memory = (
        min(plan.chunk, selected)
        * FLOAT32
        * (MESSAGE_COPIES * parameters + 3 * ACTIVATION_COPIES * batch * activations)
    )
    at_once = max(pooled, test) if EVALUATED_AT_ONCE is None else EVALUATED_AT_ONCE
    evaluation = FLOAT32 * ACTIVATION_COPIES * min(at_once, max(pooled, test)) * activations
    memory = int(data + max(training_memory, evaluation))
    per_client = steps * batch * 3 * products * MATMUL_OPERATIONS + CLIENT_OPERATIONS * parameters
    evaluations = (config.rounds * test + pooled) * products * MATMUL_OPERATIONS
    work = int(config.rounds * selected * per_client + evaluations)
    hint = (
        "its evaluation holds the activations of every training image at once: --model mlp or "
        "logistic, or --dataset digits, need far less" if evaluation > training_memory else ""
    )  # fmt: skip
    return Cost(memory, work, ("batch", "local_epochs", "rounds", "clients"), hint=hint)


register(Method(
    "ldp-fl", LDPFL, "LDP-FL: local training, two-point weight perturbation, split and shuffle",
    "local (eps, delta)-DP of a client's whole transcript (every weight of every round it "
    "reports; records also state the paper's per-weight eps and the shuffle's amplification)",
    "one client's local data (its local models), replaced by any other",
    "untrusted cloud that sees every report (the client-level eps needs no anonymity; the "
    "shuffled eps in the record assumes a trusted split-and-shuffle channel)",
    "jfed.methods.ldp_fl:LDPFLExperiment",
    LDP_FL_PAPER, "two-point weight perturbation with split and shuffle", cost=ldp_fl_cost,
    metrics=ACCURACY,
))  # fmt: skip
