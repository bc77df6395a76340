"""Input checks that raise :class:`UsageError` naming the parameter and its allowed range.

Host-side only: these run on Python floats and numpy arrays before anything is traced, so a bad
argument fails with a one-line message instead of a NaN deep inside a compiled program.

``UsageError`` is jfed's own type for bad input (a subclass of ``ValueError``, so code that
catches ``ValueError`` still catches it). The ``jfed`` command answers it with one line and exit
status 2; any other exception is a fault of jfed, reported as such (exit 1).
"""

from __future__ import annotations

import math

import numpy as np


class UsageError(ValueError):
    """Bad input: a value outside its allowed range, an unknown name, a combination that does not
    apply. Its message is one line naming the parameter (or flag) and what is allowed."""


class ConfigurationError(UsageError):
    """A configuration its method refuses: a field outside its declared range, given where it
    does not apply, or a combination the method cannot run. The command line raises it where a
    configuration is built from the flags and checked (:func:`jfed.cli.generate.build_config`,
    a sweep's grid points), whatever check refused it."""


def check_positive(name: str, value: float) -> float:
    """Return ``value`` as a float if it is finite and > 0, else raise :class:`UsageError`."""
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"expected {name} > 0 (finite), got {name}={value}")
    return value


def check_nonnegative(name: str, value: float) -> float:
    """Return ``value`` as a float if it is finite and >= 0, else raise :class:`UsageError`."""
    value = float(value)
    if not (math.isfinite(value) and value >= 0):
        raise UsageError(f"expected {name} >= 0 (finite), got {name}={value}")
    return value


def check_open_unit(name: str, value: float) -> float:
    """Return ``value`` as a float if it lies in the open interval (0, 1), else raise."""
    value = float(value)
    if not (0.0 < value < 1.0):
        raise UsageError(f"expected {name} in (0, 1), got {name}={value}")
    return value


def check_int_range(name: str, value: int, low: int, high: int) -> int:
    """Return ``value`` if it is an integer in [low, high], else raise :class:`UsageError`."""
    if isinstance(value, bool) or int(value) != value:
        raise UsageError(f"expected integer {name} in [{low}, {high}], got {name}={value}")
    value = int(value)
    if not (low <= value <= high):
        raise UsageError(f"expected {name} in [{low}, {high}], got {name}={value}")
    return value


def check_finite_array(name: str, array: np.ndarray) -> np.ndarray:
    """Return ``array`` if every entry is finite, else raise naming how many entries are not."""
    array = np.asarray(array)
    bad = ~np.isfinite(array)
    if bad.any():
        raise UsageError(
            f"expected finite values in {name}, found {int(bad.sum())} NaN or inf entries "
            f"out of {array.size}"
        )
    return array


def check_orthonormal(name: str, directions: np.ndarray, atol: float = 1e-5) -> np.ndarray:
    """Return ``directions: f[d, k]`` if ``directions.T @ directions == I_k``, else raise."""
    directions = check_finite_array(name, np.asarray(directions, dtype=np.float64))
    if directions.ndim != 2:
        raise UsageError(f"expected {name} of shape [d, k], got shape {directions.shape}")
    gram = directions.T @ directions
    error = float(np.abs(gram - np.eye(directions.shape[1])).max())
    if error > atol:
        raise UsageError(
            f"expected orthonormal columns in {name} (V^T V = I_k within {atol}), "
            f"max deviation {error:.3g}"
        )
    return directions
