"""The registry of methods: one call (:func:`register`) or one decorator (:func:`register_method`)
makes a method known to ``jfed run``, ``jfed sweep``, ``jfed methods``, ``jfed plot``,
:func:`jfed.run_grid` and the records. The built-in methods register through the same call.

An installed package adds methods through the entry-point group :data:`ENTRY_POINT_GROUP`
(``jfed.methods``): in its ``pyproject.toml``::

    [project.entry-points."jfed.methods"]
    my-method = "my_package.method"

The entry point names a module whose import registers its methods (with the decorator or the
call), or a :class:`Method`, or a function returning one or several. Entry points load the first
time the registry is read, so ``import jfed`` stays fast.

A declaration is checked when it is registered (name, configuration fields, defaults, privacy
statement, metrics, outputs), and the error names the method and the field.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from jfed.methods.config import Config
from jfed.methods.fields import FixedFields
from jfed.methods.record_fields import LABELS

ENTRY_POINT_GROUP = "jfed.methods"
PLUGIN_WARNINGS_SHOWN = "JFED_PLUGIN_WARNINGS_SHOWN"
"""Set by ``jfed launch`` in its processes' environment: it has already reported the plug-ins
that failed to load, so they do not report them again."""
RECORD_RESERVED = frozenset({
    "schema_version", "method", "paper", "algorithm",
    "epsilon_certified", "notion", "protected", "trust_model", "adjacency", "sigma",
    "noise_multiplier", "rho",
    "selection_metric", "selection_maximize", "report_metric",
    "compile_seconds", "run_seconds", "calibration_seconds", "plan", "device", "slice",
    "slice_size", "shared_noise",
    "timestamp", "jfed_version", "git_commit", "versions", "config_key", "plugin",
    "plugin_version", "certificate_refused", *LABELS,
})  # fmt: skip
"""Names a configuration field may not take: what every record states beside the configuration
(its privacy statement, selection, run and provenance; :mod:`jfed.sweep.schema`). ``epsilon``,
``delta`` and ``accountant`` are allowed: a configuration names the target eps and delta and the
accountant, which the record then states (resolved where the configuration left them None)."""
NON_PRIVATE_STATED = frozenset({"delta", "accountant"})
"""What the record of a NON-private method states beside :data:`RECORD_RESERVED`
(:func:`jfed.methods.experiment.non_private_fields`: delta 0, accountant none): a configuration
field of such a method may not take these names either (a private method's ``delta`` and
``accountant`` are its target, which the record states)."""
_NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
NUMBER_KINDS = (int, float)


@dataclass(frozen=True)
class Metrics:
    """How a sweep tunes a method and what its runs report: metadata of the declaration, stated
    in every record's ``selection`` section (``selection_metric``, ``selection_maximize``,
    ``report_metric``) and read from there by the tuned tables and the plots.

    Attributes:
      selection: the metric a sweep chooses its tunable settings on (a key of what
        ``evaluate`` returns, e.g. ``"validation_r2"``); ``None``: nothing is chosen (a design
        grid, e.g. the estimation methods' sites: every point is reported, none extended).
      maximize: whether a larger ``selection`` is better (``False`` for an error or a risk).
      report: the metric ``jfed run`` prints and the sweep's tables and plots report (e.g.
        ``"test_accuracy"``); a list ``<report>_per_round`` among the metrics adds convergence
        curves. ``None``: the run prints "done".

    Example: ``Metrics(selection="train_error", maximize=False, report="test_error")``.
    """

    selection: str | None = None
    maximize: bool = True
    report: str | None = None

    def problems(self) -> list[str]:
        """What is wrong with this declaration (empty when nothing is)."""
        found = []
        for name in ("selection", "report"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, str) and value):
                found.append(f"metrics.{name} must be a metric's name or None, got {value!r}")
        if not isinstance(self.maximize, bool):
            found.append(f"metrics.maximize must be True or False, got {self.maximize!r}")
        return found

    def record_fields(self) -> dict:
        """The record's ``selection`` section."""
        return {"selection_metric": self.selection, "selection_maximize": self.maximize,
                "report_metric": self.report}  # fmt: skip


