"""Aggregators: privatized aggregations over pytrees that state their own accounting.

An aggregator has the shape of TF Privacy's ``DPQuery`` and TFF's DP aggregators, made for one
jitted, vmapped program: a STATIC, hashable object (a frozen dataclass, a ``jit`` static
argument) holding only structure, and four functions.

- ``init(params, template) -> state``: the state before the first release (``template`` is a
  pytree shaped like one client's update; only shapes and dtypes are read).
- ``preprocess(params, state, update, key) -> record``: ONE client's contribution (the engine
  vmaps it and sums the records over the cohort), e.g. the update clipped to the clip norm.
- ``release(params, state, summed, key) -> (value, state, diagnostics)``: the privatized
  aggregate from the cohort's sum, the next state, and diagnostics (``f32[]`` arrays).
- ``event(params) -> dp_accounting.DpEvent``: HOST side, from the aggregator's own parameters
  (Python floats): the event of ONE release over the clients that took part, for add-or-remove
  adjacency of one client's contribution. Cohorts wrap it into their sampled event
  (:mod:`jfed.engine.cohort`); a run's guarantee composes the events of every release it made.

Two optional class attributes: ``local = True`` for a local randomizer (each client randomizes
its own message: the guarantee is the message's, not wrapped by the cohort's sampling) and
``adjacency`` where the aggregator's event is stated for another adjacency than its cohort's
(a local randomizer's: :attr:`~jfed.privacy.Adjacency.BOUNDED`).

Every number a sweep varies lives in ``params``, a NamedTuple the algorithm reads from its
hyper-parameters UNCHANGED (the engine checks this at trace time: the accountant then reads the
very numbers that ran); what evolves between releases (an adaptive clip norm) lives in the state.

Noise multiplier convention: ``z = noise std / C``, C the bound on one client's contribution
(its L2 norm after clipping), i.e. the sum's sensitivity under add-or-remove adjacency.

Diagnostics computed from unnoised data (how many clients were clipped, their norms before
clipping) are outside the guarantee: :data:`NOT_PRIVATE` names them, and a record labels them.

Example (one round of DP-FedAvg's aggregation, written for one client by the engine)::

    aggregator = GaussianSum()
    params = GaussianSumParams(clip_norm=1.0, noise_multiplier=1.1)
    records = jax.vmap(lambda u: aggregator.preprocess(params, (), u, key))(updates)
    summed = jax.tree.map(lambda x: x.sum(0), records)
    noised_sum, _, diagnostics = aggregator.release(params, (), summed, key)
    event = aggregator.event(params)  # host side: GaussianDpEvent(1.1)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp

from jfed._validation import check_nonnegative, check_positive
from jfed.privacy.guarantee import Adjacency
from jfed.privacy.privatizers import clip_tree, clip_tree_per_layer, gaussian_noise_tree, tree_norm

if TYPE_CHECKING:
    import dp_accounting

PyTree = Any

NOT_PRIVATE = ("clipped_count", "norm_sum", "count", "rounding_fallbacks", "survivors",
               "withheld", "wrapped_coordinates")  # fmt: skip
"""Diagnostics an aggregator may return that are computed from unnoised client data or from who
took part (the grid sums' rounding fallbacks; the secure sums' survivors, withheld releases and
wrapped coordinates): a record that keeps them says they are outside the guarantee."""


@runtime_checkable
class Aggregator(Protocol):
    """What every aggregator provides (see the module docstring)."""

    def init(self, params: Any, template: PyTree) -> PyTree: ...

    def preprocess(self, params: Any, state: PyTree, update: PyTree, key: jax.Array) -> PyTree: ...

    def release(
        self, params: Any, state: PyTree, summed: PyTree, key: jax.Array
    ) -> tuple[PyTree, PyTree, dict]: ...

    def event(self, params: Any) -> dp_accounting.DpEvent: ...


def _clip(per_layer: bool, update: PyTree, clip_norm: jax.Array) -> tuple[PyTree, jax.Array]:
    return (clip_tree_per_layer if per_layer else clip_tree)(update, clip_norm)


def _split(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A release's two streams: the value's noise and its statistics' (one key, one use)."""
    value_key, statistics_key = jax.random.split(key)
    return value_key, statistics_key


