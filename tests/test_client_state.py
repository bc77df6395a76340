"""Per-client state in the engine: stored for the whole population, gathered for the cohort,
scattered back; schedules drawn from the run's key; releases accounted once per cohort.

The state tests record the whole table after every round (a 50-client population) and check,
client by client and round by round, that a member's row is its previous row updated once and
every other row is the same bits as before. Negative control: an algorithm that resets its state
fails the same check.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfed import privacy
from jfed.data import SyntheticLinear
from jfed.engine import (
    CyclicGroups,
    ExecutionPlan,
    Poisson,
    RunState,
    ShuffledEpochs,
    Uniform,
    client_mesh,
    run_rounds,
    simulate,
    trace_releases,
)
from jfed.privacy.correlated import CorrelatedGaussianSum, TreeNoise

N_CLIENTS, ROUNDS = 50, 6
POPULATION = SyntheticLinear.create(jax.random.key(1), N_CLIENTS, 4)


@dataclass(frozen=True)
class Visits:
    """Each member counts its visits, keeps the last round it saw and adds its record's first
    three features; with ``hyper["reset"]`` (the negative control: a traced flag, so the same
    program serves both) it restarts its state at every visit."""

    cohort: Any

    def init(self, hyper, key):
        return jnp.zeros((), jnp.float32)

    def client_state(self, hyper, key):
        return {"visits": jnp.int32(0), "last": jnp.int32(-1), "total": jnp.zeros(3)}

    def client(self, broadcast, record, key, state):
        round_index, reset = broadcast
        x, _ = record
        previous = jax.tree.map(lambda s, s0: jnp.where(reset, s0, s), state,
                                self.client_state(None, None))  # fmt: skip
        new = {
            "visits": previous["visits"] + 1,
            "last": round_index,
            "total": previous["total"] + x[:3],
        }
        return jnp.ones(()), new

    def round(self, state, hyper, key, clients):
        cohort = clients.sample(self.cohort)
        broadcast = (clients.round_index, hyper["reset"])
        count = cohort.sum(self.client, broadcast, client_state=True)
        size = cohort.info.size
        return state + count, {"ids": cohort.info.ids, "size": size, "table": clients.states}


def run(algorithm, plan=None, rounds=ROUNDS, reset=False):
    plan = plan or ExecutionPlan(block_size=16, chunk_size=8)
    hyper = {"reset": jnp.bool_(reset)}
    return simulate(algorithm, POPULATION, hyper, jax.random.key(7), rounds, plan)


@functools.cache
def _first_features() -> np.ndarray:
    """``f32[N_CLIENTS, 3]``: each client's first three features."""
    return np.asarray(jax.jit(POPULATION.records)(jnp.arange(N_CLIENTS))[0])[:, :3]


def state_survives(final: RunState, infos: dict) -> bool:
    """Round by round: a member's row is its previous row after one visit; a row not drawn
    is the same bits as before (the rows of the table kept after every round)."""
    x = _first_features()
    before = {"visits": np.zeros(N_CLIENTS, np.int32), "last": np.full(N_CLIENTS, -1),
              "total": np.zeros((N_CLIENTS, 3), np.float32)}  # fmt: skip
    for t in range(len(infos["size"])):
        members = np.asarray(infos["ids"][t])[: int(infos["size"][t])]
        after = {name: np.asarray(leaf[t])[:N_CLIENTS] for name, leaf in infos["table"].items()}
        expected = {name: value.copy() for name, value in before.items()}
        expected["visits"][members] += 1
        expected["last"][members] = t
        expected["total"][members] = (before["total"][members] + x[members]).astype(np.float32)
        for name in before:
            if not np.array_equal(after[name], expected[name]):
                return False
        before = after
    final_rows = {name: np.asarray(leaf) for name, leaf in final.clients.items()}
    return all(np.array_equal(final_rows[name], before[name]) for name in before)


@pytest.mark.parametrize(
    "cohort", [Uniform(13), Poisson(0.1, capacity=12)], ids=["uniform", "poisson"]
)
def test_a_clients_state_survives_between_its_participations_and_is_untouched_otherwise(cohort):
    final, infos = run(Visits(cohort))
    assert isinstance(final, RunState) and float(final.server) == float(np.sum(infos["size"]))
    assert state_survives(final, infos)
    visits = np.asarray(final.clients["visits"])
    assert visits.max() >= 2  # some client came back: its state had to survive
    assert not state_survives(*run(Visits(cohort), reset=True))  # negative control


def test_padding_writes_nothing_even_where_it_would_alias_the_last_client():
    """Poisson cohorts below their capacity: every round has padding (id n); the last client's
    row moves only in rounds that drew it (with the old -1 padding it moved in all)."""
    final, infos = run(Visits(Poisson(0.1, capacity=12)))
    sizes = np.asarray(infos["size"])
    assert np.all(sizes < 12)  # padding in every round
    last = N_CLIENTS - 1
    drawn = [t for t in range(ROUNDS) if last in np.asarray(infos["ids"][t])[: sizes[t]]]
    assert int(final.clients["visits"][last]) == len(drawn) < ROUNDS
    assert np.all(np.asarray(infos["ids"])[np.arange(12)[None] >= sizes[:, None]] == N_CLIENTS)


