"""A persistent cache of compiled programs, shared by every process that uses the same folder.

jit already caches compiled programs within a process; this keeps XLA's executables on disk
(JAX's persistent compilation cache) so a new process running the same program shape (a re-run
sweep, the next command of a script) loads it instead of recompiling. The ``jfed`` command turns
it on by default; in Python, call :func:`enable_compilation_cache`.

The folder is, in order: the argument, ``$JFED_COMPILATION_CACHE``, JAX's own
``$JAX_COMPILATION_CACHE_DIR``, ``$XDG_CACHE_HOME/jfed/xla`` (``~/.cache/jfed/xla``). ``"off"``
(as argument or in jfed's variable) leaves the cache off.
"""

from __future__ import annotations

import os
import warnings

import jax

ENVIRONMENT_VARIABLE = "JFED_COMPILATION_CACHE"
JAX_ENVIRONMENT_VARIABLE = "JAX_COMPILATION_CACHE_DIR"
OFF = "off"


def default_directory() -> str:
    """``$XDG_CACHE_HOME/jfed/xla``, or ``~/.cache/jfed/xla``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "jfed", "xla")


def resolve_directory(directory: str | None = None) -> str | None:
    """The cache folder that ``directory`` (or the environment) asks for; ``None`` for off."""
    chosen = (
        directory
        or os.environ.get(ENVIRONMENT_VARIABLE)
        or os.environ.get(JAX_ENVIRONMENT_VARIABLE)
        or default_directory()
    )
    return None if chosen.strip().lower() == OFF else os.path.abspath(chosen)


def enable_compilation_cache(
    directory: str | None = None, min_compile_seconds: float = 0.2
) -> str | None:
    """Keep compiled programs in ``directory`` across processes; returns the folder (or ``None``
    when it resolves to off, or cannot be created: a warning says so and nothing else changes).

    Args:
      directory: the cache folder (see the module doc for the default); ``"off"`` disables.
      min_compile_seconds: programs that compiled faster than this are not stored (they gain
        little and would clutter the folder).
    """
    folder = resolve_directory(directory)
    if folder is None:
        return None
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as error:  # e.g. a read-only home: run on, compiling as usual
        warnings.warn(f"compilation cache off: cannot create {folder} ({error})", stacklevel=2)
        return None
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_seconds))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder
