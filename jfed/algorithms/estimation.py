"""Private mean estimation across S sites of n units each, in the seven trust settings of the
federated-estimation seed (docs/specs/estimation.md), as one engine round per Monte Carlo
replication.

The engine's clients are the sites (a site is a user in the local user-level settings, a server
in the federated one). A site's function is written for ONE site; inside it, the units of the
site are drawn one by one (vmapped over the site's units) where a unit is clipped or randomised
on its own, and the site's mean is drawn from its exact distribution otherwise (``Binomial`` for
±1 data, ``Normal`` for Gaussian data), which lets n reach 10^6 at no cost. Every draw is
addressed by (replication, site, unit) through the engine's keys, so a site's numbers do not
depend on how many sites or units the program was padded to.

Every private release goes through ``clients.aggregate`` with an aggregator of
:mod:`jfed.algorithms.estimation_aggregators` that states its own event: a local randomizer
(:class:`~jfed.algorithms.estimation_aggregators.LocalNoise`, randomized response) where each site
randomizes its own message, each site's release of its own units
(:class:`~jfed.algorithms.estimation_aggregators.SiteCurator`), a curator's release
(:class:`~jfed.algorithms.estimation_aggregators.CentralNoise`) where one curator sees the data.
With the exact noise (the default with Laplace noise,
:class:`~jfed.algorithms.estimation_aggregators.DiscreteLaplaceNoise`) every release is an
integer sum of contributions rounded to a grid plus exact discrete Laplace noise.

The settings (``S`` sites, ``n`` units each, data in ``[-c, c]`` after clipping, noise of the
``mechanism``: Laplace (pure eps) or Gaussian (analytic calibration, (eps, delta))), each an
object of :data:`SETTINGS`:

- ``none``: the pooled mean.
- ``local-item``: every unit releases its clipped value plus noise of sensitivity ``2c``.
- ``local-user-small``: half the sites release their clipped mean plus noise (sensitivity ``2c``)
  to locate the mean; the other half clip their mean to ``center +- w`` (``w`` covers a site
  mean's spread and the center's error) and release it plus noise of sensitivity ``2w``.
- ``local-user-large``: half the sites locate the mean by B rounds of binary search, one group of
  sites per round, each site sending its bit (is my mean above the midpoint?) through randomized
  response; the interval keeps 3/4 of its length per round (overlapping halves, so a mean near the
  midpoint is kept whichever way the vote goes). The other half clip to the final interval and
  release their mean plus noise. Wrong votes are exponentially rare in the group size times
  eps^2: the exp(-S eps^2) regime.
- ``central-item``: a curator adds noise of sensitivity ``2c / (S n)`` to the pooled mean.
- ``central-user``: a curator spends eps/2 on a coarse pooled mean (sensitivity ``2c / S``), then
  clips every site's mean to ``center +- w`` and releases their average plus noise of sensitivity
  ``2w / S`` at eps/2 (basic composition), projected onto the parameter set ``[-1, 1]``.
- ``federated``: every site releases its clipped mean plus noise of sensitivity ``2c / n``
  (item-level DP against everyone outside the site); the server averages.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jfed.algorithms.estimation_aggregators import (
    EXACT_NOISES,
    NOISES,
    CentralNoise,
    LocalNoise,
    RandomizedResponseVotes,
    ReleaseParams,
    SiteCurator,
    VoteParams,
)

DATA_STREAM = 0
"""The word folded into a site's key for its data (its noise is its aggregator's stream)."""

LOCATION_SPREAD = 3.0
"""A site's mean and a located center are trusted within this many standard deviations; the rare
site beyond is clipped (the record's clipped_fraction), which costs a little bias and no privacy
(the noise is calibrated to the clipping interval whatever its width)."""


class Hyperparams(NamedTuple):
    """Traced numbers of one configuration (host-calibrated; all scalars).

    Attributes:
      sites: ``i32[]`` S (the program holds ``max_sites``; the rest are masked).
      units: ``i32[]`` n.
      mean: ``f32[]`` the true mean mu.
      clip: ``f32[]`` c: a unit's value (item-level) or a site's mean (user-level) is clipped to
        ``[-c, c]``.
      first_noise: ``f32[]`` noise scale of the first release (Laplace ``b`` or Gaussian std).
      second_noise: ``f32[]`` noise scale of the second release (two-stage settings).
      width: ``f32[]`` half-width ``w`` of the second stage's clipping interval (two-stage
        settings) or the spread ``t`` of a site's mean (``local-user-large``).
      stages: ``i32[]`` binary-search rounds B (``local-user-large``).
      truthful: ``f32[]`` probability that randomized response reports the true bit,
        ``e^eps / (1 + e^eps)``.
    """

    sites: jax.Array
    units: jax.Array
    mean: jax.Array
    clip: jax.Array
    first_noise: jax.Array
    second_noise: jax.Array
    width: jax.Array
    stages: jax.Array
    truthful: jax.Array


def hyperparams(**values: float) -> Hyperparams:
    kinds = {"sites": jnp.int32, "units": jnp.int32, "stages": jnp.int32}
    return Hyperparams(
        **{name: jnp.asarray(values[name], kinds.get(name, jnp.float32)) for name in
           Hyperparams._fields}
    )  # fmt: skip


def release_params(hp: Hyperparams, scale: jax.Array) -> ReleaseParams:
    """The parameters of a release of noise scale ``scale`` (``hp.first_noise`` or
    ``hp.second_noise``): the hyper-parameters themselves, as the engine requires."""
    return ReleaseParams(scale, hp.clip, hp.width, hp.sites, hp.units, hp.stages)


class Info(NamedTuple):
    """Per replication: ``error``, the estimate minus mu, and ``clipped``, the fraction of the
    released values that were clipped."""

    error: jax.Array
    clipped: jax.Array


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class Sites:
    """The population: ``n_clients`` sites, each known by its id only (its data is drawn on the
    device from its key). No arrays: the count is static metadata."""

    n_clients: int = field(metadata=dict(static=True))

    def record(self, site_id: jax.Array) -> jax.Array:
        return site_id


def clip_to(value: jax.Array, low: jax.Array, high: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``value`` clipped to ``[low, high]`` and whether it was clipped (f32 0/1)."""
    clipped = jnp.clip(value, low, high)
    return clipped, (clipped != value).astype(jnp.float32)


