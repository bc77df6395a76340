"""Silo algorithms: sensitivity, noise formulas, availability, AC-SA, invariance, one-pass, and
the guarantee of every private silo method against dp-accounting on the events it released."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfed import catalog
from jfed.algorithms import silo_aggregators, silo_privacy, silo_sgd
from jfed.algorithms.losses import LOSSES, Loss
from jfed.data.silos import SiloData, SiloTask, synthetic_silos
from jfed.engine import ExecutionPlan, simulate

UNIT_ROUNDOFF = 2.0**-24  # float32


def _silo(X, y):
    return SiloData.from_lists([X], [y]).record(jnp.int32(0))


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


def test_noise_scales_match_the_spec_formulas():
    n, K, R, eps, delta, L = 8673, 10, 25, 2.0, 1e-9, 1.5
    theorem = silo_privacy.mbsgd_noise(n, K, R, eps, delta, L, "theorem").noise_std
    expected = math.sqrt(
        256 * L**2 * R * math.log(2.5 * R * K / (delta * n)) * math.log(2 / delta) / (n * eps) ** 2
    )
    assert theorem == pytest.approx(expected)
    experiments = silo_privacy.mbsgd_noise(n, K, R, eps, delta, L, "experiments").noise_std
    assert experiments == pytest.approx(math.sqrt(8 * L**2 * math.log(1 / delta) * R) / (n * eps))
    exact = silo_privacy.mbsgd_noise(n, K, R, eps, delta, L, "exact")
    assert exact.epsilon == pytest.approx(eps, rel=1e-3) and exact.epsilon <= eps
    assert exact.noise_std < theorem  # the exact accountant needs less noise than the theorem
    one_pass = silo_privacy.one_pass_noise(K, eps, delta, L, "theorem").noise_std
    assert one_pass == pytest.approx(math.sqrt(8 * L**2 * math.log(1 / delta)) / (eps * K))
    assert silo_privacy.one_pass_noise(K, eps, delta, L, "exact").noise_std < one_pass
    local = silo_privacy.local_sgd_noise(n, K, R, eps, delta, L).noise_std
    assert local == pytest.approx(math.sqrt(8 * K**2 * L**2 * math.log(1 / delta) * R) / (n * eps))


def test_grid_calibration_of_several_eps_meets_every_target():
    n, K, R, delta, L = 60, 10, 25, 1 / 47**2, 1.0
    targets = [0.75, 3.0, 18.0]
    grid = silo_privacy.mbsgd_noises(n, K, R, targets, delta, L)
    for target, result in zip(targets, grid, strict=True):
        # an independent evaluation of the exact eps of the returned noise
        spent = silo_privacy.exact_mbsgd_epsilon(result.noise_std, n, K, R, delta, L)
        assert spent <= target and spent == pytest.approx(result.epsilon, rel=1e-9)
        alone = silo_privacy.mbsgd_noise(n, K, R, target, delta, L)
        assert result.noise_std == pytest.approx(alone.noise_std, rel=3e-4)  # both at tol 1e-4
    formula = silo_privacy.mbsgd_noises(n, K, R, targets, delta, L, "theorem")
    assert [r.noise_std for r in formula] == [
        silo_privacy.mbsgd_noise(n, K, R, t, delta, L, "theorem").noise_std for t in targets
    ]


def test_shuffle_chain_meets_its_target_and_refuses_too_few_messages():
    chain = silo_privacy.shuffle_noise(25_000, 25, 3.0, 1e-8, 1.0)
    assert chain.epsilon <= 3.0 and chain.epsilon > 2.9
    assert chain.epsilon_round < chain.epsilon0  # amplified
    with pytest.raises(ValueError, match="more shuffled messages"):
        silo_privacy.shuffle_noise(250, 25, 3.0, 1e-8, 1.0)


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
    return synthetic_silos(jax.random.key(3), 8, 120, 5, heterogeneity=1.0)


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
    replacement), no noise: rounds to reach excess risk 1e-4."""
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

    common = dict(loss=Loss("squared"), dim=4, n_silos=4, batch=30, rounds=ROUNDS)
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
    algorithm = silo_sgd.NoisyMBSGD(Loss("logistic"), 5, 8, 6, 1, sampling="with-replacement")
    clean, _ = _run(algorithm, silos, noise=0.0)
    again, _ = _run(algorithm, silos, noise=0.0)
    np.testing.assert_array_equal(np.asarray(clean.w), np.asarray(again.w))
    non_private = silo_sgd.NoisyMBSGD(Loss("logistic"), 5, 8, 6, 1, sampling="with-replacement",
                                      aggregator=silo_aggregators.SiloClippedSum())  # fmt: skip
    plain, _ = _run(non_private, silos, noise=0.3)  # its aggregator adds no noise
    np.testing.assert_array_equal(np.asarray(clean.w), np.asarray(plain.w))
    # first step, far from the projection boundary: w(s) - w(0) is exactly linear in s
    small, _ = _run(algorithm, silos, noise=0.01)
    double, _ = _run(algorithm, silos, noise=0.02)
    np.testing.assert_allclose(
        np.asarray(double.w) - np.asarray(clean.w),
        2 * (np.asarray(small.w) - np.asarray(clean.w)),
        rtol=1e-4,
        atol=1e-6,
    )


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
    results = [
        _run(algorithm, silos, noise=0.2, plan=ExecutionPlan(block_size=b, chunk_size=2))[0].w
        for b in (2, 4, 8)
    ]
    for other in results[1:]:
        np.testing.assert_array_equal(np.asarray(results[0]), np.asarray(other))
    different = _run(algorithm, silos, noise=0.2, seed=1)[0].w
    assert not np.array_equal(np.asarray(results[0]), np.asarray(different))


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


