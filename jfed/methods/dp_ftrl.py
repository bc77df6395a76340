"""DP-FTRL (``dp-ftrl``: tree aggregation with restarts and Honaker's estimator, or independent
noise) and BLT-DP-FTRL (``blt-dp-ftrl``) on DP-FedAvg's populations, written on the public method
API as a user's method is (:mod:`jfed.algorithms.dp_ftrl`).

A round's cohort is the schedule's (``--schedule cyclic | shuffled | min-separation``), drawn from
the run's schedule key; the aggregator is calibrated for the schedule's participation pattern
over the run's R rounds (the engine checks the two agree when the round is traced).

Privacy: the whole run is one Gaussian mechanism ``GaussianDpEvent(z)`` (user-level,
add-or-remove, every participation of a client, no amplification by sampling), certified from
the aggregator's run event by the ledger; each fresh draw has std ``z C sens``, ``sens`` the
strategy's sensitivity under the pattern. A record states the sensitivity and the noise each
round adds to the released mean (``mean_increment_noise_std``: the std of a coordinate of a
round's noise increment on the mean, averaged over the rounds; ``prefix_noise_std_final``: the
std of the noise on the running sum of the releases after the last round).

Audit (``--audit-canaries M``): the cohort is a schedule, not a sample, so each canary takes
part as the schedule lets a client take part: canary i, if its coin (probability 1/2) includes
it, in the rounds ``t = i (mod b)``, b the schedule's period (once per group cycle, epoch or
min-separation), through the same clipping and the same correlated noise. Its score is its
largest cosine with what the mechanism released of its rounds: with Honaker's tree (the
default), the round's own leaf node (the round's clipped sum plus the leaf's own draw, a row of
the certified strategy, carrying one draw's noise); otherwise the round's release (the model
increment, a difference of the released noised prefix sums). Either is part or a
post-processing of what the certified mechanism releases, so the one-run lower bound holds for
the run's certified guarantee whatever the noise's correlation across rounds.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jfed._validation import UsageError
from jfed.algorithms import dp_ftrl
from jfed.engine.schedules import CyclicGroups, MinSeparation, ShuffledEpochs
from jfed.methods.declared.dp_ftrl import check_separation
from jfed.methods.dp_fedavg import DEFAULT_GRID_NORM, grid_noise_std
from jfed.methods.experiment import Output
from jfed.methods.federated import FederatedExperiment, server_momentum
from jfed.privacy.correlated import (
    BltNoise,
    CorrelatedGaussianSum,
    CorrelatedGaussianSumParams,
    IndependentNoise,
    TreeNoise,
)
from jfed.privacy.discrete_tree import DiscreteTreeSum, largest_tree_grid_norm
from jfed.privacy.participation import Participation


def _cyclic(n_clients: int, cohort_size: int, config: Any) -> CyclicGroups:
    return CyclicGroups(max(1, n_clients // cohort_size))


def _shuffled(n_clients: int, cohort_size: int, config: Any) -> ShuffledEpochs:
    return ShuffledEpochs(max(1, n_clients // cohort_size))


def _min_separation(n_clients: int, cohort_size: int, config: Any) -> MinSeparation:
    separation = config.separation or max(1, n_clients // cohort_size)
    check_separation(separation, n_clients, cohort_size)
    return MinSeparation(separation, cohort_size)


SCHEDULES = {"cyclic": _cyclic, "shuffled": _shuffled, "min-separation": _min_separation}
"""Each ``--cohort``'s schedule from ``(N, K, config)``."""


def period(schedule: Any) -> int:
    """Rounds of one pass of the schedule (b groups, or an epoch of E rounds)."""
    return int(getattr(schedule, "groups", None) or getattr(schedule, "separation", None)
               or schedule.rounds_per_epoch)  # fmt: skip


def _tree(config: Any, schedule: Any, participation: Participation) -> TreeNoise:
    return TreeNoise(config.tree_restart or period(schedule), config.honaker)


def _independent(config: Any, schedule: Any, participation: Participation) -> IndependentNoise:
    return IndependentNoise()


def _blt(config: Any, schedule: Any, participation: Participation) -> BltNoise:
    return optimized_blt(participation, config.blt_buffers)


@functools.lru_cache(maxsize=16)
def optimized_blt(participation: Participation, buffers: int) -> BltNoise:
    """jax-privacy's BLT optimized for ``participation`` (max error), at most ``buffers``
    buffers; searched once per pattern in a process (seconds to minutes on a CPU)."""
    return BltNoise.optimized(participation, max_buffers=buffers)


NOISES = {"tree": _tree, "independent": _independent}
"""Each ``--noise-strategy``'s strategy from ``(config, schedule, participation)``; BLT-DP-FTRL's is
:func:`optimized_blt`."""


def grid_tree(noise: TreeNoise | IndependentNoise) -> TreeNoise:
    """The tree a strategy runs as on the integer grid (:class:`~jfed.privacy.DiscreteTreeSum`):
    the tree itself; independent noise as trees of one round each (every round's node is its own
    fresh draw and the released increment is that node: the same mechanism, sensitivity
    ``sqrt(k)`` under k participations)."""
    return TreeNoise(1, honaker=False) if isinstance(noise, IndependentNoise) else noise


