"""Data silos for cross-silo FL: N silos, silo i holding n_i records (padded to n_max).

Silo constructions that ship offline (docs/specs/silo_sgd.md):

- ``digits-evenodd``: scikit-learn's digits (8x8), odd-vs-even labels, 25 silos, one
  (even digit, odd digit) pair per silo (the seed's MNIST construction). With mixing ``p``, each
  training record goes to a uniformly random silo with probability p, else to a random one of the
  5 silos whose pair contains its digit: p = 0 is fully heterogeneous, p = 1 homogeneous.
- ``<regression task>-sorted`` (e.g. ``fair-sorted``): a statsmodels regression set with silos made
  by sorting the training records on the target (the seed's insurance construction).
- ``digits-bylabel``: 10-class digits, one silo per label (the seed's obesity construction), with
  the same mixing ``p``.
- ``synthetic``: procedural logistic-regression silos generated on device from a key.
- :func:`load_seed_csv`: the seed's original MNIST / insurance / obesity files, when on disk.

Features are standardised on the training split and scaled so every training record has
``||x|| <= 1`` (test records are projected onto that ball), as the seed does before its losses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jfed._validation import check_finite_array, check_int_range
from jfed.catalog import REGRESSION_DATASETS, SILO_DATASETS


class SiloView(NamedTuple):
    """One silo as its client function sees it: an id into the shared arrays, not a copy.

    Attributes:
      features: ``f32[N, n_max, d]`` (all silos; read rows with :meth:`rows`).
      targets: ``f32[N, n_max]``.
      count: ``i32[]``, this silo's n_i.
      silo_id: ``i32[]``.
    """

    features: jax.Array
    targets: jax.Array
    count: jax.Array  # type: ignore[assignment]  # the field's name; shadows tuple.count
    silo_id: jax.Array

    @property
    def n_max(self) -> int:
        return self.features.shape[1]

    def rows(self, indices: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(X: f32[b, d], y: f32[b])`` of this silo's records ``indices: i32[b]``."""
        return self.features[self.silo_id, indices], self.targets[self.silo_id, indices]


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class SiloData:
    """N silos, padded: silo i's records are rows ``0..counts[i]-1``.

    Attributes:
      features: ``f32[N, n_max, d]``.
      targets: ``f32[N, n_max]`` (class labels as floats for classification).
      counts: ``i32[N]``, the number n_i of real records per silo.
    """

    features: jax.Array
    targets: jax.Array
    counts: jax.Array

    @classmethod
    def from_lists(cls, features: list[np.ndarray], targets: list[np.ndarray]) -> SiloData:
        """Pad per-silo host arrays into one device array (validates finiteness and sizes)."""
        if not features or len(features) != len(targets):
            raise ValueError("expected matching non-empty lists of per-silo features and targets")
        counts = np.array([len(t) for t in targets])
        if np.any(counts < 1):
            raise ValueError(f"expected every silo to hold >= 1 record, got counts {counts}")
        n_max, dim = int(counts.max()), features[0].shape[1]
        X = np.zeros((len(features), n_max, dim), np.float32)
        y = np.zeros((len(features), n_max), np.float32)
        for i, (f, t) in enumerate(zip(features, targets, strict=True)):
            X[i, : len(t)] = check_finite_array(f"features of silo {i}", f)
            y[i, : len(t)] = check_finite_array(f"targets of silo {i}", t)
        return cls(jnp.asarray(X), jnp.asarray(y), jnp.asarray(counts, jnp.int32))

    @property
    def n_clients(self) -> int:
        return self.features.shape[0]

    @property
    def dim(self) -> int:
        return self.features.shape[2]

    def record(self, silo_id: jax.Array) -> SiloView:
        """A view of one silo (no copy of its records)."""
        return SiloView(self.features, self.targets, self.counts[silo_id], silo_id)

    def pooled(self) -> tuple[np.ndarray, np.ndarray]:
        """All real training records, pooled on the host (float64)."""
        X, y, counts = map(np.asarray, (self.features, self.targets, self.counts))
        return (
            np.concatenate([X[i, :c] for i, c in enumerate(counts)]).astype(np.float64),
            np.concatenate([y[i, :c] for i, c in enumerate(counts)]).astype(np.float64),
        )