LEGACY_METRIC_ATTRIBUTES = {"selection_metric": "selection", "selection_maximize": "maximize",
                            "report_metric": "report"}  # fmt: skip
"""Experiment class attributes of earlier versions -> the :class:`Metrics` field now declared."""


def _states_no_notion(notion: Any) -> bool:
    """Whether a method's ``notion`` says it has none (``"none"``, ``"none (...)"``)."""
    return isinstance(notion, str) and notion.strip().lower().startswith("none")


@dataclass(frozen=True)
class Method:
    """One method: its configuration class and what a user needs to know before running it.

    Attributes:
      name: what the user types (``jfed run NAME``): lower case, words joined by ``-``.
      config: the configuration dataclass (a subclass of :class:`~jfed.methods.Config`; its
        declared fields are the flags).
      summary: one line for listings.
      notion: the privacy notion of its eps (``"none"`` for a non-private method).
      protected: what one adjacency changes (``"one client's whole data"``).
      trust_model: who sees what (``"trusted server adds the noise"``).
      experiment: the experiment class (a subclass of :class:`~jfed.methods.Experiment`), or
        ``"module:Class"`` imported only when a run starts (so the command line checks flags
        before JAX loads).
      paper: the source, where there is one; ``algorithm``: the algorithm's name there.
      private: whether it has an eps (then its configuration declares ``epsilon``); ``None``
        (the default): whether ``notion`` is other than ``"none"``, as ``register_method``
        decides it.
      cost: what a run of a configuration will cost, estimated without JAX:
        ``cost(config, plan) -> Cost`` (:mod:`jfed.methods.cost`; ``plan.chunk`` clients are
        vmapped at once). The command line refuses a run that cannot fit before anything
        compiles, naming the flag and the largest value that fits; ``None``: no estimate.
      metrics: how a sweep tunes and what a run reports (:class:`Metrics`), or, where that
        depends on the configuration's fixed fields, a function ``metrics(config) -> Metrics``
        (its ``config`` raises on a field that varies from run to run: see
        :class:`~jfed.methods.fields.FixedFields`). ``None``: ``Metrics()``, nothing tuned or
        reported by name.
    """

    name: str
    config: type
    summary: str
    notion: str
    protected: str
    trust_model: str
    experiment: Any
    paper: str = ""
    algorithm: str = ""
    private: bool = None  # type: ignore[assignment]  # omitted: from the notion (__post_init__)
    cost: Callable[..., Any] | None = None
    metrics: Metrics | Callable[[Any], Metrics] | None = None

    def __post_init__(self) -> None:
        if not self.algorithm:  # the algorithm's name in its source: the method's, if none
            object.__setattr__(self, "algorithm", self.name)
        if self.private is None:  # every registration path decides it as register_method does
            object.__setattr__(self, "private", not _states_no_notion(self.notion))

    def metrics_of(self, config: Config, experiment: Any = None) -> Metrics:
        """The :class:`Metrics` of runs of ``config`` (a configuration of this method; only its
        fixed fields may decide them, so every run of a sweep states the same). A method that
        declares none falls back on the deprecated metric attributes of its experiment
        (``experiment``, the instance built on ``config``, or else its class), then on
        ``Metrics()``."""
        declared = self.metrics
        if declared is None:
            return _legacy_metrics(self.load() if experiment is None else experiment) or Metrics()
        if isinstance(declared, Metrics):
            return declared
        resolved = declared(FixedFields(config, self.name, "metrics(config) reading config"))
        problems = resolved.problems() if isinstance(resolved, Metrics) else [
            f"metrics(config) must return a jfed.methods.Metrics, got {resolved!r}"
        ]  # fmt: skip
        if problems:
            raise ValueError(f"method {self.name}: " + "; ".join(problems))
        return resolved

    @property
    def built_in(self) -> bool:
        """Whether the method is jfed's own (its experiment lives in the ``jfed`` package), not a
        plug-in's or a script's."""
        module = self.experiment
        if not isinstance(module, str):
            module = getattr(module, "__module__", "")
        return str(module).split(":")[0].split(".")[0] == "jfed"

    def load(self) -> Any:
        """The experiment class (imports it, and with it JAX, on first use)."""
        experiment = self.experiment
        if isinstance(experiment, str):
            module, _, name = experiment.partition(":")
            experiment = getattr(importlib.import_module(module), name)
        check_experiment(self.name, experiment, self)
        return experiment


