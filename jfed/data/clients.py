"""Federated populations of real records: every client's records stored once, client after
client, and read by a client function through a view (docs/reference/datasets.md).

- :class:`FederatedData`: ``n_clients`` clients over one record store; client k owns the store's
  records ``offsets[k] .. offsets[k] + counts[k] - 1``. It is a pytree (the engine passes it into
  the jitted program; the client count and the largest client are static), and
  ``record(k)`` hands a client function a :class:`ClientView` with the fields and ``rows`` method
  of a :class:`~jfed.data.silos.SiloView` (``count``, ``rows(indices) -> (X, y)``), so DP-FedAvg's
  clients read it unchanged. No client is padded: memory is the records themselves.
- Record stores: :class:`RecordArrays` (records held as rows, e.g. images ``u8[n, h, w, c]``
  scaled on reading) and :class:`TextWindows` (a character stream held once; record i is the
  window of ``window`` characters starting at position i and the character after it, so
  LEAF's overlapping 80-character windows cost one byte of text each, not 80 ints).
- :func:`from_arrays`: any arrays with a client id per record as a federated population.
- :func:`partition`: client ids for a pooled data set: ``iid`` (equal shares of a shuffle),
  ``dirichlet`` (a Dirichlet(alpha) label split, :func:`~jfed.data.federated.dirichlet_partition`)
  or ``natural`` (the records' own writer or speaker ids).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jfed._validation import UsageError, check_int_range
from jfed.data.federated import dirichlet_partition


class DataFileError(UsageError):
    """A data file that is missing or cannot be read; its message is one line saying which file
    and where to get the data."""


SPLITS = ("iid", "dirichlet", "natural")
"""How a pooled data set is cut into clients (see :func:`partition`)."""


# ------------------------------------------------------------------------------ record stores


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class RecordArrays:
    """Records held as rows: record p is ``(features[p] * scale + shift, targets[p])`` in
    float32, or ``(features[p], targets[p])`` as stored when ``scale`` is None (tokens).

    Image bytes stay ``u8`` in memory and are converted as they are read, so a CIFAR-10
    training set holds 150 MB rather than 600 MB.

    Attributes:
      features: ``[n, *record_shape]`` (any dtype; host or device array).
      targets: ``[n, *target_shape]`` (class indices).
      scale, shift: ``f32`` arrays broadcasting against one record (e.g. per channel), or None.
    """

    features: jax.Array
    targets: jax.Array
    scale: jax.Array | None = None
    shift: jax.Array | None = None

    @classmethod
    def create(cls, features, targets, scale=None, shift=None) -> RecordArrays:
        """Features scaled on reading when ``scale`` or ``shift`` is given (the other defaults
        to 1 or 0), else read as stored."""
        if scale is None and shift is None:
            return cls(features, targets)
        scale = 1.0 if scale is None else scale
        shift = 0.0 if shift is None else shift
        return cls(features, targets,
                   jnp.asarray(scale, jnp.float32), jnp.asarray(shift, jnp.float32))  # fmt: skip

    @property
    def size(self) -> int:
        return self.features.shape[0]

    @property
    def record_shape(self) -> tuple[int, ...]:
        return tuple(self.features.shape[1:])

    def gather(self, positions: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(X: f32[b, *record_shape], y)`` of the records at ``positions: i32[b]``."""
        X = self.features[positions]
        if self.scale is not None and self.shift is not None:
            X = X.astype(jnp.float32) * self.scale + self.shift
        return X, self.targets[positions]

    def nbytes(self) -> int:
        return sum(int(a.size) * a.dtype.itemsize for a in jax.tree.leaves(self))


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class TextWindows:
    """Token windows of one stream: record p is ``(text[p : p + window], text[p + window])``
    (``i32[window]`` and ``i32[]``), or with ``sequence_targets`` the next token of every
    position, ``text[p + 1 : p + window + 1]``.

    Attributes:
      text: ``u8[n_tokens]`` (or a wider integer type for vocabularies over 256).
      window: the window's length (static).
      sequence_targets: targets per position (static).
    """

    text: jax.Array
    window: int = field(metadata=dict(static=True))
    sequence_targets: bool = field(default=False, metadata=dict(static=True))

    @property
    def record_shape(self) -> tuple[int, ...]:
        return (self.window,)

    def gather(self, positions: jax.Array) -> tuple[jax.Array, jax.Array]:
        span = positions[:, None] + jnp.arange(self.window)
        X = self.text[span].astype(jnp.int32)
        if self.sequence_targets:
            return X, self.text[span + 1].astype(jnp.int32)
        return X, self.text[positions + self.window].astype(jnp.int32)

    def nbytes(self) -> int:
        return int(self.text.size) * self.text.dtype.itemsize


Store = RecordArrays | TextWindows


# ------------------------------------------------------------------------------ population