class GaussianSumParams(NamedTuple):
    """Parameters of :class:`GaussianSum` (each ``f32[]`` on device, a float on the host).

    Attributes:
      clip_norm: C > 0, the L2 bound on one client's contribution.
      noise_multiplier: z >= 0; the noise std on the sum is ``z C``.
    """

    clip_norm: Any
    noise_multiplier: Any


@dataclass(frozen=True)
class GaussianSum:
    """Clipped sum of client updates plus Gaussian noise: central DP, DP-FedAvg's aggregator.

    Each client's update is clipped to norm C (flat, or every leaf to ``C / sqrt(L)`` with
    ``per_layer``: either way one client moves the sum by at most C); the release adds
    ``N(0, (z C)^2)`` to every coordinate of the sum.

    Attributes:
      per_layer: clip every leaf (layer) to ``C / sqrt(L)`` instead of the whole update to C.
    """

    per_layer: bool = False
    Params: ClassVar[type] = GaussianSumParams

    def init(self, params: GaussianSumParams, template: PyTree) -> tuple:
        del params, template
        return ()

    def preprocess(
        self, params: GaussianSumParams, state: tuple, update: PyTree, key: jax.Array
    ) -> dict:
        """``{"value": update clipped to C, "clipped": 1.0 if it was, "norm": its norm before
        clipping}`` for ONE client."""
        del state, key
        clipped, was_clipped = _clip(self.per_layer, update, params.clip_norm)
        return {"value": clipped, "clipped": was_clipped, "norm": tree_norm(update)}

    def release(
        self, params: GaussianSumParams, state: tuple, summed: dict, key: jax.Array
    ) -> tuple[PyTree, tuple, dict]:
        """The sum plus noise of std ``z C`` (the noise from the first half of ``key``)."""
        value_key, _ = _split(key)
        noise = gaussian_noise_tree(value_key, summed["value"],
                                    params.noise_multiplier * params.clip_norm)  # fmt: skip
        noised = jax.tree.map(jnp.add, summed["value"], noise)
        diagnostics = {"clip": jnp.asarray(params.clip_norm, jnp.float32),
                       "clipped_count": summed["clipped"], "norm_sum": summed["norm"]}  # fmt: skip
        return noised, state, diagnostics

    def reach_shifts(self, params: GaussianSumParams) -> tuple[float, ...]:
        """Float noise's bounded reach (:func:`jfed.privacy.reach_delta`): how far one client
        moves the release's noise, in its standard deviations, under add-or-remove (``1 / z``);
        the ledger doubles it under replace-one and adds the delta term to every run."""
        return (1.0 / float(params.noise_multiplier),)

    def event(self, params: GaussianSumParams) -> dp_accounting.DpEvent:
        """``GaussianDpEvent(z)`` of one release (host side)."""
        import dp_accounting

        check_positive("clip_norm", params.clip_norm)
        return dp_accounting.GaussianDpEvent(
            check_nonnegative("noise_multiplier", params.noise_multiplier)
        )


class AdaptiveClipParams(NamedTuple):
    """Parameters of :class:`QuantileAdaptiveGaussianSum` (``f32[]`` on device, floats on the
    host).

    Attributes:
      initial_clip: C_0 > 0, the clip norm of the first release.
      noise_multiplier: z_delta, the noise std on the sum of updates is ``z_delta C_t``.
      count_noise: sigma_b > 0, the noise std on the count of unclipped clients.
      target_quantile: gamma in [0, 1], the fraction of clients to leave unclipped.
      learning_rate: eta_C >= 0 of the geometric clip update.
    """

    initial_clip: Any
    noise_multiplier: Any
    count_noise: Any
    target_quantile: Any
    learning_rate: Any


class AdaptiveClipState(NamedTuple):
    """``clip: f32[]``, C_t, the clip norm of the next release."""

    clip: jax.Array