class Registry(Mapping):
    """Name -> :class:`Method`, in registration order; installed packages' entry points load on
    first read."""

    def __init__(self) -> None:
        self._methods: dict[str, Method] = {}
        self._plugins_loaded = False

    def _plugins(self) -> dict[str, Method]:
        if not self._plugins_loaded:
            self._plugins_loaded = True
            load_entry_points(self)
        return self._methods

    def __getitem__(self, name: str) -> Method:
        return self._plugins()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._plugins())

    def __len__(self) -> int:
        return len(self._plugins())

    def __contains__(self, name: object) -> bool:
        return name in self._plugins()

    def add(self, method: Method, replace: bool = False) -> None:
        known = self._methods.get(method.name)
        if known is not None and known != method and not replace:
            raise ValueError(
                f"method {method.name!r} is already registered (config "
                f"{known.config.__qualname__}); choose another name or pass replace=True"
            )
        self._methods[method.name] = method

    def remove(self, name: str) -> None:
        """Forget ``name`` (tests; a notebook re-defining a method uses ``replace=True``)."""
        self._methods.pop(name, None)


METHODS = Registry()
# names kept for the commands of earlier versions
ALIASES = {"modulated": "modulated-iterative"}


def load_entry_points(registry: Registry) -> None:
    """Register the methods of every installed package's ``jfed.methods`` entry point. A plug-in
    that fails to load is reported on stderr, naming it, and skipped: one broken package must
    not take every other method down."""
    from importlib.metadata import entry_points

    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = entry.load()
            for method in _methods_of(loaded() if _is_factory(loaded) else loaded):
                registry.add(method)
        except Exception as error:
            if os.environ.get(PLUGIN_WARNINGS_SHOWN):  # a launcher said it already
                continue
            source = getattr(entry, "dist", None)
            package = f" (package {source.name})" if source is not None else ""
            print(
                f"jfed: skipped the methods of entry point {entry.name} = {entry.value}"
                f"{package}: {type(error).__name__}: {error}",
                file=sys.stderr,
            )


def _is_factory(loaded: Any) -> bool:
    return callable(loaded) and not isinstance(loaded, (type, Method))


def _methods_of(loaded: Any) -> list[Method]:
    """What an entry point gave: a module (its import registered), a Method, or several."""
    if loaded is None or isinstance(loaded, type(sys)):
        return []
    if isinstance(loaded, Method):
        return [register_checked(loaded)]
    if isinstance(loaded, (list, tuple)):
        return [m for item in loaded for m in _methods_of(item)]
    raise ValueError(f"expected a module, a jfed Method or a list of them, got {loaded!r}")


def register_checked(method: Method) -> Method:
    check_method(method)
    _bind_config(method)
    return method


def register(method: Method, replace: bool = False) -> Method:
    """Make ``method`` known to every command and to :func:`jfed.run_grid`; returns it.

    Raises ``ValueError`` naming the method and the field when the declaration is malformed, or
    when the name is taken (``replace=True`` re-registers it, e.g. in a notebook)."""
    register_checked(method)
    METHODS.add(method, replace)
    return method


