"""Federated populations with many records per client, indexable by client id
(docs/specs/dp_fedavg.md,
section "Data").

- :func:`dirichlet_partition` and :func:`dirichlet_digits`: a real data set (scikit-learn's
  digits) split among N clients by a Dirichlet label split (Hsu, Qi, Brown 2019): for each class
  c, proportions ``p_c ~ Dir(alpha 1_N)`` cut the (shuffled) class-c records into N consecutive
  shares. The clients are a :class:`~jfed.data.silos.SiloData` (padded to the largest client,
  ``counts`` real records each), so the engine and every silo client function use them unchanged:
  a client function receives a :class:`~jfed.data.silos.SiloView` and reads rows with
  ``view.rows(indices)``.
- :class:`SyntheticFederated`: Synthetic(alpha, beta) of Li et al. 2020 (FedProx; LEAF's federated
  logistic regression), procedural: client k's model, feature means, record count and records are
  generated on the device from ``fold_in(data_key, k)``, so 10^8 clients need no host memory. A
  client function receives a :class:`ClientRecords` view with the same fields and ``rows`` method
  as a :class:`~jfed.data.silos.SiloView`.

Zero-record clients never occur: the Dirichlet split guarantees every client ``min_records >= 1``
records (the repair rule is in :func:`dirichlet_partition`), and a synthetic client's count is
clipped to ``[1, n_max]``. Labels are class indices stored as ``f32`` (the :class:`SiloData`
convention), so a softmax loss reads them exactly as it reads silo labels.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jfed._random import normals_and_uniforms
from jfed._validation import check_int_range, check_nonnegative, check_positive
from jfed.data.silos import SiloData, SiloTask, _digits

DIGITS_TEST_FRACTION = 0.2
"""Fraction of digits held out for testing (as :func:`jfed.data.images.digits_clients`)."""

SHARED_MODEL_STREAM = 2**31 + 3
"""``fold_in(key, SHARED_MODEL_STREAM)`` is the shared model's key (no client id reaches it)."""

FEATURE_COVARIANCE_EXPONENT = 1.2
"""Synthetic(alpha, beta) features have ``Sigma_jj = j^-1.2`` (j = 1..d)."""

# ------------------------------------------------------------------------------ Dirichlet split


