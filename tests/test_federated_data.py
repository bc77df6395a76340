"""Federated populations with many records per client (jfed/data/federated.py): the Dirichlet label
split of digits and the procedural Synthetic(alpha, beta) clients.

Statistical checks state their tolerance from the known variance (5 standard deviations unless
said otherwise) and come with a negative control that the same check rejects.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jfed.data.federated import (
    ClientRecords,
    SyntheticFederated,
    _records,
    dirichlet_digits,
    dirichlet_partition,
)
from jfed.data.images import digits_clients
from jfed.data.silos import SiloData, _digits
from jfed.engine import ExecutionPlan, aggregate

N_DIGITS = 1797
D, C = 60, 10
SIGMA_DIAG = np.arange(1, D + 1, dtype=np.float64) ** -1.2  # the spec's Sigma_jj, independently

# ------------------------------------------------------------------------------ Dirichlet split


def _rows_with_labels(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Rows ``[x, y]`` sorted lexicographically: a multiset fingerprint of a set of records."""
    rows = np.concatenate([X, y[:, None]], axis=1)
    return rows[np.lexsort(rows.T[::-1])]


def test_dirichlet_digits_assigns_every_image_exactly_once():
    task = dirichlet_digits(n_clients=40, alpha=0.1, seed=3)
    train = task.train
    assert isinstance(train, SiloData) and task.loss == "softmax" and task.classes == 10
    counts = np.asarray(train.counts)
    assert train.n_clients == 40 and train.dim == 64 and counts.min() >= 1
    assert train.features.shape[1] == counts.max()
    assert counts.sum() + len(task.test[1]) == N_DIGITS
    # the pooled train records plus the test records are exactly the data set, as a multiset
    X_train, y_train = train.pooled()
    images, digits = _digits()
    ours = _rows_with_labels(np.concatenate([X_train, task.test[0]]),
                             np.concatenate([y_train, task.test[1]]))  # fmt: skip
    theirs = _rows_with_labels(images / 16.0, digits.astype(np.float64))
    np.testing.assert_allclose(ours, theirs, atol=1e-6)  # f32 storage of k/16 is exact
    # padding rows are zero
    X, y = np.asarray(train.features), np.asarray(train.targets)
    pad = np.arange(X.shape[1])[None, :] >= counts[:, None]
    assert not X[pad].any() and not y[pad].any()


def _class_concentration(labels: np.ndarray, client: np.ndarray, n_clients: int) -> np.ndarray:
    """H_c = sum_k (n_ck / n_c)^2 for every class c: 1/N for an even spread, 1 for one client."""
    table = np.zeros((labels.max() + 1, n_clients))
    np.add.at(table, (labels, client), 1)
    shares = table / table.sum(axis=1, keepdims=True)
    return (shares**2).sum(axis=1)


def _concentration_moments(alpha: float, n: int) -> tuple[float, float]:
    """Mean and variance of S = sum_k p_k^2 for p ~ Dir(alpha 1_n) (Dirichlet moments)."""
    a, A = alpha, n * alpha
    rising4 = A * (A + 1) * (A + 2) * (A + 3)
    mean = (a + 1) / (A + 1)
    fourth = a * (a + 1) * (a + 2) * (a + 3) / rising4
    cross = a**2 * (a + 1) ** 2 / rising4
    return mean, n * fourth + n * (n - 1) * cross - mean**2


