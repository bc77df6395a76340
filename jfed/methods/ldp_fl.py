"""LDP-FL as an experiment: image clients, local training of a flax model, two-point
perturbation, split and shuffle (:mod:`jfed.algorithms.ldp_fl`), and its privacy statements.

Privacy, honestly. What a record certifies (``epsilon_certified``) is the guarantee about a
client: its whole transcript, each of the P weights of every report, over every round it may
take part in (R: a uniform cohort may pick any client in every round), each weight an eps0-DP
two-point report, composed exactly by the optimal composition of pure DP (the binomial law of
randomized response), at the configuration's delta, against a cloud that sees every report: the
composition of the events the round's local randomizer states
(:class:`~jfed.privacy.two_point.TwoPointSum`: P reports per release, bounded adjacency).
Beside it, never in its place: ``per_report_epsilon``, the paper's eps per weight, which is a
client's guarantee only under its anonymity assumption; and ``epsilon_shuffled``, the central eps
that amplification by shuffling gives if the split-and-shuffle channel is trusted, by the
numerical bound of Feldman, McMillan and Talwar (every position's shuffle composed over the P x R
shuffles a client takes part in), with their closed form stated not applicable where its
condition on n fails.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jfed.algorithms import ldp_fl
from jfed.data.images import load_images
from jfed.data.silos import SiloTask
from jfed.engine import simulate
from jfed.methods import declared
from jfed.methods.experiment import Experiment, Output, guarantee_fields, timings
from jfed.methods.record_fields import RecordFields

PROTECTED_UNIT = "client"
CLIENT_NOTION = "local (eps, delta)-DP of a client's whole transcript"
PER_REPORT_NOTION = (
    "pure eps-LDP of each reported weight alone (two-point mechanism): the paper's claim, a "
    "guarantee about a client only under its anonymity assumption (no one links a client's "
    "weights to each other or across rounds)"
)
SHUFFLED_NOTION = (
    "central (eps, delta)-DP against the cloud, only if the split-and-shuffle channel is "
    "trusted: each position's values of a round reach the cloud as an unordered multiset"
)
SHUFFLED_ACCOUNTANT = (
    "amplification by shuffling, numerical bound (Feldman-McMillan-Talwar Thm 3.2) per "
    "position and round, composed over the P x R shuffles by dp-accounting's PLD"
)


@functools.cache
def shuffled_epsilon(epsilon0: float, reports: int, delta: float, shuffles: int) -> float | None:
    """Central eps of ``shuffles`` shuffles of ``reports`` eps0-LDP reports each, by the
    numerical clones bound (:func:`jfed.privacy.shuffle.clones_epsilon`), never above the
    transcript's local eps; ``None`` past the reports per shuffle that bound sums over. Cached:
    every seed of a sweep shares it."""
    from jfed.privacy import shuffle

    if reports > shuffle.CLONES_MAX_REPORTS:
        return None
    return shuffle.clones_epsilon(epsilon0, reports, delta, shuffles)


def shuffle_closed_form(epsilon0: float, reports: int, delta: float) -> dict:
    """The closed form of amplification by shuffling (FMT Thm 3.1) for one shuffle, or why it
    does not apply."""
    from jfed.privacy import shuffle

    limit = shuffle.shuffle_validity_limit(reports, delta)
    if epsilon0 > limit:
        return {
            "shuffle_closed_form_epsilon": None,
            "shuffle_closed_form_note": (
                f"not applicable: FMT Thm 3.1 needs eps0 <= ln(n / (16 ln(2/delta))) = "
                f"{limit:.3g} for n = {reports} reports per shuffle, got eps0 = {epsilon0:g}"
            ),
        }
    epsilon, _ = shuffle.shuffle_epsilon(epsilon0, reports, delta)
    return {
        "shuffle_closed_form_epsilon": epsilon,
        "shuffle_closed_form_note": "FMT Thm 3.1, one position of one round (not composed)",
    }


class LDPFLExperiment(Experiment):
    """Chosen on training accuracy (the image tasks have no validation split); reports test
    accuracy beside the noise-free run of the same seed."""

    record_fields = RecordFields(
        inside=("test_accuracy", "test_accuracy_per_round"),
        outside=("train_accuracy", "clipped_fraction", "largest_radius",
                 "noise_free_test_accuracy"),
    )  # fmt: skip
    """The model's test accuracy is post-processing of the randomized reports; the training
    clients' accuracy, the clipped count, the largest weight radius and the noise-free run's
    accuracy read client data unnoised."""

    outputs = (
        Output("weights", "state.weights"),
        Output("weights_per_round", "infos.weights"),
        Output("radius", "infos.radius", reduce="last"),
        Output("clipped_fraction", "infos.clipped_fraction", reduce="mean"),
    )

    def __init__(self, config: declared.LDPFL, task: SiloTask | None = None) -> None:
        super().__init__(config)
        self.task = (
            task
            if task is not None
            else load_images(config.dataset, config.clients, config.split, config.data_seed)
        )
        self.records = int(np.asarray(self.task.train.counts)[0])
        self.selected = max(1, round(config.fraction * config.clients))
        self._program = ldp_fl.LDPFL(
            ldp_fl.MODELS[config.model], self.task.details["side"], self.task.classes,
            self.task.n_silos, self.selected, self.records, config.local_epochs, config.batch,
            ldp_fl.RANGES[config.ranges],
        )  # fmt: skip
        self._noise_free: dict = {}
        X_test, y_test = self.task.test
        self._test = (jnp.asarray(X_test, jnp.float32), jnp.asarray(y_test))
        X_train, y_train = self.task.train.pooled()
        self._train = (jnp.asarray(X_train, jnp.float32), jnp.asarray(y_train))

    @property
    def rounds(self) -> int:
        return self.config.rounds

    def default_plan(self):
        """One client at a time on CPU, where it trained a round's 100 clients faster than all
        of them vmapped (2.04 s against 2.85 s for the paper's CNN on 30 procedural 28x28 images
        each; ``bench/results/ldp_fl_cpu.json``). Accelerators keep the backend's plan."""
        from jfed.engine import ExecutionPlan

        one_at_a_time = {"cpu": ExecutionPlan(block_size=1, chunk_size=1)}
        return one_at_a_time.get(jax.default_backend()) or ExecutionPlan.for_backend()

    @property
    def algorithm(self) -> ldp_fl.LDPFL:
        return self._program

    def identity(self) -> dict:
        return {
            "dataset": self.config.dataset,
            "n_clients": self.task.n_silos,
            "dim": self.task.train.dim,
            "images_per_client": self.records,
            "selected_per_round": self.selected,
            "weights_per_report": self._program.unravel()[2],
        }

    def delta_of(self, config: declared.LDPFL) -> float:
        """The configuration's delta, by default ``N^-1.1`` (N clients), as DP-FedAvg's."""
        return config.delta if config.delta is not None else self.task.n_silos**-1.1

    def hyperparams(
        self, config: declared.LDPFL, noise_multiplier: float | None = None
    ) -> ldp_fl.Hyperparams:
        """The run's traced numbers: eps per weight, the range, the learning rate (LDP-FL is not
        calibrated: its eps per weight is configured, so ``noise_multiplier`` is unused)."""
        del noise_multiplier
        return ldp_fl.hyperparams(
            config.learning_rate, config.epsilon, config.weight_center, config.weight_radius
        )

    def calibrate(self, config: declared.LDPFL) -> tuple[ldp_fl.Hyperparams, dict]:
        """The run's numbers and what it certifies: the composition, under the optimal
        composition of pure DP, of the releases its rounds make (P reports of eps per client
        and round), with the per-weight and shuffled statements beside it."""
        from jfed.privacy import certify
        from jfed.privacy.accounting import OptimalPure

        hp = self.hyperparams(config)
        weights = self._program.unravel()[2]
        # a local randomizer's release is not wrapped by the cohort: every round counts, since
        # any client may be selected in every round, whatever the fraction
        participations = config.rounds
        delta = self.delta_of(config)
        guarantee = certify(
            self.run_event(hp), delta, accountant=OptimalPure(), adjacency=self.ledger().adjacency,
            notion=f"{CLIENT_NOTION} ({weights} weights per report, up to {participations} "
            "rounds)", protected=self.method.protected, trust_model=self.method.trust_model,
        )  # fmt: skip
        shuffled = shuffled_epsilon(config.epsilon, self.selected, delta, weights * participations)
        return hp, {
            **guarantee_fields(guarantee, 0.0),
            "protected_unit": PROTECTED_UNIT,
            "releases_per_client": weights * participations,
            "per_report_epsilon": config.epsilon,
            "per_report_notion": PER_REPORT_NOTION,
            "epsilon_basic_composition": config.epsilon * weights * participations,
            "epsilon_shuffled": shuffled,
            "shuffled_notion": SHUFFLED_NOTION,
            "shuffled_accountant": SHUFFLED_ACCOUNTANT
            if shuffled is not None
            else "not computed: more reports per shuffle than the numerical bound sums over",
            **shuffle_closed_form(config.epsilon, self.selected, delta),
        }

    def _accuracy(self, weights, split) -> float:
        return float(ldp_fl.accuracy(self._program, jnp.asarray(weights), *split))

    def noise_free(self, config: declared.LDPFL) -> float:
        """Test accuracy of the same run without perturbation (same seed, same settings)."""
        key = (config.seed, config.learning_rate)  # no range: the noise-free run is not clipped
        if key not in self._noise_free:
            import dataclasses

            program = dataclasses.replace(self._program, private=False)
            hp = self.hyperparams(config)
            state, _ = simulate(program, self.task.train, hp, jax.random.key(config.seed),
                                config.rounds, self.default_plan())  # fmt: skip
            self._noise_free[key] = self._accuracy(state.weights, self._test)
        return self._noise_free[key]

    def evaluate(self, outputs: dict[str, np.ndarray], config: declared.LDPFL) -> dict:
        return {
            "test_accuracy": self._accuracy(outputs["weights"], self._test),
            "train_accuracy": self._accuracy(outputs["weights"], self._train),
            "test_accuracy_per_round": [
                self._accuracy(w, self._test) for w in outputs["weights_per_round"]
            ],
            "noise_free_test_accuracy": self.noise_free(config),
            "clipped_fraction": float(outputs["clipped_fraction"]),
            "largest_radius": float(outputs["radius"]),
        }

    @staticmethod
    def summary(record: dict) -> str:
        shuffled = record.get("epsilon_shuffled")
        shuffled_text = (
            "not computed" if shuffled is None or not math.isfinite(shuffled)
            else f"eps = {shuffled:.4g}"
        )  # fmt: skip
        return (
            f"ldp-fl ({record['model']}): client-level eps = {record['epsilon_certified']:.4g} "
            f"at delta = {record['delta']:.3g} ({record['notion']}; protected unit: "
            f"{record['protected_unit']}, {record['protected']}) [accountant: "
            f"{record['accountant']}] | test accuracy {record['test_accuracy']:.4f} (noise-free "
            f"{record['noise_free_test_accuracy']:.4f}) on {record['dataset']} "
            f"({record['n_clients']} clients of {record['images_per_client']} images, "
            f"{record['selected_per_round']} per round, R={record['rounds']}, "
            f"E={record['local_epochs']}, B={record['batch']}) | eps per weight "
            f"{record['per_report_epsilon']:g} (the paper's claim; a client's guarantee only "
            f"under its anonymity assumption) | if the shuffler is trusted: {shuffled_text} "
            f"(central, same delta) | {timings(record)}"
        )
