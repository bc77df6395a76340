"""Input checks that raise ``ValueError`` naming the parameter and its allowed range.

Host-side only: these run on Python floats and numpy arrays before anything is traced, so a bad
argument fails with a one-line message instead of a NaN deep inside a compiled program.
"""

from __future__ import annotations

import math

import numpy as np


def check_positive(name: str, value: float) -> float:
    """Return ``value`` as a float if it is finite and > 0, else raise ``ValueError``."""
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"expected {name} > 0 (finite), got {name}={value}")
    return value


def check_nonnegative(name: str, value: float) -> float:
    """Return ``value`` as a float if it is finite and >= 0, else raise ``ValueError``."""
    value = float(value)
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"expected {name} >= 0 (finite), got {name}={value}")
    return value


def check_open_unit(name: str, value: float) -> float:
    """Return ``value`` as a float if it lies in the open interval (0, 1), else raise."""
    value = float(value)
    if not (0.0 < value < 1.0):
        raise ValueError(f"expected {name} in (0, 1), got {name}={value}")
    return value


def check_int_range(name: str, value: int, low: int, high: int) -> int:
    """Return ``value`` if it is an integer in [low, high], else raise ``ValueError``."""
    if isinstance(value, bool) or int(value) != value:
        raise ValueError(f"expected integer {name} in [{low}, {high}], got {name}={value}")
    value = int(value)
    if not (low <= value <= high):
        raise ValueError(f"expected {name} in [{low}, {high}], got {name}={value}")
    return value


def check_finite_array(name: str, array: np.ndarray) -> np.ndarray:
    """Return ``array`` if every entry is finite, else raise naming how many entries are not."""
    array = np.asarray(array)
    bad = ~np.isfinite(array)
    if bad.any():
        raise ValueError(
            f"expected finite values in {name}, found {int(bad.sum())} NaN or inf entries "
            f"out of {array.size}"
        )
    return array


def check_orthonormal(name: str, directions: np.ndarray, atol: float = 1e-5) -> np.ndarray:
    """Return ``directions: f[d, k]`` if ``directions.T @ directions == I_k``, else raise."""
    directions = check_finite_array(name, np.asarray(directions, dtype=np.float64))
    if directions.ndim != 2:
        raise ValueError(f"expected {name} of shape [d, k], got shape {directions.shape}")
    gram = directions.T @ directions
    error = float(np.abs(gram - np.eye(directions.shape[1])).max())
    if error > atol:
        raise ValueError(
            f"expected orthonormal columns in {name} (V^T V = I_k within {atol}), "
            f"max deviation {error:.3g}"
        )
    return directions
