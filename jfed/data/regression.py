"""Regression tasks: the five real data sets of the modulated-learning paper, and synthetic ones.

All real sets ship with ``statsmodels`` (no download). Preprocessing follows
docs/specs/modulated.md:
one random split into train / validation / test, features and target standardised with the
training split's mean and standard deviation, every training record a separate client.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import jax
import numpy as np

from jfed._validation import check_finite_array
from jfed.data.population import ArrayClients, Population, SyntheticLinear


@dataclass(frozen=True)
class TaskInfo:
    """What a task is, for listings and records."""

    name: str
    source: str
    target: str
    features: tuple[str, ...]
    description: str


@dataclass(frozen=True)
class RegressionTask:
    """A regression task ready for simulation.

    Attributes:
      info: name, source and column names.
      train: the client population (one record per client).
      validation: ``(X: f64[n_val, d], y: f64[n_val])`` host arrays for tuning.
      test: ``(X: f64[n_test, d], y: f64[n_test])`` host arrays for reporting.
    """

    info: TaskInfo
    train: Population
    validation: tuple[np.ndarray, np.ndarray]
    test: tuple[np.ndarray, np.ndarray]

    @property
    def n_clients(self) -> int:
        return self.train.n_clients

    @property
    def dim(self) -> int:
        return self.train.dim


SPLIT_FRACTIONS = (0.6, 0.2, 0.2)


def split_and_standardize(
    features: np.ndarray,
    targets: np.ndarray,
    seed: int = 0,
    fractions: tuple[float, float, float] = SPLIT_FRACTIONS,
) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """Shuffle once, split into train / validation / test, standardise on train.

    Args:
      features: ``X: f[n, d]``; targets: ``y: f[n]``.
      seed: the split's seed (fixed per task so every method sees the same split).
      fractions: train, validation, test fractions (sum 1).

    Returns:
      ``((X_train, y_train), (X_val, y_val), (X_test, y_test))``, float64, standardised with the
      training mean and std of every feature column and of the target (constant columns keep
      std 1).
    """
    features = check_finite_array("features", np.asarray(features, np.float64))
    targets = check_finite_array("targets", np.asarray(targets, np.float64))
    if abs(sum(fractions) - 1.0) > 1e-9 or min(fractions) <= 0:
        raise ValueError(f"expected three positive split fractions summing to 1, got {fractions}")
    n = features.shape[0]
    order = np.random.default_rng(seed).permutation(n)
    n_train = round(fractions[0] * n)
    n_val = round(fractions[1] * n)
    parts = np.split(order, [n_train, n_train + n_val])
    train = parts[0]
    mean, std = features[train].mean(0), features[train].std(0)
    std = np.where(std > 0, std, 1.0)
    y_mean, y_std = targets[train].mean(), targets[train].std()
    y_std = y_std if y_std > 0 else 1.0
    return tuple(((features[p] - mean) / std, (targets[p] - y_mean) / y_std) for p in parts)


def _co2() -> tuple[np.ndarray, np.ndarray, TaskInfo]:
    from statsmodels import datasets  # half the import time of statsmodels.api

    frame = datasets.co2.load_pandas().data
    # The seed's n = 2284 counts every week, so the 59 missing weeks are interpolated, not dropped.
    co2 = frame["co2"].interpolate(limit_direction="both").to_numpy()
    days = (frame.index - frame.index[0]).days.to_numpy()
    t = days / 365.25
    two_pi_t = 2.0 * np.pi * t
    columns = {
        "t": t,
        "t^2": t**2,
        "t^3": t**3,
        "sin(2 pi t)": np.sin(two_pi_t),
        "cos(2 pi t)": np.cos(two_pi_t),
        "sin(4 pi t)": np.sin(2 * two_pi_t),
        "cos(4 pi t)": np.cos(2 * two_pi_t),
    }
    info = TaskInfo(
        "co2",
        "statsmodels.datasets.co2",
        "co2",
        tuple(columns),
        "Mauna Loa weekly CO2, 7 time features (t in years; missing weeks interpolated)",
    )
    return np.column_stack(list(columns.values())), co2, info


def _columns_task(
    name: str, dataset: str, target: str, drop: tuple[str, ...], description: str
) -> Callable[[], tuple[np.ndarray, np.ndarray, TaskInfo]]:
    def load() -> tuple[np.ndarray, np.ndarray, TaskInfo]:
        from statsmodels import datasets

        frame = getattr(datasets, dataset).load_pandas().data.astype(np.float64)
        feature_names = tuple(c for c in frame.columns if c != target and c not in drop)
        info = TaskInfo(name, f"statsmodels.datasets.{dataset}", target, feature_names, description)
        return frame[list(feature_names)].to_numpy(), frame[target].to_numpy(), info

    return load


_LOADERS: dict[str, Callable[[], tuple[np.ndarray, np.ndarray, TaskInfo]]] = {
    "co2": _co2,
    "fair": _columns_task(
        "fair", "fair", "yrs_married", (), "Fair's affairs survey: years married from 8 columns"
    ),
    "modechoice": _columns_task(
        "modechoice",
        "modechoice",
        "gc",
        ("individual",),
        "Travel mode choice: generalised cost from 7 columns",
    ),
    "randhie-lncoins": _columns_task(
        "randhie-lncoins", "randhie", "lncoins", (), "RAND health insurance: log coinsurance"
    ),
    "randhie-fmde": _columns_task(
        "randhie-fmde", "randhie", "fmde", (), "RAND health insurance: fmde from 9 columns"
    ),
}

DEFAULT_DATASET = "fair"


def available_datasets() -> list[str]:
    """Names accepted by :func:`load_regression`."""
    return list(_LOADERS)


def load_regression(name: str, seed: int = 0) -> RegressionTask:
    """Load one of the paper's five real regression tasks, split and standardised.

    Args:
      name: one of :func:`available_datasets` (``co2``, ``fair``, ``modechoice``,
        ``randhie-lncoins``, ``randhie-fmde``).
      seed: seed of the train / validation / test split.

    Returns:
      A :class:`RegressionTask` whose training records are :class:`ArrayClients`.
    """
    if name not in _LOADERS:
        raise ValueError(f"unknown dataset {name!r}; expected one of {available_datasets()}")
    features, targets, info = _LOADERS[name]()
    train, validation, test = split_and_standardize(features, targets, seed=seed)
    return RegressionTask(info, ArrayClients.from_numpy(*train), validation, test)


def synthetic_regression(
    key: jax.Array, n_clients: int, dim: int, noise_std: float = 0.5, n_holdout: int = 10_000
) -> RegressionTask:
    """A procedural task: ``n_clients`` generated on device, held-out splits sampled on the host."""
    population = SyntheticLinear.create(key, n_clients, dim, noise_std)
    info = TaskInfo(
        "synthetic",
        "jfed.data.SyntheticLinear",
        "y",
        tuple(f"x{j}" for j in range(dim)),
        f"x ~ N(0, I_{dim}), y = x^T theta* + {noise_std} e, ||theta*|| = 1",
    )
    return RegressionTask(
        info,
        population,
        population.sample(n_holdout, stream=1),
        population.sample(n_holdout, stream=2),
    )