def register_method(
    name: str,
    *,
    config: type,
    summary: str,
    notion: str = "none",
    protected: str = "nothing",
    trust_model: str = "trusted server sees raw data",
    paper: str = "",
    algorithm: str = "",
    private: bool | None = None,
    cost: Callable[..., Any] | None = None,
    metrics: Metrics | Callable[[Any], Metrics] | None = None,
    replace: bool = False,
) -> Callable[[type], type]:
    """Register the decorated experiment class as method ``name`` (see :class:`Method`);
    ``private`` defaults to whether ``notion`` is other than ``"none"``.

    Example::

        @register_method("dp-fedprox", config=DPFedProxConfig, summary="FedProx, central DP",
                         notion="user-level (eps, delta)-DP", protected="one client's data",
                         trust_model="trusted server adds the noise",
                         metrics=Metrics(selection="train_error", maximize=False,
                                         report="test_error"))
        class DPFedProx(Experiment):
            ...
    """

    def decorate(experiment: type) -> type:
        register(
            Method(
                name=name, config=config, summary=summary, notion=notion, protected=protected,
                trust_model=trust_model, experiment=experiment, paper=paper,
                algorithm=algorithm,
                private=not _states_no_notion(notion) if private is None else private, cost=cost,
                metrics=metrics,
            ),
            replace=replace,
        )  # fmt: skip
        return experiment

    return decorate


def method(name: str) -> Method:
    """The declaration of ``name`` (or an alias of it); ``ValueError`` listing the names."""
    name = ALIASES.get(name, name)
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; expected one of {list(METHODS)}")
    return METHODS[name]


def method_of(config: Config) -> Method:
    """The declaration a configuration belongs to. An installed package's configuration is
    bound to its method when the package's entry point loads: that happens here if nothing has
    read the registry yet (so ``jfed.run(TheirConfig())`` works right after the import)."""
    name = type(config).method
    if not name:
        len(METHODS)  # loads the installed packages' entry points, binding their configurations
        name = type(config).method
    if not name:
        raise ValueError(
            f"{type(config).__name__} is not the configuration of a registered method "
            "(register it with jfed.methods.register or @register_method)"
        )
    return method(name)


def build_experiment(config: Config, **data: Any) -> Any:
    """The experiment of ``config``'s method, built on its fixed fields. ``data`` passes an
    already loaded ``task`` (and, for regression methods, the OLS ``reference``) so that many
    experiments on one task load and fit it once."""
    return method_of(config).load()(config, **data)


# ------------------------------------------------------------------------------------- checks


def check_method(method: Method) -> None:
    """Every problem of a declaration, at once, in one ``ValueError`` naming the method."""
    if not isinstance(method, Method):
        raise ValueError(f"expected a jfed.methods.Method, got {method!r}")
    name = method.name
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(
            f"method name {name!r}: expected lower-case words joined by '-', e.g. 'dp-fedprox'"
        )
    if name in ALIASES:
        raise ValueError(f"method name {name!r} is an alias of {ALIASES[name]!r}")
    problems = _config_problems(method)
    for attribute in ("summary", "notion", "protected", "trust_model"):
        if not isinstance(getattr(method, attribute), str) or not getattr(method, attribute):
            problems.append(f"{attribute} must be a non-empty string")
    if method.private and _states_no_notion(method.notion):
        problems.append("a private method states its notion (e.g. 'central (eps, delta)-DP')")
    if not isinstance(method.experiment, (str, type)):
        problems.append("experiment must be an Experiment subclass or 'module:Class'")
    elif isinstance(method.experiment, str) and ":" not in method.experiment:
        problems.append(f"experiment {method.experiment!r}: expected 'module:Class'")
    if method.cost is not None and not callable(method.cost):
        problems.append("cost must be a function cost(config, plan) -> jfed.methods.cost.Cost")
    problems += _metrics_problems(method)
    if problems:
        raise ValueError(f"method {name}: " + "; ".join(problems))
    if isinstance(method.experiment, type):
        check_experiment(name, method.experiment, method)


