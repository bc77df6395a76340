"""Correlated Gaussian noise for DP-FTRL: tree aggregation, banded and BLT matrix factorizations,
as aggregators generated inside the compiled round.

A matrix mechanism over a run of R releases privatizes the sums ``x_t`` (``x: [R, d]``, one
client's contribution to each bounded by the clip norm) by releasing ``C x + Z`` for a strategy
``C: [m, R]`` and ``Z: [m, d]`` i.i.d. Gaussian, and decodes it with ``B`` where ``B C = A``, the
lower-triangular matrix of ones: the prefix sums ``A x`` come out with noise ``B Z``. Its L2
sensitivity under the schedule's participation pattern, ``sens(C)``
(:func:`jfed.privacy.participation.gram_sensitivity`), makes the whole run ONE Gaussian
mechanism: with ``Z ~ N(0, sigma^2)``, ``sigma = z * clip_norm * sens(C)``, the run is
``GaussianDpEvent(z)`` whatever R, k and b are (the participation is in ``sens``).

What a release returns: this round's sum plus this round's noise INCREMENT,
``x_t + sigma (B z)_t - sigma (B z)_{t-1}`` (for a factorization with square, invertible C,
``x_t + sigma (C^{-1} z)_t``), so that the running sum of the releases is the noised prefix sum
``sum_{s <= t} x_s + sigma (B z)_t``. Why the increment and not the prefix sum: the aggregator is
then a drop-in for an independent-noise Gaussian sum (an algorithm, its server optimizer and its
momentum consume it unchanged; DP-FTRL's model ``theta_t = theta_0 - eta * sum_{s<=t} release_s``
is exactly FTRL on the noised prefix sums), a tree's restarts stay inside the aggregator (the
running sum across trees is FTRL restarted from the current model, as Kairouz et al. do), and no
[d] prefix sum is kept in its state.

Noise strategies (static, hashable; the per-round work keeps a few [d] buffers, never an
``R x R`` matrix):

- :class:`IndependentNoise`: ``C = I``, fresh noise every round (DP-SGD-style, the baseline);
- :class:`TreeNoise`: binary-tree aggregation restarted every T rounds (Kairouz et al. 2021),
  with Honaker's estimator (each node's value is the inverse-variance combination of its own
  noisy value and its children's estimates); ``floor(log2 T) + 1`` level buffers;
- :class:`BandedNoise`: a banded lower-triangular Toeplitz ``C`` (BandMF; Choquette-Choo et al.
  2023), noise ``C^{-1} z`` by forward substitution over the last ``bands - 1`` outputs;
- :class:`BltNoise`: a buffered linear Toeplitz ``C`` (Dvijotham et al. 2024; McKenna 2024),
  noise ``C^{-1} z`` with one buffer per BLT buffer (Algorithm 3 of arXiv:2408.08868).

Optimized banded and BLT strategies, their Toeplitz coefficients and their min-separation
sensitivities come from jax-privacy's ``matrix_factorization``; the aggregator is
:class:`CorrelatedGaussianSum`.

Randomness: round t's fresh draws are ``gaussian_noise_tree(fold_in(key, j), ...)`` for
``j = 0, 1, ...`` from the release's key (a tree draws the nodes that complete that round), so a
run's noise is reproducible from its keys and each key is used once. The draws are
:func:`jfed._random.private_normals` (tails to ``PRIVATE_NORMAL_REACH`` standard deviations):
a float mechanism, the labelled exception to central releases on an integer grid (a linear
combination of discrete Gaussians is not one); as for any float Gaussian, the float32 grid of the
draws is not modelled.

References: docs/concepts/correlated_noise.md; Kairouz, McMahan, Song, Thakkar, Thakurta, Xu,
"Practical and Private (Deep) Learning without Sampling or Shuffling", ICML 2021; Honaker,
"Efficient Use of Differentially Private Binary Trees", 2015; Choquette-Choo, McMahan, Rush,
Thakurta, "(Amplified) Banded Matrix Factorization", NeurIPS 2023; Dvijotham, McMahan, Pillutla,
Steinke, Thakurta, "Efficient and Near-Optimal Noise Generation for Streaming Differential
Privacy", FOCS 2024; McKenna, "Scaling up the Banded Matrix Factorization Mechanism", 2024.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jfed._validation import UsageError, check_int_range, check_nonnegative, check_positive
from jfed.privacy.participation import Participation, gram_sensitivity
from jfed.privacy.privatizers import clip_tree, clip_tree_per_layer, gaussian_noise_tree

if TYPE_CHECKING:
    import dp_accounting

PyTree = Any
Draw = Callable[[jax.Array], PyTree]

DENSE_LIMIT = 4096
"""Most rounds for which a sensitivity is computed from the dense ``R x R`` Gram matrix (128 MiB
in float64); beyond it only the closed forms apply (a decreasing Toeplitz strategy under
min-separation, a tree with at most one participation per tree)."""


# ------------------------------------------------------------------------------ strategies


class NoiseStrategy(Protocol):
    """How a correlated-noise generator streams its noise (static and hashable).

    Device side: :meth:`init` makes the buffers, :meth:`next` turns this round's fresh unit
    normals into this round's noise increment. Host side: :meth:`draws` counts the fresh draws
    of a round, :meth:`strategy_matrix` is ``C`` (rows in draw order), :meth:`gram` is
    ``C^T C`` and :meth:`sensitivity` bounds ``sens(C)`` under a participation pattern.
    """

    name: ClassVar[str]

    def __hash__(self) -> int:
        """Strategies key the host-side caches (frozen dataclasses hash by value)."""
        ...

    def init(self, template: PyTree) -> PyTree:
        """The buffers before round 0 (``template``: shapes and dtypes of one update)."""
        ...

    def next(self, buffers: PyTree, round_index: jax.Array, draw: Draw) -> tuple[PyTree, PyTree]:
        """``(increment, buffers)``: round ``round_index``'s unit-scale noise increment (shaped
        like the template) from its fresh draws ``draw(0), draw(1), ...`` (each at most once)."""
        ...

    def draws(self, round_index: int) -> int:
        """How many fresh draws round ``round_index`` makes (host)."""
        ...

    def strategy_matrix(self, rounds: int) -> np.ndarray:
        """``C: f64[m, R]``, its rows in the order of the fresh draws (host)."""
        ...

    def gram(self, rounds: int) -> np.ndarray:
        """``C^T C: f64[R, R]`` (host)."""
        ...

    def sensitivity(self, participation: Participation) -> float:
        """An upper bound on ``sens(C)`` over ``participation.rounds`` rounds (host)."""
        ...


def _buffers(template: PyTree, count: int) -> PyTree:
    """Zeros ``[count, *leaf.shape]`` per leaf of ``template``, at least float32 (a bfloat16
    buffer would lose the noise's low bits round after round)."""
    return jax.tree.map(
        lambda leaf: jnp.zeros(
            (count, *jnp.shape(leaf)), jnp.promote_types(jnp.result_type(leaf), jnp.float32)
        ),
        template,
    )


def _weighted_sum(weights: jax.Array, buffers: jax.Array) -> jax.Array:
    """``sum_i weights[i] buffers[i]`` over the leading axis (``buffers: [n, ...]``, n static).

    Written out term by term: XLA fuses it with the rest of the round's elementwise work into
    one pass over the buffers (on CPU, ``jnp.sum(..., axis=0)`` over a [5, 10^6] array took
    82 ms against 3.7 ms for the written-out sum, and ``tensordot`` is a kernel of its own)."""
    terms = [weights[i] * buffers[i] for i in range(buffers.shape[0])]
    return functools.reduce(jnp.add, terms) if terms else jnp.zeros(buffers.shape[1:])


def _toeplitz_matrix(coefficients: np.ndarray, rounds: int) -> np.ndarray:
    """The lower-triangular Toeplitz ``f64[R, R]`` with first column ``coefficients`` (zeros
    past their end)."""
    column = np.zeros(rounds)
    column[: min(rounds, len(coefficients))] = coefficients[:rounds]
    lags = np.subtract.outer(np.arange(rounds), np.arange(rounds))
    return np.where(lags >= 0, column[np.clip(lags, 0, None)], 0.0)


@functools.cache
def _compiled_minsep_sensitivity_squared() -> Callable:
    """jax-privacy's ``toeplitz.minsep_sensitivity_squared`` as one compiled program per shape
    and pattern (eager, its small operations cost seconds the first time)."""
    from jax_privacy.matrix_factorization import toeplitz

    def squared(column: jax.Array, min_separation: int, k: int) -> jax.Array:
        return toeplitz.minsep_sensitivity_squared(
            column, min_separation, k, n=column.shape[0], skip_checks=True
        )

    return jax.jit(squared, static_argnums=(1, 2))


def _toeplitz_sensitivity(
    coefficients: np.ndarray, participation: Participation, gram: Callable[[int], np.ndarray]
) -> float:
    """sens of a lower-triangular Toeplitz strategy with first column ``coefficients``.

    Non-negative, non-increasing coefficients: jax-privacy's exact min-separation value
    (``toeplitz.minsep_sensitivity_squared``; the worst case is k participations exactly b
    apart), in O(R). Otherwise, or under epochs (where it may be loose), the dense bound of
    :func:`gram_sensitivity` up to :data:`DENSE_LIMIT` rounds; the least bound is returned."""
    rounds = participation.rounds
    column = np.zeros(rounds)
    column[: min(rounds, len(coefficients))] = coefficients[:rounds]
    bounds = []
    if np.all(column >= 0) and np.all(np.diff(column) <= 0):
        # host arithmetic, evaluated now even when called while a round is being traced
        with jax.enable_x64(), jax.ensure_compile_time_eval():
            squared = _compiled_minsep_sensitivity_squared()(
                jnp.asarray(column), participation.min_separation, participation.participations
            )
        bounds.append(math.sqrt(float(squared)))
    if (not bounds or participation.epoch_length is not None) and rounds <= DENSE_LIMIT:
        bounds.append(gram_sensitivity(gram(rounds), participation))
    if not bounds:
        raise UsageError(
            f"expected rounds <= {DENSE_LIMIT} for a Toeplitz strategy whose coefficients are not "
            f"non-negative and non-increasing (its sensitivity needs the dense Gram matrix), got "
            f"rounds={rounds}"
        )
    return min(bounds)


@dataclass(frozen=True)
class IndependentNoise:
    """Fresh noise every round (``C = I``): DP-SGD-style independent Gaussian noise.

    Under a participation pattern with k participations its sensitivity is ``sqrt(k)``, so
    :class:`CorrelatedGaussianSum` with it is the independent-noise Gaussian sum accounted for
    the schedule's repeated participation, the baseline of the correlated mechanisms.
    """

    name: ClassVar[str] = "independent"

    def init(self, template: PyTree) -> PyTree:
        return ()

    def next(self, buffers: PyTree, round_index: jax.Array, draw: Draw) -> tuple[PyTree, PyTree]:
        return draw(jnp.int32(0)), buffers

    def draws(self, round_index: int) -> int:
        return 1

    def strategy_matrix(self, rounds: int) -> np.ndarray:
        return np.eye(rounds)

    def gram(self, rounds: int) -> np.ndarray:
        return np.eye(rounds)

    def sensitivity(self, participation: Participation) -> float:
        return _toeplitz_sensitivity(np.ones(1), participation, self.gram)


@dataclass(frozen=True)
class BandedNoise:
    """A banded lower-triangular Toeplitz strategy: ``C[t, s] = c_{t-s}`` for
    ``0 <= t - s < bands`` (BandMF with Toeplitz bands).

    The noise ``C^{-1} z`` is streamed by forward substitution,
    ``u_t = (z_t - sum_{i=1}^{bands-1} c_i u_{t-i}) / c_0``, keeping the last ``bands - 1``
    outputs (a circular buffer: one write per round, no shift). With ``bands <= b``
    (min-separation), columns of C that one client can both touch are orthogonal and the
    sensitivity is exact.

    Attributes:
      coefficients: ``(c_0, ..., c_{bands-1})`` with ``c_0 > 0``.

    Example:
      >>> BandedNoise.optimized(Participation(64, 16, 4), bands=4)  # doctest: +SKIP
    """

    coefficients: tuple[float, ...]
    name: ClassVar[str] = "banded"

    def __post_init__(self) -> None:
        coefficients = tuple(float(c) for c in np.ravel(self.coefficients))
        if not coefficients or not all(math.isfinite(c) for c in coefficients):
            raise UsageError(f"expected finite coefficients (at least one), got {coefficients}")
        if coefficients[0] <= 0:
            raise UsageError(f"expected coefficients[0] > 0, got {coefficients[0]}")
        object.__setattr__(self, "coefficients", coefficients)

    @classmethod
    def optimized(
        cls, participation: Participation, bands: int | None = None, steps: int = 250
    ) -> BandedNoise:
        """jax-privacy's banded Toeplitz strategy for the prefix-sum workload over
        ``participation.rounds`` rounds (``optimize_banded_toeplitz``, mean squared error,
        L-BFGS for ``steps`` steps), with ``bands`` bands (default: the min separation, the most
        for which the sensitivity is exact)."""
        from jax_privacy.matrix_factorization import toeplitz

        rounds = participation.rounds
        bands = participation.min_separation if bands is None else bands
        bands = check_int_range("bands", bands, 1, rounds)
        with jax.enable_x64():
            coefficients = toeplitz.optimize_banded_toeplitz(
                n=rounds, bands=bands, max_optimizer_steps=steps
            )
        return cls(tuple(np.asarray(coefficients, np.float64)))

    @property
    def bands(self) -> int:
        return len(self.coefficients)

    def init(self, template: PyTree) -> PyTree:
        return _buffers(template, self.bands - 1) if self.bands > 1 else ()

    def next(self, buffers: PyTree, round_index: jax.Array, draw: Draw) -> tuple[PyTree, PyTree]:
        fresh = draw(jnp.int32(0))
        first = self.coefficients[0]
        if self.bands == 1:
            return jax.tree.map(lambda z: z / first, fresh), buffers
        slots = self.bands - 1
        # slot s holds u_{t - lag}, lag = ((t - s - 1) mod slots) + 1 (zeros before round 0)
        lags = (round_index - jnp.arange(slots) - 1) % slots + 1
        write = round_index % slots

        def step(z: jax.Array, buffer: jax.Array) -> tuple[jax.Array, jax.Array]:
            weights = jnp.asarray(self.coefficients, buffer.dtype)[lags]
            output = (z.astype(buffer.dtype) - _weighted_sum(weights, buffer)) / first
            return output, buffer.at[write].set(output)

        return _unzip(jax.tree.map(step, fresh, buffers), fresh)

    def draws(self, round_index: int) -> int:
        return 1

    def strategy_matrix(self, rounds: int) -> np.ndarray:
        return _toeplitz_matrix(np.asarray(self.coefficients), rounds)

    def gram(self, rounds: int) -> np.ndarray:
        matrix = self.strategy_matrix(rounds)
        return matrix.T @ matrix

    def sensitivity(self, participation: Participation) -> float:
        return _toeplitz_sensitivity(np.asarray(self.coefficients), participation, self.gram)


@dataclass(frozen=True)
class BltNoise:
    """A buffered linear Toeplitz (BLT) strategy ``C``: Toeplitz with ``c_0 = 1`` and
    ``c_k = sum_i output_scale_i buf_decay_i^(k-1)`` for ``k >= 1`` (jax-privacy's
    ``BufferedToeplitz``).

    The noise ``u = C^{-1} z`` is streamed with one buffer per BLT buffer (Algorithm 3 of
    Dvijotham et al., arXiv:2408.08868): ``u_t = z_t - sum_i output_scale_i S_i``, then
    ``S_i <- buf_decay_i S_i + u_t``. A round costs one [d] draw and ``2 n_buffers`` [d]
    multiply-adds; the state is ``n_buffers`` [d] arrays, whatever R.

    Attributes:
      buf_decay: ``theta_i``, one per buffer.
      output_scale: ``omega_i``, one per buffer (the same length). The recursion's matrix
        ``diag(theta) - 1 omega^T`` must have spectral radius <= 1 (checked), or float32 noise
        would grow without bound.

    Example:
      >>> noise = BltNoise.rational_approximation(3)
      >>> noise.toeplitz_coefficients(4).round(3)  # doctest: +SKIP
    """

    buf_decay: tuple[float, ...]
    output_scale: tuple[float, ...]
    name: ClassVar[str] = "blt"

    def __post_init__(self) -> None:
        decay = tuple(float(v) for v in np.ravel(self.buf_decay))
        scale = tuple(float(v) for v in np.ravel(self.output_scale))
        if len(decay) != len(scale):
            raise UsageError(
                f"expected buf_decay and output_scale of one length, got {len(decay)} and "
                f"{len(scale)}"
            )
        if not all(math.isfinite(v) for v in decay + scale):
            raise UsageError("expected finite buf_decay and output_scale")
        if decay:
            recursion = np.diag(decay) - np.outer(np.ones(len(decay)), scale)
            radius = float(np.max(np.abs(np.linalg.eigvals(recursion))))
            if radius > 1.0 + 1e-9:
                raise UsageError(
                    f"expected a stable noise recursion (spectral radius of diag(buf_decay) - "
                    f"1 output_scale^T <= 1), got {radius:.6g}"
                )
        object.__setattr__(self, "buf_decay", decay)
        object.__setattr__(self, "output_scale", scale)

    @classmethod
    def from_jax_privacy(cls, blt: Any) -> BltNoise:
        """From a ``jax_privacy.matrix_factorization.buffered_toeplitz.BufferedToeplitz``."""
        return cls(
            tuple(np.asarray(blt.buf_decay, np.float64)),
            tuple(np.asarray(blt.output_scale, np.float64)),
        )

    @classmethod
    def optimized(
        cls, participation: Participation, max_buffers: int = 5, error: str = "max", **kwargs: Any
    ) -> BltNoise:
        """jax-privacy's optimized BLT for the prefix-sum workload under ``participation``
        (``buffered_toeplitz.optimize``: ``error`` "max" or "mean" squared error at its
        sensitivity under min-separation; buffers added while they help, up to
        ``max_buffers``). Host side, float64; seconds to minutes (a GPU helps for large R)."""
        from jax_privacy.matrix_factorization import buffered_toeplitz

        blt = buffered_toeplitz.optimize(
            n=participation.rounds,
            min_sep=participation.min_separation,
            max_participations=participation.participations,
            error=error,
            max_buffers=max_buffers,
            **kwargs,
        )
        return cls.from_jax_privacy(blt)

    @classmethod
    def rational_approximation(cls, num_buffers: int) -> BltNoise:
        """jax-privacy's BLT from a rational approximation of ``1 / sqrt(1 - x)`` (the
        generating function of the optimal Toeplitz strategy for single participation; "RA-BLT"
        of arXiv:2404.16706): no optimization, a good strategy for any R."""
        from jax_privacy.matrix_factorization import buffered_toeplitz

        num_buffers = check_int_range("num_buffers", num_buffers, 1, 15)
        with jax.enable_x64():
            blt = buffered_toeplitz.BufferedToeplitz.from_rational_approx_to_sqrt_x(
                num_buffers, max_buf_decay=1 - 1e-6, max_pillutla_score=1 - 1e-6
            )
            return cls.from_jax_privacy(blt)

    def as_jax_privacy(self) -> Any:
        """This strategy as jax-privacy's ``BufferedToeplitz`` (float64: call it inside
        ``jax.enable_x64()``)."""
        from jax_privacy.matrix_factorization import buffered_toeplitz

        return buffered_toeplitz.BufferedToeplitz.build(
            buf_decay=list(self.buf_decay), output_scale=list(self.output_scale)
        )

    def toeplitz_coefficients(self, rounds: int) -> np.ndarray:
        """``(c_0, ..., c_{R-1}): f64[R]`` of C."""
        powers = np.arange(max(rounds - 1, 0))[:, None]
        tail = (np.asarray(self.buf_decay) ** powers * np.asarray(self.output_scale)).sum(axis=1)
        return np.concatenate([[1.0], tail])[:rounds]

    def init(self, template: PyTree) -> PyTree:
        return _buffers(template, len(self.buf_decay)) if self.buf_decay else ()

    def next(self, buffers: PyTree, round_index: jax.Array, draw: Draw) -> tuple[PyTree, PyTree]:
        fresh = draw(jnp.int32(0))
        if not self.buf_decay:
            return fresh, buffers

        def step(z: jax.Array, buffer: jax.Array) -> tuple[jax.Array, jax.Array]:
            scale = jnp.asarray(self.output_scale, buffer.dtype)
            decay = jnp.asarray(self.buf_decay, buffer.dtype)
            output = z.astype(buffer.dtype) - _weighted_sum(scale, buffer)
            return output, decay.reshape((-1,) + (1,) * (buffer.ndim - 1)) * buffer + output

        return _unzip(jax.tree.map(step, fresh, buffers), fresh)

    def draws(self, round_index: int) -> int:
        return 1

    def strategy_matrix(self, rounds: int) -> np.ndarray:
        return _toeplitz_matrix(self.toeplitz_coefficients(rounds), rounds)

    def gram(self, rounds: int) -> np.ndarray:
        matrix = self.strategy_matrix(rounds)
        return matrix.T @ matrix

    def sensitivity(self, participation: Participation) -> float:
        coefficients = self.toeplitz_coefficients(participation.rounds)
        return _toeplitz_sensitivity(coefficients, participation, self.gram)


@dataclass(frozen=True)
class TreeNoise:
    """Binary-tree aggregation (the tree mechanism of DP-FTRL), restarted every
    ``rounds_per_tree`` rounds.

    Within a tree of T leaves, node ``(level l, start a)`` (``a`` a multiple of ``2^l``) holds
    the sum of leaves ``[a, a + 2^l)`` plus its own fresh noise, and completes in round
    ``a + 2^l - 1``. The prefix ``[0, tau]`` is the sum of its dyadic blocks (one node per set
    bit of ``tau + 1``): from round ``tau - 1`` to ``tau`` exactly one node enters (level j, the
    number of trailing ones of ``tau``) and the j below it leave, so the state is one buffer per
    level, ``floor(log2 T) + 1`` in all.

    - ``honaker=False``: only the nodes that enter a prefix are drawn (one per round); node
      noise is released as is.
    - ``honaker=True``: every node is drawn when it completes (``1 + j`` draws in round tau,
      2 per round on average), and a node's estimate combines its own noisy value with its
      children's estimates by inverse variance (Honaker 2015): ``e = w_l y + (1 - w_l)
      (e_left + e_right)``, ``w_l = 2 v_{l-1} / (1 + 2 v_{l-1})``, ``v_l = w_l``, ``v_0 = 1``;
      the children complete no later than their parent, so this is online. Each node's
      estimate is then the best linear unbiased one from its subtree, and the prefix noise
      variance drops (by about a factor 2 at large T).

    With restarts, one client in each tree at most once (e.g. a tree per cyclic pass) gives
    ``sens^2 = k (floor(log2 T) + 1)``: dp-accounting's ``SingleEpochTreeAggregationDpEvent``
    composed over the trees (Kairouz et al. 2021, Appendix D).

    Attributes:
      rounds_per_tree: T >= 1.
      honaker: use Honaker's estimator (default).
    """

    rounds_per_tree: int
    honaker: bool = True
    name: ClassVar[str] = "tree"

    def __post_init__(self) -> None:
        per_tree = check_int_range("rounds_per_tree", self.rounds_per_tree, 1, 2**30)
        object.__setattr__(self, "rounds_per_tree", per_tree)
        object.__setattr__(self, "honaker", bool(self.honaker))

    @property
    def levels(self) -> int:
        """``floor(log2 T) + 1``: the levels of the tree, and its depth at leaf 0."""
        return int(self.rounds_per_tree).bit_length()

    @functools.cached_property
    def _own_weights(self) -> tuple[float, ...]:
        """``w_l`` for ``l = 0 .. levels - 1`` (``w_0 = 1``: a leaf has no children)."""
        weights, variance = [1.0], 1.0
        for _ in range(1, self.levels):
            weight = 2.0 * variance / (1.0 + 2.0 * variance)
            weights.append(weight)
            variance = weight
        return tuple(weights)

    def init(self, template: PyTree) -> PyTree:
        return _buffers(template, self.levels)

    def next(self, buffers: PyTree, round_index: jax.Array, draw: Draw) -> tuple[PyTree, PyTree]:
        tau = (round_index % self.rounds_per_tree).astype(jnp.int32)
        # No buffer is cleared, at a restart or when its node leaves the prefix: level l is read
        # (as a leaving node or a left child) only when a node above l enters, and a binary
        # counter sets bit l again before it carries past it, so every read finds a node of the
        # current tree written since it last left.
        entering = lax.population_count(tau ^ (tau + 1)) - 1  # trailing ones of tau
        if self.honaker:

            def combine(level: jax.Array, estimate: PyTree) -> PyTree:
                # the node completing at `level`: its own noisy value and (its left child, in
                # the buffers, + its right child, just estimated), by inverse variance; a leaf
                # (level 0, weight 1) is exactly its own value
                def leaf(own: jax.Array, buffer: jax.Array, right: jax.Array) -> jax.Array:
                    weight = jnp.asarray(self._own_weights, buffer.dtype)[level]
                    children = buffer[level - 1] + right
                    return weight * own.astype(buffer.dtype) + (1 - weight) * children

                return jax.tree.map(leaf, draw(level), buffers, estimate)

            zeros = jax.tree.map(lambda b: jnp.zeros_like(b[0]), buffers)
            node = lax.fori_loop(0, entering + 1, combine, zeros)
        else:
            node = jax.tree.map(lambda y, b: y.astype(b.dtype), draw(jnp.int32(0)), buffers)
        leaving = jnp.arange(self.levels) < entering

        def step(estimate: jax.Array, buffer: jax.Array) -> tuple[jax.Array, jax.Array]:
            increment = estimate - _weighted_sum(leaving.astype(buffer.dtype), buffer)
            return increment, buffer.at[entering].set(estimate)

        return _unzip(jax.tree.map(step, node, buffers), node)

    def draws(self, round_index: int) -> int:
        if not self.honaker:
            return 1
        tau = int(round_index) % self.rounds_per_tree
        return (tau ^ (tau + 1)).bit_count()  # 1 + trailing ones

    def _nodes(self, rounds: int) -> list[tuple[int, int, int]]:
        """``(round, start, length)`` of every drawn node in draw order (absolute rounds)."""
        nodes = []
        for t in range(rounds):
            tau = t % self.rounds_per_tree
            entering = (tau ^ (tau + 1)).bit_count() - 1
            levels = range(entering + 1) if self.honaker else [entering]
            for level in levels:
                nodes.append((t, t + 1 - 2**level, 2**level))
        return nodes

    def strategy_matrix(self, rounds: int) -> np.ndarray:
        nodes = self._nodes(rounds)
        matrix = np.zeros((len(nodes), rounds))
        for row, (_, start, length) in enumerate(nodes):
            matrix[row, start : start + length] = 1.0
        return matrix

    def gram(self, rounds: int) -> np.ndarray:
        gram = np.zeros((rounds, rounds))
        for _, start, length in self._nodes(rounds):
            gram[start : start + length, start : start + length] += 1.0
        return gram

    def sensitivity(self, participation: Participation) -> float:
        rounds = participation.rounds
        if rounds <= DENSE_LIMIT:
            return gram_sensitivity(self.gram(rounds), participation)
        per_tree = self.rounds_per_tree
        once_per_tree = participation.min_separation >= per_tree or (
            participation.epoch_length is not None and participation.epoch_length % per_tree == 0
        )
        if not once_per_tree:
            raise UsageError(
                f"expected rounds <= {DENSE_LIMIT}, or at most one participation per tree "
                f"(min_separation >= rounds_per_tree={per_tree}), for a tree's sensitivity; got "
                f"rounds={rounds}, {participation}"
            )
        # every participation in its own tree, each at most the depth of leaf 0
        return math.sqrt(participation.participations * min(per_tree, rounds).bit_length())


def _unzip(pairs: PyTree, like: PyTree) -> tuple[PyTree, PyTree]:
    """A tree of ``(a, b)`` pairs (structured like ``like``) as ``(tree of a, tree of b)``."""
    return jax.tree.transpose(jax.tree.structure(like), jax.tree.structure((0, 0)), pairs)


def noise_matrix(strategy: NoiseStrategy, rounds: int) -> np.ndarray:
    """``M: f64[R, m]``: the released increments' unit-scale noise is ``M z``, ``z`` the ``m``
    fresh draws of R rounds in draw order; its cumulative sum over rounds is the decoder B of
    the prefix sums (``B C = A``).

    Host side: runs the strategy's own :meth:`~NoiseStrategy.next` in float64 with each draw a
    unit vector, so it is the linear map the device applies (computed once per strategy and R).
    """
    return _noise_matrix(strategy, rounds).copy()


@functools.lru_cache(maxsize=32)
def _noise_matrix(strategy: NoiseStrategy, rounds: int) -> np.ndarray:
    counts = [strategy.draws(t) for t in range(rounds)]
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32)
    draws = int(sum(counts))
    with jax.enable_x64(), jax.ensure_compile_time_eval():
        template = jnp.zeros(draws, jnp.float64)

        def round_(buffers, inputs):
            round_index, offset = inputs
            unit = lambda j: template.at[offset + j].set(1.0)  # noqa: E731
            increment, buffers = strategy.next(buffers, round_index, unit)
            return buffers, increment

        inputs = (jnp.arange(rounds, dtype=jnp.int32), jnp.asarray(offsets))
        _, increments = jax.jit(lambda: lax.scan(round_, strategy.init(template), inputs))()
        return np.asarray(increments, np.float64)