@pytest.mark.parametrize("n_clients", [10, 20])
def test_dirichlet_label_skew_follows_alpha(n_clients):
    """The class concentration H_c (averaged over 10 classes x 8 seeds) matches its Dirichlet
    expectation (alpha + 1) / (N alpha + 1): ~0.5 at alpha = 0.1, ~1/N at alpha = 100.

    Tolerance: 5 standard deviations of the mean of 80 draws of S = sum_k p_k^2, plus 2 / min n_c
    for the rounding of n_c p_ck to whole records (each share is off by at most one record, and
    |sum a_k^2 - sum p_k^2| <= sum |a_k - p_k| (a_k + p_k) <= 2 / n_c). Negative control: each
    alpha's H is rejected by the other alpha's expectation."""
    _, labels = _digits()
    seeds = range(8)
    n_min = np.bincount(labels).min()
    measured, expected, tolerance = {}, {}, {}
    for alpha in (0.1, 100.0):
        h = [
            _class_concentration(labels, dirichlet_partition(labels, n_clients, alpha, s),
                                 n_clients)
            for s in seeds
        ]  # fmt: skip
        measured[alpha] = float(np.mean(h))
        mean, var = _concentration_moments(alpha, n_clients)
        expected[alpha] = mean
        tolerance[alpha] = 5 * np.sqrt(var / (10 * len(seeds))) + 2 / n_min
    for alpha in (0.1, 100.0):
        assert abs(measured[alpha] - expected[alpha]) <= tolerance[alpha], (alpha, measured)
    # much more skew at small alpha; each measurement fails the other's check
    assert measured[0.1] > 3 * measured[100.0]
    assert abs(measured[0.1] - expected[100.0]) > tolerance[100.0]
    assert abs(measured[100.0] - expected[0.1]) > tolerance[0.1]
    # and the near-IID end is what uniform random assignment gives (1/N + O(1/n_c))
    iid = np.mean(_class_concentration(labels, np.arange(len(labels)) % n_clients, n_clients))
    assert abs(measured[100.0] - iid) < 0.02


def test_dirichlet_split_is_deterministic_by_seed():
    a, b = dirichlet_digits(20, 0.3, seed=5), dirichlet_digits(20, 0.3, seed=5)
    other = dirichlet_digits(20, 0.3, seed=6)
    for leaf_a, leaf_b in zip(jax.tree.leaves(a.train), jax.tree.leaves(b.train), strict=True):
        assert np.array_equal(np.asarray(leaf_a), np.asarray(leaf_b))
    assert np.array_equal(a.test[0], b.test[0])
    assert not np.array_equal(np.asarray(a.train.counts), np.asarray(other.train.counts))
    # the held-out split is the one digits_clients uses with the same seed
    assert np.array_equal(a.test[1], digits_clients(10, "iid", seed=5).test[1])