def dirichlet_partition(
    labels: np.ndarray,
    n_clients: int,
    alpha: float,
    seed: int | np.random.Generator = 0,
    min_records: int = 1,
) -> np.ndarray:
    """The client of every record under a Dirichlet(alpha) label split.

    For each class c (in sorted order) the class-c records are shuffled, ``p_c ~ Dir(alpha 1_N)``
    is drawn, and the shuffled records are cut into N consecutive shares at the rounded cumulative
    proportions ``round(n_c * (p_c1 + ... + p_ck))``, so client k gets ``~ p_ck n_c`` of them
    (the construction of Hsu, Qi, Brown 2019 as commonly implemented). Small alpha (0.1) gives each
    client few classes; large alpha (100) is near IID.

    Repair rule (no zero-record clients): afterwards, while some client holds fewer than
    ``min_records`` records, the short client with the lowest id receives one uniformly random
    record of the currently largest client (lowest id on ties). This always ends (it needs
    ``n_clients * min_records <= len(labels)``), keeps every record assigned exactly once, and
    moves at most ``n_clients * min_records`` records; with ``n_clients << len(labels)`` and
    ``alpha >= 1`` it almost never triggers.

    Args:
      labels: ``int[n]`` class labels (any hashable values numpy can sort).
      n_clients: N >= 1.
      alpha: the Dirichlet concentration, > 0.
      seed: an int seed or a ``numpy.random.Generator`` (advanced in place).
      min_records: the least number of records a client holds, >= 1.

    Returns:
      ``i64[n]``: the client in ``[0, N)`` of every record. Deterministic given the seed.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1 or len(labels) < 1:
        raise ValueError(f"expected labels of shape [n] with n >= 1, got shape {labels.shape}")
    min_records = check_int_range("min_records", min_records, 1, len(labels))
    n_clients = check_int_range("n_clients", n_clients, 1, len(labels) // min_records)
    alpha = check_positive("alpha", alpha)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    client = np.empty(len(labels), np.int64)
    for c in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == c))
        proportions = rng.dirichlet(np.full(n_clients, alpha))
        if not np.all(np.isfinite(proportions)):  # defensive: numpy's small-alpha sampler is exact
            raise ValueError(f"Dirichlet draw failed for alpha={alpha}; use a larger alpha")
        cuts = np.round(np.cumsum(proportions)[:-1] * len(members)).astype(np.int64)
        client[members] = np.searchsorted(cuts, np.arange(len(members)), side="right")
    counts = np.bincount(client, minlength=n_clients)
    while (short := np.flatnonzero(counts < min_records)).size:
        donor = int(np.argmax(counts))
        moved = rng.choice(np.flatnonzero(client == donor))
        client[moved] = short[0]
        counts[donor] -= 1
        counts[short[0]] += 1
    return client


def dirichlet_digits(
    n_clients: int = 100,
    alpha: float = 0.5,
    seed: int = 0,
    test_fraction: float = DIGITS_TEST_FRACTION,
    min_records: int = 1,
) -> SiloTask:
    """scikit-learn's 8x8 digits (1,797 images, 10 classes) split among clients by Dirichlet(alpha).

    Pixels are scaled to [0, 1] and flattened (``x: f32[64]``); labels are the digit as ``f32``. A
    fraction ``test_fraction`` is held out first (the same permutation as
    :func:`jfed.data.images.digits_clients` with the same seed, so both share a test split), the
    rest is split with :func:`dirichlet_partition` (same seed stream), every client holding at
    least ``min_records`` images.

    Returns:
      A :class:`~jfed.data.silos.SiloTask` (loss ``"softmax"``, 10 classes) whose ``train`` is a
      :class:`~jfed.data.silos.SiloData` (``features: f32[N, n_max, 64]``, ``targets: f32[N,
      n_max]``, ``counts: i32[N]``, rows past ``counts[k]`` zero) and whose ``test`` is the pooled
      held-out ``(X: f64[m, 64], y: f64[m])``. ``details`` records alpha, min_records, the number
      of records moved by the repair rule, and the train/test sizes.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"expected test_fraction in (0, 1), got test_fraction={test_fraction}")
    images, digits = _digits()
    X, y = images / 16.0, digits
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    test = order[: int(test_fraction * len(y))]
    train = order[len(test) :]
    client = dirichlet_partition(y[train], n_clients, alpha, rng, min_records)
    train_data = SiloData.from_lists(
        [X[train][client == k] for k in range(n_clients)],
        [y[train][client == k].astype(np.float64) for k in range(n_clients)],
    )
    return SiloTask(
        "digits-dirichlet",
        "softmax",
        10,
        train_data,
        (X[test], y[test].astype(np.float64)),
        f"scikit-learn digits, 8x8, Dirichlet(alpha={alpha}) label split across "
        f"{n_clients} clients (>= {min_records} images each)",
        {
            "alpha": alpha,
            "min_records": min_records,
            "side": 8,
            "n_train": len(train),
            "n_test": len(test),
        },
    )


# ------------------------------------------------------------------------------ Synthetic(a, b)


