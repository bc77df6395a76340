"""Cohorts: only the sampled clients are computed, with the law the spec asks for.

Every statistical test runs at a fixed seed with a threshold from the known variance, and has a
negative control that the same test rejects (docs/specs/dp_fedavg.md, "Tests that must exist").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jfed.data import SyntheticLinear
from jfed.engine import (
    All,
    Clients,
    ExecutionPlan,
    Poisson,
    Uniform,
    aggregate,
    aggregate_cohort,
    client_mesh,
    cohort_key,
    draw_cohort,
    round_key,
    run_rounds,
    run_streams,
    simulate,
    stack_cohort,
    sum_messages,
)
from jfed.engine.cohort import (
    binomial_count,
    feistel_bijection,
    overflow_probability,
    poisson_capacity,
)

ACCEPT = 1e-3  # a correct sampler fails a test at this level once in a thousand seeds
REJECT = 1e-6  # a negative control must be this far out


@dataclass(frozen=True)
class Probe:
    """A one-line algorithm: each round runs ``client`` on a cohort and keeps what came back
    (every member's message, or with ``summed`` their sum) with the cohort's info."""

    cohort: Any
    summed: bool = False

    def init(self, hyperparams, key):
        return jnp.zeros(())

    def round(self, state, hyperparams, key, clients):
        cohort = clients.sample(self.cohort)
        if self.summed:
            return state, (cohort.sum(_client, jnp.float32(2.0)), cohort.info)
        return state, (cohort.stack(_client, jnp.float32(2.0)), cohort.info)


def _sampled(client, broadcast, population, key, plan, cohort, summed=True):
    """The statistic (or the stack) of round key ``key``'s cohort of kind ``cohort``, and its
    info: what ``clients.sample(cohort).sum(...)`` computes, through the engine's functions."""
    info = draw_cohort(cohort, population.n_clients, cohort_key(key))
    if summed:
        return aggregate_cohort(client, broadcast, population, key, plan, info), info
    return stack_cohort(client, broadcast, population, key, plan, info), info


def _client(broadcast, record, key):
    """Draws from the client's own key (exact integers, and normals) and its record."""
    x, _ = record
    return {
        "bits": jax.random.bits(key, (2,)),
        "noise": jax.random.normal(key, (3,)),
        "x": broadcast * x,
        "one": jnp.float32(1.0),
    }


def _round_cohort_keys(seed: int, rounds: int) -> jax.Array:
    """The cohort keys the engine uses in rounds 0..rounds-1 of run ``seed``."""
    _, _, client_root = run_streams(jax.random.key(seed))
    return jax.jit(jax.vmap(lambda t: cohort_key(round_key(client_root, t))))(jnp.arange(rounds))


def _draws(cohort, n: int, keys: jax.Array):
    """The cohorts of ``keys`` (one key at a time, as the rounds of a run draw them: a vmapped
    draw compiles to a program twice as slow to build)."""
    return jax.jit(lambda keys: jax.lax.map(lambda key: draw_cohort(cohort, n, key), keys))(keys)


def _binomial_pvalue(sizes: np.ndarray, n: int, rate: float, bins: int = 20) -> float:
    """Chi-square of ``sizes`` against Binomial(n, rate) over (nearly) equiprobable bins."""
    law = stats.binom(n, rate)
    cuts = np.unique(law.ppf(np.linspace(0, 1, bins + 1)[1:-1]))
    edges = np.concatenate([[-0.5], cuts + 0.5, [n + 0.5]])
    observed = np.histogram(sizes, edges)[0]
    expected = np.diff(np.concatenate([[0.0], law.cdf(cuts), [1.0]])) * len(sizes)
    return float(stats.chisquare(observed, expected).pvalue)


def _inclusion_pvalue(counts: np.ndarray, rounds: int, rate: float, dof: int) -> float:
    """Upper-tail p-value of sum_i (c_i - T q)^2 / (T q (1 - q)) ~ chi-square(dof)."""
    statistic = np.sum((counts - rounds * rate) ** 2) / (rounds * rate * (1 - rate))
    return float(stats.chi2.sf(statistic * dof / len(counts), dof))


# -- the bijection ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n",
    [1, 2, 13, 1024, 1025]
    # sizes of the same kinds as those above (small, and neither 2^k nor 2^k + 1): slow
    + [pytest.param(n, marks=pytest.mark.slow) for n in (3, 1000, 4099)],
)
def test_feistel_is_a_bijection_of_the_population(n):
    """Exhaustive: the images of 0..n-1 are 0..n-1 (n = 2^k, 2^k + 1 and others, for which
    cycle walking is needed), for several keys, and differ across keys."""
    keys = jax.random.split(jax.random.key(7), 3)
    images = np.asarray(jax.jit(jax.vmap(lambda k: feistel_bijection(jnp.arange(n), n, k)))(keys))
    assert images.dtype == np.int32
    for row in images:
        np.testing.assert_array_equal(np.sort(row), np.arange(n))
    if n >= 1000:
        assert not np.array_equal(images[0], images[1])
        assert not np.array_equal(images[0], np.arange(n))
    # negative control: the same check catches a map that is not one-to-one
    broken = images[0] // 2
    assert not np.array_equal(np.sort(broken), np.arange(n)) or n == 1


