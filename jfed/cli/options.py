"""Command-line options shared by several ``jfed`` commands."""

from __future__ import annotations

import argparse
import math
import sys


def progress_flag(group) -> None:
    """``--progress/--no-progress``: a bar over rounds (default: on when stderr is a terminal)."""
    group.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=None,
        help="progress bar over rounds, from inside the compiled scan (default: on a terminal)",
    )  # fmt: skip


def show_progress(args: argparse.Namespace) -> bool:
    return sys.stderr.isatty() if args.progress is None else args.progress


def cache_flag(group) -> None:
    """``--compilation-cache DIR|off`` (see :mod:`jfed.engine.cache`)."""
    group.add_argument(
        "--compilation-cache", metavar="DIR|off", default=None,
        help="folder of compiled programs kept across processes (default: "
        "$JFED_COMPILATION_CACHE, else ~/.cache/jfed/xla); 'off' disables",
    )  # fmt: skip


def certification_warning(record: dict) -> str | None:
    """What to warn about a run record or sweep row whose certified eps is not its target
    (``epsilon`` vs ``epsilon_certified``), or that no accountant certifies; ``None`` when the
    target is certified, and for non-private runs (they claim nothing)."""
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
