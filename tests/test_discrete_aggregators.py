"""The integer-grid aggregators: their records meet the accounted bounds exactly, their releases
estimate the clipped sum with the stated noise, and their events say what ran.

Statistical checks at fixed seeds: a mean within 5 standard errors of its target (the noise's
own variance over the repetitions), each with a negative control the same check rejects.
"""

import functools
import math
from fractions import Fraction

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_accounting.dp_event import DiscreteLaplaceDpEvent

from jfed.privacy import discrete
from jfed.privacy.aggregators import AdaptiveClipParams
from jfed.privacy.discrete_accounting import (
    ORDERS,
    DiscreteGaussianDpEvent,
    DiscreteRdpAccountant,
    SkellamDpEvent,
    poisson_subsampled_rdp,
)
from jfed.privacy.discrete_aggregators import (
    NOT_PRIVATE,
    DiscreteGaussianSum,
    DiscreteGaussianSumParams,
    DiscreteLaplaceSum,
    DiscreteLaplaceSumParams,
    DiscreteQuantileAdaptiveSum,
    largest_grid_norm,
)
from jfed.privacy.distributed_dp import (
    DistributedDiscreteGaussianSum,
    DistributedSumParams,
    SkellamSum,
    grid_norm_for_bits,
    hadamard,
    rotate,
    unrotate,
)

CLIENTS, REPEATS = 8, 64


def _updates(dimension: int, seed: int = 0) -> dict:
    """A pytree of two leaves per client: ``{"w": f32[clients, dim - 1], "b": f32[clients]}``."""
    values = np.random.default_rng(seed).normal(size=(CLIENTS, dimension)).astype(np.float32)
    values[0] *= 40.0  # one client far outside the ball
    return {"w": jnp.asarray(values[:, :-1]), "b": jnp.asarray(values[:, -1])}


@functools.cache
def _program(aggregator):
    """Releases of one cohort, one per key (a jitted function of the parameters, the updates
    and the keys, compiled once per aggregator): vmapped preprocess, the records summed,
    release."""

    def once(params, updates, key):
        state = aggregator.init(params, jax.tree.map(lambda x: x[0], updates))
        client_keys = jax.random.split(jax.random.fold_in(key, 0), CLIENTS)
        records = jax.vmap(lambda u, k: aggregator.preprocess(params, state, u, k))(
            updates, client_keys
        )
        summed = jax.tree.map(lambda x: jnp.sum(x, axis=0), records)
        value, _, diagnostics = aggregator.release(
            params, state, summed, jax.random.fold_in(key, 1)
        )
        return value, diagnostics, records

    return jax.jit(jax.vmap(once, in_axes=(None, None, 0)))


@functools.partial(jax.jit, static_argnums=0)
def _preprocessed(aggregator, params, updates, keys):
    """Every client's record (``aggregator.preprocess`` vmapped over the clients' updates and
    keys), one compiled program per aggregator."""
    return jax.vmap(lambda u, k: aggregator.preprocess(params, (), u, k))(updates, keys)


def _rounds(aggregator, params, updates, keys):
    return _program(aggregator)(params, updates, keys)


def _clipped_sum(updates, clip_norm, order=2):
    flat = np.concatenate([np.asarray(updates["w"]), np.asarray(updates["b"])[:, None]], axis=1)
    norms = np.linalg.norm(flat, ord=order, axis=1, keepdims=True)
    return np.sum(flat * np.minimum(1.0, clip_norm / norms), axis=0)


def _flat(value) -> np.ndarray:
    return np.concatenate([np.asarray(value["w"]), np.asarray(value["b"])[..., None]], axis=-1)