# -- counts ----------------------------------------------------------------------------------


def test_poisson_capacity_is_the_binomial_tail_quantile():
    for n, rate in [(10**8, 1e-6), (10**6, 1e-3), (1_000, 0.1), (10**8, 1e-2)]:
        k = poisson_capacity(n, rate)
        assert stats.binom.sf(k, n, rate) <= 1e-9 < stats.binom.sf(k - 1, n, rate)
    assert poisson_capacity(10**8, 1e-6) == 166
    assert poisson_capacity(50, 1.0) == 50
    assert poisson_capacity(10, 1e-12) == 1  # at least one slot
    # far below float64's relative precision, where binom.isf gives up (returns n)
    for probability in (1e-20, 1e-40):
        k = poisson_capacity(10**6, 1e-4, probability)
        assert k < 400  # mean 100: the tail quantile, not the whole population
        assert stats.binom.logsf(k, 10**6, 1e-4) <= np.log(probability)
        assert stats.binom.logsf(k - 1, 10**6, 1e-4) > np.log(probability)
    assert overflow_probability(10**8, 1e-6, 166) == stats.binom.sf(166, 10**8, 1e-6)


def test_poisson_cohort_sizes_follow_the_binomial_through_the_engine():
    """2,000 rounds of a Poisson(q = 10^-6) cohort of 10^8 procedural clients, run by the engine:
    the sizes pass a chi-square against Binomial(n, q) (20 equiprobable bins); q off by 10% either
    way is rejected. No round overflows its capacity of 166 (P <= 2e-6 in 2,000 rounds)."""
    n, rate, rounds = 10**8, 1e-6, 2_000
    population = SyntheticLinear.create(jax.random.key(0), n, 2)
    _, infos = simulate(
        Probe(Poisson(rate), summed=True), population, None, jax.random.key(11), rounds
    )
    _, info = infos
    sizes = np.asarray(info.size)
    assert np.all(np.asarray(info.overflow) == 0) and np.all(np.asarray(info.capacity) == 166)
    assert _binomial_pvalue(sizes, n, rate) > ACCEPT
    assert _binomial_pvalue(sizes, n, 1.1 * rate) < REJECT
    assert _binomial_pvalue(sizes, n, 0.9 * rate) < REJECT
    # every computed client is one of the cohort (the messages' "one" sums to the size)
    totals, _ = infos
    np.testing.assert_array_equal(np.asarray(totals["one"]), sizes)
    # the ids are spread uniformly over [0, n): 100 equal bins (negative control: halved ids)
    ids = np.asarray(info.ids)
    assert np.all(ids >= 0) and np.all(ids <= n)  # padding is n: no client's id
    ids = ids[ids < n]
    assert ids.size == sizes.sum()
    bins = np.linspace(0, n, 101)
    assert stats.chisquare(np.histogram(ids, bins)[0]).pvalue > ACCEPT
    assert stats.chisquare(np.histogram(ids // 2, bins)[0]).pvalue < REJECT


def test_binomial_count_at_a_large_rate_and_independent_of_the_block():
    """Binomial(1000, 0.3) over 4,000 keys (chi-square; negative control 1.1 q), and a key's
    count is the same whatever the number of waiting times drawn per block."""
    keys = jax.random.split(jax.random.key(3), 4_000)
    counts, wide = map(np.asarray, jax.jit(lambda keys: jax.lax.map(
        lambda k: (binomial_count(k, 1_000, 0.3, 64), binomial_count(k, 1_000, 0.3, 1_001)), keys
    ))(keys))  # fmt: skip
    assert _binomial_pvalue(counts, 1_000, 0.3) > ACCEPT
    assert _binomial_pvalue(counts, 1_000, 0.33) < REJECT
    np.testing.assert_array_equal(counts, wide)


# -- ids ---------------------------------------------------------------------------------------


def test_poisson_ids_are_distinct_and_each_included_with_probability_q():
    """n = 500, q = 0.1, 4,000 rounds: each id's inclusion count is Binomial(T, q), independent
    across ids, so sum (c - Tq)^2 / (Tq(1-q)) is chi-square with n degrees of freedom. Negative
    controls: the same counts against 1.1 q, and a sampler without the bijection (ids 0..K-1)."""
    n, rate, rounds = 500, 0.1, 4_000
    info = _draws(Poisson(rate), n, _round_cohort_keys(5, rounds))
    ids, sizes = np.asarray(info.ids), np.asarray(info.size)
    counts = np.zeros(n)
    for row, size in zip(ids, sizes, strict=True):
        chosen = row[:size]
        assert np.all(row[size:] == n)  # padding: an id no client has
        assert np.unique(chosen).size == size and chosen.min() >= 0 and chosen.max() < n
        counts[chosen] += 1
    assert _binomial_pvalue(sizes, n, rate) > ACCEPT
    assert _inclusion_pvalue(counts, rounds, rate, n) > ACCEPT
    assert _inclusion_pvalue(counts, rounds, 1.1 * rate, n) < REJECT
    first_k = np.zeros(n)
    for size in sizes:
        first_k[:size] += 1
    assert _inclusion_pvalue(first_k, rounds, rate, n) < REJECT


def test_uniform_cohort_has_exactly_k_distinct_ids_each_with_probability_k_over_n():
    """Uniform(37) of 1,000 over 4,000 rounds: exactly 37 distinct ids in [0, n) every round;
    inclusion counts pass the chi-square for sampling without replacement (n - 1 degrees of
    freedom: the counts sum to T k). Negative control: k/n off by 10%."""
    n, k, rounds = 1_000, 37, 4_000
    info = _draws(Uniform(k), n, _round_cohort_keys(6, rounds))
    ids = np.asarray(info.ids)
    assert ids.shape == (rounds, k)
    assert np.all(np.asarray(info.size) == k) and np.all(np.asarray(info.overflow) == 0)
    assert all(np.unique(row).size == k for row in ids)
    assert ids.min() >= 0 and ids.max() < n
    counts = np.bincount(ids.ravel(), minlength=n)
    assert _inclusion_pvalue(counts, rounds, k / n, n - 1) > ACCEPT
    assert _inclusion_pvalue(counts, rounds, 1.1 * k / n, n - 1) < REJECT


def test_overflow_is_counted_and_the_kept_clients_are_the_cohorts_first():
    """Poisson(0.5) of 1,000 at a capacity of 10: 10 clients computed, K - 10 counted as
    overflow, where K is the same round's count at the default capacity (595, no overflow),
    and the 10 kept are that cohort's first 10 ids."""
    n, keys = 1_000, _round_cohort_keys(8, 50)
    population = SyntheticLinear.create(jax.random.key(0), n, 3)
    plan = ExecutionPlan.for_backend().fitted(n)

    @jax.jit
    def draws_and_a_round(keys, key):
        draws = jax.lax.map(
            lambda k: (
                draw_cohort(Poisson(0.5, capacity=10), n, k),
                draw_cohort(Poisson(0.5), n, k),
            ),
            keys,
        )
        return draws, _sampled(_client, 1.0, population, key, plan, Poisson(0.5, capacity=10))

    (tiny, full), (total, info) = jax.tree.map(
        np.asarray, draws_and_a_round(keys, jax.random.key(2))
    )
    assert int(full.capacity[0]) == 595 and np.all(full.overflow == 0)
    np.testing.assert_array_equal(tiny.size, 10)
    np.testing.assert_array_equal(tiny.overflow, full.size - 10)
    np.testing.assert_array_equal(tiny.ids, full.ids[:, :10])
    # through the engine: only the capacity's clients contribute
    assert float(total["one"]) == 10 and int(info.overflow) > 400


# -- a client's message ------------------------------------------------------------------------


# A Poisson cohort: its size varies by round, so its rows past the size are padding. The fitted
# default computes it in one chunk (280 wide, everyone 1,000); the mesh in chunks of 8 (the
# cohort 35 a shard: one block of 5 chunks; everyone 125 a shard: 2 blocks of 8).
COHORTS = (Poisson(0.2),)
PLANS = {
    "default": ExecutionPlan.for_backend("cpu"),
    "8 devices": ExecutionPlan(block_size=64, chunk_size=8, mesh=client_mesh(8, backend="cpu")),
}
# slow: a uniform cohort beside it (the same gather of the cohort's records and keys, with no
# padding), and the same chunks of 8 on one device (no path the two plans above do not take)
WITH_UNIFORM = (Uniform(50), Poisson(0.2))
ONE_DEVICE = {"chunks of 8": ExecutionPlan(block_size=64, chunk_size=8)}


@dataclass(frozen=True)
class Cohorts:
    """Every round, for each of several cohorts its stacked messages, their sum and its info,
    then every client's messages: one program per plan serves every cohort."""

    cohorts: tuple

    def init(self, hyperparams, key):
        return jnp.zeros(())

    def round(self, state, hyperparams, key, clients):
        views = [clients.sample(c) for c in self.cohorts]
        sampled = [
            (v.stack(_client, jnp.float32(2.0)), v.sum(_client, jnp.float32(2.0)), v.info)
            for v in views
        ]
        return state, [*sampled, clients.stack(_client, jnp.float32(2.0))]


def _stacked_runs(plan, cohorts=COHORTS, seed=4, rounds=2):
    """Two rounds of :class:`Cohorts` under ``plan``, on the host CPU (the bit-for-bit claims
    against the 8-device mesh are the CPU's), as numpy arrays."""
    with jax.default_device(jax.devices("cpu")[0]):
        population = SyntheticLinear.create(jax.random.key(1), 1_000, 4)
        algorithm = Cohorts(cohorts)
        infos = simulate(algorithm, population, None, jax.random.key(seed), rounds, plan)[1]
    return jax.tree.map(np.asarray, infos)


@pytest.fixture(
    scope="module",
    params=[
        (COHORTS, PLANS),
        pytest.param((WITH_UNIFORM, {**PLANS, **ONE_DEVICE}), marks=pytest.mark.slow),
    ],
    ids=["poisson, default and 8 devices", "and uniform, and chunks of 8 on one device"],
)
def stacked_runs(request):
    """``(cohorts, {plan name: the runs' infos})``."""
    cohorts, plans = request.param
    return cohorts, {name: _stacked_runs(plan, cohorts) for name, plan in plans.items()}


def test_a_clients_message_is_the_same_whoever_shares_its_cohort_and_however_it_is_run(
    stacked_runs,
):
    """Each sampled client's message (its draws and its record) equals its message in the same
    round without a cohort, bit for bit, whoever its companions are (a Poisson cohort, another
    each round), in the fitted default's one chunk and in chunks of 8 on an 8-device mesh.
    Masked rows are zero. Negative control: the previous round's message of the same client
    differs."""
    cohorts, runs_by_plan = stacked_runs
    for name, runs in runs_by_plan.items():
        *sampled, everyone = runs
        for cohort, (messages, _, info) in zip(cohorts, sampled, strict=True):
            rounds, capacity = info.ids.shape
            assert messages["bits"].shape == (rounds, capacity, 2), (name, cohort)
            for t in range(rounds):
                size = int(info.size[t])
                chosen = info.ids[t][:size]
                for field in ("bits", "noise", "x"):
                    got = messages[field][t]
                    want = everyone[field][t][chosen]
                    np.testing.assert_array_equal(got[:size], want, err_msg=f"{name} {cohort}")
                    assert np.all(got[size:] == 0), "masked rows must be zero"
                other_round = everyone["bits"][1 - t][chosen]
                assert not np.any(np.all(messages["bits"][t][:size] == other_round, 1))


def test_the_cohort_is_a_function_of_run_and_round_only(stacked_runs):
    """Same run key and round: the same cohort, whatever the chunk width or device count;
    another round or another run key: another cohort."""
    cohorts, runs_by_plan = stacked_runs
    ids = {name: [info.ids for _, _, info in runs[:-1]] for name, runs in runs_by_plan.items()}
    for name in ids:
        for a, b in zip(ids[name], ids["default"], strict=True):
            np.testing.assert_array_equal(a, b, err_msg=name)
    first = ids["default"][0]
    assert not np.array_equal(first[0], first[1])
    other_seed = _stacked_runs(PLANS["default"], cohorts, seed=5)[0][2].ids  # the same program
    assert not np.array_equal(other_seed[0], first[0])


def test_sums_over_a_cohort_match_the_stack_and_eight_devices(stacked_runs):
    """The summed statistic over a cohort is the sum of the stacked rows (within float32
    rounding), for every plan, on one device and on an 8-device mesh; the stacks are the same
    bits under every plan."""
    cohorts, runs_by_plan = stacked_runs
    reference = runs_by_plan["default"]
    for name, runs in runs_by_plan.items():
        for cohort, (stack, total, info), (stack1, total1, _) in zip(
            cohorts, runs[:-1], reference[:-1], strict=True
        ):
            for field in stack:
                np.testing.assert_array_equal(stack[field], stack1[field], err_msg=name)
            np.testing.assert_array_equal(total["one"], info.size, err_msg=f"{name} {cohort}")
            np.testing.assert_allclose(total["x"], stack["x"].sum(1), rtol=1e-5, atol=1e-4)
            np.testing.assert_allclose(total["x"], total1["x"], rtol=1e-5, atol=1e-4)


def test_all_is_the_round_without_a_cohort_bit_for_bit():
    population = SyntheticLinear.create(jax.random.key(1), 1_000, 4)
    plan, key = ExecutionPlan(block_size=128, chunk_size=64), jax.random.key(3)
    plain = jax.jit(lambda: aggregate(_client, 2.0, population, key, plan))()

    def over_all():
        view = Clients(population, key, plan, jnp.int32(0)).sample(All())
        return view.sum(_client, 2.0), view.info

    total, info = jax.jit(over_all)()
    for name in plain:
        np.testing.assert_array_equal(np.asarray(total[name]), np.asarray(plain[name]))
    assert (int(info.size), int(info.overflow), int(info.capacity)) == (1_000, 0, 1_000)
    assert info.ids is None


def test_the_plan_is_fitted_to_the_cohort_not_the_population():
    """A cohort of 100 from 10^6 clients runs in chunks of 104 (100 rounded up to 8), not the
    population's 4,096; on 8 devices, 16 per shard."""
    population = SyntheticLinear.create(jax.random.key(1), 10**6, 4)
    widths: list[int] = []

    def statistic(messages, weights):
        widths.append(weights.shape[0])
        return sum_messages(messages, weights)

    plan = ExecutionPlan.for_backend("cpu").fitted(10**6)
    mesh_plan = ExecutionPlan(chunk_size=4096, block_size=4096, mesh=client_mesh(8, backend="cpu"))
    for p in (plan, mesh_plan):
        jax.eval_shape(
            lambda key, p=p: aggregate_cohort(
                _client,
                1.0,
                population,
                key,
                p,
                draw_cohort(Uniform(100), population.n_clients, key),
                statistic,
            ),
            jax.random.key(0),
        )
    assert set(widths) == {104, 16}


def test_bad_cohorts_are_refused_with_the_parameter_named():
    with pytest.raises(ValueError, match="rate"):
        Poisson(0.0)
    with pytest.raises(ValueError, match="rate"):
        Poisson(1.5)
    with pytest.raises(ValueError, match="size"):
        Uniform(0)
    with pytest.raises(ValueError, match="capacity"):
        Poisson(0.1, capacity=0)
    population = SyntheticLinear.create(jax.random.key(1), 100, 2)
    plan = ExecutionPlan.for_backend().fitted(100)
    for cohort, name in ((Uniform(101), "size"), (Poisson(0.1, capacity=101), "capacity")):
        with pytest.raises(ValueError, match=f"{name} <= n_clients=100"):
            Clients(population, jax.random.key(0), plan, jnp.int32(0)).sample(cohort)
    with pytest.raises(TypeError, match="cohort"):
        Clients(population, jax.random.key(0), plan, jnp.int32(0)).sample(0.1)


def test_cohort_padding_never_aliases_a_real_client():
    """The padding ids of a drawn cohort are ``n``, so a scatter of per-member rows into a table
    of every client (``mode="drop"``, as per-client state is written back) leaves every row
    that is not a member untouched. Negative control: -1 padding, as before, overwrites the
    LAST client's row (JAX wraps negative indices)."""
    n = 50

    @jax.jit
    def written(key):
        info = draw_cohort(Poisson(0.1, capacity=20), n, key)
        table = jnp.zeros(n)
        legacy = jnp.where(jnp.arange(20) < info.size, info.ids, -1)
        return (info, table.at[info.ids].set(1.0, mode="drop"),
                table.at[legacy].set(1.0, mode="drop"))  # fmt: skip

    info, ours, aliased = jax.tree.map(np.asarray, written(jax.random.key(3)))
    size = int(info.size)
    assert size < 20  # some padding to write
    members = np.zeros(n)
    members[info.ids[:size]] = 1.0
    np.testing.assert_array_equal(ours, members)
    assert float(aliased[n - 1]) == 1.0 and members[n - 1] == 0.0


# -- cost ----------------------------------------------------------------------------------------


def test_a_round_on_a_cohort_of_a_hundred_million_clients_is_small_and_does_the_cohorts_work():
    """A round on a cohort of 100 of 10^8 procedural clients compiles to a program of well under
    1 MiB (an id per client would be 400 MB) whose operation count is within 10x of the same
    round on 10^4 clients. Negative control: drawing the same cohort with
    ``jax.random.permutation(n)`` compiles to a program of >= 400 MB."""
    n, dim = 10**8, 10
    population = SyntheticLinear.create(jax.random.key(0), n, dim)

    def gradient(theta, record, key):
        x, y = record
        g = (x @ theta - y) * x
        return g * jnp.minimum(1.0, 1.0 / jnp.maximum(jnp.linalg.norm(g), 1e-12))

    @dataclass(frozen=True)
    class Step:
        """One SGD step on a uniform cohort, and one on a Poisson cohort, per round."""

        def init(self, hyperparams, key):
            return jnp.zeros(dim)

        def round(self, theta, hyperparams, key, clients):
            sizes = []
            for cohort in (Uniform(100), Poisson(1e-6)):
                view = clients.sample(cohort)
                theta = theta - 0.1 * view.sum(gradient, theta) / 100
                sizes.append(view.info.size)
            return theta, jnp.stack(sizes)

    def compiled_for(size: int):
        pop = SyntheticLinear.create(jax.random.key(0), size, dim)
        plan = ExecutionPlan.for_backend().fitted(size)
        program = jax.jit(lambda pop, key: run_rounds(Step(), pop, None, key, 1, plan))
        return program.lower(pop, jax.random.key(1)).compile()

    compiled = compiled_for(n)
    memory = compiled.memory_analysis()
    footprint = memory.temp_size_in_bytes + memory.output_size_in_bytes
    assert footprint < 2**20, footprint
    # the work is the cohort's, not the population's: XLA's operation count of the round grows
    # by less than 10x from 10^4 to 10^8 clients (the cohort's draw: longer ids, cycle walks),
    # where a pass over n would grow 10^4 times
    flops = compiled.cost_analysis()["flops"]
    assert flops < 10 * compiled_for(10**4).cost_analysis()["flops"]
    theta, sizes = jax.block_until_ready(compiled(population, jax.random.key(2)))
    assert np.all(np.isfinite(np.asarray(theta)))
    assert int(sizes[0, 0]) == 100 and 50 < int(sizes[0, 1]) <= 166
    naive = jax.jit(lambda key: jax.random.permutation(key, n)[:100]).lower(jax.random.key(0))
    assert naive.compile().memory_analysis().temp_size_in_bytes >= 4 * n
