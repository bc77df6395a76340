"""A run's memory and work are estimated from its configuration before anything compiles, and a
run that cannot fit is refused with one line naming the flag and the largest value that fits."""

import dataclasses
from dataclasses import dataclass

import pytest

from jfed._validation import UsageError
from jfed.cli.main import main
from jfed.methods import Config, declared, integers, param
from jfed.methods.cost import FLOAT32, Cost, available_memory, check_fits, estimate, pld_points

GIB = 2**30
ONE_SHOT = declared.ModulatedOneShot(synthetic=True, dim=100_000, clients=1000)


def test_the_d_by_d_moments_dominate_the_one_shot_estimator():
    """Memory grows as d^2 (the summed second moments and the solve): ten times d, a hundred
    times the bytes, within the chunk's linear part."""
    small = estimate(ONE_SHOT.replace(dim=10_000), chunk=4096)
    large = estimate(ONE_SHOT, chunk=4096)
    assert large.memory / small.memory == pytest.approx(100, rel=0.15)
    assert large.memory >= FLOAT32 * 100_000**2  # at least one [d, d] float32 matrix
    shared = estimate(ONE_SHOT.replace(dim=10_000), chunk=4096, shared=True)
    assert shared.memory == pytest.approx(4 * small.memory, rel=0.1)  # messages [a; xi]: 2d


def test_the_refusal_names_the_largest_value_that_fits():
    """The value named fits and the next one does not (bisection, not a guess). Negative
    control: a budget that holds the run refuses nothing."""
    budget = 8 * GIB
    with pytest.raises(UsageError) as refused:
        check_fits(ONE_SHOT, chunk=4096, memory=budget, given=("dim",))
    message = str(refused.value)
    assert message.startswith("--dim=100000 needs about") and "\n" not in message
    largest = int(message.rsplit(" ", 1)[1])
    assert estimate(ONE_SHOT.replace(dim=largest), 4096).memory <= budget
    assert estimate(ONE_SHOT.replace(dim=largest + 1), 4096).memory > budget
    assert check_fits(ONE_SHOT.replace(dim=largest), chunk=4096, memory=budget) is not None


def test_work_beyond_reach_is_refused_by_the_flag_given():
    config = declared.Estimation(setting="local-item", sites=100_000, units=10**7)
    with pytest.raises(UsageError, match=r"^--units=10000000 needs about .* operations"):
        check_fits(config, chunk=16, memory=10**15, given=("units",), max_work=10**12)


def test_units_drawn_in_one_sum_cost_nothing_per_unit():
    """Rademacher sites outside the item-level settings draw their mean at once: n is free."""
    central = declared.Estimation(setting="central-user", units=10**7)
    local = declared.Estimation(setting="local-item", units=10**7)
    assert estimate(central, 4096).memory < 10**7 < estimate(local, 4096).memory


def test_every_built_in_method_declares_a_cost():
    """Every method of jfed's own declares its cost hook, and its defaults cost something."""
    from jfed.methods import METHODS

    built_in = [m for m in METHODS.values() if m.config.__module__.startswith("jfed.")]
    assert len(built_in) >= 15
    for method in built_in:
        assert method.cost is not None, method.name
        cost = estimate(method.config(), 4096)
        assert cost.memory > 0 and cost.work > 0, method.name


@dataclass(frozen=True)
class _Grid(Config):
    size: int = param(10, "cells", range=integers(1, 10**9))


@pytest.fixture
def plug_in():
    """A method registered as a plug-in registers it: a configuration whose cost grows as its
    ``size`` (8 bytes a cell), and another without a hook."""
    from jfed.methods import Method, register
    from jfed.methods.registry import METHODS

    def cost(config, plan):
        del plan
        return Cost(8 * config.size, config.size, ("size",))

    register(Method("cost-test-grid", _Grid, "cells", "none", "nothing", "x", "nowhere:Nothing",
                    private=False, cost=cost), replace=True)  # fmt: skip
    yield _Grid
    METHODS.remove("cost-test-grid")
    type.__setattr__(_Grid, "method", "")


def test_a_plug_in_cost_joins_the_refusal(plug_in):
    """Its hook is asked like a built-in's: the refusal names its flag and the largest size
    that fits (8000 bytes: 1000 cells). Negative control: without a hook nothing is refused."""
    with pytest.raises(UsageError, match=r"^--size=5000 needs .*: the largest --size that fits "
                       r"is 1000$"):  # fmt: skip
        check_fits(plug_in(size=5000), chunk=1, memory=8000, given=("size",))
    assert check_fits(plug_in(size=1000), chunk=1, memory=8000) is not None
    from jfed.methods.registry import METHODS

    bare = dataclasses.replace(METHODS["cost-test-grid"], cost=None)
    METHODS.add(bare, replace=True)
    assert check_fits(plug_in(size=5000), chunk=1, memory=8000) is None


def test_pld_points_bound_what_dp_accounting_holds():
    """The model of a composed PLD's grid lies between what dp-accounting holds and 3x that,
    with and without sampling (the regimes the command line meets)."""
    import dp_accounting
    from dp_accounting.pld import privacy_loss_distribution

    for noise, steps, rate in ((1.0, 10, 1.0), (1.0, 100, 0.1), (2.0, 1000, 0.01)):
        pld = privacy_loss_distribution.from_gaussian_mechanism(
            noise, sampling_prob=rate, value_discretization_interval=1e-4,
            neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
        ).self_compose(steps)  # fmt: skip
        held = len(pld._pmf_remove._probs)
        assert held <= pld_points(noise, steps, rate) <= 3 * held, (noise, steps, rate, held)


