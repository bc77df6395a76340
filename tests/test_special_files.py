"""jfed never replaces what is not a regular file: a device, a FIFO, a socket or a symbolic link
given as an output path is refused with one line naming it and stays exactly as it was; the
standard streams and open descriptors (``-``, ``/dev/stdout``, ``/dev/fd/N``) are written
through."""

import json
import os
import socket
import stat

import pytest

from jfed._io import replacing, write_atomic
from jfed._validation import UsageError
from jfed.cli.main import main

SHUFFLE = ["account", "shuffle", "--epsilon0", "1", "--n", "1000"]
RUN = ["run", "estimation", "--replications", "4", "--sites", "4", "--units", "10"]
LAUNCH = ["launch", "--processes", "2", "--", *RUN]


def _state(path: str) -> tuple:
    """What must not change: the entry's own metadata (not followed), a link's target text and
    what the target holds."""
    info = os.lstat(path)
    state = (info.st_mode, info.st_ino, info.st_rdev, info.st_size, info.st_mtime_ns)
    if stat.S_ISLNK(info.st_mode):
        target = os.readlink(path)
        state += (target, open(target).read() if os.path.isfile(target) else None)
    return state


def _device(tmp_path) -> str:
    """A character device like /dev/null (1, 3), made in the test's own folder."""
    if os.geteuid() != 0:
        pytest.skip("making a device node (os.mknod) needs root")
    path = str(tmp_path / "device")
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return path


def _fifo(tmp_path) -> str:
    path = str(tmp_path / "fifo")
    os.mkfifo(path)
    return path


def _symlink(tmp_path) -> str:
    target = tmp_path / "elsewhere.json"
    target.write_text("keep me\n")
    path = tmp_path / "record.json"
    path.symlink_to(target)
    return str(path)


def _socket(tmp_path):
    path = str(tmp_path / "socket")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    return path, server


MAKERS = {"device": _device, "fifo": _fifo, "symlink": _symlink}
KINDS = {"device": "a character device", "fifo": "a FIFO", "symlink": "a symbolic link"}


@pytest.mark.parametrize("command", [RUN, SHUFFLE, LAUNCH], ids=["run", "account", "launch"])
@pytest.mark.parametrize("kind", list(MAKERS))
def test_a_special_file_given_to_json_is_refused_and_left_as_it_was(
    kind, command, tmp_path, capsys
):
    path = MAKERS[kind](tmp_path)
    before, listing = _state(path), sorted(os.listdir(tmp_path))
    assert main([*command, "--json", path]) == 2
    captured = capsys.readouterr()
    err = captured.err
    assert err.startswith(f"jfed: error: --json {path} is {KINDS[kind]}, not a regular file")
    assert err.count("\n") == 1 and captured.out == ""
    assert _state(path) == before and sorted(os.listdir(tmp_path)) == listing


def test_a_socket_is_refused_too(tmp_path, capsys):
    path, server = _socket(tmp_path)
    try:
        before = _state(path)
        assert main([*SHUFFLE, "--json", path]) == 2
        assert "is a socket, not a regular file" in capsys.readouterr().err
        assert _state(path) == before
    finally:
        server.close()


@pytest.mark.parametrize("kind", list(MAKERS))
def test_the_atomic_write_refuses_before_writing_anything(kind, tmp_path):
    """The library's own guard, whatever called it (a sweep's tables, a manifest)."""
    path = MAKERS[kind](tmp_path)
    before, listing = _state(path), sorted(os.listdir(tmp_path))
    with pytest.raises(UsageError, match=f"is {KINDS[kind]}, not a regular file"):
        write_atomic(path, "new\n")
    with pytest.raises(UsageError), replacing(path, "wb") as handle:
        handle.write(b"new")
    assert _state(path) == before and sorted(os.listdir(tmp_path)) == listing


def test_a_regular_file_is_still_replaced_whole(tmp_path):
    """Negative control: the guard lets the atomic replacement of a regular file through."""
    path = tmp_path / "record.json"
    path.write_text("old\n")
    write_atomic(str(path), "new\n")
    assert path.read_text() == "new\n" and os.listdir(tmp_path) == ["record.json"]


@pytest.mark.parametrize("alias", ["-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"])
def test_standard_output_is_written_through(alias, capsys):
    if alias != "-" and not os.path.exists(alias):
        pytest.skip(f"{alias} does not exist on this system")
    assert main([*SHUFFLE, "--json", alias]) == 0
    captured = capsys.readouterr()
    record = json.loads(captured.out)  # the record alone: no human line before it
    assert record["quantity"] == "epsilon" and captured.err == ""


def test_an_open_descriptor_is_written_through(tmp_path):
    """``--json >(command)``: the shell passes /dev/fd/N, a pipe; nothing is replaced."""
    if not os.path.isdir("/dev/fd"):
        pytest.skip("no /dev/fd on this system")
    read_end, write_end = os.pipe()
    try:
        assert main([*SHUFFLE, "--json", f"/dev/fd/{write_end}"]) == 0
    finally:
        os.close(write_end)
    with os.fdopen(read_end) as pipe:
        assert json.loads(pipe.read())["quantity"] == "epsilon"


def test_a_descriptor_that_is_not_open_is_refused(capsys):
    unused = os.open(os.devnull, os.O_RDONLY)
    os.close(unused)
    assert main([*SHUFFLE, "--json", f"/dev/fd/{unused}"]) == 2
    assert f"names descriptor {unused}, which is not open" in capsys.readouterr().err
