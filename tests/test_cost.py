"""A run's memory and work are estimated from its configuration before anything compiles, and a
run that cannot fit is refused with one line naming the flag and the largest value that fits."""

import pytest

from jfed._validation import UsageError
from jfed.cli.main import main
from jfed.methods import declared
from jfed.methods.cost import FLOAT32, available_memory, check_fits, estimate

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


def test_methods_without_an_estimate_pass():
    assert estimate(declared.NoisyMBSGD(), 4096) is None
    assert check_fits(declared.NoisyMBSGD(), chunk=4096, memory=1) is None


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
