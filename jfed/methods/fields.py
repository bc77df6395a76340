"""Typed configuration fields: a default, an allowed range, a unit, a help line and whether a sweep
may vary the field, declared once on a frozen dataclass and read by everything else.

The command line builds its flags from these declarations (:mod:`jfed.cli.generate`), checks
every value against the declared range before JAX is imported, and the run records, the resume
key of a sweep and the README's flag tables all list the same fields. Importing this module loads
no numerical package.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jfed._validation import ConfigurationError, UsageError


@dataclass(frozen=True)
class Range:
    """An interval of allowed values; ``integer`` restricts it to integers.

    Bounds are inclusive unless ``open_low`` / ``open_high``; an infinite bound is always open,
    so a value must be finite unless a bound says otherwise. ``describe()`` gives the phrase of
    the error messages: ``"> 0"``, ``">= 0"``, ``"in (0, 1)"``, ``"in [1, 1000000]"``.
    """

    low: float = -math.inf
    high: float = math.inf
    open_low: bool = False
    open_high: bool = False
    integer: bool = False

    def describe(self) -> str:
        low, high = _number(self.low), _number(self.high)
        if math.isinf(self.high):
            return f"{'>' if self.open_low else '>='} {low}"
        left = "(" if self.open_low else "["
        right = ")" if self.open_high else "]"
        return f"in {left}{low}, {high}{right}"

    def contains(self, value: float) -> bool:
        if isinstance(value, bool):
            return False
        if self.integer and (not math.isfinite(value) or int(value) != value):
            return False
        if not math.isfinite(value):
            return False  # also nan
        above = value > self.low if self.open_low else value >= self.low
        below = value < self.high if self.open_high else value <= self.high
        return above and below

    def check(self, flag: str, value: float) -> float | int:
        """``value`` as int / float if it is in the range, else ``ValueError`` naming ``flag``."""
        if not self.contains(value):
            whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
            kind = "integer " if self.integer and not whole else ""
            raise ConfigurationError(
                f"expected {kind}{flag} {self.describe()}, got {flag}={_number(value)}"
            )
        return int(value) if self.integer else float(value)


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


POSITIVE = Range(0.0, open_low=True)
NONNEGATIVE = Range(0.0)
OPEN_UNIT = Range(0.0, 1.0, open_low=True, open_high=True)
UNIT = Range(0.0, 1.0)
MIN_EPSILON, MAX_EPSILON = 1e-6, 1e6
EPSILON = Range(MIN_EPSILON, MAX_EPSILON)
MAX_ROUNDS = 10**6
MAX_SEED = 2**31 - 1
MAX_CLIENTS = 2**31 - 1


def integers(low: int, high: int) -> Range:
    return Range(low, high, integer=True)


@dataclass(frozen=True)
class Field:
    """One declared configuration field, as read from its dataclass.

    Attributes:
      name: the Python name (``feature_clip``); the flag is ``--feature-clip``.
      kind: ``float``, ``int``, ``bool`` or ``str``.
      default: the default value; ``None`` when the method derives it (``default_text`` says how).
      help: one line, in the user's words.
      unit: what the number measures (``"records"``, ``"rounds"``, ...), or ``""``.
      range: the allowed values of a number (``None`` for choices and switches).
      choices: the allowed strings of a ``str`` field.
      tunable: whether a sweep may vary it per run (``--grid``); the others are fixed per sweep.
      default_text: how a derived default (``None``) is chosen.
      requires: ``(predicate on the configuration, phrase)``: the field may only be given where the
        predicate holds (``"only with --synthetic"``).
      group: the heading the flag is listed under (``data``, ``privacy``, ``method``).
    """

    name: str
    kind: type
    default: Any
    help: str
    unit: str = ""
    range: Range | None = None
    choices: tuple[str, ...] | None = None
    tunable: bool = False
    default_text: str | None = None
    requires: tuple[Callable[[Any], bool], str] | None = None
    group: str = "method"

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def describe_default(self) -> str:
        if self.default_text is not None:
            return self.default_text
        if self.kind is bool:
            return "off" if not self.default else "on"
        return "none" if self.default is None else _number(self.default)

    def check(self, flag: str, value: Any) -> Any:
        """The value converted to the field's kind, or ``ValueError`` (one line) naming ``flag``."""
        if value is None:
            return None
        if self.kind is bool:
            if not isinstance(value, bool):
                raise ConfigurationError(f"expected {flag} to be on or off, got {value!r}")
            return value
        if self.kind is str:
            if self.choices is not None and value not in self.choices:
                raise ConfigurationError(
                    f"unknown {flag} {value!r}; expected one of {list(self.choices)}"
                )
            return value
        if self.range is not None:
            return self.range.check(flag, value)
        return self.kind(value)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "flag": self.flag,
            "type": self.kind.__name__,
            "default": self.default,
            "default_text": self.describe_default(),
            "range": self.range.describe() if self.range is not None else None,
            "choices": list(self.choices) if self.choices else None,
            "unit": self.unit,
            "tunable": self.tunable,
            "only": self.requires[1] if self.requires else None,
            "group": self.group,
            "help": self.help,
        }


