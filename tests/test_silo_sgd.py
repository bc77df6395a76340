"""Silo algorithms: sensitivity, availability, AC-SA, invariance, one-pass, the documented
commands. Their noise calibration and guarantees: tests/test_silo_privacy.py."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfed import catalog
from jfed.algorithms import silo_aggregators, silo_privacy, silo_sgd
from jfed.algorithms.losses import LOSSES, Loss
from jfed.data.silos import SiloData, SiloTask
from jfed.engine import ExecutionPlan, simulate

UNIT_ROUNDOFF = 2.0**-24  # float32


def _silo(X, y):
    return SiloData.from_lists([X], [y]).record(jnp.int32(0))


def logistic_silos(sizes: tuple[int, ...], dim: int, seed: int = 0) -> SiloTask:
    """Logistic silos of ``sizes`` records built on the host (features N(0, I / 9), labels fair
    coins; the test split is every record): cheap to build, unlike the procedural generator,
    which compiles its own program on every call."""
    rng = np.random.default_rng(seed)
    X = [rng.normal(size=(n, dim)) / 3 for n in sizes]
    y = [rng.integers(0, 2, n).astype(float) for n in sizes]
    test = (np.concatenate(X), np.concatenate(y))
    return SiloTask("logistic", "logistic", 1, SiloData.from_lists(X, y), test,
                    f"{len(sizes)} silos")  # fmt: skip


@pytest.mark.parametrize("loss_name", ["logistic", "squared"])
def test_one_record_moves_the_minibatch_mean_by_at_most_2l_over_k(loss_name):
    """Replace one record by an adversarial one: the noise-free minibatch mean the aggregator
    releases changes by at most 2L/K, over 64 minibatches drawn at once (jitted). Tolerance: the
    float32 error of a K-term weighted sum, ``gamma_K sqrt(p) L`` per message (gamma_K = K u /
    (1 - K u)), twice, plus a few roundings of the clip. Negative control: without clipping (L
    huge) the same replacement moves it far more."""
    loss, batch, clip, records, dim, draws = Loss(loss_name), 6, 0.5, 16, 4, 64
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(records, dim)), rng.integers(0, 2, records).astype(float)
    w_host = rng.normal(size=dim)
    X_adversarial = X.copy()
    # a far-away record whose loss is steep (logistic: margin of the wrong sign for its label)
    X_adversarial[3] = 50.0 * w_host / np.linalg.norm(w_host) * (1.0 if y[3] == 0 else -1.0)
    w = jnp.asarray(w_host, jnp.float32)
    aggregator = silo_aggregators.SiloClippedSum()
    sampler = silo_aggregators.SAMPLINGS["with-replacement"]

    @jax.jit
    def moves(key, clip_norm):
        silo, other = _silo(X, y), _silo(X_adversarial, y)
        indices, weights = sampler.draw(key, silo, batch, None, None)
        # the replaced record is in the batch exactly once (with replacement it could be drawn
        # c times, moving the mean by up to c 2L/K: the sampling analysis accounts for that)
        indices = jnp.where(indices == 3, 4, indices).at[0].set(3)

        def released(view):
            message = silo_aggregators.SiloMessage(
                loss.per_example_gradients(w, *view.rows(indices)), weights, jnp.float32(1.0),
                view.silo_id,
            )  # fmt: skip
            return aggregator.privatize(silo_aggregators.ClipParams(clip_norm), message, key)[0]

        return jnp.linalg.norm(released(silo) - released(other))

    keys = jax.random.split(jax.random.key(0), draws)
    worst = float(jnp.max(jax.vmap(moves, in_axes=(0, None))(keys, jnp.float32(clip))))
    gamma = batch * UNIT_ROUNDOFF / (1 - batch * UNIT_ROUNDOFF)
    tolerance = 2 * clip / batch * (1 + 8 * UNIT_ROUNDOFF) + 2 * gamma * math.sqrt(dim) * clip
    assert worst <= tolerance
    unclipped = float(moves(keys[0], jnp.float32(1e6)))
    assert unclipped > 10 * 2 * clip / batch


def test_availability_distribution():
    """fixed: exactly M per round, each silo with probability M/N; bernoulli: mean M. Binomial
    tolerances (4.5 standard errors). Negative control: a sampler that always picks the first M
    silos fails the uniformity check."""
    N, M, draws = 20, 5, 4000
    keys = jax.random.split(jax.random.key(0), draws)
    fixed = np.asarray(jax.vmap(lambda k: silo_sgd.availability_mask(k, N, "fixed", M))(keys))
    assert np.all(fixed.sum(1) == M)
    p = M / N
    tolerance = 4.5 * math.sqrt(p * (1 - p) / draws)

    def uniform(masks):
        return bool(np.all(np.abs(masks.mean(0) - p) <= tolerance))

    assert uniform(fixed)
    first_m = np.zeros_like(fixed)
    first_m[:, :M] = 1
    assert not uniform(first_m)
    bern = np.asarray(jax.vmap(lambda k: silo_sgd.availability_mask(k, N, "bernoulli", M))(keys))
    counts = bern.sum(1)
    assert abs(counts.mean() - M) <= 4.5 * math.sqrt(N * p * (1 - p) / draws)
    assert counts.std() == pytest.approx(math.sqrt(N * p * (1 - p)), rel=0.1)


@pytest.fixture(scope="module")
def silos():
    return logistic_silos((120,) * 8, 5, seed=3)


def _run(algorithm, task, noise=0.0, seed=0, plan=None, step=1.0):
    hp = silo_sgd.hyperparams(task.n_silos, step_size=step, noise_std=noise)
    return simulate(algorithm, task.train, hp, jax.random.key(seed), algorithm.rounds, plan)


def test_acsa_without_momentum_is_plain_projected_sgd(silos):
    common = dict(loss=Loss("logistic"), dim=5, n_silos=8, batch=6, rounds=12)
    plain = silo_sgd.NoisyMBSGD(**common, sampling="with-replacement")
    acsa = silo_sgd.AcceleratedMBSGD(**common, sampling="with-replacement", momentum=False)
    a, _ = _run(plain, silos, noise=0.3)
    b, _ = _run(acsa, silos, noise=0.3)
    np.testing.assert_array_equal(np.asarray(a.w), np.asarray(b.w))


ROUNDS = 300


def test_acceleration_beats_plain_sgd_on_a_noiseless_strongly_convex_quadratic():
    """Squared loss, ill-conditioned features, full deterministic batches (K = n without
    replacement), no noise: rounds to reach excess risk 1e-4. Accelerated needs fewer than half
    of plain SGD's rounds, multi-stage AC-SA fewer than plain SGD's."""
    rng = np.random.default_rng(0)
    scales = np.array([1.0, 0.3, 0.1, 0.05])
    X = [rng.normal(size=(30, 4)) * scales / 2 for _ in range(4)]
    y = [x @ np.array([1.0, -2.0, 3.0, 1.0]) for x in X]
    data = SiloData.from_lists(X, y)
    pooled = np.concatenate(X)
    smoothness = np.linalg.eigvalsh(pooled.T @ pooled / len(pooled))[-1]
    target = np.concatenate(y)
    w_star = np.linalg.lstsq(pooled, target, rcond=None)[0]

    def risk(w):
        return 0.5 * np.mean((pooled @ w - target) ** 2) - 0.5 * np.mean(
            (pooled @ w_star - target) ** 2
        )

    def rounds_to(algorithm, step):
        hp = silo_sgd.hyperparams(4, step_size=step, clip_norm=1e6, radius=100.0)
        _, infos = simulate(algorithm, data, hp, jax.random.key(0), algorithm.rounds)
        risks = [risk(np.asarray(w, np.float64)) for w in np.asarray(infos.w)]
        return next((t + 1 for t, r in enumerate(risks) if r <= 1e-4), math.inf)

    # no noise: the non-private aggregator (what the private one releases at noise 0, as the
    # test below shows), whose programs compile without the noise sampler
    common = dict(loss=Loss("squared"), dim=4, n_silos=4, batch=30, rounds=ROUNDS,
                  aggregator=silo_aggregators.SiloClippedSum())  # fmt: skip
    plain = rounds_to(silo_sgd.NoisyMBSGD(**common, sampling="without-replacement"), 1 / smoothness)
    accelerated = rounds_to(
        silo_sgd.AcceleratedMBSGD(**common, sampling="without-replacement"), 1 / (2 * smoothness)
    )
    assert accelerated < plain / 2
    multistage = silo_sgd.AcceleratedMBSGD(
        **common, sampling="without-replacement", stages=silo_sgd.multistage_schedule(ROUNDS, 8)
    )
    assert rounds_to(multistage, 1 / (2 * smoothness)) < plain


def test_noiseless_noisy_mbsgd_equals_non_private_and_noise_enters_linearly(silos):
    # the program of the AC-SA test above (12 rounds); the linearity is read after its first
    algorithm = silo_sgd.NoisyMBSGD(Loss("logistic"), 5, 8, 6, 12, sampling="with-replacement")
    clean, clean_rounds = _run(algorithm, silos, noise=0.0)
    again, _ = _run(algorithm, silos, noise=0.0)
    np.testing.assert_array_equal(np.asarray(clean.w), np.asarray(again.w))
    non_private = silo_sgd.NoisyMBSGD(Loss("logistic"), 5, 8, 6, 12, sampling="with-replacement",
                                      aggregator=silo_aggregators.SiloClippedSum())  # fmt: skip
    plain, _ = _run(non_private, silos, noise=0.3)  # its aggregator adds no noise
    np.testing.assert_array_equal(np.asarray(clean.w), np.asarray(plain.w))
    # first step, far from the projection boundary: w(s) - w(0) is exactly linear in s
    first = [np.asarray(_run(algorithm, silos, noise=s)[1].w[0]) for s in (0.01, 0.02)]
    clean_first = np.asarray(clean_rounds.w[0])
    np.testing.assert_allclose(first[1] - clean_first, 2 * (first[0] - clean_first), rtol=1e-4,
                               atol=1e-6)  # fmt: skip


@pytest.mark.parametrize(
    "algorithm",
    [
        silo_sgd.NoisyMBSGD(Loss("logistic"), 5, 8, 6, 4, sampling="poisson"),
        silo_sgd.AcceleratedMBSGD(Loss("logistic"), 5, 8, 6, 4),
        silo_sgd.LocalSGD(Loss("logistic"), 5, 8, 3, 4, availability="fixed", available=3),
        silo_sgd.ShuffleMBSGD(Loss("logistic"), 5, 8, 6, 4),
    ],
)
def test_silo_block_invariance_and_determinism(algorithm, silos):
    """Four blocks of two silos and one block of eight give the same bits; another seed (on the
    same compiled program) gives other numbers."""
    plans = [ExecutionPlan(block_size=b, chunk_size=2) for b in (2, 8)]
    four_blocks, one_block = (_run(algorithm, silos, noise=0.2, plan=p)[0].w for p in plans)
    np.testing.assert_array_equal(np.asarray(four_blocks), np.asarray(one_block))
    different = _run(algorithm, silos, noise=0.2, seed=1, plan=plans[0])[0].w
    assert not np.array_equal(np.asarray(four_blocks), np.asarray(different))


def test_one_pass_batches_are_disjoint():
    count, batch, rounds = 37, 4, 9
    indices = jnp.concatenate(
        [
            silo_aggregators.one_pass_indices(jax.random.key(5), 2, jnp.int32(count), 50, batch, r)
            for r in range(rounds)
        ]
    )
    assert len(set(np.asarray(indices).tolist())) == batch * rounds
    assert int(indices.max()) < count


@pytest.mark.parametrize("sampling", [
    None,
    pytest.param(silo_aggregators.WITH_REPLACEMENT, marks=pytest.mark.xfail(
        strict=True, reason="negative control: K draws with replacement repeat records")),
])  # fmt: skip
def test_shuffle_mbsgd_draws_no_record_twice_in_a_round(sampling):
    """shuffle-mbsgd's shuffling bound covers ONE changed message among a round's, so a record
    may send at most one: ShuffleMBSGD's sampler (``None``: the program's own) draws K distinct
    records of the silo every round. A silo of K + 1 records over 2,000 rounds' keys: every
    round's K indices are distinct real records. Negative control: sampling with replacement
    (shuffle-mbsgd's former sampler) repeats a record in about 96% of the rounds there."""
    batch, count, rounds = 6, 7, 2000
    rng = np.random.default_rng(0)
    silo = SiloData.from_lists(
        [rng.normal(size=(count, 3))], [rng.integers(0, 2, count).astype(float)]
    ).record(jnp.int32(0))
    program = silo_sgd.ShuffleMBSGD(Loss("logistic"), 3, 1, batch, 4)
    sampler = program.sampling if sampling is None else sampling
    keys = jax.random.split(jax.random.key(3), rounds)
    indices = jax.jit(jax.vmap(lambda key: sampler.draw(key, silo, batch, None, None)[0]))(keys)
    indices = np.sort(np.asarray(indices), axis=1)
    assert indices.shape == (rounds, batch) and int(indices.max()) < count
    assert bool(np.all(np.diff(indices, axis=1) > 0))


def test_shuffle_mbsgd_refuses_a_silo_smaller_than_its_batch():
    """K distinct records a round need K records in every silo: digits-evenodd's smallest silo
    has 47, so --batch 48 is refused in one line naming the flag (47 runs: negative control)."""
    from jfed._validation import UsageError
    from jfed.methods import ShuffleMBSGD, build_experiment

    with pytest.raises(UsageError, match=r"expected --batch <= the smallest silo \(47 records\)"):
        build_experiment(ShuffleMBSGD(batch=48))
    experiment = build_experiment(ShuffleMBSGD(batch=47))
    assert experiment.sampling is silo_aggregators.WITHOUT_REPLACEMENT
    assert experiment.identity()["sampling"] == "without-replacement"


def test_multistage_schedule_and_bad_configurations():
    assert silo_sgd.multistage_schedule(30, 2) == (2, 4, 8, 16)
    assert sum(silo_sgd.multistage_schedule(31, 3)) == 31
    with pytest.raises(ValueError, match="stages summing to rounds"):
        silo_sgd.AcceleratedMBSGD(Loss("squared"), 3, 2, 2, 10, stages=(3, 3))
    with pytest.raises(ValueError, match="available in"):
        silo_sgd.NoisyMBSGD(Loss("squared"), 3, 4, 2, 10, availability="fixed", available=9)
    with pytest.raises(ValueError, match="unknown loss"):
        Loss("hinge")
    with pytest.raises(ValueError, match="noise_std >= 0"):
        silo_sgd.hyperparams(3, step_size=1.0, noise_std=-1.0)


@pytest.mark.parametrize(
    "argv",
    [["accel-mbsgd"], ["shuffle-mbsgd", "--dataset", "synthetic", "--epsilon", "3"]],
)
def test_the_documented_silo_commands_run_with_their_defaults(argv, capsys):
    """`jfed run accel-mbsgd` (one pass: rounds x batch must fit the smallest silo) and the
    shuffle model on synthetic silos (enough messages for the shuffling bound) run as shown."""
    import jfed

    assert jfed.main(["run", *argv, "--no-progress"]) == 0
    assert "test error" in capsys.readouterr().out


def test_the_former_accel_default_batch_is_refused():
    """Negative control of the documented commands: the former default batch of 10 asks 25 x 10
    records of a 47-record silo."""
    import jfed

    assert jfed.main(["run", "accel-mbsgd", "--batch", "10", "--no-progress"]) == 2


def test_dispatch_tables_name_the_catalog_choices():
    """Every name the command line offers is an object in its table, and back."""
    from jfed.data.silos import load_silos

    assert tuple(silo_aggregators.SAMPLINGS) == catalog.SAMPLINGS
    assert tuple(silo_sgd.AVAILABILITIES) == catalog.AVAILABILITIES
    assert silo_privacy.SILO_CALIBRATIONS == catalog.SILO_CALIBRATIONS
    assert {load_silos(name).loss for name in ("digits-evenodd", "digits-bylabel",
                                               "fair-sorted")} == set(LOSSES)  # fmt: skip
    with pytest.raises(ValueError, match="unknown sampling"):
        silo_sgd.NoisyMBSGD(Loss("squared"), 3, 2, 2, 2, sampling="bootstrap")
    with pytest.raises(ValueError, match="unknown availability"):
        silo_sgd.NoisyMBSGD(Loss("squared"), 3, 2, 2, 2, availability="some")
    with pytest.raises(ValueError, match="unknown calibration"):
        silo_privacy.mbsgd_noise(100, 10, 5, 1.0, 1e-4, 1.0, "guess")
