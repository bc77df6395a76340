"""Private mean estimation across S sites of n units each, in the seven trust settings of the
federated-estimation seed (docs/specs/estimation.md), as one engine round per Monte Carlo
replication.

The engine's clients are the sites (a site is a user in the local user-level settings, a server
in the federated one). A site's function is written for ONE site; inside it, the units of the
site are drawn one by one (``unit_value``: one unit, vmapped over the site's units) where a unit is
clipped or randomised on its own, and the site's mean is drawn from its exact distribution
otherwise (``Binomial`` for ±1 data, ``Normal`` for Gaussian data), which lets n reach 10^6 at no
cost. Every draw is addressed by (replication, site, unit) through the engine's keys, so a site's
numbers do not depend on how many sites or units the program was padded to.

The settings (``S`` sites, ``n`` units each, data in ``[-c, c]`` after clipping, noise of the
``mechanism``: Laplace (pure eps) or Gaussian (analytic calibration, (eps, delta))):

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

from dataclasses import dataclass, field
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jfed._random import private_normals
from jfed.catalog import ESTIMATION_DATA, ESTIMATION_MECHANISMS, ESTIMATION_SETTINGS
from jfed.privacy.randomized_response import keeps_true_bit_given_truthful

SETTINGS = ESTIMATION_SETTINGS
MODELS = ESTIMATION_DATA
MECHANISMS = ESTIMATION_MECHANISMS
DATA_STREAM, NOISE_STREAM = 0, 1


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


# ------------------------------------------------------------------------ one unit, one site


def unit_value(key: jax.Array, model: str, mean: jax.Array) -> jax.Array:
    """One unit's value: ±1 with mean ``mean`` (``rademacher``) or ``N(mean, 1)``."""
    if model == "rademacher":
        return jnp.where(jax.random.uniform(key) < (1.0 + mean) / 2.0, 1.0, -1.0)
    return mean + jax.random.normal(key)


def noise(key: jax.Array, mechanism: str, scale: jax.Array) -> jax.Array:
    """One draw of the mechanism's noise: ``Laplace(scale)`` or ``N(0, scale^2)``."""
    sample = jax.random.laplace(key) if mechanism == "laplace" else private_normals(key, ())
    return scale * sample


def exact_site_mean(key: jax.Array, model: str, mean: jax.Array, units: jax.Array) -> jax.Array:
    """The mean of ``units`` unclipped units, drawn from its exact distribution."""
    n = units.astype(jnp.float32)
    if model == "rademacher":
        ones = jax.random.binomial(key, n, (1.0 + mean) / 2.0)
        return 2.0 * ones / n - 1.0
    return mean + jax.random.normal(key) / jnp.sqrt(n)


