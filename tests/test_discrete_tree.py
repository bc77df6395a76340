"""Tree aggregation on an integer grid (jfed.privacy.discrete_tree): the release is a
post-processing of integer node values (the data's prefix sums come out exactly), the noise has
the tree mechanism's covariance at the discrete Gaussian's variance, and the certified eps is the
run's discrete Gaussian mechanism's (discrete RDP) or its coupled continuous Gaussian's (PLD),
each against an independent computation."""

from __future__ import annotations

import functools
import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jfed.privacy import DiscreteRdp, Pld, spent
from jfed.privacy.correlated import (
    BltNoise,
    CorrelatedGaussianSumParams,
    TreeNoise,
    noise_matrix,
)
from jfed.privacy.discrete_accounting import COUPLING_VARIANCE, ORDERS, coupled_gaussian
from jfed.privacy.discrete_tree import DiscreteTreeSum, largest_tree_grid_norm
from jfed.privacy.participation import Participation

ROUNDS = 8
PARTICIPATION = Participation(rounds=ROUNDS, max_participations=ROUNDS)
PARAMS = CorrelatedGaussianSumParams(clip_norm=1.0, noise_multiplier=0.5)


def aggregator(honaker: bool, dimension: int, grid_norm: int = 2**6) -> DiscreteTreeSum:
    return DiscreteTreeSum(TreeNoise(ROUNDS, honaker=honaker), PARTICIPATION, dimension,
                           grid_norm=grid_norm)  # fmt: skip


def releases(tree: DiscreteTreeSum, sums: jax.Array, key: jax.Array) -> np.ndarray:
    """``f64[R, d]``: the released increments in grid units for the integer round sums ``sums:
    i32[R, d]`` (one jitted scan per aggregator; release t keyed by ``fold_in(key, t)``)."""
    values = _scan(tree)(jnp.asarray(sums, jnp.int32), key)
    return np.asarray(values, np.float64) * tree.grid_norm / PARAMS.clip_norm


@functools.lru_cache(maxsize=8)
def _scan(tree: DiscreteTreeSum):
    zero = jnp.zeros((), jnp.float32)

    def run(sums: jax.Array, key: jax.Array) -> jax.Array:
        def step(state, inputs):
            t, x = inputs
            summed = {"value": x, "clipped": zero, "norm": zero, "rounding_fallbacks": zero}
            value, state, _ = tree.release(PARAMS, state, summed, jax.random.fold_in(key, t))
            return state, value

        state = tree.init(PARAMS, jnp.zeros(sums.shape[1], jnp.float32))
        return jax.lax.scan(step, state, (jnp.arange(ROUNDS), sums))[1]

    return jax.jit(run)


@pytest.mark.parametrize("honaker", [False, True])
def test_the_release_is_a_post_processing_of_integer_nodes(honaker):
    """The noise draws do not read the data, so the releases of the same keys on the data and on
    zeros differ by the data's part alone: their running sums are the data's exact prefix sums
    (integers). Without Honaker every release is itself an integer in grid units (node values
    added and subtracted). Negative control: a round's sum off by one shows."""
    tree = aggregator(honaker, dimension=32)
    rng = np.random.default_rng(0)
    sums = jnp.asarray(rng.integers(-300, 300, size=(ROUNDS, 32)), jnp.int32)
    key = jax.random.key(7)
    on_data, on_zero = releases(tree, sums, key), releases(tree, jnp.zeros_like(sums), key)
    prefix = np.cumsum(np.asarray(sums, np.float64), axis=0)
    tolerance = 0.0 if not honaker else 1e-3  # Honaker's real weights, in float32
    assert np.max(np.abs(np.cumsum(on_data - on_zero, axis=0) - prefix)) <= tolerance
    if not honaker:
        assert np.array_equal(on_data, np.round(on_data))
    shifted = releases(tree, sums.at[3, 0].add(1), key)
    assert abs(np.cumsum(shifted - on_zero, axis=0)[3, 0] - prefix[3, 0] - 1.0) <= tolerance
    # the audit view: the first round's leaf (tau = 0: the leaf is the only node), which the
    # first release equals
    zero = jnp.zeros((), jnp.float32)
    summed = {"value": sums[0], "clipped": zero, "norm": zero, "rounding_fallbacks": zero}
    view = tree.audit_view(PARAMS, tree.init(PARAMS, sums[0]), summed, jax.random.fold_in(key, 0))
    if honaker:
        np.testing.assert_allclose(np.asarray(view) * tree.grid_norm, on_data[0], atol=1e-3)
    else:
        assert view is None


