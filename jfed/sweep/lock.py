"""One writer per results folder: an operating-system lock on ``FOLDER/.jfed.lock``.

Two sweeps writing one ``runs.jsonl`` (or a ``--resume`` started while the sweep still runs)
would append the same configurations twice. :func:`folder_lock` takes an exclusive ``flock`` on
the lock file (``msvcrt.locking`` on Windows) and holds it while the writer works; the kernel
releases it when the process ends, however it ends (``kill -9`` included), so no rule about
stale locks is needed and a lock file left behind, empty or not, blocks nothing. The holder
writes its process id and host into the file, so that a second writer is refused with one line
naming them; a name left by a process that died is never given as the holder's.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator

from jfed._validation import UsageError

LOCK_NAME = ".jfed.lock"
OWNER_WAIT = 1.0  # seconds a refused writer waits for the holder to write its name

_held: dict[str, int] = {}  # lock path -> descriptor, the locks this process holds


class FolderLockedError(UsageError):
    """The results folder has a live writer."""


try:
    import fcntl

    def _try_lock(descriptor: int) -> bool:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

except ImportError:  # Windows
    import msvcrt

    def _try_lock(descriptor: int) -> bool:
        try:
            msvcrt.locking(descriptor, msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]
        except OSError:
            return False
        return True


def _open(path: str) -> int:
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    try:
        return os.open(path, flags, 0o644)
    except OSError as error:
        if os.path.islink(path):
            raise FolderLockedError(
                f"{path} is a symbolic link; remove it (jfed creates its lock file itself)"
            ) from error
        raise


def _same_file(descriptor: int, path: str) -> bool:
    """Whether ``path`` still names the file open as ``descriptor`` (a releasing holder may
    have removed it between our open and our lock: that lock would guard nothing)."""
    try:
        named = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    opened = os.fstat(descriptor)
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)


def _acquire(path: str) -> int | None:
    """The descriptor of ``path`` locked by this process, or ``None`` when another holds it."""
    while True:
        descriptor = _open(path)
        if not _try_lock(descriptor):
            os.close(descriptor)
            return None
        if _same_file(descriptor, path):
            return descriptor
        os.close(descriptor)  # locked a file that was removed meanwhile: lock the new one


def _write_owner(descriptor: int) -> None:
    owner = json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode()
    os.ftruncate(descriptor, 0)
    os.lseek(descriptor, 0, os.SEEK_SET)
    os.write(descriptor, owner)


def read_owner(path: str) -> dict:
    """The ``{"pid", "host"}`` written into a lock file (``{}`` when empty or unreadable)."""
    try:
        with open(path, encoding="utf-8") as handle:
            owner = json.load(handle)
    except (OSError, ValueError):
        return {}
    return owner if isinstance(owner, dict) else {}


def _alive(owner: dict) -> bool:
    """Whether the process a lock file names may be its holder: on this host, a process of that
    id exists (a file left by a process that died names a dead one until the next holder
    writes over it); on another host, it cannot be told, so it may."""
    if owner.get("host") != socket.gethostname():
        return bool(owner)
    pid = owner.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    except OSError:
        return False
    return True


def _refusal(folder: str, path: str) -> FolderLockedError:
    deadline = time.monotonic() + OWNER_WAIT
    owner = read_owner(path)
    # the holder may not have written its name yet: the file is then empty, or still names the
    # dead process that left it behind
    while not _alive(owner) and time.monotonic() < deadline:
        time.sleep(0.02)
        owner = read_owner(path)
    alive = _alive(owner)
    holder = f"process {owner.get('pid')} on {owner.get('host')}" if alive else "another process"
    return FolderLockedError(
        f"results folder {folder} is in use by {holder} (lock file {path}); wait for that "
        "process to end, or use another --out"
    )


@contextlib.contextmanager
def folder_lock(folder: str) -> Iterator[str]:
    """Hold ``folder``'s writer lock for the ``with`` block; yields the lock file's path.

    Re-entrant within one process: an inner ``folder_lock`` of a folder this process holds
    passes through (the outer one releases it). The lock file is removed on release; one left
    by a process that died is simply locked again.

    Raises:
      FolderLockedError: another live process holds it (the message names its pid and host).
    """
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(os.path.realpath(folder), LOCK_NAME)
    if path in _held:
        yield path
        return
    descriptor = _acquire(path)
    if descriptor is None:
        raise _refusal(folder, path)
    _held[path] = descriptor
    try:
        _write_owner(descriptor)
        yield path
    finally:
        del _held[path]
        with contextlib.suppress(OSError):
            os.remove(path)  # before unlocking: a waiting writer then sees the file is gone
        os.close(descriptor)