class ClientView(NamedTuple):
    """One client as its client function sees it: an offset into the shared store, not a copy.

    Attributes:
      store: the population's record store (shared by every client).
      offset: ``i32[]``, the store position of this client's first record.
      count: ``i32[]``, the number of records (>= 1).
      client_id: ``i32[]``.
    """

    store: Store
    offset: jax.Array
    count: jax.Array  # type: ignore[assignment]  # the field's name; shadows tuple.count
    client_id: jax.Array

    @property
    def silo_id(self) -> jax.Array:
        """Alias of ``client_id`` (the :class:`~jfed.data.silos.SiloView` name)."""
        return self.client_id

    def rows(self, indices: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(X, y)`` of this client's records ``indices: i32[b]`` (indices past ``count`` read
        the last record, so a padded minibatch stays inside the client; give those rows weight
        0)."""
        indices = jnp.clip(indices, 0, self.count - 1)
        return self.store.gather(self.offset + indices)


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class FederatedData:
    """``n_clients`` clients of real records over one store (see the module's docstring).

    Attributes:
      store: a :class:`RecordArrays` or :class:`TextWindows`.
      offsets: ``i32[N]``, the store position of each client's first record.
      counts: ``i32[N]``, each client's number of records (>= 1).
      n_max: the largest count (static: a local epoch's number of steps is ``ceil(n_max / B)``).
    """

    store: Store
    offsets: jax.Array
    counts: jax.Array
    n_max: int = field(metadata=dict(static=True))

    @classmethod
    def create(cls, store: Store, offsets: np.ndarray, counts: np.ndarray) -> FederatedData:
        counts = np.asarray(counts, np.int64)
        if counts.ndim != 1 or len(counts) < 1 or np.any(counts < 1):
            raise UsageError("expected at least one client and every client holding >= 1 record")
        return cls(store, jnp.asarray(offsets, jnp.int32), jnp.asarray(counts, jnp.int32),
                   int(counts.max()))  # fmt: skip

    @property
    def n_clients(self) -> int:
        return self.counts.shape[0]

    @property
    def record_shape(self) -> tuple[int, ...]:
        return self.store.record_shape

    @property
    def dim(self) -> int:
        """The number of scalars in one record (the population protocol's ``dim``)."""
        return int(np.prod(self.record_shape))

    @property
    def n_records(self) -> int:
        return int(np.asarray(self.counts).sum())

    def record(self, client_id: jax.Array) -> ClientView:
        """A view of client ``client_id`` (traceable, vmappable; no copy of its records)."""
        return ClientView(self.store, self.offsets[client_id], self.counts[client_id], client_id)

    def positions(self) -> np.ndarray:
        """``i64[n_records]``: the store positions of every record, client after client (for
        evaluating a model on all of them, in batches, with ``store.gather``)."""
        offsets, counts = np.asarray(self.offsets, np.int64), np.asarray(self.counts, np.int64)
        starts = np.repeat(offsets - np.cumsum(counts) + counts, counts)
        return starts + np.arange(counts.sum())

    def nbytes(self) -> int:
        """Bytes held: the store plus the offsets and counts."""
        return self.store.nbytes() + 8 * self.n_clients

    def subset(self, client_ids: np.ndarray) -> FederatedData:
        """The clients ``client_ids`` (in that order) over the same store (nothing copied)."""
        ids = np.asarray(client_ids, np.int64)
        return FederatedData.create(
            self.store, np.asarray(self.offsets)[ids], np.asarray(self.counts)[ids]
        )


def from_arrays(
    x: np.ndarray,
    y: np.ndarray,
    client_ids: np.ndarray,
    scale: float | np.ndarray | None = None,
    shift: float | np.ndarray | None = None,
    on_device: bool | None = None,
) -> tuple[FederatedData, np.ndarray]:
    """Any records with a client id each, as a federated population.

    Records are grouped by client (stably: a client's records keep their order) and stored once.

    Args:
      x: ``[n, *record_shape]`` features (read as ``x * scale + shift`` in float32 when a scale
        or shift is given, else as they are; float features must be finite).
      y: ``[n, ...]`` targets (class indices).
      client_ids: ``[n]`` hashable ids (ints or strings); every distinct id is one client.
      scale, shift: see :class:`RecordArrays`.
      on_device: store the records on JAX's default device (``None``: when they take at most
        half of its free memory, see :func:`fits_on_device`; else they stay in host memory and
        are copied in when a program runs).

    Returns:
      ``(population, names)``: the :class:`FederatedData`, and the original id of each client
      (client k is ``names[k]``, in sorted order).
    """
    x, y, client_ids = np.asarray(x), np.asarray(y), np.asarray(client_ids)
    if len(x) != len(y) or len(x) != len(client_ids) or len(x) < 1:
        raise UsageError(
            "expected x, y and client_ids of one length n >= 1, got lengths "
            f"{len(x)}, {len(y)} and {len(client_ids)}"
        )
    if np.issubdtype(x.dtype, np.floating) and not np.all(np.isfinite(x)):
        raise UsageError(f"expected finite x, got {int((~np.isfinite(x)).sum())} non-finite values")
    names, client = np.unique(client_ids, return_inverse=True)
    order = np.argsort(client, kind="stable")
    counts = np.bincount(client, minlength=len(names))
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
    store = RecordArrays.create(
        _placed(x[order], on_device), _placed(y[order], on_device), scale, shift
    )
    return FederatedData.create(store, offsets, counts), names


@dataclass(frozen=True)
class FederatedTask:
    """A federated data set ready for simulation.

    Attributes:
      name: the data set's name.
      train: the training clients.
      test: the same clients' held-out records (a per-client split), or held-out clients, or
        None.
      classes: the number of labels (the vocabulary's size for language data).
      client_names: the original id of each training client.
      description: how the clients were made, in a sentence.
      details: counts and choices, JSON-ready.
    """

    name: str
    train: FederatedData
    test: FederatedData | None
    classes: int
    client_names: tuple[str, ...]
    description: str
    details: dict = field(default_factory=dict)

    @property
    def n_clients(self) -> int:
        return self.train.n_clients


def fits_on_device(nbytes: int, fraction: float = 0.5) -> bool:
    """Whether ``nbytes`` take at most ``fraction`` of the default device's free memory (an
    accelerator's allocator limit, or the host's available memory on CPU)."""
    device = jax.devices()[0]
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and "bytes_limit" in stats:
        free = int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    else:
        try:
            free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError):  # no sysconf: assume it fits
            return True
    return nbytes <= fraction * free


def _placed(array: np.ndarray, on_device: bool | None):
    """``array`` on the default device, or left on the host (see :func:`from_arrays`)."""
    if on_device is None:
        on_device = fits_on_device(array.nbytes)
    return jnp.asarray(array) if on_device else array


# ------------------------------------------------------------------------------ splits


def partition(
    labels: np.ndarray,
    n_clients: int | None,
    split: str = "iid",
    alpha: float = 0.5,
    writers: np.ndarray | None = None,
    seed: int = 0,
) -> np.ndarray:
    """The client of every record of a pooled data set.

    Args:
      labels: ``int[n]`` class labels (used by ``dirichlet``).
      n_clients: N (``iid``, ``dirichlet``); ignored by ``natural``.
      split: ``iid``: a seeded shuffle cut into N shares of equal size (the first ``n mod N``
        clients hold one record more); ``dirichlet``: each class spread over the clients with
        proportions ``Dir(alpha 1_N)`` (:func:`~jfed.data.federated.dirichlet_partition`, every
        client >= 1 record); ``natural``: one client per distinct writer in ``writers``.
      alpha: the Dirichlet concentration (small: few classes per client).
      writers: ``[n]`` the writer (speaker, user) of each record, for ``natural``.
      seed: the shuffle's seed.

    Returns:
      ``i64[n]`` client ids in ``[0, N)``.
    """
    labels = np.asarray(labels)
    n = len(labels)
    if split == "natural":
        if writers is None:
            raise UsageError("expected writers (one id per record) for split='natural'")
        return np.unique(np.asarray(writers), return_inverse=True)[1].astype(np.int64)
    if split not in SPLITS:
        raise UsageError(f"unknown split {split!r}; expected one of {list(SPLITS)}")
    if n_clients is None:
        raise UsageError(f"expected n_clients for split={split!r}")
    n_clients = check_int_range("n_clients", n_clients, 1, n)
    if split == "dirichlet":
        return dirichlet_partition(labels, n_clients, alpha, seed)
    client = np.empty(n, np.int64)
    client[np.random.default_rng(seed).permutation(n)] = np.arange(n) % n_clients
    return client


def split_task(
    name: str,
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    classes: int,
    n_clients: int | None,
    split: str = "iid",
    alpha: float = 0.5,
    writers: np.ndarray | None = None,
    seed: int = 0,
    scale: float | np.ndarray | None = None,
    shift: float | np.ndarray | None = None,
    description: str = "",
) -> FederatedTask:
    """A pooled data set cut into clients by :func:`partition`, its test records one pooled
    client (for central evaluation).

    Args:
      name: the task's name.
      train, test: ``(x: [n, *record_shape], y: int[n])`` each.
      classes: the number of classes.
      n_clients, split, alpha, writers, seed: see :func:`partition`.
      scale, shift: how features are read (see :class:`RecordArrays`).
      description: what the data are, for the task's description.
    """
    client = partition(train[1], n_clients, split, alpha, writers, seed)
    population, names = from_arrays(train[0], train[1].astype(np.int32), client, scale, shift)
    pooled, _ = from_arrays(test[0], test[1].astype(np.int32), np.zeros(len(test[1]), np.int64),
                            scale, shift)  # fmt: skip
    if writers is not None and split == "natural":
        names = np.unique(np.asarray(writers))
    how = f"Dirichlet(alpha={alpha})" if split == "dirichlet" else split
    counts = np.asarray(population.counts)
    return FederatedTask(
        name, population, pooled, classes, tuple(str(n) for n in names),
        f"{description}, {how} across {population.n_clients} clients",
        {"split": split, "alpha": alpha if split == "dirichlet" else None, "seed": seed,
         "clients": population.n_clients, "train_records": int(counts.sum()),
         "test_records": len(test[1]), "records_per_client_max": int(counts.max()),
         "records_per_client_min": int(counts.min())},
    )  # fmt: skip