# ------------------------------------------------------------------------------ aggregator


def _float_template(update: PyTree) -> PyTree:
    """The noise's shapes and dtypes for ``update``: its leaves' shapes, at least float32."""
    return jax.tree.map(
        lambda leaf: jax.ShapeDtypeStruct(
            jnp.shape(leaf), jnp.promote_types(jnp.result_type(leaf), jnp.float32)
        ),
        update,
    )


class CorrelatedGaussianSumParams(NamedTuple):
    """What a sweep varies (read from the hyper-parameters unchanged).

    Attributes:
      clip_norm: ``C``, the L2 bound on one client's contribution to one release (> 0).
      noise_multiplier: ``z``: the whole run is ``GaussianDpEvent(z)``; each fresh draw has
        std ``z * clip_norm * sens``, ``sens`` the strategy's sensitivity under the
        participation pattern.
    """

    clip_norm: Any
    noise_multiplier: Any


class CorrelatedState(NamedTuple):
    """The aggregator's state: ``round: i32[]`` (releases made) and the strategy's buffers."""

    round: jax.Array
    buffers: PyTree


class ClippedContribution(NamedTuple):
    """One client's contribution (what the engine sums): its clipped ``update`` and
    ``clipped: f32[]``, 1 if clipping shrank it (summed: the count of clipped clients)."""

    update: PyTree
    clipped: jax.Array


