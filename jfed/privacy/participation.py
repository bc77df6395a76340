"""Participation patterns: how often one client can take part in a run's releases, and the L2
sensitivity of a linear mechanism under a pattern (host side, float64).

A run of R releases where client i contributes ``g_t`` (``||g_t|| <= 1`` after clipping, zero in
rounds it sits out) to release t, and the mechanism releases ``C g + Z`` (``C: m x R``, ``Z``
Gaussian), has the L2 sensitivity::

    sens(C) = max over participation sets p and vectors g_p of ||C g_p||
            = max_p sqrt(sum_{i,j in p} |X_ij|)

(``X = C^T C``, the Gram matrix; the absolute values make it exact for any directions of the
``g_t``, Choquette-Choo et al. 2023, Eq. 5). Which sets ``p`` are possible is the schedule's
:class:`Participation`: every client in at most k releases, two of them at least b rounds
apart (b-min-separation), optionally all in one residue class mod a period (a fixed cyclic
partition) or at most one in each epoch of E consecutive rounds (shuffled epochs). Nothing here
assumes amplification by sampling: the pattern is the worst case the schedule allows.

:func:`gram_sensitivity` bounds sens from the Gram matrix by the smallest of the bounds that
apply to the pattern, each a valid upper bound (the maximum over a superset of patterns):

- min-separation: jax-privacy's ``get_min_sep_sensitivity_upper_bound_for_X`` (Choquette-Choo
  et al. 2023, Algorithm 4; exact when columns b or more apart are orthogonal, as for a banded
  strategy with at most b bands);
- period P: ``max_g`` of the same bound on the rows and columns of the residue class g (exact
  when the class has at most k rounds: then it is the whole class's sum);
- epochs of E rounds: one participation per epoch: ``r_i = sum over the k largest epochs of
  max_{j in epoch} |X_ij|``, then the sum over the k largest epochs of ``max_{i in epoch} r_i``
  (the rows and columns chosen independently, as Algorithm 4 does for min-separation).

References: docs/concepts/correlated_noise.md; Choquette-Choo, McMahan, Rush, Thakurta,
"(Amplified) Banded Matrix Factorization", NeurIPS 2023 (arXiv:2306.08153).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from jfed._validation import UsageError, check_int_range

if TYPE_CHECKING:
    import dp_accounting

_MAX_ROUNDS = 2**31 - 1


@dataclass(frozen=True)
class Participation:
    """The participation pattern of one client over a run, as the accountant needs it.

    Attributes:
      rounds: R, the releases in the run (>= 1).
      max_participations: k, the most releases one client can take part in (>= 1; the
        effective number, :attr:`participations`, is also capped by the separation and epochs).
      min_separation: b: two participations of one client are at least b rounds apart
        (b = 1 allows consecutive rounds).
      period: P, or ``None``: every participation of one client falls in one residue class mod
        P (a fixed partition visited cyclically); then ``min_separation >= P``.
      epoch_length: E, or ``None``: at most one participation in each block of rounds
        ``[e E, (e + 1) E)`` (shuffled epochs).

    Example:
      >>> Participation(rounds=100, max_participations=10, min_separation=10).participations
      10
    """

    rounds: int
    max_participations: int
    min_separation: int = 1
    period: int | None = None
    epoch_length: int | None = None

    def __post_init__(self) -> None:
        rounds = check_int_range("rounds", self.rounds, 1, _MAX_ROUNDS)
        object.__setattr__(self, "rounds", rounds)
        for name in ("max_participations", "min_separation"):
            object.__setattr__(self, name, check_int_range(name, getattr(self, name), 1, rounds))
        for name in ("period", "epoch_length"):
            if getattr(self, name) is not None:
                value = check_int_range(name, getattr(self, name), 1, _MAX_ROUNDS)
                object.__setattr__(self, name, value)
        if self.period is not None and self.min_separation < self.period:
            raise UsageError(
                f"expected min_separation >= period={self.period} (one residue class mod the "
                f"period is that far apart), got min_separation={self.min_separation}"
            )

    @classmethod
    def every_round(cls, rounds: int) -> Participation:
        """Every client in every release (a round without a cohort)."""
        return cls(rounds=rounds, max_participations=rounds, min_separation=1)

    @classmethod
    def cyclic(cls, rounds: int, period: int) -> Participation:
        """Once every ``period`` rounds, always in one residue class: ``ceil(R / P)``
        participations exactly P apart (a fixed partition visited cyclically; P is capped at R,
        where every client takes part at most once)."""
        period = min(check_int_range("period", period, 1, _MAX_ROUNDS), rounds)
        return cls(rounds, -(-rounds // period), min_separation=period, period=period)

    @property
    def participations(self) -> int:
        """k actually possible: ``min(k, ceil(R / b), ceil(R / E))``."""
        caps = [self.max_participations, -(-self.rounds // self.min_separation)]
        if self.epoch_length is not None:
            caps.append(-(-self.rounds // self.epoch_length))
        if self.period is not None:
            caps.append(-(-self.rounds // self.period))
        return min(caps)

    def independent_releases_event(self, event: dp_accounting.DpEvent) -> dp_accounting.DpEvent:
        """The run's event when every release adds independent noise and spends ``event`` on
        the clients that took part: one client is in at most :attr:`participations` of them,
        and a release without it has the same law with or without it (add-or-remove), so its
        guarantee is the ``k``-fold composition (no amplification by sampling assumed)."""
        import dp_accounting

        return dp_accounting.SelfComposedDpEvent(event, self.participations)


def gram_sensitivity(gram: np.ndarray, participation: Participation) -> float:
    """An upper bound on the L2 sensitivity of the linear mechanism with Gram matrix ``gram``.

    Args:
      gram: ``f64[R, R]``, ``X = C^T C`` of the strategy ``C: f64[m, R]`` (R = the
        participation's rounds).
      participation: the pattern; every bound that applies to it is computed and the least is
        returned (each is a maximum over a superset of the possible patterns).

    Returns:
      ``sqrt`` of the least bound on ``max_p sum_{i,j in p} |X_ij|``, in units of the bound on
      one client's contribution to one release.
    """
    gram = np.abs(np.asarray(gram, np.float64))
    rounds = participation.rounds
    if gram.shape != (rounds, rounds):
        raise UsageError(f"expected gram of shape ({rounds}, {rounds}), got {gram.shape}")
    k = participation.participations
    bounds = [_min_separation_bound(gram, participation.min_separation, k)]
    if participation.period is not None:
        period = participation.period
        # within a residue class, rounds are `period` apart: a separation of b rounds is
        # ceil(b / period) steps of the class
        steps = -(-participation.min_separation // period)
        classes = [gram[g::period, g::period] for g in range(min(period, rounds))]
        bounds.append(max(_min_separation_bound(block, steps, k) for block in classes))
    if participation.epoch_length is not None:
        bounds.append(_epoch_bound(gram, participation.epoch_length, k))
    return math.sqrt(max(min(bounds), 0.0))


def _min_separation_bound(gram: np.ndarray, min_separation: int, k: int) -> float:
    """jax-privacy's Algorithm 4 bound on ``max_p sum_{i,j in p} X_ij`` (``X >= 0``) over sets
    of at most k rounds at least ``min_separation`` apart, in float64 (its
    ``get_min_sep_sensitivity_upper_bound_for_X``, compiled once per shape)."""
    import jax
    import jax.numpy as jnp

    if gram.shape[0] == 0:
        return 0.0
    # host arithmetic, evaluated now even when called while a round is being traced
    with jax.enable_x64(), jax.ensure_compile_time_eval():
        bound = _compiled_algorithm_4()
        return float(bound(jnp.asarray(gram), min(min_separation, gram.shape[0]), k))


@functools.cache
def _compiled_algorithm_4():
    """jax-privacy's Algorithm 4 as one compiled program (eager, its small operations cost
    seconds the first time)."""
    import jax
    from jax_privacy.matrix_factorization import sensitivity

    def bound(gram, min_separation: int, k: int):
        best = functools.partial(
            sensitivity.max_participation_for_linear_fn,
            min_sep=min_separation,
            max_participations=k,
        )
        return best(jax.vmap(best)(gram))  # each row's best set, then the best set of rows

    return jax.jit(bound, static_argnums=(1, 2))


def _epoch_bound(gram: np.ndarray, epoch_length: int, k: int) -> float:
    """Upper bound on ``max_p sum_{i,j in p} X_ij`` (``X >= 0``) over sets with at most one
    round in each epoch of ``epoch_length`` rounds and at most k rounds: each row takes the
    largest entry of each epoch (the k largest epochs), then the rows the same way."""
    rounds = gram.shape[0]
    epochs = -(-rounds // epoch_length)
    padded = np.zeros((rounds, epochs * epoch_length))
    padded[:, :rounds] = gram
    per_epoch = padded.reshape(rounds, epochs, epoch_length).max(axis=2)  # [R, epochs]
    rows = _sum_of_largest(per_epoch, k)  # [R]
    padded_rows = np.zeros(epochs * epoch_length)
    padded_rows[:rounds] = rows
    return float(_sum_of_largest(padded_rows.reshape(epochs, epoch_length).max(axis=1), k))


def _sum_of_largest(values: np.ndarray, k: int) -> np.ndarray:
    """Sum of the k largest entries along the last axis."""
    return np.sort(values, axis=-1)[..., ::-1][..., :k].sum(axis=-1)