def test_dirichlet_repair_rule_gives_every_client_min_records():
    _, labels = _digits()
    client = dirichlet_partition(labels, 600, 0.01, seed=1, min_records=2)
    counts = np.bincount(client, minlength=600)
    assert counts.min() >= 2 and counts.sum() == len(labels) and client.max() < 600
    # without the rule most of these clients would be empty: 10 classes x Dir(0.01 1_600) put
    # almost all of each class on a handful of clients
    assert np.sum(counts == 2) > 400
    with pytest.raises(ValueError, match="n_clients in"):
        dirichlet_partition(labels, len(labels) // 2 + 1, 1.0, min_records=2)
    with pytest.raises(ValueError, match="alpha > 0"):
        dirichlet_partition(labels, 10, 0.0)


def test_dirichlet_clients_run_through_the_engine_like_silos():
    task = dirichlet_digits(n_clients=37, alpha=0.2, seed=0)

    def label_histogram(broadcast, view, key):
        del broadcast, key
        _, y = view.rows(jnp.arange(view.n_max))
        real = jnp.arange(view.n_max) < view.count
        return jnp.zeros(10).at[y.astype(jnp.int32)].add(real.astype(jnp.float32))

    key = jax.random.key(0)
    totals = [
        jax.jit(aggregate, static_argnums=(0, 4))(label_histogram, None, task.train, key, plan)
        for plan in (ExecutionPlan(block_size=8, chunk_size=8),
                     ExecutionPlan(block_size=32, chunk_size=8))
    ]  # fmt: skip
    _, y_train = task.train.pooled()
    np.testing.assert_array_equal(totals[0], np.bincount(y_train.astype(int), minlength=10))
    np.testing.assert_array_equal(totals[0], totals[1])


# ------------------------------------------------------------------------------ Synthetic(a, b)


# populations are jit arguments, so populations of one structure share a compiled program;
# ``_records`` is the one ``sample_test`` and ``materialize`` call, so they share it too
_record = jax.jit(lambda pop, i: pop.record(i))
_models = jax.jit(lambda pop, ids: jax.vmap(pop.client_model)(ids))
K = 1_000  # clients in the statistical checks


def _host_records(pop: SyntheticFederated, ids) -> ClientRecords:
    return jax.tree.map(np.asarray, _records(pop, jnp.asarray(ids, jnp.int32)))


def _host_models(pop: SyntheticFederated, ids):
    return jax.tree.map(np.asarray, _models(pop, jnp.asarray(ids, jnp.int32)))


def _population(key: int = 7, alpha: float = 1.0, beta: float = 1.0) -> SyntheticFederated:
    return SyntheticFederated.create(jax.random.key(key), K, alpha=alpha, beta=beta, n_max=64)


@pytest.fixture(scope="module")
def population():
    return _population()


@pytest.fixture(scope="module")
def block(population):
    """Records and models of all K clients, on the host."""
    return _host_records(population, np.arange(K)), _host_models(population, np.arange(K))


def test_records_are_identical_alone_or_in_any_block(population, block):
    ids = np.arange(2, 50, dtype=np.int32)
    singles = [jax.tree.map(np.asarray, _record(population, jnp.int32(i))) for i in ids]
    # a block of the first 50 clients (the program of the 50-client tests below) and the block
    # of all K clients
    first_fifty = _host_records(dataclasses.replace(population, n_clients=50), np.arange(50))
    everyone, _ = block
    for chunk in (first_fifty, everyone):
        for single, i in zip(singles, ids, strict=True):
            for got, want in zip(chunk, single, strict=True):
                assert np.array_equal(got[i], want), (len(chunk.count), i)
    # a record does not depend on the padded length either
    shorter = _host_records(dataclasses.replace(population, n_max=16), ids)
    for i, single in enumerate(singles):
        n = min(int(single.count), 16)
        assert shorter.count[i] == n
        assert np.array_equal(shorter.features[i, :n], single.features[:n])
        assert np.array_equal(shorter.targets[i, :n], single.targets[:n])
    assert np.any(np.array([s.count for s in singles]) > 16)  # the cap did bind somewhere


def test_record_layout_and_counts(population, block):
    records, _ = block
    one = _record(population, jnp.int32(5))
    assert isinstance(one, ClientRecords) and one.n_max == 64
    assert one.features.shape == (64, D) and one.features.dtype == jnp.float32
    assert one.targets.shape == (64,) and one.targets.dtype == jnp.float32
    assert one.count.shape == () and one.count.dtype == jnp.int32
    X, y = one.rows(jnp.array([0, 0, 1]))
    assert X.shape == (3, D) and y.shape == (3,)
    assert one.silo_id == 5
    counts = records.count
    assert counts.min() >= 1 and counts.max() <= 64
    labels = records.targets
    assert np.all((labels == np.round(labels)) & (labels >= 0) & (labels < C))
    pad = np.arange(64)[None, :] >= counts[:, None]
    assert not records.features[pad].any() and not labels[pad].any()
    assert np.all(np.isfinite(records.features))


def _count_cdf_rejected(counts: np.ndarray, log_mean: float, log_std: float, n_max: int) -> bool:
    """Whether P(n <= c) = Phi((ln(c + 1) - m) / s) (c < n_max) fails at some c by > 5 sd."""
    for c in (1, 3, 10, 30, n_max - 1):
        p = stats.norm.cdf((np.log(c + 1) - log_mean) / log_std)
        if abs(np.mean(counts <= c) - p) > 5 * np.sqrt(p * (1 - p) / len(counts)) + 1e-12:
            return True
    return False


def test_counts_follow_the_capped_lognormal():
    # 20,000 clients: 20 populations of K (the statistical checks' program)
    counts = np.concatenate([
        _host_models(_population(100 + seed), np.arange(K)).count for seed in range(20)
    ])  # fmt: skip
    assert counts.size == 20_000
    assert counts.min() >= 1 and counts.max() == 64
    assert not _count_cdf_rejected(counts, 3.0, 1.5, 64)
    assert _count_cdf_rejected(counts, 3.3, 1.5, 64)  # negative control: m off by 0.3
    assert _count_cdf_rejected(counts, 3.0, 1.2, 64)  # negative control: s off by 0.3


def _standardized_mean_errors(records: ClientRecords, v: np.ndarray, sigma: np.ndarray):
    """z_kj = (xbar_kj - v_kj) sqrt(n_k / Sigma_jj): iid N(0, 1) if x ~ N(v_k, Sigma)."""
    n = records.count.astype(np.float64)
    xbar = records.features.astype(np.float64).sum(axis=1) / n[:, None]
    return ((xbar - v) * np.sqrt(n[:, None] / sigma)).ravel()


def _means_rejected(z: np.ndarray) -> bool:
    """Mean 0 (sd 1/sqrt(M)) and variance 1 (sd sqrt(2/M)), each within 5 sd."""
    m = len(z)
    return abs(z.mean()) > 5 / np.sqrt(m) or abs(z.var() - 1) > 5 * np.sqrt(2 / m)


def test_client_feature_means_follow_v_k(population, block):
    records, model = block
    z = _standardized_mean_errors(records, model.feature_mean, SIGMA_DIAG)
    assert not _means_rejected(z)
    # negative control: records drawn with Sigma = I fail the same check
    identity = dataclasses.replace(population, feature_std=jnp.ones(D))
    wrong = _host_records(identity, np.arange(K))
    assert _means_rejected(_standardized_mean_errors(wrong, model.feature_mean, SIGMA_DIAG))


def _pooled_within_variance(records: ClientRecords) -> tuple[np.ndarray, int]:
    """Per feature, sum over clients of squared deviations from the client mean / sum (n_k - 1)."""
    X = records.features.astype(np.float64)
    n = records.count.astype(np.float64)
    mask = np.arange(X.shape[1])[None, :] < n[:, None]
    xbar = X.sum(axis=1) / n[:, None]
    squares = (((X - xbar[:, None, :]) ** 2) * mask[..., None]).sum(axis=(0, 1))
    df = int((n - 1).sum())
    return squares / df, df


def _covariance_rejected(records: ClientRecords) -> bool:
    """Whether some Sigma_jj estimate / j^-1.2 is off 1 by more than 5 sd (sd sqrt(2 / df), the
    chi-square with df degrees of freedom; 60 features, so a 5-sd bound)."""
    variance, df = _pooled_within_variance(records)
    return bool(np.any(np.abs(variance / SIGMA_DIAG - 1) > 5 * np.sqrt(2 / df)))


def test_feature_covariance_diagonal_is_j_to_the_minus_1_2(population, block):
    records, _ = block
    assert not _covariance_rejected(records)
    identity = dataclasses.replace(population, feature_std=jnp.ones(D))
    wrong = _host_records(identity, np.arange(K))
    assert _covariance_rejected(wrong)  # negative control: Sigma = I


def test_alpha_and_beta_set_the_heterogeneity():
    """beta: the between-client variance of a client's average feature value is beta^2 + 1/d +
    sum_j Sigma_jj / (d^2 n_k) (sample variance of K clients: relative sd sqrt(2 / (K - 1))).
    alpha: the between-client variance of the average of W_k and b_k entries is alpha^2 +
    1 / (C d + C). Negative controls: each setting is rejected by the other's expectation."""
    results = {}
    for het in (0.0, 1.0):
        pop = _population(3, alpha=het, beta=het)
        records, model = _host_records(pop, np.arange(K)), _host_models(pop, np.arange(K))
        n = records.count.astype(np.float64)
        average = records.features.astype(np.float64).sum(axis=(1, 2)) / (n * D)
        beta_expected = het**2 + 1 / D + SIGMA_DIAG.sum() / D**2 * np.mean(1 / n)
        entries = np.concatenate([model.weights.reshape(K, -1), model.bias], axis=1)
        alpha_expected = het**2 + 1 / (C * D + C)
        results[het] = (average.var(ddof=1), beta_expected, entries.mean(1).var(ddof=1),
                        alpha_expected, records)  # fmt: skip
    relative = 5 * np.sqrt(2 / (K - 1))
    for het, (beta_var, beta_exp, alpha_var, alpha_exp, _) in results.items():
        assert abs(beta_var / beta_exp - 1) < relative, (het, beta_var, beta_exp)
        assert abs(alpha_var / alpha_exp - 1) < relative, (het, alpha_var, alpha_exp)
        other = results[1.0 - het]
        assert abs(beta_var / other[1] - 1) > relative
        assert abs(alpha_var / other[3] - 1) > relative


def test_alpha_shifts_every_logit_equally_so_labels_do_not_change():
    """u_k adds u_k (sum_j x_j + 1) to every class's logit: the argmax, hence every label, is the
    same for alpha = 0 and alpha = 3 (up to float ties); beta does change the labels."""
    labels = {}
    for alpha, beta in ((0.0, 1.0), (3.0, 1.0), (0.0, 0.0)):
        records = _host_records(_population(4, alpha, beta), np.arange(K))
        labels[alpha, beta] = records.targets[records.mask]
    assert np.mean(labels[0.0, 1.0] == labels[3.0, 1.0]) > 0.999
    assert np.mean(labels[0.0, 1.0] == labels[0.0, 0.0]) < 0.9


def test_a_hundred_million_clients_need_no_host_memory():
    pop = SyntheticFederated.create(jax.random.key(0), 100_000_000)
    assert pop.n_clients == 100_000_000
    assert sum(np.size(leaf) for leaf in jax.tree.leaves(pop)) < 100  # keys and parameters only
    record = jax.tree.map(np.asarray, _record(pop, jnp.int32(99_999_999)))
    assert record.features.shape == (128, D) and 1 <= record.count <= 128
    assert np.all(np.isfinite(record.features)) and record.client_id == 99_999_999
    # the client count is static, the rest traced: a different key reuses the compiled program
    assert jax.tree_util.tree_structure(pop).num_leaves == 7
    other = dataclasses.replace(pop, data_key=jax.random.key(1))
    assert jax.tree_util.tree_structure(other) == jax.tree_util.tree_structure(pop)


def test_held_out_test_set(population):
    X, y = population.sample_test(50)
    counts = np.asarray(population.held_out(50).materialize(50).counts)  # sample_test's program
    assert X.shape == (counts.sum(), D) and y.shape == (counts.sum(),)
    assert X.dtype == np.float64 and set(np.unique(y)) <= set(range(C))
    X2, y2 = population.sample_test(50, chunk=25)  # chunking changes nothing
    assert np.array_equal(X, X2) and np.array_equal(y, y2)
    first = np.asarray(_record(population, jnp.int32(0)).features[0], np.float64)
    assert not np.any(np.all(X == first, axis=1))  # not a training client's record
    X3, _ = population.sample_test(50, key=jax.random.key(99))
    assert X3.shape[1] == D and not np.array_equal(X3[:5], X[:5])


def test_synthetic_clients_run_through_the_engine(population):
    pop = dataclasses.replace(population, n_clients=50)

    def summary(broadcast, view, key):
        del broadcast, key
        _, y = view.rows(jnp.arange(view.n_max))
        histogram = jnp.zeros(C).at[y.astype(jnp.int32)].add(view.mask.astype(jnp.float32))
        return view.count, histogram

    # 50 clients in chunks of 8 (the last one padded): ids past the end never leak into the sums
    plan = ExecutionPlan(block_size=16, chunk_size=8)
    count, histogram = jax.jit(aggregate, static_argnums=(0, 4))(
        summary, None, pop, jax.random.key(0), plan
    )
    records = _host_records(pop, np.arange(50))  # a held-out set's program (same structure)
    assert int(count) == records.count.sum()
    np.testing.assert_array_equal(
        histogram, np.bincount(records.targets[records.mask].astype(int), minlength=C)
    )


def test_bad_arguments_name_the_parameter():
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="alpha >= 0"):
        SyntheticFederated.create(key, 10, alpha=-1.0)
    with pytest.raises(ValueError, match="n_clients in"):
        SyntheticFederated.create(key, 0)
    with pytest.raises(ValueError, match="n_max in"):
        SyntheticFederated.create(key, 10, n_max=0)
    with pytest.raises(ValueError, match="test_fraction"):
        dirichlet_digits(10, 1.0, test_fraction=1.0)
