"""jfed: differentially private federated learning simulated as one jitted, vmapped JAX program.

Layers (imports point down): :mod:`jfed.privacy` (host-side accounting), :mod:`jfed.data`
(populations and tasks), :mod:`jfed.engine` (batching, streaming, sharding, rounds),
:mod:`jfed.algorithms` (init + round pairs), :mod:`jfed.methods` (one declaration per method and
its experiment), :mod:`jfed.report` (records, results files, tables, plots), then
:mod:`jfed.sweep` (the runner: ``jfed.run``, ``jfed.run_grid``) and :mod:`jfed.cli` on top.

    import jfed
    from jfed.methods import ModulatedIterative
    record = jfed.run(ModulatedIterative(dataset="co2", epsilon=2.0))
    frame = jfed.load_results(["results/a", "results/b"])
    jfed.main(["sweep", "ols", "--out", "results/ols"])  # any command of the `jfed` program

Your own method: :mod:`jfed.methods` (a configuration, an experiment, one registration).
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("jfed")  # one source: the version pyproject.toml installed
except _metadata.PackageNotFoundError:  # a source tree on sys.path, never installed
    __version__ = "0+unknown"

_LAZY = {
    "run": ("jfed.sweep.running", "run"),
    "run_grid": ("jfed.sweep.running", "run_grid"),
    "load_results": ("jfed.report.results", "load_results"),
    "main": ("jfed.cli.main", "main"),
}


def __getattr__(name: str):
    # JAX loads with the first run, not with `import jfed` (the command line checks its
    # arguments before that)
    if name in _LAZY:
        import importlib

        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module 'jfed' has no attribute {name!r}")


__all__ = ["__version__", "load_results", "main", "run", "run_grid"]
