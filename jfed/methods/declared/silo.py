"""The silo methods of the inter-silo record-level DP paper: Noisy MB-SGD, its accelerated,
shuffled and local-step variants, and the non-private baselines. Their experiments are in
:mod:`jfed.methods.silo`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Self

from jfed import catalog
from jfed._validation import UsageError
from jfed.methods.config import Config
from jfed.methods.cost import (
    CLIENT_OPERATIONS,
    FLOAT32,
    KEY,
    MESSAGE_COPIES,
    Cost,
    CostPlan,
    pld_calibration_cost,
    pld_cost,
)
from jfed.methods.declared.common import (
    RIDGE,
    batch,
    check_audit_canaries,
    data_seed,
    gradient_clip,
    projection_radius,
)
from jfed.methods.fields import (
    EPSILON,
    MAX_ROUNDS,
    NONNEGATIVE,
    OPEN_UNIT,
    POSITIVE,
    UNIT,
    integers,
    param,
)
from jfed.methods.registry import Method, Metrics, register

SILO_PAPER = (
    "Lowy and Razaviyayn, Private Federated Learning Without a Trusted Server: Optimal "
    "Algorithms for Convex Losses"
)
ISRL = "inter-silo record-level (ISRL) (eps, delta)-DP of each silo's transcript"
SILO_RECORD = "one record of one silo (replace-one), against the server and the other silos"
SILO_TRUST = "people trust their own silo, not the server or other silos"
EXPERIMENTS = "jfed.methods.silo:"
MINIBATCH = "how a silo draws its minibatch"


def counted_availability(availability: str) -> bool:
    """Whether the availability ``availability`` names takes ``--available`` (M silos)."""
    from jfed.algorithms.silo_sgd import AVAILABILITIES

    return AVAILABILITIES[availability].counted


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
    data_seed: int = data_seed()

    def check(self) -> Self:
        shape = SILO_SHAPES.get(self.dataset)
        if self.silos is not None and shape is not None and self.silos > shape[1]:
            # an empty silo has no minibatch (and no delta = 1 / n^2 to calibrate to)
            raise UsageError(
                f"expected --silos <= {shape[1]} with --dataset {self.dataset} (its "
                f"{shape[1]} training records, at least one a silo), got --silos={self.silos}"
            )
        return super().check()

    @property
    def dataset_label(self) -> str:
        return self.dataset


@dataclass(frozen=True)
class SiloTraining(SiloData):
    """Minibatch SGD across silos: the fields every silo algorithm has."""

    rounds: int = param(25, "communication rounds R", unit="rounds",
                        range=integers(1, MAX_ROUNDS), group="run")  # fmt: skip
    batch: int = batch(10, 10**7)
    step_size: float = param(1.0, "step size eta (AC-SA: gamma)", range=POSITIVE, tunable=True)
    gradient_clip: float = gradient_clip(1.0)
    radius: float = projection_radius()
    availability: str = param("all", "which silos take part in a round",
                              choices=catalog.AVAILABILITIES)  # fmt: skip
    available: int | None = param(
        None, "silos taking part per round M (fixed) or expected (bernoulli)", kind=int,
        unit="silos", range=integers(0, 10**6), default_text="all",
        requires=(lambda c: counted_availability(c.availability),
                  "only with --availability fixed or bernoulli"),
    )  # fmt: skip
    average_last: int = param(
        0, "average the last this many iterates (0: all)", unit="rounds",
        range=integers(0, MAX_ROUNDS),
        requires=(lambda c: c.average_last <= c.rounds,
                  "only up to --rounds (0 averages all R iterates)"),
    )  # fmt: skip


@dataclass(frozen=True)
class SiloPrivacy(SiloTraining):
    """Inter-silo record-level DP: each silo's transcript is (eps, delta)-DP in its records."""

    epsilon: float = param(1.0, "target eps of each silo", range=EPSILON, group="privacy")
    delta: float | None = param(
        None, "target delta of each silo", kind=float, range=OPEN_UNIT,
        default_text="1 / n_min^2, n_min the smallest silo", group="privacy",
    )  # fmt: skip


