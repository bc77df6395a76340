"""Client sampling: which clients take part in a round (its cohort), drawn in O(cohort) work.

A cohort kind is a small frozen (hashable, static) dataclass:

- :class:`All` - every client, as a round without a cohort;
- :class:`Uniform` ``(size=k)`` - exactly ``k`` distinct clients, uniformly without replacement;
- :class:`Poisson` ``(rate=q)`` - each client independently with probability ``q``, run at a fixed
  static capacity ``K_max`` (see :func:`poisson_capacity`); clients beyond it are dropped and
  counted as overflow.

How a cohort is drawn without touching the population (n = population size):

1. the count: ``K = k`` (uniform) or ``K ~ Binomial(n, q)`` (Poisson), drawn as the number of
   successes of a Bernoulli(q) process within n trials: geometric waiting times, ``capacity + 1``
   at a time, so the common case is one vectorised draw of O(capacity) numbers;
2. the ids: the images of the positions ``0 .. capacity-1`` under a keyed pseudo-random bijection
   of ``[0, n)`` (:func:`feistel_bijection`: a Feistel network over the id's two digits in a
   mixed radix close to sqrt(n), with cycle walking); the first ``K`` are the cohort. Given K they
   are K distinct ids, a uniformly random K-subset (up to the pseudo-randomness of the
   bijection), which with ``K ~ Binomial(n, q)`` is the law of independent inclusion.

Cohorts drawn in the same round are nested: the bijection does not depend on the cohort kind, so
``Uniform(50)`` is the first 50 of ``Uniform(200)``, and a Poisson cohort the first K of them
(common random numbers when comparing cohort sizes at one seed).

The engine then streams the cohort's ids through the same chunked vmap as a whole population, so
a round costs O(capacity x client cost) in time and memory, whatever n. A client's own key stays
``client_key(round_client_root, id)``: its randomness does not depend on who else was sampled.

References: docs/specs/dp_fedavg.md (Population and cohorts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.random import threefry_2x32

from jfed._random import _reduce_to_span, _unit_uniform
from jfed.privacy import accounting
from jfed.privacy.guarantee import Adjacency

OVERFLOW_PROBABILITY = 1e-9
"""The default capacity of a Poisson cohort is exceeded in a round with at most this probability."""

FEISTEL_ROUNDS = 8
"""Rounds of the Feistel network. Four rounds with pseudo-random round functions already give a
pseudo-random permutation (Luby-Rackoff); eight leave a margin for the unequal digit ranges, at a
cost (8 threefry blocks per id) small next to a client's work."""