def test_discrete_gaussian_sum_meets_its_bound_and_estimates_the_clipped_sum():
    aggregator = DiscreteGaussianSum(dimension=6, grid_norm=2**10)
    params = DiscreteGaussianSumParams(clip_norm=1.5, noise_multiplier=0.8)
    updates = _updates(6)
    keys = jax.random.split(jax.random.key(0), REPEATS)
    value, diagnostics, records = _rounds(aggregator, params, updates, keys)
    rounded = _flat(records["value"]).astype(np.int64)
    assert rounded.dtype == np.int64 and np.all(
        np.sum(rounded**2, axis=-1) <= aggregator.squared_bound
    )
    assert float(np.max(records["rounding_fallbacks"])) == 0.0
    # the noise std on the float sum: z C sqrt(B) / L, a little above z C (the rounding's price)
    noise_std = float(diagnostics["noise_std"][0])
    assert noise_std >= 0.8 * 1.5 * aggregator.noise_inflation()
    assert noise_std == pytest.approx(0.8 * 1.5 * aggregator.noise_inflation(), rel=1e-3)
    target = _clipped_sum(updates, 1.5)
    error = _flat(value).mean(axis=0) - target
    standard_error = math.sqrt(noise_std**2 + CLIENTS / 4 * (1.5 / 2**10) ** 2) / math.sqrt(REPEATS)
    assert np.all(np.abs(error) < 5 * standard_error), error / standard_error
    unclipped = _flat(updates).sum(axis=0)
    assert np.any(np.abs(_flat(value).mean(axis=0) - unclipped) > 5 * standard_error)
    spread = _flat(value).std(axis=0, ddof=1)
    assert np.all(np.abs(spread / noise_std - 1) < 5 / math.sqrt(2 * (REPEATS - 1)))
    assert float(diagnostics["clipped_count"][0]) >= 1 and "clipped_count" in NOT_PRIVATE


def test_discrete_gaussian_sum_event_and_its_range():
    aggregator = DiscreteGaussianSum(dimension=1000)
    params = DiscreteGaussianSumParams(1.0, 1.1)
    event = aggregator.event(params)
    bound = aggregator.squared_bound
    l1 = min(bound, math.sqrt(1000 * bound))
    assert event == DiscreteGaussianDpEvent(1.1, math.sqrt(bound), l1, 1000)
    # the Gaussian's RDP at the same multiplier (and the same integer orders)
    reference = dp_accounting.rdp.RdpAccountant(list(ORDERS)).compose(
        dp_accounting.GaussianDpEvent(1.1)
    )
    assert DiscreteRdpAccountant().compose(event).get_epsilon(1e-5) == pytest.approx(
        reference.get_epsilon(1e-5), rel=1e-6)  # fmt: skip
    # the event of any z (a calibration searches through it); check() refuses what cannot run
    fine = DiscreteGaussianSum(dimension=10, grid_norm=2**14)
    assert fine.event(DiscreteGaussianSumParams(1.0, 5.0)).noise_multiplier == 5.0
    with pytest.raises(ValueError, match="lower grid_norm"):
        fine.check(DiscreteGaussianSumParams(1.0, 5.0))
    fine.check(DiscreteGaussianSumParams(1.0, 1.0))
    # out of range on the device: NaN, never less noise than stated
    in_range = jax.jit(fine.noise_parameters)(DiscreteGaussianSumParams(1.0, 5.0))[2]
    assert not bool(in_range)
    with pytest.raises(ValueError, match="dimension=6"):
        DiscreteGaussianSum(dimension=6).preprocess(params, (), jnp.ones(5), jax.random.key(0))


def test_the_device_variance_is_never_below_the_accounted_one():
    aggregator = DiscreteGaussianSum(dimension=100, grid_norm=2**11)
    for z in (0.37, 0.5, 1.0, 1.1, 2.9):
        bits, quotient, in_range = jax.jit(aggregator.noise_parameters)(
            DiscreteGaussianSumParams(1.0, z)
        )
        assert bool(in_range)
        assert (
            Fraction(2 ** int(bits) * int(quotient)) >= Fraction(z) ** 2 * aggregator.squared_bound
        )