SILO_NOISES = ("discrete", "float")
"""``--noise`` of the calibrated silo methods: discrete (the default: each record's clipped
gradient rounded to an integer grid, the silo's integer sum plus exact discrete Gaussian noise)
or float (float32 Gaussian: the ideal real-valued mechanism, floating-point sampling not
modelled)."""


@dataclass(frozen=True)
class Calibrated(SiloPrivacy):
    noise: str = param(
        "discrete", "the noise's arithmetic: discrete (each record's clipped gradient rounded to "
        "an integer grid under an exact integer norm bound, the silo's integer sum plus exact "
        "discrete Gaussian noise: the guarantee holds for the program as it runs) or float "
        "(float32 Gaussian: the ideal real-valued mechanism, floating-point sampling not "
        "modelled)", choices=SILO_NOISES, group="privacy",
    )  # fmt: skip
    calibration: str = param(
        "exact", "noise calibration: exact (PLD, Poisson sampling) or the paper's formulas",
        choices=catalog.SILO_CALIBRATIONS, group="privacy",
    )  # fmt: skip
    sampling: str | None = param(
        None, MINIBATCH, kind=str, choices=catalog.SAMPLINGS,
        default_text="poisson with --calibration exact, else with-replacement",
    )  # fmt: skip

    audit_canaries: int = param(
        0, "canary records M added to the smallest silo for an empirical privacy audit of the "
        "run (Steinke, Nasr and Jagielski's one-run lower bound; 0: no audit): each a record whose "
        "gradient is a fixed random direction at the clip norm, in the silo with probability 1/2, "
        "Poisson-sampled, clipped and noised as the silo's own records (--sampling poisson)",
        unit="canary records", range=integers(0, 1_000_000), group="privacy",
    )  # fmt: skip

    poisson_hint: ClassVar[str] = "use --sampling poisson"
    """How a run of the method samples by Poisson (what the audit's refusal says)."""

    @property
    def drawn_sampling(self) -> str:
        """The name of the sampler the run draws its records with (``--sampling`` resolved)."""
        from jfed.algorithms.silo_privacy import CALIBRATIONS

        return self.sampling or CALIBRATIONS[self.calibration].sampling

    def check(self) -> Self:
        """The audit's refusals: one canary, and a sampler whose draws a canary record would
        change. A canary record joins its silo's minibatches as its records do only under
        Poisson sampling, where each record is drawn on its own coin: with replacement, without
        replacement or in one pass, a silo's K draws are shared among its records, so a canary
        drawn would displace a real record's draw (or change the minibatch's size)."""
        check_audit_canaries(self.audit_canaries)
        if self.audit_canaries and self.drawn_sampling != "poisson":
            raise UsageError(
                "--audit-canaries places canary records in a silo's Poisson-sampled minibatches "
                f"(each record on its own coin), not {self.drawn_sampling}: {self.poisson_hint}"
            )
        return super().check()


@dataclass(frozen=True)
class NoisyMBSGD(Calibrated):
    """ISRL-DP Noisy MB-SGD (Algorithm 2 of the silo paper)."""


@dataclass(frozen=True)
class AcceleratedMBSGD(Calibrated):
    """Accelerated (AC-SA) Noisy MB-SGD (Algorithm 1 of the silo paper): one pass, ERM, or
    multi-stage restarts.

    Its audit (``--audit-canaries``) needs ``--sampling poisson``: one pass deals each silo's
    records out of a permutation fixed for the run, K a round, so a canary record joining that
    order would take a real record's place in it (or grow a round's batch past K) and the real
    records' draws would change with the audit; under Poisson sampling a canary is drawn on a coin
    of its own, as each record is."""

    sampling: str | None = param(None, MINIBATCH, kind=str, choices=catalog.SAMPLINGS,
                                 default_text="one-pass")  # fmt: skip
    # one pass uses rounds x batch records of every silo once: 25 x 1 fits the smallest silo of
    # every built-in data set (digits-evenodd: 47 records)
    batch: int = batch(1, 10**7)
    ridge: float = param(0.0, RIDGE, range=NONNEGATIVE, tunable=True)
    multistage: bool = param(False, "multi-stage restarts")

    @property
    def drawn_sampling(self) -> str:
        return self.sampling or "one-pass"


