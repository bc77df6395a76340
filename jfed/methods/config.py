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
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from jfed.methods.fields import MAX_ROUNDS, MAX_SEED, check_config, integers, param


@dataclass(frozen=True)
class Config:
    """What every method's configuration has: the run seed. Subclasses add their fields.

    ``method`` is set by :func:`~jfed.methods.register` to the name the class is registered
    under; a run's configuration says which method it belongs to through it.
    """

    seed: int = param(0, "run seed (client draws, noise, sampling)", range=integers(0, MAX_SEED),
                      group="run")  # fmt: skip

    method: ClassVar[str] = ""

    def replace(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)

    def check(self) -> Self:
        """Every field in its declared range and given only where it applies (``ValueError``
        naming the flag otherwise); returns ``self``."""
        check_config(self)
        return self


@dataclass(frozen=True)
class Rounds(Config):
    """The number of rounds T, for methods that run several."""

    rounds: int = param(10, "rounds T (releases per client)", unit="rounds",
                        range=integers(1, MAX_ROUNDS), group="run")  # fmt: skip
