"""Command-line options shared by several ``jfed`` commands."""

from __future__ import annotations

import argparse
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
