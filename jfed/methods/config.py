"""The base of every method's configuration: a frozen dataclass of declared fields.

A field is declared with :func:`~jfed.methods.fields.param` (default, help, unit, range or
choices, whether a sweep may vary it); the command line's flags, the run records, the resume key
of a sweep and the README's flag tables are all read from these declarations. Importing this
module loads no numerical package.

    from dataclasses import dataclass
    from jfed.methods import Config, param, POSITIVE, EPSILON

    @dataclass(frozen=True)
    class MyConfig(Config):
        epsilon: float = param(1.0, "target eps of the run", range=EPSILON, group="privacy")
        learning_rate: float = param(0.1, "server step", range=POSITIVE, tunable=True)
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Self, TypeVar

from jfed.methods.fields import MAX_ROUNDS, MAX_SEED, check_config, integers, param

CHECKED = "_checked"
"""Set on a configuration whose :meth:`Config.check` passed (its fields are frozen, so it stays
valid): a later call returns at once."""
_CHECKING = "_checking"
ConfigT = TypeVar("ConfigT", bound="Config")


def checked_once(check: Callable[[ConfigT], Any]) -> Callable[[ConfigT], ConfigT]:
    """``check`` (a configuration class's own) run once per configuration: a configuration it
    passed is marked, and a later call returns it without checking again; one it refused is
    checked (and refused) again. A subclass's check calling ``super().check()`` runs the base's
    checks inside its own, and the configuration is marked only when the outermost passes."""

    @functools.wraps(check)
    def once(self: ConfigT) -> ConfigT:
        state = getattr(self, "__dict__", None)
        if state is None:  # a configuration with __slots__: nowhere to mark it
            check(self)
            return self
        if state.get(CHECKED):
            return self
        if state.get(_CHECKING):  # a subclass's check calling super().check()
            check(self)
            return self
        object.__setattr__(self, _CHECKING, True)
        try:
            check(self)
        finally:
            object.__delattr__(self, _CHECKING)
        object.__setattr__(self, CHECKED, True)
        return self

    once.checks_once = True  # type: ignore[attr-defined]
    return once


@dataclass(frozen=True)
class Config:
    """What every method's configuration has: the run seed. Subclasses add their fields.

    ``method`` is set by :func:`~jfed.methods.register` to the name the class is registered
    under; a run's configuration says which method it belongs to through it.

    A subclass may extend :meth:`check` with refusals of its own (calling ``super().check()``);
    however often it is called (by the command line, the experiment, the runner), a
    configuration is checked once.
    """

    seed: int = param(0, "run seed (client draws, noise, sampling)", range=integers(0, MAX_SEED),
                      group="run")  # fmt: skip

    method: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("check")
        if callable(own) and not getattr(own, "checks_once", False):
            cls.check = checked_once(own)  # type: ignore[method-assign]

    def replace(self, **changes: Any) -> Self:
        """A new configuration with ``changes`` (unchecked: :meth:`check` checks it)."""
        return dataclasses.replace(self, **changes)

    @checked_once
    def check(self) -> Self:
        """Every field in its declared range and given only where it applies (``ValueError``
        naming the flag otherwise); returns ``self``. A configuration is checked once: its
        fields are frozen, so a later call returns it at once."""
        check_config(self)
        return self


@dataclass(frozen=True)
class Rounds(Config):
    """The number of rounds T, for methods that run several."""

    rounds: int = param(10, "rounds T (releases per client)", unit="rounds",
                        range=integers(1, MAX_ROUNDS), group="run")  # fmt: skip