def clip_to(value: jax.Array, low: jax.Array, high: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``value`` clipped to ``[low, high]`` and whether it was clipped (f32 0/1)."""
    clipped = jnp.clip(value, low, high)
    return clipped, (clipped != value).astype(jnp.float32)


@dataclass(frozen=True)
class MeanEstimation:
    """One replication per round: every site draws fresh data, the setting's mechanism runs, and
    the round's info is the estimate's error.

    Attributes (static):
      setting: one of :data:`SETTINGS`.
      mechanism: ``laplace`` or ``gaussian``.
      model: ``rademacher`` (±1, the worst case of data in [-1, 1]) or ``gaussian`` (N(mu, 1),
        sub-Gaussian; clipped by the mechanisms).
      max_units: the largest n of the program (units drawn one by one are padded to it).
    """

    setting: str
    mechanism: str
    model: str
    max_units: int

    def __post_init__(self) -> None:
        for name, value, allowed in (("setting", self.setting, SETTINGS),
                                     ("mechanism", self.mechanism, MECHANISMS),
                                     ("model", self.model, MODELS)):  # fmt: skip
            if value not in allowed:
                raise ValueError(f"unknown {name} {value!r}; expected one of {allowed}")

    @property
    def per_unit(self) -> bool:
        """Whether units are drawn one by one: where each is randomised or clipped on its own."""
        if self.setting == "local-item":
            return True
        return self.model == "gaussian" and self.setting in ("central-item", "federated")

    def init(self, hp: Hyperparams, key: jax.Array) -> tuple:
        """No server state: every round reads the run's hyper-parameters."""
        del hp, key
        return ()

    # -- the site side: written for one site --------------------------------------------------

    def site_sum(self, hp: Hyperparams, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """The site's sum of (clipped) unit values and the number of them clipped.

        Units one by one (vmapped over ``max_units``, masked to ``n``) where item-level clipping
        or noise applies, else the exact mean times n."""
        data_key = jax.random.fold_in(key, DATA_STREAM)
        if not self.per_unit:
            return hp.units * exact_site_mean(data_key, self.model, hp.mean, hp.units), jnp.float32(
                0
            )
        noise_key = jax.random.fold_in(key, NOISE_STREAM)

        def one_unit(index: jax.Array) -> tuple[jax.Array, jax.Array]:
            x = unit_value(jax.random.fold_in(data_key, index), self.model, hp.mean)
            x, clipped = clip_to(x, -hp.clip, hp.clip)
            if self.setting == "local-item":
                x = x + noise(jax.random.fold_in(noise_key, index), self.mechanism,
                              hp.first_noise)  # fmt: skip
            present = (index < hp.units).astype(jnp.float32)
            return present * x, present * clipped

        values, clipped = jax.vmap(one_unit)(jnp.arange(self.max_units))
        return jnp.sum(values), jnp.sum(clipped)

    def site_mean(self, hp: Hyperparams, key: jax.Array) -> jax.Array:
        """The site's mean of its units (user-level settings: exact, unclipped)."""
        return exact_site_mean(jax.random.fold_in(key, DATA_STREAM), self.model, hp.mean,
                               hp.units)  # fmt: skip

    @staticmethod
    def noise_key(key: jax.Array, stage: int | jax.Array) -> jax.Array:
        """The key of a site's randomisation in ``stage`` (each stage's draws its own)."""
        return jax.random.fold_in(jax.random.fold_in(key, NOISE_STREAM), stage)

    def site_noise(self, hp: Hyperparams, key: jax.Array, stage: int | jax.Array, scale):
        return noise(self.noise_key(key, stage), self.mechanism, scale)

    # -- the server side ----------------------------------------------------------------------

    def round(
        self, state: tuple, hp: Hyperparams, key: jax.Array, clients
    ) -> tuple[tuple, Info]:
        estimate, clipped = getattr(self, "_" + self.setting.replace("-", "_"))(hp, key, clients)
        return state, Info(estimate - hp.mean, clipped)

    def _present(self, hp, site_id):
        return (site_id < hp.sites).astype(jnp.float32)

    def _pooled(self, hp, clients):
        def site(hp, site_id, key):
            total, clipped = self.site_sum(hp, key)
            present = self._present(hp, site_id)
            return present * total, present * clipped

        total, clipped = clients.sum(site, hp)
        count = (hp.sites * hp.units).astype(jnp.float32)
        return total / count, clipped / count

    def _none(self, hp, key, clients):
        return self._pooled(hp, clients)

    def _local_item(self, hp, key, clients):
        return self._pooled(hp, clients)

    def _central_item(self, hp, key, clients):
        mean, clipped = self._pooled(hp, clients)
        return mean + noise(key, self.mechanism, hp.first_noise), clipped

    def _federated(self, hp, key, clients):
        def site(hp, site_id, key):
            total, clipped = self.site_sum(hp, key)
            release = total / hp.units + self.site_noise(hp, key, 0, hp.first_noise)
            present = self._present(hp, site_id)
            return present * release, present * clipped / hp.units

        total, clipped = clients.sum(site, hp)
        sites = hp.sites.astype(jnp.float32)
        return total / sites, clipped / sites

    def _clipped_means(self, clients, hp, low, high, member):
        """Sum over the sites with ``member(site_id)`` of their means clipped to [low, high] (cut
        to [-c, c]) plus the second stage's noise, the number clipped, and the number of such
        sites."""

        low, high = jnp.maximum(low, -hp.clip), jnp.minimum(high, hp.clip)  # within [-c, c]

        def site(broadcast, site_id, key):
            hp, low, high = broadcast
            value, clipped = clip_to(self.site_mean(hp, key), low, high)
            value = value + self.site_noise(hp, key, 1, hp.second_noise)
            inside = member(hp, site_id).astype(jnp.float32)
            return inside * value, inside * clipped, inside

        return clients.sum(site, (hp, low, high))

    def _local_user_small(self, hp, key, clients):
        locating = hp.sites // 2  # sites [0, S/2) locate, the rest estimate

        def first(hp, site_id, key):
            value, clipped = clip_to(self.site_mean(hp, key), -hp.clip, hp.clip)
            inside = (site_id < locating).astype(jnp.float32)
            return inside * (value + self.site_noise(hp, key, 0, hp.first_noise)), inside * clipped

        total, clipped_first = clients.sum(first, hp)
        center = total / jnp.maximum(locating, 1).astype(jnp.float32)
        total, clipped, count = self._clipped_means(
            clients, hp, center - hp.width, center + hp.width,
            lambda hp, s: (s >= locating) & (s < hp.sites),
        )  # fmt: skip
        return total / count, (clipped + clipped_first) / hp.sites.astype(jnp.float32)

    def _central_user(self, hp, key, clients):
        def first(hp, site_id, key):
            value, clipped = clip_to(self.site_mean(hp, key), -hp.clip, hp.clip)
            present = self._present(hp, site_id)
            return present * value, present * clipped

        total, clipped_first = clients.sum(first, hp)
        sites = hp.sites.astype(jnp.float32)
        first_key, second_key = jax.random.split(key)
        center = total / sites + noise(first_key, self.mechanism, hp.first_noise)
        quiet = hp._replace(second_noise=jnp.zeros_like(hp.second_noise))  # the curator adds it
        total, clipped, _ = self._clipped_means(
            clients, quiet, center - hp.width, center + hp.width,
            lambda hp, s: s < hp.sites,
        )  # fmt: skip
        estimate = total / sites + noise(second_key, self.mechanism, hp.second_noise)
        # projected onto the parameter set mu in [-1, 1], as the curator's estimator is defined
        # (post-processing: no privacy cost; never farther from mu)
        return jnp.clip(estimate, -1.0, 1.0), (clipped + clipped_first) / (2.0 * sites)

    def _local_user_large(self, hp, key, clients):
        locating = hp.sites // 2
        stages = jnp.maximum(hp.stages, 1)
        tie_key = jax.random.fold_in(key, 1)

        def vote(broadcast, site_id, key):
            hp, middle, stage = broadcast
            bit = self.site_mean(hp, key) > middle
            # private at any eps: the flip probability never falls below 1/(e^eps + 1)
            honest = keeps_true_bit_given_truthful(self.noise_key(key, stage), hp.truthful)
            report = jnp.where(honest, bit, ~bit).astype(jnp.float32)
            inside = ((site_id < locating) & (site_id % stages == stage)).astype(jnp.float32)
            return inside * report, inside

        def search(stage, interval):
            low, high = interval
            middle = (low + high) / 2.0
            above, voters = clients.sum(vote, (hp, middle, stage))
            quarter = (high - low) / 4.0
            # either half keeps a mean near the middle; a tie is settled by a fair public coin
            # (the server's key, no privacy cost): "ties go up" drifted the search upward, a
            # bias of +0.049 at S = 100, n = 10^5, eps = 1, mu = 0 (3 or 4 voters a stage)
            coin = jax.random.bernoulli(jax.random.fold_in(tie_key, stage))
            go_up = (2.0 * above > voters) | ((2.0 * above == voters) & coin)
            return jnp.where(go_up, middle - quarter, low), jnp.where(go_up, high, middle + quarter)

        low, high = lax.fori_loop(0, hp.stages, search, (-hp.clip, hp.clip))
        total, clipped, count = self._clipped_means(
            clients, hp, low - hp.width, high + hp.width,
            lambda hp, s: (s >= locating) & (s < hp.sites),
        )  # fmt: skip
        return total / count, clipped / jnp.maximum(count, 1.0)