def param(
    default: Any,
    help: str,
    *,
    kind: type | None = None,
    unit: str = "",
    range: Range | None = None,
    choices: tuple[str, ...] | None = None,
    tunable: bool = False,
    default_text: str | None = None,
    requires: tuple[Callable[[Any], bool], str] | None = None,
    group: str = "method",
) -> Any:
    """A dataclass field carrying its declaration (see :class:`Field`)."""
    if kind is None:
        if default is None:
            raise TypeError("a field whose default is None must name its kind")
        kind = type(default)
    declaration = dict(
        kind=kind, help=help, unit=unit, range=range, choices=choices, tunable=tunable,
        default_text=default_text, requires=requires, group=group,
    )  # fmt: skip
    return dataclasses.field(default=default, metadata={"jfed": declaration})


GROUPS = ("data", "privacy", "run", "method")  # the order flags are listed in


def fields_of(config: Any) -> tuple[Field, ...]:
    """The declared fields of a configuration class or instance: data, privacy, run, then the
    method's own, each group in declaration order."""
    declared = [
        Field(name=f.name, default=f.default, **f.metadata["jfed"])
        for f in dataclasses.fields(config)
        if "jfed" in f.metadata
    ]
    rank = {group: index for index, group in enumerate(GROUPS)}
    return tuple(sorted(declared, key=lambda f: rank.get(f.group, len(GROUPS))))


def field_map(config: Any) -> dict[str, Field]:
    return {f.name: f for f in fields_of(config)}


def check_config(config: Any) -> None:
    """Every field of ``config`` in its declared range, and given only where it applies.

    Raises ``ValueError`` naming the flag, e.g. ``expected --beta >= 0, got --beta=-1``."""
    for declared in fields_of(config):
        value = getattr(config, declared.name)
        declared.check(declared.flag, value)
        if declared.requires is not None and value != declared.default:
            applies, phrase = declared.requires
            if not applies(config):
                raise ConfigurationError(f"{declared.flag} applies {phrase}")


class FixedFields:
    """A configuration as an experiment's program may read it: its fixed fields.

    The fields that vary across a sweep's runs (``epsilon``, ``seed`` and every tunable field)
    raise :class:`~jfed._validation.UsageError` naming the method and the field: read there, the
    base configuration's value would be fixed silently for every run. ``replace`` and every other
    attribute are the configuration's own.

    Args:
      config: the configuration.
      method: the method's name (for the error).
      reader: what reads it, as the error names it (``self.config`` in an experiment).
    """

    def __init__(self, config: Any, method: str, reader: str = "self.config") -> None:
        varying = {f.name for f in fields_of(type(config)) if f.tunable} | {"epsilon", "seed"}
        object.__setattr__(self, "_config", config)
        object.__setattr__(self, "_varying", frozenset(varying))
        object.__setattr__(self, "_method", method)
        object.__setattr__(self, "_reader", reader)

    def __getattr__(self, name: str) -> Any:
        if name in self._varying:
            raise UsageError(
                f"method {self._method}: {name} varies from run to run (eps, the seed or a "
                f"tunable field): read it from the run's configuration, the config argument of "
                f"calibrate(config) or evaluate(outputs, config); {self._reader}.{name} would "
                "fix its base value for every run of a sweep"
            )
        return getattr(self._config, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a configuration is frozen")

    def __repr__(self) -> str:
        return f"FixedFields({self._config!r})"