@dataclass(frozen=True)
class ShuffleMBSGD(SiloPrivacy):
    """Shuffle-DP Noisy MB-SGD (section 5 of the silo paper): per-record messages, amplified by
    shuffling. Each silo samples its K records without replacement (one message per record a
    round, the one changed message the shuffling bound covers), so K is at most the smallest
    silo's records."""

    # the shuffling bound needs more than 16 ln(2 / delta) messages a round: 25 silos x 20
    # records are 500, enough at the default delta of every built-in data set
    batch: int = batch(20, 10**7)
    # float by default, as the other local randomizers' (modulated, dpsgd): every message draws
    # its own exact noise on the grid, K times a silo's draws (bench/shuffle_exact.py)
    noise: str = param(
        "float", "the messages' arithmetic: float (float32 Gaussian local randomizer: the ideal "
        "real-valued mechanism, floating-point sampling not modelled; the fast default) or "
        "discrete (each message its record's clipped gradient rounded to an integer grid under "
        "an exact integer norm bound plus its own exact discrete Gaussian noise: the guarantee "
        "holds for the program as it runs, at a speed cost)", choices=SILO_NOISES,
        group="privacy",
    )  # fmt: skip
    audit_canaries: int = param(
        0, "canary records M beside the smallest silo for an empirical privacy audit of the run "
        "(Steinke, Nasr and Jagielski's one-run lower bound; 0: no audit): each a record slot "
        "of its own, its gradient a fixed random direction at the clip norm if its coin (1/2) "
        "includes it, else 0, sending one message a round with probability K/n_s (as a "
        "record drawn among K without replacement) through the same local randomizer, shuffled "
        "with the records' (the records' own draws unchanged)",
        unit="canary records", range=integers(0, 1_000_000), group="privacy",
    )  # fmt: skip

    def check(self) -> Self:
        """The audit's refusal (at least two canaries) and the availability's: the shuffling
        bound is stated for the number of messages a round shuffles, which ``--availability
        bernoulli`` leaves random (a round of few available silos amplifies less than the
        expected count would)."""
        check_audit_canaries(self.audit_canaries)
        if self.availability == "bernoulli":
            raise UsageError(
                "--availability bernoulli: shuffle-mbsgd's shuffling bound needs the number of "
                "messages a round shuffles, which a random set of silos leaves random; use "
                "--availability fixed (exactly --available silos a round) or all"
            )
        return super().check()


@dataclass(frozen=True)
class LocalSGD(Calibrated):
    """ISRL-DP Local SGD: K noisy local steps per silo per round (the silo paper's baseline)."""

    sampling: str | None = param(
        None, MINIBATCH, kind=str, choices=catalog.LOCAL_SGD_SAMPLINGS,
        default_text="poisson with --calibration exact, else with-replacement",
    )  # fmt: skip


@dataclass(frozen=True)
class MBSGD(SiloTraining):
    """Non-private minibatch SGD across silos."""

    sampling: str | None = param(None, MINIBATCH, kind=str, choices=catalog.SAMPLINGS,
                                 default_text="with-replacement")  # fmt: skip


@dataclass(frozen=True)
class FedAvg(SiloTraining):
    """Non-private Local SGD (FedAvg): K local steps per silo per round."""

    sampling: str | None = param(None, MINIBATCH, kind=str, choices=catalog.LOCAL_SGD_SAMPLINGS,
                                 default_text="with-replacement")  # fmt: skip


