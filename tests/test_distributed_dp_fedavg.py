"""Distributed DP in DP-FedAvg (``--noise ddgauss|skellam``): a sweep through the command line,
each record's eps recomputed here from the published bounds (Kairouz, Liu and Steinke's
distributed discrete Gaussian, Agarwal, Kairouz and Liu's Skellam) with Zhu and Wang's Poisson
subsampling written out, and dp-accounting's RDP-to-(eps, delta) conversion; a record states
the trust model without a trusted server and zero-out adjacency."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

from jfed.cli.main import main
from jfed.privacy import discrete
from jfed.privacy.discrete_aggregators import DEFAULT_BETA
from jfed.privacy.distributed_dp import padded_dimension
from jfed.report.rows import read_rows

ORDERS = np.arange(2, 129)
# one seed per eps, both runs in one slice (no memory analysis to size the slices)
SETTING = ["--clients", "300", "--records", "16", "--rounds", "3", "--cohort-size", "30",
           "--batch", "8", "--delta", "1e-4", "--bits", "16", "--no-progress",
           "--extend-edges", "0", "--seeds", "1", "--slice-size", "2"]  # fmt: skip


def ddgauss_rdp(alphas, z, l2, l1, dimension, shares):
    """Kairouz, Liu and Steinke (2021), Theorem 1 with Proposition 14: the RDP of a sum of
    ``shares`` discrete Gaussian shares of variance (z l2)^2 / shares each."""
    variance = (z * l2) ** 2
    s2 = variance / shares
    tau = 10 * sum(math.exp(-2 * math.pi**2 * s2 * k / (k + 1)) for k in range(1, shares))
    eps2, eps1 = l2**2 / variance, l1 / math.sqrt(variance)
    return np.minimum.reduce([
        alphas / 2 * eps2 + tau * dimension,
        alphas / 2 * (eps2 + 2 * eps1 * tau + tau**2 * dimension),
        alphas / 2 * (math.sqrt(eps2) + math.sqrt(dimension) * tau) ** 2,
    ])  # fmt: skip


def skellam_rdp(alphas, z, l2, l1):
    """Agarwal, Kairouz and Liu (2021), Theorem 3.5 / Corollary 3.6, variance mu = (z l2)^2."""
    mu = (z * l2) ** 2
    return alphas * l2**2 / (2 * mu) + np.minimum(
        ((2 * alphas - 1) * l2**2 + 6 * l1) / (4 * mu**2), 3 * l1 / (2 * mu)
    )


def subsampled(curve, rate):
    """Zhu and Wang (2019), Theorem 6, term by term in log space, with the unsampled curve."""
    result = []
    for alpha in ORDERS:
        logs = [(alpha - 1) * math.log1p(-rate) + math.log(alpha * rate - rate + 1),
                math.log(math.comb(alpha, 2)) + 2 * math.log(rate)
                + (alpha - 2) * math.log1p(-rate) + curve(2)]  # fmt: skip
        for level in range(3, alpha + 1):
            logs.append(math.log(3 * math.comb(alpha, level)) + (alpha - level) * math.log1p(-rate)
                        + level * math.log(rate) + (level - 1) * curve(level))  # fmt: skip
        top = max(logs)
        bound = (top + math.log(math.fsum(math.exp(v - top) for v in logs))) / (alpha - 1)
        result.append(min(bound, curve(alpha)))
    return np.array(result)


def independent_epsilon(row: dict) -> float:
    # the default model: logistic regression on 60 features, 10 classes (610 parameters), a
    # message padded to 1024 coordinates for the Hadamard rotation
    dimension = padded_dimension(60 * 10 + 10, True)
    bound = discrete.rounded_squared_norm_bound(row["grid_norm"], dimension, DEFAULT_BETA)
    l2, l1 = math.sqrt(bound), min(bound, math.sqrt(dimension * bound))
    z = row["noise_multiplier"]
    if row["noise"] == "ddgauss":

        def curve(alpha):
            return float(ddgauss_rdp(np.array(alpha), z, l2, l1, dimension, row["min_clients"]))
    else:

        def curve(alpha):
            return float(skellam_rdp(np.array(alpha), z, l2, l1))

    rdp = row["rounds"] * subsampled(curve, row["sampling_rate"])
    return float(rdp_lib.compute_epsilon(ORDERS, rdp, row["delta_accountant"])[0])


# the distributed discrete Gaussian's exact per-coordinate shares take about three times the
# Skellam's time (83 s against 28 s on two shared cores): it runs with the studies (-m slow)
@pytest.mark.parametrize("noise", [pytest.param("ddgauss", marks=pytest.mark.slow), "skellam"])
def test_a_distributed_sweep_certifies_what_the_published_bounds_give(noise, tmp_path):
    out = str(tmp_path / noise)
    argv = ["sweep", "dp-fedavg", "--noise", noise, "--epsilon", "2,8", *SETTING, "--out", out]
    assert main(argv) == 0
    rows = read_rows(out + "/runs.jsonl")
    assert sorted(row["epsilon"] for row in rows) == [2.0, 8.0]
    for row in rows:
        assert row["trust_model"].startswith("no trusted server: secure aggregation")
        assert row["adjacency"] == "zero-out" and row["accountant"] == "discrete-rdp"
        assert row["notion"].startswith("distributed (eps, delta)-DP, user-level")
        assert row["bits"] == 16 and row["withheld_rounds"] == 0
        reference = independent_epsilon(row)
        assert row["epsilon_certified"] == pytest.approx(reference, rel=1e-6)
        assert reference <= row["epsilon"]
        # negative control: 10% less noise than the record states certifies a larger eps
        less = independent_epsilon({**row, "noise_multiplier": 0.9 * row["noise_multiplier"]})
        assert less > 1.05 * reference
