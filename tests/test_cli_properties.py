"""Random command lines never reach a traceback: every one is answered by exit 0 (help,
version), exit 2 with one line naming what is wrong, or is accepted. Nothing runs: the commands'
work is replaced by a marker raised once every check has passed, so each example takes
milliseconds."""

import contextlib
import io
import os
import tempfile
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jfed.demo
import jfed.engine.cache
import jfed.engine.distributed
from jfed.cli import launch, methods, sweep
from jfed.cli import main as cli
from jfed.methods import METHODS
from jfed.methods.fields import fields_of


class Accepted(BaseException):
    """Raised where a command would start its work: every check passed."""


def _accept(*args, **kwargs):
    raise Accepted


FIELD_FLAGS = sorted({f.flag for m in METHODS.values() for f in fields_of(m.config)})
OTHER_FLAGS = [
    "--json", "--seeds", "--grid", "--set", "--epsilon", "--block-size", "--chunk-size", "--out",
    "--resume", "--slice-size", "--tune", "--statistic", "--extend-edges", "--progress",
    "--no-progress", "--compilation-cache", "--no-shared-noise", "--processes", "--coordinator",
    "--noise-multiplier", "--sampling-rate", "--steps", "--delta", "--accountant", "--help",
    "--version", "--markdown", "--scale-clients", "--bogus",
]  # fmt: skip
COMMANDS = [
    *(["run", name] for name in METHODS),
    *(["sweep", name] for name in METHODS),
    *(["launch", "--", "run", name] for name in list(METHODS)[:3]),
    ["account", "epsilon"], ["account", "calibrate"], ["datasets"], ["methods"], ["plot"],
    ["demo"], ["nonsense"], [],
]  # fmt: skip

VALUES = st.one_of(
    st.integers(-(10**12), 10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["", "-", "0", "1", "0.5", "1e-300", "1e300", "nan", "-inf", "1,2", "1,,2",
                     "x", "ridge=1,2", "beta=0.3", "units=10", "fair", "synthetic", "off",
                     "exact", "pld", "none", "local-item", "127.0.0.1:1", "--", "true"]),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12),
)  # fmt: skip
TOKENS = st.one_of(
    st.sampled_from(FIELD_FLAGS + OTHER_FLAGS),
    VALUES,
    st.tuples(st.sampled_from(FIELD_FLAGS + OTHER_FLAGS), VALUES).map(lambda p: "=".join(p)),
)


@pytest.fixture(scope="module")
def quiet_commands():
    """Every command's work replaced by :class:`Accepted`, in an empty working folder."""
    patches = [
        mock.patch.object(cli, "_run", _accept),
        mock.patch.object(cli, "_datasets", _accept),
        mock.patch.object(cli, "_answer_account", _accept),
        mock.patch.object(methods, "run", _accept),
        mock.patch.object(sweep, "run", _accept),
        mock.patch.object(launch, "run", _accept),
        mock.patch.object(jfed.demo, "run_demo", _accept),
        mock.patch.object(jfed.engine.cache, "enable_compilation_cache", _accept),
        mock.patch.object(jfed.engine.distributed, "initialize_from_environment", _accept),
    ]
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as folder, contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        os.chdir(folder)
        try:
            yield folder
        finally:
            os.chdir(here)


def _answer(argv: list[str]) -> tuple[int | None, str]:
    """(exit status, or None when accepted; what was printed to stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = cli.main(argv)
        except Accepted:
            status = None
    return status, err.getvalue()


# 100 command lines a run (about 60 ms each): every command and every flag kind is drawn many
# times over; hypothesis's database replays any failure first in the next run
@settings(max_examples=100, deadline=None)
@given(command=st.sampled_from(COMMANDS), tokens=st.lists(TOKENS, max_size=6))
def test_random_command_lines_never_give_a_traceback(quiet_commands, command, tokens):
    status, err = _answer([*command, *tokens])
    assert status in (None, 0, 2), (status, err)
    assert "Traceback" not in err
    if status == 2:
        assert err.startswith("jfed: error:") and err.count("\n") == 1, err
    assert os.listdir(quiet_commands) == []  # a refused or accepted check writes nothing


def test_the_marker_stands_for_work_not_for_checks(quiet_commands):
    """Negative control: a valid command is accepted (reaches its work), a bad one is not."""
    assert _answer(["run", "ols", "--synthetic"])[0] is None
    assert _answer(["run", "ols", "--synthetic", "--clients", "0"])[0] == 2
    assert _answer(["datasets"])[0] is None
