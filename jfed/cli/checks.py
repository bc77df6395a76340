"""The command line's arguments checked before JAX is imported or any device is touched.

Every number a flag takes has its allowed range here, named as the user typed the flag; a bad
value answers with one line (``jfed: error: expected --epsilon in [1e-06, 1e+06], got
--epsilon=-1.0``) and exit status 2, in a fraction of a second, on every backend (an accelerator's
start-up log never precedes it). The library's own checks still guard the Python API.
"""

from __future__ import annotations

import argparse
import os
import tempfile
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
MIN_EPSILON, MAX_EPSILON = 1e-6, 1e6


def check_epsilon(flag: str, value: float) -> float:
    """eps in [1e-6, 1e6]: below, no noise scale is representable; above, no guarantee remains."""
    value = float(value)
    if not MIN_EPSILON <= value <= MAX_EPSILON:  # also refuses nan
        raise ValueError(
            f"expected {flag} in [{MIN_EPSILON:g}, {MAX_EPSILON:g}], got {flag}={value}"
        )
    return value


def _int_range(low: int, high: int) -> Callable[[str, int], int]:
    return lambda flag, value: check_int_range(flag, value, low, high)


def _unit_interval(flag: str, value: float) -> float:
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"expected {flag} in [0, 1], got {flag}={value}")
    return value


# argparse destination -> the check of its value (skipped when the flag is absent or None)
CHECKS: dict[str, Callable] = {
    "epsilon": check_epsilon,
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
    "ridge_scale": check_positive,
    "step_scale": check_positive,
    "learning_rate": check_positive,
    "silos": _int_range(1, 10**6),
    "mixing": _unit_interval,
    "data_seed": _int_range(0, MAX_SEED),
    "batch": _int_range(1, 10**7),
    "step_size": check_positive,
    "available": _int_range(0, 10**6),
    "scale_clients": _int_range(0, MAX_CLIENTS),
    "extend_edges": _int_range(0, 10),
}


def within_range(name: str, value: float) -> bool:
    """Whether ``value`` is inside the declared range of the flag ``name`` (true for names
    without one): used to extend a grid only where the value would be accepted."""
    if name not in CHECKS:
        return True
    try:
        CHECKS[name](name, value)
    except ValueError:
        return False
    return True


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


def _nearest_existing(path: str) -> str:
    folder = os.path.abspath(path)
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    return folder


def check_output_file(flag: str, path: str) -> None:
    """``path`` (or ``-`` for stdout) can be written as a file: not a folder, not under a file,
    in a writable place. Missing parent folders are allowed (they are created)."""
    if path == "-":
        return
    if os.path.isdir(path):
        raise ValueError(f"expected {flag} to name a file, got the folder {path}")
    _check_writable_under(flag, path, os.path.dirname(os.path.abspath(path)))


def check_output_folder(flag: str, path: str) -> None:
    """``path`` is, or can be created as, a writable folder."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"expected {flag} to name a folder, got the file {path}")
    _check_writable_under(flag, path, path)


def _check_writable_under(flag: str, path: str, folder: str) -> None:
    existing = _nearest_existing(folder)
    if not os.path.isdir(existing):
        raise ValueError(f"cannot write {flag} {path}: {existing} is a file, not a folder")
    try:  # a real write: permission bits do not tell (root, read-only mounts)
        with tempfile.TemporaryFile(dir=existing, prefix=".jfed-write-test-"):
            pass
    except OSError as error:
        reason = error.strerror or str(error)
        message = f"cannot write {flag} {path}: {existing} is not writable ({reason})"
        raise ValueError(message) from None


def _dimension(args: argparse.Namespace) -> int | None:
    """d of the run's data, known without loading it (None when it is not)."""
    if getattr(args, "synthetic", False):
        return args.dim or catalog.SYNTHETIC_DIM
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


# dp-accounting's PLD grows with the composed steps (10^6 Poisson steps took 2.3 s here; 10^12
# would need terabytes) and with 1/noise: calibrating eps = 100 took 44 s, eps = 1000 minutes.
MAX_PLD_STEPS = 10**6
MAX_RDP_STEPS = 10**9
MAX_NUMERICAL_EPSILON = 100.0
NUMERICAL_ACCOUNTANTS = ("pld", "rdp", "exact")