def combined_noise_multiplier(update_noise: float, count_noise: float) -> float:
    """z of the one Gaussian mechanism that the update sum (multiplier ``z_delta``, sensitivity
    C) and the count of ``b_k - 1/2`` (std sigma_b, sensitivity 1/2) make together:
    ``z^-2 = z_delta^-2 + (2 sigma_b)^-2`` (Andrew et al. 2021)."""
    return (update_noise**-2 + (2.0 * count_noise) ** -2) ** -0.5


def update_noise_multiplier(noise_multiplier: float, count_noise: float) -> float:
    """The update sum's ``z_delta`` that leaves a combined multiplier ``z`` with the count's
    noise sigma_b (the inverse of :func:`combined_noise_multiplier`); ``ValueError`` unless
    ``2 sigma_b > z``."""
    if 2.0 * count_noise <= noise_multiplier:
        raise ValueError(
            f"adaptive clipping needs 2 sigma_b > z, got sigma_b={count_noise:g}, "
            f"z={noise_multiplier:.4g}: raise the count noise"
        )
    return (noise_multiplier**-2 - (2.0 * count_noise) ** -2) ** -0.5


@dataclass(frozen=True)
class QuantileAdaptiveGaussianSum:
    """Quantile-based adaptive clipping (Andrew, Thakkar, McMahan, Ramaswamy 2021): the clip norm
    follows a target quantile of the update norms, privately.

    Each client reports its update clipped to the current C_t and ``b_k - 1/2`` with
    ``b_k = 1[||delta_k|| <= C_t]``. A release adds ``N(0, (z_delta C_t)^2)`` to the sum of
    updates and ``N(0, sigma_b^2)`` to the count ``sum_k (b_k - 1/2)``, then moves the clip:
    ``b_bar = noised count / expected_count + 1/2``, ``C_{t+1} = C_t exp(-eta_C (b_bar - gamma))``.
    Both releases are one Gaussian mechanism of multiplier ``z`` with
    ``z^-2 = z_delta^-2 + (2 sigma_b)^-2`` (the count's sensitivity is 1/2): :meth:`event`.

    Attributes:
      expected_count: the count's fixed denominator (the expected cohort size, ``q N`` or K).
      per_layer: clip every leaf to ``C_t / sqrt(L)``.
    """

    expected_count: float
    per_layer: bool = False
    Params: ClassVar[type] = AdaptiveClipParams

    def init(self, params: AdaptiveClipParams, template: PyTree) -> AdaptiveClipState:
        del template
        return AdaptiveClipState(jnp.asarray(params.initial_clip, jnp.float32))

    def preprocess(
        self, params: AdaptiveClipParams, state: AdaptiveClipState, update: PyTree,
        key: jax.Array,
    ) -> dict:  # fmt: skip
        """ONE client's clipped update, ``b_k - 1/2``, whether it was clipped and its norm."""
        del params, key
        norm = tree_norm(update)
        clipped, was_clipped = _clip(self.per_layer, update, state.clip)
        below = (norm <= state.clip).astype(jnp.float32) - 0.5
        return {"value": clipped, "below": below, "clipped": was_clipped, "norm": norm}

    def release(
        self, params: AdaptiveClipParams, state: AdaptiveClipState, summed: dict, key: jax.Array
    ) -> tuple[PyTree, AdaptiveClipState, dict]:
        """The noised sum at ``z_delta C_t`` (first half of ``key``), the noised count (second
        half) and the next clip norm."""
        value_key, count_key = _split(key)
        clip = state.clip
        noise = gaussian_noise_tree(value_key, summed["value"], params.noise_multiplier * clip)
        noised = jax.tree.map(jnp.add, summed["value"], noise)
        count = summed["below"] + gaussian_noise_tree(count_key, summed["below"],
                                                      params.count_noise)  # fmt: skip
        unclipped = count / self.expected_count + 0.5
        next_clip = clip * jnp.exp(-params.learning_rate * (unclipped - params.target_quantile))
        diagnostics = {"clip": clip, "clipped_count": summed["clipped"],
                       "norm_sum": summed["norm"]}  # fmt: skip
        return noised, AdaptiveClipState(next_clip), diagnostics

    def reach_shifts(self, params: AdaptiveClipParams) -> tuple[float, ...]:
        """Both float noises' bounded reach (as :meth:`GaussianSum.reach_shifts`): the sum's
        ``1 / z_delta`` and the count's ``1 / (2 sigma_b)`` standard deviations."""
        return (1.0 / float(params.noise_multiplier), 0.5 / float(params.count_noise))

    def event(self, params: AdaptiveClipParams) -> dp_accounting.DpEvent:
        """``GaussianDpEvent(z)``, z combining both releases (:func:`combined_noise_multiplier`)."""
        import dp_accounting

        z_delta = check_positive("noise_multiplier", params.noise_multiplier)
        sigma_b = check_positive("count_noise", params.count_noise)
        return dp_accounting.GaussianDpEvent(combined_noise_multiplier(z_delta, sigma_b))