def _keyed_hash(key: jax.Array, first: jax.Array, second: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A keyed hash of the pairs ``(first[i], second[i])`` (both ``u32[m]``): two words
    ``(u32[m], u32[m])`` from one threefry block per pair (counter mode, as
    :mod:`jfed._random`); for other key implementations, ``bits(fold_in(fold_in(key, second),
    first), (2,))``."""
    if jax.random.key_impl(key) != jax.random.key_impl(jax.random.key(0)):
        words = jax.vmap(
            lambda a, b: jax.random.bits(
                jax.random.fold_in(jax.random.fold_in(key, b), a), (2,), jnp.uint32
            )
        )(first, second)
        return words[:, 0], words[:, 1]
    key_words = jax.random.key_data(key)
    hashed = threefry_2x32((key_words[0], key_words[1]), jnp.concatenate([first, second]))
    return hashed[: first.shape[0]], hashed[first.shape[0] :]


@dataclass(frozen=True)
class All:
    """Every client takes part: the round runs exactly as without a cohort.

    Privacy: a release over every client is the aggregator's own event (no amplification);
    natural adjacency add-or-remove."""

    adjacency: ClassVar[Adjacency] = Adjacency.ADD_OR_REMOVE

    def sampled_event(self, event, n_clients: int):
        """``event`` itself: everyone takes part."""
        del n_clients
        return event

    def accountant(self) -> accounting.AccountantSpec:
        """The accountant that composes this cohort's releases tightly: PLD."""
        return accounting.Pld()


@dataclass(frozen=True)
class Uniform:
    """Exactly ``size`` distinct clients per round, uniformly at random without replacement.

    Attributes:
      size: the cohort size ``k``, ``1 <= k <= n`` (checked against n when the round runs).
    """

    size: int
    adjacency: ClassVar[Adjacency] = Adjacency.REPLACE_ONE

    def __post_init__(self) -> None:
        if int(self.size) != self.size or self.size < 1:
            raise ValueError(f"expected size >= 1 (integer), got size={self.size}")
        object.__setattr__(self, "size", int(self.size))

    def sampled_event(self, event, n_clients: int):
        """``event`` over a uniform sample of exactly k of n clients, under its natural
        replace-one adjacency (:func:`jfed.privacy.sampled_without_replacement`; dp-accounting's
        RDP accountant composes it)."""
        return accounting.sampled_without_replacement(event, n_clients, self.size)

    def accountant(self) -> accounting.AccountantSpec:
        """The accountant that composes this cohort's releases: RDP, dp-accounting's only one
        for sampling without replacement."""
        return accounting.Rdp()


@dataclass(frozen=True)
class Poisson:
    """Each client joins independently with probability ``rate``.

    Attributes:
      rate: the sampling rate ``q`` in (0, 1].
      capacity: clients computed per round at most (static). Default ``None``: the smallest
        ``K_max`` with ``P(Binomial(n, q) > K_max) <= 1e-9`` (:func:`poisson_capacity`). A
        smaller capacity saves work; clients beyond it are dropped, and counted in
        ``CohortInfo.overflow``. The clients kept are then a uniformly random ``capacity``-subset
        of the K drawn (the first in the bijection's order), not the lowest ids. An overflowing
        round is no longer a Poisson-sampled release: report the overflow with the guarantee.
    """

    rate: float
    capacity: int | None = None
    adjacency: ClassVar[Adjacency] = Adjacency.ADD_OR_REMOVE

    def __post_init__(self) -> None:
        rate = float(self.rate)
        if not 0.0 < rate <= 1.0:
            raise ValueError(f"expected rate in (0, 1], got rate={self.rate}")
        object.__setattr__(self, "rate", rate)
        if self.capacity is not None:
            if int(self.capacity) != self.capacity or self.capacity < 1:
                raise ValueError(f"expected capacity >= 1 (integer), got capacity={self.capacity}")
            object.__setattr__(self, "capacity", int(self.capacity))

    def sampled_event(self, event, n_clients: int):
        """``event`` over a Poisson sample of rate q, under its natural add-or-remove adjacency
        (:func:`jfed.privacy.poisson_sampled`). The ideal mechanism: a round that overflows its
        capacity is not, which :meth:`overflow_delta` accounts for."""
        del n_clients
        return accounting.poisson_sampled(event, self.rate)

    def accountant(self) -> accounting.AccountantSpec:
        """The accountant that composes this cohort's releases tightly: PLD."""
        return accounting.Pld()

    def overflow_probability(self, n_clients: int) -> float:
        """p, the probability that one round's cohort exceeds the capacity, at n + 1 clients
        (the larger of two neighbouring populations); 0 with no capacity below n (a capacity of
        the whole population truncates nothing)."""
        capacity = self.capacity if self.capacity is not None else poisson_capacity(
            n_clients, self.rate
        )  # fmt: skip
        if capacity >= n_clients:
            # the whole population: no cohort of it overflows, and the capacity is never below
            # the population it serves (for_privacy clamps it to n), so the neighbour's one more
            # client gets its slot: the ideal Poisson mechanism, nothing truncated
            return 0.0
        return overflow_probability(n_clients + 1, self.rate, capacity)

    def overflow_delta(self, epsilon: float, rounds: int, n_clients: int) -> float:
        """The delta that overflowing rounds add to the ideal mechanism's: ``(1 + e^eps) R p``.

        Both neighbouring runs coincide with the ideal Poisson mechanism unless some round
        overflows, which happens with probability at most ``R p`` (:meth:`overflow_probability`),
        so the run is (eps, delta_ideal + (1 + e^eps) R p)-DP when the ideal one is
        (eps, delta_ideal)."""
        per_round = self.overflow_probability(n_clients)
        return (1.0 + math.exp(min(epsilon, 700.0))) * rounds * per_round

    @classmethod
    def for_privacy(
        cls, rate: float, n_clients: int, rounds: int, epsilon: float, delta: float,
        share: float = 0.01,
    ) -> Poisson:  # fmt: skip
        """The Poisson cohort of rate q whose capacity keeps :meth:`overflow_delta` at most
        ``share`` of ``delta`` at ``epsilon`` (use a sweep's largest eps and least delta, so one
        program serves the whole sweep)."""
        per_round = share * delta / ((1.0 + math.exp(min(epsilon, 700.0))) * rounds)
        capacity = poisson_capacity(n_clients + 1, rate, min(per_round, OVERFLOW_PROBABILITY))
        return cls(rate, capacity=min(capacity, n_clients))


Cohort = All | Uniform | Poisson


class CohortInfo(NamedTuple):
    """What a round's cohort was (:attr:`jfed.engine.CohortView.info`).

    Attributes:
      size: ``i32[]``, clients actually computed (``min(K, capacity)``).
      overflow: ``i32[]``, Poisson clients drawn but dropped because ``K > capacity``
        (``K - capacity``, else 0); always 0 for :class:`Uniform` and :class:`All`.
      capacity: ``i32[]``, the static capacity the round ran at (``k`` for :class:`Uniform`,
        n for :class:`All`).
      ids: ``i32[capacity]``, the cohort's client ids in cohort order (the order of the rows of
        a stacked statistic), and ``n_clients`` past ``size``: an id no client has, so a
        scatter ``table.at[info.ids].set(rows, mode="drop")`` drops the padding and a gather
        (clamped) reads a real row that the padding's zero weight then masks; ``None`` for
        :class:`All` (ids 0..n-1).
    """

    size: jax.Array
    overflow: jax.Array
    capacity: jax.Array
    ids: jax.Array | None


def poisson_capacity(
    n_clients: int, rate: float, overflow_probability: float = OVERFLOW_PROBABILITY
) -> int:
    """The smallest ``K_max`` with ``P(Binomial(n, q) > K_max) <= overflow_probability``.

    Computed on the host from scipy's binomial survival function in logs (``binom.logsf``, a
    bisection over ``[0, n]``), so probabilities far below float64's relative precision (1e-20,
    where ``binom.isf`` returns n) are honoured. For n = 10^8, q = 10^-6 (mean 100) it is 166 at
    1e-9 and 178 at 1e-12.
    """
    from scipy.stats import binom

    n_clients, rate = int(n_clients), float(rate)
    if not 0.0 < overflow_probability < 1.0:
        raise ValueError(f"expected overflow_probability in (0, 1), got {overflow_probability}")
    if rate >= 1.0:
        return n_clients
    log_target = math.log(overflow_probability)
    low, high = 0, n_clients  # logsf(high) = -inf <= target; find the least k that satisfies it
    while low < high:
        middle = (low + high) // 2
        if binom.logsf(middle, n_clients, rate) <= log_target:
            high = middle
        else:
            low = middle + 1
    return min(max(low, 1), n_clients)


def overflow_probability(n_clients: int, rate: float, capacity: int) -> float:
    """``P(Binomial(n, q) > capacity)``: how often a Poisson cohort overflows its capacity."""
    from scipy.stats import binom

    return float(binom.sf(int(capacity), int(n_clients), float(rate)))


def cohort_capacity(cohort: Cohort, n_clients: int) -> int:
    """The static number of clients a round with ``cohort`` computes (before chunk padding).

    Raises:
      ValueError: a uniform size or a Poisson capacity larger than the population.
    """
    if isinstance(cohort, All):
        return n_clients
    if isinstance(cohort, Uniform):
        if cohort.size > n_clients:
            raise ValueError(f"expected size <= n_clients={n_clients}, got size={cohort.size}")
        return cohort.size
    if isinstance(cohort, Poisson):
        if cohort.capacity is None:
            return poisson_capacity(n_clients, cohort.rate)
        if cohort.capacity > n_clients:
            raise ValueError(
                f"expected capacity <= n_clients={n_clients}, got capacity={cohort.capacity}"
            )
        return cohort.capacity
    raise TypeError(f"expected a cohort (All, Uniform or Poisson), got {cohort!r}")


def feistel_radices(n_clients: int) -> tuple[int, int]:
    """The two digit ranges ``(a, b)`` of the Feistel network for n: ``a = ceil(sqrt(n))``,
    ``b = ceil(n / a)``, so ``n <= a b < n + a`` (``a b = n`` when n is a square, e.g. 10^6)."""
    a = math.isqrt(int(n_clients) - 1) + 1
    return a, -(-int(n_clients) // a)


def feistel_bijection(positions: jax.Array, n_clients: int, key: jax.Array) -> jax.Array:
    """A keyed pseudo-random bijection of ``[0, n)``, applied to ``positions: i32[m]`` (each in
    ``[0, n)``); returns their images ``i32[m]``, distinct where the positions are.

    A Feistel network over the id's two digits in mixed radix (Black and Rogaway's generalised
    Feistel for arbitrary domains, as in format-preserving encryption) permutes ``[0, a b)``
    (:func:`feistel_radices`): an id ``x = L B + R`` with digits ``L in [0, A)``, ``R in [0, B)``
    goes to ``R A + ((L + F_r(R)) mod A)``, with ``(A, B) = (a, b)`` in even rounds and
    ``(b, a)`` in odd ones, for :data:`FEISTEL_ROUNDS` rounds; ``F_r(R)`` is a threefry hash of
    ``(R, r)`` under ``key`` reduced to ``[0, A)`` from 64 bits (bias ~ A / 2^64). Each round is
    a bijection, so the network is. Cycle walking restricts it to ``[0, n)``: an image ``>= n``
    is mapped again until it lands below n, which it does within the cycle of its position.
    Since ``a b - n < a ~ sqrt(n)``, walks are rare (a fraction below ``1 / sqrt(n)`` of the
    images): the work is ``O(m)`` and the same for every large n. (A network over the id's bits
    permutes ``[0, 2^ceil(log2 n))``, up to twice n: its walks, up to ~log2 m long for m ids,
    made a cohort of 10^4 three times slower to draw at n = 10^8 than at 10^6.)
    """
    a, b = feistel_radices(n_clients)

    def feistel_round(r: jax.Array, x: jax.Array) -> jax.Array:
        # a loop over rounds (not unrolled) keeps the program, and its compile, small
        even = r % 2 == 0
        high = jnp.where(even, a, b).astype(jnp.uint32)
        low = jnp.where(even, b, a).astype(jnp.uint32)
        left, right = x // low, x % low
        words = _keyed_hash(key, right, jnp.full_like(right, r.astype(jnp.uint32)))
        shift = _reduce_to_span(*words, high).astype(jnp.uint32)
        return right * high + (left + shift) % high

    def permute(x: jax.Array) -> jax.Array:
        return lax.fori_loop(0, FEISTEL_ROUNDS, feistel_round, x)

    def walk(y: jax.Array) -> jax.Array:
        # cycle walking: map again only what still lies outside [0, n)
        return lax.while_loop(
            lambda y: jnp.any(y >= n_clients),
            lambda y: jnp.where(y >= n_clients, permute(y), y),
            y,
        )

    images = permute(positions.astype(jnp.uint32))
    m = images.shape[0]
    if a * b > n_clients and m > 0:
        # the few images outside [0, n) (m (ab - n) / ab on average) walk in a small buffer, so
        # that a walk does not cost a pass over all m; any left over (rare) walk in place
        buffer = min(m, 32 + 2 * math.ceil(m * (a * b - n_clients) / (a * b)))
        # slot j holds the (j+1)-th image outside (m if none): a binary search in their running
        # count, O(buffer log m) (jnp.nonzero's scatter over all m cost as much as the network)
        outside_so_far = jnp.cumsum(images >= n_clients, dtype=jnp.int32)
        slots = jnp.searchsorted(outside_so_far, jnp.arange(1, buffer + 1, dtype=jnp.int32))
        walked = walk(jnp.where(slots < m, images[jnp.minimum(slots, m - 1)], 0))
        images = images.at[slots].set(walked, mode="drop")
    images = walk(images)
    return images.astype(jnp.int32)


def binomial_count(key: jax.Array, n_clients: int, rate: float, block: int) -> jax.Array:
    """``K ~ Binomial(n, rate)`` as ``i32[]``: the successes among n Bernoulli trials.

    Drawn from the geometric waiting times between successes, ``block`` at a time: ``K`` is how
    many of their partial sums stay ``<= n``. With ``block = capacity + 1`` one block decides
    (``K <= capacity``) except with the overflow probability; further blocks only run when it
    does not. Waiting time j is drawn from the hash of ``(j, 0)`` under ``key``, so K does not
    depend on ``block``: a round's count is the same at every capacity. Each waiting time is an
    exponential scaled by ``1 / -log(1 - q)`` and floored (a geometric variate), exact up to
    float32 resolution (relative 6e-8), far below what decides the count.

    Why not ``jax.random.binomial``: in float32 its rejection sampler loses the ratio
    ``(n - m + 1) / (n - k + 1)`` to rounding for large n (measured with jax 0.10 at n = 10^8,
    q = 10^-6: variance 1.36x the binomial's, chi-square p ~ 0; already p ~ 4e-6 at n = 10^6,
    q = 10^-3), and float64 is off on device by default.
    """
    if rate >= 1.0:
        return jnp.int32(n_clients)
    scale = np.float32(1.0 / -math.log1p(-rate))
    stop = np.uint32(n_clients + 1)  # a waiting time this long already ends the count

    def next_block(carry):
        total, count, index = carry
        indices = index * np.uint32(block) + jnp.arange(block, dtype=jnp.uint32)
        uniform = _unit_uniform(_keyed_hash(key, indices, jnp.zeros_like(indices))[0])
        waits = jnp.floor(-jnp.log1p(-uniform) * scale)  # exponential -> geometric
        waits = jnp.minimum(waits + 1.0, np.float32(stop)).astype(jnp.uint32)
        # partial sums in uint32: total <= n and each wait <= n + 1 <= 2^31, so they can only
        # wrap around after passing n; the count is the length of the leading run <= n
        sums = total + jnp.cumsum(jnp.minimum(waits, stop), dtype=jnp.uint32)
        beyond = sums > n_clients
        count = count + jnp.argmax(jnp.append(beyond, True)).astype(jnp.int32)
        return jnp.where(jnp.any(beyond), stop, sums[-1]), count, index + 1

    start = (jnp.uint32(0), jnp.int32(0), jnp.uint32(0))
    _, count, _ = lax.while_loop(lambda carry: carry[0] <= n_clients, next_block, start)
    return count


def draw_cohort(cohort: Uniform | Poisson, n_clients: int, key: jax.Array) -> CohortInfo:
    """Draw one round's cohort from ``key``, the round's cohort key
    (:func:`jfed.engine.keys.cohort_key`).

    Traceable; work and memory O(capacity), independent of ``n_clients`` (static).

    Args:
      cohort: :class:`Uniform` or :class:`Poisson` (static).
      n_clients: the population size n.
      key: the cohort key, split into a count key (Poisson) and a bijection key.

    Returns:
      :class:`CohortInfo` with ``ids: i32[capacity]``: the images of positions
      ``0 .. capacity-1`` under :func:`feistel_bijection`, and ``n_clients`` (no client's id)
      from position ``size`` on.

    Example:
      >>> info = draw_cohort(Poisson(rate=0.01), 10**6, jax.random.key(0))
      >>> info.ids.shape == (int(info.capacity),)
      True
    """
    capacity = cohort_capacity(cohort, n_clients)
    count_key, bijection_key = jax.random.split(key)
    if isinstance(cohort, Poisson):
        drawn = binomial_count(count_key, n_clients, cohort.rate, capacity + 1)
    else:
        drawn = jnp.int32(cohort.size)
    size = jnp.minimum(drawn, capacity)
    positions = jnp.arange(capacity, dtype=jnp.int32)
    ids = feistel_bijection(positions, n_clients, bijection_key)
    return CohortInfo(
        size=size,
        overflow=drawn - size,
        capacity=jnp.int32(capacity),
        ids=jnp.where(positions < size, ids, n_clients),
    )
