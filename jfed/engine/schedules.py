"""Participation schedules: cohorts that bound how often, and how close together, a client takes
part, so that mechanisms without amplification by sampling (DP-FTRL's tree, banded and BLT
noise) can be accounted for repeated participation.

A schedule is a small frozen (hashable, static) dataclass, like the cohorts of
:mod:`jfed.engine.cohort`:

- :class:`CyclicGroups` ``(groups=b)``: a fixed partition of the clients into b groups, visited
  cyclically: round t takes group ``t mod b`` (every client once every b rounds);
- :class:`MinSeparation` ``(separation=b, size=k)``: k clients of group ``t mod b`` of the same
  fixed partition, a fresh uniform k-subset each round (cohorts of k whatever n / b; any two
  participations of one client are at least b rounds apart);
- :class:`ShuffledEpochs` ``(rounds_per_epoch=E)``: every client once per epoch of E rounds, in
  a fresh random order each epoch (shuffling: equal bins, where balls-in-bins would draw each
  client's round independently).

Each has ``capacity(n_clients)`` (the static number of clients a round computes),
``draw(n_clients, key, round_index)`` (the round's :class:`~jfed.engine.cohort.CohortInfo`:
ids ``i32[capacity]``, padded with ``n_clients``, an id no client has) and
``participation(rounds)`` (the :class:`~jfed.privacy.participation.Participation` the accountant
needs: the worst case the schedule allows, no amplification by sampling assumed).

How a draw stays O(capacity): the clients are permuted by a keyed bijection of ``[0, n)``
(:func:`~jfed.engine.cohort.feistel_bijection`), and group g is the images of the positions
``g, g + b, g + 2b, ...`` (``ceil((n - g) / b)`` of them, so groups differ in size by at most
one). A round computes the images of its own positions only, never a permutation of the
population.

Keys: ``key`` is the schedule's key for the WHOLE run, the same in every round; the schedule
derives what changes (a subset's key per round, a permutation's key per epoch) from it with
``round_index``. A key that changed from round to round would re-draw the partition every round
and break the separation the accountant relies on. In a run, the engine passes
:func:`schedule_key` of the run's client stream (``clients.sample(CyclicGroups(b))``).

References: docs/concepts/correlated_noise.md (Schedules); Kairouz et al. 2021 (DP-FTRL with
shuffled epochs and restarts); Choquette-Choo et al. 2023 (b-min-separation, cyclic groups).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from jfed._validation import UsageError, check_int_range
from jfed.engine.cohort import CohortInfo, feistel_bijection
from jfed.privacy.guarantee import Adjacency
from jfed.privacy.participation import Participation

if TYPE_CHECKING:
    import dp_accounting

_MAX_CLIENTS = 2**31 - 1

SCHEDULE_STREAM = np.uint32(2**32 - 3)
"""The word folded into a run's client root for its schedule key (round indices are below 2^31,
so no round's key is this one)."""


def schedule_key(client_root: jax.Array) -> jax.Array:
    """The schedule key of a whole run: ``fold_in(client_root, SCHEDULE_STREAM)`` of the run's
    client stream (:func:`jfed.engine.keys.run_streams`), the same in every round."""
    return jax.random.fold_in(client_root, SCHEDULE_STREAM)


def _check_population(n_clients: int, groups: int) -> int:
    """``n_clients`` as an int, at least ``groups`` (every group non-empty) and small enough
    that ``group + b * i`` stays within int32."""
    return check_int_range("n_clients", n_clients, groups, _MAX_CLIENTS - groups)


def _group_members(
    n_clients: int, groups: int, group: jax.Array, slots: jax.Array, key: jax.Array
) -> jax.Array:
    """``i32[m]``: the clients at ``slots: i32[m]`` of ``group`` of the keyed partition into
    ``groups`` groups (positions ``group + groups * slot`` under the bijection), ``n_clients``
    at slots the group does not have."""
    positions = group + groups * slots
    valid = positions < n_clients
    ids = feistel_bijection(jnp.where(valid, positions, 0), n_clients, key)
    return jnp.where(valid, ids, n_clients).astype(jnp.int32)


