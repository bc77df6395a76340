"""Engine: block-size invariance (bit-identical), determinism, 8-device sharding, one compile."""

from dataclasses import dataclass
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfed.algorithms import modulated
from jfed.data import ArrayClients, SyntheticLinear
from jfed.engine import ExecutionPlan, aggregate, client_mesh, run_rounds, simulate
from jfed.engine.loop import _simulate

N_CLIENTS, DIM = 10_007, 5  # not a multiple of any block: padding is exercised


@pytest.fixture(scope="module")
def population():
    return SyntheticLinear.create(jax.random.key(0), N_CLIENTS, DIM)


# ExecutionPlan.fitted keeps whole chunks of 256 over the 10,007 clients (40 chunks, the last
# one padded): 1 chunk a block, 4 a block (10 blocks) and all 40 in one block
REFERENCE = ExecutionPlan(block_size=256, chunk_size=256)
PLAN = ExecutionPlan(block_size=1024, chunk_size=256)
ONE_BLOCK = ExecutionPlan(block_size=16_384, chunk_size=256)


@dataclass(frozen=True)
class WithMoments(modulated.Iterative):
    """The iterative modulated estimator, its rounds' diagnostics extended by the summed second
    moments the server received (what the 8-device test bounds)."""

    def round(self, state, hp, key, clients):
        broadcast = modulated._broadcast(hp, key, self.dim, self.directions)
        stats = modulated._release(self.directions, hp, broadcast, key, clients)
        new_state, info = self.server_step(state, hp, broadcast, stats)
        return new_state, (info, stats)


@dataclass(frozen=True)
class NoisyMean:
    """A small algorithm for the claims that are the engine's alone (a population type, the
    timings): every client sends its record, scaled by the server's state, plus standard normals
    from its own key; the server keeps the mean. Its program compiles in a fraction of the
    modulated estimator's time."""

    def init(self, hp, key):
        return jnp.ones(DIM + 1)

    def round(self, state, hp, key, clients):
        def client(broadcast, record, key):
            x, y = record
            z = jnp.append(x, y) * broadcast + jax.random.normal(key, (DIM + 1,))
            return {"z": z, "count": jnp.float32(1.0)}

        total = clients.sum(client, state)
        mean = total["z"] / total["count"]
        return mean, mean


def _run(population, plan, seed=1, noise_std=2.0, **kwargs):
    """Three rounds of the iterative modulated estimator: one compiled program per plan (and per
    population type), which every test that runs the same plan shares."""
    hp = modulated.hyperparams(noise_std=noise_std, directions=None)
    algorithm = WithMoments(DIM, directions=2)
    return simulate(algorithm, population, hp, jax.random.key(seed), 3, plan, **kwargs)