# ------------------------------------------------------------------------------------- costs
# (jfed.methods.cost) the built-in silo data sets, as `jfed datasets` lists them: silos by
# default, training records, features d, and the smallest silo (None: records / silos); the
# -sorted tasks split evenly. A record's clipped gradient took about 200 operations per feature
# (noisy-mbsgd on 100 synthetic silos, K = 1000, d = 20: 2.0 s for 5e6 gradients).

SILO_SHAPES: dict[str, tuple[int, int, int, int | None]] = {
    "digits-evenodd": (25, 1438, 50, 47),
    "digits-bylabel": (10, 1438, 64, 133),
    **{f"{name}-sorted": (10, records, catalog.REGRESSION_DATASETS[name], None) for name, records
       in (("co2", 1827), ("fair", 5093), ("modechoice", 672), ("randhie-lncoins", 16152),
           ("randhie-fmde", 16152))},
}  # fmt: skip
SYNTHETIC_SILO = (2000, 20)  # records per synthetic silo, d
DIGITS_SILO_SIZES = {"digits-evenodd": 14, "digits-bylabel": 8}  # distinct silo sizes
FEATURE_OPERATIONS = 200
EXACT_DISCRETIZATION = 1e-3  # jfed.algorithms.silo_privacy.PLD_DISCRETIZATION


