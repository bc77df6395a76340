"""Methods: the public method API, the same for the built-in methods and a user's.

A method is a configuration (a frozen dataclass of fields declared with :func:`param`), an
experiment (the population, the ``init`` + ``round`` algorithm, the calibration and its privacy
statement, the outputs kept as :class:`Output` declarations, the evaluation), and one
registration (:func:`register_method` on the experiment, or :func:`register`; installed packages
through the ``jfed.methods`` entry-point group) that also states how a sweep tunes and what a
run reports (:class:`Metrics`). Registered, it gets what every built-in method
gets: ``jfed run`` / ``jfed sweep`` with generated flags, records, resume, tuning, plots,
``jfed methods`` and :func:`jfed.run_grid`.

    import jfed
    from jfed.methods import ModulatedOneShot
    record = jfed.run(ModulatedOneShot(dataset="fair", epsilon=10.0))
    rows = jfed.run_grid(ModulatedOneShot(), [1, 10], seeds=3, grid={"ridge_scale": [0.5, 1]})

Importing this package loads no numerical package; an experiment (JAX) loads when a run starts.
"""

from jfed.methods.config import Config, Rounds
from jfed.methods.declared import (
    DPSGD,
    LDPFL,
    MBSGD,
    OLS,
    AcceleratedMBSGD,
    DPFedAvg,
    Estimation,
    FedAvg,
    FedAvgSampled,
    FunctionalEstimation,
    LocalSGD,
    ModulatedIterative,
    ModulatedOneShot,
    NoisyMBSGD,
    ShuffleMBSGD,
)
from jfed.methods.experiment import Experiment, Output, Outputs, Program
from jfed.methods.fields import (
    EPSILON,
    NONNEGATIVE,
    OPEN_UNIT,
    POSITIVE,
    UNIT,
    Field,
    Range,
    fields_of,
    integers,
    param,
)
from jfed.methods.record_fields import RecordFields
from jfed.methods.registry import (
    ALIASES,
    ENTRY_POINT_GROUP,
    METHODS,
    Method,
    Metrics,
    build_experiment,
    method,
    method_of,
    register,
    register_method,
)

__all__ = [
    "ALIASES",
    "DPSGD",
    "ENTRY_POINT_GROUP",
    "EPSILON",
    "LDPFL",
    "MBSGD",
    "METHODS",
    "NONNEGATIVE",
    "OLS",
    "OPEN_UNIT",
    "POSITIVE",
    "UNIT",
    "AcceleratedMBSGD",
    "Config",
    "DPFedAvg",
    "Estimation",
    "Experiment",
    "FedAvg",
    "FedAvgSampled",
    "Field",
    "FunctionalEstimation",
    "LocalSGD",
    "Method",
    "Metrics",
    "ModulatedIterative",
    "ModulatedOneShot",
    "NoisyMBSGD",
    "Output",
    "Outputs",
    "Program",
    "Range",
    "RecordFields",
    "Rounds",
    "ShuffleMBSGD",
    "build_experiment",
    "fields_of",
    "integers",
    "method",
    "method_of",
    "param",
    "register",
    "register_method",
]