def _config_problems(method: Method) -> list[str]:
    config = method.config
    if not (isinstance(config, type) and issubclass(config, Config)):
        return [f"config must be a subclass of jfed.methods.Config, got {config!r}"]
    params = config.__dict__.get("__dataclass_params__")
    if params is None or not params.frozen:
        return [f"config {config.__name__} must be a @dataclass(frozen=True)"]
    problems = []
    names = set()
    for field in dataclasses.fields(config):
        names.add(field.name)
        if field.name in RECORD_RESERVED:
            problems.append(
                f"field {field.name!r} of {config.__name__} is named like a field every record "
                "states (its privacy statement, selection, run or provenance); rename it"
            )
            continue
        declaration = field.metadata.get("jfed")
        if declaration is None:
            problems.append(
                f"field {field.name!r} of {config.__name__} is not declared with "
                "jfed.methods.param(default, help, ...)"
            )
        elif declaration["tunable"] and declaration["kind"] not in NUMBER_KINDS:
            problems.append(
                f"field {field.name!r} is tunable but of kind {declaration['kind'].__name__} "
                "(a sweep varies numbers only)"
            )
        elif declaration["choices"] is not None and declaration["kind"] is not str:
            problems.append(f"field {field.name!r} has choices but is not a str field")
    for name in sorted(names & NON_PRIVATE_STATED) if not method.private else ():
        problems.append(
            f"field {name!r} of {config.__name__} is named like a privacy field the record of a "
            f"non-private method states ({name} of no guarantee); rename it, or declare the "
            "method private"
        )
    if method.private and "epsilon" not in names:
        problems.append(f"a private method's config declares an 'epsilon' field "
                        f"({config.__name__} has {sorted(names)})")  # fmt: skip
    if not method.private and "epsilon" in names:
        problems.append("a non-private method's config must not declare 'epsilon'")
    bound = config.__dict__.get("method", "")
    if bound and bound != method.name:
        problems.append(f"config {config.__name__} already belongs to method {bound!r}")
    if not problems:
        try:
            config().check()
        except (TypeError, ValueError) as error:
            problems.append(f"the defaults of {config.__name__} are invalid: {error}")
    return problems


def _bind_config(method: Method) -> None:
    """``config.method`` names the method (how a configuration finds its declaration)."""
    if method.config.__dict__.get("method", "") != method.name:
        type.__setattr__(method.config, "method", method.name)


def _metrics_problems(method: Method) -> list[str]:
    """What is wrong with the declaration's metrics (a function of the configuration is asked
    at the defaults, once the configuration itself is sound)."""
    metrics = method.metrics
    if metrics is None:
        return []
    if isinstance(metrics, Metrics):
        return metrics.problems() + _metric_name_problems(method, metrics)
    if not callable(metrics):
        return [f"metrics must be a jfed.methods.Metrics or a function metrics(config) -> "
                f"Metrics, got {metrics!r}"]  # fmt: skip
    if _config_problems(method):
        return []  # reported already; the defaults cannot be asked
    try:
        method.metrics_of(method.config())
    except ValueError as error:  # UsageError included: a field that varies from run to run
        return [str(error).removeprefix(f"method {method.name}: ")]
    return []


def _metric_name_problems(method: Method, metrics: Metrics) -> list[str]:
    """A declared metric named like a configuration field or a field every record states: its
    value would collide with theirs in the run's record (refused there only after the run)."""
    config = method.config
    fields = {f.name for f in dataclasses.fields(config)} if dataclasses.is_dataclass(config) \
        else set()  # fmt: skip
    stated = RECORD_RESERVED | fields | (NON_PRIVATE_STATED if not method.private else set())
    return [
        f"metric {name!r} is named like a field the record states beside the metrics (the "
        "configuration's, the privacy statement's or the run's); rename it"
        for name in (metrics.selection, metrics.report)
        if name is not None and name in stated
    ]


def check_experiment(name: str, experiment: Any, method: Method | None = None) -> None:
    """An experiment class has what the runner asks of it (``ValueError`` naming the member);
    the class checks itself (:meth:`jfed.methods.Experiment.check_class`). With its declaration
    ``method``, metric class attributes of earlier versions are checked too
    (:func:`check_legacy_metrics`)."""
    check_class = getattr(experiment, "check_class", None)
    if not isinstance(experiment, type) or check_class is None:
        raise ValueError(
            f"method {name}: experiment must be a subclass of jfed.methods.Experiment, got "
            f"{experiment!r}"
        )
    check_class(name)
    if method is not None:
        check_legacy_metrics(method, experiment)
        problems = _kept_metric_problems(method, experiment)
        if problems:
            raise ValueError(f"method {name}: " + "; ".join(problems))