def test_discrete_laplace_sum_is_pure_eps_and_its_scale_covers_the_claim():
    aggregator = DiscreteLaplaceSum(dimension=1, grid_norm=2**10)
    assert aggregator.absolute_bound == 2**10  # one coordinate: |round(x)| <= L
    for z in (0.25, 1.0, 3.7):
        params = DiscreteLaplaceSumParams(2.0, z)
        divisor = int(jax.jit(aggregator.divisor)(params))
        assert Fraction(2**20, divisor) >= Fraction(z) * aggregator.absolute_bound
        event = aggregator.event(params)
        assert isinstance(event, DiscreteLaplaceDpEvent)
        pld = dp_accounting.pld.PLDAccountant().compose(event)  # pure eps 1 / z, tight
        assert pld.get_epsilon(1e-12) == pytest.approx(1.0 / z, rel=1e-3)
        assert pld.get_delta(1.0 / z * 0.9) > 1e-3
        assert aggregator.replace_one_event(params).sensitivity == 2 * event.sensitivity
    with pytest.raises(ValueError, match="lower grid_norm"):
        aggregator.event(DiscreteLaplaceSumParams(1.0, 2.0**11))

    params = DiscreteLaplaceSumParams(2.0, 0.5)
    updates = {"w": jnp.zeros((CLIENTS, 0)), "b": jnp.linspace(-3.0, 3.0, CLIENTS)}
    value, diagnostics, records = _rounds(aggregator, params, updates,
                                          jax.random.split(jax.random.key(1), REPEATS))  # fmt: skip
    assert np.all(np.abs(np.asarray(records["value"]["b"])) <= 2**10)
    scale = float(diagnostics["noise_scale"][0])
    assert scale == pytest.approx(0.5 * 2.0, rel=1e-3)  # z C in float units
    target = np.clip(np.linspace(-3.0, 3.0, CLIENTS), -2.0, 2.0).sum()
    standard_error = math.sqrt(2) * scale / math.sqrt(REPEATS)
    assert abs(float(np.mean(value["b"])) - target) < 5 * standard_error


@jax.jit
def _rotated(x, rotation):
    """``x: f32[64]`` through the transform twice, rotated and back, rotated; and a spike
    rotated (one compiled program: the butterflies' shapes change at every width)."""
    spike = jnp.zeros(64).at[5].set(8.0)
    rotated = rotate(x, rotation)
    return hadamard(hadamard(x)), unrotate(rotated, rotation), rotated, rotate(spike, rotation)


def test_hadamard_rotation_is_orthonormal_and_inverted():
    x = jnp.asarray(np.random.default_rng(2).normal(size=64), jnp.float32)
    rotation = jax.random.key_data(jax.random.key(3))
    twice, back, rotated, spike = _rotated(x, rotation)
    np.testing.assert_allclose(twice, x, atol=1e-5)
    np.testing.assert_allclose(back, x, atol=1e-5)
    assert float(jnp.linalg.norm(rotated)) == pytest.approx(float(jnp.linalg.norm(x)), rel=1e-5)
    assert float(jnp.max(jnp.abs(spike))) == pytest.approx(1.0, rel=1e-5)


