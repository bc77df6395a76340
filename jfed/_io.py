"""Files of a results folder: written whole or not at all, read only when they are regular files.

A crash (``kill -9``, a full disk, a power cut) in the middle of a write must never leave half a
table, a truncated manifest or an empty figure behind. :func:`replacing` writes into a temporary
file beside the target, syncs it and renames it over the target (``os.replace`` is atomic on
POSIX and Windows), then syncs the folder so that the rename itself survives a power cut. A
symbolic link at the target is replaced by the new regular file, never followed.

:func:`open_regular` opens a file for reading only if it is a regular file: a FIFO or a device
named like a results file would block a reader, or feed it endless bytes.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from typing import IO

from jfed._validation import UsageError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def sync_folder(folder: str) -> None:
    """Flush ``folder``'s entries (a rename or a new file) to disk, where the system allows it."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:  # Windows cannot open a folder; its renames are durable once they return
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


@contextlib.contextmanager
def replacing(path: str, mode: str = "w") -> Iterator[IO]:
    """A handle on a temporary file that becomes ``path`` when the ``with`` block ends normally.

    The temporary file lies in ``path``'s folder (a rename across file systems is not atomic),
    is synced before the rename, and is removed if the block raises: ``path`` then keeps its
    old content. A symbolic link at ``path`` is replaced by a regular file, not followed.

    Args:
      path: the file to write.
      mode: ``"w"`` (text, UTF-8, ``\\n`` line ends) or ``"wb"``.

    Example:
      with replacing("out/tuned.csv") as handle:
          handle.write(text)
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"expected mode 'w' or 'wb', got {mode!r}")
    folder = os.path.dirname(os.path.abspath(path))
    descriptor, temporary = tempfile.mkstemp(
        dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp"
    )
    try:
        os.chmod(temporary, 0o666 & ~_umask())  # as open() would create it, not mkstemp's 0600
        text = mode == "w"
        encoding, newline = ("utf-8", "\n") if text else (None, None)
        with os.fdopen(descriptor, mode, encoding=encoding, newline=newline) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise
    sync_folder(folder)


def write_atomic(path: str, content: str | bytes) -> None:
    """Write ``content`` to ``path`` whole or not at all (:func:`replacing`)."""
    with replacing(path, "wb" if isinstance(content, bytes) else "w") as handle:
        handle.write(content)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
    ):  # fmt: skip
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: str) -> IO[bytes]:
    """``path`` opened for reading in binary, if it is a regular file (a link to one is followed).

    Raises:
      UsageError: ``path`` is a FIFO, a socket, a device or a folder (one line naming it).
      OSError: it cannot be opened (missing, unreadable).
    """
    # O_NONBLOCK: opening a FIFO without a writer would otherwise wait forever
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise UsageError(f"{path} is {_kind(mode)}, not a regular file: jfed reads only files")
        if hasattr(os, "set_blocking"):
            os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_regular(path: str) -> bytes:
    """The bytes of the regular file ``path`` (:func:`open_regular`)."""
    with open_regular(path) as handle:
        return handle.read()


def open_append(path: str) -> int:
    """A descriptor appending to the regular file ``path`` (created if missing).

    Raises:
      UsageError: ``path`` is a symbolic link (appending would write wherever it points) or not
        a regular file (one line naming it).
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    if os.path.islink(path):
        raise UsageError(
            f"{path} is a symbolic link: jfed appends only to a regular file in the results "
            "folder; replace the link by the file it points to"
        )
    try:
        descriptor = os.open(path, flags | getattr(os, "O_NONBLOCK", 0), 0o666)
    except OSError as error:
        if os.path.islink(path) or error.errno == getattr(os, "ELOOP", None):
            raise UsageError(
                f"{path} is a symbolic link: jfed appends only to a regular file"
            ) from None
        if os.path.exists(path) and not os.path.isfile(path):
            raise UsageError(f"{path} is not a regular file: jfed appends only to files") from None
        raise
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        raise UsageError(f"{path} is {_kind(mode)}, not a regular file: jfed appends only to files")
    if hasattr(os, "set_blocking"):
        os.set_blocking(descriptor, True)
    return descriptor


def write_all(descriptor: int, data: bytes) -> None:
    """Write every byte of ``data`` (``os.write`` may write fewer) and sync them to disk."""
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view) :]
    os.fsync(descriptor)
