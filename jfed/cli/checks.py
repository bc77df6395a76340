"""The command line's arguments checked before JAX is imported or any device is touched.

Every number a flag takes has its allowed range here, named as the user typed the flag; a bad
value answers with one line (``jfed: error: expected --epsilon in [1e-06, 1e+06], got
--epsilon=-1.0``) and exit status 2, in a fraction of a second, on every backend (an accelerator's
start-up log never precedes it). The library's own checks still guard the Python API.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
from collections.abc import Callable

from jfed._io import check_replaceable, descriptor_of
from jfed._validation import UsageError, check_int_range, check_open_unit, check_positive
from jfed.methods.fields import EPSILON, MAX_CLIENTS

MAX_SEEDS = 10_000
DEFAULT_EPSILONS = "0.1,0.3,1,3,10"  # a sweep's eps when --epsilon is not given


def check_epsilon(flag: str, value: float) -> float:
    """eps in [1e-6, 1e6]: below, no noise scale is representable; above, no guarantee remains."""
    return EPSILON.check(flag, value)


def _int_range(low: int, high: int) -> Callable[[str, int], int]:
    return lambda flag, value: check_int_range(flag, value, low, high)


# argparse destination -> the check of its value, for the flags that are not a method's
# configuration fields (those are declared with their ranges in jfed.methods.declared)
CHECKS: dict[str, Callable] = {
    "seeds": _int_range(1, MAX_SEEDS),
    "block_size": _int_range(1, MAX_CLIENTS),
    "chunk_size": _int_range(1, MAX_CLIENTS),
    "slice_size": _int_range(1, MAX_CLIENTS),
    "scale_clients": _int_range(0, MAX_CLIENTS),
    "extend_edges": _int_range(0, 10),
}


def within_range(config: type) -> Callable[[str, float], bool]:
    """Whether a value is inside the declared range of a field of ``config`` (true for names
    without one): used to extend a grid only where the value would be accepted."""
    from jfed.methods.fields import field_map

    declared = field_map(config)

    def allowed(name: str, value: float) -> bool:
        field = declared.get(name)
        return field is None or field.range is None or field.range.contains(value)

    return allowed


def flag_name(dest: str) -> str:
    """``block_size`` -> ``--block-size``."""
    return "--" + dest.replace("_", "-")


def parse_numbers(flag: str, text: str) -> list[float]:
    """A comma-separated list of numbers (``--epsilon 0.5,1,2``); empty items are refused."""
    items = text.split(",")
    if any(not item.strip() for item in items):
        raise UsageError(f"expected a comma-separated list of numbers for {flag}, got {text!r}")
    numbers = []
    for item in items:
        try:
            numbers.append(float(item))
        except ValueError:
            raise UsageError(f"expected a number in {flag}, got {item.strip()!r}") from None
    return numbers


def _nearest_existing(path: str) -> str:
    folder = os.path.abspath(path)
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    return folder


REPEATABLE_FLAGS = ("--grid", "--set")


def check_no_repeated_flag(argv: list[str]) -> None:
    """A flag given twice is refused (argparse would keep the last one silently); ``--grid`` and
    ``--set`` add up, and what follows ``--`` is a child command, checked on its own."""
    seen = set()
    for token in argv:
        if token == "--":
            return
        if not token.startswith("--"):
            continue
        name = token.split("=", 1)[0]
        if name in seen and name not in REPEATABLE_FLAGS:
            raise UsageError(f"{name} is given twice: give it once")
        seen.add(name)


def check_output_file(flag: str, path: str) -> None:
    """``path`` can be written as a file: not a folder, not under a file, in a writable place,
    and not a device, FIFO, socket or link (jfed replaces none of them); ``-``, ``/dev/stdout``
    and other open descriptors are written through (:func:`jfed._io.descriptor_of`). Missing
    parent folders are allowed (they are created)."""
    if not path.strip():
        raise UsageError(f"expected {flag} PATH (or - for standard output), got an empty path")
    if descriptor_of(path) is not None:
        return
    if os.path.isdir(path):
        raise UsageError(f"expected {flag} to name a file, got the folder {path}")
    check_replaceable(path, flag)
    _check_writable_under(flag, path, os.path.dirname(os.path.abspath(path)))


def check_output_folder(flag: str, path: str) -> None:
    """``path`` is, or can be created as, a writable folder."""
    if not path.strip():
        raise UsageError(f"expected {flag} FOLDER, got an empty path")
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"expected {flag} to name a folder, got the file {path}")
    _check_writable_under(flag, path, path)


def _check_writable_under(flag: str, path: str, folder: str) -> None:
    existing = _nearest_existing(folder)
    if not os.path.isdir(existing):
        raise UsageError(f"cannot write {flag} {path}: {existing} is a file, not a folder")
    try:  # a real write: permission bits do not tell (root, read-only mounts)
        with tempfile.TemporaryFile(dir=existing, prefix=".jfed-write-test-"):
            pass
    except OSError as error:
        reason = error.strerror or str(error)
        message = f"cannot write {flag} {path}: {existing} is not writable ({reason})"
        raise UsageError(message) from None


# dp-accounting's PLD grows with the composed steps (10^6 Poisson steps took 2.3 s here; 10^12
# would need terabytes) and with 1/noise: calibrating eps = 100 took 44 s, eps = 1000 minutes.
MAX_PLD_STEPS = 10**6
MAX_RDP_STEPS = 10**9
MAX_NUMERICAL_EPSILON = 100.0
NUMERICAL_ACCOUNTANTS = ("pld", "rdp", "exact")
# The silos' exact calibration runs one PLD calibration per distinct silo size: one took 3.4 s at
# eps = 10, 7 s at 30 and 13 s at 100 here, so eps = 100 over 25 silo sizes took 457 s. Its PLD
# is discretised at 1e-3 (jfed.algorithms.silo_privacy.PLD_DISCRETIZATION) and answers eps = 0
# below that, which no noise can be interpolated from.
MAX_EXACT_EPSILON = 30.0
MIN_EXACT_EPSILON = 1e-3


def _check_account(args: argparse.Namespace) -> None:
    if getattr(args, "delta", None) is not None:
        check_open_unit("--delta", args.delta)
    for dest in ("noise_multiplier", "sensitivity", "eta", "lipschitz", "radius", "sigma"):
        if getattr(args, dest, None) is not None:
            check_positive(flag_name(dest), getattr(args, dest))
    if getattr(args, "epsilon0", None) is not None:
        check_positive("--epsilon0", args.epsilon0)
    if getattr(args, "delta0", None) is not None and not 0.0 <= args.delta0 < 1.0:
        raise UsageError(f"expected --delta0 in [0, 1), got --delta0={args.delta0:g}")
    if getattr(args, "sampling_rate", None) is not None:
        rate = args.sampling_rate
        if not 0.0 < rate <= 1.0:
            raise UsageError(f"expected --sampling-rate in (0, 1], got --sampling-rate={rate:g}")
    for dest in ("n", "dataset_size"):
        if getattr(args, dest, None) is not None:
            check_int_range(flag_name(dest), getattr(args, dest), 1, 10**12)
    if getattr(args, "steps", None) is not None:
        limit = MAX_PLD_STEPS if args.accountant == "pld" else MAX_RDP_STEPS
        if args.accountant == "pld" and isinstance(args.steps, int) and args.steps > limit:
            raise UsageError(
                f"expected --steps in [1, {limit}] with --accountant pld (its privacy loss "
                f"distribution grows with the composed steps: minutes and gigabytes beyond; "
                f"--accountant rdp takes up to {MAX_RDP_STEPS:.0e}), got --steps={args.steps}"
            )
        check_int_range("--steps", args.steps, 1, limit)
    if args.question == "calibrate":
        for epsilon in parse_numbers("--epsilon", args.epsilon):
            check_epsilon("--epsilon", epsilon)
    elif getattr(args, "epsilon", None) is not None:
        check_epsilon("--epsilon", args.epsilon)


def check_numerical_accountant(config, epsilons: list[float]) -> None:
    """Numerical (PLD / RDP) calibrations bisect the noise; refuse eps where that takes minutes,
    and, for the silos' exact calibration, eps below what its PLD resolves. The classic Gaussian
    bound holds only below eps = 1 per release (its R releases at eps / R each)."""
    accountant = getattr(config, "accountant", None)
    if accountant == "classic" and epsilons:
        rounds = getattr(config, "rounds", 1)
        if max(epsilons) / rounds >= 1.0:
            per = f" / --rounds={rounds}" if rounds > 1 else ""
            raise UsageError(
                f"expected --epsilon{' / --rounds' if rounds > 1 else ''} < 1 with --accountant "
                f"classic (the classic Gaussian bound holds for eps < 1 per release; zcdp or "
                f"analytic take any eps), got --epsilon={max(epsilons):g}{per}"
            )
    flag = "--accountant"
    if getattr(config, "calibration", None) == "exact":
        accountant, flag = "exact", "--calibration"
    if accountant not in NUMERICAL_ACCOUNTANTS or not epsilons:
        return
    largest, smallest = max(epsilons), min(epsilons)
    if accountant == "exact" and smallest < MIN_EXACT_EPSILON:
        raise UsageError(
            f"expected --epsilon >= {MIN_EXACT_EPSILON:g} with --calibration exact (its PLD is "
            f"discretised at {MIN_EXACT_EPSILON:g} and cannot resolve a smaller eps; "
            f"--calibration theorem can), got --epsilon={smallest:g}"
        )
    if accountant == "exact" and largest > MAX_EXACT_EPSILON:
        raise UsageError(
            f"expected --epsilon <= {MAX_EXACT_EPSILON:g} with --calibration exact (one PLD "
            "calibration per distinct silo size takes minutes beyond; --calibration theorem "
            f"answers at once), got --epsilon={largest:g}"
        )
    if largest > MAX_NUMERICAL_EPSILON:
        raise UsageError(
            f"expected --epsilon <= {MAX_NUMERICAL_EPSILON:g} with {flag} {accountant} "
            f"(its numerical calibration takes minutes beyond), got --epsilon={largest:g}"
        )


def _check_account_calibration(args: argparse.Namespace) -> None:
    if args.question != "calibrate" or args.accountant not in NUMERICAL_ACCOUNTANTS:
        return  # computing eps of a given noise is fast whatever the answer
    largest = max(parse_numbers("--epsilon", args.epsilon))
    if largest > MAX_NUMERICAL_EPSILON:
        raise UsageError(
            f"expected --epsilon <= {MAX_NUMERICAL_EPSILON:g} with --accountant {args.accountant} "
            f"(its numerical calibration takes minutes beyond), got --epsilon={largest:g}"
        )


def _host_excess(cost) -> str | None:
    """What a host computation exceeds (the host's memory, an hour), in words, or ``None``."""
    from jfed.methods.cost import Budget

    return Budget(memory=2**62).excess(cost)


def _refuse_costly(what: str, cost: Callable[[int], object], name: str, value: int) -> None:
    """Refuse a host computation beyond the machine (``cost(value)``), naming ``--name`` and its
    largest value that fits."""
    from jfed.methods.cost import largest_integer

    excess = _host_excess(cost(value))
    if excess is None:
        return
    largest = largest_integer(lambda v: _host_excess(cost(v)) is None, 1, value - 1)
    flag = flag_name(name)
    where = f"the largest {flag} that fits is {largest}" if largest else f"lower {flag}"
    raise UsageError(f"{what} needs {excess}: {where}")


def _check_account_cost(args: argparse.Namespace) -> None:
    """``jfed account``'s PLD compositions, estimated before any is computed
    (:func:`jfed.methods.cost.pld_cost`): refused beyond the host's memory or an hour."""
    from jfed.methods.cost import largest_integer, pld_calibration_cost, pld_cost

    question = args.question
    if question in ("gaussian", "calibrate") and args.accountant == "pld":
        rate, replace_one = args.sampling_rate, args.neighboring == "replace-one"
        if question == "gaussian":
            noise = args.noise_multiplier
            what = f"--steps={args.steps} of noise multiplier {noise:g} with --accountant pld"
            _refuse_costly(
                what, lambda steps: pld_cost(noise, steps, rate, replace_one=replace_one),
                "steps", args.steps,
            )  # fmt: skip
        else:
            epsilon = max(parse_numbers("--epsilon", args.epsilon))
            _refuse_costly(
                f"calibrating --steps={args.steps} with --accountant pld",
                lambda steps: pld_calibration_cost(
                    steps, rate, epsilon, args.delta, replace_one=replace_one
                ),
                "steps", args.steps,
            )  # fmt: skip
    if question == "last-iterate":
        # the Poisson comparison composes T = n / m steps by PLD (replace-one), twice at most
        batch = max(1, round(args.sampling_rate * args.n))
        steps = -(-args.n // batch)
        multiplier = math.sqrt(batch) * args.sigma / (2.0 * args.lipschitz)

        def cost(count: int):
            return pld_cost(multiplier, count, args.sampling_rate, replace_one=True, evaluations=2)

        excess = _host_excess(cost(steps))
        if excess is not None:
            largest = largest_integer(lambda count: _host_excess(cost(count)) is None, 1, steps - 1)
            rate = f"at least {1 / largest:.3g}" if largest else "a larger one"
            raise UsageError(
                f"--n={args.n} at --sampling-rate={args.sampling_rate:g} composes n / m = "
                f"{steps} steps by PLD (the Poisson comparison), which needs {excess}: give "
                f"--sampling-rate {rate}"
            )


def _check_account_flags(args: argparse.Namespace) -> None:
    """``jfed account``'s flags that only apply with others: refused where they would do
    nothing (a sampling scheme without sampling, a data set size without sampling that uses
    it)."""
    sampling = getattr(args, "sampling", None)
    if sampling is not None and args.sampling_rate >= 1.0:
        raise UsageError(
            "--sampling applies only with --sampling-rate below 1 (at 1 every unit takes part "
            "in every step)"
        )
    size = getattr(args, "dataset_size", None)
    if size is not None and sampling != "without-replacement":
        raise UsageError(
            "--dataset-size applies only with --sampling without-replacement (Poisson sampling "
            "does not depend on it)"
        )
    if sampling == "without-replacement" and size is None:
        raise UsageError(
            "--sampling without-replacement needs --dataset-size n (the batch is q n records)"
        )


def check_arguments(args: argparse.Namespace) -> None:
    """Raise ``UsageError`` naming the first flag outside its range, among the flags that are not
    a method's fields (output paths, the engine plan, the sweep's grid sizes, ``jfed account``)."""
    command = args.command
    if getattr(args, "json", None) is not None:
        check_output_file("--json", args.json)
    cache = getattr(args, "compilation_cache", None)
    if cache is not None and not cache.strip():
        raise UsageError("expected --compilation-cache DIR or off, got an empty value")
    if command == "methods" and args.update_readme is not None:
        if not args.update_readme.strip():
            raise UsageError(
                "expected --update-readme PATH (the README to rewrite), got an empty path"
            )
    if command in ("sweep", "demo"):
        check_output_folder("--out", args.out)
    if command == "account":
        _check_account_flags(args)
        _check_account(args)
        _check_account_calibration(args)
        _check_account_cost(args)
    for dest, check in CHECKS.items():
        value = getattr(args, dest, None)
        if value is not None:
            check(flag_name(dest), value)
    block, chunk = getattr(args, "block_size", None), getattr(args, "chunk_size", None)
    if block is not None and chunk is None:
        raise UsageError(
            "expected --block-size a positive multiple of --chunk-size: give --chunk-size too "
            "(its default depends on the backend)"
        )
    if block is not None and chunk is not None and block % chunk:
        raise UsageError(
            f"expected --block-size a positive multiple of --chunk-size={chunk}, "
            f"got --block-size={block}"
        )
    _check_client_state(getattr(args, "client_state", None),
                        getattr(args, "client_state_dir", None))  # fmt: skip


def _check_client_state(place: str | None, folder: str | None) -> None:
    """A table on disk names its folder (which must not be a file); a folder only for a table
    on disk."""
    if place == "disk" and folder is None:
        raise UsageError("--client-state disk keeps the table in .npy files: give "
                         "--client-state-dir DIR")  # fmt: skip
    if folder is not None and place != "disk":
        raise UsageError(
            "--client-state-dir is the folder of a table on disk: give --client-state disk "
            f"(got --client-state {place or 'device'})"
        )
    if folder is not None and os.path.exists(folder) and not os.path.isdir(folder):
        raise UsageError(f"--client-state-dir {folder} is a file, not a folder")
    if folder is not None:
        # the run creates the folder and its files from inside the compiled program (a host
        # callback), where a refusal is no longer one line: checked here, before any work
        check_output_folder("--client-state-dir", folder)


def check_epsilons(text: str) -> list[float]:
    """The eps list of a sweep: numbers, each in range, distinct."""
    epsilons = parse_numbers("--epsilon", text)
    for epsilon in epsilons:
        check_epsilon("--epsilon", epsilon)
    if len(set(epsilons)) != len(epsilons):
        raise UsageError(f"expected distinct values in --epsilon, got {text!r}")
    return epsilons