@pytest.mark.usefixtures("on_cpu")  # bit for bit against the 8-device mesh: the CPU's claim
@pytest.mark.parametrize(
    "plan",
    [
        ExecutionPlan(block_size=8, chunk_size=8, mesh=client_mesh(8, backend="cpu")),
        # both chunks in one block (blocks of up to 8 chunks: the 50 clients' 7 in one block)
        pytest.param(ExecutionPlan(block_size=64, chunk_size=8), marks=pytest.mark.slow),
    ],
    ids=["8 devices", "one block"],
)
def test_states_are_the_same_bits_for_every_block_and_device_count(plan):
    """A cohort of 13 in 2 chunks of 8, one chunk a block (the plan of :func:`run` fitted to the
    50 clients, as in the uniform test above), against another plan: the same states, bits and
    cohorts, and the states survive there too."""
    one = run(Visits(Uniform(13)))
    other = run(Visits(Uniform(13)), plan)
    for name, leaf in one[0].clients.items():
        np.testing.assert_array_equal(np.asarray(other[0].clients[name]), np.asarray(leaf))
    np.testing.assert_array_equal(np.asarray(other[1]["ids"]), np.asarray(one[1]["ids"]))
    assert state_survives(*other)


def test_every_client_is_the_cohort_all_with_state():
    @dataclass(frozen=True)
    class Everyone(Visits):
        def round(self, state, hyper, key, clients):
            broadcast = (clients.round_index, hyper["reset"])
            count = clients.sum(self.client, broadcast, client_state=True)
            return state + count, {}

    final, _ = run(Everyone(None), rounds=3)
    assert float(final.server) == 3 * N_CLIENTS
    np.testing.assert_array_equal(np.asarray(final.clients["visits"]), 3)


def test_a_schedule_is_drawn_from_the_runs_key_and_keeps_its_partition():
    """CyclicGroups(5) on 50 clients over 10 rounds: every client exactly twice, 5 rounds
    apart (the same partition in every round); ShuffledEpochs(5): once per epoch."""
    final, infos = run(Visits(CyclicGroups(5)), rounds=10)
    assert state_survives(final, infos)
    np.testing.assert_array_equal(np.asarray(final.clients["visits"]), 2)
    ids = np.asarray(infos["ids"])
    for t in range(5):
        assert set(ids[t]) == set(ids[t + 5])
    final, infos = run(Visits(ShuffledEpochs(5)), rounds=10)
    np.testing.assert_array_equal(np.asarray(final.clients["visits"]), 2)
    ids = np.asarray(infos["ids"])
    assert sorted(ids[:5].ravel()) == list(range(N_CLIENTS)) != sorted(ids[5:9].ravel())


def test_a_client_function_must_keep_its_states_shape():
    @dataclass(frozen=True)
    class Grows(Visits):
        def client(self, broadcast, record, key, state):
            message, new = super().client(broadcast, record, key, state)
            return message, dict(new, total=jnp.zeros(4))

    with pytest.raises(ValueError, match="keep the shape and dtype"):
        run(Grows(Uniform(3)), rounds=1)


# -- releases over cohorts and schedules ---------------------------------------------------------


@dataclass(frozen=True)
class TwoReleases:
    """Two Gaussian releases a round from one pass over the same cohort (a tuple of
    aggregators), or a correlated aggregator under a schedule."""

    cohort: Any
    aggregator: Any = (privacy.GaussianSum(), privacy.GaussianSum())

    def init(self, hyper, key):
        return jnp.zeros(())

    def round(self, state, hyper, key, clients):
        def client(broadcast, record, key):
            x, _ = record
            return (x[:2], x[2:])

        view = clients.sample(self.cohort)
        several = isinstance(self.aggregator, tuple)
        if several:
            keys = tuple(jax.random.split(key))
            values, _, _ = view.aggregate(self.aggregator, (hyper["a"], hyper["b"]), ((), ()),
                                          client, None, keys)  # fmt: skip
            return state + values[0].sum() + values[1].sum(), {}
        agg_state = self.aggregator.init(hyper["a"], jnp.zeros(2))
        value, _, _ = view.aggregate(self.aggregator, hyper["a"], agg_state,
                                     lambda b, r, k: client(b, r, k)[0], None, key)  # fmt: skip
        return state + value.sum(), {}


def gaussian_hyper(z_a: float, z_b: float) -> dict:
    return {
        "a": jax.tree.map(jnp.float32, privacy.GaussianSumParams(1.0, z_a)),
        "b": jax.tree.map(jnp.float32, privacy.GaussianSumParams(1.0, z_b)),
    }