@dataclass(frozen=True)
class SiloTask:
    """A silo data set ready for simulation.

    Attributes:
      name: data set name.
      loss: ``"squared"``, ``"logistic"`` or ``"softmax"``.
      classes: number of classes (softmax), else 1.
      train: the silos.
      test: pooled ``(X: f64[m, d], y: f64[m])``.
      description: how the silos were made.
    """

    name: str
    loss: str
    classes: int
    train: SiloData
    test: tuple[np.ndarray, np.ndarray]
    description: str
    details: dict = field(default_factory=dict)

    @property
    def n_silos(self) -> int:
        return self.train.n_clients

    @property
    def dim(self) -> int:
        return self.train.dim


# ------------------------------------------------------------------------------ preprocessing


def _split(n: int, test_fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    order = rng.permutation(n)
    n_test = max(1, round(test_fraction * n))
    return order[n_test:], order[:n_test]


def _standardize_to_ball(
    X_train: np.ndarray, X_test: np.ndarray, pca_dim: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Standardise on train (optionally PCA), scale so train norms are <= 1, project test."""
    mean, std = X_train.mean(0), X_train.std(0)
    std = np.where(std > 0, std, 1.0)
    X_train, X_test = (X_train - mean) / std, (X_test - mean) / std
    if pca_dim is not None and pca_dim < X_train.shape[1]:
        _, _, components = np.linalg.svd(X_train, full_matrices=False)
        X_train, X_test = X_train @ components[:pca_dim].T, X_test @ components[:pca_dim].T
    scale = np.linalg.norm(X_train, axis=1).max()
    X_train, X_test = X_train / scale, X_test / scale
    norms = np.maximum(np.linalg.norm(X_test, axis=1, keepdims=True), 1.0)
    return X_train, X_test / norms


def _assign_with_mixing(
    home_silos: list[np.ndarray], n_silos: int, mixing: float, rng: np.random.Generator
) -> np.ndarray:
    """Silo of each record: with prob ``mixing`` a uniform silo, else a uniform one of its homes."""
    if not 0.0 <= mixing <= 1.0:
        raise ValueError(f"expected mixing in [0, 1], got mixing={mixing}")
    silo = np.array([rng.choice(homes) for homes in home_silos])
    mixed = rng.random(len(silo)) < mixing
    silo[mixed] = rng.integers(0, n_silos, mixed.sum())
    return silo


def _group(X: np.ndarray, y: np.ndarray, silo: np.ndarray, n_silos: int) -> SiloData:
    return SiloData.from_lists(
        [X[silo == s] for s in range(n_silos)], [y[silo == s] for s in range(n_silos)]
    )


# ------------------------------------------------------------------------------ constructions

EVEN, ODD = (0, 2, 4, 6, 8), (1, 3, 5, 7, 9)
PAIRS = tuple((e, o) for e in EVEN for o in ODD)


def even_odd_silos(
    images: np.ndarray,
    digits: np.ndarray,
    mixing: float = 0.0,
    seed: int = 0,
    test_fraction: float = 0.2,
    pca_dim: int | None = 50,
    name: str = "digits-evenodd",
) -> SiloTask:
    """25 silos, one (even, odd) digit pair each; label 1 for odd digits (logistic loss)."""
    rng = np.random.default_rng(seed)
    train, test = _split(len(digits), test_fraction, rng)
    X_train, X_test = _standardize_to_ball(images[train], images[test], pca_dim)
    homes = [np.array([s for s, pair in enumerate(PAIRS) if d in pair]) for d in digits[train]]
    silo = _assign_with_mixing(homes, len(PAIRS), mixing, rng)
    labels = (digits % 2 == 1).astype(np.float64)
    return SiloTask(
        name,
        "logistic",
        1,
        _group(X_train, labels[train], silo, len(PAIRS)),
        (X_test, labels[test]),
        f"odd vs even, 25 silos of one (even, odd) digit pair each, mixing p={mixing}",
        {"mixing": mixing, "pca_dim": pca_dim},
    )


def label_silos(
    features: np.ndarray,
    labels: np.ndarray,
    mixing: float = 0.0,
    seed: int = 0,
    test_fraction: float = 0.2,
    pca_dim: int | None = None,
    name: str = "digits-bylabel",
) -> SiloTask:
    """One silo per class label (softmax loss), with mixing p."""
    classes = np.unique(labels)
    index = {c: i for i, c in enumerate(classes)}
    y = np.array([index[c] for c in labels], np.float64)
    rng = np.random.default_rng(seed)
    train, test = _split(len(y), test_fraction, rng)
    X_train, X_test = _standardize_to_ball(features[train], features[test], pca_dim)
    silo = _assign_with_mixing([np.array([int(c)]) for c in y[train]], len(classes), mixing, rng)
    return SiloTask(
        name,
        "softmax",
        len(classes),
        _group(X_train, y[train], silo, len(classes)),
        (X_test, y[test]),
        f"{len(classes)} classes, one silo per label, mixing p={mixing}",
        {"mixing": mixing},
    )


def sorted_target_silos(
    features: np.ndarray,
    targets: np.ndarray,
    n_silos: int = 10,
    seed: int = 0,
    test_fraction: float = 0.2,
    name: str = "sorted",
) -> SiloTask:
    """Regression silos made by sorting the training records on the (standardised) target."""
    n_silos = check_int_range("silos", n_silos, 1, len(targets))
    rng = np.random.default_rng(seed)
    train, test = _split(len(targets), test_fraction, rng)
    X_train, X_test = _standardize_to_ball(features[train], features[test])
    y_mean, y_std = targets[train].mean(), targets[train].std() or 1.0
    y_train, y_test = (targets[train] - y_mean) / y_std, (targets[test] - y_mean) / y_std
    silo = np.empty(len(train), int)
    silo[np.argsort(y_train, kind="stable")] = np.arange(len(train)) * n_silos // len(train)
    return SiloTask(
        name,
        "squared",
        1,
        _group(X_train, y_train, silo, n_silos),
        (X_test, y_test),
        f"{n_silos} silos by sorted target (standardised), squared loss",
        {},
    )


def synthetic_silos(
    key: jax.Array,
    n_silos: int,
    records_per_silo: int,
    dim: int,
    heterogeneity: float = 1.0,
    n_test: int = 10_000,
) -> SiloTask:
    """Procedural logistic-regression silos generated on device (no host copy of the data).

    Silo i draws ``x = (mu_i + z) / sqrt(3 d)`` (projected onto the unit ball) with
    ``mu_i = heterogeneity * N(0, I)`` and labels ``Bernoulli(sigmoid(4 x^T w*))``,
    ``||w*|| = sqrt(d)``.
    """
    check_int_range("silos", n_silos, 1, 10**6)
    check_int_range("records_per_silo", records_per_silo, 1, 10**8)
    w_key, mu_key, data_key, test_key = jax.random.split(key, 4)
    w_star = jax.random.normal(w_key, (dim,))
    w_star = w_star / jnp.linalg.norm(w_star) * jnp.sqrt(dim)
    means = heterogeneity * jax.random.normal(mu_key, (n_silos, dim))

    @partial(jax.jit, static_argnums=2)
    def generate(key, means, count):
        def one(silo_key, mean):
            x_key, y_key = jax.random.split(silo_key)
            x = (mean + jax.random.normal(x_key, (count, dim))) / jnp.sqrt(3.0 * dim)
            x = x / jnp.maximum(jnp.linalg.norm(x, axis=1, keepdims=True), 1.0)
            y = jax.random.bernoulli(y_key, jax.nn.sigmoid(4.0 * x @ w_star)).astype(jnp.float32)
            return x, y

        return jax.vmap(one)(jax.random.split(key, means.shape[0]), means)

    X, y = generate(data_key, means, records_per_silo)
    test_means = jnp.zeros((1, dim)) + means[jax.random.randint(test_key, (1,), 0, n_silos)]
    X_test, y_test = generate(test_key, test_means, n_test)
    train = SiloData(X, y, jnp.full((n_silos,), records_per_silo, jnp.int32))
    return SiloTask(
        "synthetic",
        "logistic",
        1,
        train,
        (np.asarray(X_test[0], np.float64), np.asarray(y_test[0], np.float64)),
        f"procedural logistic silos, heterogeneity {heterogeneity}",
        {"heterogeneity": heterogeneity},
    )


def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    return digits.data.astype(np.float64), digits.target.astype(int)


def _sorted_regression(base: str, mixing: float, n_silos: int | None, seed: int) -> SiloTask:
    """``<base>-sorted``: the statsmodels regression set ``base``, silos by sorted target."""
    from jfed.data.regression import _LOADERS

    del mixing
    features, targets, _ = _LOADERS[base]()
    return sorted_target_silos(features, targets, n_silos or 10, seed, name=f"{base}-sorted")


SILO_LOADERS: dict[str, Callable[[float, int | None, int], SiloTask]] = {
    "digits-evenodd": lambda mixing, n_silos, seed: even_odd_silos(*_digits(), mixing=mixing,
                                                                   seed=seed),
    "digits-bylabel": lambda mixing, n_silos, seed: label_silos(*_digits(), mixing=mixing,
                                                                seed=seed),
    "synthetic": lambda mixing, n_silos, seed: synthetic_silos(jax.random.key(seed),
                                                               n_silos or 25, 2_000, 20),
    **{f"{base}-sorted": partial(_sorted_regression, base) for base in REGRESSION_DATASETS},
}  # fmt: skip
"""``(mixing, n_silos, seed) -> SiloTask`` of every silo data set, by its name."""


def load_silos(
    name: str, mixing: float = 0.0, n_silos: int | None = None, seed: int = 0
) -> SiloTask:
    """A silo task by name (see :data:`SILO_DATASETS`).

    Args:
      name: ``digits-evenodd``, ``digits-bylabel``, ``<regression task>-sorted`` or ``synthetic``.
      mixing: p for the digit constructions (0 heterogeneous .. 1 homogeneous).
      n_silos: number of silos for ``-sorted`` (10) and ``synthetic`` (25).
      seed: split / assignment seed.
    """
    if name not in SILO_LOADERS:
        raise ValueError(f"unknown silo dataset {name!r}; expected one of {list(SILO_DATASETS)}")
    return SILO_LOADERS[name](mixing, n_silos, seed)


# ------------------------------------------------------------------------------ seed files


def _mnist(frame, mixing: float, seed: int, n_silos: int) -> SiloTask:
    """``label`` then 784 pixel columns, as the common mnist_train.csv."""
    del n_silos
    label = frame.columns[0]
    return even_odd_silos(frame.drop(columns=label).to_numpy(np.float64),
                          frame[label].to_numpy(int), mixing=mixing, seed=seed,
                          name="mnist-evenodd")  # fmt: skip


def _insurance(frame, mixing: float, seed: int, n_silos: int) -> SiloTask:
    """Kaggle medical cost: age, sex, bmi, children, smoker, region, charges."""
    import pandas as pd

    del mixing
    features = pd.get_dummies(frame.drop(columns="charges"), drop_first=True, dtype=float)
    return sorted_target_silos(features.to_numpy(np.float64),
                               frame["charges"].to_numpy(np.float64), n_silos, seed,
                               name="insurance-sorted")  # fmt: skip


def _obesity(frame, mixing: float, seed: int, n_silos: int) -> SiloTask:
    """UCI obesity levels: 16 attributes and ``NObeyesdad``."""
    import pandas as pd

    del n_silos
    target = "NObeyesdad"
    features = pd.get_dummies(frame.drop(columns=target), drop_first=True, dtype=float)
    return label_silos(features.to_numpy(np.float64), frame[target].to_numpy(), mixing=mixing,
                       seed=seed, name="obesity-bylabel")  # fmt: skip


SEED_LOADERS = {"mnist": _mnist, "insurance": _insurance, "obesity": _obesity}
"""Each seed file kind's reader: ``(frame, mixing, seed, n_silos) -> SiloTask``."""
SEED_FILES = tuple(SEED_LOADERS)


def load_seed_csv(path: str, kind: str, mixing: float = 0.0, seed: int = 0, n_silos: int = 10):
    """The seed's original data files, when a user has them locally.

    Args:
      path: a CSV file.
      kind: ``"mnist"`` (``label`` then 784 pixel columns, as the common mnist_train.csv),
        ``"insurance"`` (Kaggle medical cost: age, sex, bmi, children, smoker, region, charges)
        or ``"obesity"`` (UCI obesity levels: 16 attributes and ``NObeyesdad``).
      mixing, seed, n_silos: as in :func:`load_silos`.
    """
    import pandas as pd

    if kind not in SEED_LOADERS:
        raise ValueError(f"unknown seed file kind {kind!r}; expected one of {SEED_FILES}")
    return SEED_LOADERS[kind](pd.read_csv(path), mixing, seed, n_silos)