class FtrlExperiment(FederatedExperiment):
    """DP-FTRL or BLT-DP-FTRL (the configuration's class decides the noise)."""

    config: Any  # a DP-FTRL or BLT-DP-FTRL configuration

    @property
    def audited_release(self) -> str:  # type: ignore[override]
        """What the canaries are scored against (the aggregator's audit view, where it has one:
        :meth:`jfed.privacy.correlated.CorrelatedGaussianSum.audit_view`)."""
        turns = "the canaries take part once every schedule period, in turn"
        if isinstance(self.noise, TreeNoise) and self.noise.honaker:
            return (f"each round's own leaf node of the tree (its clipped sum plus the leaf's "
                    f"draw, a row of the certified strategy; {turns})")  # fmt: skip
        return (f"the rounds' released increments of the noised prefix sums (post-processing "
                f"of the releases; {turns})")  # fmt: skip

    kept = (
        Output("params", "state.params"),
        Output("clipped_fraction", "infos.clipped_fraction"),
        Output("cohort_size", "infos.cohort_size"),
    )

    def make_cohort(self, configs: list[Any]) -> Any:
        """The schedule ``--cohort`` names, for N clients and cohorts of K."""
        return SCHEDULES[self.config.schedule](self.n_clients, self.config.cohort_size,
                                               self.config)  # fmt: skip

    @property
    def participation(self) -> Participation:
        return self.cohort.participation(self.rounds)

    @property
    def noise(self) -> Any:
        c = self.config
        build = NOISES[c.noise_strategy] if hasattr(c, "noise_strategy") else _blt
        return build(c, self.cohort, self.participation)

    @property
    def expected_cohort(self) -> float:
        """The fixed denominator: the mean group size ``N / b`` (``K`` for min-separation)."""
        if isinstance(self.cohort, MinSeparation):
            return float(self.cohort.size)
        return self.n_clients / period(self.cohort)

    @property
    def noised_sum(self) -> CorrelatedGaussianSum | DiscreteTreeSum:
        """The noised sum the program runs: with ``--noise discrete`` (DP-FTRL's default) the
        tree on the integer grid (:func:`grid_tree`; every node exact discrete Gaussian noise on
        an integer block sum), else the float32 strategy."""
        if not self.noise_choice.grid:
            return CorrelatedGaussianSum(self.noise, self.participation)
        if self.grid_norm is None:
            self.grid_norm = self._grid_for(1.0)
        return DiscreteTreeSum(grid_tree(self.noise), self.participation, self.dimension,
                               self.grid_norm)  # fmt: skip

    @property
    def algorithm(self) -> dp_ftrl.DPFTRL:
        aggregator = dp_ftrl.ftrl_aggregator(
            self.noise, self.participation, self.expected_cohort,
            lambda correlated: self.with_canaries(correlated, period(self.cohort)),
            noised_sum=self.noised_sum,
        )  # fmt: skip
        return dp_ftrl.DPFTRL(self.model, self.training, self.cohort, aggregator)

    # -- the integer grid (--noise discrete)
    @property
    def most_clients(self) -> int:
        """The most records a round sums: the schedule's capacity (its largest group, or K),
        plus the canaries."""
        return int(self.cohort.capacity(self.n_clients)) + self.canaries

    def _grid_for(self, noise_multiplier: float) -> int:
        """The finest grid on which every node's block sum and noise stay in int32
        (:func:`~jfed.privacy.largest_tree_grid_norm`)."""
        try:
            return largest_tree_grid_norm(grid_tree(self.noise), self.participation,
                                          self.dimension, self.most_clients, noise_multiplier,
                                          most=DEFAULT_GRID_NORM)  # fmt: skip
        except ValueError as error:
            raise UsageError(
                f"method {self.name}: {error}: lower --cohort-size or use --noise float"
            ) from None

    def grid_release(self) -> Any:
        return self.noised_sum

    def hyperparams(self, config: Any, noise_multiplier: float | None) -> dp_ftrl.Hyperparams:
        f32 = jnp.float32
        return dp_ftrl.Hyperparams(
            client_learning_rate=f32(config.client_learning_rate),
            server_learning_rate=f32(config.server_learning_rate),
            server_momentum=f32(server_momentum(config)),
            privacy=jax.tree.map(f32, CorrelatedGaussianSumParams(config.update_clip,
                                                                  noise_multiplier)),
        )  # fmt: skip

    def calibration_fields(self, config: Any, noise_multiplier: float, hyper: Any) -> dict:
        """The noise's fields (:meth:`FederatedExperiment.calibration_fields`) with the
        mechanism's sensitivity and the noise it adds per round. On the grid each node's noise
        is the discrete Gaussian's (variance ``2^k m >= (z Delta)^2`` grid units); the
        per-round noise fields are the float strategy's at that node noise. The float draws'
        bounded reach is the strategy's own (``run_reach_delta``: a union bound over every fresh
        draw of the run)."""
        fields = super().calibration_fields(config, noise_multiplier, hyper)
        pattern = self.participation
        strategy = CorrelatedGaussianSum(self.noise, pattern)
        clip = config.update_clip
        multiplier = fields["noise_multiplier"]
        if self.noise_choice.grid:
            node_std = grid_noise_std(self.noised_sum, self.sum_params(clip, multiplier))
            multiplier = node_std / (clip * strategy.sensitivity)
        params = CorrelatedGaussianSumParams(clip, multiplier)
        increments = strategy.increment_noise_std(params) / self.expected_cohort
        prefix = strategy.prefix_noise_std(params) / self.expected_cohort
        fields |= {
            "sigma": float(strategy.noise_std(params)),
            "noise_strategy": strategy.noise.name,
            "sensitivity": strategy.sensitivity,
            "participations": pattern.participations,
            "min_separation": pattern.min_separation,
            "mean_increment_noise_std": float(np.mean(increments)),
            "prefix_noise_std_final": float(prefix[-1]),
        }
        return fields