class NoParams(NamedTuple):
    """The parameters of an aggregator that has none."""


@dataclass(frozen=True)
class PlainSum:
    """The plain sum of the updates: no clipping, no noise, no privacy (a non-private baseline:
    :meth:`event` is ``NonPrivateDpEvent``). Its record also counts the clients (``count``)."""

    Params: ClassVar[type] = NoParams

    def init(self, params: NoParams, template: PyTree) -> tuple:
        del params, template
        return ()

    def preprocess(self, params: NoParams, state: tuple, update: PyTree, key: jax.Array) -> dict:
        del params, state, key
        return {"value": update, "count": jnp.ones((), jnp.float32), "norm": tree_norm(update)}

    def release(
        self, params: NoParams, state: tuple, summed: dict, key: jax.Array
    ) -> tuple[PyTree, tuple, dict]:
        del params, key
        diagnostics = {"clip": jnp.float32(math.inf), "clipped_count": jnp.float32(0.0),
                       "norm_sum": summed["norm"], "count": summed["count"]}  # fmt: skip
        return summed["value"], state, diagnostics

    def event(self, params: NoParams) -> dp_accounting.DpEvent:
        import dp_accounting

        del params
        return dp_accounting.NonPrivateDpEvent()


@dataclass(frozen=True)
class FixedDenominatorMean:
    """The mean of ``inner``'s release over a FIXED denominator (the expected number of
    contributions, ``q N`` for a Poisson cohort or K for a fixed one), as DP-FedAvg averages:
    dividing by the realised cohort size would release it unnoised (McMahan et al. 2018).
    Same parameters, state, records and event as ``inner``."""

    inner: Any
    denominator: float

    @property
    def Params(self) -> type:  # noqa: N802 (the protocol's name)
        return self.inner.Params

    @property
    def adjacency(self) -> Adjacency | None:
        """``inner``'s own adjacency where it states one (a secure sum's zero-out), else
        ``None`` (the cohort's)."""
        return getattr(self.inner, "adjacency", None)

    def init(self, params: Any, template: PyTree) -> PyTree:
        return self.inner.init(params, template)

    def preprocess(self, params: Any, state: PyTree, update: PyTree, key: jax.Array) -> PyTree:
        return self.inner.preprocess(params, state, update, key)

    def release(
        self, params: Any, state: PyTree, summed: PyTree, key: jax.Array
    ) -> tuple[PyTree, PyTree, dict]:
        total, state, diagnostics = self.inner.release(params, state, summed, key)
        return jax.tree.map(lambda s: s / self.denominator, total), state, diagnostics

    def event(self, params: Any) -> dp_accounting.DpEvent:
        return self.inner.event(params)


