"""Whose fault an exception is, said in one line.

Bad input is jfed's :class:`~jfed._validation.UsageError` (exit 2). Anything else raised while a
command runs is a fault of the code that raised it: jfed's own (exit 1, asking for a report), or a
plug-in's. A plug-in is any method whose experiment class is defined outside the ``jfed``
package (an installed package's entry point, or a user's module registering a method); an
exception raised inside its own code (a ``KeyError`` in its ``round``), or while jfed runs its
declaration (an ``Output`` path that names nothing, an ``experiment="module:Class"`` that does
not import), is reported as the plug-in's, with the plug-in's file and line and its package, so
its author, not jfed's, gets the report.
"""

from __future__ import annotations

import inspect
import os
import sys
import traceback
from dataclasses import dataclass
from typing import Any

REPORT_HINT = (
    "this is a fault of jfed, not of the input: please report it with the command line and "
    "`jfed --version` (JFED_TRACEBACK=1 shows the traceback)"
)


def one_line(text: str) -> str:
    """``text`` with its control characters escaped (a newline the user typed into a value is
    shown as ``\\n``): an error stays one line whatever it quotes."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def _message(error: BaseException) -> str:
    text = one_line(" ".join(str(error).split())[:300]) or "(no message)"
    return f"{type(error).__name__}: {text}"


@dataclass(frozen=True)
class Plugin:
    """A method that is not jfed's own: its name, its experiment's module, where that module's
    files lie (a package's folder, or the one file), and who ships it."""

    method: str
    module: str
    root: str | None
    package: str

    def owns(self, filename: str) -> bool:
        """Whether ``filename`` is one of the plug-in's own files."""
        if self.root is None:
            return False
        path = os.path.abspath(filename)
        return path == self.root or path.startswith(self.root + os.sep)


def _experiment_module(declared: Any) -> str:
    experiment = declared.experiment
    if isinstance(experiment, str):
        return experiment.partition(":")[0]
    return getattr(experiment, "__module__", "") or ""


def _package(module: str) -> str:
    """``"package NAME VERSION"`` of the installed distribution that ships ``module``, else
    ``"module NAME"``."""
    from importlib import metadata

    top = module.split(".")[0]
    try:
        names = metadata.packages_distributions().get(top, [])
    except Exception:  # broken metadata of an unrelated package must not hide the fault
        names = []
    for name in names:
        try:
            return f"package {name} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
    return f"module {module}"


def _root(module: str) -> str | None:
    """The folder of ``module``'s top-level package, or its one file."""
    loaded = sys.modules.get(module.split(".")[0])
    filename = getattr(loaded, "__file__", None)
    if not filename:
        return None
    filename = os.path.abspath(filename)
    if os.path.basename(filename) == "__init__.py":
        return os.path.dirname(filename)
    return filename


def plugin_of(name: str | None) -> Plugin | None:
    """The plug-in behind method ``name``, or ``None`` for jfed's own methods (and no method)."""
    if not name:
        return None
    from jfed.methods import method

    try:
        declared = method(name)
    except ValueError:
        return None
    module = _experiment_module(declared)
    if module == "jfed" or module.startswith("jfed."):
        return None
    return Plugin(declared.name, module, _root(module), _package(module))


def _declaration_site(declared: Any) -> str:
    """``file:line`` of a loaded experiment class, or ``""``."""
    experiment = declared.experiment
    if not isinstance(experiment, type):
        return ""
    try:
        filename = inspect.getsourcefile(experiment)
        _, line = inspect.getsourcelines(experiment)
    except (OSError, TypeError):
        return ""
    return f"{filename}:{line}" if filename else ""


def plugin_fault(plugin: Plugin, error: BaseException) -> str:
    """One line blaming ``plugin`` for ``error``: where its own code raised it, or, raised by jfed
    while running it, where its experiment class is declared."""
    frames = traceback.extract_tb(error.__traceback__)
    own = [frame for frame in frames if plugin.owns(frame.filename)]
    where = f"{plugin.package}"
    if own:
        frame = own[-1]
        site = f"at {frame.filename}:{frame.lineno} (in {frame.name})"
        return (
            f"jfed: error: plug-in method {plugin.method} ({where}) failed in its own code "
            f"{site}: {_message(error)}; a fault of the plug-in, not of jfed "
            "(JFED_TRACEBACK=1 shows the traceback)"
        )
    from jfed.methods import method

    declared = method(plugin.method)
    site = _declaration_site(declared)
    declared_at = f", its experiment declared at {site}" if site else ""
    return (
        f"jfed: error: plug-in method {plugin.method} ({where}{declared_at}): jfed could not "
        f"run its declaration: {_message(error)}; check the plug-in (its outputs, hooks and "
        "experiment name) against jfed's method API (JFED_TRACEBACK=1 shows the traceback)"
    )


def load_plugin(plugin: Plugin | None, declared: Any) -> None:
    """Import a plug-in's experiment (``"module:Class"``) before its run starts, so that a name
    that does not import is reported as the plug-in's, naming the name."""
    if plugin is None:
        return
    try:
        declared.load()
    except (ImportError, AttributeError) as error:
        raise PluginError(
            f"jfed: error: plug-in method {plugin.method} ({plugin.package}): its experiment "
            f"{declared.experiment!r} cannot be loaded: {_message(error)}; a fault of the "
            "plug-in's declaration, not of jfed"
        ) from error


class PluginError(Exception):
    """A plug-in's fault, already said in one line (its message)."""


def report(error: BaseException, method: str | None) -> int:
    """Print one line for an exception that is not a refusal of the input and return exit
    status 1: the plug-in's fault where ``method`` is a plug-in, else jfed's. With
    ``JFED_TRACEBACK=1`` the exception is raised again instead (its traceback)."""
    if os.environ.get("JFED_TRACEBACK") == "1":
        raise error
    if isinstance(error, PluginError):
        print(one_line(str(error)), file=sys.stderr)
        return 1
    plugin = plugin_of(method)
    if plugin is not None:
        print(plugin_fault(plugin, error), file=sys.stderr)
        return 1
    print(f"jfed: internal error: {_message(error)}; {REPORT_HINT}", file=sys.stderr)
    return 1


def file_system_fault(error: OSError, args: Any) -> str:
    """One line for a file system's refusal after the checks passed (a full disk's "No space
    left on device", a quota): the error, the path it names (else the command's output folder)
    and what the command kept, so that nothing has to be guessed before freeing room."""
    command = getattr(args, "command", None)
    out = getattr(args, "out", None)
    where = error.filename or (out if command in ("sweep", "demo", "plot") else None)
    said = one_line(error.strerror or str(error)) + (f": {one_line(str(where))}" if where else "")
    if command == "sweep":
        runs = os.path.join(str(out), "runs.jsonl")
        kept = (f"the runs finished before it are kept in {runs} (the same command with --resume "
                "continues from them once there is room)")  # fmt: skip
    elif command == "demo":
        kept = f"what finished before it is kept in {out}"
    elif command == "plot":
        kept = "the sweeps' runs.jsonl are unchanged (only tables and figures were written)"
    else:
        kept = "the command's result was not kept: run it again once there is room"
    return f"jfed: error: {said}; {one_line(kept)}"
