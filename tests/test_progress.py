"""Progress over rounds, reported from inside the compiled scan."""

from typing import ClassVar

import jax
import numpy as np
import pytest

from jfed.algorithms import modulated
from jfed.cli.main import main
from jfed.data import load_regression
from jfed.engine import loop, progress, simulate


class RecordingBar:
    """Stands in for tqdm: records every update."""

    made: ClassVar[list] = []

    def __init__(self, total, desc, unit):
        self.total, self.desc, self.n, self.updates, self.closed = total, desc, 0, [], False
        RecordingBar.made.append(self)

    def update(self, count):
        self.n += count
        self.updates.append(self.n)

    def set_postfix_str(self, text, refresh=True):
        self.postfix = text

    def close(self):
        self.closed = True


@pytest.fixture
def bars(monkeypatch):
    RecordingBar.made = []
    monkeypatch.setattr(progress, "tqdm", RecordingBar)
    monkeypatch.setattr(progress, "_terminal", lambda: True)  # a bar, as on a terminal
    return RecordingBar.made


@pytest.fixture(scope="module")
def population():
    return load_regression("modechoice").train


def test_report_every_caps_the_number_of_reports():
    assert progress.report_every(10) == 1
    assert progress.report_every(250) == 3
    assert all(-(-t // progress.report_every(t)) <= progress.MAX_REPORTS for t in range(1, 5000))


@pytest.mark.parametrize(
    "rounds",
    [
        # a report every round: two more compiled programs; 250 rounds (a report every 3 rounds
        # and the last) runs the same reporting code
        pytest.param(7, marks=pytest.mark.slow),
        250,
    ],
)
def test_bar_reaches_every_round_and_results_are_unchanged(bars, population, rounds):
    algorithm = modulated.Iterative(population.dim)
    hp = modulated.hyperparams(noise_std=1.0)
    key = jax.random.key(4)
    quiet, quiet_infos = simulate(algorithm, population, hp, key, rounds)
    shown, shown_infos = simulate(algorithm, population, hp, key, rounds, progress="fit")
    np.testing.assert_array_equal(quiet.theta, shown.theta)
    np.testing.assert_array_equal(quiet_infos.theta, shown_infos.theta)
    (bar,) = bars
    assert bar.closed and bar.desc == "fit" and bar.total == rounds and bar.n == rounds
    assert bar.postfix == ""  # the "compiling" note is cleared by the first report
    every = progress.report_every(rounds)
    assert len(bar.updates) == -(-rounds // every)  # one per `every` rounds, and the last
    assert bar.updates == sorted(bar.updates)


def test_a_new_bar_does_not_recompile(bars, population):
    """The program of the 250-round bar above (compiled here if it has not run)."""
    algorithm = modulated.Iterative(population.dim)
    hp = modulated.hyperparams(noise_std=1.0)
    simulate(algorithm, population, hp, jax.random.key(0), 250, progress=True)
    compiled = loop._simulate._cache_size()
    simulate(algorithm, population, hp, jax.random.key(1), 250, progress=True)
    assert loop._simulate._cache_size() == compiled
    assert [bar.n for bar in bars] == [250, 250]


def test_cli_progress_flag(bars, capsys):
    # three rounds without a bar: tests/test_cli.py's run of this method
    argv = ["run", "modulated", "--dataset", "modechoice", "--rounds", "3"]
    assert main([*argv, "--progress"]) == 0
    assert [bar.n for bar in bars] == [3]
    assert main([*argv, "--no-progress"]) == 0
    assert len(bars) == 1
