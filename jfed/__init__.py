"""jfed: differentially private federated learning simulated as one jitted, vmapped JAX program.

Layers (imports point down): :mod:`jfed.privacy` (host-side accounting), :mod:`jfed.data`
(populations and tasks), :mod:`jfed.engine` (batching, streaming, sharding, rounds),
:mod:`jfed.algorithms` (init + round pairs), :mod:`jfed.methods` (one declaration per method and
its experiment), :mod:`jfed.sweep` (the runner) and :mod:`jfed.cli` / :mod:`jfed.report` on top.

    import jfed
    from jfed.methods import ModulatedIterative
    record = jfed.run(ModulatedIterative(dataset="co2", epsilon=2.0))
    frame = jfed.load_results(["results/a", "results/b"])
"""

__version__ = "0.2.0"

_LAZY = {
    "run": ("jfed.methods.running", "run"),
    "run_grid": ("jfed.methods.running", "run_grid"),
    "load_results": ("jfed.report.results", "load_results"),
}


def __getattr__(name: str):
    # JAX loads with the first run, not with `import jfed` (the command line checks its
    # arguments before that)
    if name in _LAZY:
        import importlib

        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module 'jfed' has no attribute {name!r}")


__all__ = ["__version__", "load_results", "run", "run_grid"]