def test_the_ldp_fl_shapes_are_the_programs():
    """The cost's parameter counts are those of the flax models it describes."""
    from jfed.algorithms import ldp_fl
    from jfed.methods.declared.ldp_fl import model_shape

    for model, side in (("cnn", 8), ("cnn", 28), ("mlp", 8), ("logistic", 28)):
        program = ldp_fl.LDPFL(model, side, 10, 10, 2, 30)
        assert model_shape(model, side)[0] == program.unravel()[2], (model, side)


def test_available_memory_is_the_hosts():
    import os

    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert 0 < available_memory() <= total


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["run", "functional-estimation", "--functions", "1000000", "--observations", "100000"],
         "--observations"),
        (["run", "estimation", "--setting", "local-item", "--sites", "100000", "--units",
          "10000000"], "--units"),
        (["sweep", "estimation", "--setting", "local-item", "--sites", "100000", "--grid",
          "units=10,10000000", "--seeds", "1", "--epsilon", "1"], "--units"),
    ],
)  # fmt: skip
def test_the_command_refuses_before_compiling(argv, flag, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"jfed: error: {flag}=") and "the largest" in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []  # nothing written, no results folder


GIB_FREE = 16 * GIB


@pytest.fixture
def sixteen_gib(monkeypatch):
    """A machine with 16 GiB free, whatever this one has: the refusals below are the same on
    every machine."""
    import jfed.methods.cost as cost

    monkeypatch.setattr(cost, "available_memory", lambda: GIB_FREE)
    monkeypatch.setattr(cost, "memory_budget", lambda: GIB_FREE)
    monkeypatch.setattr(cost, "work_budget", lambda: cost.MAX_WORK["cpu"])


@pytest.mark.parametrize(
    "argv, message",
    [
        # 10^6 Gaussian rounds composed by PLD: the calibration's first try would hold ~400 GiB
        (["run", "dpsgd", "--accountant", "pld", "--epsilon", "1e-6", "--rounds", "1000000",
          "--synthetic", "--clients", "10"],
         r"^--rounds=1000000 needs about .* GiB of host memory for its privacy accounting, 16 "
         r"GiB is free \(--accountant zcdp or analytic answers at once\): the largest --rounds "
         r"that fits is \d+$"),
        # K R = 2.5e8 local steps, each over the whole silo, and their PLD composition
        (["run", "local-sgd", "--batch", "10000000"],
         r"^--batch=10000000 needs about .* operations, more than 1 hour's work here .*: the "
         r"largest --batch that fits is \d+$"),
        (["run", "estimation", "--sites", "100000", "--units", "10000000", "--replications",
          "1000000"], r"^--replications=1000000 needs about 4e\+14 operations.*fits is 90000$"),
        (["account", "gaussian", "--noise-multiplier", "0.01", "--delta", "1e-5", "--steps",
          "1000000", "--sampling-rate", "0.5", "--accountant", "pld"],
         r"^--steps=1000000 of noise multiplier 0.01 with --accountant pld needs about .* TiB "
         r"of host memory .* the largest --steps that fits is \d+$"),
        (["account", "last-iterate", "--eta", "0.5", "--lipschitz", "1", "--radius", "1",
          "--sigma", "1.5", "--n", "1000000000000", "--sampling-rate", "1e-12", "--epsilon",
          "1"], r"^--n=1000000000000 at --sampling-rate=1e-12 composes n / m = 1000000000000 "
         r"steps by PLD .* give --sampling-rate at least"),
        (["sweep", "estimation", "--seeds", "100", "--epsilon", "1,2,3,4,5,6,7,8,9,10",
          "--grid", "sites=10,20,30,40,50,60,70,80,90,100",
          "--grid", "units=10,20,30,40,50,60,70,80,90,100",
          "--grid", "mean=0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1"],
         r"^this sweep of 1000000 runs \(10 eps x 100 seeds x 10 sites x 10 units x 10 mean\) "
         r"needs .*: the most --seeds that fit are \d+$"),
    ],
)  # fmt: skip
def test_what_hung_or_exhausted_the_machine_is_refused_at_once(
    argv, message, sixteen_gib, capsys, tmp_path, monkeypatch
):
    import re

    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("jfed: error: ") and err.count("\n") == 1, err
    assert re.search(message, err[len("jfed: error: ") :].strip()), err
    assert list(tmp_path.iterdir()) == []


def test_ldp_fl_evaluates_its_cnn_in_blocks_and_fits():
    """A modest LDP-FL run once asked for 75 GiB: its CNN was evaluated on all 60,000
    procedural-MNIST images at once (jfed.algorithms.ldp_fl.accuracy). Evaluated 512 images at a
    time, its cost is under 2 GiB; the cost check's model counts the blocks (negative control:
    the same model evaluating everything at once counts the 75 GiB again)."""
    from jfed.methods import METHODS, declared
    from jfed.methods.cost import CostPlan
    from jfed.methods.declared import ldp_fl as declared_ldp_fl

    config = declared.LDPFL(dataset="procedural-mnist", clients=2000, batch=1, fraction=0.1,
                            rounds=2)  # fmt: skip
    cost = METHODS["ldp-fl"].cost(config, CostPlan(chunk=1))
    assert cost.memory < 2 * 2**30
    at_once = declared_ldp_fl.EVALUATED_AT_ONCE
    try:
        declared_ldp_fl.EVALUATED_AT_ONCE = None
        assert METHODS["ldp-fl"].cost(config, CostPlan(chunk=1)).memory > 70 * 2**30
    finally:
        declared_ldp_fl.EVALUATED_AT_ONCE = at_once
