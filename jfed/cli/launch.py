"""``jfed launch --processes N -- run ...``: one command as N cooperating local processes.

Each process runs ``python -m jfed <command>`` with ``JFED_COORDINATOR``, ``JFED_NUM_PROCESSES``
and ``JFED_PROCESS_ID`` set, so it joins JAX's distributed runtime before any work
(:mod:`jfed.engine.distributed`); the client axis is then sharded over every device of every
process, and process 0 alone prints and writes (what native libraries print goes to standard
error, so ``--json -`` leaves one JSON record on standard output). The coordinator listens on
127.0.0.1 unless ``--coordinator HOST:PORT`` names another address; when one process fails, the
launcher stops the others within seconds and names it. On a cluster the same program runs under the
usual launcher instead (see the README: ``JFED_DISTRIBUTED=1 srun jfed run ...``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time

from jfed._validation import UsageError

MAX_PROCESSES = 64
POLL_SECONDS = 0.1
CAUSE_SECONDS = 2.0  # how long another process's failure waits for process 0's own to show
STOP_SECONDS = 5.0  # a process blocked in a collective may ignore SIGTERM; then SIGKILL


def add_parser(commands) -> None:
    launch = commands.add_parser(
        "launch", help="run a jfed command as N cooperating local processes (jax.distributed)"
    )
    launch.add_argument(
        "--processes", type=int, default=2,
        help=f"number of processes (default: 2; at most {MAX_PROCESSES})",
    )  # fmt: skip
    launch.add_argument(
        "--coordinator", metavar="HOST:PORT", default=None,
        help="address the coordinator listens on (default: 127.0.0.1 and a free port, reachable "
        "from this machine only)",
    )  # fmt: skip
    launch.add_argument(
        "command_line", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
        help="the jfed command to run, after --, e.g. -- run modulated",
    )  # fmt: skip


def child_command(args: argparse.Namespace) -> list[str]:
    """The command after ``--``, refused (``UsageError``) unless it is a run or a sweep."""
    rest = list(args.command_line)
    if rest and rest[0] == "--":
        rest = rest[1:]
    if not rest or rest[0] not in ("run", "sweep"):
        raise UsageError("expected `jfed launch --processes N -- run ...` or `-- sweep ...`")
    if not 1 <= args.processes <= MAX_PROCESSES:
        raise UsageError(
            f"expected --processes in [1, {MAX_PROCESSES}], got --processes={args.processes}"
        )
    if args.coordinator is not None:
        check_address(args.coordinator)
    return rest


def check_address(address: str) -> str:
    """``HOST:PORT`` with a port in [1, 65535] (``UsageError`` naming --coordinator otherwise)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise UsageError(f"expected --coordinator HOST:PORT (port in [1, 65535]), got {address!r}")
    return address


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def child_argv(command: list[str]) -> list[str]:
    """What each process executes: this Python running ``jfed <command>``."""
    return [sys.executable, "-m", "jfed", *command]


def run(args: argparse.Namespace, command: list[str]) -> int:
    """Start the processes, wait for all; the first failure stops the others (their collectives
    would wait for it forever) and is named in one line. Returns the first non-zero exit status,
    else 0.

    Process 0 writes to this standard error as it goes; the others' standard error is kept
    aside and shown only when one of them is the first to fail: a refusal of process 0 (a
    resume of another sweep, say) would otherwise be followed by every other process's lost
    connection, and a message all of them print would be printed once per process."""
    coordinator = args.coordinator or f"127.0.0.1:{_free_port()}"
    children: list[subprocess.Popen] = []
    with contextlib.ExitStack() as files:
        others = [files.enter_context(tempfile.TemporaryFile()) for _ in range(args.processes - 1)]
        try:
            for index in range(args.processes):
                env = dict(
                    os.environ,
                    JFED_COORDINATOR=coordinator,
                    JFED_NUM_PROCESSES=str(args.processes),
                    JFED_PROCESS_ID=str(index),
                    # this process has already said which plug-ins failed to load
                    JFED_PLUGIN_WARNINGS_SHOWN="1",
                )
                stderr = others[index - 1] if index else None
                children.append(subprocess.Popen(child_argv(command), env=env, stderr=stderr))
            failed = _wait_for_first_failure(children)
        finally:
            _stop(children)
        if failed is None:
            return next((c.returncode for c in children if c.returncode), 0)
        index, status = failed
        if index:
            others[index - 1].seek(0)
            sys.stderr.write(others[index - 1].read().decode("utf-8", "replace"))
            sys.stderr.flush()
    print(
        f"jfed: error: launch: process {index} of {len(children)} exited with status "
        f"{status} (its own error is above); stopped the others",
        file=sys.stderr,
    )
    return status


def _wait_for_first_failure(children: list[subprocess.Popen]) -> tuple[int, int] | None:
    """Poll until every process ended or one failed: ``(index, exit status)`` of the first
    failure, else ``None``. Where process 0 failed with others, it is the one named: the others
    lose their connection to the coordinator it ran."""
    while True:
        statuses = [child.poll() for child in children]
        if any(status not in (None, 0) for status in statuses):
            deadline = time.monotonic() + CAUSE_SECONDS  # process 0 may be the cause, ending
            while children[0].poll() is None and time.monotonic() < deadline:
                time.sleep(POLL_SECONDS)
            statuses = [child.poll() for child in children]
        for index, status in enumerate(statuses):
            if status not in (None, 0):
                return index, status
        if all(status is not None for status in statuses):
            return None
        time.sleep(POLL_SECONDS)


def _stop(children: list[subprocess.Popen]) -> None:
    """End the processes still running: SIGTERM, then SIGKILL after :data:`STOP_SECONDS`."""
    for child in children:
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + STOP_SECONDS
    for child in children:
        try:
            child.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