def _independent_pld_epsilon(noise_std, n, steps, delta, clip):
    """eps of ``steps`` Poisson-sampled (q = 1/n) Gaussian steps, straight from dp-accounting."""
    import dp_accounting
    from dp_accounting.privacy_accountant import NeighboringRelation

    step = dp_accounting.PoissonSampledDpEvent(
        1.0 / n, dp_accounting.GaussianDpEvent(noise_std / clip)
    )
    accountant = dp_accounting.pld.PLDAccountant(NeighboringRelation.REPLACE_ONE, 1e-3)
    return accountant.compose(dp_accounting.SelfComposedDpEvent(step, steps)).get_epsilon(delta)


def test_local_sgd_exact_noise_is_certified_by_an_independent_pld():
    """What a Local SGD run calibrated `exact` uses is certified, by dp-accounting called
    directly, for what it runs: K R Poisson-sampled one-record steps. Negative control: the seed's
    formula noise (what Local SGD used before) does not certify its target at eps 18."""
    from jfed.methods import LocalSGD, build_experiment

    # two silos of 68 records: the largest digits-evenodd silo, where the issue was seen
    task = synthetic_silos(jax.random.key(0), n_silos=2, records_per_silo=68, dim=3)
    n = int(np.asarray(task.train.counts)[0])
    K, R, L = 10, 25, 1.0
    delta = 1.0 / n**2
    exact = LocalSGD(batch=K, rounds=R, gradient_clip=L, calibration="exact", delta=delta)
    formula = exact.replace(calibration="experiments")
    exact_run = build_experiment(exact, task=task)
    formula_run = build_experiment(formula, task=task)
    assert exact_run.sampling.name == "poisson"
    assert formula_run.sampling.name == "with-replacement"
    for target in (1.5, 18.0):
        ((noise, fields),) = exact_run.calibrate_many(exact, [target], delta)
        certified = _independent_pld_epsilon(float(noise[0]), n, K * R, delta, L)
        assert certified <= target * (1 + 1e-3) and certified > 0.97 * target
        assert fields["accountant"] == "pld-poisson-replace-one"
        assert fields["epsilon_certified"] == pytest.approx(certified, rel=2e-3)
    ((noise, fields),) = formula_run.calibrate_many(formula, [18.0], delta)
    assert fields["epsilon_certified"] is None  # only the formula claims the target
    reference = _independent_pld_epsilon(float(noise[0]), n, K * R, delta, L)
    assert reference > 18.0  # the formula's claim is not what PLD certifies
    assert fields["exact_epsilon"] == pytest.approx(reference, rel=2e-3)