DATA_STATED = frozenset({"dataset", "n_clients"})
"""What the default ``identity`` states in every record's data section."""


def _kept_metric_problems(method: Method, experiment: Any) -> list[str]:
    """With the default ``evaluate``, every kept output is a metric of the record under its
    own name: an output named like a field the record states elsewhere (``delta``, ``dataset``,
    a configuration field) collided with it only after the run. Outputs computed per instance
    (a property) are not known here."""
    # the class evaluate comes from; the base Experiment is the one that also defines
    # check_class (registry cannot import it: experiment imports registry)
    owner = next((c for c in getattr(experiment, "__mro__", ()) if "evaluate" in vars(c)), None)
    if owner is None or "check_class" not in vars(owner):
        return []  # an own evaluate names its own metrics
    declared = getattr(getattr(experiment, "outputs", None), "declared", None)
    if not isinstance(declared, tuple):
        return []
    config = method.config
    fields = {f.name for f in dataclasses.fields(config)} if dataclasses.is_dataclass(config) \
        else set()  # fmt: skip
    stated = RECORD_RESERVED | NON_PRIVATE_STATED | DATA_STATED | {"epsilon"} | fields
    return [
        f"output {output.name!r} is kept as a metric of that name (the default evaluate), "
        "named like a field the record states beside the metrics; rename the output or "
        "override evaluate"
        for output in declared
        if getattr(output, "name", None) in stated
    ]


def _legacy_attributes(experiment: Any) -> dict[str, Any]:
    """The metric attributes of an earlier version an experiment class (or instance) sets, by
    the :class:`Metrics` field each now is."""
    return {field: getattr(experiment, attribute)
            for attribute, field in LEGACY_METRIC_ATTRIBUTES.items()
            if hasattr(experiment, attribute)}  # fmt: skip


def _legacy_metrics(experiment: Any) -> Metrics | None:
    """The metrics ``experiment`` (a class or an instance) states in attributes of an earlier
    version (``None`` when it states none)."""
    stated = _legacy_attributes(experiment)
    return Metrics(**stated) if stated else None


def check_legacy_metrics(method: Method, experiment: type) -> None:
    """An experiment class that still sets ``selection_metric``, ``selection_maximize`` or
    ``report_metric`` (the metrics of earlier versions): a ``DeprecationWarning`` naming the
    ``metrics=Metrics(...)`` to declare instead, when the method declares none (the attributes
    are still read then); ``ValueError`` when they contradict the method's declared metrics."""
    stated = _legacy_attributes(experiment)
    if not stated:
        return
    attributes = {field: attribute for attribute, field in LEGACY_METRIC_ATTRIBUTES.items()}
    if method.metrics is None:
        written = ", ".join(f"{field}={value!r}" for field, value in stated.items())
        warnings.warn(
            f"method {method.name}: {experiment.__name__} sets "
            f"{', '.join(attributes[f] for f in stated)}, which are deprecated: declare "
            f"metrics=Metrics({written}) in its Method(...) or @register_method(...) "
            "(from jfed.methods import Metrics) and delete the class attributes",
            DeprecationWarning,
            stacklevel=_caller_outside_jfed(),
        )
        return
    declared = method.metrics_of(method.config())  # a function is asked at the defaults
    contradictions = [
        f"{experiment.__name__}.{attributes[field]} = {value!r} but the declaration states "
        f"metrics.{field} = {getattr(declared, field)!r}"
        for field, value in stated.items() if value != getattr(declared, field)
    ]  # fmt: skip
    if contradictions:
        raise ValueError(
            f"method {method.name}: " + "; ".join(contradictions) + " (the declaration's "
            "metrics are what jfed reads: delete the class attributes)"
        )


def _caller_outside_jfed() -> int:
    """The ``stacklevel`` of a warning raised by this module's caller that points at the first
    frame outside the jfed package (the registration the user wrote)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame: Any = sys._getframe(1)  # the frame that calls warnings.warn: level 1
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(package + os.sep):
        frame, level = frame.f_back, level + 1
    return level