@pytest.mark.parametrize(
    "kind", [DistributedDiscreteGaussianSum, pytest.param(SkellamSum, marks=pytest.mark.slow)]
)
def test_distributed_sums_estimate_the_clipped_sum_inside_the_field(kind):
    aggregator = kind(dimension=6, min_clients=CLIENTS, bits=20, grid_norm=2**9)
    params = DistributedSumParams(clip_norm=1.5, noise_multiplier=0.8, dropout_rate=0.0)
    updates = _updates(6, seed=4)
    value, diagnostics, records = _rounds(aggregator, params, updates,
                                          jax.random.split(jax.random.key(5), REPEATS))  # fmt: skip
    assert records["value"].shape == (REPEATS, CLIENTS, 8)  # messages of 8 = 2^3 coordinates
    assert _flat(value).shape == (REPEATS, 6)  # the pytree comes back
    assert float(np.max(diagnostics["wrapped_coordinates"])) == 0.0
    assert np.all(np.asarray(diagnostics["survivors"]) == CLIENTS)
    noise_std = float(diagnostics["noise_std_at_least"][0])
    assert noise_std >= 0.8 * 1.5
    target = _clipped_sum(updates, 1.5)
    error = _flat(value).mean(axis=0) - target
    standard_error = noise_std * 1.01 / math.sqrt(REPEATS)  # the shares' rounding up: < 1%
    assert np.all(np.abs(error) < 5 * standard_error), error / standard_error
    assert np.any(
        np.abs(_flat(value).mean(axis=0) - _flat(updates).sum(axis=0)) > 5 * standard_error
    )
    event = aggregator.event(params)
    assert isinstance(event, DiscreteGaussianDpEvent if kind is DistributedDiscreteGaussianSum
                      else SkellamDpEvent)  # fmt: skip
    assert event.dimension == 8 and event.noise_multiplier == 0.8


@pytest.mark.slow
def test_a_small_field_wraps_and_the_wraps_are_counted():
    # the count is the pipeline's, whatever the shares (Skellam's compile faster)
    aggregator = SkellamSum(dimension=6, min_clients=CLIENTS, bits=8, grid_norm=2**9)
    params = DistributedSumParams(1.5, 0.8, 0.0)
    _, diagnostics, _ = _rounds(aggregator, params, _updates(6, seed=4),
                                jax.random.split(jax.random.key(6), 4))  # fmt: skip
    assert float(np.min(diagnostics["wrapped_coordinates"])) > 0
    assert "wrapped_coordinates" in NOT_PRIVATE


def test_dropouts_below_the_accounted_shares_withhold_the_release():
    aggregator = DistributedDiscreteGaussianSum(
        dimension=6, min_clients=CLIENTS, bits=20, grid_norm=2**9
    )  # the estimate test's program
    params = DistributedSumParams(1.5, 0.8, 0.5)  # half the clients drop out
    value, diagnostics, records = _rounds(aggregator, params, _updates(6, seed=4),
                                          jax.random.split(jax.random.key(7), REPEATS))  # fmt: skip
    survivors = np.asarray(diagnostics["survivors"])
    np.testing.assert_array_equal(survivors, np.asarray(records["count"]).sum(axis=1))
    withheld = np.asarray(diagnostics["withheld"]) == 1.0
    np.testing.assert_array_equal(withheld, survivors < CLIENTS)
    assert withheld.sum() >= REPEATS - 2 and not np.any(_flat(value)[withheld])
    dropped = np.asarray(records["count"]) == 0
    assert np.all(np.asarray(records["value"])[dropped] == 0)  # a dropout sends nothing
    assert 0.3 < dropped.mean() < 0.7
    with pytest.raises(ValueError, match="dropout_rate"):
        aggregator.event(DistributedSumParams(1.0, 1.0, 1.0))
    # a noise beyond the sampler's range: refused on the host, withheld on the device
    loud = DistributedSumParams(1.5, 2.0**12, 0.0)
    assert aggregator.event(loud).noise_multiplier == 2.0**12
    with pytest.raises(ValueError, match="lower grid_norm"):
        aggregator.check(loud)
    assert not bool(jax.jit(aggregator.in_range)(loud))
    assert bool(jax.jit(aggregator.in_range)(params))
    assert aggregator.adjacency.value == "zero-out"


def test_grid_norm_for_bits_is_the_largest_that_fits():
    grid = grid_norm_for_bits(16, 100, 1.0, 1024)
    beta = math.exp(-0.5)

    def spread(norm):
        bound = discrete.rounded_squared_norm_bound(norm, 1024, beta)
        return 4.0 * math.sqrt((100 * norm) ** 2 / 1024 + 25.0 + bound)

    assert spread(grid) < 2**15 <= spread(grid + 1)
    with pytest.raises(ValueError, match="raise bits"):
        grid_norm_for_bits(4, 10_000, 1.0, 16)