def test_exact_calibration_refuses_a_sampler_it_does_not_model():
    from jfed.methods import AcceleratedMBSGD, LocalSGD, NoisyMBSGD, build_experiment

    task = synthetic_silos(jax.random.key(0), n_silos=2, records_per_silo=20, dim=3)
    for method in (NoisyMBSGD, LocalSGD, AcceleratedMBSGD):
        config = method(calibration="exact", sampling="with-replacement")
        with pytest.raises(ValueError, match="accounts Poisson sampling"):
            build_experiment(config, task=task)
    formula = LocalSGD(calibration="theorem", sampling="with-replacement")
    assert build_experiment(formula, task=task).sampling.name == "with-replacement"


def test_poisson_local_sgd_runs_and_reports_its_accountant(capsys):
    from jfed.cli.main import main

    assert main(["run", "local-sgd", "--dataset", "synthetic", "--silos", "4", "--rounds", "3",
                 "--epsilon", "3", "--json", "-"]) == 0  # fmt: skip
    record = __import__("json").loads(capsys.readouterr().out)
    assert record["sampling"] == "poisson" and record["accountant"] == "pld-poisson-replace-one"
    assert record["epsilon"] <= 3.0 and np.isfinite(record["excess_train_risk"])


@pytest.mark.parametrize(
    "argv",
    [["accel-mbsgd"], ["shuffle-mbsgd", "--dataset", "synthetic", "--epsilon", "3"]],
)
def test_the_documented_silo_commands_run_with_their_defaults(argv, capsys):
    """`jfed run accel-mbsgd` (one pass: rounds x batch must fit the smallest silo) and the
    shuffle model on synthetic silos (enough messages for the shuffling bound) run as shown.
    Negative control: the former default batch of 10 asks 25 x 10 records of a 47-record silo."""
    import jfed

    assert jfed.main(["run", *argv, "--no-progress"]) == 0
    assert "test error" in capsys.readouterr().out
    assert jfed.main(["run", "accel-mbsgd", "--batch", "10", "--no-progress"]) == 2


def test_a_formula_calibration_says_its_eps_is_a_target_not_certified(capsys):
    """The summary of a formula-calibrated run labels its eps as the formula's target and puts
    the accountant's eps of its noise beside it; a record whose eps an accountant certified
    states that accountant (negative control: no such label)."""
    import json

    import jfed
    from jfed.methods.silo import privacy_text

    argv = ["run", "noisy-mbsgd", "--rounds", "2", "--epsilon", "2", "--no-progress"]
    assert jfed.main([*argv, "--calibration", "theorem", "--json", "-"]) == 0
    record = json.loads(capsys.readouterr().out)
    line = privacy_text(record)
    assert line.startswith("target eps=2 (formula, not certified)")
    assert "PLD with Poisson sampling gives its noise eps = " in line
    assert "[calibration: seed-theorem-formula]" in line
    certified = dict(record, epsilon_certified=2.0, accountant="pld-poisson-replace-one")
    line = privacy_text(certified)
    assert "not certified" not in line and "[accountant: pld-poisson-replace-one]" in line


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


# -- the guarantee of every private silo method, against dp-accounting on the events it released

PRIVATE_ROUNDS, PRIVATE_BATCH, CLIP = 3, 5, 1.0  # rounds, batch (local steps) and clip below


