"""``jfed launch --processes N -- run ...``: one command as N cooperating local processes.

Each process runs ``python -m jfed <command>`` with ``JFED_COORDINATOR``, ``JFED_NUM_PROCESSES``
and ``JFED_PROCESS_ID`` set, so it joins JAX's distributed runtime before any work
(:mod:`jfed.engine.distributed`); the client axis is then sharded over every device of every
process, and process 0 alone prints and writes. On a cluster the same program runs under the
usual launcher instead (see the README: ``JFED_DISTRIBUTED=1 srun jfed run ...``).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

MAX_PROCESSES = 64


def add_parser(commands) -> None:
    launch = commands.add_parser(
        "launch", help="run a jfed command as N cooperating local processes (jax.distributed)"
    )
    launch.add_argument(
        "--processes", type=int, default=2,
        help=f"number of processes (default: 2; at most {MAX_PROCESSES})",
    )  # fmt: skip
    launch.add_argument(
        "command_line", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
        help="the jfed command to run, after --, e.g. -- run modulated",
    )  # fmt: skip


def child_command(args: argparse.Namespace) -> list[str]:
    """The command after ``--``, refused (``ValueError``) unless it is a run or a sweep."""
    rest = list(args.command_line)
    if rest and rest[0] == "--":
        rest = rest[1:]
    if not rest or rest[0] not in ("run", "sweep"):
        raise ValueError("expected `jfed launch --processes N -- run ...` or `-- sweep ...`")
    if not 1 <= args.processes <= MAX_PROCESSES:
        raise ValueError(
            f"expected --processes in [1, {MAX_PROCESSES}], got --processes={args.processes}"
        )
    return rest


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run(args: argparse.Namespace, command: list[str]) -> int:
    """Start the processes, wait for all; the first failure stops the others (their collectives
    would wait for it forever). Returns the first non-zero exit status, else 0."""
    coordinator = f"127.0.0.1:{_free_port()}"
    children = []
    for index in range(args.processes):
        env = dict(os.environ, JFED_COORDINATOR=coordinator,
                   JFED_NUM_PROCESSES=str(args.processes), JFED_PROCESS_ID=str(index))  # fmt: skip
        children.append(subprocess.Popen([sys.executable, "-m", "jfed", *command], env=env))
    status = 0
    while any(child.poll() is None for child in children):
        failed = [c.returncode for c in children if c.returncode not in (None, 0)]
        if failed:
            status = failed[0]
            for child in children:
                if child.poll() is None:
                    child.terminate()
            break
        time.sleep(0.1)
    for child in children:
        child.wait()
        status = status or child.returncode
    return status
