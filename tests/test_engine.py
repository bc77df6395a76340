"""Engine: block-size invariance (bit-identical), determinism, 8-device sharding, one compile."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfed.algorithms import modulated
from jfed.algorithms.linear import second_moments
from jfed.data import ArrayClients, SyntheticLinear
from jfed.engine import ExecutionPlan, aggregate, client_mesh, run_rounds, simulate
from jfed.engine.loop import _simulate

N_CLIENTS, DIM = 10_007, 5  # not a multiple of any block: padding is exercised


@pytest.fixture(scope="module")
def population():
    return SyntheticLinear.create(jax.random.key(0), N_CLIENTS, DIM)


def _run(population, plan, seed=1, rounds=3):
    hp = modulated.hyperparams(noise_std=2.0, directions=None)
    algorithm = modulated.Iterative(DIM, directions=2)
    return simulate(algorithm, population, hp, jax.random.key(seed), rounds, plan)


def _leaves_equal(a, b) -> bool:
    return all(
        bool(jnp.array_equal(x, y))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def test_block_size_invariance_is_bit_identical(population):
    reference = _run(population, ExecutionPlan(block_size=256, chunk_size=256))
    for block in (512, 1024, 768, 4096, 16_384):
        result = _run(population, ExecutionPlan(block_size=block, chunk_size=256))
        assert _leaves_equal(result, reference), f"block_size={block} changed the result"


def test_chunk_size_changes_only_rounding(population):
    a = _run(population, ExecutionPlan(block_size=1024, chunk_size=256))[0].theta
    b = _run(population, ExecutionPlan(block_size=1024, chunk_size=512))[0].theta
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_deterministic_for_a_seed_and_different_across_seeds(population):
    plan = ExecutionPlan(block_size=1024, chunk_size=256)
    assert _leaves_equal(_run(population, plan, seed=5), _run(population, plan, seed=5))
    assert not _leaves_equal(_run(population, plan, seed=5), _run(population, plan, seed=6))


def test_array_clients_are_block_invariant_too():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(1_001, DIM)), rng.normal(size=1_001)
    population = ArrayClients.from_numpy(X, y)
    results = [
        _run(population, ExecutionPlan(block_size=b, chunk_size=128)) for b in (128, 384, 1024)
    ]
    assert _leaves_equal(results[0], results[1]) and _leaves_equal(results[0], results[2])


def test_eight_device_sharding_matches_one_device(population):
    assert len(jax.devices("cpu")) >= 8, "conftest forces 8 CPU devices"
    one = ExecutionPlan(block_size=256, chunk_size=256)
    eight = ExecutionPlan(block_size=256, chunk_size=256, mesh=client_mesh(8, backend="cpu"))
    hp = modulated.hyperparams(noise_std=2.0)
    V = modulated.random_directions(jax.random.key(9), DIM, 2)
    broadcast = modulated.Broadcast(V, hp.alpha, hp.beta, hp.omega, hp.noise_std, hp.clip_norm)

    def stats(plan):
        fn = jax.jit(
            lambda key: aggregate(
                modulated.client_message, broadcast, population, key, plan, second_moments
            )
        )
        return fn(jax.random.key(4))

    s1, s8 = stats(one), stats(eight)
    assert float(s1.count) == float(s8.count) == N_CLIENTS
    # Both runs add the same per-chunk sums in float32, in a different grouping. Recursive
    # summation of m terms errs by at most (m - 1) u sum|terms| (u = 2^-24), so the two differ
    # by at most 2 (m - 1) u sum|terms|, with m the number of chunks.
    chunks = -(-N_CLIENTS // 256)
    u = np.finfo(np.float32).eps / 2
    bound = 2 * (chunks - 1) * u * np.abs(np.asarray(s1.zz)).sum() + 1e-6
    assert np.abs(np.asarray(s1.zz) - np.asarray(s8.zz)).max() <= bound
    assert not np.array_equal(np.asarray(s1.zz), np.zeros_like(s1.zz))
    # The whole run: the rounding-level differences propagate through 3 well-conditioned rounds.
    theta1 = _run(population, one)[0].theta
    theta8 = _run(population, eight)[0].theta
    np.testing.assert_allclose(theta1, theta8, rtol=1e-4, atol=1e-5)


def test_one_compile_serves_many_noise_scales(population):
    plan = ExecutionPlan(block_size=1024, chunk_size=256)
    algorithm = modulated.Iterative(DIM)
    simulate(
        algorithm, population, modulated.hyperparams(noise_std=1.0), jax.random.key(0), 2, plan
    )
    before = _simulate._cache_size()
    for sigma in (0.5, 2.0, 8.0):
        simulate(
            algorithm,
            population,
            modulated.hyperparams(noise_std=sigma),
            jax.random.key(0),
            2,
            plan,
        )
    assert _simulate._cache_size() == before


def test_procedural_population_holds_no_per_client_array():
    huge = SyntheticLinear.create(jax.random.key(0), 10**8, DIM)
    sizes = [np.size(leaf) for leaf in jax.tree.leaves(huge)]
    assert max(sizes) <= DIM
    X, y = huge.records(jnp.array([0, 99_999_999]))
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


def test_timed_simulation_separates_compile_from_run_and_changes_nothing(population):
    """``timings`` compiles ahead of time and runs the compiled program: same result, bit for
    bit, as the plain call; the record fields say how long each part took."""
    from jfed.methods import ModulatedIterative
    from jfed.sweep import run

    hp = modulated.hyperparams(noise_std=1.0)
    algorithm = modulated.OneShot(DIM)
    plain = simulate(algorithm, population, hp, jax.random.key(3), 1)
    timings: dict = {}
    timed = simulate(algorithm, population, hp, jax.random.key(3), 1, timings=timings)
    assert _leaves_equal(plain, timed)
    assert timings["compile_seconds"] > 0 and timings["run_seconds"] > 0
    record = run(ModulatedIterative(dataset="modechoice", epsilon=2.0, rounds=2))
    assert record["run_seconds"] > 0 and record["compile_seconds"] > 0
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
    plans = [
        ExecutionPlan(block_size=64, chunk_size=32),
        ExecutionPlan(block_size=256, chunk_size=32),
        ExecutionPlan(block_size=32, chunk_size=32, mesh=client_mesh(8, backend="cpu")),
    ]
    stacks = [
        jax.jit(lambda b, plan=plan: stack(client, b, population, key, plan.fitted(1_000)))(
            jnp.float32(2.0)
        )
        for plan in plans
    ]  # fmt: skip
    X, _ = population.records(jnp.arange(1_000))
    np.testing.assert_array_equal(np.asarray(stacks[0]["x"]), np.asarray(2.0 * X))
    for other in stacks[1:]:
        for name in ("x", "noise"):
            np.testing.assert_array_equal(np.asarray(other[name]), np.asarray(stacks[0][name]))
    summed = aggregate(client, jnp.float32(2.0), population, key, plans[0].fitted(1_000))
    assert summed["x"].shape == (4,) and stacks[0]["x"].shape == (1_000, 4)
    np.testing.assert_allclose(np.asarray(stacks[0]["x"]).sum(0), summed["x"], rtol=1e-4)


def test_only_the_chunks_past_the_end_are_masked():
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
    for block in (64, 128, 256):
        plan = ExecutionPlan(block_size=block, chunk_size=chunk)
        total = jax.jit(
            lambda b, plan=plan: aggregate(client, b, population, key, plan, statistic)
        )(jnp.float32(2.0))
        assert float(total["count"]) == n and float(total["weight"]) == n
        X, y = population.records(jnp.arange(n))
        np.testing.assert_allclose(float(total["y"]), float(np.sum(np.asarray(y, np.float64))),
                                   rtol=1e-5)  # fmt: skip
        np.testing.assert_allclose(float(total["first"]), 2.0 * float(np.sum(X[:, 0])), rtol=1e-4)


@pytest.mark.parametrize("workload", ["modulated", "W"])
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

    def rounds(key):
        return jax.jit(lambda k: run_rounds(algorithm, population, hp, k, 2, plan)[0])(key)

    on_cpu, elsewhere = both_branches(lambda: rounds(jax.random.key(3)))
    for x, y in zip(jax.tree.leaves(on_cpu), jax.tree.leaves(elsewhere), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    # negative control: another key's round (other draws) lies far outside that tolerance
    other = rounds(jax.random.key(4))
    assert not np.allclose(np.asarray(other.theta), on_cpu.theta, rtol=1e-3, atol=1e-3)
