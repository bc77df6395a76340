"""The command line's arguments checked before JAX is imported or any device is touched.

Every number a flag takes has its allowed range here, named as the user typed the flag; a bad
value answers with one line (``jfed: error: expected --epsilon > 0 (finite), got
--epsilon=-1.0``) and exit status 2, in a fraction of a second, on every backend (an accelerator's
start-up log never precedes it). The library's own checks still guard the Python API.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from jfed import catalog
from jfed._validation import (
    check_int_range,
    check_nonnegative,
    check_open_unit,
    check_positive,
)

MAX_ROUNDS = 10**6
MAX_CLIENTS = 2**31 - 1
MAX_DIM = 100_000
MAX_SEED = 2**31 - 1
MAX_SEEDS = 10_000


def _int_range(low: int, high: int) -> Callable[[str, int], int]:
    return lambda flag, value: check_int_range(flag, value, low, high)


def _unit_interval(flag: str, value: float) -> float:
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"expected {flag} in [0, 1], got {flag}={value}")
    return value


# argparse destination -> the check of its value (skipped when the flag is absent or None)
CHECKS: dict[str, Callable] = {
    "epsilon": check_positive,
    "delta": check_open_unit,
    "rounds": _int_range(1, MAX_ROUNDS),
    "seed": _int_range(0, MAX_SEED),
    "seeds": _int_range(1, MAX_SEEDS),
    "clients": _int_range(1, MAX_CLIENTS),
    "dim": _int_range(1, MAX_DIM),
    "block_size": _int_range(1, MAX_CLIENTS),
    "chunk_size": _int_range(1, MAX_CLIENTS),
    "slice_size": _int_range(1, MAX_CLIENTS),
    "alpha": check_positive,
    "beta": check_nonnegative,
    "omega": check_nonnegative,
    "clip": check_positive,
    "adjacency_diameter": check_positive,
    "radius": check_positive,
    "ridge": check_nonnegative,
    "step_scale": check_positive,
    "learning_rate": check_positive,
    "silos": _int_range(1, 10**6),
    "mixing": _unit_interval,
    "data_seed": _int_range(0, MAX_SEED),
    "batch": _int_range(1, 10**7),
    "step_size": check_positive,
    "available": _int_range(0, 10**6),
    "scale_clients": _int_range(0, MAX_CLIENTS),
}


def flag_name(dest: str) -> str:
    """``block_size`` -> ``--block-size``."""
    return "--" + dest.replace("_", "-")


def parse_numbers(flag: str, text: str) -> list[float]:
    """A comma-separated list of numbers (``--epsilon 0.5,1,2``); empty items are refused."""
    items = text.split(",")
    if any(not item.strip() for item in items):
        raise ValueError(f"expected a comma-separated list of numbers for {flag}, got {text!r}")
    numbers = []
    for item in items:
        try:
            numbers.append(float(item))
        except ValueError:
            raise ValueError(f"expected a number in {flag}, got {item.strip()!r}") from None
    return numbers


def _dimension(args: argparse.Namespace) -> int | None:
    """d of the run's data, known without loading it (None when it is not)."""
    if getattr(args, "synthetic", False):
        return args.dim
    return catalog.REGRESSION_DATASETS.get(getattr(args, "dataset", None))


def _check_dataset(args: argparse.Namespace) -> None:
    dataset = getattr(args, "dataset", None)
    algorithm = getattr(args, "algorithm", None)
    if dataset is None or getattr(args, "synthetic", False) or algorithm is None:
        return
    silo = algorithm in catalog.SILO_ALGORITHMS
    known = catalog.SILO_DATASETS if silo else tuple(catalog.REGRESSION_DATASETS)
    if dataset not in known:
        raise ValueError(
            f"unknown dataset {dataset!r} for --dataset; expected one of {list(known)}"
        )


def check_arguments(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` naming the first flag whose value is outside its range."""
    command = args.command
    if command not in ("run", "sweep", "demo"):
        return  # `account` answers on the host (its checks need no device); `plot`, `datasets`
    for dest, check in CHECKS.items():
        value = getattr(args, dest, None)
        if value is None or (command == "sweep" and dest == "epsilon"):
            continue
        check(flag_name(dest), value)
    if command == "sweep":
        for epsilon in parse_numbers("--epsilon", args.epsilon):
            check_positive("--epsilon", epsilon)
    block, chunk = getattr(args, "block_size", None), getattr(args, "chunk_size", None)
    if block is not None and chunk is not None and block % chunk:
        raise ValueError(
            f"expected --block-size a positive multiple of --chunk-size={chunk}, "
            f"got --block-size={block}"
        )
    _check_dataset(args)
    directions = getattr(args, "directions", None)
    if directions is not None:
        dim = _dimension(args)
        if dim is None:
            check_int_range("--directions", directions, 1, MAX_DIM)
        elif not 1 <= directions <= dim:
            raise ValueError(
                f"expected --directions in [1, {dim}] (the data's dimension d), "
                f"got --directions={directions}"
            )
