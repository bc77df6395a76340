"""The experiment of a method: what the runner (``jfed.sweep``) asks of every method, built-in or
a user's, and the outputs it keeps, declared as data.

An experiment is built from a method's configuration with its fixed fields (the data set, the
rounds, the static shape of the program); each run's configuration differs from it only in eps,
the seed and the tunable fields. A subclass of :class:`Experiment` provides:

- ``population`` (or ``task`` with ``task.train``): the clients the engine streams;
- ``algorithm``: the static ``init`` + ``round`` program (:class:`jfed.engine.Algorithm`);
- ``calibrate(config) -> (hyperparams, privacy)``: the traced hyper-parameters of one run and
  what it certifies, a :class:`~jfed.privacy.PrivacyGuarantee` (or a dict of record fields with
  at least :data:`PRIVACY_FIELDS`);
- ``outputs``: the arrays kept on the device, a tuple of :class:`Output` (name, source, reduction);
- ``evaluate(outputs, config) -> metrics``: host metrics from the kept arrays (float64).

and may override ``rounds`` (default: the configuration's ``rounds``, else 1), ``prepare(configs)``
(host work of a whole grid at once that sizes the program: a cohort's capacity, a noise grid),
``calibrate_all(configs)`` (a batched calibration), ``identity()`` (the record's data fields),
``shared_noise_algorithm``, ``default_plan()`` and ``summary(record)``. How a sweep tunes and what
a run reports is metadata of the method's declaration, not of its experiment:
``Method(..., metrics=Metrics(selection, maximize, report))`` (:class:`jfed.methods.Metrics`).

What the runner asks, in order: :meth:`Experiment.frozen` once per sweep (the frozen
:class:`Program` built from the fixed fields and the sweep's configurations: population,
algorithm, outputs, rounds), :meth:`Experiment.calibrate_all` once per slice (the
hyper-parameters and privacy fields of a batch of runs, a function of their configurations
alone), then :meth:`Experiment.evaluate` per run and the record's descriptive fields
(``identity()``, ``rounds``). Inside :meth:`Experiment.frozen` the releases a run is certified
for are traced from the frozen program, never from the experiment's attributes of the moment.

Mistakes an author can make are reported when the class is defined or registered, naming the
method, the member and what is expected, not from inside a compiled program.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from jfed.methods.config import Config
from jfed.methods.fields import FixedFields
from jfed.methods.record_fields import RecordFields, declared, kinds_of, labels
from jfed.privacy import PrivacyGuarantee

PRIVACY_FIELDS = ("epsilon_certified", "delta", "accountant", "notion", "protected",
                  "trust_model")  # fmt: skip
REDUCTIONS = ("all", "last", "mean", "sum")
SOURCES = ("state", "infos")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Output:
    """One array a run keeps, read from the final state or from the per-round infos.

    Attributes:
      name: the key it is kept under (``evaluate`` receives ``{name: array}``).
      source: a dotted path into ``state`` or ``infos``, e.g. ``"state.params"`` (any pytree)
        or ``"infos.loss"`` (leading axis: rounds); mapping keys and tuple positions
        (``"state.0"``) are path parts too.
      reduce: over the rounds axis of an ``infos`` source: ``"all"`` (keep ``[rounds, ...]``),
        ``"last"``, ``"mean"`` or ``"sum"``; a ``state`` source must keep ``"all"``.

    Example: ``Output("accuracy_per_round", "infos.accuracy")`` keeps ``f32[rounds]``.
    """

    name: str
    source: str
    reduce: str = "all"
    kind: str | None = None
    """Where the default ``evaluate`` keeps it under its name: ``"inside"`` the guarantee (a
    post-processing of the noised releases), ``"outside"`` it (an unnoised statistic of client
    data: listed in a private record's ``not_private_fields``) or ``"public"``
    (:mod:`jfed.methods.record_fields`); ``None``: classified by the experiment's
    ``record_fields``, else outside."""

    def problems(self) -> list[str]:
        """What is wrong with this declaration (empty when nothing is)."""
        from jfed.methods.record_fields import INSIDE, OUTSIDE, PUBLIC

        found = []
        if self.kind not in (None, INSIDE, OUTSIDE, PUBLIC):
            found.append(
                f"output {self.name!r} has kind={self.kind!r}; expected None, 'inside', "
                "'outside' or 'public'"
            )
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            found.append(f"output name {self.name!r} is not an identifier")
        parts = self.source.split(".") if isinstance(self.source, str) else []
        if len(parts) < 1 or parts[0] not in SOURCES or not all(parts):
            found.append(
                f"output {self.name!r} has source {self.source!r}; expected 'state' or "
                "'infos' followed by a dotted path, e.g. 'state.params' or 'infos.loss'"
            )
        if self.reduce not in REDUCTIONS:
            found.append(
                f"output {self.name!r} has reduce={self.reduce!r}; expected one of "
                f"{list(REDUCTIONS)}"
            )
        elif parts[:1] == ["state"] and self.reduce != "all":
            found.append(f"output {self.name!r} reads the final state: reduce must be 'all'")
        return found


@dataclass(frozen=True)
class Outputs:
    """The declared outputs of an experiment, as one hashable function ``(state, infos) ->
    {name: array}`` (hashable, so a compiled program is reused by every experiment that keeps
    the same arrays of the same algorithm)."""

    declared: tuple[Output, ...]

    def __call__(self, state: Any, infos: Any) -> dict:
        import jax.numpy as jnp

        reductions = {"last": lambda x: x[-1], "mean": lambda x: jnp.mean(x, axis=0),
                      "sum": lambda x: jnp.sum(x, axis=0)}  # fmt: skip
        kept = {}
        for output in self.declared:
            root, *path = output.source.split(".")
            value = _follow(state if root == "state" else infos, root, path, output.name)
            if output.reduce != "all":
                import jax

                value = jax.tree.map(reductions[output.reduce], value)
            kept[output.name] = value
        return kept


def _follow(value: Any, root: str, path: list[str], name: str) -> Any:
    """``value.a.b`` (attributes, mapping keys, or positions ``0``, ``1`` of a tuple), with an
    error naming what exists where a part is missing (raised while the program is traced,
    before it runs)."""
    where = root
    for part in path:
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif hasattr(value, part):
            value = getattr(value, part)
        elif isinstance(value, (tuple, list)) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise ValueError(f"output {name!r}: {where} has no {part!r}; it has {_members(value)}")
        where = f"{where}.{part}"
    return value


def _members(value: Any) -> list[str]:
    """The parts a path may name next: keys, fields, or positions."""
    if isinstance(value, Mapping):
        return sorted(map(str, value))
    fields = getattr(value, "_fields", None) or getattr(value, "__dataclass_fields__", None)
    if fields:
        return list(fields)
    if isinstance(value, (tuple, list)):
        return [str(i) for i in range(len(value))]
    return sorted(a for a in vars(type(value)) if not a.startswith("_"))


def declared_outputs(outputs: Any, owner: str) -> Outputs:
    """``outputs`` (an :class:`Outputs`, or a sequence of :class:`Output`) checked and made
    hashable; ``ValueError`` naming ``owner`` and every problem otherwise."""
    if isinstance(outputs, Outputs):
        items = outputs.declared
    elif isinstance(outputs, (list, tuple)) and outputs:
        items = tuple(outputs)
    else:
        raise ValueError(
            f"{owner}: expected outputs to be a non-empty tuple of jfed.methods.Output, got "
            f"{outputs!r}"
        )
    problems = []
    for item in items:
        if not isinstance(item, Output):
            problems.append(f"{item!r} is not a jfed.methods.Output")
        else:
            problems += item.problems()
    names = [item.name for item in items if isinstance(item, Output)]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        problems.append(f"output names repeated: {repeated}")
    if problems:
        raise ValueError(f"{owner}: malformed outputs: " + "; ".join(problems))
    return Outputs(tuple(items))


def guarantee_fields(guarantee: PrivacyGuarantee, sigma: float | None = None) -> dict:
    """The privacy fields of a record from what the accountant certified (and the noise std
    ``sigma`` of one release, where the method has one):
    :meth:`~jfed.privacy.PrivacyGuarantee.record_fields`."""
    return guarantee.record_fields(sigma)


def non_private_fields(method) -> dict:
    """The privacy fields of a run of a non-private method (``method``: its declaration)."""
    return {
        "epsilon_certified": math.inf,
        "delta": 0.0,
        "accountant": "none",
        "notion": "none (non-private)",
        "protected": method.protected,
        "trust_model": method.trust_model,
        "sigma": 0.0,
    }


def timings(record: dict) -> str:
    """The run's host and device times as every summary line ends: run, compile and
    calibration seconds (``calibration_seconds``: calibrating the noise to the target eps and
    certifying it; absent from records written before it was kept)."""
    calibration = record.get("calibration_seconds")
    shown = "" if calibration is None else f", {calibration:.2f} s calibration"
    return f"{record['run_seconds']:.2f} s run, {record['compile_seconds']:.2f} s compile{shown}"


def guarantee_of(record: dict) -> PrivacyGuarantee:
    """The guarantee a record states (for its summary line)."""
    epsilon = record.get("epsilon_certified")
    return PrivacyGuarantee(
        epsilon=float(record["epsilon"] if epsilon is None else epsilon),
        delta=float(record["delta"]),
        accountant=str(record["accountant"]),
        notion=str(record["notion"]),
        protected=str(record["protected"]),
        trust_model=str(record["trust_model"]),
    )


ConfigT = TypeVar("ConfigT", bound=Config)


class NoiseCalibration(NamedTuple):
    """The noise of one private run and how its target delta splits
    (:meth:`Experiment.calibrate_noise`)."""

    noise_multiplier: float
    """z, the least that meets the target at ``delta_accountant``."""
    accountant: Any
    """The accountant that certifies (the target's)."""
    delta: float
    """The target delta: the sum of the parts below."""
    delta_accountant: float
    """What is left to the accountant."""
    overflow: float
    """The padded cohorts' overflow term at the target eps."""
    overflow_per_round: float
    """The probability that a round's cohort overflows."""
    coupling: float | None
    """The coupling's term for exact noise certified through continuous Gaussians (``None``:
    not coupled)."""


_CALIBRATIONS: dict[tuple, float] = {}
"""Noise multipliers already searched, by setting (:meth:`Experiment.noise_multiplier_for`)."""


def _without_seed(config: Config) -> Config:
    """``config`` with its seed at 0: the seeds of one setting share a calibration."""
    return config.replace(seed=0) if hasattr(config, "seed") else config


class Program(NamedTuple):
    """The frozen program of a sweep (:meth:`Experiment.build_program`): what the engine
    compiles and runs for every configuration of the sweep. Built once from the method's fixed
    fields and the sweep's configurations (which may size it: a Poisson cohort's capacity for the
    largest eps, a noise grid every eps fits); the runs differ only in their traced
    hyper-parameters and keys."""

    population: Any
    """The clients the engine streams (a :mod:`jfed.data` population)."""
    algorithm: Any
    """The static ``init`` + ``round`` program (:class:`jfed.engine.Algorithm`)."""
    outputs: Outputs
    """The arrays kept on the device (:class:`Outputs`)."""
    rounds: int
    """Rounds of every run."""
    shared_noise_algorithm: Any = None
    """The program of units whose eps share their noise draws (``None``: every run alone)."""


class CanaryAudit:
    """What an experiment audited by canaries (``--audit-canaries M``: canary clients through
    :class:`~jfed.privacy.canary_aggregator.WithCanaries`, canary records through the silo
    methods' :class:`~jfed.algorithms.silo_aggregators.CanaryRecords`) shares: the canary count,
    the output that keeps their final state, and the record's audit fields. A subclass names the
    release its canaries are scored against (``audited_release``) when the run makes more than
    one, and may state the audit at another delta (:meth:`audit_delta`) or add record fields
    (:meth:`audit_context`)."""

    record_fields = RecordFields(
        inside=("audit_epsilon_lower", "audit_epsilon_estimate"),
        public=("audit_confidence", "audit_estimator", "audit_canary_count", "audit_delta",
                "audit_notion", "audit_silo"),
    )  # fmt: skip
    """The audit scores the canaries (not in the protected population) on the noised outputs;
    the rest states how."""

    base_config: Any
    audited_release: str | None = None
    """The release the canaries take part in and are scored against (None: the run's one)."""

    @property
    def canaries(self) -> int:
        """Canary clients of the run's audit (``--audit-canaries``; 0: none)."""
        return int(getattr(self.base_config, "audit_canaries", 0))

    def canary_outputs(self, source: str) -> tuple[Output, ...]:
        """The output of the canaries' final state at ``source`` (the wrapper's state in the
        run's state) for an audited run; nothing otherwise."""
        return (Output("canaries", source),) if self.canaries else ()

    def audit_delta(self, config: Any) -> float:
        """The delta the audit's bound is stated at: the run's (``delta_of(config)``)."""
        return self.delta_of(config)  # type: ignore[attr-defined]

    def audit_context(self) -> dict:
        """Record fields an audit adds beside the estimator's (default: none)."""
        return {}

    def audit_fields(self, outputs: dict, config: Any) -> dict:
        """The audit of an audited run: the one-run lower bound at :meth:`audit_delta` from its
        canaries' scores (:func:`jfed.privacy.canary_aggregator.audit`), beside the certified
        eps, with :meth:`audit_context`; nothing for a run without canaries."""
        if not self.canaries:
            return {}
        import jax
        import numpy as np

        from jfed.privacy.canary_aggregator import audit

        state = jax.tree.map(np.asarray, outputs["canaries"])
        fields = audit(state, self.audit_delta(config)).to_fields()
        if self.audited_release is not None:
            fields["audit_notion"] += f"; canaries in and scored against {self.audited_release}"
        return fields | self.audit_context()


class Experiment(Generic[ConfigT]):
    """Base of every method's experiment (see the module docstring for what a subclass gives).

    ``class MyExperiment(Experiment[MyConfig])`` lets a type checker see ``MyConfig``'s fields in
    ``self.config`` and in the ``config`` of :meth:`calibrate` / :meth:`evaluate`; a plain
    ``Experiment`` base works the same at run time.

    Args:
      config: the method's configuration; its fixed fields shape the experiment.
    """

    shared_noise_algorithm = None
    outputs: Any = None
    default_accountant: Any = None
    record_fields: RecordFields = RecordFields()
    """The kinds of the metrics ``evaluate`` returns (merged along the class hierarchy with the
    declared outputs' ``kind``): inside the guarantee, outside it, or public
    (:mod:`jfed.methods.record_fields`). A metric nobody classified is counted outside and
    listed in the record's ``unclassified_fields``."""
    calibration_tolerance: float = 1e-6
    """Absolute tolerance of the search for the noise multiplier z (:meth:`calibrate_noise`)."""
    search_discretization: float | None = None
    """PLD's value discretization while searching z (``None``: the certifying accountant's own).
    PLD's bound is an upper bound at any discretization, so a coarser search finds a z whose
    certificate at the finer one meets the target too (faster, a slightly larger z)."""
    overflow_share: float = 0.5
    """The largest share of the target delta a padded cohort's overflow may take before a run
    is refused (a capacity sized for the sweep's largest eps keeps it far below)."""

    if TYPE_CHECKING:  # every subclass defines it (a property); declared here for the checker

        @property
        def algorithm(self) -> Any:
            """The static ``init`` + ``round`` program (:class:`jfed.engine.Algorithm`)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = cls.__dict__.get("outputs")
        if declared is not None and not isinstance(declared, property):
            cls.outputs = declared_outputs(declared, f"{cls.__qualname__}.outputs")

    def __init__(self, config: ConfigT) -> None:
        from jfed.methods.registry import method_of

        self.base_config = config.check()
        self.method = method_of(config)
        self.name = self.method.name

    @property
    def config(self) -> ConfigT:
        """The fixed configuration the program is built from (:class:`FixedFields`): reading a
        field that varies from run to run (eps, the seed, a tunable field) raises, since its
        base value would be fixed silently for every run of a sweep; each run's value reaches
        :meth:`calibrate` and :meth:`evaluate` as their ``config``."""
        return FixedFields(self.base_config, self.name)  # type: ignore[return-value]

    # -- what a subclass may keep as it is
    @property
    def population(self) -> Any:
        """The clients the engine streams: what was assigned, else ``self.task.train``."""
        if "_population" in self.__dict__:
            return self.__dict__["_population"]
        task = getattr(self, "task", None)
        if task is None:
            raise ValueError(
                f"method {self.name}: {type(self).__name__} sets neither `population` nor "
                "`task` (with `task.train`): the runner has no clients to run"
            )
        return task.train

    @population.setter
    def population(self, population: Any) -> None:
        self.__dict__["_population"] = population

    @property
    def rounds(self) -> int:
        """Rounds of one run (default: the configuration's ``rounds``, else 1)."""
        return int(getattr(self.base_config, "rounds", 1))

    def prepare(self, configs: list[ConfigT]) -> None:
        """Host work of a sweep's configurations ``configs`` at once, before :attr:`algorithm` is
        read: what sizes the program (default: nothing)."""
        del configs  # nothing shared to size up front

    def build_program(self, configs: list[ConfigT]) -> Program:
        """The frozen :class:`Program` that runs every configuration of ``configs``:
        :meth:`prepare` on them, then the population, algorithm, outputs and rounds as they are
        after it. The runner builds it once per sweep (:meth:`frozen`) and reads the
        experiment's program only through it."""
        if not configs:
            raise ValueError(
                f"method {self.name}: build_program() needs at least one configuration"
            )
        self.prepare(list(configs))
        outputs = self.outputs
        if not isinstance(outputs, Outputs):
            outputs = declared_outputs(outputs, f"{type(self).__qualname__}.outputs")
        return Program(self.population, self.algorithm, outputs, int(self.rounds),
                       self.shared_noise_algorithm)  # fmt: skip

    @contextmanager
    def frozen(self, configs: list[ConfigT]) -> Iterator[Program]:
        """``with experiment.frozen(configs) as program:`` the program of ``configs``
        (:meth:`build_program`), in force until the block ends: calibration inside it traces the
        releases of that program (:meth:`running`), whatever the experiment's attributes become
        meanwhile, so a run is certified for the program that ran. The runner runs a sweep
        inside this block."""
        program = self.build_program(configs)
        self.__dict__["_frozen_program"] = program
        try:
            yield program
        finally:
            self.__dict__.pop("_frozen_program", None)

    def running(self) -> tuple[Any, Any]:
        """``(algorithm, population)`` that runs: the frozen program's inside :meth:`frozen`,
        else the experiment's own. The ledger a run is calibrated and certified from is traced
        from these."""
        program = self.__dict__.get("_frozen_program")
        if program is not None:
            return program.algorithm, program.population
        return self.algorithm, self.population

    def default_plan(self):
        """The engine plan when the caller gives none: sized for the backend."""
        from jfed.engine import ExecutionPlan

        return ExecutionPlan.for_backend()

    def identity(self) -> dict:
        """Fields of every record that describe the data (default: the client count, and the
        configuration's ``dataset`` where it has one)."""
        fields: dict = {"n_clients": int(self.population.n_clients)}
        if hasattr(self.config, "dataset"):
            fields["dataset"] = getattr(self.config, "dataset_label", self.config.dataset)
        return fields

    def hyperparams(self, config: ConfigT, noise_multiplier: float | None) -> Any:
        """The traced hyper-parameters of one run whose aggregators' noise multiplier is
        ``noise_multiplier`` (``None`` for a non-private method): a pytree of arrays in which
        every aggregator's parameters sit unchanged (e.g. ``{"privacy":
        GaussianSumParams(clip, z), "learning_rate": ...}``). Define it (instead of
        :meth:`calibrate`) and the runner calibrates z to the configuration's eps and certifies
        the run from the releases its aggregators make: no event code of your own."""
        raise NotImplementedError(
            f"method {self.name}: {type(self).__name__} must define hyperparams(config, "
            "noise_multiplier) or calibrate(config)"
        )

    def privacy_target(self, config: ConfigT) -> tuple[float, float, Any]:
        """``(epsilon, delta, accountant)`` a private run is calibrated to: the configuration's
        ``epsilon``, ``delta`` and ``accountant`` (a key of :data:`jfed.privacy.ACCOUNTANTS`;
        default :attr:`default_accountant`, else PLD)."""
        from jfed.privacy.accounting import Pld, accountant_named

        name = getattr(config, "accountant", None)
        if isinstance(name, str):
            accountant = accountant_named(name)
        else:
            accountant = self.default_accountant or Pld()
        return float(config.epsilon), float(config.delta), accountant  # type: ignore[attr-defined]

    def ledger(self) -> Any:
        """The releases one round of the running algorithm makes (:meth:`running`;
        :func:`jfed.engine.trace_releases`, traced once per algorithm, with the structure of
        ``hyperparams(config, 1.0)``)."""
        from jfed.engine import trace_releases

        algorithm, population = self.running()
        cache = self.__dict__.setdefault("_ledgers", {})
        if algorithm not in cache:
            # the base values give the structure of the hyper-parameters (the numbers are unused)
            structure = self.hyperparams(self.base_config, 1.0 if self.method.private else None)
            cache[algorithm] = trace_releases(algorithm, population, structure)
        return cache[algorithm]

    def releases_per_round(self) -> int | None:
        """The releases one round RUNS as :meth:`ledger` counts them, which the runner checks
        against the count of the program that ran (``None`` for a method with no ledger: one
        that defines neither :meth:`hyperparams` nor :meth:`ledger`)."""
        cls = type(self)
        if cls.hyperparams is Experiment.hyperparams and cls.ledger is Experiment.ledger:
            return None
        return self.ledger().releases_per_round

    def run_event(self, hyper: Any) -> Any:
        """The ``DpEvent`` of a whole run at host hyper-parameters ``hyper``: the ledger's
        releases composed over :attr:`rounds` (:meth:`accounted` maps it for an accountant)."""
        return self.accounted(self.ledger().event(hyper, self.rounds))

    def accounted(self, event: Any, accountant: Any = None) -> Any:
        """The event ``accountant`` certifies for the ledger's ``event``: where it certifies the
        run's exact noise through the continuous Gaussian that noise is coupled to
        (:func:`jfed.engine.delta_terms.couples`: a continuous accountant, a release on coupled
        noise), every central discrete Gaussian replaced by it, the coupling's share of delta
        reserved by :meth:`calibrate_noise`; else ``event`` (also without an accountant)."""
        from jfed.engine import delta_terms

        if accountant is None or not delta_terms.couples(self.ledger(), accountant):
            return event
        try:
            return delta_terms.coupled(event)
        except ValueError as error:  # a release whose noise is too small to couple
            from jfed._validation import UsageError

            raise UsageError(f"method {self.name}: {error}{self.coupling_advice()}") from None

    def coupling_advice(self) -> str:
        """What the refusal of a noise too small to couple advises (appended to it)."""
        return "; or use --accountant discrete-rdp"

    def noise_multiplier_for(
        self, config: ConfigT, build: Any, epsilon: float, delta: float, accountant: Any,
        tolerance: float = 1e-6,
    ) -> float:  # fmt: skip
        """The least z with ``run_event(build(z))`` (eps, delta)-DP under ``accountant`` and the
        ledger's adjacency: one search per setting (every seed of a sweep shares it)."""
        from jfed.privacy.accounting import calibrate

        key = (type(self).__qualname__, self.name, _without_seed(config), self.running()[0],
               float(epsilon), float(delta), accountant, float(tolerance))  # fmt: skip
        if key not in _CALIBRATIONS:
            ledger = self.ledger()
            _CALIBRATIONS[key] = calibrate(
                lambda z: self.accounted(ledger.event(build(z), self.rounds), accountant),
                epsilon, delta, accountant=accountant, adjacency=ledger.adjacency,
                tolerance=tolerance,
            )  # fmt: skip
        return _CALIBRATIONS[key]

    def certify_run(self, hyper: Any, delta: float, accountant: Any) -> PrivacyGuarantee:
        """What ``accountant`` certifies at ``delta`` for the releases of a run at ``hyper``,
        stated with the method's notion, protected unit and trust model."""
        from jfed.privacy.accounting import certify

        return certify(
            self.accounted(self.run_event(hyper), accountant), delta, accountant=accountant,
            adjacency=self.ledger().adjacency, notion=self.method.notion,
            protected=self.method.protected, trust_model=self.method.trust_model,
        )  # fmt: skip

    def reach_delta(self, hyper: Any, config: ConfigT) -> float:
        """The delta float noise's bounded reach adds over the run at ``hyper``, from the
        releases that draw it (:func:`jfed.engine.delta_terms.reach`); 0 for exact noise."""
        from jfed.engine import delta_terms

        del config  # the run's releases and rounds say it all
        return delta_terms.reach(self.ledger(), hyper, self.rounds)

    def calibrate_noise(self, config: ConfigT) -> NoiseCalibration:
        """The least noise multiplier z meeting :meth:`privacy_target` once every delta term
        the run's releases state is reserved from the target delta
        (:mod:`jfed.engine.delta_terms`): a padded cohort's overflow and a coupling's total
        variation at the target eps, then float noise's bounded reach (first
        :data:`~jfed.privacy.calibration.SAMPLER_SHARE` of delta, more where it needs more:
        :func:`~jfed.privacy.calibration.least_within_reach`). The accountant certifies the
        rest. ``UsageError`` where a padded cohort overflows too often (more than
        :attr:`overflow_share` of delta) or the reach alone needs half of delta."""
        from jfed._validation import UsageError
        from jfed.engine import delta_terms
        from jfed.privacy.accounting import Pld
        from jfed.privacy.calibration import least_within_reach
        from jfed.privacy.discrete_accounting import check_coupling_share

        epsilon, delta, accountant = self.privacy_target(config)
        ledger, rounds = self.ledger(), self.rounds
        per_round, overflow = delta_terms.overflow(ledger, epsilon, rounds)
        if overflow > self.overflow_share * delta * 1.0001:
            raise UsageError(
                f"method {self.name}: a padded Poisson cohort overflows its capacity too often "
                f"for eps={epsilon} (delta share {overflow / delta:.2g}); run the configurations "
                "of a sweep together so the capacity fits the largest eps, or raise the capacity "
                "(jfed.engine.Poisson.for_privacy)"
            )
        coupling = None
        if delta_terms.couples(ledger, accountant):
            # the coordinates drawn do not depend on z: the event at z = 1 counts them
            coupling = delta_terms.coupling(ledger.event(self.hyperparams(config, 1.0), rounds),
                                            epsilon)  # fmt: skip
            check_coupling_share(epsilon, coupling, delta)  # e^eps can exceed any delta
        extra = overflow + (coupling or 0.0)
        search = accountant
        if isinstance(accountant, Pld) and self.search_discretization is not None:
            search = Pld(self.search_discretization)
        build = functools.partial(self.hyperparams, config)

        def least(share: float) -> float:
            return self.noise_multiplier_for(config, build, epsilon, delta - extra - share,
                                             search, self.calibration_tolerance)  # fmt: skip

        def reach(z: float) -> float:
            return delta_terms.reach(ledger, build(z), rounds)

        offered = hasattr(config, "noise")  # a method that offers exact noise
        z, reserve = least_within_reach(
            least, reach if delta_terms.floating(ledger) else None, delta,
            f"method {self.name}: eps={epsilon}" + (" with --noise float" if offered else ""),
            "use --noise discrete (exact, no reach)" if offered
            else "lower --epsilon (its float32 noise cannot certify this one)",
        )  # fmt: skip
        return NoiseCalibration(z, accountant, delta, delta - extra - reserve, overflow,
                                per_round, coupling)  # fmt: skip

    def statement(self, guarantee: PrivacyGuarantee) -> PrivacyGuarantee:
        """The guarantee as the run's noise states it: a run on float noise is the ideal
        real-valued mechanism's (:data:`~jfed.privacy.IDEAL_MECHANISM` appended to its notion);
        exact noise as certified."""
        from jfed.engine import delta_terms
        from jfed.privacy.guarantee import IDEAL_MECHANISM

        if not delta_terms.floating(self.ledger()) or IDEAL_MECHANISM in guarantee.notion:
            return guarantee
        return dataclasses.replace(guarantee, notion=f"{guarantee.notion} ({IDEAL_MECHANISM})")

    def calibration_fields(self, config: ConfigT, noise_multiplier: float, hyper: Any) -> dict:
        """Record fields a method adds to a private run's privacy fields (default: none): its
        noise's description, say, at the calibrated ``noise_multiplier`` and ``hyper``."""
        del config, noise_multiplier, hyper
        return {}

    def calibrate(self, config: ConfigT) -> tuple[Any, PrivacyGuarantee | dict]:
        """``(hyperparams, privacy)`` of one run: traced hyper-parameters (a pytree of arrays)
        and what the run certifies.

        The one calibration path of every method written on aggregators (:meth:`hyperparams`):
        a private run's z is calibrated to :meth:`privacy_target` with every delta term its
        releases state reserved (:meth:`calibrate_noise`), certified for those releases at the
        delta left to the accountant, and stated as the noise states it (:meth:`statement`);
        the record's ``delta`` is the target, its parts ``delta_accountant``,
        ``delta_overflow``, ``delta_sampler`` (float noise's reach) and, for coupled exact
        noise, ``delta_coupling``. A non-private run states no guarantee."""
        from jfed.engine import delta_terms
        from jfed.engine.cohort import Poisson
        from jfed.privacy.guarantee import IDEAL_MECHANISM

        if not self.method.private:
            return self.hyperparams(config, None), non_private_fields(self.method)
        noise = self.calibrate_noise(config)
        hyper = self.hyperparams(config, noise.noise_multiplier)
        guarantee = self.statement(self.certify_run(hyper, noise.delta_accountant,
                                                    noise.accountant))  # fmt: skip
        ledger = self.ledger()
        rates = [r.cohort.rate for r in ledger.releases if isinstance(r.cohort, Poisson)]
        fields = guarantee_fields(guarantee) | {
            "delta": noise.delta,
            "delta_accountant": guarantee.delta,
            "delta_overflow": noise.overflow,
            "delta_sampler": self.reach_delta(hyper, config),
            "overflow_probability_per_round": noise.overflow_per_round,
            "noise_multiplier": self.ran_multiplier(hyper),
            "sampling_rate": rates[0] if rates else None,
        }
        if delta_terms.floating(ledger):
            fields["mechanism_model"] = IDEAL_MECHANISM
        if noise.coupling is not None:
            fields["delta_coupling"] = noise.coupling
        return hyper, fields | self.calibration_fields(config, noise.noise_multiplier, hyper)

    def ran_multiplier(self, hyper: Any) -> float | None:
        """The Gaussian noise multiplier of the round's first release as it ran (its float32
        parameters, combined as its event combines them); ``None`` when that release is not a
        Gaussian one."""
        releases = self.ledger().releases
        if not releases:
            return None
        first = releases[0]
        event = first.aggregator.event(first.params(hyper))
        return getattr(event, "noise_multiplier", None)

    def metric_kinds(self) -> dict[str, str]:
        """``{metric: kind}`` the method declares: :attr:`record_fields` along the class
        hierarchy, and the kept outputs' ``kind``."""
        outputs = self.outputs
        kept = outputs.declared if isinstance(outputs, Outputs) else tuple(outputs or ())
        return declared(reversed(type(self).__mro__), kept).kinds()

    @classmethod
    def declared_kinds(cls) -> dict[str, str]:
        """``{metric: kind}`` the class declares without being built (:attr:`record_fields`
        along its hierarchy, and the ``kind`` of outputs declared as a class attribute)."""
        outputs = cls.outputs.declared if isinstance(cls.outputs, Outputs) else ()
        return declared(reversed(cls.__mro__), outputs).kinds()

    def field_labels(self, sections: dict[str, dict]) -> dict:
        """A record's classification fields from its ``sections`` (:func:`jfed.sweep.schema.
        sections`): a private run's ``not_private_fields`` and ``secret_fields``, and
        ``unclassified_fields`` where a metric has no declared kind
        (:mod:`jfed.methods.record_fields`)."""
        return labels(kinds_of(sections, self.metric_kinds()), self.method.private)

    def evaluate(self, outputs: dict, config: ConfigT) -> dict:
        """Host metrics of one run (default: every kept array, scalars as floats)."""
        del config
        return {k: float(v) if getattr(v, "ndim", 0) == 0 else v.tolist()
                for k, v in outputs.items()}  # fmt: skip

    @staticmethod
    def summary(record: dict) -> str:
        """The one line ``jfed run`` prints (default: the reported metric and the guarantee)."""
        metric = record.get("report_metric")
        shown = f"{metric} {record[metric]:.4g}" if metric in record else "done"
        refused = record.get("certificate_refused")  # then no eps is shown, only why
        privacy = f"no certificate ({refused})" if refused else guarantee_of(record).describe()
        return f"{record['method']}: {shown} | privacy: {privacy} | {timings(record)}"

    @classmethod
    def check_class(cls, name: str) -> None:
        """``ValueError`` naming method ``name`` and the member when this class lacks what the
        runner asks of it (called when the method is registered or its experiment loads)."""
        problems = []
        if (cls.calibrate is Experiment.calibrate and cls.hyperparams is Experiment.hyperparams
                and cls.calibrate_all is Experiment.calibrate_all):  # fmt: skip
            problems.append(
                "none of hyperparams(config, noise_multiplier), calibrate(config) -> "
                "(hyperparams, privacy) or calibrate_all(configs) is defined"
            )
        if not isinstance(cls.outputs, (Outputs, property)):
            problems.append(
                "outputs is not declared (a tuple of jfed.methods.Output as a class attribute)"
            )
        if problems:
            raise ValueError(f"method {name}: {cls.__name__}: " + "; ".join(problems))

    def calibrate_all(self, configs: list[ConfigT]) -> list[tuple[Any, Any]]:
        """``[(hyperparams, privacy)]``, one per configuration of ``configs`` in order (each as
        :meth:`calibrate` returns it): a pure function of the runs' configurations and the
        program :meth:`build_program` froze.

        The default calls :meth:`calibrate` once per distinct configuration (repeats, such as a
        padded slice's, share the result); its searches are cached per setting, so the seeds of a
        sweep share one. Override it to calibrate a batch together (e.g. every eps of one setting
        in one pass)."""
        done: dict[Any, tuple[Any, Any]] = {}  # configurations are frozen: hashable
        for config in configs:
            if config not in done:
                done[config] = self.calibrate(config)
        return [done[config] for config in configs]

    # -- what the runner calls
    def calibrated_all(self, configs: list[ConfigT]) -> list[tuple[Any, dict]]:
        """:meth:`calibrate_all`, each privacy statement checked and made the record's fields."""
        results = self.calibrate_all(list(configs))
        if not isinstance(results, list) or len(results) != len(configs):
            raise ValueError(
                f"method {self.name}: calibrate_all must return a list of one (hyperparams, "
                f"privacy) per configuration ({len(configs)}), got "
                f"{len(results) if isinstance(results, list) else type(results).__name__}"
            )
        return [self._checked(result) for result in results]

    def calibrated(self, config: ConfigT) -> tuple[Any, dict]:
        """:meth:`calibrate`, its privacy statement checked and made the record's fields."""
        return self._checked(self.calibrate(config))

    def _checked(self, result: Any) -> tuple[Any, dict]:
        """One calibration's ``(hyperparams, privacy)``, its privacy made the record's fields;
        ``ValueError`` naming the method where it is not one."""
        if not isinstance(result, tuple) or len(result) != 2:
            raise ValueError(
                f"method {self.name}: calibrate must return (hyperparams, privacy), got "
                f"{type(result).__name__}"
            )
        hyperparams, privacy = result
        if isinstance(privacy, PrivacyGuarantee):
            privacy = guarantee_fields(privacy)
        if not isinstance(privacy, dict):
            raise ValueError(
                f"method {self.name}: calibrate's privacy must be a PrivacyGuarantee or a dict "
                f"of record fields, got {type(privacy).__name__}"
            )
        missing = [name for name in PRIVACY_FIELDS if name not in privacy]
        if missing:
            raise ValueError(
                f"method {self.name}: calibrate's privacy lacks {missing} (every record states "
                f"its guarantee: {list(PRIVACY_FIELDS)})"
            )
        return hyperparams, privacy