def test_largest_grid_norm_keeps_the_sampler_in_range_and_the_int32_sum_exact():
    """The grid DP-FedAvg picks: the default 2^12 where it fits; halved where the noise's
    variance or the int32 sum of the cohort would leave their ranges, and each answer's double
    does not fit (the largest)."""
    from jfed.privacy.discrete_aggregators import check_variance

    def fits(grid, clients, z, dimension):
        bound = discrete.rounded_squared_norm_bound(grid, dimension, math.exp(-0.5))
        try:
            check_variance(z, bound, 1, grid)
        except ValueError:
            return False
        sigma = math.sqrt(z**2 * bound * (1 + 2.0**-16) + 2) * (1 + 1e-3) + 1
        return clients * math.sqrt(bound) + 40 * sigma < 2**31

    assert largest_grid_norm(610, 150, 1.0) == 2**12
    for clients, z in ((150, 20.0), (600_000, 1.0), (10_000, 60.0)):
        grid = largest_grid_norm(610, clients, z)
        assert grid < 2**12 and fits(grid, clients, z, 610) and not fits(2 * grid, clients, z, 610)
    with pytest.raises(ValueError, match="int32 sum of 10000000000 clients"):
        largest_grid_norm(610, 10**10, 1.0)


def test_per_layer_clipping_on_the_grid_bounds_every_record():
    """Per-layer clipping (every leaf to C / sqrt(2)) then the grid: each record within the same
    exact bound B as flat clipping; a leaf within its share passes unchanged (negative control:
    flat clipping of the same updates leaves a large leaf larger than its share)."""
    flat = DiscreteGaussianSum(dimension=6, grid_norm=2**10)
    layered = DiscreteGaussianSum(dimension=6, grid_norm=2**10, per_layer=True)
    params = DiscreteGaussianSumParams(clip_norm=1.5, noise_multiplier=0.8)
    updates = _updates(6, seed=3)
    updates["b"] = updates["b"].at[1].set(0.01)  # client 1's small leaf
    keys = jax.random.split(jax.random.key(2), CLIENTS)
    records = _preprocessed(layered, params, updates, keys)
    squares = _flat(records["value"]).astype(np.int64) ** 2
    assert np.all(squares.sum(axis=1) <= layered.squared_bound)
    w_norms = np.linalg.norm(np.asarray(records["value"]["w"], np.float64), axis=1) / 2**10 * 1.5
    assert np.all(w_norms <= 1.5 / math.sqrt(2) * 1.01)  # each leaf within C / sqrt(2)
    plain = _preprocessed(flat, params, updates, keys)
    plain_w = np.linalg.norm(np.asarray(plain["value"]["w"], np.float64), axis=1) / 2**10 * 1.5
    assert np.any(plain_w > 1.5 / math.sqrt(2) * 1.05)
    assert int(records["value"]["b"][1]) == pytest.approx(0.01 / 1.5 * 2**10, abs=1)


ADAPTIVE_PARAMS = AdaptiveClipParams(initial_clip=1.5, noise_multiplier=0.9, count_noise=3.0,
                                     target_quantile=0.5, learning_rate=0.2)  # fmt: skip