def _group_size(n_clients: int, groups: int, group: jax.Array) -> jax.Array:
    """``i32[]``: ``ceil((n - group) / groups)``, the size of ``group``."""
    return ((n_clients - group + groups - 1) // groups).astype(jnp.int32)


def _whole_group(n_clients: int, groups: int, group: jax.Array, key: jax.Array) -> CohortInfo:
    """Every member of ``group`` of the partition keyed by ``key``, ``ceil(n / groups)`` slots."""
    capacity = -(-n_clients // groups)
    slots = jnp.arange(capacity, dtype=jnp.int32)
    return CohortInfo(
        size=_group_size(n_clients, groups, group),
        overflow=jnp.int32(0),
        capacity=jnp.int32(capacity),
        ids=_group_members(n_clients, groups, group, slots, key),
    )


class _NoAmplification:
    """What every schedule states for the accountant: a release's event is not wrapped in a
    sampled one (the separation, not chance, is what the schedule guarantees)."""

    adjacency: ClassVar[Adjacency] = Adjacency.ADD_OR_REMOVE

    def sampled_event(self, event: dp_accounting.DpEvent, n_clients: int) -> Any:
        """``event`` itself: no amplification by sampling is assumed. Composing it over every
        round is exact for the correlated aggregators of :mod:`jfed.privacy.correlated` (their
        per-release share) and an upper bound for independent noise, whose exact run event is
        :meth:`~jfed.privacy.participation.Participation.independent_releases_event`."""
        del n_clients
        return event

    def accountant(self) -> Any:
        """PLD, which composes Gaussian releases tightly."""
        from jfed.privacy.accounting import Pld

        return Pld()


@dataclass(frozen=True)
class CyclicGroups(_NoAmplification):
    """A fixed random partition into ``groups`` groups; round t takes group ``t mod groups``.

    Every client takes part once every b rounds, always in the same residue class: k =
    ``ceil(R / b)`` participations in R rounds, exactly b apart (the fixed-epoch order of
    Choquette-Choo et al.). With b = n / cohort size this is DP-FTRL's epochs in a fixed order.

    Attributes:
      groups: b >= 1 (at most the population).

    Example:
      >>> schedule = CyclicGroups(groups=4)
      >>> info = schedule.draw(10, jax.random.key(0), jnp.int32(1))
      >>> schedule.capacity(10), int(info.size)
      (3, 3)
    """

    groups: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "groups", check_int_range("groups", self.groups, 1, 2**30))

    def capacity(self, n_clients: int) -> int:
        """``ceil(n / b)``: the largest group."""
        return -(-_check_population(n_clients, self.groups) // self.groups)

    def draw(self, n_clients: int, key: jax.Array, round_index: jax.Array) -> CohortInfo:
        """Round ``round_index``'s group (traceable; O(capacity) work).

        Args:
          n_clients: the population size n (static).
          key: the schedule's key for the whole run (the partition's key).
          round_index: ``i32[]``, may be traced.

        Returns:
          :class:`~jfed.engine.cohort.CohortInfo`: ``ids: i32[capacity]`` the group's members,
          ``n_clients`` past ``size``; ``overflow`` 0.
        """
        n_clients = _check_population(n_clients, self.groups)
        group = jnp.asarray(round_index, jnp.int32) % self.groups
        return _whole_group(n_clients, self.groups, group, key)

    def participation(self, rounds: int) -> Participation:
        """k = ``ceil(R / b)`` participations, b apart, in one residue class mod b."""
        return Participation.cyclic(rounds, self.groups)


@dataclass(frozen=True)
class MinSeparation(_NoAmplification):
    """``size`` clients per round from group ``t mod separation`` of a fixed random partition:
    any two participations of one client are at least ``separation`` rounds apart.

    Each round's subset is uniform among the group's members and drawn afresh (a key per round),
    so a client's participations are random; the accountant takes the worst case, every b
    rounds: ``ceil(R / b)`` participations (no amplification assumed). The difference with
    :class:`CyclicGroups` is the cohort size: k, whatever n / b.

    Attributes:
      separation: b >= 1.
      size: k >= 1, at most ``floor(n / b)`` (the smallest group).
    """

    separation: int
    size: int

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "separation", check_int_range("separation", self.separation, 1, 2**30)
        )
        object.__setattr__(self, "size", check_int_range("size", self.size, 1, _MAX_CLIENTS))

    def capacity(self, n_clients: int) -> int:
        """``size`` (checked: at most the smallest group, ``floor(n / b)``)."""
        n_clients = _check_population(n_clients, self.separation)
        smallest = n_clients // self.separation
        if self.size > smallest:
            raise UsageError(
                f"expected size <= n_clients // separation = {smallest} (the smallest group), got "
                f"size={self.size}"
            )
        return self.size

    def draw(self, n_clients: int, key: jax.Array, round_index: jax.Array) -> CohortInfo:
        """Round ``round_index``'s cohort: a uniform ``size``-subset of group
        ``round_index mod b`` (traceable; O(size) work).

        The subset: the first k members of the group in a keyed random order of its slots (a
        bijection of ``[0, ceil(n / b))``, keyed per round; a group one short skips the one slot
        it lacks, which is why k + 1 slots are drawn).
        """
        capacity = self.capacity(n_clients)
        partition_key, rounds_key = jax.random.split(key)
        round_index = jnp.asarray(round_index, jnp.int32)
        group = round_index % self.separation
        largest = -(-n_clients // self.separation)
        drawn = min(capacity + 1, largest)
        order = feistel_bijection(
            jnp.arange(drawn, dtype=jnp.int32), largest, jax.random.fold_in(rounds_key, round_index)
        )
        exists = order < _group_size(n_clients, self.separation, group)
        rank = jnp.cumsum(exists, dtype=jnp.int32) - 1
        target = jnp.where(exists & (rank < capacity), rank, capacity)
        slots = jnp.zeros(capacity, jnp.int32).at[target].set(order, mode="drop")
        ids = _group_members(n_clients, self.separation, group, slots, partition_key)
        return CohortInfo(
            size=jnp.int32(capacity),
            overflow=jnp.int32(0),
            capacity=jnp.int32(capacity),
            ids=ids,
        )

    def participation(self, rounds: int) -> Participation:
        """The worst case: ``ceil(R / b)`` participations, b apart, in one residue class."""
        return Participation.cyclic(rounds, self.separation)


@dataclass(frozen=True)
class ShuffledEpochs(_NoAmplification):
    """Every client once per epoch of ``rounds_per_epoch`` rounds, in a fresh random order each
    epoch (DP-FTRL's shuffled epochs).

    Epoch e permutes the clients with a key derived from e and splits them into E groups as
    :class:`CyclicGroups` does; its round j takes group j. A client's two participations can be
    adjacent (the last round of an epoch, then the first of the next), so the pattern is one
    participation per epoch, not a separation: ``ceil(R / E)`` participations, at most one in
    each epoch.

    Attributes:
      rounds_per_epoch: E >= 1 (at most the population).
    """

    rounds_per_epoch: int

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "rounds_per_epoch",
            check_int_range("rounds_per_epoch", self.rounds_per_epoch, 1, 2**30),
        )

    def capacity(self, n_clients: int) -> int:
        """``ceil(n / E)``: the largest round of an epoch."""
        n_clients = _check_population(n_clients, self.rounds_per_epoch)
        return -(-n_clients // self.rounds_per_epoch)

    def draw(self, n_clients: int, key: jax.Array, round_index: jax.Array) -> CohortInfo:
        """Round ``round_index``'s cohort (traceable; O(capacity) work): group
        ``round_index mod E`` of epoch ``round_index // E``'s permutation."""
        n_clients = _check_population(n_clients, self.rounds_per_epoch)
        epoch, group = jnp.divmod(jnp.asarray(round_index, jnp.int32), self.rounds_per_epoch)
        epoch_key = jax.random.fold_in(key, epoch)
        return _whole_group(n_clients, self.rounds_per_epoch, group, epoch_key)

    def participation(self, rounds: int) -> Participation:
        """``ceil(R / E)`` participations, at most one per epoch, possibly adjacent."""
        return Participation(
            rounds=rounds,
            max_participations=-(-rounds // self.rounds_per_epoch),
            min_separation=1,
            epoch_length=self.rounds_per_epoch,
        )


Schedule = CyclicGroups | MinSeparation | ShuffledEpochs

SCHEDULES = (CyclicGroups, MinSeparation, ShuffledEpochs)
"""The schedule kinds (what :meth:`jfed.engine.Clients.sample` draws from the run's key)."""
