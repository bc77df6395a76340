"""Validation once: a configuration's checks live in its ``check()`` (the declared ranges, then the
class's own refusals) and run once per configuration, however many layers ask (the command line,
the experiment, the runner); the experiments trust a checked configuration."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Self

import pytest

from jfed.methods import (
    EPSILON,
    METHODS,
    Config,
    Experiment,
    Method,
    Output,
    build_experiment,
    param,
    register,
)

CALLS: list[str] = []


@dataclass(frozen=True)
class Counted(Config):
    epsilon: float = param(1.0, "target eps", range=EPSILON, group="privacy")
    low: float = param(0.0, "a lower bound")
    high: float = param(1.0, "an upper bound", tunable=True)

    def check(self) -> Self:
        super().check()  # the declared ranges first, then this class's own refusal
        CALLS.append("counted")
        if self.low > self.high:
            raise ValueError(f"expected --low <= --high, got --low={self.low} > {self.high}")
        return self


@dataclass(frozen=True)
class CountedTwice(Counted):
    """A second level of refusals, checked after its base's (the base marks nothing)."""

    def check(self) -> Self:
        super().check()
        CALLS.append("twice")
        if self.high > 10:
            raise ValueError(f"expected --high <= 10, got --high={self.high}")
        return self


class CountedExperiment(Experiment):
    outputs = (Output("w", "state"),)

    def __init__(self, config):
        super().__init__(config)
        self.population = SimpleNamespace(n_clients=1)

    def calibrate(self, config):
        return 0.0, {}


@pytest.fixture
def counted_method():
    register(Method(name="test-validation", config=Counted, summary="counted checks",
                    notion="central DP", protected="one client", trust_model="trusted server",
                    experiment=CountedExperiment))  # fmt: skip
    CALLS.clear()
    yield
    METHODS.remove("test-validation")
    Counted.method = ""


def test_a_configuration_is_checked_once_whoever_asks(counted_method):
    """The command line checks the configuration it builds, the experiment and the runner ask
    again: the class's checks run once. A new configuration (``replace``) is checked anew."""
    config = Counted(high=2.0)
    assert config.check() is config
    assert config.check() is config
    experiment = build_experiment(config)  # the experiment trusts the checked configuration
    assert experiment.base_config is config
    assert CALLS == ["counted"]
    changed = config.replace(high=3.0)
    assert changed.check() is changed and CALLS == ["counted", "counted"]


def test_an_experiment_built_on_an_unchecked_configuration_checks_it(counted_method):
    """Python users may skip check(): building the experiment checks the configuration (once),
    and refuses a bad one, naming the flags."""
    build_experiment(Counted(high=2.0))
    assert CALLS == ["counted"]
    with pytest.raises(ValueError, match="expected --low <= --high"):
        build_experiment(Counted(low=3.0, high=2.0))


def test_a_refused_configuration_is_refused_every_time():
    """Negative control of the memory: only a configuration that passed is remembered."""
    bad = Counted(low=3.0, high=2.0)
    for _ in range(2):
        with pytest.raises(ValueError, match="expected --low <= --high"):
            bad.check()
    with pytest.raises(ValueError, match="expected --epsilon"):
        Counted(epsilon=-1.0).check()
    with pytest.raises(ValueError, match="expected --epsilon"):
        Counted(epsilon=-1.0).check()


def test_a_subclass_refusal_after_its_bases_checks_is_not_forgotten():
    """The subclass's check calls super().check() first: a configuration its base passes but it
    refuses stays refused on every call (a memory set by the base's check, inside the
    subclass's, would let the second call through). One that passes runs each level once."""
    CALLS.clear()
    bad = CountedTwice(high=20.0)
    for _ in range(2):
        with pytest.raises(ValueError, match="expected --high <= 10"):
            bad.check()
    assert CALLS == ["counted", "twice", "counted", "twice"]
    CALLS.clear()
    good = CountedTwice(high=5.0)
    good.check()
    good.check()
    assert CALLS == ["counted", "twice"]


def test_a_checked_configuration_equals_hashes_and_records_as_before():
    """The mark is no field: equality, hashing, the record's fields and the resume key are the
    configuration's values alone."""
    import dataclasses

    checked, fresh = Counted(high=2.0).check(), Counted(high=2.0)
    assert checked == fresh and hash(checked) == hash(fresh)
    assert dataclasses.asdict(checked) == dataclasses.asdict(fresh)
    assert repr(checked) == repr(fresh)


@pytest.mark.parametrize(
    ("refused", "message", "inside"),
    [
        ({"clients": 10, "fraction": 0.12}, "got 0.12 x 10 -> 1 client: raise --fraction",
         {"clients": 10, "fraction": 0.2}),
        ({"clients": 1}, "got 1 x 1 -> 1 client: raise --clients", {"clients": 2}),
        ({"clients": 1439}, "expected --clients in [1, 1438] (the training images of digits)",
         {"clients": 1438, "batch": 1}),
        ({"clients": 200, "batch": 8}, "expected --batch in [1, 7] (the images of each of 200",
         {"clients": 200, "batch": 7}),
    ],
)  # fmt: skip
def test_ldp_fl_refusals_are_the_configurations_not_the_command_lines(refused, message, inside):
    """LDP-FL's shares of the images and its shuffle's two clients are refused by the
    configuration's check, so ``jfed.run`` refuses what the command line does (negative control:
    the same configuration just inside each bound passes)."""
    from jfed.methods.declared.ldp_fl import LDPFL

    with pytest.raises(ValueError) as error:
        LDPFL(**refused).check()
    assert message in str(error.value)
    LDPFL(**inside).check()


def test_run_given_a_methods_name_says_how_to_build_its_configuration():
    """``jfed.run("ldp-fl")`` is refused with the call that builds the configuration, not an
    AttributeError from inside the runner."""
    import jfed

    for call in (jfed.run, jfed.run_grid):
        with pytest.raises(TypeError, match=r"build one with jfed\.methods\.method\('ldp-fl'\)"):
            call("ldp-fl")