@pytest.fixture(scope="module")
def uneven():
    """Three logistic silos of two sizes (30, 45, 45 records): two distinct branches."""
    rng = np.random.default_rng(0)
    X = [rng.normal(size=(n, 3)) / 3 for n in SIZES]
    y = [rng.integers(0, 2, n).astype(float) for n in SIZES]
    test = (np.concatenate(X), np.concatenate(y))
    return SiloTask("uneven", "logistic", 1, SiloData.from_lists(X, y), test, "two sizes")


SIZES = (30, 45, 45)


def _float32(values):
    return [float(np.float32(v)) for v in np.atleast_1d(np.asarray(values))]


def _poisson_pld(noise, share, steps, delta, rate_scale=1.0):
    """eps of the worst silo: ``steps`` Poisson-sampled (q = share / n) Gaussian releases of
    multiplier sigma share / L, dp-accounting's PLD at 1e-3 under replace-one."""
    import dp_accounting
    from dp_accounting.privacy_accountant import NeighboringRelation

    worst = 0.0
    for sigma, n in zip(noise, SIZES, strict=True):
        step = dp_accounting.PoissonSampledDpEvent(
            min(1.0, rate_scale * share / n), dp_accounting.GaussianDpEvent(sigma * share / CLIP)
        )
        accountant = dp_accounting.pld.PLDAccountant(NeighboringRelation.REPLACE_ONE, 1e-3)
        event = dp_accounting.SelfComposedDpEvent(step, steps)
        worst = max(worst, accountant.compose(event).get_epsilon(delta))
    return worst


def _gaussian_epsilon(sigma, sensitivity, delta):
    """The exact eps of one Gaussian release: dp-accounting's hockey-stick delta, inverted."""
    from dp_accounting.pld.privacy_loss_mechanism import GaussianPrivacyLoss
    from scipy.optimize import brentq

    loss = GaussianPrivacyLoss(sigma, sensitivity)
    return brentq(lambda e: loss.get_delta_for_epsilon(e) - delta, 0.0, 100.0, xtol=1e-14,
                  rtol=1e-15)  # fmt: skip


def _shuffled(sigma0, messages, delta0, delta_shuffle, delta):
    """The shuffle chain in closed form: eps0 of one message (sensitivity 2L, dp-accounting's
    Gaussian), Feldman-McMillan-Talwar's amplification of ``messages`` of them per round, the
    advanced composition theorem over the rounds (or basic composition, if smaller)."""
    epsilon0 = _gaussian_epsilon(sigma0, 2 * CLIP, delta0)
    e0 = math.exp(epsilon0)
    inner = 8 * math.sqrt(e0 * math.log(4 / delta_shuffle)) / math.sqrt(messages)
    epsilon = math.log1p((e0 - 1) / (e0 + 1) * (inner + 8 * e0 / messages))
    carried = (math.exp(epsilon) + 1) * (1 + math.exp(-epsilon0) / 2) * messages * delta0
    slack = delta - PRIVATE_ROUNDS * (delta_shuffle + carried)
    advanced = math.sqrt(2 * math.log(1 / slack) * PRIVATE_ROUNDS * epsilon**2)
    return min(PRIVATE_ROUNDS * epsilon, advanced + PRIVATE_ROUNDS * epsilon * math.expm1(epsilon))


def _minibatch(noise, hyper, delta, off):
    return _poisson_pld(noise, PRIVATE_BATCH, PRIVATE_ROUNDS, delta, rate_scale=off)


def _local_steps(noise, hyper, delta, off):
    return _poisson_pld(noise, 1, PRIVATE_BATCH * PRIVATE_ROUNDS, delta, rate_scale=off)


def _one_pass(noise, hyper, delta, off):
    return _gaussian_epsilon(noise[0] * off, 2 * CLIP / PRIVATE_BATCH, delta)


def _shuffle(noise, hyper, delta, off):
    deltas = _float32([hyper.message_delta, hyper.shuffle_delta])
    return _shuffled(noise[0], round(len(SIZES) * SHUFFLE_BATCH * off), *deltas, delta)


