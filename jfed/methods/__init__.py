"""Methods: one declaration each (configuration, paper, privacy notion) and its experiment.

    import jfed
    from jfed.methods import ModulatedOneShot
    record = jfed.run(ModulatedOneShot(dataset="fair", epsilon=10.0))
    rows = jfed.run_grid(ModulatedOneShot(), [1, 10], seeds=3, grid={"ridge_scale": [0.5, 1]})

Importing this package loads no numerical package; the experiments (JAX) load when a run starts.
"""

from jfed.methods.declarations import (
    DPSGD,
    MBSGD,
    METHODS,
    OLS,
    AcceleratedMBSGD,
    Config,
    FedAvg,
    LocalSGD,
    Method,
    ModulatedIterative,
    ModulatedOneShot,
    NoisyMBSGD,
    ShuffleMBSGD,
    method,
    method_of,
)
from jfed.methods.fields import Field, Range, fields_of

__all__ = [
    "DPSGD",
    "MBSGD",
    "METHODS",
    "OLS",
    "AcceleratedMBSGD",
    "Config",
    "FedAvg",
    "Field",
    "LocalSGD",
    "Method",
    "ModulatedIterative",
    "ModulatedOneShot",
    "NoisyMBSGD",
    "Range",
    "ShuffleMBSGD",
    "fields_of",
    "method",
    "method_of",
]