def test_two_releases_over_one_sampled_cohort_are_wrapped_once():
    """Two Gaussians of z = 1.5 and 2 on one Poisson cohort: the round's event is ONE sampled
    Gaussian of (1.5^-2 + 2^-2)^-1/2 = 1.2 (not two independently sampled ones, which would
    claim the amplification twice: a smaller eps, the negative control)."""
    hyper = gaussian_hyper(1.5, 2.0)
    ledger = trace_releases(TwoReleases(Poisson(0.1)), POPULATION, hyper)
    assert len(ledger.releases) == 2
    event = ledger.event(hyper, rounds=10)
    one = dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(1.2))
    assert event.event.event.noise_multiplier == pytest.approx(1.2, rel=1e-6)
    assert event.count == 10

    def epsilon(e):
        accountant = dp_accounting.rdp.RdpAccountant()
        return accountant.compose(e).get_epsilon(1e-5)

    assert epsilon(event) == pytest.approx(epsilon(dp_accounting.SelfComposedDpEvent(one, 10)))
    twice = dp_accounting.SelfComposedDpEvent(
        dp_accounting.ComposedDpEvent([release.event(hyper) for release in ledger.releases]), 10
    )
    assert epsilon(twice) < 0.9 * epsilon(event)


def test_independent_releases_under_a_schedule_compose_over_participations():
    """Over CyclicGroups(5) for 20 rounds a client takes part 4 times: the run is 4 Gaussians,
    not 20."""
    hyper = gaussian_hyper(1.5, 2.0)
    ledger = trace_releases(TwoReleases(CyclicGroups(5)), POPULATION, hyper)
    event = ledger.event(hyper, rounds=20)
    assert event == dp_accounting.SelfComposedDpEvent(
        dp_accounting.ComposedDpEvent(
            [dp_accounting.GaussianDpEvent(1.5), dp_accounting.GaussianDpEvent(2.0)]
        ),
        4,
    )


def test_a_correlated_aggregator_must_carry_its_schedules_participation():
    """The aggregator's pattern is checked against the schedule's for the run's R: when the
    run is traced (a run of another R is refused) and when its ledger is certified; under a
    Poisson cohort it is refused outright. Its run is ONE event: ``run_event``."""
    schedule = CyclicGroups(5)
    right = CorrelatedGaussianSum(TreeNoise(16), schedule.participation(10))
    hyper = {"a": jax.tree.map(jnp.float32, right.Params(1.0, 2.0))}
    ledger = trace_releases(TwoReleases(schedule, right), POPULATION, hyper)
    assert ledger.event(hyper, rounds=10) == dp_accounting.GaussianDpEvent(2.0)
    with pytest.raises(ValueError, match="participation"):
        ledger.event(hyper, rounds=12)
    with pytest.raises(ValueError, match="participation"):
        simulate(TwoReleases(schedule, right), POPULATION, hyper, jax.random.key(0), 12,
                 ExecutionPlan(block_size=16, chunk_size=8))  # fmt: skip
    with pytest.raises(ValueError, match="amplification"):
        trace_releases(TwoReleases(Poisson(0.2), right), POPULATION, hyper).event(hyper, 10)


@dataclass(frozen=True)
class Overwrite:
    """Each member's new state ignores its old one (``c_i <- x``): the case where XLA would copy
    the table every round unless what is written depends on what was read."""

    def init(self, hyper, key):
        return jnp.zeros(())

    def client_state(self, hyper, key):
        return jnp.zeros(16)

    def round(self, state, hyper, key, clients):
        def client(broadcast, record, key, old):
            x, _ = record
            return x.sum(), jnp.tile(x, 4)

        return state + clients.sample(Uniform(64)).sum(client, None, client_state=True), {}


def test_the_table_is_updated_in_place():
    """XLA's memory analysis of a run over 10^5 clients x 16 floats (6.1 MiB of state): the
    program's temporaries stay far below one table. Negative control: the same scatter written
    by hand, its new rows not read from the table, makes XLA hold a copy of it."""
    n, population = 100_000, SyntheticLinear.create(jax.random.key(1), 100_000, 4)
    table = 4 * 16 * n
    plan = ExecutionPlan.for_backend("cpu").fitted(n)

    def temporaries(program, *args) -> int:
        return jax.jit(program).lower(*args).compile().memory_analysis().temp_size_in_bytes

    ours = temporaries(lambda key: run_rounds(Overwrite(), population, {}, key, 3, plan),
                       jax.random.key(0))  # fmt: skip
    assert ours < table / 4

    def by_hand(key):
        def body(rows, t):
            ids = (jnp.arange(64) * 997 + t) % n
            return rows.at[ids].set(jnp.ones((64, 16)), mode="drop"), rows[ids].sum()

        return jax.lax.scan(body, jnp.zeros((n, 16)), jnp.arange(3))

    assert temporaries(by_hand, jax.random.key(0)) > 0.9 * table