# ------------------------------------------------------------------------------ data models


@dataclass(frozen=True)
class RademacherData:
    """Units of value ±1 with mean mu: the worst case of data in [-1, 1]. A site's sum of
    clipped units is drawn exactly (a unit ±1 clipped to [-c, c] is ±min(c, 1))."""

    sums_clipped_exactly: ClassVar[bool] = True

    def unit(self, key: jax.Array, mean: jax.Array) -> jax.Array:
        """One unit's value ``f32[]``."""
        return jnp.where(jax.random.uniform(key) < (1.0 + mean) / 2.0, 1.0, -1.0)

    def site_mean(self, key: jax.Array, mean: jax.Array, units: jax.Array) -> jax.Array:
        """The mean of ``units`` unclipped units, from its exact (binomial) distribution."""
        n = units.astype(jnp.float32)
        ones = jax.random.binomial(key, n, (1.0 + mean) / 2.0)
        return 2.0 * ones / n - 1.0

    def clipped_units(
        self, key: jax.Array, mean: jax.Array, units: jax.Array, clip: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """The ``units`` units each clipped to ``[-c, c]`` as ``(values f32[2], counts f32[2],
        clipped)``: ``min(c, 1)`` and ``-min(c, 1)``, each with how many units have it (its
        exact binomial law), and how many were clipped."""
        n = units.astype(jnp.float32)
        ones = jax.random.binomial(key, n, (1.0 + mean) / 2.0)
        value = jnp.minimum(clip, 1.0)
        clipped = jnp.where(clip < 1.0, n, 0.0)
        return jnp.stack([value, -value]), jnp.stack([ones, n - ones]), clipped

    def variance(self, mean: float) -> float:
        """A unit's variance."""
        return 1.0 - mean**2

    def default_clip(self, user_level: bool, sites: int, units: int) -> float:
        """c: 1, the data's own bound."""
        del user_level, sites, units
        return 1.0


@dataclass(frozen=True)
class GaussianData:
    """Units ``N(mu, 1)``: sub-Gaussian, clipped by the mechanisms (one by one where a unit is
    clipped on its own)."""

    sums_clipped_exactly: ClassVar[bool] = False

    def unit(self, key: jax.Array, mean: jax.Array) -> jax.Array:
        return mean + jax.random.normal(key)

    def site_mean(self, key: jax.Array, mean: jax.Array, units: jax.Array) -> jax.Array:
        return mean + jax.random.normal(key) / jnp.sqrt(units.astype(jnp.float32))

    def variance(self, mean: float) -> float:
        del mean
        return 1.0

    def default_clip(self, user_level: bool, sites: int, units: int) -> float:
        """c: a site's mean just past [-1, 1] (user-level); else a unit far in its tails, past
        the largest of the S n normal draws (rarely reached)."""
        if user_level:
            return 1.0 + LOCATION_SPREAD / math.sqrt(units)
        return 1.0 + math.sqrt(2.0 * math.log(20.0 * sites * units))


DATA_MODELS: dict[str, RademacherData | GaussianData] = {
    "rademacher": RademacherData(),
    "gaussian": GaussianData(),
}
"""The data model each ``--data`` names."""

MECHANISMS = NOISES
"""The float noise each ``--mechanism`` names (:mod:`jfed.algorithms.estimation_aggregators`)."""

EXACT_MECHANISMS = EXACT_NOISES
"""The exact noise on the grid of each ``--mechanism`` that has one."""


# ------------------------------------------------------------------ sensitivities of releases
# each release's contribution interval and count from its parameters, under its setting's
# neighbouring relation (the clipping the rounds below apply): on the host (floats, float64) for
# the events and the calibration, on the device (f32[]) for the grid


def _smaller(a: Any, b: Any) -> Any:
    """``min(a, b)``, elementwise on the device."""
    if isinstance(a, jax.Array) or isinstance(b, jax.Array):
        return jnp.minimum(a, b)
    return min(a, b)


def _times(a: Any, b: Any) -> Any:
    """``a b``: float64 on the host; ``f32[]`` on the device (a product of two exact f32: one
    rounding, no int32 overflow)."""
    if isinstance(a, jax.Array) or isinstance(b, jax.Array):
        return jnp.asarray(a, jnp.float32) * jnp.asarray(b, jnp.float32)
    return float(a) * float(b)


def unit_range(p: ReleaseParams) -> Any:
    """A value in ``[-c, c]``: ``2c``."""
    return 2.0 * p.clip


def site_mean_range(p: ReleaseParams) -> float:
    """A site's mean of n units in ``[-c, c]``, one unit replaced: ``2c / n``."""
    return 2.0 * p.clip / p.units


def pooled_mean_range(p: ReleaseParams) -> float:
    """The mean of S n units in ``[-c, c]``, one unit replaced: ``2c / (S n)``."""
    return 2.0 * p.clip / (p.sites * p.units)


def sites_mean_range(p: ReleaseParams) -> float:
    """The mean of S site means in ``[-c, c]``, one site replaced: ``2c / S``."""
    return 2.0 * p.clip / p.sites


def interval_range(p: ReleaseParams) -> Any:
    """A value in ``[center - w, center + w]`` cut to ``[-c, c]``: ``min(2w, 2c)``."""
    return _smaller(2.0 * p.width, 2.0 * p.clip)


def interval_mean_range(p: ReleaseParams) -> float:
    """The mean of S such values, one site replaced: ``min(2w, 2c) / S``."""
    return min(2.0 * p.width, 2.0 * p.clip) / p.sites


def search_range(p: ReleaseParams) -> Any:
    """A value in the binary search's final interval (``2c 0.75^B`` wide) widened by w on each
    side, cut to ``[-c, c]``: ``min(2c 0.75^B + 2w, 2c)``."""
    return _smaller(2.0 * p.clip * 0.75**p.stages + 2.0 * p.width, 2.0 * p.clip)


def pooled_count(p: ReleaseParams) -> Any:
    """S n: float64 on the host, ``f32[]`` on the device."""
    return _times(p.sites, p.units)


def site_count(p: ReleaseParams) -> Any:
    """S: a float on the host, ``f32[]`` on the device."""
    return _times(p.sites, 1.0)


def unit_count(p: ReleaseParams) -> Any:
    """n: a float on the host, ``f32[]`` on the device."""
    return _times(p.units, 1.0)


def difference_std(units: int, center_std: float) -> float:
    """The standard deviation of a site's mean (variance at most 1/n) minus the located center
    (``center_std``): their variances add, the locating sites being others (central-user: the
    center holds 1/S of the site's own mean, a positive correlation, so this still bounds it).
    The clipping half-width is ``LOCATION_SPREAD`` of these."""
    return math.sqrt(1.0 / units + center_std**2)


class Calibration(NamedTuple):
    """Host (float64): a setting's releases for one configuration, the noise scales and the
    interval they need (zero where a setting has no such release)."""

    first_noise: float = 0.0
    second_noise: float = 0.0
    width: float = 0.0
    stages: int = 0


def _at(clip: float, sites: int, units: int, width: float = 0.0, stages: int = 0) -> ReleaseParams:
    """Host parameters of a release before its scale is known (for its sensitivity)."""
    return ReleaseParams(0.0, clip, width, sites, units, stages)


# --------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Setting:
    """A trust setting: who is trusted, what is protected, and the releases of its round.

    Class attributes (the record's words and the accounting's facts):
      name: its ``--setting`` name.
      notion, protected, trust_model: what its records state (``eps-DP`` becomes
        ``(eps, delta)-DP`` with Gaussian noise).
      user_level: whether it protects all the units of one site (else one unit, or nothing).
      private: whether it releases anything noisy.
      disjoint_releases: every unit takes part in one release of a round at most (its sites are
        split between the releases): the round's guarantee is its worst release's.
      locates_first: half the sites (``S // 2``) locate the mean, the others estimate it.
      accountant_notes: appended to the noise's accountant in the record.
      release_share: the share of eps each release spends (basic composition of the releases a
        unit takes part in).
    """

    name: ClassVar[str]
    notion: ClassVar[str]
    protected: ClassVar[str]
    trust_model: ClassVar[str]
    user_level: ClassVar[bool] = False
    private: ClassVar[bool] = True
    disjoint_releases: ClassVar[bool] = False
    locates_first: ClassVar[bool] = False
    accountant_notes: ClassVar[str] = ""
    release_share: ClassVar[float] = 1.0

    def largest_sum(self, sites: int, units: int) -> int:
        """The most contributions one release sums (its integer sum on the grid must stay
        exact in int32)."""
        del sites, units
        return 1

    def per_unit(self, model: Any) -> bool:
        """Whether its sites draw their units one by one (each randomised or clipped on its
        own) rather than their mean from its exact law."""
        del model
        return False

    def estimating_sites(self, sites: int) -> int:
        """The sites whose data the estimate averages."""
        return sites - sites // 2 if self.locates_first else sites

    def calibrate(
        self, noise: Any, sites: int, units: int, epsilon: float, delta: float, clip: float
    ) -> Calibration:
        """Host: every release calibrated to (eps, delta) of the setting's neighbouring
        relation."""
        raise NotImplementedError

    def estimate_variance(self, noise: Any, releases: Calibration, sites: int, units: int) -> float:
        """The variance the final release's noise adds to the estimate (the located center's
        error and the search's wrong turns enter only through clipping, not counted here)."""
        raise NotImplementedError

    def theory_rate(self, sites: float, units: float, epsilon: float) -> float:
        """The minimax rate of the spec's table (constants omitted)."""
        raise NotImplementedError

    def estimate(
        self, program: MeanEstimation, hp: Hyperparams, key: jax.Array, clients: Any
    ) -> tuple[jax.Array, jax.Array]:
        """One replication: ``(estimate, clipped fraction)``."""
        raise NotImplementedError


@dataclass(frozen=True)
class NoPrivacy(Setting):
    """``none``: the pooled mean, released as it is."""

    name: ClassVar[str] = "none"
    notion: ClassVar[str] = "none (non-private)"
    protected: ClassVar[str] = "nothing"
    trust_model: ClassVar[str] = "everyone sees the raw data"
    private: ClassVar[bool] = False

    def calibrate(self, noise, sites, units, epsilon, delta, clip) -> Calibration:
        return Calibration()

    def estimate_variance(self, noise, releases, sites, units) -> float:
        return 0.0

    def theory_rate(self, sites, units, epsilon) -> float:
        return 1.0 / (sites * units)

    def estimate(self, program, hp, key, clients):
        def site(hp, site_id, key):
            return program.present(hp, site_id) * program.exact_sum(hp, key), jnp.float32(0.0)

        total, clipped = clients.sum(site, hp)
        count = pooled_count(release_params(hp, hp.first_noise))
        return total / count, clipped / count


@dataclass(frozen=True)
class ItemLevel(Setting):
    """A setting of one release whose sensitivity is ``sensitivity`` (units clipped to
    ``[-c, c]``; a site's sum of clipped units drawn from its exact law where the data model
    has one)."""

    sensitivity: ClassVar[Any]  # a staticmethod of ReleaseParams -> float

    def per_unit(self, model) -> bool:
        return not model.sums_clipped_exactly

    def calibrate(self, noise, sites, units, epsilon, delta, clip) -> Calibration:
        sensitivity = self.sensitivity(_at(clip, sites, units))
        return Calibration(noise.calibrate(sensitivity, epsilon, delta))


@dataclass(frozen=True)
class LocalItem(ItemLevel):
    """``local-item``: every unit randomizes its own clipped value (sensitivity 2c)."""

    name: ClassVar[str] = "local-item"
    notion: ClassVar[str] = "local item-level eps-DP"
    protected: ClassVar[str] = "one unit's value"
    trust_model: ClassVar[str] = "nobody: each unit randomizes its own value"
    sensitivity: ClassVar[Any] = staticmethod(unit_range)

    def per_unit(self, model) -> bool:
        return True

    def estimate_variance(self, noise, releases, sites, units) -> float:
        return noise.variance(releases.first_noise) / (sites * units)

    def theory_rate(self, sites, units, epsilon) -> float:
        return 1.0 / (sites * units * epsilon**2)

    def estimate(self, program, hp, key, clients):
        def site(hp, site_id, key):
            values, present, clipped = program.unit_values(hp, key)
            weight = program.present(hp, site_id) * present
            return {"value": values, "weight": weight, "clipped": jnp.sum(weight * clipped)}

        randomizer = LocalNoise(program.mechanism, unit_range)
        params = release_params(hp, hp.first_noise)
        summed, _, _ = clients.aggregate(randomizer, params, (), site, hp, key)
        count = pooled_count(params)
        return summed["value"] / count, summed["clipped"] / count


@dataclass(frozen=True)
class CentralItem(ItemLevel):
    """``central-item``: a curator adds noise of sensitivity ``2c / (S n)`` to the pooled mean."""

    name: ClassVar[str] = "central-item"
    notion: ClassVar[str] = "central item-level eps-DP"
    protected: ClassVar[str] = "one unit's value"
    trust_model: ClassVar[str] = "one curator sees every unit; the release is private"
    sensitivity: ClassVar[Any] = staticmethod(pooled_mean_range)

    def largest_sum(self, sites: int, units: int) -> int:
        return sites * units

    def estimate_variance(self, noise, releases, sites, units) -> float:
        return noise.variance(releases.first_noise)

    def theory_rate(self, sites, units, epsilon) -> float:
        return max(1.0 / (sites * units), 1.0 / (sites**2 * units**2 * epsilon**2))

    def estimate(self, program, hp, key, clients):
        def site(hp, site_id, key):
            values, counts, clipped = program.clipped_units(hp, key)
            here = program.present(hp, site_id)
            return {"value": values, "weight": here * counts, "clipped": here * clipped}

        curator = CentralNoise(program.mechanism, unit_range, pooled_count)
        params = release_params(hp, hp.first_noise)
        mean, _, diagnostics = clients.aggregate(curator, params, (), site, hp, key)
        return mean, diagnostics["clipped_count"] / pooled_count(params)


@dataclass(frozen=True)
class Federated(ItemLevel):
    """``federated``: each site releases its clipped mean plus noise of sensitivity ``2c / n``
    (it is the curator of its own units); the server averages."""

    name: ClassVar[str] = "federated"
    notion: ClassVar[str] = "item-level eps-DP of each site's release"
    protected: ClassVar[str] = "one unit of one site"
    trust_model: ClassVar[str] = "each site is the trusted curator of its own units only"
    sensitivity: ClassVar[Any] = staticmethod(site_mean_range)

    def largest_sum(self, sites: int, units: int) -> int:
        return units

    def estimate_variance(self, noise, releases, sites, units) -> float:
        return noise.variance(releases.first_noise) / sites

    def theory_rate(self, sites, units, epsilon) -> float:
        return max(1.0 / (sites * units), 1.0 / (sites * units**2 * epsilon**2))

    def estimate(self, program, hp, key, clients):
        def site(hp, site_id, key):
            values, counts, clipped = program.clipped_units(hp, key)
            here = program.present(hp, site_id)
            return {"value": values, "weight": counts, "present": here,
                    "clipped": here * clipped / hp.units}  # fmt: skip

        randomizer = SiteCurator(program.mechanism, unit_range, unit_count)
        summed, _, _ = clients.aggregate(randomizer, release_params(hp, hp.first_noise), (), site,
                                         hp, key)  # fmt: skip
        sites = hp.sites.astype(jnp.float32)
        return summed["value"] / sites, summed["clipped"] / sites


@dataclass(frozen=True)
class LocalUserSmall(Setting):
    """``local-user-small``: half the users locate the mean (their clipped means plus noise of
    sensitivity 2c), the other half clip theirs to the center +- w and release them plus noise
    of sensitivity ``min(2w, 2c)``. Each user releases once."""

    name: ClassVar[str] = "local-user-small"
    notion: ClassVar[str] = "local user-level eps-DP"
    protected: ClassVar[str] = "all n units of one user (site)"
    trust_model: ClassVar[str] = "nobody: each user randomizes its own mean"
    user_level: ClassVar[bool] = True
    disjoint_releases: ClassVar[bool] = True
    locates_first: ClassVar[bool] = True
    accountant_notes: ClassVar[str] = "; each user releases once"

    def calibrate(self, noise, sites, units, epsilon, delta, clip) -> Calibration:
        first = noise.calibrate(unit_range(_at(clip, sites, units)), epsilon, delta)
        center_std = math.sqrt((noise.variance(first) + 1.0 / units) / (sites // 2))
        width = LOCATION_SPREAD * difference_std(units, center_std)
        second = noise.calibrate(interval_range(_at(clip, sites, units, width)), epsilon, delta)
        return Calibration(first, second, width)

    def estimate_variance(self, noise, releases, sites, units) -> float:
        return noise.variance(releases.second_noise) / self.estimating_sites(sites)

    def theory_rate(self, sites, units, epsilon) -> float:
        return 1.0 / (sites * units * epsilon**2)

    def estimate(self, program, hp, key, clients):
        locating = hp.sites // 2  # sites [0, S/2) locate, the rest estimate

        def first(hp, site_id, key):
            value, clipped = clip_to(program.site_mean(hp, key), -hp.clip, hp.clip)
            inside = (site_id < locating).astype(jnp.float32)
            return {"value": value, "weight": inside, "clipped": inside * clipped}

        randomizer = LocalNoise(program.mechanism, unit_range)
        located, _, _ = clients.aggregate(randomizer, release_params(hp, hp.first_noise), (),
                                          first, hp, key)  # fmt: skip
        center = located["value"] / jnp.maximum(locating, 1).astype(jnp.float32)
        estimated, _, _ = program.clipped_means(
            clients, LocalNoise(program.mechanism, interval_range), hp.second_noise, hp, key,
            center - hp.width, center + hp.width, lambda hp, s: (s >= locating) & (s < hp.sites),
        )  # fmt: skip
        clipped = estimated["clipped"] + located["clipped"]
        return estimated["value"] / estimated["weight"], clipped / hp.sites.astype(jnp.float32)


@dataclass(frozen=True)
class CentralUser(Setting):
    """``central-user``: a curator spends eps/2 on a coarse pooled mean (sensitivity ``2c / S``),
    then releases the average of the sites' means clipped to the center +- w plus noise of
    sensitivity ``min(2w, 2c) / S`` at eps/2, projected onto ``[-1, 1]``."""

    name: ClassVar[str] = "central-user"
    notion: ClassVar[str] = "central user-level eps-DP"
    protected: ClassVar[str] = "all n units of one site"
    trust_model: ClassVar[str] = "one curator sees every unit; the release is private"
    user_level: ClassVar[bool] = True
    accountant_notes: ClassVar[str] = "; two releases at eps/2 (and delta/2), basic composition"
    release_share: ClassVar[float] = 0.5

    def largest_sum(self, sites: int, units: int) -> int:
        return sites

    def calibrate(self, noise, sites, units, epsilon, delta, clip) -> Calibration:
        half_epsilon, half_delta = 0.5 * epsilon, 0.5 * delta
        first = noise.calibrate(sites_mean_range(_at(clip, sites, units)), half_epsilon,
                                half_delta)  # fmt: skip
        center_std = math.sqrt(noise.variance(first) + 1.0 / (sites * units))
        width = LOCATION_SPREAD * difference_std(units, center_std)
        second = noise.calibrate(interval_mean_range(_at(clip, sites, units, width)),
                                 half_epsilon, half_delta)  # fmt: skip
        return Calibration(first, second, width)

    def estimate_variance(self, noise, releases, sites, units) -> float:
        return noise.variance(releases.second_noise)

    def theory_rate(self, sites, units, epsilon) -> float:
        return max(1.0 / (sites * units), 1.0 / (sites**2 * units * epsilon**2))

    def estimate(self, program, hp, key, clients):
        def first(hp, site_id, key):
            value, clipped = clip_to(program.site_mean(hp, key), -hp.clip, hp.clip)
            here = program.present(hp, site_id)
            return {"value": value, "weight": here, "clipped": here * clipped}

        first_key, second_key = jax.random.split(key)
        curator = CentralNoise(program.mechanism, unit_range, site_count)
        center, _, located = clients.aggregate(curator, release_params(hp, hp.first_noise), (),
                                               first, hp, first_key)  # fmt: skip
        estimate, _, estimated = program.clipped_means(
            clients, CentralNoise(program.mechanism, interval_range, site_count),
            hp.second_noise, hp, second_key, center - hp.width, center + hp.width,
            lambda hp, s: s < hp.sites,
        )  # fmt: skip
        clipped = estimated["clipped_count"] + located["clipped_count"]
        # projected onto the parameter set mu in [-1, 1], as the curator's estimator is defined
        # (post-processing: no privacy cost; never farther from mu)
        return jnp.clip(estimate, -1.0, 1.0), clipped / (2.0 * hp.sites.astype(jnp.float32))


@dataclass(frozen=True)
class LocalUserLarge(Setting):
    """``local-user-large``: half the users run a binary search for the mean, each voting once
    through randomized response; the other half clip their means to the final interval widened
    by the spread w and release them plus noise. Each user releases once."""

    name: ClassVar[str] = "local-user-large"
    notion: ClassVar[str] = "local user-level eps-DP"
    protected: ClassVar[str] = "all n units of one user (site)"
    trust_model: ClassVar[str] = "nobody: each user randomizes one bit or its clipped mean"
    user_level: ClassVar[bool] = True
    disjoint_releases: ClassVar[bool] = True
    locates_first: ClassVar[bool] = True
    accountant_notes: ClassVar[str] = (
        "; randomized response (pure eps) for the search bits; each user releases once"
    )

    def calibrate(self, noise, sites, units, epsilon, delta, clip) -> Calibration:
        width = LOCATION_SPREAD / math.sqrt(units)  # a site mean's spread
        # halve (to 3/4) until the interval is 4 spreads wide: every site then votes alike
        wanted = math.log(2.0 * clip / (4.0 * width)) / math.log(4.0 / 3.0)
        stages = int(min(max(math.ceil(wanted), 0), sites // 2))
        sensitivity = search_range(_at(clip, sites, units, width, stages))
        return Calibration(0.0, noise.calibrate(sensitivity, epsilon, delta), width, stages)

    def estimate_variance(self, noise, releases, sites, units) -> float:
        return noise.variance(releases.second_noise) / self.estimating_sites(sites)

    def theory_rate(self, sites, units, epsilon) -> float:
        return math.exp(-sites * epsilon**2)

    def estimate(self, program, hp, key, clients):
        locating = hp.sites // 2
        stages = jnp.maximum(hp.stages, 1)
        tie_key = jax.random.fold_in(key, 1)

        def vote(broadcast, site_id, key):
            hp, middle, stage = broadcast
            # one stage's group votes; a site votes in one stage at most
            inside = (site_id < locating) & (site_id % stages == stage)
            return {"bit": program.site_mean(hp, key) > middle,
                    "weight": inside.astype(jnp.float32)}  # fmt: skip

        def search(stage, interval):
            low, high = interval
            middle = (low + high) / 2.0
            # a site votes in one stage at most (the others weigh its vote 0): the stages
            # compose in parallel, one line of the round's ledger, each voter's one vote
            # (private at any eps: the flip probability never falls below 1/(e^eps + 1))
            votes, _, _ = clients.aggregate(RandomizedResponseVotes(), VoteParams(hp.truthful),
                                            (), vote, (hp, middle, stage), key,
                                            disjoint_steps=True)  # fmt: skip
            quarter = (high - low) / 4.0
            # either half keeps a mean near the middle; a tie is settled by a fair public coin
            # (the server's key, no privacy cost): "ties go up" drifted the search upward, a
            # bias of +0.049 at S = 100, n = 10^5, eps = 1, mu = 0 (3 or 4 voters a stage)
            coin = jax.random.bernoulli(jax.random.fold_in(tie_key, stage))
            above, voters = votes["above"], votes["voters"]
            go_up = (2.0 * above > voters) | ((2.0 * above == voters) & coin)
            return jnp.where(go_up, middle - quarter, low), jnp.where(go_up, high, middle + quarter)

        low, high = lax.fori_loop(0, hp.stages, search, (-hp.clip, hp.clip))
        estimated, _, _ = program.clipped_means(
            clients, LocalNoise(program.mechanism, search_range), hp.second_noise, hp, key,
            low - hp.width, high + hp.width, lambda hp, s: (s >= locating) & (s < hp.sites),
        )  # fmt: skip
        count = estimated["weight"]
        return estimated["value"] / count, estimated["clipped"] / jnp.maximum(count, 1.0)


_ALL_SETTINGS = (NoPrivacy(), LocalItem(), LocalUserSmall(), LocalUserLarge(), CentralItem(),
                 CentralUser(), Federated())  # fmt: skip
SETTINGS: dict[str, Setting] = {setting.name: setting for setting in _ALL_SETTINGS}
"""Every setting by its ``--setting`` name (the names of :data:`jfed.catalog.ESTIMATION_SETTINGS`,
in that order)."""


# ------------------------------------------------------------------------------- the program


@dataclass(frozen=True)
class MeanEstimation:
    """One replication per round: every site draws fresh data, the setting's releases run, and
    the round's info is the estimate's error.

    Attributes (static):
      setting: one of :data:`SETTINGS`' objects.
      mechanism: the noise, one of :data:`MECHANISMS`' objects.
      model: the data model, one of :data:`DATA_MODELS`' objects: ±1 (the worst case of data in
        [-1, 1]) or N(mu, 1) (sub-Gaussian; clipped by the mechanisms).
      max_units: the largest n of the program (units drawn one by one are padded to it).
    """

    setting: Setting
    mechanism: Any
    model: Any
    max_units: int

    def __post_init__(self) -> None:
        exact = isinstance(self.mechanism, tuple(EXACT_MECHANISMS.values()))
        for name, value, table in (("setting", self.setting, SETTINGS),
                                   ("mechanism", self.mechanism, {} if exact else MECHANISMS),
                                   ("model", self.model, DATA_MODELS)):  # fmt: skip
            if table and value not in table.values():
                raise ValueError(
                    f"expected {name} to be one of the objects of the table {list(table)} "
                    f"(e.g. SETTINGS['federated']), got {value!r}"
                )

    @property
    def per_unit(self) -> bool:
        """Whether units are drawn one by one: where each is randomised or clipped on its own."""
        return self.setting.per_unit(self.model)

    def init(self, hp: Hyperparams, key: jax.Array) -> tuple:
        """No server state: every round reads the run's hyper-parameters."""
        del hp, key
        return ()

    def round(self, state: tuple, hp: Hyperparams, key: jax.Array, clients) -> tuple[tuple, Info]:
        estimate, clipped = self.setting.estimate(self, hp, key, clients)
        return state, Info(estimate - hp.mean, clipped)

    # -- the site side: written for one site --------------------------------------------------

    @staticmethod
    def present(hp: Hyperparams, site_id: jax.Array) -> jax.Array:
        """1.0 for a site of the configuration, 0.0 for a site the program is padded with."""
        return (site_id < hp.sites).astype(jnp.float32)

    def site_mean(self, hp: Hyperparams, key: jax.Array) -> jax.Array:
        """The site's mean of its units (exact, unclipped)."""
        return self.model.site_mean(jax.random.fold_in(key, DATA_STREAM), hp.mean, hp.units)

    def exact_sum(self, hp: Hyperparams, key: jax.Array) -> jax.Array:
        """The site's sum of its units (exact, unclipped)."""
        return hp.units * self.site_mean(hp, key)

    def unit_values(
        self, hp: Hyperparams, key: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """The site's units one by one, each clipped to ``[-c, c]`` (vmapped over
        ``max_units``): values, present (1 for the first n) and clipped, ``f32[max_units]``
        each."""
        data_key = jax.random.fold_in(key, DATA_STREAM)

        def one_unit(index: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
            x = self.model.unit(jax.random.fold_in(data_key, index), hp.mean)
            x, clipped = clip_to(x, -hp.clip, hp.clip)
            return x, (index < hp.units).astype(jnp.float32), clipped

        return jax.vmap(one_unit)(jnp.arange(self.max_units))

    def clipped_units(
        self, hp: Hyperparams, key: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """The site's units each clipped to ``[-c, c]`` as ``(values f32[k], counts f32[k],
        clipped)``: its units one by one (counts 1 for the first n, 0 for padding) where
        :attr:`per_unit`, else the distinct values with how many units have each (their exact
        law); and how many were clipped."""
        if not self.per_unit:
            data_key = jax.random.fold_in(key, DATA_STREAM)
            return self.model.clipped_units(data_key, hp.mean, hp.units, hp.clip)
        values, present, clipped = self.unit_values(hp, key)
        return values, present, jnp.sum(present * clipped)

    def clipped_means(
        self, clients: Any, aggregator: Any, scale: jax.Array, hp: Hyperparams, key: jax.Array,
        low: jax.Array, high: jax.Array, member: Callable[[Hyperparams, jax.Array], jax.Array],
    ) -> tuple[Any, tuple, dict]:  # fmt: skip
        """The release by ``aggregator`` (noise ``scale``) of the means of the sites with
        ``member(hp, site_id)``, each clipped to ``[low, high]`` cut to ``[-c, c]`` (whose
        middle is the contributions' center on the grid)."""
        low, high = jnp.maximum(low, -hp.clip), jnp.minimum(high, hp.clip)

        def site(broadcast, site_id, key):
            hp, low, high = broadcast
            value, clipped = clip_to(self.site_mean(hp, key), low, high)
            inside = member(hp, site_id).astype(jnp.float32)
            return {"value": value, "weight": inside, "center": (low + high) / 2.0,
                    "clipped": inside * clipped}  # fmt: skip

        return clients.aggregate(aggregator, release_params(hp, scale), (), site,
                                 (hp, low, high), key)  # fmt: skip