def silo_shape(config: SiloData) -> tuple[int, int, int, int]:
    """``(silos, records of the largest silo, d, records of the smallest)`` of the data."""
    if config.dataset == "synthetic":
        records, dim = SYNTHETIC_SILO
        return config.silos or 25, records, dim, records
    default, total, dim, smallest = SILO_SHAPES[config.dataset]
    silos = config.silos or default
    largest = -(-total // silos)
    return silos, largest, dim, smallest if smallest is not None else max(1, total // silos)


def _silo_accounting(config: SiloTraining, smallest: int, silos: int) -> Cost | None:
    """What the privacy calibration composes on the host before the program runs: the exact
    calibration's PLD over R rounds at q = K / n (Local SGD: K R steps at q = 1 / n), once per
    distinct silo size; a formula's reference eps, one PLD composition per silo size."""
    if not isinstance(config, Calibrated):
        return None
    local = isinstance(config, LocalSGD)
    rate = min(1.0, (1 if local else config.batch) / smallest)
    steps = config.rounds * (config.batch if local else 1)
    delta = config.delta if config.delta is not None else 1.0 / smallest**2
    sizes = {"synthetic": 1}.get(config.dataset, DIGITS_SILO_SIZES.get(config.dataset, 2))
    sizes = min(sizes, silos)
    hint = "--calibration theorem answers at once"
    if config.calibration == "exact":
        if isinstance(config, AcceleratedMBSGD) and config.sampling in (None, "one-pass"):
            return None  # one Gaussian release per record: a closed form
        return pld_calibration_cost(
            steps, rate, config.epsilon, delta, EXACT_DISCRETIZATION, replace_one=True,
            calibrations=sizes, hint=hint,
        )  # fmt: skip
    # the formulas' noise (the experiments' formula, the smaller): z = sqrt(8 ln(1/delta) R) / (n
    # eps) in units of a record's share L / K, and its exact eps for reference
    spread = math.sqrt(8 * math.log(1 / delta) * steps)
    multiplier = spread * config.batch / (smallest * config.epsilon)
    evaluations = silos if local else sizes
    return pld_cost(multiplier, steps, rate, EXACT_DISCRETIZATION, replace_one=True,
                    evaluations=evaluations, hint="")  # fmt: skip


def silo_cost(config: SiloTraining, plan: CostPlan) -> Cost:
    """The silos' records ``[N, n_max, d]`` and, per chunk of silos, the records a round
    touches (``K`` drawn, or every record of the silo when Poisson-sampled) with their clipped
    gradients; Local SGD's K steps touch one record each and split K keys. Work: rounds x silos
    x records touched x d."""
    silos, largest, dim, smallest = silo_shape(config)
    sampling = getattr(config, "sampling", None) or "with-replacement"
    if isinstance(config, Calibrated) and config.calibration == "exact" and sampling != "one-pass":
        sampling = config.sampling or "poisson"
    local = isinstance(config, (LocalSGD, FedAvg))
    touched = largest if sampling == "poisson" else (1 if local else config.batch)
    steps = config.batch if local else 1
    per_silo = FLOAT32 * MESSAGE_COPIES * touched * dim + (KEY * steps if local else 0)
    memory = FLOAT32 * silos * largest * (dim + 1) + min(plan.chunk, silos) * per_silo
    record = CLIENT_OPERATIONS + FEATURE_OPERATIONS * dim
    work = config.rounds * silos * steps * touched * record
    cost = Cost(memory, work, ("batch", "silos", "rounds"))
    accounting = _silo_accounting(config, smallest, silos)
    return cost if accounting is None else cost.plus_host(accounting)


def silo_metrics(config: SiloData) -> Metrics:
    """Tuned on the excess training risk; reported as the relative RMSE on a regression task
    (the -sorted data sets: squared loss), else as the test error rate."""
    regression = config.dataset.endswith("-sorted")
    return Metrics(selection="excess_train_risk", maximize=False,
                   report="relative_rmse" if regression else "test_error")  # fmt: skip


register(Method(
    "noisy-mbsgd", NoisyMBSGD, "ISRL-DP Noisy MB-SGD across data silos",
    ISRL, SILO_RECORD, SILO_TRUST, EXPERIMENTS + "NoisyMBSGDExperiment",
    SILO_PAPER, "Noisy MB-SGD (Algorithm 2)", cost=silo_cost,
    metrics=silo_metrics,
))  # fmt: skip
register(Method(
    "accel-mbsgd", AcceleratedMBSGD,
    "accelerated (AC-SA) Noisy MB-SGD: one pass, ERM, multi-stage",
    ISRL, SILO_RECORD, SILO_TRUST, EXPERIMENTS + "AcceleratedExperiment",
    SILO_PAPER, "One-pass Accelerated Noisy MB-SGD (Algorithm 1)", cost=silo_cost,
    metrics=silo_metrics,
))  # fmt: skip
register(Method(
    "shuffle-mbsgd", ShuffleMBSGD,
    "shuffle-DP Noisy MB-SGD: per-record messages, amplification by shuffling",
    "central (eps, delta)-DP via shuffling; each message (eps0, delta0)-LDP", SILO_RECORD,
    "a trusted shuffler; the server sees shuffled messages", EXPERIMENTS + "ShuffleExperiment",
    SILO_PAPER, "Noisy MB-SGD with a shuffler (section 5)", cost=silo_cost,
    metrics=silo_metrics,
))  # fmt: skip
register(Method(
    "local-sgd", LocalSGD, "ISRL-DP Local SGD: K noisy local steps per silo",
    ISRL, SILO_RECORD, SILO_TRUST, EXPERIMENTS + "LocalSGDExperiment",
    SILO_PAPER, "Noisy Local SGD (baseline)", cost=silo_cost,
    metrics=silo_metrics,
))  # fmt: skip
register(Method(
    "mbsgd", MBSGD, "non-private minibatch SGD across silos",
    "none", "nothing", "trusted server sees raw gradients", EXPERIMENTS + "MBSGDExperiment",
    SILO_PAPER, "minibatch SGD (non-private baseline)", private=False, cost=silo_cost,
    metrics=silo_metrics,
))  # fmt: skip
register(Method(
    "fedavg", FedAvg, "non-private Local SGD (FedAvg)",
    "none", "nothing", "trusted server sees raw updates", EXPERIMENTS + "FedAvgExperiment",
    SILO_PAPER, "Local SGD / FedAvg (non-private baseline)", private=False, cost=silo_cost,
    metrics=silo_metrics,
))  # fmt: skip
