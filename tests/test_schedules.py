"""Participation schedules (jfed.engine.schedules): who takes part in each round, the pattern
each states for the accountant, and O(capacity) draws.

Every pattern is checked against the schedule as it runs: each client's rounds over a whole run
are collected and must satisfy ``participation(R)``, which some client must attain. The uniform
subset of MinSeparation is tested at a fixed seed with a threshold from the binomial variance,
with a negative control that the same test rejects.
"""

from __future__ import annotations

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jfed._validation import UsageError
from jfed.engine.cohort import CohortInfo
from jfed.engine.schedules import CyclicGroups, MinSeparation, ShuffledEpochs

ACCEPT = 1e-3
REJECT = 1e-6
KEY = jax.random.key(2024)


def run_schedule(schedule, n_clients: int, rounds: int) -> list[np.ndarray]:
    """The real ids of every round (jitted once, the round index traced), checking each round's
    CohortInfo on the way: ``i32[capacity]``, padding exactly ``n_clients`` past ``size``, real
    ids distinct and in range."""
    capacity = schedule.capacity(n_clients)
    cohorts = []
    for t in range(rounds):
        info = jitted_draw(schedule, n_clients)(KEY, jnp.int32(t))
        assert isinstance(info, CohortInfo)
        ids, size = np.asarray(info.ids), int(info.size)
        assert ids.shape == (capacity,) and ids.dtype == np.int32
        assert int(info.capacity) == capacity and int(info.overflow) == 0
        assert np.all(ids[size:] == n_clients)
        real = ids[:size]
        assert np.all((real >= 0) & (real < n_clients)) and len(set(real)) == size
        cohorts.append(real)
    return cohorts


@functools.cache
def jitted_draw(schedule, n_clients: int):
    """``schedule.draw`` for ``n_clients``, jitted once (the key and round index traced)."""
    return jax.jit(lambda key, t: schedule.draw(n_clients, key, t))


def rounds_of_each_client(cohorts: list[np.ndarray], n_clients: int) -> list[list[int]]:
    rounds = [[] for _ in range(n_clients)]
    for t, ids in enumerate(cohorts):
        for i in ids:
            rounds[i].append(t)
    return rounds