def test_adaptive_clipping_on_the_grid_releases_exact_integers_and_moves_the_clip():
    """Each client's record is on the grid at the current clip with ``2 b_k - 1``; the release
    (same keys, data against zeros) differs by the data's integer sum exactly, and the next clip
    is the float version's rule applied to the noised count, reproduced from the count's key.
    Negative control: a count one off moves the clip elsewhere."""
    aggregator = DiscreteQuantileAdaptiveSum(dimension=6, grid_norm=2**10, expected_count=8.0)
    updates = _updates(6)
    keys = jax.random.split(jax.random.key(5), 4)
    _, _, records = _program(aggregator)(ADAPTIVE_PARAMS, updates, keys)
    rounded = _flat(records["value"]).astype(np.int64)
    assert np.all(np.sum(rounded**2, axis=-1) <= aggregator.squared_bound)
    norms = np.linalg.norm(_flat(updates), axis=1)
    assert np.array_equal(np.asarray(records["below"][0]), np.where(norms <= 1.5, 1, -1))

    state = aggregator.init(ADAPTIVE_PARAMS, None)
    summed = jax.tree.map(lambda x: jnp.sum(x[0], axis=0), records)
    zero = jax.tree.map(jnp.zeros_like, summed)
    key = jax.random.key(9)
    data, next_state, _ = aggregator.release(ADAPTIVE_PARAMS, state, summed, key)
    none, _, _ = aggregator.release(ADAPTIVE_PARAMS, state, zero, key)
    difference = (_flat(data) - _flat(none)) * 2**10 / 1.5
    np.testing.assert_allclose(difference, _flat(summed["value"]), atol=1e-2)

    _, count_key = jax.random.split(key)
    variance = discrete.variance_at_least(2.0 * ADAPTIVE_PARAMS.count_noise, 1)
    bits, quotient = discrete.discrete_gaussian_parameters(variance)
    noise = int(discrete.discrete_gaussian(count_key, (), bits, quotient))
    assert int(variance) >= (2 * 3.0) ** 2

    def clip_after(count: int) -> float:
        unclipped = (count + noise) / 2.0 / 8.0 + 0.5
        return 1.5 * math.exp(-0.2 * (unclipped - 0.5))

    below = int(summed["below"])
    assert float(next_state.clip) == pytest.approx(clip_after(below), rel=1e-6)
    assert float(next_state.clip) != pytest.approx(clip_after(below + 1), rel=1e-6)


def test_adaptive_clipping_on_the_grid_is_accounted_as_both_releases():
    """The round's event composes the update sum's discrete Gaussian (z_delta) and the count's
    (2 sigma_b, sensitivity 1): unsampled, the discrete RDP accountant gives the Gaussian of the
    combined multiplier (dp-accounting's RDP, rel 1e-9); Poisson-sampled, Zhu and Wang's bound
    on that combined curve. Negative control: the update sum alone spends less."""
    from jfed.privacy.aggregators import combined_noise_multiplier

    aggregator = DiscreteQuantileAdaptiveSum(dimension=6, grid_norm=2**10, expected_count=8.0)
    event = aggregator.event(ADAPTIVE_PARAMS)
    combined = combined_noise_multiplier(0.9, 3.0)
    delta, rounds, q = 1e-6, 50, 0.05

    def epsilon(composed) -> float:
        accountant = DiscreteRdpAccountant()
        accountant.compose(composed, rounds)
        return accountant.get_epsilon(delta)

    reference = dp_accounting.rdp.RdpAccountant(list(ORDERS))
    reference.compose(dp_accounting.GaussianDpEvent(combined), rounds)
    assert epsilon(event) == pytest.approx(reference.get_epsilon(delta), rel=1e-9)

    sampled = epsilon(dp_accounting.PoissonSampledDpEvent(q, event))
    # Zhu and Wang's bound on the combined Gaussian's curve
    curve = poisson_subsampled_rdp(lambda alphas: alphas / (2 * combined**2), q, ORDERS)
    expected = dp_accounting.rdp.rdp_privacy_accountant.compute_epsilon(
        np.asarray(ORDERS, np.float64), rounds * curve, delta
    )[0]
    assert sampled == pytest.approx(expected, rel=1e-9)
    update_only = epsilon(dp_accounting.PoissonSampledDpEvent(q, event.events[0]))
    assert update_only < sampled * (1 - 1e-3)
    with pytest.raises(ValueError, match="above the sampler's"):
        aggregator.check(ADAPTIVE_PARAMS._replace(noise_multiplier=1e4))