def _leaves_equal(a, b) -> bool:
    """Every leaf the same bits (compared on the host: no program compiled per leaf shape)."""
    return all(
        np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


@pytest.mark.parametrize(
    "plan",
    [
        PLAN,  # blocks of 4 chunks against blocks of 1: several blocks of several chunks
        pytest.param(ONE_BLOCK, marks=pytest.mark.slow),  # the same loops, one block of 40
    ],
    ids=["4 chunks a block", "one block"],
)
def test_block_size_invariance_is_bit_identical(population, plan):
    """A block's chunks are a sequential loop, and the blocks another: blocks of several chunks
    against blocks of one give the same bits."""
    result = _run(population, plan)
    assert _leaves_equal(result, _run(population, REFERENCE)), f"block_size={plan.block_size}"


def test_chunk_size_changes_only_rounding(population):
    a = _run(population, PLAN)[0].theta
    b = _run(population, ExecutionPlan(block_size=1024, chunk_size=512))[0].theta
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_deterministic_for_a_seed_and_different_across_seeds(population):
    assert _leaves_equal(_run(population, PLAN, seed=5), _run(population, PLAN, seed=5))
    assert not _leaves_equal(_run(population, PLAN, seed=5), _run(population, PLAN, seed=6))


def test_array_clients_are_block_invariant_too():
    """1,001 clients in 8 chunks of 128 (the last padded): a block of one chunk against one
    block of all 8, each client's record gathered and its own key drawn from. Negative control:
    another run key changes the result."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(1_001, DIM)), rng.normal(size=1_001)
    population = ArrayClients.from_numpy(X, y)

    def run(plan, seed=1):
        return simulate(NoisyMean(), population, None, jax.random.key(seed), 3, plan)

    one_chunk = run(ExecutionPlan(block_size=128, chunk_size=128))
    every_chunk = run(ExecutionPlan(block_size=1024, chunk_size=128))
    assert _leaves_equal(one_chunk, every_chunk)
    assert not _leaves_equal(one_chunk, run(ExecutionPlan(block_size=128, chunk_size=128), 2))


def test_eight_device_sharding_matches_one_device(population):
    assert len(jax.devices("cpu")) >= 8, "conftest forces 8 CPU devices"
    eight = ExecutionPlan(block_size=256, chunk_size=256, mesh=client_mesh(8, backend="cpu"))
    (state1, (_, s1)), (state8, (_, s8)) = _run(population, REFERENCE), _run(population, eight)
    np.testing.assert_array_equal(s1.count, N_CLIENTS)
    np.testing.assert_array_equal(s8.count, N_CLIENTS)
    # Every round's release: both runs add the same per-chunk sums in float32 (the messages do
    # not depend on the estimate, only on the round's directions), in a different grouping.
    # Recursive summation of m terms errs by at most (m - 1) u sum|terms| (u = 2^-24), so the
    # two differ by at most 2 (m - 1) u sum|terms|, with m the number of chunks.
    chunks = -(-N_CLIENTS // 256)
    u = np.finfo(np.float32).eps / 2
    zz1, zz8 = np.asarray(s1.zz), np.asarray(s8.zz)  # f32[rounds, ...]
    for t in range(len(zz1)):
        bound = 2 * (chunks - 1) * u * np.abs(zz1[t]).sum() + 1e-6
        assert np.abs(zz1[t] - zz8[t]).max() <= bound, t
    assert not np.array_equal(zz1, np.zeros_like(zz1))
    # The whole run: the rounding-level differences propagate through 3 well-conditioned rounds.
    np.testing.assert_allclose(state1.theta, state8.theta, rtol=1e-4, atol=1e-5)


def test_one_compile_serves_many_noise_scales(population):
    first = _run(population, PLAN, noise_std=1.0)
    before = _simulate._cache_size()
    results = [_run(population, PLAN, noise_std=sigma) for sigma in (0.5, 2.0, 8.0)]
    assert _simulate._cache_size() == before
    # the scales did reach the program: every run differs from the first
    assert not any(_leaves_equal(first, result) for result in results)


def test_procedural_population_holds_no_per_client_array():
    huge = SyntheticLinear.create(jax.random.key(0), 10**8, DIM)
    sizes = [np.size(leaf) for leaf in jax.tree.leaves(huge)]
    assert max(sizes) <= DIM
    X, y = jax.jit(huge.records)(jnp.array([0, 99_999_999]))
    assert X.shape == (2, DIM) and y.shape == (2,) and np.all(np.isfinite(np.asarray(X)))


def test_plan_validation():
    with pytest.raises(ValueError, match="block_size a positive multiple of chunk_size"):
        ExecutionPlan(block_size=300, chunk_size=256)
    assert ExecutionPlan(block_size=16_384, chunk_size=512).fitted(1000).block_size == 1024
    assert ExecutionPlan().fitted(65_536).block_size == ExecutionPlan().block_size
    # 10^5 clients: 5 blocks of 5 chunks (102,400 computed), not 2 x 65,536 (131,072)
    fitted = ExecutionPlan().fitted(10**5)
    assert (fitted.block_size, -(-(10**5) // fitted.block_size)) == (5 * 4096, 5)
    # 10^6 clients: the 245 chunks that cover them (35 blocks of 7), not 16 x 16 = 256
    assert ExecutionPlan().fitted(10**6).block_size == 7 * 4096
    for n in (1, 7, 4096, 4097, 65_536, 65_537, 10**5, 10**6, 10**7 + 3):
        plan = ExecutionPlan().fitted(n)
        computed = -(-n // plan.block_size) * plan.block_size
        assert plan.block_size <= 65_536 and plan.block_size % plan.chunk_size == 0
        assert n <= computed < n + plan.chunk_size  # under one chunk of padding
    # fewer clients than a chunk: vmapped at their own width (rounded up to 8), not 4,096
    small = ExecutionPlan().fitted(25)
    assert (small.chunk_size, small.block_size) == (32, 32)
    assert (
        ExecutionPlan(chunk_size=256, block_size=256, mesh=client_mesh(8, backend="cpu"))
        .fitted(100)
        .chunk_size
        == 16
    )


def test_default_plan_is_sized_for_the_backend():
    cpu, gpu = ExecutionPlan.for_backend("cpu"), ExecutionPlan.for_backend("gpu")
    assert (cpu.chunk_size, cpu.block_size) == (4_096, 65_536)
    assert (gpu.chunk_size, gpu.block_size) == (262_144, 1_048_576)
    assert ExecutionPlan.for_backend() == ExecutionPlan.for_backend(jax.default_backend())


def test_timed_simulation_separates_compile_from_run_and_changes_nothing(population, monkeypatch):
    """``timings`` compiles ahead of time and runs the compiled program: the same result, bit
    for bit, as the plain call. The clock is read around the compilation and around the run, in
    that order: with a clock that ticks once a reading, each field is one tick, and XLA's
    compilation (or its load from a persistent cache) lies between the first two readings, none
    between the last two. (A program no other test runs, so it is compiled here; the plain call
    then finds it in JAX's cache.) A method's run record carries both fields."""
    from jfed.engine import loop
    from jfed.methods import OLS
    from jfed.sweep import run as run_method

    events: list[str] = []

    def tick() -> float:
        events.append("clock")
        return float(events.count("clock"))

    def on_compile(event: str, duration: float, **kwargs) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            events.append("compile")

    key = jax.random.key(3)  # made before the clock is watched

    def mean(**timings):
        return simulate(NoisyMean(), population, None, key, 2, PLAN, **timings)

    timings: dict = {}
    with monkeypatch.context() as patched:
        patched.setattr(loop, "time", SimpleNamespace(perf_counter=tick))
        jax.monitoring.register_event_duration_secs_listener(on_compile)
        try:
            timed = mean(timings=timings)
        finally:
            jax.monitoring.unregister_event_duration_listener(on_compile)
    assert timings == {"compile_seconds": 1.0, "run_seconds": 1.0}
    assert events == ["clock", "compile", "clock", "clock", "clock"], events
    assert _leaves_equal(mean(), timed)
    record = run_method(OLS(dataset="modechoice"))  # a method whose program compiles at once
    assert all(
        isinstance(record[field], float) and 0 <= record[field] < float("inf")
        for field in ("run_seconds", "compile_seconds")
    )
    assert record["plan"]["chunk_size"] == 504
    assert record["device"].startswith(jax.devices()[0].platform)


@pytest.mark.usefixtures("on_cpu")  # bit for bit against the 8-device mesh: the CPU's claim
def test_stacked_messages_are_every_client_in_order_for_every_plan():
    """``stack`` returns each client's own message, in client order, the same bits for every
    block size and on an 8-device mesh (padding dropped). Negative control: a sum over the same
    clients is not the stack (and the stack's row sum is that sum)."""
    from jfed.engine import stack

    population = SyntheticLinear.create(jax.random.key(3), 1_000, 4)

    def client(broadcast, record, key):
        x, _ = record
        return {"x": x * broadcast, "noise": jax.random.normal(key, (2,))}

    key = jax.random.key(9)
    # 32 chunks of 32: blocks of 2 chunks on one device, of 1 chunk on each of 8 devices
    blocks = ExecutionPlan(block_size=64, chunk_size=32).fitted(1_000)
    mesh = ExecutionPlan(block_size=32, chunk_size=32, mesh=client_mesh(8, backend="cpu"))

    @jax.jit
    def stacked_and_summed(b):
        return stack(client, b, population, key, blocks), aggregate(
            client, b, population, key, blocks
        )

    stacked, summed = stacked_and_summed(jnp.float32(2.0))
    on_mesh = jax.jit(lambda b: stack(client, b, population, key, mesh.fitted(1_000)))(
        jnp.float32(2.0)
    )
    X, _ = jax.jit(population.records)(jnp.arange(1_000))
    np.testing.assert_array_equal(np.asarray(stacked["x"]), np.asarray(2.0 * X))
    for name in ("x", "noise"):
        np.testing.assert_array_equal(np.asarray(on_mesh[name]), np.asarray(stacked[name]))
    assert summed["x"].shape == (4,) and stacked["x"].shape == (1_000, 4)
    np.testing.assert_allclose(np.asarray(stacked["x"]).sum(0), summed["x"], rtol=1e-4)


@pytest.mark.parametrize(
    "block",
    [
        128,  # two blocks of two chunks: full chunks before and beside the padded one
        # the same conditional per chunk, with one chunk a block and with one block:
        pytest.param(64, marks=pytest.mark.slow),
        pytest.param(256, marks=pytest.mark.slow),
    ],
)
def test_only_the_chunks_past_the_end_are_masked(block):
    """On CPU a full chunk skips the masking of padded clients (a conditional per chunk): every
    real client is still counted once and no padded one, and a chunk statistic equals the
    masked one (the same messages, weights 1)."""
    n, chunk = 3 * 64 + 5, 64  # the fourth chunk holds 5 clients and 59 padded ids
    population = SyntheticLinear.create(jax.random.key(2), n, DIM)

    def client(broadcast, record, key):
        x, y = record
        return {"count": jnp.float32(1.0), "y": y, "first": x[0] * broadcast}

    def statistic(messages, weights):
        return {**jax.tree.map(lambda m: jnp.sum(m, axis=0), messages), "weight": jnp.sum(weights)}

    key = jax.random.key(4)
    plan = ExecutionPlan(block_size=block, chunk_size=chunk)
    total = jax.jit(lambda b: aggregate(client, b, population, key, plan, statistic))(
        jnp.float32(2.0)
    )
    assert float(total["count"]) == n and float(total["weight"]) == n
    X, y = jax.jit(population.records)(jnp.arange(n))
    np.testing.assert_allclose(float(total["y"]), float(np.sum(np.asarray(y, np.float64))),
                               rtol=1e-5)  # fmt: skip
    np.testing.assert_allclose(float(total["first"]), 2.0 * float(np.sum(X[:, 0])), rtol=1e-4)


@pytest.mark.parametrize(
    "workload",
    # both branch sites, reached by the modulated map; W reaches the same two through a local
    # randomizer's aggregator, on an array population (slow)
    ["modulated", pytest.param("W", marks=pytest.mark.slow)],
)
def test_a_round_is_the_same_with_every_backends_branches(both_branches, workload):
    """The branches other backends than the CPU lower (no masking skipped for full chunks, no draws
    held in memory by a conditional), forced here, over a population that ends inside a chunk: the
    same draws; the statistic of a full chunk, masked or not, may differ in float rounding (XLA
    fuses the two programs differently: seen at 6e-8 in the modulated round)."""
    from jfed.algorithms import dpsgd

    n, dim = 3 * 64 + 5, 4
    plan = ExecutionPlan(block_size=128, chunk_size=64)
    if workload == "modulated":
        algorithm, hp = modulated.OneShot(dim), modulated.hyperparams(noise_std=2.0)
        population = SyntheticLinear.create(jax.random.key(2), n, dim)
    else:
        algorithm = dpsgd.FedAvg(dim)
        hp = dpsgd.hyperparams(clip_norm=1.0, learning_rate=1.0, noise_std=1.0, radius=1e30)
        rng = np.random.default_rng(0)
        population = ArrayClients(
            jnp.asarray(rng.standard_normal((n, dim), np.float32)),
            jnp.asarray(rng.standard_normal(n, np.float32)),
        )

    rounds = jax.jit(lambda k: run_rounds(algorithm, population, hp, k, 2, plan)[0])
    # each way compiled once: the run of key 3, and of key 4 for the negative control
    on_cpu, elsewhere = both_branches(
        lambda: (rounds(jax.random.key(3)), rounds(jax.random.key(4)))
    )
    for x, y in zip(jax.tree.leaves(on_cpu), jax.tree.leaves(elsewhere), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    # negative control: another key's round (other draws) lies far outside that tolerance
    three, other = on_cpu
    assert not np.allclose(other.theta, three.theta, rtol=1e-3, atol=1e-3)
