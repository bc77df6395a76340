"""Command-line options shared by several ``jfed`` commands."""

from __future__ import annotations

import argparse
import math
from typing import Any


def progress_flag(group) -> None:
    """``--progress/--no-progress`` and ``--quiet``: progress over rounds (and a sweep's runs)
    on stderr: a bar on a terminal, else a line at least every 30 s."""
    group.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=None,
        help="progress over rounds, from inside the compiled scan: a bar on a terminal, else "
        "one line at least every 30 s (round, rounds/s, eta) (default: on)",
    )  # fmt: skip
    group.add_argument(
        "--quiet", action="store_true",
        help="no progress on stderr (neither bar nor lines); errors and warnings still show",
    )  # fmt: skip


def show_progress(args: argparse.Namespace) -> bool:
    """Whether the command reports progress (:mod:`jfed.engine.progress` picks a bar or lines
    by whether stderr is a terminal): off with ``--quiet`` or ``--no-progress``."""
    if getattr(args, "quiet", False):
        return False
    return True if args.progress is None else args.progress


def cache_flag(group) -> None:
    """``--compilation-cache DIR|off`` (see :mod:`jfed.engine.cache`)."""
    group.add_argument(
        "--compilation-cache", metavar="DIR|off", default=None,
        help="folder of compiled programs kept across processes (default: "
        "$JFED_COMPILATION_CACHE, else ~/.cache/jfed/xla); 'off' disables",
    )  # fmt: skip


def engine_flags(parser: argparse.ArgumentParser, declared: Any = None) -> None:
    """The engine plan (not part of a configuration: results do not depend on it); the places
    of a per-client state table that method ``declared`` can run with
    (:func:`client_state_places`)."""
    places = client_state_places(declared)
    group = parser.add_argument_group("engine")
    group.add_argument(
        "--block-size", type=int, default=None,
        help="clients per streaming step (default: 65536 on CPU, 1048576 on GPU / TPU)",
    )  # fmt: skip
    group.add_argument(
        "--chunk-size", type=int, default=None,
        help="clients vmapped at once (default: 4096 on CPU, 262144 on GPU / TPU)",
    )  # fmt: skip
    help_text = (
        "where a per-client state table lives (methods with per-client state: SCAFFOLD, "
        "Ditto): device (default), host memory, or disk (.npy files in --client-state-dir); "
        "off the device, runs go one at a time"
    )
    if places == ("device",):
        help_text = (
            "where a per-client state table lives: on the device only for this method (its "
            "outputs read the table inside the compiled run)"
        )
    group.add_argument(
        "--client-state", choices=places, default=None, help=help_text
    )  # fmt: skip
    group.add_argument(
        "--client-state-dir", metavar="DIR", default=None,
        help="the folder of a table on disk (--client-state disk): one .npy file per state "
        "leaf, rewritten by every run",
    )  # fmt: skip


CLIENT_STATE_PLACES = ("device", "host", "disk")
"""``--client-state``'s choices (:mod:`jfed.engine.client_state`)."""


def client_state_places(declared: Any) -> tuple[str, ...]:
    """The ``--client-state`` choices a method offers: its configuration's
    ``client_state_places`` (Ditto's outputs read its table inside the compiled run, so it
    declares ``("device",)``), else all of :data:`CLIENT_STATE_PLACES`."""
    config = getattr(declared, "config", None)
    return tuple(getattr(config, "client_state_places", CLIENT_STATE_PLACES))


def plan_of(args: argparse.Namespace):
    """The engine plan of ``--block-size`` / ``--chunk-size`` / ``--client-state``; ``None`` when
    none is given (the method's default plan, sized for the backend)."""
    from jfed.engine import ExecutionPlan, HostTable

    place = getattr(args, "client_state", None)
    if args.block_size is None and args.chunk_size is None and place in (None, "device"):
        return None
    default = ExecutionPlan.for_backend()
    store = None
    if place == "host":
        store = HostTable()
    elif place == "disk":
        store = HostTable(args.client_state_dir)
    return ExecutionPlan(
        block_size=args.block_size or default.block_size,
        chunk_size=args.chunk_size or default.chunk_size,
        mesh=default.mesh,
        client_state=store,
    )


def certification_warning(record: dict) -> str | None:
    """What to warn about a run record or sweep row whose certified eps is not its target
    (``epsilon`` vs ``epsilon_certified``), or that no accountant certifies (a refused
    certificate says why); ``None`` when the target is certified, and for non-private runs
    (they claim nothing)."""
    refused = record.get("certificate_refused")
    if refused:  # the program that ran is not the one the ledger composed: no eps at all
        return f"no privacy certificate: {refused}"
    target = record.get("epsilon")
    certified = record.get("epsilon_certified", target)
    if target is None or math.isinf(float(target)):
        return None
    accountant = record.get("accountant")
    if certified is None:
        reference = record.get("exact_epsilon")
        note = f" (PLD with Poisson sampling gives its noise eps = {reference:.4g})"
        return (
            f"eps = {target:g} is the claim of the {accountant} calibration; no accountant here "
            f"certifies this run{note if reference else ''}"
        )
    if math.isinf(float(certified)) or abs(float(certified) - target) <= 1e-2 * target:
        return None
    return (
        f"the run certifies eps = {float(certified):.4g} [{accountant}], not the target {target:g}"
    )