SHUFFLE_BATCH = 80  # 240 messages a round: more than the shuffling bound needs at delta 1/30^2


def _settings():
    from jfed.methods import AcceleratedMBSGD, LocalSGD, NoisyMBSGD, ShuffleMBSGD

    common = dict(rounds=PRIVATE_ROUNDS, batch=PRIVATE_BATCH, gradient_clip=CLIP, epsilon=2.0)
    shuffle = common | dict(batch=SHUFFLE_BATCH, epsilon=3.0)
    return {  # name: (configuration, certified by an accountant, the reference)
        "noisy-mbsgd exact": (NoisyMBSGD(**common), True, _minibatch),
        "noisy-mbsgd theorem": (NoisyMBSGD(calibration="theorem", **common), False, _minibatch),
        "accel-mbsgd one-pass": (AcceleratedMBSGD(**common), True, _one_pass),
        "accel-mbsgd poisson": (AcceleratedMBSGD(sampling="poisson", **common), True, _minibatch),
        "local-sgd exact": (LocalSGD(**common), True, _local_steps),
        "local-sgd experiments": (LocalSGD(calibration="experiments", **common), False,
                                  _local_steps),
        "shuffle-mbsgd": (ShuffleMBSGD(**shuffle), True, _shuffle),
    }  # fmt: skip


@pytest.mark.parametrize("name", list(_settings()))
def test_every_private_silo_method_certifies_the_events_it_released(name, uneven):
    """The record's eps (and ``exact_epsilon``: what PLD certifies for the noise under Poisson
    sampling) equals dp-accounting's value for that setting, computed here from events built
    with dp-accounting's own classes at the noise the run reads (its float32 hyper-parameters),
    to rel 1e-9. Negative control: the same reference with a sampling rate (Poisson), noise
    (one pass) or message count (shuffle) 1% off is told apart."""
    from jfed.methods import build_experiment

    config, certifies, reference = _settings()[name]
    experiment = build_experiment(config, task=uneven)
    hyper, fields = experiment.calibrate(config)
    noise = _float32(hyper.noise_std)
    delta = experiment.delta
    expected = reference(noise, hyper, delta, 1.0)
    stated = fields["epsilon_certified"] if certifies else fields["exact_epsilon"]
    assert stated == pytest.approx(expected, rel=1e-9)
    if "exact_epsilon" in fields:
        assert fields["exact_epsilon"] == pytest.approx(expected, rel=1e-9)
    if certifies:
        assert stated <= config.epsilon * (1 + 1e-9)
    else:
        assert fields["epsilon_certified"] is None  # a formula certifies nothing
    assert fields["adjacency"] == "replace-one"
    mismatched = reference(noise, hyper, delta, 1.01)
    assert stated != pytest.approx(mismatched, rel=1e-6)


def test_the_ledger_reads_the_noise_that_ran(uneven):
    """One release per round, through the silo aggregator, whose parameters are the run's own
    hyper-parameters: a run's event moves with the noise it is given (the worst silo is the
    smallest, with the least noise per record of share)."""
    from jfed.methods import NoisyMBSGD, build_experiment
    from jfed.privacy import ParallelDpEvent

    config = NoisyMBSGD(batch=PRIVATE_BATCH, rounds=PRIVATE_ROUNDS, calibration="theorem")
    experiment = build_experiment(config, task=uneven)
    (release,) = experiment.ledger().releases
    assert isinstance(release.aggregator, silo_aggregators.SiloGaussian)
    event = experiment.run_event(experiment.hyperparams(config, [0.5, 1.0, 1.0]))
    assert isinstance(event, ParallelDpEvent) and len(event.branches) == 2  # two distinct silos
    louder = experiment.run_event(experiment.hyperparams(config, [0.6, 1.0, 1.0]))
    assert louder != event
