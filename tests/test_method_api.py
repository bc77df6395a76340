"""The public method API: registration, the checks an author meets, outputs declared as data,
entry points, and the built-in methods on the same path."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from jfed.methods import (
    EPSILON,
    METHODS,
    OPEN_UNIT,
    Config,
    Experiment,
    Method,
    Output,
    Outputs,
    param,
    register,
    register_method,
)
from jfed.methods import registry as registry_module
from jfed.methods.registry import Registry, check_experiment


@dataclass(frozen=True)
class GoodConfig(Config):
    epsilon: float = param(1.0, "target eps", range=EPSILON, group="privacy")
    step: float = param(0.1, "a step", tunable=True)


class GoodExperiment(Experiment):
    outputs = (Output("w", "state.w"), Output("loss", "infos.loss", reduce="mean"))

    def calibrate(self, config):
        return 0.0, {}


def declaration(**changes) -> Method:
    fields = dict(
        name="test-good", config=GoodConfig, summary="a test method", notion="central DP",
        protected="one client", trust_model="trusted server", experiment=GoodExperiment,
    )  # fmt: skip
    return Method(**{**fields, **changes})


@pytest.fixture
def clean_registry(forget_registered_methods):
    """Forget the methods a test registers."""
    yield


def test_a_good_method_registers_and_binds_its_config(clean_registry):
    register(declaration())
    assert METHODS["test-good"].config is GoodConfig
    assert GoodConfig.method == "test-good"
    assert isinstance(GoodExperiment.outputs, Outputs)


def test_a_name_is_registered_once_unless_replaced(clean_registry):
    register(declaration())
    with pytest.raises(ValueError, match="'test-good' is already registered"):
        register(declaration(summary="another"))
    register(declaration(summary="another"), replace=True)
    assert METHODS["test-good"].summary == "another"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (dict(name="Test_Bad"), "expected lower-case words joined by '-'"),
        (dict(name="modulated"), "is an alias"),
        (dict(summary=""), "summary must be a non-empty string"),
        (dict(notion="none", private=True), "a private method states its notion"),
        (dict(notion="none"), "a non-private method.s config must not declare .epsilon."),
        (dict(config=dict), "config must be a subclass of jfed.methods.Config"),
        (dict(experiment="no_colon"), "expected 'module:Class'"),
        (dict(experiment=object), "experiment must be a subclass of jfed.methods.Experiment"),
    ],
)
def test_malformed_declarations_name_the_method_and_what_is_expected(
    changes, message, clean_registry
):
    with pytest.raises(ValueError, match=message) as error:
        register(declaration(**changes))
    assert "method" in str(error.value)
    assert "test-good" not in METHODS


def test_malformed_configurations_name_the_field():
    @dataclass(frozen=True)
    class Undeclared(Config):
        epsilon: float = param(1.0, "eps", range=EPSILON)
        mu: float = 0.1  # not declared with param

    @dataclass(frozen=True)
    class TunableString(Config):
        epsilon: float = param(1.0, "eps", range=EPSILON)
        mode: str = param("a", "a mode", choices=("a", "b"), tunable=True)

    @dataclass(frozen=True)
    class BadDefault(Config):
        epsilon: float = param(-1.0, "eps", range=EPSILON)

    @dataclass(frozen=True)
    class NoEpsilon(Config):
        step: float = param(0.1, "a step")

    class NotDecorated(Config):  # without @dataclass(frozen=True): its fields would vanish
        epsilon: float = param(1.0, "eps", range=EPSILON)

    cases = [
        (Undeclared, "field 'mu' of Undeclared is not declared with jfed.methods.param"),
        (TunableString, "field 'mode' is tunable but of kind str"),
        (BadDefault, "the defaults of BadDefault are invalid: expected --epsilon in"),
        (NoEpsilon, "a private method's config declares an 'epsilon' field"),
        (NotDecorated, "must be a @dataclass\\(frozen=True\\)"),
    ]
    for config, message in cases:
        with pytest.raises(ValueError, match=message) as error:
            register(declaration(name="test-bad-config", config=config))
        assert str(error.value).startswith("method test-bad-config:")
    assert "test-bad-config" not in METHODS


def test_a_config_belongs_to_one_method(clean_registry):
    register(declaration())
    with pytest.raises(ValueError, match="already belongs to method 'test-good'"):
        register(declaration(name="test-other"))


@pytest.mark.parametrize(
    ("outputs", "message"),
    [
        ((Output("w", "params.w"),), "expected 'state' or 'infos'"),
        ((Output("w", "infos.w", reduce="max"),), "reduce='max'"),
        ((Output("w", "state.w", reduce="last"),), "reduce must be 'all'"),
        ((Output("w", "state.w"), Output("w", "infos.w")), "output names repeated"),
        ((Output("not a name", "state.w"),), "is not an identifier"),
        (("state.w",), "is not a jfed.methods.Output"),
        ((), "non-empty tuple"),
    ],
)
def test_malformed_outputs_are_refused_when_the_class_is_defined(outputs, message):
    with pytest.raises(ValueError, match=message) as error:
        type("Bad", (Experiment,), {"outputs": outputs})
    assert "Bad.outputs" in str(error.value)


def test_an_experiment_without_calibrate_or_outputs_is_refused():
    class NoCalibrate(Experiment):
        outputs = (Output("w", "state.w"),)

    class NoOutputs(Experiment):
        def calibrate(self, config):
            return 0.0, {}

    with pytest.raises(ValueError, match=r"calibrate\(config\).*is defined"):
        check_experiment("test-x", NoCalibrate)
    with pytest.raises(ValueError, match="outputs is not declared"):
        check_experiment("test-x", NoOutputs)


def test_outputs_follow_their_paths_and_reduce_over_rounds():
    import jax.numpy as jnp
    import numpy as np

    from jfed.methods.experiment import declared_outputs

    state = {"w": jnp.arange(3.0)}
    infos = {"loss": jnp.array([[1.0, 2.0], [3.0, 6.0]])}  # 2 rounds
    outputs = declared_outputs(
        (Output("w", "state.w"), Output("loss", "infos.loss"),
         Output("last", "infos.loss", "last"), Output("mean", "infos.loss", "mean"),
         Output("total", "infos.loss", "sum")), "test",
    )  # fmt: skip
    kept = outputs(state, infos)
    np.testing.assert_array_equal(kept["w"], [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(kept["loss"], infos["loss"])
    np.testing.assert_array_equal(kept["last"], [3.0, 6.0])
    np.testing.assert_array_equal(kept["mean"], [2.0, 4.0])
    np.testing.assert_array_equal(kept["total"], [4.0, 8.0])
    assert hash(outputs) == hash(declared_outputs(outputs.declared, "again"))
    with pytest.raises(ValueError, match="output 'gone': state has no 'v'; it has \\['w'\\]"):
        declared_outputs((Output("gone", "state.v"),), "test")(state, infos)


def test_calibrated_privacy_must_state_the_guarantee(clean_registry):
    register(declaration())
    experiment = GoodExperiment(GoodConfig())
    with pytest.raises(ValueError, match="method test-good: calibrate's privacy lacks"):
        experiment.calibrated(GoodConfig())

    class Stated(GoodExperiment):
        def calibrate(self, config):
            from jfed.privacy import PrivacyGuarantee

            return 0.0, PrivacyGuarantee(2.0, 1e-5, "pld", "central DP", "one client", "server")

    _, privacy = Stated(GoodConfig()).calibrated(GoodConfig())
    assert privacy["epsilon_certified"] == 2.0 and privacy["accountant"] == "pld"


def test_reading_a_field_that_varies_across_runs_from_the_fixed_configuration_raises(
    clean_registry,
):
    """An experiment builds its program from the fixed fields: reading eps, the seed or a
    tunable field there would fix the base value for every run of a sweep, silently; it raises,
    naming the method and the field. Negative control: the run's own configuration (what
    calibrate and evaluate receive) reads every field, and fixed fields read as before."""
    register(declaration())
    experiment = GoodExperiment(GoodConfig(step=0.3))
    for name in ("step", "epsilon", "seed"):
        with pytest.raises(ValueError, match=f"method test-good: {name} varies from run to run"):
            getattr(experiment.config, name)
    assert experiment.base_config.step == 0.3
    assert experiment.config.replace(step=0.5).step == 0.5  # a whole configuration again
    with pytest.raises(AttributeError):
        experiment.config.step = 1.0  # type: ignore[misc]


def test_the_decorator_registers_the_experiment_class(clean_registry):
    @dataclass(frozen=True)
    class DecoratedConfig(Config):
        step: float = param(0.1, "a step", tunable=True)

    @register_method("test-decorated", config=DecoratedConfig, summary="decorated")
    class Decorated(GoodExperiment):
        pass

    declared = METHODS["test-decorated"]
    assert declared.experiment is Decorated and declared.load() is Decorated
    assert not declared.private and declared.notion == "none"


def test_every_builtin_method_is_registered_through_the_public_path():
    """No back door: each built-in declaration passes the checks a user's meets, and its
    experiment class has what the runner asks of it."""
    assert len(METHODS) >= 13
    for name, declared in METHODS.items():
        registry_module.check_method(declared)
        assert declared.config.method == name
        experiment = declared.load()
        # declared as data, or a property that depends on the fixed configuration
        assert isinstance(experiment.outputs, (Outputs, property)), name


def test_entry_points_register_modules_methods_and_factories(monkeypatch, capsys):
    @dataclass(frozen=True)
    class PluginConfig(Config):
        step: float = param(0.1, "a step")

    plugin = declaration(name="test-plugin", config=PluginConfig, notion="none", private=False)

    class Entry:
        def __init__(self, name, loaded):
            self.name, self.value, self._loaded, self.dist = name, f"pkg:{name}", loaded, None

        def load(self):
            if isinstance(self._loaded, Exception):
                raise self._loaded
            return self._loaded

    def entry_points(group):
        assert group == "jfed.methods"
        broken = Entry("broken", ImportError("no module x"))
        return [Entry("method", plugin), Entry("factory", lambda: [plugin]),
                Entry("module", dataclasses), broken]  # fmt: skip

    monkeypatch.setattr("importlib.metadata.entry_points", entry_points)
    registry = Registry()
    assert list(registry) == ["test-plugin"]
    assert "skipped the methods of entry point broken = pkg:broken" in capsys.readouterr().err
    # the processes of `jfed launch` do not say it again (their launcher already has)
    monkeypatch.setenv(registry_module.PLUGIN_WARNINGS_SHOWN, "1")
    assert list(Registry()) == ["test-plugin"]
    assert capsys.readouterr().err == ""
    PluginConfig.method = ""  # unbind: this test's registry is not the global one


def test_a_config_field_named_like_a_record_field_is_refused_at_registration(clean_registry):
    """Every record states the privacy guarantee, the selection, the run and its provenance
    beside the configuration: a configuration field with one of those names would be
    overwritten in the record (seen: a user's field shadowed by the privacy statement). It is
    refused when the method registers, naming the field. Negative control: the targets a
    configuration may name (epsilon, delta, accountant) register."""
    for name in ("notion", "epsilon_certified", "trust_model", "config_key", "run_seconds"):
        bad = dataclasses.make_dataclass(
            "Shadowing", [(name, str, param("x", "a field"))], bases=(GoodConfig,), frozen=True
        )
        with pytest.raises(ValueError, match=f"field {name!r} of Shadowing is named like"):
            register(declaration(name="test-shadow", config=bad))

    @dataclass(frozen=True)
    class Targets(GoodConfig):
        delta: float = param(1e-5, "target delta", range=OPEN_UNIT)
        accountant: str = param("pld", "accountant", choices=("pld", "rdp"))

    register(declaration(name="test-targets", config=Targets))


def test_the_record_writer_refuses_a_name_two_sections_state_differently():
    """Sections are flattened only by the writer: a configuration field the privacy statement
    resolves (left None, or stated the same) passes; one it would overwrite is refused, naming
    both sections; the data set's label may restate its name."""
    from jfed.sweep.schema import RecordCollisionError, flatten

    flat = flatten({
        "configuration": {"delta": None, "accountant": "pld", "dataset": "synthetic"},
        "data": {"dataset": "synthetic(1,1)", "n_clients": 10},
        "privacy": {"delta": 1e-5, "accountant": "pld", "notion": "central"},
    })  # fmt: skip
    assert flat == {"delta": 1e-5, "accountant": "pld", "dataset": "synthetic(1,1)",
                    "n_clients": 10, "notion": "central"}  # fmt: skip
    with pytest.raises(RecordCollisionError, match="'accountant' is stated by the configuration"):
        flatten({"configuration": {"accountant": "analytic"},
                 "privacy": {"accountant": "analytic-gaussian"}})  # fmt: skip
    with pytest.raises(RecordCollisionError, match=r"privacy section .* metrics section"):
        flatten({"privacy": {"sigma": 1.0}, "metrics": {"sigma": 2.0}})


def test_a_declaration_without_private_takes_it_from_its_notion():
    """``Method(...)`` (an entry point's declaration) decides ``private`` from the notion as
    ``register_method`` does: a method of notion "none" is non-private (so its configuration
    may not declare ``epsilon``: the malformed declarations above check that refusal); one with
    a notion is private. Negative control: stating ``private=True`` beside notion "none" is
    still refused."""
    assert declaration().private is True
    assert declaration(notion="none").private is False
    assert declaration(notion="none (a baseline)").private is False
    assert declaration(notion="none", private=True).private is True
    with pytest.raises(ValueError, match="a private method states its notion"):
        registry_module.check_method(declaration(notion="none", private=True))