@dataclass(frozen=True)
class CorrelatedGaussianSum:
    """A clipped sum with correlated Gaussian noise (DP-FTRL's aggregator), on jfed's aggregator
    protocol (``init`` / ``preprocess`` / ``release`` / ``event``).

    Each release returns the round's clipped sum plus the round's noise increment (see the
    module docstring): the running sum of the releases is the noised prefix sum of the
    mechanism. The run is one Gaussian mechanism ``GaussianDpEvent(z)`` under add-or-remove
    adjacency of one client (all its participations), for the participation pattern given
    here; no amplification by sampling is assumed.

    Attributes:
      noise: the strategy (:class:`IndependentNoise`, :class:`TreeNoise`,
        :class:`BandedNoise`, :class:`BltNoise`).
      participation: the schedule's pattern over the run (e.g.
        ``jfed.engine.schedules.CyclicGroups(b).participation(R)``); its ``rounds`` is the
        horizon the sensitivity holds for.
      per_layer: clip every leaf to ``C / sqrt(L)`` instead of the whole update to C.

    Example::

        participation = Participation(rounds=64, max_participations=4, min_separation=16)
        aggregator = CorrelatedGaussianSum(BltNoise.rational_approximation(3), participation)
        params = aggregator.calibrate(epsilon=2.0, delta=1e-6, clip_norm=1.0)
        state = aggregator.init(params, template)
        contribution = aggregator.preprocess(params, state, update, key)  # per client, summed
        released, state, diagnostics = aggregator.release(params, state, summed, key)
    """

    noise: NoiseStrategy
    participation: Participation
    per_layer: bool = False
    Params: ClassVar[type] = CorrelatedGaussianSumParams

    @functools.cached_property
    def sensitivity(self) -> float:
        """``sens(C)`` under :attr:`participation`, in units of the clip norm (host)."""
        return float(self.noise.sensitivity(self.participation))

    def init(self, params: CorrelatedGaussianSumParams, template: PyTree) -> CorrelatedState:
        """Round 0 and empty buffers shaped like ``template`` (one client's update)."""
        return CorrelatedState(round=jnp.int32(0), buffers=self.noise.init(template))

    def preprocess(
        self,
        params: CorrelatedGaussianSumParams,
        state: CorrelatedState,
        update: PyTree,
        key: jax.Array,
    ) -> ClippedContribution:
        """One client's ``update`` clipped to ``params.clip_norm`` (``key`` unused)."""
        clip = clip_tree_per_layer if self.per_layer else clip_tree
        clipped, was_clipped = clip(update, params.clip_norm)
        return ClippedContribution(clipped, was_clipped)

    def noise_std(self, params: CorrelatedGaussianSumParams) -> Any:
        """The std of each fresh draw, ``z * clip_norm * sens`` (traced or host floats)."""
        return params.noise_multiplier * params.clip_norm * self.sensitivity

    def release(
        self,
        params: CorrelatedGaussianSumParams,
        state: CorrelatedState,
        summed: ClippedContribution,
        key: jax.Array,
    ) -> tuple[PyTree, CorrelatedState, dict]:
        """The round's sum plus its noise increment, the next state, and diagnostics.

        Args:
          params: clip norm and noise multiplier (may be traced).
          state: from :meth:`init` or the previous release.
          summed: the cohort's sum of :meth:`preprocess` outputs.
          key: this release's key; fresh draw j uses ``fold_in(key, j)``.

        Returns:
          ``(released, state, diagnostics)``: ``released`` shaped like the update;
          diagnostics ``noise_std`` (of each fresh draw), ``past_horizon`` (1.0 once the run
          has made more releases than ``participation.rounds``, where the sensitivity no longer
          holds), ``clip`` (the clip norm) and ``clipped_count`` (how many clients clipping
          shrank, computed from their raw updates: outside the guarantee, one of
          :data:`jfed.privacy.aggregators.NOT_PRIVATE`).
        """
        update = summed.update
        template = _float_template(update)
        unit = jnp.ones((), jnp.float32)
        draw = lambda j: gaussian_noise_tree(jax.random.fold_in(key, j), template, unit)  # noqa: E731
        increment, buffers = self.noise.next(state.buffers, state.round, draw)
        std = jnp.asarray(self.noise_std(params), jnp.float32)
        released = jax.tree.map(
            lambda total, noise: total + (std * noise).astype(jnp.result_type(total)),
            update,
            increment,
        )
        diagnostics = {
            "noise_std": std,
            "past_horizon": (state.round >= self.participation.rounds).astype(jnp.float32),
            "clip": jnp.asarray(params.clip_norm, jnp.float32),
            "clipped_count": jnp.asarray(summed.clipped, jnp.float32),
        }
        return released, CorrelatedState(state.round + 1, buffers), diagnostics

    def audit_view(
        self,
        params: CorrelatedGaussianSumParams,
        state: CorrelatedState,
        summed: ClippedContribution,
        key: jax.Array,
    ) -> PyTree | None:
        """What a canary taking part in this release is best scored against, or ``None`` (the
        released increment itself). For Honaker's tree: this round's own leaf node, its clipped
        sum plus the leaf's fresh draw (draw 0 of the release, redrawn from ``key``): every
        node's noisy value is part of the mechanism the run is certified for (all of them are
        rows of its strategy matrix), and the leaf carries one draw's noise where the increment
        carries several nodes'. The other strategies' single-round values need past rounds'
        sums: ``None``."""
        del state
        if not (isinstance(self.noise, TreeNoise) and self.noise.honaker):
            return None
        update = summed.update
        std = jnp.asarray(self.noise_std(params), jnp.float32)
        leaf = gaussian_noise_tree(jax.random.fold_in(key, 0), _float_template(update), std)
        return jax.tree.map(lambda total, noise: total + noise.astype(total.dtype), update, leaf)

    def run_reach_delta(self, params: CorrelatedGaussianSumParams, rounds: int) -> float:
        """The delta the float32 draws' bounded reach adds over ``rounds`` releases
        (:func:`jfed.privacy.reach_delta`): the released noise is a fixed linear map of the
        fresh draws, so an output is possible under an input exactly when the draws it needs
        lie within reach, and one client moves the draws by the mechanism's sensitivity, at most
        ``1 / z`` of a draw's standard deviation in any one of them; a union bound over every
        fresh draw of the run (the schedule, not sampling, decides who takes part)."""
        from jfed.privacy.accounting import reach_delta

        draws = sum(int(self.noise.draws(t)) for t in range(int(rounds)))
        return reach_delta([1.0 / float(params.noise_multiplier)], 1.0, draws)

    def run_event(self, params: CorrelatedGaussianSumParams) -> dp_accounting.DpEvent:
        """The whole run's event (host): ``GaussianDpEvent(z)``, for any number of releases up
        to ``participation.rounds`` (fewer are a function of the full run's output)."""
        import dp_accounting

        return dp_accounting.GaussianDpEvent(
            check_nonnegative("noise_multiplier", params.noise_multiplier)
        )

    def event(self, params: CorrelatedGaussianSumParams) -> dp_accounting.DpEvent:
        """One release's share of :meth:`run_event` (host): ``GaussianDpEvent(z sqrt(R))``.

        Gaussians compose exactly, so the R releases of a run over its whole horizon compose to
        ``GaussianDpEvent(z)``. A run with fewer releases must be certified with
        :meth:`run_event` instead (its first releases can spend more than their share), and a
        cohort must not wrap this event in a sampled one (no amplification is assumed: the
        participation pattern is inside the sensitivity).
        """
        import dp_accounting

        z = check_nonnegative("noise_multiplier", params.noise_multiplier)
        return dp_accounting.GaussianDpEvent(z * math.sqrt(self.participation.rounds))

    def guarantee(
        self,
        params: CorrelatedGaussianSumParams,
        delta: float,
        *,
        accountant: Any = None,
        adjacency: Any = "add-or-remove",
    ) -> Any:
        """The run's :class:`~jfed.privacy.PrivacyGuarantee` (host): :meth:`run_event`
        certified by :func:`jfed.privacy.accounting.certify` (default PLD), central DP of all of
        one client's contributions under this participation pattern, no amplification."""
        from jfed.privacy.accounting import Pld, certify

        pattern = self.participation
        return certify(
            self.run_event(params),
            delta,
            accountant=Pld() if accountant is None else accountant,
            adjacency=adjacency,
            notion="central (eps, delta)-DP",
            protected=(
                f"all of one client's clipped updates over {pattern.rounds} rounds (at most "
                f"{pattern.participations} participations, {pattern.min_separation} or more "
                "rounds apart; no amplification by sampling assumed)"
            ),
            trust_model=f"trusted server adds correlated Gaussian noise ({self.noise.name})",
        )

    def calibrate(
        self,
        epsilon: float,
        delta: float,
        clip_norm: float,
        *,
        accountant: Any = None,
        adjacency: Any = "add-or-remove",
    ) -> CorrelatedGaussianSumParams:
        """The params whose run is (eps, delta)-DP: the least z with ``GaussianDpEvent(z)``
        at (eps, delta) through ``accountant`` (default PLD), by
        :func:`jfed.privacy.accounting.calibrate` (dp-accounting's calibration)."""
        import dp_accounting

        from jfed.privacy.accounting import Pld, calibrate

        clip_norm = check_positive("clip_norm", clip_norm)
        z = calibrate(
            dp_accounting.GaussianDpEvent,
            epsilon,
            delta,
            accountant=Pld() if accountant is None else accountant,
            adjacency=adjacency,
        )
        return CorrelatedGaussianSumParams(clip_norm=clip_norm, noise_multiplier=z)

    def increment_noise_std(self, params: CorrelatedGaussianSumParams) -> np.ndarray:
        """``f64[R]``: the std of each coordinate of each round's released noise increment
        (host; ``sigma`` times the row norms of :func:`noise_matrix`)."""
        sigma = float(self.noise_std(params))
        return sigma * np.linalg.norm(noise_matrix(self.noise, self.participation.rounds), axis=1)

    def prefix_noise_std(self, params: CorrelatedGaussianSumParams) -> np.ndarray:
        """``f64[R]``: the std of each coordinate of the noise on the running sum of the
        releases (the noised prefix sums) after each round (host)."""
        sigma = float(self.noise_std(params))
        decoder = np.cumsum(noise_matrix(self.noise, self.participation.rounds), axis=0)
        return sigma * np.linalg.norm(decoder, axis=1)
