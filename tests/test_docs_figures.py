"""Every number the documentation quotes from a study or a benchmark is one the committed result
holds: a number with a decimal point printed on a page must be, at its printed precision, a value
of one of the files that page cites (``sims/reference/*``, ``bench/results/*``). A number that is
not a result (a setting, a paper's own figure) is listed on the page's allow-list below, with why.
"""

from __future__ import annotations

import glob
import math
import os
import re

import pytest
from docs_blocks import ROOT

SOURCES = {
    "docs/papers/modulated.md": ["sims/reference/modulated_*", "sims/reference/population_study*",
                                 "sims/reference/one_shot_ridge*",
                                 "bench/results/modulated_round*"],
    "docs/papers/ldp_fl.md": ["sims/reference/ldp_fl_table1*", "bench/results/ldp_fl_fraction*",
                              "bench/results/ldp_fl_gpu*", "bench/results/ldp_fl_cpu*"],
    "docs/papers/silos.md": ["sims/reference/silo_*", "bench/results/shuffle_exact*"],
    "docs/papers/estimation.md": ["sims/reference/estimation_rates_*",
                                  "sims/reference/estimation_bias*"],
    "docs/papers/last_iterate.md": ["sims/reference/last_iterate_figure2*"],
    "docs/papers/dp_ftrl.md": ["sims/reference/dp_ftrl_study*"],
    "docs/guide/dp_fedavg.md": ["sims/reference/dp_fedavg_population*", "bench/results/*"],
    "docs/guide/distributed_dp.md": ["sims/reference/dp_fedavg_distributed*"],
    "docs/concepts/engine.md": ["bench/results/*"],
    "docs/guide/own_algorithm.md": ["bench/results/*"],
    "docs/guide/sweeps.md": ["bench/results/*"],
    "docs/performance.md": ["bench/results/*"],
}  # fmt: skip
NUMBER = re.compile(r"(?<![\w.])-?\d+\.\d+(?:e[+-]?\d+)?(?![\w.])")


def committed_values(patterns: list[str]) -> list[float]:
    values = []
    for pattern in patterns:
        for path in glob.glob(os.path.join(ROOT, pattern)):
            if path.endswith((".png", ".pdf")):
                continue
            with open(path, encoding="utf-8") as handle:
                values += [float(v) for v in NUMBER.findall(handle.read())]
    return values


def quoted(text: str) -> list[str]:
    """Decimal numbers of the page's prose and tables (code blocks and directives excluded)."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return NUMBER.findall(prose)


def matches(number: str, values: list[float]) -> bool:
    """``number`` is some value rounded as printed: to its decimals, or to its significant
    digits (``0.00926`` for 0.009262, ``1.4e5`` for 1.371e5)."""
    x = float(number)
    mantissa = number.lower().split("e")[0].lstrip("-")
    decimals = len(mantissa.split(".")[1])
    digits = len(mantissa.replace(".", "").lstrip("0"))
    for v in values:
        if round(v, decimals) == x or round(abs(v), decimals) == abs(x):
            return True
        if v != 0 and x != 0 and digits:
            scale = 10 ** (math.floor(math.log10(abs(v))) - digits + 1)
            if abs(round(v / scale) * scale - x) <= 1e-9 * abs(x):
                return True
    return False


@pytest.mark.parametrize("page", sorted(SOURCES))
def test_quoted_numbers_are_in_the_committed_results(page):
    with open(os.path.join(ROOT, page), encoding="utf-8") as handle:
        text = handle.read()
    allowed = set(re.findall(r"<!-- docs-figures: not results \(([^)]*)\) -->", text))
    allowed = {n.strip() for group in allowed for n in group.split(",")}
    values = committed_values(SOURCES[page])
    assert values, f"{page}: no committed result found for {SOURCES[page]}"
    missing = [n for n in quoted(text) if n not in allowed and not matches(n, values)]
    assert not missing, f"{page} quotes numbers its committed results do not hold: {missing}"


def test_the_check_catches_a_wrong_number():
    """Negative control: a result changed in its last digit is not found."""
    values = [0.9026, 1.371e4, 0.009262]
    assert matches("0.903", values) and matches("1.4e4", values) and matches("0.00926", values)
    assert not matches("0.904", values) and not matches("1.5e4", values)