@pytest.mark.parametrize("honaker", [False, True])
def test_the_noise_has_the_tree_mechanisms_covariance(honaker):
    """The noise on the running sums (zeros released) has, per round, the variance ``sigma^2
    ||B_t||^2`` that the tree's decoder gives (``noise_matrix``), ``sigma^2 = 2^k m`` the node
    variance. 12,000 coordinates: a variance's relative sd is sqrt(2 / 12,000) = 1.3%; the
    tolerance is 5 of them. Negative control: the other estimator's decoder is rejected."""
    dimension = 12_000
    tree = aggregator(honaker, dimension)
    noise = np.cumsum(releases(tree, jnp.zeros((ROUNDS, dimension), jnp.int32),
                               jax.random.key(3)), axis=0)  # fmt: skip
    bits, quotient, in_range = tree.noise_parameters(PARAMS)
    assert bool(in_range)
    sigma_squared = float(2 ** int(bits) * int(quotient))
    assert sigma_squared >= (PARAMS.noise_multiplier * tree.l2_sensitivity) ** 2

    def expected(estimator: bool) -> np.ndarray:
        decoder = np.cumsum(noise_matrix(TreeNoise(ROUNDS, honaker=estimator), ROUNDS), axis=0)
        return sigma_squared * np.sum(decoder**2, axis=1)

    measured = np.var(noise, axis=1)
    tolerance = 5 * math.sqrt(2 / dimension)
    assert np.all(np.abs(measured / expected(honaker) - 1) < tolerance)
    assert np.any(np.abs(measured / expected(not honaker) - 1) > tolerance)


def test_the_run_is_one_discrete_gaussian_mechanism():
    """Discrete RDP: the run's event equals the continuous Gaussian's RDP at the same z on the
    same orders (dp-accounting's RDP accountant; CKS Theorem 14), and the R per-release shares
    compose to it (rel 1e-9). PLD: the coupled run event is dp-accounting's PLD of the Gaussian
    at ``sqrt(z^2 Delta^2 - 9) / Delta`` at delta less the coupling's share. Negative control:
    coupling every share instead of the run understates eps."""
    tree = aggregator(True, dimension=100)
    delta = 1e-6
    rdp = spent(tree.run_event(PARAMS), delta, accountant=DiscreteRdp())
    reference = dp_accounting.rdp.RdpAccountant(list(ORDERS))
    reference.compose(dp_accounting.GaussianDpEvent(PARAMS.noise_multiplier))
    assert rdp == pytest.approx(reference.get_epsilon(delta), rel=1e-9)
    shares = dp_accounting.SelfComposedDpEvent(tree.event(PARAMS), ROUNDS)
    assert spent(shares, delta, accountant=DiscreteRdp()) == pytest.approx(rdp, rel=1e-9)

    certified = tree.guarantee(PARAMS, delta).epsilon
    sensitivity = tree.l2_sensitivity
    coupled_z = math.sqrt((PARAMS.noise_multiplier * sensitivity) ** 2 - COUPLING_VARIANCE)
    pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=Pld().discretization)
    pld.compose(dp_accounting.GaussianDpEvent(coupled_z / sensitivity))
    share = tree.coupling_delta(certified)
    assert 0 < share < 1e-60
    assert certified == pytest.approx(pld.get_epsilon(delta - share), rel=1e-9)
    per_share = dp_accounting.SelfComposedDpEvent(coupled_gaussian(tree.event(PARAMS)), ROUNDS)
    assert spent(per_share, delta, accountant=Pld()) < certified * (1 - 1e-6)


@pytest.mark.parametrize("accountant", [Pld(), DiscreteRdp()])
def test_calibration_meets_the_target(accountant):
    """The calibrated z certifies at most the target eps, and not much less (1e-3)."""
    tree = aggregator(False, dimension=100)
    params = tree.calibrate(2.0, 1e-6, clip_norm=1.0, accountant=accountant)
    epsilon = tree.guarantee(params, 1e-6, accountant=accountant).epsilon
    assert 2.0 * (1 - 1e-3) <= epsilon <= 2.0


def test_refusals_and_the_grid_choice():
    """Only a tree is on the grid (a BLT's inverse is real-valued); a node variance beyond the
    sampler's range is refused on the host; the chosen grid keeps a block of T rounds' sums
    plus 40 sigma in int32, and the next finer grid does not."""
    with pytest.raises(TypeError, match="takes a TreeNoise"):
        DiscreteTreeSum(BltNoise.rational_approximation(3), PARTICIPATION, 10)
    with pytest.raises(ValueError, match="above the sampler's"):
        aggregator(False, 10, grid_norm=2**12).check(PARAMS._replace(noise_multiplier=1e3))
    noise = TreeNoise(ROUNDS)
    grid = largest_tree_grid_norm(noise, PARTICIPATION, 1_000, 100_000, 1.0)

    def fits(grid_norm: int) -> bool:
        tree = DiscreteTreeSum(noise, PARTICIPATION, 1_000, grid_norm=grid_norm)
        sigma = tree.l2_sensitivity * 1.0
        return ROUNDS * 100_000 * math.sqrt(tree.squared_bound) + 40 * sigma < 2**31

    assert fits(grid) and not fits(2 * grid)
