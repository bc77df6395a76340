"""LDP-FL: the two-point mechanism as the algorithm runs it (traced eps, a range per position),
split and shuffle, local training written for one client and vmapped, and both privacy
statements in the record."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfed.algorithms import ldp_fl
from jfed.cli.main import main
from jfed.data.images import digits_clients, procedural_images
from jfed.engine import simulate
from jfed.privacy import two_point


@pytest.fixture(scope="module")
def task():
    return digits_clients(10)


def test_traced_eps_ratio_per_weight_is_e_eps():
    """For any two inputs in range, the probabilities of each output differ by at most e^eps,
    with eps traced as in a sweep. Negative control: without clipping to the range, an input
    outside it breaks the bound (the clip is what makes the mechanism private)."""
    epsilon = 1.3
    inputs = jnp.linspace(-0.2, 0.2, 41)

    @jax.jit
    def probabilities(eps, w):
        return two_point.high_probability(w, 0.0, 0.2, eps)

    high = np.asarray(probabilities(jnp.float32(epsilon), inputs), np.float64)
    for p in (high, 1.0 - high):
        assert p.max() / p.min() <= math.exp(epsilon) * (1 + 1e-5)
    e = math.exp(epsilon)
    unclipped = ((0.4 - 0.0) * (e - 1) + 0.2 * (e + 1)) / (2 * 0.2 * (e + 1))
    assert unclipped / high.min() > e or unclipped > 1


def test_reports_are_unbiased_with_the_stated_variance_per_position():
    """A range per position (adaptive ranges) and traced eps: every position's mean is its
    weight within 4.5 standard errors, its variance the formula's within 4.5 standard errors of
    a variance. Negative control: dropping the -(w - c)^2 term of the variance is caught."""
    n, epsilon = 200_000, 0.9
    w = jnp.array([0.0, 0.05, -0.03, 0.1])
    radius = jnp.array([0.1, 0.1, 0.05, 0.2])
    keys = jax.random.split(jax.random.key(3), n)
    draws = np.asarray(
        jax.jit(jax.vmap(lambda k: two_point.perturb(k, w, 0.0, radius, jnp.float32(epsilon))))(
            keys
        ),
        np.float64,
    )
    for j in range(4):
        variance = two_point.variance(float(w[j]), 0.0, float(radius[j]), epsilon)
        assert abs(draws[:, j].mean() - float(w[j])) <= 4.5 * math.sqrt(variance / n)
        # the two-point output's fourth central moment bounds the variance of the variance
        spread = float(radius[j]) * (math.exp(epsilon) + 1) / math.expm1(epsilon)
        standard_error = math.sqrt(2 * spread**4 / n)
        assert abs(draws[:, j].var() - variance) <= 4.5 * standard_error
        wrong = float(radius[j]) ** 2 * ((math.exp(epsilon) + 1) / math.expm1(epsilon)) ** 2
        if abs(float(w[j])) > 0.02:
            assert abs(draws[:, j].var() - wrong) > 4.5 * standard_error


def test_split_and_shuffle_average_equals_the_unshuffled_mean():
    """Per-position permutations change no position's multiset: the average equals the plain
    mean up to float32 summation order. Negative control: a shuffle that mixes positions (one
    permutation of the whole buffer) does not."""

    @jax.jit
    def means(keys):
        reports = jax.random.normal(keys[0], (50, 300)) * jnp.arange(300)
        flat = jax.random.permutation(keys[2], reports.reshape(-1)).reshape(reports.shape)
        # the arrival order of each position
        order = jnp.argsort(jax.random.uniform(keys[1], (300, 50)), axis=1)
        return reports, ldp_fl.shuffled_mean(keys[1], reports), flat.mean(0), order

    keys = jnp.stack([jax.random.key(0), jax.random.key(1), jax.random.key(2)])
    reports, shuffled, flat_mean, order = map(np.asarray, means(keys))
    tolerance = 50 * np.finfo(np.float32).eps * float(np.abs(reports).max())
    np.testing.assert_allclose(shuffled, reports.mean(0), atol=tolerance, rtol=0)
    assert float(np.abs(flat_mean - reports.mean(0)).max()) > 100 * tolerance
    # and the server cannot link positions: two positions' arrival orders differ
    assert not np.all(order[0] == order[1])


@pytest.fixture
def full_precision():
    """float32 products and convolutions on every backend (a GPU's default, tf32, differs from
    the CPU's float32 by about 1e-3: these tests compare two ways of computing the same thing)."""
    with jax.default_matmul_precision("highest"):
        yield


@pytest.mark.usefixtures("full_precision")
def test_vmapped_round_equals_clients_trained_one_by_one(task):
    """The engine runs local training written for one client, vmapped in chunks, on the round's
    cohort (4 of 10 clients); a loop over the clients (each trained alone) with the same keys
    gives the same noise-free round: the mean of the cohort's trained weights. Negative control:
    another four clients' mean."""
    from jfed.engine import Uniform, cohort_key, draw_cohort
    from jfed.engine.keys import client_key, round_key, run_streams

    m = int(task.train.counts[0])
    algorithm = ldp_fl.LDPFL("mlp", 8, 10, 10, 4, m, 1, 8, "fixed", private=False)
    hp = ldp_fl.hyperparams(0.1)
    key = jax.random.key(7)
    features, targets = task.train.features[:, :m], task.train.targets[:, :m]

    @jax.jit
    def one_by_one(key):
        """The initial weights, each client's training in turn (a loop over the clients, each
        traced alone), and the first round's cohort."""
        init_key, _, client_root = run_streams(key)
        start = algorithm.init(hp, init_key).weights
        train = lambda i: algorithm.local_training(  # noqa: E731
            start,
            features[i],
            targets[i],
            hp.learning_rate,
            client_key(round_key(client_root, 0), i),
        )
        cohort = draw_cohort(Uniform(4), 10, cohort_key(round_key(client_root, 0)))
        return start, jax.lax.map(train, jnp.arange(10)), cohort.ids

    start, trained, ids = map(np.asarray, one_by_one(key))
    state, _ = simulate(algorithm, task.train, hp, key, 1)
    assert len(set(ids.tolist())) == 4
    np.testing.assert_allclose(state.weights, trained[ids].mean(0), atol=1e-6, rtol=1e-5)
    assert float(np.abs(np.asarray(state.weights) - start).max()) > 1e-3  # training moved them
    others = [i for i in range(10) if i not in ids]  # negative control: another four
    assert not np.allclose(state.weights, trained[others[:4]].mean(0), atol=1e-6, rtol=1e-5)


def test_private_round_reports_the_two_point_draws_of_each_clients_privacy_stream(task):
    """A round's release is the mean of every selected client's two-point reports of its trained
    weights, drawn from the client's privacy stream (``fold_in(client key, PRIVACY_STREAM)``),
    apart from the key its local training read. Negative control: reports drawn from the
    training's key differ."""
    from jfed.engine.clients import PRIVACY_STREAM
    from jfed.engine.keys import client_key, round_key, run_streams

    m = int(task.train.counts[0])
    algorithm = ldp_fl.LDPFL("logistic", 8, 10, 10, 10, m, 1, 4, ldp_fl.FIXED)
    hp = ldp_fl.hyperparams(0.1, epsilon=1.5, center=0.0, radius=0.2)
    key = jax.random.key(5)
    state, infos = simulate(algorithm, task.train, hp, key, 1)

    @jax.jit
    def reports(key, features, targets):
        """Every client's trained weights, and the mean of their reports drawn from their
        privacy streams and (the negative control) from their training keys."""
        init_key, _, client_root = run_streams(key)
        start = algorithm.init(hp, init_key).weights
        keys = jax.vmap(lambda i: client_key(round_key(client_root, 0), i))(jnp.arange(10))
        trained = jax.vmap(
            lambda x, y, k: algorithm.local_training(start, x, y, hp.learning_rate, k)
        )(features, targets, keys)

        def mean_reports(report_keys):
            report = lambda k, w: two_point.perturb(k, w, 0.0, 0.2, hp.epsilon)  # noqa: E731
            return jax.vmap(report)(report_keys, trained).mean(0)

        privacy_streams = jax.vmap(lambda k: jax.random.fold_in(k, PRIVACY_STREAM))(keys)
        return trained, mean_reports(privacy_streams), mean_reports(keys)

    trained, released, from_training_keys = map(
        np.asarray, reports(key, task.train.features[:, :m], task.train.targets[:, :m])
    )
    np.testing.assert_allclose(state.weights, released, atol=1e-5, rtol=1e-5)
    assert not np.allclose(state.weights, from_training_keys, atol=1e-5, rtol=1e-5)
    outside = np.mean(np.abs(trained) > 0.2)
    assert float(infos.clipped_fraction[0]) == pytest.approx(outside, abs=1e-6)


def test_model_and_range_names_are_looked_up_once():
    """The command line's choices are the tables' keys; a name becomes its object when the
    algorithm is built, and an unknown one is refused there."""
    from jfed import catalog

    assert tuple(ldp_fl.MODELS) == catalog.LDP_FL_MODELS
    assert tuple(ldp_fl.RANGES) == catalog.WEIGHT_RANGES
    algorithm = ldp_fl.LDPFL("mlp", 8, 10, 10, 5, 14, ranges="adaptive")
    assert algorithm.model is ldp_fl.MODELS["mlp"] and algorithm.ranges is ldp_fl.ADAPTIVE
    assert algorithm == ldp_fl.LDPFL(ldp_fl.MODELS["mlp"], 8, 10, 10, 5, 14, ranges=ldp_fl.ADAPTIVE)
    weights, hp = jnp.arange(3.0), ldp_fl.hyperparams(center=0.5)
    np.testing.assert_array_equal(algorithm.center(weights, hp), weights)
    assert float(dataclasses.replace(algorithm, ranges=ldp_fl.FIXED).center(weights, hp)) == 0.5
    with pytest.raises(ValueError, match="unknown model 'resnet'"):
        ldp_fl.LDPFL("resnet", 8, 10, 10, 5, 14)
    with pytest.raises(ValueError, match="unknown range rule 'moving'"):
        ldp_fl.LDPFL("mlp", 8, 10, 10, 5, 14, ranges="moving")


def test_runs_are_reproducible_and_private_runs_differ_from_noise_free(task):
    m = int(task.train.counts[0])
    algorithm = ldp_fl.LDPFL("logistic", 8, 10, 10, 5, m, 1, 4, "adaptive")
    hp = ldp_fl.hyperparams(0.1, epsilon=2.0)
    first, infos = simulate(algorithm, task.train, hp, jax.random.key(1), 2)
    second, _ = simulate(algorithm, task.train, hp, jax.random.key(1), 2)
    np.testing.assert_array_equal(first.weights, second.weights)
    # adaptive ranges: r around the previous global weights, public; some weights are clipped
    assert float(infos.radius[-1]) == pytest.approx(0.075)
    assert 0.0 <= float(infos.clipped_fraction[-1]) < 1.0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--epsilon", "0"], "--epsilon in [1e-06"),
        (["--weight-radius", "0"], "--weight-radius in (0, 10]"),
        (["--fraction", "0"], "--fraction in (0, 1]"),
        (["--fraction", "1.5"], "--fraction in (0, 1]"),
        (["--clients", "0"], "--clients in [1,"),
        (["--batch", "500"], "--batch in [1, 143]"),  # 10 clients share 1,438 images
        (["--model", "resnet"], "invalid choice: 'resnet'"),
        (["--dataset", "mnist"], "invalid choice: 'mnist'"),
        (["--ranges", "adaptive", "--weight-center", "0.1"], "only with --ranges fixed"),
    ],
)
def test_bad_input_is_one_line(argv, message, capsys):
    clients = [] if "--clients" in argv else ["--clients", "10"]  # a flag is given once
    assert main(["run", "ldp-fl", *clients, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("jfed: error:") and message in err and "\n" not in err, err


def test_procedural_images_are_mnist_shaped_and_learnable():
    X, y = jax.jit(procedural_images, static_argnums=1)(jax.random.key(0), 2_000)
    assert X.shape == (2_000, 784) and float(X.min()) >= 0 and float(X.max()) <= 1
    assert set(np.unique(np.asarray(y))) == set(range(10))
    # nearest class mean separates the classes far above chance (10%)
    X, y = np.asarray(X, np.float64), np.asarray(y)
    means = np.stack([X[:1000][y[:1000] == c].mean(0) for c in range(10)])
    predicted = np.argmin(((X[1000:, None] - means) ** 2).sum(-1), axis=1)
    assert np.mean(predicted == y[1000:]) > 0.5


@pytest.mark.usefixtures("full_precision")
@pytest.mark.parametrize(
    "kernel, channels",
    # an odd and an even kernel; another odd one, with one channel, is slow
    [((5, 5), 3), ((4, 2), 2), pytest.param((3, 3), 1, marks=pytest.mark.slow)],
)
def test_matmul_convolution_equals_flax_conv(kernel, channels):
    """The CNN's matrix-product convolution has nn.Conv's parameters and gives its outputs and
    gradients up to float32 rounding (odd, and even, kernels; leading batch axes)."""
    import flax.linen as nn

    x = jax.random.normal(jax.random.key(0), (2, 3, 9, 7, channels))
    conv = nn.Conv(6, kernel)
    mine = ldp_fl.MatmulConv(6, kernel)
    assert jax.tree.map(jnp.shape, jax.eval_shape(mine.init, jax.random.key(1), x)) == (
        jax.tree.map(jnp.shape, jax.eval_shape(conv.init, jax.random.key(1), x))
    )

    def loss(module, p):
        return jnp.sum(jnp.sin(module.apply(p, x)))

    @jax.jit
    def both(key):
        params = conv.init(key, x)
        outputs = (mine.apply(params, x), conv.apply(params, x))
        gradients = (jax.grad(lambda p: loss(mine, p))(params),
                     jax.grad(lambda p: loss(conv, p))(params))  # fmt: skip
        return outputs, gradients

    (ours, theirs), (got, expected) = both(jax.random.key(1))
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    for expected_leaf, got_leaf in zip(
        jax.tree.leaves(expected), jax.tree.leaves(got), strict=True
    ):
        np.testing.assert_allclose(got_leaf, expected_leaf, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "shape",
    # even sides, and odd sides (the last row or column dropped); smaller even sides are slow
    [(2, 8, 8, 3), (3, 7, 5, 2), pytest.param((1, 4, 4, 1), marks=pytest.mark.slow)],
)
def test_max_pool_equals_flax_max_pool_with_its_gradient(shape):
    """Outputs and gradients equal to nn.max_pool's, ties included (the gradient goes to the
    first maximum of a window, as select-and-scatter's). Negative control: jnp.max's own
    gradient splits a tie and differs."""
    import flax.linen as nn

    from jfed.models.layers import _windows

    flax_pool = lambda v: nn.max_pool(v, (2, 2), (2, 2))  # noqa: E731

    @jax.jit
    def pools(keys):
        x = jax.random.normal(keys[0], shape)
        x = jnp.where(x < 0, 0.0, x)  # ties: windows of zeros, as after a ReLU
        x = x.at[..., 0, 0, 0].set(1.0).at[..., 0, 1, 0].set(1.0)  # a tie at the maximum
        weights = jax.random.normal(keys[1], ldp_fl.max_pool_2x2(x).shape)

        def gradient(pool):
            return jax.grad(lambda v: jnp.sum(weights * pool(v)))(x)

        plain = gradient(lambda v: _windows(v).max(axis=-2))
        return (ldp_fl.max_pool_2x2(x), flax_pool(x)), (gradient(ldp_fl.max_pool_2x2),
                                                          gradient(flax_pool), plain)  # fmt: skip

    keys = jnp.stack([jax.random.key(2), jax.random.key(3)])
    (ours, theirs), (got, expected, plain) = jax.tree.map(np.asarray, pools(keys))
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(got, expected)
    assert not np.array_equal(plain, expected)