@dataclass(frozen=True)
class CohortMean:
    """The plain mean over the clients that took part (non-private: the realised count is
    released as it is; :meth:`event` is ``NonPrivateDpEvent``); 0 for an empty cohort."""

    Params: ClassVar[type] = NoParams

    def init(self, params: NoParams, template: PyTree) -> tuple:
        return PlainSum().init(params, template)

    def preprocess(self, params: NoParams, state: tuple, update: PyTree, key: jax.Array) -> dict:
        return PlainSum().preprocess(params, state, update, key)

    def release(
        self, params: NoParams, state: tuple, summed: dict, key: jax.Array
    ) -> tuple[PyTree, tuple, dict]:
        total, state, diagnostics = PlainSum().release(params, state, summed, key)
        count = jnp.maximum(summed["count"], 1.0)
        return jax.tree.map(lambda s: s / count, total), state, diagnostics

    def event(self, params: NoParams) -> dp_accounting.DpEvent:
        return PlainSum().event(params)


class LocalNoiseParams(NamedTuple):
    """Parameters of :class:`LocalRandomizerSum` (``f32[]`` on device, floats on the host).

    Attributes:
      clip_norm: C > 0, the L2 bound each client clips its message to (its sensitivity is the
        randomizer's, :meth:`~jfed.privacy.NoiseRandomizer.sensitivity`, of a message moving by
        at most 2C between any two inputs).
      noise_multiplier: z >= 0; the noise scale is ``z`` times that sensitivity.
    """

    clip_norm: Any
    noise_multiplier: Any


@dataclass(frozen=True)
class LocalRandomizerSum:
    """Local DP: each client clips its message to C and perturbs it with a
    :class:`~jfed.privacy.NoiseRandomizer` (its own key) before it leaves; the server sums the
    randomized messages (no central noise). The event is the randomizer's for one message under
    bounded adjacency (any two inputs of one client: the message moves by at most 2C).

    Attributes:
      randomizer: a :class:`~jfed.privacy.NoiseRandomizer` (default: Gaussian noise).
      dim: the message's dimension, where the randomizer's sensitivity depends on it (L1 norms).
    """

    randomizer: Any = None
    dim: int | None = None
    Params: ClassVar[type] = LocalNoiseParams
    local: ClassVar[bool] = True
    adjacency: ClassVar[Adjacency] = Adjacency.BOUNDED

    def _randomizer(self):
        from jfed.privacy.privatizers import GaussianNoise

        return GaussianNoise() if self.randomizer is None else self.randomizer

    def sensitivity(self, clip_norm: float) -> float:
        """The randomizer's sensitivity of a message clipped to ``clip_norm`` (moves by 2C)."""
        return self._randomizer().sensitivity(2.0 * clip_norm, self.dim)

    def init(self, params: LocalNoiseParams, template: PyTree) -> tuple:
        del params, template
        return ()

    def preprocess(
        self, params: LocalNoiseParams, state: tuple, update: PyTree, key: jax.Array
    ) -> dict:
        """ONE client's message, clipped to C and randomized with its ``key``."""
        del state
        clipped, was_clipped = clip_tree(update, params.clip_norm)
        leaves, treedef = jax.tree_util.tree_flatten(clipped)
        # the randomizer's sensitivity is linear in the L2 bound: its factor is static
        scale = params.noise_multiplier * self.sensitivity(1.0) * params.clip_norm
        keys = jax.random.split(key, max(1, len(leaves)))
        randomizer = self._randomizer()
        noised = [randomizer.perturb(k, leaf, scale) for k, leaf in zip(keys, leaves, strict=False)]
        return {"value": jax.tree_util.tree_unflatten(treedef, noised), "clipped": was_clipped}

    def release(
        self, params: LocalNoiseParams, state: tuple, summed: dict, key: jax.Array
    ) -> tuple[PyTree, tuple, dict]:
        del params, key
        return summed["value"], state, {"clipped_count": summed["clipped"]}

    def event(self, params: LocalNoiseParams) -> dp_accounting.DpEvent:
        """The randomizer's event of one message at multiplier z (bounded adjacency)."""
        check_positive("clip_norm", params.clip_norm)
        return self._randomizer().dp_event(check_positive("noise_multiplier",
                                                          params.noise_multiplier))  # fmt: skip
