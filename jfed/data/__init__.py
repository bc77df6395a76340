"""Data layer: client populations and regression tasks (real sets ship offline with statsmodels)."""

from jfed.data.population import ArrayClients, Population, SyntheticLinear
from jfed.data.regression import (
    DEFAULT_DATASET,
    RegressionTask,
    TaskInfo,
    available_datasets,
    load_regression,
    split_and_standardize,
    synthetic_regression,
)

__all__ = [
    "DEFAULT_DATASET",
    "ArrayClients",
    "Population",
    "RegressionTask",
    "SyntheticLinear",
    "TaskInfo",
    "available_datasets",
    "load_regression",
    "split_and_standardize",
    "synthetic_regression",
]