def check_pattern(schedule, n_clients: int, rounds: int, tight: bool = True) -> list[list[int]]:
    """Each client's rounds satisfy ``schedule.participation(rounds)``; with ``tight``, some
    client reaches its k and its separation (the stated pattern is what the schedule does, not
    only a bound on it)."""
    pattern = schedule.participation(rounds)
    per_client = rounds_of_each_client(run_schedule(schedule, n_clients, rounds), n_clients)
    counts = [len(r) for r in per_client]
    assert max(counts) <= pattern.participations
    assert max(counts) == pattern.participations or not tight
    gaps = [b - a for r in per_client for a, b in itertools.pairwise(r)]
    if gaps:
        assert min(gaps) >= pattern.min_separation
        assert min(gaps) == pattern.min_separation or not tight or pattern.epoch_length
    if pattern.period is not None:
        assert all(len({t % pattern.period for t in r}) <= 1 for r in per_client)
    if pattern.epoch_length is not None:
        epochs = [[t // pattern.epoch_length for t in r] for r in per_client]
        assert all(len(set(e)) == len(e) for e in epochs)
    return per_client


@pytest.mark.parametrize("n_clients", [23, 24])
def test_cyclic_groups_visit_a_fixed_partition_in_turn(n_clients):
    schedule = CyclicGroups(groups=4)
    per_client = check_pattern(schedule, n_clients, rounds=13)
    cohorts = run_schedule(schedule, n_clients, 8)
    for t in range(4):  # the same group every 4 rounds; the groups partition the clients
        assert set(cohorts[t]) == set(cohorts[t + 4])
    assert sorted(np.concatenate(cohorts[:4])) == list(range(n_clients))
    assert sorted({len(c) for c in cohorts}) in ([5, 6], [6])
    assert all(len(r) in (3, 4) for r in per_client)


def test_shuffled_epochs_take_every_client_once_per_epoch_in_a_new_order():
    schedule = ShuffledEpochs(rounds_per_epoch=5)
    n_clients = 23
    cohorts = run_schedule(schedule, n_clients, 15)
    for epoch in range(3):
        members = np.concatenate(cohorts[5 * epoch : 5 * epoch + 5])
        assert sorted(members) == list(range(n_clients))
    assert [set(c) for c in cohorts[:5]] != [set(c) for c in cohorts[5:10]]
    per_client = check_pattern(schedule, n_clients, 14)
    assert any(b - a == 1 for r in per_client for a, b in itertools.pairwise(r))


# 40 (equal groups) in the slow run: its partition is cyclic[24]'s, the draw within groups 42's
@pytest.mark.parametrize("n_clients", [pytest.param(40, marks=pytest.mark.slow), 42])
def test_min_separation_draws_size_clients_of_the_rounds_group(n_clients):
    schedule = MinSeparation(separation=4, size=3)
    check_pattern(schedule, n_clients, rounds=40, tight=False)
    partition_key = jax.random.split(KEY)[0]
    cyclic = jitted_draw(CyclicGroups(4), n_clients)
    groups = [set(np.asarray(cyclic(partition_key, jnp.int32(g)).ids)) for g in range(4)]
    for t, cohort in enumerate(run_schedule(schedule, n_clients, 12)):
        assert len(cohort) == 3 and set(cohort) <= groups[t % 4]


def inclusion_p_value(counts: np.ndarray, visits: int, size: int, group_size: int) -> float:
    """Each member of a group drawn ``visits`` times, ``size`` at a time uniformly, is included
    ~Binomial(visits, size / group_size): the two-sided tail of the most extreme member,
    Bonferroni-corrected over the members."""
    rate = size / group_size
    scores = (counts - visits * rate) / math.sqrt(visits * rate * (1 - rate))
    return float(min(1.0, 2 * stats.norm.sf(np.abs(scores).max()) * len(counts)))


def test_min_separation_subsets_are_uniform_within_each_group():
    """Group sizes 11, 11, 10, 10 (n = 42, b = 4): inclusion counts over 120 visits per group
    match the binomial law; the negative control (always the group's first slots) fails."""
    n_clients, separation, size, visits = 42, 4, 3, 120
    schedule = MinSeparation(separation, size)
    draw = jitted_draw(schedule, n_clients)  # the program the pattern tests above ran
    ids = np.stack([np.asarray(draw(KEY, jnp.int32(t)).ids) for t in range(visits * separation)])
    partition_key = jax.random.split(KEY)[0]
    for group in range(separation):
        cyclic = jitted_draw(CyclicGroups(separation), n_clients)
        members = np.asarray(cyclic(partition_key, jnp.int32(group)).ids)
        members = members[members < n_clients]
        counts = np.array([(ids[group::separation] == m).sum() for m in members])
        assert counts.sum() == visits * size
        assert inclusion_p_value(counts, visits, size, len(members)) > ACCEPT
        first_slots = np.array([visits] * size + [0] * (len(members) - size))
        assert inclusion_p_value(first_slots, visits, size, len(members)) < REJECT


@pytest.mark.parametrize(
    "schedule",
    [CyclicGroups(groups=10**7), MinSeparation(separation=1000, size=100), ShuffledEpochs(10**7)],
    ids=["cyclic", "min-separation", "epochs"],
)
def test_a_draw_is_o_capacity_at_a_billion_clients(schedule):
    """No array in the traced draw is larger than a few times the capacity (n = 10^9)."""
    n_clients = 10**9
    capacity = schedule.capacity(n_clients)
    jaxpr = jax.make_jaxpr(lambda key, t: schedule.draw(n_clients, key, t))(KEY, jnp.int32(3))

    def sizes(jaxpr):  # every output of every equation, inside loops too
        for equation in jaxpr.eqns:
            for var in equation.outvars:
                yield int(np.prod(getattr(var.aval, "shape", ())))
            for param in equation.params.values():
                for sub in param if isinstance(param, (list, tuple)) else [param]:
                    inner = getattr(sub, "jaxpr", sub)
                    if hasattr(inner, "eqns"):
                        yield from sizes(inner)

    assert max(sizes(jaxpr.jaxpr)) <= 4 * capacity + 64
    info = jitted_draw(schedule, n_clients)(KEY, jnp.int32(3))
    real = np.asarray(info.ids)[: int(info.size)]
    assert len(set(real)) == len(real) and real.max() < n_clients


def test_the_round_index_is_traced_once():
    traces = []

    def draw(t):
        traces.append(1)
        return ShuffledEpochs(4).draw(17, KEY, t).ids

    draw = jax.jit(draw)
    for t in range(9):
        draw(jnp.int32(t))
    assert len(traces) == 1


def test_participation_of_each_schedule():
    assert CyclicGroups(4).participation(10) == CyclicGroups(4).participation(10)
    pattern = CyclicGroups(4).participation(10)
    assert (pattern.participations, pattern.min_separation, pattern.period) == (3, 4, 4)
    pattern = MinSeparation(5, 2).participation(12)
    assert (pattern.participations, pattern.min_separation, pattern.period) == (3, 5, 5)
    pattern = ShuffledEpochs(4).participation(10)
    assert (pattern.participations, pattern.min_separation, pattern.epoch_length) == (3, 1, 4)
    assert CyclicGroups(20).participation(10).participations == 1


def test_bad_schedules_are_refused_with_the_parameter_named():
    with pytest.raises(UsageError, match="groups"):
        CyclicGroups(0)
    with pytest.raises(UsageError, match="n_clients"):
        CyclicGroups(10).capacity(5)
    with pytest.raises(UsageError, match="size <= n_clients // separation"):
        MinSeparation(4, 3).capacity(11)
    with pytest.raises(UsageError, match="rounds_per_epoch"):
        ShuffledEpochs(-1)