class ClientRecords(NamedTuple):
    """One client's records as its client function sees them (padded, masked by ``count``).

    Field names and :meth:`rows` match :class:`~jfed.data.silos.SiloView`, so a client function
    written for silos runs on these clients unchanged. Under ``vmap`` every field gains a leading
    client axis.

    Attributes:
      features: ``X: f32[n_max, d]``; rows ``count..n_max-1`` are zero.
      targets: ``y: f32[n_max]``, class indices in ``[0, classes)`` as floats; padding is 0.
      count: ``i32[]``, the number of real records, in ``[1, n_max]``.
      client_id: ``i32[]``.
    """

    features: jax.Array
    targets: jax.Array
    count: jax.Array  # type: ignore[assignment]  # the field's name; shadows tuple.count
    client_id: jax.Array

    @property
    def n_max(self) -> int:
        return self.features.shape[-2]

    @property
    def silo_id(self) -> jax.Array:
        """Alias of ``client_id`` (the :class:`~jfed.data.silos.SiloView` name)."""
        return self.client_id

    @property
    def mask(self) -> jax.Array:
        """``bool[n_max]`` (``bool[b, n_max]`` for a block): which rows are real records."""
        return jnp.arange(self.n_max) < jnp.asarray(self.count)[..., None]

    def rows(self, indices: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(X: f32[b, d], y: f32[b])`` of this client's records ``indices: i32[b]``."""
        return self.features[indices], self.targets[indices]


class ClientModel(NamedTuple):
    """The latent parameters of one Synthetic(alpha, beta) client.

    Attributes:
      weights: ``W: f32[classes, d]``, ``W[i, j] ~ N(u, 1)``.
      bias: ``b: f32[classes]``, ``b[i] ~ N(u, 1)``.
      feature_mean: ``v: f32[d]``, ``v[j] ~ N(B, 1)``.
      count: ``i32[]``, the number of records n_k.
      u: ``f32[]``, ``u ~ N(0, alpha^2)``.
      B: ``f32[]``, ``B ~ N(0, beta^2)``.
    """

    weights: jax.Array
    bias: jax.Array
    feature_mean: jax.Array
    count: jax.Array  # type: ignore[assignment]  # the field's name; shadows tuple.count
    u: jax.Array
    B: jax.Array


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class SyntheticFederated:
    """Synthetic(alpha, beta) federated logistic regression (Li et al. 2020), generated on device.

    Client k (key ``fold_in(data_key, k)``):

    - ``u_k ~ N(0, alpha^2)``, ``W_k[i, j] ~ N(u_k, 1)``, ``b_k[i] ~ N(u_k, 1)``;
    - ``B_k ~ N(0, beta^2)``, ``v_k[j] ~ N(B_k, 1)``;
    - ``n_k = clip(floor(exp(m + s z)), 1, n_max)``, ``z ~ N(0, 1)`` (a capped lognormal, power-law
      tailed);
    - record r < n_k: ``x = v_k + feature_std * e``, ``e ~ N(0, I_d)`` (so ``Sigma =
      diag(feature_std^2)``, by default ``Sigma_jj = j^-1.2``), ``y = argmax(W_k x + b_k)``.

    ``alpha`` and ``beta`` are standard deviations, as in the reference generator (FedProx's
    ``np.random.normal(0, alpha)``); the spec's ``N(0, alpha)`` reads the same for alpha in {0, 1}.
    Note that ``u_k`` shifts every logit of a record by the same ``u_k (sum_j x_j + 1)``, so alpha
    does not change any label: it only moves ``W_k`` and ``b_k`` (model heterogeneity in parameter
    space). ``beta`` moves the feature means and hence the label mix.

    Held-out clients. With a model of its own per client (Li et al.'s generator), the logits
    ``W_k x + b_k`` of a new client are, given x, independent and identically distributed across
    classes, so its label is uniform given x: no global model predicts a held-out client's labels
    better than chance, whatever it learned. ``shared_model=True`` draws one ``W, b`` for every
    client (plus the same ``u_k`` shift), as FedProx's Synthetic-IID does for the model, while the
    features stay heterogeneous through beta: a global model then has something to learn that
    carries to held-out clients.

    The client's parameters come from ``fold_in(client_key, 0)``; record r's noise from
    ``fold_in(fold_in(client_key, 1), r)``, so a record does not depend on ``n_max`` (beyond the cap
    on the count), on the block size, or on the other clients. Only keys and a few parameters are
    stored: the population is a pytree with a static client count, like
    :class:`~jfed.data.population.SyntheticLinear`; alpha, beta and the count law are traced leaves
    (a sweep over them compiles once).

    Attributes:
      data_key: the population's key (typed PRNG key).
      alpha: ``f32[]``, model heterogeneity (std of ``u_k``).
      beta: ``f32[]``, feature heterogeneity (std of ``B_k``).
      feature_std: ``f32[d]``, ``sqrt(Sigma_jj)``.
      count_log_mean: ``f32[]``, m.
      count_log_std: ``f32[]``, s.
      model_key: the key of the shared model (used with ``shared_model``; kept by
        :meth:`held_out`, so held-out clients share the training clients' model).
      n_clients: number of clients (static).
      n_max: the cap on a client's records, the padded length (static).
      classes: number of classes (static).
      shared_model: one ``W, b`` for all clients instead of one per client (static).
    """

    data_key: jax.Array
    alpha: jax.Array
    beta: jax.Array
    feature_std: jax.Array
    count_log_mean: jax.Array
    count_log_std: jax.Array
    model_key: jax.Array
    n_clients: int = field(metadata=dict(static=True))
    n_max: int = field(metadata=dict(static=True))
    classes: int = field(metadata=dict(static=True))
    shared_model: bool = field(default=False, metadata=dict(static=True))

    @classmethod
    def create(
        cls,
        key: jax.Array,
        n_clients: int,
        alpha: float = 1.0,
        beta: float = 1.0,
        *,
        n_max: int = 128,
        dim: int = 60,
        classes: int = 10,
        count_log_mean: float = 3.0,
        count_log_std: float = 1.5,
        shared_model: bool = False,
    ) -> SyntheticFederated:
        """A population of ``n_clients`` Synthetic(alpha, beta) clients (nothing is generated yet).

        The default count law (median e^3 ~ 20 records, ~11% of clients capped at 128) is a smaller
        version of FedProx's ``50 + lognormal(4, 2)``; pass ``count_log_mean=4, count_log_std=2``
        for its shape.
        """
        n_clients = check_int_range("n_clients", n_clients, 1, 2**31 - 1)
        n_max = check_int_range("n_max", n_max, 1, 1_000_000)
        dim = check_int_range("dim", dim, 1, 100_000)
        classes = check_int_range("classes", classes, 2, 100_000)
        alpha = check_nonnegative("alpha", alpha)
        beta = check_nonnegative("beta", beta)
        count_log_std = check_nonnegative("count_log_std", count_log_std)
        count_log_mean = float(count_log_mean)
        if not np.isfinite(count_log_mean):
            raise ValueError(f"expected finite count_log_mean, got count_log_mean={count_log_mean}")
        j = np.arange(1, dim + 1, dtype=np.float64)
        feature_std = j ** (-FEATURE_COVARIANCE_EXPONENT / 2.0)
        return cls(
            key,
            jnp.asarray(alpha, jnp.float32),
            jnp.asarray(beta, jnp.float32),
            jnp.asarray(feature_std, jnp.float32),
            jnp.asarray(count_log_mean, jnp.float32),
            jnp.asarray(count_log_std, jnp.float32),
            jax.random.fold_in(key, SHARED_MODEL_STREAM),
            n_clients,
            n_max,
            classes,
            bool(shared_model),
        )

    @property
    def dim(self) -> int:
        return self.feature_std.shape[0]

    def client_model(self, client_id: jax.Array) -> ClientModel:
        """Client ``client_id``'s latent parameters (no records are generated)."""
        d, c = self.dim, self.classes
        client_key = jax.random.fold_in(self.data_key, client_id)
        z, _ = normals_and_uniforms(jax.random.fold_in(client_key, 0), 3 + c * d + c + d, 0)
        u, B = self.alpha * z[0], self.beta * z[1]
        if self.shared_model:
            shared, _ = normals_and_uniforms(self.model_key, 3 + c * d + c + d, 0)
            z = z.at[3 : 3 + c * d + c].set(shared[3 : 3 + c * d + c])
        log_count = self.count_log_mean + self.count_log_std * z[2]
        count = jnp.clip(jnp.floor(jnp.exp(log_count)), 1.0, float(self.n_max)).astype(jnp.int32)
        weights = u + z[3 : 3 + c * d].reshape(c, d)
        bias = u + z[3 + c * d : 3 + c * d + c]
        feature_mean = B + z[3 + c * d + c :]
        return ClientModel(weights, bias, feature_mean, count, u, B)

    def record(self, client_id: jax.Array) -> ClientRecords:
        """Client ``client_id``'s padded records, generated on the fly (traceable, vmappable)."""
        client_id = jnp.asarray(client_id, jnp.int32)
        model = self.client_model(client_id)
        rows_key = jax.random.fold_in(jax.random.fold_in(self.data_key, client_id), 1)

        def noise(r: jax.Array) -> jax.Array:
            return normals_and_uniforms(jax.random.fold_in(rows_key, r), self.dim, 0)[0]

        X = model.feature_mean + self.feature_std * jax.vmap(noise)(jnp.arange(self.n_max))
        logits = X @ model.weights.T + model.bias
        y = jnp.argmax(logits, axis=-1).astype(jnp.float32)
        mask = jnp.arange(self.n_max) < model.count
        X = jnp.where(mask[:, None], X, 0.0)
        y = jnp.where(mask, y, 0.0)
        return ClientRecords(X, y, model.count, client_id)

    def records(self, client_ids: jax.Array) -> ClientRecords:
        """Records of ``ids: i32[b]``: a :class:`ClientRecords` with leaves ``X: f32[b, n_max,
        d]``, ``y: f32[b, n_max]``, ``count: i32[b]``, ``client_id: i32[b]``."""
        return jax.vmap(self.record)(client_ids)

    def materialize(self, chunk: int = 4096) -> SiloData:
        """Every client's records generated once and stored: a :class:`~jfed.data.silos.SiloData`
        (``features: f32[N, n_max, d]``, ``targets: f32[N, n_max]``, ``counts: i32[N]``) with the
        same records, which a round then reads instead of generating them. Worth it when the
        population fits in memory (4 N n_max (d + 1) bytes) and is trained for many rounds."""
        chunk = min(check_int_range("chunk", chunk, 1, 2**31 - 1), self.n_clients)
        features, targets, counts = [], [], []
        for start in range(0, self.n_clients, chunk):
            ids = np.minimum(np.arange(start, start + chunk), self.n_clients - 1).astype(np.int32)
            block = _records(self, jnp.asarray(ids))
            keep = min(chunk, self.n_clients - start)
            features.append(np.asarray(block.features)[:keep])
            targets.append(np.asarray(block.targets)[:keep])
            counts.append(np.asarray(block.count)[:keep])
        return SiloData(
            jnp.asarray(np.concatenate(features)),
            jnp.asarray(np.concatenate(targets)),
            jnp.asarray(np.concatenate(counts), jnp.int32),
        )

    def held_out(self, n_clients: int, key: jax.Array | None = None) -> SyntheticFederated:
        """The same law for ``n_clients`` other clients, from ``key`` (default: a stream disjoint
        from every training client, ``fold_in(data_key, 2^31 + 1)``)."""
        n_clients = check_int_range("n_clients", n_clients, 1, 2**31 - 1)
        if key is None:
            key = jax.random.fold_in(self.data_key, 2**31 + 1)
        return dataclasses.replace(self, data_key=key, n_clients=n_clients)

    def sample_test(
        self, n_clients: int, key: jax.Array | None = None, chunk: int = 1024
    ) -> tuple[np.ndarray, np.ndarray]:
        """A shared test set on the host: all real records of ``n_clients`` held-out clients (see
        :meth:`held_out`), pooled in client order, ``(X: f64[m, d], y: f64[m])`` with ``m`` the sum
        of their counts. Generated ``chunk`` clients at a time (:meth:`materialize`)."""
        return self.held_out(n_clients, key).materialize(chunk).pooled()


@jax.jit
def _records(population: SyntheticFederated, ids: jax.Array) -> ClientRecords:
    """Jitted :meth:`SyntheticFederated.records` with the population as an argument (one compile
    per population structure and block shape, shared by every call)."""
    return population.records(ids)
