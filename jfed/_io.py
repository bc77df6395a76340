"""Files of a results folder: written whole or not at all, read only when they are regular files.

A crash (``kill -9``, a full disk, a power cut) in the middle of a write must never leave half a
table, a truncated manifest or an empty figure behind. :func:`replacing` writes into a temporary
file beside the target, syncs it and renames it over the target (``os.replace`` is atomic on
POSIX and Windows), then syncs the folder so that the rename itself survives a power cut.

What is not a regular file is never replaced: a device (``/dev/null``, ``/dev/full``), a FIFO, a
socket or a symbolic link at the target is refused with one line naming it
(:func:`check_replaceable`), and stays exactly as it was. The standard streams are written
through instead, where writing to them is the user's intent: ``-`` and ``/dev/stdout`` (standard
output), ``/dev/stderr``, and an open descriptor named ``/dev/fd/N`` or ``/proc/self/fd/N`` (a
shell's ``>(command)``) (:func:`descriptor_of`).

:func:`open_regular` opens a file for reading only if it is a regular file: a FIFO or a device
named like a results file would block a reader, or feed it endless bytes.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterator
from typing import IO

from jfed._validation import UsageError


@contextlib.contextmanager
def naming(path: str) -> Iterator[None]:
    """An ``OSError`` raised inside that names no file (a full disk's ``ENOSPC`` while writing,
    a failed sync) is raised again naming ``path``, so that its one line says where."""
    try:
        yield
    except OSError as error:
        if error.filename is not None:
            raise
        raise OSError(error.errno, error.strerror or str(error), path) from error


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


_DESCRIPTOR = re.compile(r"^/(?:dev|proc/self)/fd/(\d+)$")
_STREAMS = {"-": 1, "/dev/stdout": 1, "/dev/stderr": 2}


def descriptor_of(path: str) -> int | None:
    """The descriptor of this process that ``path`` names, if it names one: 1 for ``-`` and
    ``/dev/stdout``, 2 for ``/dev/stderr``, N for ``/dev/fd/N`` and ``/proc/self/fd/N``;
    ``None`` for any other path. Writing to it writes through (nothing is replaced).

    Raises:
      UsageError: the path names a descriptor that is not open.
    """
    named = _STREAMS.get(path)
    match = _DESCRIPTOR.match(path) if named is None else None
    descriptor = named if match is None else int(match.group(1))
    if descriptor is None:
        return None
    try:
        os.fstat(descriptor)
    except OSError:
        raise UsageError(f"{path} names descriptor {descriptor}, which is not open") from None
    return descriptor


def special_kind(path: str) -> str | None:
    """What ``path`` is when it exists and is not a regular file (``"a character device"``,
    ``"a FIFO"``, ``"a symbolic link"``, ...); ``None`` for a regular file or a missing path. A
    link is not followed: it is what it is, whatever it points to."""
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISREG(mode):
        return None
    return "a symbolic link" if stat.S_ISLNK(mode) else _kind(mode)


def check_replaceable(path: str, flag: str = "") -> None:
    """Refuse (:class:`UsageError`, one line naming the path) to replace ``path`` when it is not
    a regular file: jfed never renames over a device, a FIFO, a socket or a link."""
    kind = special_kind(path)
    if kind is not None:
        where = f"{flag} {path}" if flag else path
        raise UsageError(
            f"{where} is {kind}, not a regular file: jfed writes only regular files and "
            "never replaces anything else (give another path, or - for standard output)"
        )


@contextlib.contextmanager
def _through(descriptor: int, mode: str) -> Iterator[IO]:
    """A handle writing through the open ``descriptor`` (standard output and error: Python's
    own streams, so that what was printed before stays in order)."""
    stream = {1: sys.stdout, 2: sys.stderr}.get(descriptor)
    if stream is not None:
        handle = stream.buffer if mode == "wb" else stream
        yield handle
        handle.flush()
        return
    text = mode == "w"
    encoding, newline = ("utf-8", "\n") if text else (None, None)
    with os.fdopen(os.dup(descriptor), mode, encoding=encoding, newline=newline) as handle:
        yield handle


@contextlib.contextmanager
def replacing(path: str, mode: str = "w") -> Iterator[IO]:
    """A handle on a temporary file that becomes ``path`` when the ``with`` block ends normally.

    The temporary file lies in ``path``'s folder (a rename across file systems is not atomic),
    is synced before the rename, and is removed if the block raises: ``path`` then keeps its
    old content. A standard stream or an open descriptor (:func:`descriptor_of`) is written
    through; any other path that is not a regular file is refused before anything is written.

    Raises:
      UsageError: ``path`` is a device, a FIFO, a socket or a symbolic link
        (:func:`check_replaceable`), or names a descriptor that is not open.

    Args:
      path: the file to write.
      mode: ``"w"`` (text, UTF-8, ``\\n`` line ends) or ``"wb"``.

    Example:
      with replacing("out/tuned.csv") as handle:
          handle.write(text)
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"expected mode 'w' or 'wb', got {mode!r}")
    descriptor = descriptor_of(path)
    if descriptor is not None:
        with _through(descriptor, mode) as handle:
            yield handle
        return
    check_replaceable(path)
    folder = os.path.dirname(os.path.abspath(path))
    with naming(path):
        descriptor, temporary = tempfile.mkstemp(
            dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp"
        )
    try:
        os.chmod(temporary, 0o666 & ~_umask())  # as open() would create it, not mkstemp's 0600
        text = mode == "w"
        encoding, newline = ("utf-8", "\n") if text else (None, None)
        with os.fdopen(descriptor, mode, encoding=encoding, newline=newline) as handle:
            yield handle
            with naming(path):
                handle.flush()
                os.fsync(handle.fileno())
        with naming(path):
            os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise
    sync_folder(folder)


_TEMPORARY = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")
"""The name :func:`replacing` gives its temporary file (``tempfile.mkstemp``'s 8 characters)."""


def remove_stale_temporaries(folder: str) -> list[str]:
    """Remove the temporary files of :func:`replacing` left in ``folder`` by a writer that was
    killed mid-write (``.utility.pdf.k2j4_x9a.tmp``); returns their paths. Call it only while
    holding the folder's writer lock (:func:`jfed.sweep.lock.folder_lock`): a temporary file
    is then no live writer's. Files of other names are never touched."""
    removed = []
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for entry in os.scandir(folder):
            if _TEMPORARY.match(entry.name) and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(entry.path)
                    removed.append(entry.path)
    return removed


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