def _check_account(args: argparse.Namespace) -> None:
    for dest in ("noise_multiplier", "sensitivity", "eta", "lipschitz", "radius", "sigma"):
        if getattr(args, dest, None) is not None:
            check_positive(flag_name(dest), getattr(args, dest))
    if getattr(args, "epsilon0", None) is not None:
        check_positive("--epsilon0", args.epsilon0)
    if getattr(args, "delta0", None) is not None and not 0.0 <= args.delta0 < 1.0:
        raise ValueError(f"expected --delta0 in [0, 1), got --delta0={args.delta0:g}")
    if getattr(args, "sampling_rate", None) is not None:
        rate = args.sampling_rate
        if not 0.0 < rate <= 1.0:
            raise ValueError(f"expected --sampling-rate in (0, 1], got --sampling-rate={rate:g}")
    for dest in ("n", "dataset_size"):
        if getattr(args, dest, None) is not None:
            check_int_range(flag_name(dest), getattr(args, dest), 1, 10**12)
    if getattr(args, "steps", None) is not None:
        limit = MAX_PLD_STEPS if args.accountant == "pld" else MAX_RDP_STEPS
        check_int_range("--steps", args.steps, 1, limit)
    if args.question == "calibrate":
        for epsilon in parse_numbers("--epsilon", args.epsilon):
            check_epsilon("--epsilon", epsilon)
    elif getattr(args, "epsilon", None) is not None:
        check_epsilon("--epsilon", args.epsilon)


def _check_numerical_accountant(args: argparse.Namespace) -> None:
    """Numerical (PLD / RDP) calibrations bisect the noise; refuse eps where that takes minutes."""
    accountant = getattr(args, "accountant", None)
    algorithm = getattr(args, "algorithm", None)
    if algorithm in catalog.SILO_ALGORITHMS:
        if algorithm not in catalog.PLD_CALIBRATED_SILO_ALGORITHMS:
            return  # non-private, or calibrated in closed form (shuffle)
        accountant = accountant or "exact"
    if accountant not in NUMERICAL_ACCOUNTANTS:
        return
    if args.command == "account" and args.question != "calibrate":
        return  # computing eps of a given noise is fast whatever the answer
    text = args.epsilon if isinstance(args.epsilon, str) else str(args.epsilon)
    largest = max(parse_numbers("--epsilon", text))
    if largest > MAX_NUMERICAL_EPSILON:
        raise ValueError(
            f"expected --epsilon <= {MAX_NUMERICAL_EPSILON:g} with --accountant {accountant} "
            f"(its numerical calibration takes minutes beyond), got --epsilon={largest:g}"
        )


def _check_applicable(args: argparse.Namespace) -> None:
    """Refuse flags that the chosen mode would ignore."""
    given = {dest for dest, value in vars(args).items() if value not in (None, False)}
    rules = [
        (
            ("clients", "dim"),
            not getattr(args, "synthetic", True),
            "only with --synthetic",
        ),
        (("psd", "ridge", "ridge_scale"), getattr(args, "estimator", "one-shot") != "one-shot",
         "only to --estimator one-shot"),
        (("ridge_scale",), getattr(args, "ridge", None) is not None, "only without --ridge"),
        (("step_scale",), getattr(args, "estimator", "iterative") != "iterative", "only to "
         "--estimator iterative"),
        (
            ("silos",),
            getattr(args, "algorithm", "") in catalog.SILO_ALGORITHMS
            and str(args.dataset).startswith("digits"),
            "only to the -sorted and synthetic silo data sets (digits fixes its silos)",
        ),
        (
            ("available",),
            getattr(args, "availability", "fixed") == "all",
            "only with --availability fixed or bernoulli",
        ),
        (
            ("multistage", "ridge"),
            getattr(args, "algorithm", "") in catalog.SILO_ALGORITHMS
            and args.algorithm != "accel-mbsgd",
            "only to accel-mbsgd",
        ),
    ]  # fmt: skip
    for dests, refused, where in rules:
        for dest in dests:
            if refused and dest in given:
                raise ValueError(f"{flag_name(dest)} applies {where}")


def check_arguments(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` naming the first flag whose value is outside its range."""
    command = args.command
    if getattr(args, "json", None):
        check_output_file("--json", args.json)
    if command in ("sweep", "demo"):
        check_output_folder("--out", args.out)
    if command == "account":
        _check_account(args)
    _check_numerical_accountant(args)
    if command not in ("run", "sweep", "demo"):
        return
    for dest, check in CHECKS.items():
        value = getattr(args, dest, None)
        if value is None or (command == "sweep" and dest == "epsilon"):
            continue
        check(flag_name(dest), value)
    if command == "sweep":
        epsilons = parse_numbers("--epsilon", args.epsilon)
        for epsilon in epsilons:
            check_epsilon("--epsilon", epsilon)
        if len(set(epsilons)) != len(epsilons):
            raise ValueError(f"expected distinct values in --epsilon, got {args.epsilon!r}")
    if command == "run":
        _check_applicable(args)
    if command == "sweep" and args.accountant is not None:
        silo = args.algorithm in catalog.SILO_ALGORITHMS
        known = catalog.SILO_CALIBRATIONS if silo else catalog.ROUNDS_ACCOUNTANTS
        if args.accountant not in known:
            raise ValueError(
                f"unknown --accountant {args.accountant!r} for {args.algorithm}; expected one "
                f"of {list(known)}"
            )
    block, chunk = getattr(args, "block_size", None), getattr(args, "chunk_size", None)
    if block is not None and chunk is None:
        raise ValueError(
            "expected --block-size a positive multiple of --chunk-size: give --chunk-size too "
            "(its default depends on the backend)"
        )
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
