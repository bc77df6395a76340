"""CIFAR-10 and CIFAR-100 from the user's copy of the "python version" (pickled batches), split
into clients (iid, Dirichlet(alpha) by label). Nothing is downloaded.

The files are Python pickles; they are read with an unpickler that only rebuilds numpy arrays
(no other object can be created from a file, so a tampered file cannot run code).
"""

from __future__ import annotations

import os
import pickle
from typing import ClassVar

import numpy as np

from jfed.data.clients import DataFileError, FederatedTask, split_task

WHERE = "https://www.cs.toronto.edu/~kriz/cifar.html"
LAYOUT = {
    10: ("cifar-10-batches-py", tuple(f"data_batch_{i}" for i in range(1, 6)), "test_batch",
         b"labels"),
    100: ("cifar-100-python", ("train",), "test", b"fine_labels"),
}  # fmt: skip
"""classes -> (folder, training files, test file, label key) of the python version."""


class _ArraysOnly(pickle.Unpickler):
    """Rebuilds dicts, bytes, lists and numpy arrays; refuses every other class."""

    ALLOWED: ClassVar[set[tuple[str, str]]] = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        # pickle protocol 5 stores an array's bytes as a buffer rebuilt by _frombuffer (numpy
        # 1's module path, then numpy 2's): an array from bytes, nothing else
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"a CIFAR batch holds arrays only, not {module}.{name}")


def _checked_arrays(data: object, labels: object, classes: int) -> tuple[np.ndarray, np.ndarray]:
    """``(u8[n, 3072], i64[n])`` of a batch's ``data`` and labels, as the format specifies them:
    pixels integers in [0, 255] (a float 0.5 is not a byte), labels integers in [0, classes).
    Raises ``ValueError`` saying what is wrong (nothing is cast or truncated silently)."""
    data, labels = np.asarray(data), np.asarray(labels)
    if data.dtype.kind not in "iu" or (data.size and (data.min() < 0 or data.max() > 255)):
        raise ValueError(f"expected pixels of integers in [0, 255] (uint8), got {data.dtype}"
                         f"{f' in [{data.min()}, {data.max()}]' if data.size else ''}")  # fmt: skip
    if labels.size and labels.dtype.kind not in "iu":
        raise ValueError(f"expected integer labels in [0, {classes - 1}], got {labels.dtype}")
    if labels.size and (labels.min() < 0 or labels.max() >= classes):
        raise ValueError(
            f"expected labels in [0, {classes - 1}] (CIFAR-{classes}), got labels in "
            f"[{labels.min()}, {labels.max()}]"
        )
    if data.ndim != 2 or data.shape[1] != 3072 or labels.shape != (len(data),):
        raise ValueError(f"data of shape {data.shape} and {labels.size} labels")
    return data.astype(np.uint8), labels.astype(np.int64)


def read_batch(path: str, label_key: bytes, classes: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """``(x: u8[n, 32, 32, 3], y: i64[n])`` of one pickled batch (rows of 3,072 bytes: the red,
    green, then blue 32x32 planes; labels in [0, classes))."""
    try:
        with open(path, "rb") as handle:
            batch = _ArraysOnly(handle, encoding="bytes").load()
        data, labels = _checked_arrays(batch[b"data"], batch[label_key], classes)
    except FileNotFoundError:
        raise
    except Exception as error:  # any unreadable file: one line naming it
        raise DataFileError(
            f"cannot read the CIFAR batch {path} ({type(error).__name__}: {error}); "
            f"get the python version again from {WHERE}"
        ) from None
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), labels


def read_cifar(data_dir: str, classes: int = 10) -> tuple[np.ndarray, ...]:
    """``(x_train, y_train, x_test, y_test)`` from ``data_dir`` (the extracted folder, e.g.
    ``cifar-10-batches-py``, or the folder holding it)."""
    if classes not in LAYOUT:
        raise DataFileError(f"expected classes 10 or 100, got classes={classes}")
    folder, train_files, test_file, label_key = LAYOUT[classes]
    base = (
        data_dir
        if os.path.isfile(os.path.join(data_dir, test_file))
        else os.path.join(data_dir, folder)
    )
    parts = []
    for name in (*train_files, test_file):
        path = os.path.join(base, name)
        if not os.path.isfile(path):
            raise DataFileError(
                f"CIFAR-{classes} not found: no {path}; download the python version "
                f"(cifar-{classes}-python.tar.gz) from {WHERE} and extract it in {data_dir}"
            )
        parts.append(read_batch(path, label_key, classes))
    x_train = np.concatenate([x for x, _ in parts[:-1]])
    y_train = np.concatenate([y for _, y in parts[:-1]])
    return x_train, y_train, parts[-1][0], parts[-1][1]


def load_cifar(
    data_dir: str,
    classes: int = 10,
    n_clients: int = 1_000,
    split: str = "iid",
    alpha: float = 0.5,
    seed: int = 0,
) -> FederatedTask:
    """CIFAR-10 (or -100) split into ``n_clients`` clients (``iid`` or ``dirichlet``), its test
    set one pooled client. Images are kept as bytes ``u8[32, 32, 3]`` and read standardised per
    channel with the training set's mean and standard deviation (as pfl-research's benchmarks
    preprocess them): a record is ``f32[32, 32, 3]``, a label ``i32[]``."""
    if split == "natural":
        raise DataFileError("CIFAR has no natural clients; expected split 'iid' or 'dirichlet'")
    x_train, y_train, x_test, y_test = read_cifar(data_dir, classes)
    mean = x_train.mean(axis=(0, 1, 2), dtype=np.float64)
    std = x_train.std(axis=(0, 1, 2), dtype=np.float64)
    return split_task(
        f"cifar{classes}", (x_train, y_train), (x_test, y_test), classes, n_clients, split,
        alpha, seed=seed, scale=1.0 / std, shift=-mean / std,
        description=f"CIFAR-{classes} ({len(y_train)} training images)",
    )  # fmt: skip
