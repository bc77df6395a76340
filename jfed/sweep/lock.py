"""One writer per results folder: an exclusive lock file, created atomically.

Two sweeps writing one ``runs.jsonl`` (or a ``--resume`` started while the sweep still runs)
would append the same configurations twice. :func:`folder_lock` creates ``FOLDER/.jfed.lock``
with ``O_CREAT | O_EXCL`` (atomic on local file systems), holding the owner's process id and
host; a second writer is refused with one line naming them. A lock left by a process that no
longer runs on this host (killed, say) is taken over with a warning.
"""

from __future__ import annotations

import json
import os
import socket
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

LOCK_NAME = ".jfed.lock"


class FolderLockedError(ValueError):
    """The results folder has a live writer."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def _try_create(path: str, owner: dict) -> bool:
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump(owner, handle)
    return True


def _read_owner(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


@contextmanager
def folder_lock(folder: str) -> Iterator[str]:
    """Hold ``folder``'s writer lock for the ``with`` block; yields the lock file's path.

    Re-entrant within one process: an inner ``folder_lock`` of a folder this process holds
    passes through (the outer one releases it).

    Raises:
      FolderLockedError: another live process holds it (the message names its pid and host).
    """
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, LOCK_NAME)
    owner = {"pid": os.getpid(), "host": socket.gethostname()}
    if not _try_create(path, owner):
        holder = _read_owner(path)
        pid, host = holder.get("pid"), holder.get("host")
        if (pid, host) == (owner["pid"], owner["host"]):  # held by this process already
            yield path
            return
        stale = host == owner["host"] and isinstance(pid, int) and not _alive(pid)
        if not stale:
            raise FolderLockedError(
                f"results folder {folder} is in use by process {pid} on {host} (lock file "
                f"{path}); wait for that sweep to finish, or remove the lock file if it is gone"
            )
        warnings.warn(
            f"taking over the lock of {folder} left by process {pid}, which no longer runs",
            stacklevel=3,
        )
        os.remove(path)
        if not _try_create(path, owner):
            raise FolderLockedError(f"results folder {folder} was locked by another process")
    try:
        yield path
    finally:
        if _read_owner(path).get("pid") == owner["pid"]:
            os.remove(path)
