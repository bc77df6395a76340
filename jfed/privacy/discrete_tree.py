"""Tree aggregation on an integer grid: DP-FTRL's tree mechanism with exact discrete Gaussian
node noise, so that its guarantee holds for the program as it runs.

The tree mechanism (:class:`jfed.privacy.correlated.TreeNoise`) releases, for every node of a
binary tree over the rounds, the sum of the rounds' contributions in its block plus fresh noise;
every prefix sum, and so every model of DP-FTRL, is a function of those node values. Here each
client's clipped update is put on the integer grid exactly as :class:`~jfed.privacy.
discrete_aggregators.DiscreteGaussianSum` does (scaled so that the clip norm C is L grid units,
conditionally rounded until its squared norm is at most the integer B), so a round's sum ``x_t``
is an integer vector, a node's block sum is an integer vector, and its noisy value is

    y = (sum of x_s over the node's block) + N_Z(0, sigma^2) per coordinate,

computed in int32 (exact). Everything after that reads only the ``y`` of completed nodes: the
released increment (the change of the running prefix estimate, as
:class:`~jfed.privacy.correlated.CorrelatedGaussianSum` releases it) is the tree strategy's own
``next`` applied to the ``y`` values (with Honaker's inverse-variance estimator, real weights, in
float32), then scaled by C / L. So the release is a post-processing of the integer node values:
floating point after them cannot weaken the guarantee, and there is no truncation (the sampler is
exact).

The guarantee: the run releases ``C_tree X + Z`` for the integer contributions ``X: [R, d]``,
``C_tree`` the tree's 0/1 strategy matrix, ``Z`` i.i.d. ``N_Z(0, sigma^2)``. One client's
contributions (each of squared norm at most B) move ``C_tree X`` by at most ``Delta = sens
sqrt(B)`` in L2, ``sens`` the strategy's sensitivity under the participation pattern (as for the
float tree), and ``sigma^2 >= (z Delta)^2``. That is ONE multivariate discrete Gaussian
mechanism (:class:`~jfed.privacy.discrete_accounting.DiscreteGaussianDpEvent` with ``z``,
``Delta`` and d times the node count as its dimension): ``1 / (2 z^2)``-zCDP (Canonne, Kamath and
Steinke 2020, Theorem 14), certified by the discrete RDP accountant; or, through the coupling of
:func:`~jfed.privacy.discrete_accounting.coupled_gaussian`, by the continuous Gaussian's
accountants (PLD) at ``z_1 = sqrt(z^2 Delta^2 - s^2) / Delta`` with ``(1 + e^eps)`` times the
run's total variation (:func:`~jfed.privacy.discrete_accounting.coupling_total_variation` over
every drawn coordinate) added to delta. The coupling must be applied to the RUN's event: it
removes ``s^2`` of variance per drawn node, which a per-release share of the run's event would
remove once per release instead (an understatement of eps; see :meth:`DiscreteTreeSum.event`).

int32 range: a node's block sum is at most ``T_eff * clients * sqrt(B)`` per coordinate (``T_eff
= min(T, R)`` rounds per block at most), so :func:`largest_tree_grid_norm` picks a grid on which
that plus 40 sigma stays below 2^31; a wrapped value would be a wrong value, never a privacy
failure (every node value is computed modulo 2^32 all the same).

Randomness: round t's node draws use ``fold_in(key, j)`` for draw ``j = 0, 1, ...`` (as the float
tree), each a :func:`jfed.privacy.discrete.discrete_gaussian` vector of d coordinates; the
clients' rounding uses the keys the engine gives their ``preprocess``.

References: Kairouz, McMahan, Song, Thakkar, Thakurta, Xu, "Practical and Private (Deep) Learning
without Sampling or Shuffling", ICML 2021 (the tree mechanism in DP-FTRL); Canonne, Kamath,
Steinke, "The Discrete Gaussian for Differential Privacy", NeurIPS 2020; Kairouz, Liu, Steinke,
"The Distributed Discrete Gaussian Mechanism for Federated Learning with Secure Aggregation",
ICML 2021 (conditional randomized rounding); Honaker, "Efficient Use of Differentially Private
Binary Trees", 2015.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jfed._validation import check_int_range, check_positive
from jfed.privacy import discrete
from jfed.privacy.correlated import CorrelatedGaussianSumParams, TreeNoise
from jfed.privacy.discrete_aggregators import (
    DEFAULT_BETA,
    DiscreteGaussianSum,
    check_variance,
    largest_grid_norm,
    unflatten,
)
from jfed.privacy.participation import Participation

if TYPE_CHECKING:
    import dp_accounting

PyTree = Any


class DiscreteTreeState(NamedTuple):
    """The aggregator's state.

    Attributes:
      round: ``i32[]``, releases made.
      estimates: ``f32[levels, d]``: per level, the estimate of the last completed node (its
        noisy value ``y``, or Honaker's combination of its subtree's ``y``): what
        :meth:`TreeNoise.next` keeps.
      blocks: ``i32[levels, d]``: per level, the exact integer block sum of the last completed
        node (data only: never released; it forms the next nodes' ``y``).
    """

    round: jax.Array
    estimates: jax.Array
    blocks: jax.Array


@dataclass(frozen=True)
class DiscreteTreeSum:
    """DP-FTRL's tree aggregation with every node on an integer grid and exact discrete Gaussian
    noise, on jfed's aggregator protocol (``init`` / ``preprocess`` / ``release`` / ``event``); a
    drop-in for :class:`~jfed.privacy.correlated.CorrelatedGaussianSum` with a
    :class:`~jfed.privacy.correlated.TreeNoise` (same parameters, same released quantity: the
    round's increment of the noised prefix sum). See the module docstring for the guarantee.

    Attributes:
      noise: the tree (``rounds_per_tree`` T, ``honaker``).
      participation: the schedule's pattern over the run (its ``rounds`` is the horizon).
      dimension: d, the coordinates of one client's update.
      grid_norm: L, the clip norm in grid units (:func:`largest_tree_grid_norm` picks one).
      beta: conditional rounding's parameter in [0, 1).
      max_tries: roundings drawn before a client falls back to zeros (counted).
      per_layer: clip every leaf to ``C / sqrt(leaves)`` instead of the whole update to C.

    Example::

        participation = Participation(rounds=16, max_participations=4, min_separation=4)
        aggregator = DiscreteTreeSum(TreeNoise(16), participation, dimension=d, grid_norm=2**10)
        params = aggregator.calibrate(epsilon=2.0, delta=1e-6, clip_norm=1.0)
    """

    couples: ClassVar[bool] = True
    """Every node's exact noise is coupled to a continuous Gaussian (as
    :attr:`~jfed.privacy.DiscreteGaussianSum.couples`)."""
    noise: TreeNoise
    participation: Participation
    dimension: int
    grid_norm: int = 2**10
    beta: float = DEFAULT_BETA
    max_tries: int = 32
    per_layer: bool = False
    Params: ClassVar[type] = CorrelatedGaussianSumParams

    def __post_init__(self) -> None:
        if not isinstance(self.noise, TreeNoise):
            raise TypeError(
                f"DiscreteTreeSum takes a TreeNoise, got {type(self.noise).__name__} (a banded "
                "or BLT strategy's real-valued inverse cannot keep the release on a grid)"
            )
        check_int_range("dimension", self.dimension, 1, 2**31 - 1)
        self.grid  # noqa: B018 (checks the grid's fields now, not at trace time)

    # -- the grid (shared with the central discrete Gaussian sum)
    @functools.cached_property
    def grid(self) -> DiscreteGaussianSum:
        """The per-client rounding and its bound B (:class:`DiscreteGaussianSum`)."""
        return DiscreteGaussianSum(self.dimension, self.grid_norm, self.beta, self.max_tries,
                                   self.per_layer)  # fmt: skip

    @property
    def squared_bound(self) -> int:
        """B: a rounded update's squared norm bound (grid units)."""
        return self.grid.squared_bound

    @functools.cached_property
    def sensitivity(self) -> float:
        """``sens``: the tree's sensitivity under :attr:`participation`, in units of one
        contribution's norm bound (host)."""
        return float(self.noise.sensitivity(self.participation))

    @property
    def l2_sensitivity(self) -> float:
        """``Delta = sens sqrt(B)``: the run's L2 sensitivity in grid units."""
        return self.sensitivity * math.sqrt(self.squared_bound)

    @functools.cached_property
    def draws_per_run(self) -> int:
        """Node draws of d coordinates over the horizon (``participation.rounds`` releases)."""
        return sum(self.noise.draws(t) for t in range(self.participation.rounds))

    # -- the protocol
    def init(self, params: CorrelatedGaussianSumParams, template: PyTree) -> DiscreteTreeState:
        """Round 0 and empty buffers (``template``: one client's update, for its size)."""
        del params
        levels = self.noise.levels
        size = int(sum(np.prod(jnp.shape(leaf)) for leaf in jax.tree.leaves(template)))
        return DiscreteTreeState(
            round=jnp.int32(0),
            estimates=jnp.zeros((levels, size), jnp.float32),
            blocks=jnp.zeros((levels, size), jnp.int32),
        )

    def preprocess(
        self, params: CorrelatedGaussianSumParams, state: DiscreteTreeState, update: PyTree,
        key: jax.Array,
    ) -> dict:  # fmt: skip
        """ONE client's rounded record (:meth:`DiscreteGaussianSum.preprocess`): ``{"value":
        int32 leaves, "clipped", "norm", "rounding_fallbacks"}``."""
        del state
        return self.grid.preprocess(params, (), update, key)

    def noise_parameters(self, params: CorrelatedGaussianSumParams):
        """``(k, m, in_range)``: each node's noise ``N_Z(0, 2^k m)`` with ``2^k m >= (z
        Delta)^2``, and whether it is in the sampler's range."""
        multiplier = jnp.asarray(params.noise_multiplier, jnp.float32) * np.float32(
            self.sensitivity
        )
        least = discrete.variance_at_least(multiplier, self.squared_bound)
        bits, quotient = discrete.discrete_gaussian_parameters(least)
        return bits, quotient, discrete.variance_in_range(least)

    def release(
        self, params: CorrelatedGaussianSumParams, state: DiscreteTreeState, summed: dict,
        key: jax.Array,
    ) -> tuple[PyTree, DiscreteTreeState, dict]:  # fmt: skip
        """This round's increment of the noised prefix sum (floats shaped like the update), the
        next state and diagnostics (``noise_std`` of a node's noise on the float scale,
        ``past_horizon``, ``clip``, and the grid's ``clipped_count``, ``norm_sum``,
        ``rounding_fallbacks``, outside the guarantee). NaN everywhere if the node variance left
        the sampler's range (the host's :meth:`check` refuses such parameters first)."""
        x = jnp.concatenate([jnp.ravel(leaf) for leaf in jax.tree.leaves(summed["value"])])
        bits, quotient, in_range = self.noise_parameters(params)
        levels, d = self.noise.levels, x.shape[0]
        tau = (state.round % self.noise.rounds_per_tree).astype(jnp.int32)
        entering = lax.population_count(tau ^ (tau + 1)) - 1  # trailing ones of tau
        # block sum of the level-l node completing now: this round's sum plus its left
        # siblings along the chain, the last completed nodes of levels < l (all integers)
        below = [jnp.zeros_like(x)]
        for level in range(levels - 1):
            below.append(below[-1] + state.blocks[level])
        completing = x[None, :] + jnp.stack(below)  # i32[levels, d]

        def node_value(j: jax.Array) -> jax.Array:
            level = j if self.noise.honaker else entering
            noise = discrete.discrete_gaussian(jax.random.fold_in(key, j), (d,), bits, quotient)
            return (completing[level] + noise).astype(jnp.float32)  # y: exact, then a float

        increment, estimates = self.noise.next(state.estimates, state.round, node_value)
        completed = (jnp.arange(levels) <= entering)[:, None]
        blocks = jnp.where(completed, completing, state.blocks)
        scale = jnp.asarray(params.clip_norm, jnp.float32) / np.float32(self.grid_norm)
        value = jnp.where(in_range, increment * scale, jnp.nan)
        like = jax.tree.map(lambda leaf: jnp.zeros(jnp.shape(leaf), jnp.float32),
                            summed["value"])  # fmt: skip
        variance = ((jnp.uint32(1) << bits) * quotient).astype(jnp.float32)
        diagnostics = {
            "noise_std": jnp.sqrt(variance) * scale,
            "past_horizon": (state.round >= self.participation.rounds).astype(jnp.float32),
            "clip": jnp.asarray(params.clip_norm, jnp.float32),
            "clipped_count": summed["clipped"],
            "norm_sum": summed["norm"],
            "rounding_fallbacks": summed["rounding_fallbacks"],
        }
        state = DiscreteTreeState(state.round + 1, estimates, blocks)
        return unflatten(value, like), state, diagnostics

    def audit_view(
        self, params: CorrelatedGaussianSumParams, state: DiscreteTreeState, summed: dict,
        key: jax.Array,
    ) -> PyTree | None:  # fmt: skip
        """With Honaker's estimator, this round's own leaf node on the float scale (its integer
        sum plus the leaf's draw, draw 0 of the release): what canaries are best scored against
        (:meth:`jfed.privacy.correlated.CorrelatedGaussianSum.audit_view`); ``None`` without it
        (only the entering node is drawn)."""
        del state
        if not self.noise.honaker:
            return None
        x = jnp.concatenate([jnp.ravel(leaf) for leaf in jax.tree.leaves(summed["value"])])
        bits, quotient, _ = self.noise_parameters(params)
        noise = discrete.discrete_gaussian(jax.random.fold_in(key, 0), x.shape, bits, quotient)
        scale = jnp.asarray(params.clip_norm, jnp.float32) / np.float32(self.grid_norm)
        like = jax.tree.map(lambda leaf: jnp.zeros(jnp.shape(leaf), jnp.float32),
                            summed["value"])  # fmt: skip
        return unflatten((x + noise).astype(jnp.float32) * scale, like)

    # -- the guarantee (host)
    def run_event(self, params: CorrelatedGaussianSumParams) -> dp_accounting.DpEvent:
        """The whole run's event: ``DiscreteGaussianDpEvent(z, Delta, Delta sqrt(n), n)``, ``n
        = d x`` the nodes drawn over the horizon (the L1 bound by Cauchy-Schwarz; it is read
        only by the distributed bound, not for one share)."""
        from jfed.privacy.discrete_accounting import DiscreteGaussianDpEvent

        check_positive("clip_norm", params.clip_norm)
        z = check_positive("noise_multiplier", params.noise_multiplier)
        coordinates = self.dimension * self.draws_per_run
        delta_2 = self.l2_sensitivity
        return DiscreteGaussianDpEvent(z, delta_2, delta_2 * math.sqrt(coordinates), coordinates)

    def event(self, params: CorrelatedGaussianSumParams) -> dp_accounting.DpEvent:
        """One release's share of :meth:`run_event` for RDP / zCDP composition: the discrete
        Gaussian at ``z sqrt(R)`` (R releases compose to ``1 / (2 z^2)``-zCDP, exactly the
        run's). Not for the coupling: :func:`coupled_gaussian` of a share removes the coupling's
        variance once per release instead of once per node, which understates eps; certify a
        run through the continuous accountants with :meth:`guarantee` (it couples the run's
        event)."""
        from jfed.privacy.discrete_accounting import DiscreteGaussianDpEvent

        run = self.run_event(params)
        assert isinstance(run, DiscreteGaussianDpEvent)
        rounds = self.participation.rounds
        return DiscreteGaussianDpEvent(run.noise_multiplier * math.sqrt(rounds),
                                       run.l2_sensitivity, run.l1_sensitivity,
                                       self.dimension)  # fmt: skip

    def coupling_delta(self, epsilon: float) -> float:
        """``(1 + e^eps) T``: what the coupling adds to delta at eps, ``T`` the total variation
        of every coordinate drawn over the horizon."""
        from jfed.privacy.discrete_accounting import coupling_delta, coupling_total_variation

        variation = coupling_total_variation(self.dimension * self.draws_per_run)
        return coupling_delta(epsilon, variation)

    def guarantee(
        self, params: CorrelatedGaussianSumParams, delta: float, *, accountant: Any = None,
        adjacency: Any = "add-or-remove",
    ) -> Any:  # fmt: skip
        """The run's :class:`~jfed.privacy.PrivacyGuarantee`. With the discrete RDP accountant
        (``jfed.privacy.DiscreteRdp()``): :meth:`run_event` itself. With a continuous one
        (default PLD): the coupled run event certified at ``delta - coupling_delta(eps)``
        (iterated until the share it reserved covers the eps it found)."""
        from jfed.privacy.accounting import DiscreteRdp, Pld, certify, spent
        from jfed.privacy.discrete_accounting import coupled_gaussian

        accountant = Pld() if accountant is None else accountant
        pattern = self.participation
        statement = dict(
            notion="central (eps, delta)-DP",
            protected=(
                f"all of one client's clipped updates over {pattern.rounds} rounds (at most "
                f"{pattern.participations} participations, {pattern.min_separation} or more "
                "rounds apart; no amplification by sampling assumed)"
            ),
            trust_model="trusted server adds exact discrete Gaussian noise to the tree's "
            "integer node sums",
        )
        event = self.run_event(params)
        if isinstance(accountant, DiscreteRdp):
            return certify(event, delta, accountant=accountant, adjacency=adjacency, **statement)
        coupled, reserve = coupled_gaussian(event), 0.0
        for _ in range(8):
            share = self.coupling_delta(reserve)
            epsilon = spent(coupled, delta - share, accountant=accountant, adjacency=adjacency)
            if self.coupling_delta(epsilon) <= share:
                break
            reserve = epsilon
        else:  # pragma: no cover (the total variation is ~1e-70 per coordinate)
            raise ValueError("the coupling's share of delta did not settle")
        return certify(coupled, delta - share, accountant=accountant, adjacency=adjacency,
                       **statement)  # fmt: skip

    def calibrate(
        self, epsilon: float, delta: float, clip_norm: float, *, accountant: Any = None,
        adjacency: Any = "add-or-remove",
    ) -> CorrelatedGaussianSumParams:  # fmt: skip
        """The least-noise params whose run is (eps, delta)-DP under ``accountant`` (default
        PLD through the coupling, at ``delta - coupling_delta(eps)``; the discrete RDP
        accountant on :meth:`run_event` directly)."""
        import dp_accounting

        from jfed.privacy.accounting import DiscreteRdp, Pld, calibrate
        from jfed.privacy.discrete_accounting import COUPLING_VARIANCE

        clip_norm = check_positive("clip_norm", clip_norm)
        accountant = Pld() if accountant is None else accountant
        if isinstance(accountant, DiscreteRdp):

            def run(z: float) -> Any:
                return self.run_event(CorrelatedGaussianSumParams(clip_norm, z))

            z = calibrate(run, epsilon, delta, accountant=accountant, adjacency=adjacency)
        else:
            continuous = calibrate(dp_accounting.GaussianDpEvent, epsilon,
                                   delta - self.coupling_delta(epsilon), accountant=accountant,
                                   adjacency=adjacency)  # fmt: skip
            sensitivity = self.l2_sensitivity
            # the discrete variance that leaves the continuous one after the coupling, rounded
            # up in the last place so the certificate never lands above the target
            z = math.sqrt(continuous**2 + COUPLING_VARIANCE / sensitivity**2)
            z = float(np.nextafter(z, math.inf))
        params = CorrelatedGaussianSumParams(clip_norm=clip_norm, noise_multiplier=z)
        self.check(params)
        return params

    def check(self, params: CorrelatedGaussianSumParams) -> None:
        """Host: ``ValueError`` unless each node's noise of ``params`` is in the sampler's range
        on this grid."""
        z = check_positive("noise_multiplier", params.noise_multiplier)
        check_variance(z * self.sensitivity, self.squared_bound, 1, self.grid_norm)


def largest_tree_grid_norm(
    noise: TreeNoise, participation: Participation, dimension: int, clients: int,
    noise_multiplier: float, beta: float = DEFAULT_BETA, most: int = 2**12,
) -> int:  # fmt: skip
    """Host: the largest power of two ``L <= most`` on which a :class:`DiscreteTreeSum` of at
    most ``clients`` records a round runs exactly at ``noise_multiplier``: a node's block sum of
    ``min(T, R)`` rounds plus 40 of its noise's standard deviations within int32
    (:func:`~jfed.privacy.discrete_aggregators.largest_grid_norm` with the block's records and
    ``z sens``). ``ValueError`` naming the numbers if no grid does."""
    rounds_per_block = min(noise.rounds_per_tree, participation.rounds)
    sensitivity = float(noise.sensitivity(participation))
    return largest_grid_norm(dimension, clients * rounds_per_block,
                             noise_multiplier * sensitivity, beta, most)  # fmt: skip


__all__ = ["DiscreteTreeState", "DiscreteTreeSum", "largest_tree_grid_norm"]
