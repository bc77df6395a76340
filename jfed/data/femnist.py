"""FEMNIST from the user's LEAF files: the JSON user files LEAF's preprocessing writes
(``data/femnist/data/train/*.json`` and ``test/*.json`` after its train/test split, or
``all_data/*.json`` before it). Nothing is downloaded.

A LEAF file is ``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [[784
floats in [0, 1]], ...], "y": [class, ...]}}}``; classes 0-9 are digits, 10-35 upper-case and
36-61 lower-case letters. ``natural`` clients are LEAF's users (writers) with their own
train/test split; ``iid`` and ``dirichlet`` pool the training records and cut them anew, the
test records pooled. Pixels are stored as bytes (LEAF writes ``pixel / 255``, so the byte is
exact) and read as ``f32[28, 28, 1]`` in [0, 1].
"""

from __future__ import annotations

import glob
import json
import os

import numpy as np

from jfed.data.clients import DataFileError, FederatedTask, from_arrays, split_task

WHERE = (
    "LEAF's data/femnist (github.com/TalwalkarLab/leaf: "
    "./preprocess.sh -s niid --sf 1.0 -k 0 -t sample)"
)
SIDE, CLASSES = 28, 62


def read_leaf_files(paths: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x: u8[n, 28, 28, 1], y: i64[n], writer: str[n])`` of LEAF JSON user files."""
    xs, ys, writers = [], [], []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
            for user in data["users"]:
                x = np.asarray(data["user_data"][user]["x"], np.float64)
                y = _labels(data["user_data"][user]["y"], user)
                if x.ndim != 2 or x.shape[1] != SIDE * SIDE or len(x) != len(y):
                    raise ValueError(f"user {user}: x of shape {x.shape} and {len(y)} labels")
                if np.any((y < 0) | (y >= CLASSES)) or np.any((x < 0) | (x > 1)):
                    raise ValueError(f"user {user}: labels outside [0, 62) or pixels outside [0,1]")
                xs.append(np.rint(x * 255.0).astype(np.uint8).reshape(-1, SIDE, SIDE, 1))
                ys.append(y)
                writers += [user] * len(y)
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise DataFileError(
                f"cannot read the LEAF FEMNIST file {path} ({type(error).__name__}: {error}); "
                f"make it again with {WHERE}"
            ) from None
    if not xs:
        raise DataFileError(f"the LEAF FEMNIST files {paths} hold no user; make them with {WHERE}")
    return np.concatenate(xs), np.concatenate(ys), np.asarray(writers)


def _labels(values: object, user: str) -> np.ndarray:
    """``i64[n]`` of a LEAF user's ``y``: integers (``2.5`` is no class; it is refused, not
    truncated to 2). Raises ``ValueError``."""
    y = np.asarray(values)
    if y.dtype.kind in "iu" or not y.size:
        return y.astype(np.int64)
    flat = y.reshape(-1)
    integral = np.isfinite(flat) & (flat == np.rint(flat)) if y.dtype.kind == "f" else flat != flat
    if not integral.all():
        raise ValueError(f"user {user}: expected integer labels (classes 0-61), got "
                         f"{flat[~integral][0].item()!r}")  # fmt: skip
    return y.astype(np.int64)


def _files(data_dir: str, part: str) -> list[str]:
    return sorted(glob.glob(os.path.join(data_dir, part, "*.json")))


def load_femnist(
    data_dir: str,
    n_clients: int | None = None,
    split: str = "natural",
    alpha: float = 0.5,
    seed: int = 0,
) -> FederatedTask:
    """FEMNIST from LEAF's JSON files under ``data_dir`` (its ``train/`` and ``test/`` folders).

    Args:
      data_dir: LEAF's ``data/femnist/data`` folder (holding ``train/`` and ``test/``).
      n_clients: clients for ``iid`` and ``dirichlet`` (``natural`` has one per writer).
      split: ``natural`` (LEAF's writers and their per-writer test records), ``iid`` or
        ``dirichlet`` (the training records pooled and cut anew; the test records pooled).
      alpha, seed: see :func:`~jfed.data.clients.partition`.
    """
    train_files, test_files = _files(data_dir, "train"), _files(data_dir, "test")
    if not train_files or not test_files:
        raise DataFileError(
            f"FEMNIST not found: no LEAF JSON files in {os.path.join(data_dir, 'train')} and "
            f"{os.path.join(data_dir, 'test')}; make them with {WHERE}"
        )
    x_train, y_train, writers = read_leaf_files(train_files)
    x_test, y_test, test_writers = read_leaf_files(test_files)
    scale = 1.0 / 255.0
    if split != "natural":
        return split_task(
            "femnist", (x_train, y_train), (x_test, y_test), CLASSES, n_clients, split, alpha,
            seed=seed, scale=scale, shift=0.0,
            description=f"FEMNIST from LEAF's files ({len(y_train)} training characters)",
        )  # fmt: skip
    train, names = from_arrays(x_train, y_train.astype(np.int32), writers, scale, 0.0)
    test, test_names = from_arrays(x_test, y_test.astype(np.int32), test_writers, scale, 0.0)
    if not np.array_equal(names, test_names):
        raise DataFileError(
            f"LEAF's FEMNIST train and test files under {data_dir} name different writers "
            f"({len(names)} and {len(test_names)}); make both with one run of {WHERE}"
        )
    return FederatedTask(
        "femnist", train, test, CLASSES, tuple(str(n) for n in names),
        f"FEMNIST from LEAF's files, by writer: {len(names)} writers",
        {"split": "natural", "clients": len(names), "train_records": len(y_train),
         "test_records": len(y_test)},
    )  # fmt: skip
