"""Privacy of the last iterate of projected noisy SGD via contraction coefficients (seed 003).

Setting (docs/specs/accounting.md): n users; each iteration a batch of m = q n users chosen without
replacement (a random partition into T = n / m batches); every chosen user sends
``eta grad l(w, x) + eta sigma Z``; the aggregator averages, steps, projects onto the L2 ball of
radius rho and releases ONLY the last iterate. Loss L-Lipschitz, convex, smooth, eta <= 2 / beta.

Result (seed 003, Theorem 2, as re-derived in the spec): the release is (eps, delta)-DP with

    delta(eps) = q theta_eps(a) sum_{t=1}^{T} theta_eps(b)^(T - t)
               = q theta_eps(a) (1 - theta_eps(b)^T) / (1 - theta_eps(b)),
    a = 2 L / (sqrt(m) sigma),    b = 2 rho sqrt(m) / (eta sigma),    T = ceil(n / m),

with ``theta_eps`` the Gaussian hockey-stick divergence (``jfed.privacy.gaussian.hockey_stick``).
Averaging m noisy updates leaves noise ``eta sigma / sqrt(m)`` on the iterate while one record moves
the mean update by at most ``2 L eta / m``, which gives ``a``; each later projected Gaussian step
contracts the E_eps divergence by ``theta_eps(diam / noise)`` with diameter ``2 rho``, which gives
``b``. The seed's final display prints ``theta_eps(2 L sqrt(m) / sigma)`` and an intermediate line
prints n in place of eta: both are typos against its own steps (20)-(21) and (15); this module
follows the derivation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from jfed._validation import UsageError, check_int_range, check_open_unit, check_positive
from jfed.privacy.accountants import subsampled_gaussian_event
from jfed.privacy.accounting import AccountantSpec, Pld, as_accountant, spent
from jfed.privacy.gaussian import _bisect, analytic_gaussian_epsilon, hockey_stick


@dataclass(frozen=True)
class LastIterateSetting:
    """Parameters of projected noisy SGD with a without-replacement partition.

    Attributes:
      eta: step size (<= 2 / smoothness).
      lipschitz: L, the loss's Lipschitz constant.
      radius: rho, the projection radius.
      sigma: per-user noise multiplier (each user adds eta sigma Z).
      n: number of users.
      sampling_rate: q; the batch is m = q n users and T = n / m iterations.
    """

    eta: float
    lipschitz: float
    radius: float
    sigma: float
    n: int
    sampling_rate: float

    def __post_init__(self) -> None:
        for name in ("eta", "lipschitz", "radius", "sigma"):
            check_positive(name, getattr(self, name))
        check_int_range("n", self.n, 1, 10**12)
        if not 0.0 < self.sampling_rate <= 1.0:
            raise UsageError(f"expected sampling_rate in (0, 1], got {self.sampling_rate}")
        if abs(self.batch_size - self.sampling_rate * self.n) > 1e-9 * self.n:
            raise UsageError(
                f"expected sampling_rate * n to be an integer batch size, got "
                f"{self.sampling_rate} * {self.n}"
            )

    @property
    def batch_size(self) -> int:
        return max(1, round(self.sampling_rate * self.n))

    @property
    def iterations(self) -> int:
        """T = ceil(n / m): when m does not divide n the partition has a last, smaller batch, and
        counting it as a full iteration only adds a term to the sum (conservative)."""
        return -(-self.n // self.batch_size)

    @property
    def first_ratio(self) -> float:
        """``a = 2 L / (sqrt(m) sigma)``."""
        return 2.0 * self.lipschitz / (math.sqrt(self.batch_size) * self.sigma)

    @property
    def contraction_ratio(self) -> float:
        """``b = 2 rho sqrt(m) / (eta sigma)``."""
        return 2.0 * self.radius * math.sqrt(self.batch_size) / (self.eta * self.sigma)


def last_iterate_delta(setting: LastIterateSetting, epsilon: float | np.ndarray) -> np.ndarray:
    """delta(eps) of releasing only the last iterate (vectorised over eps)."""
    epsilon = np.asarray(epsilon, np.float64)
    first = hockey_stick(epsilon, setting.first_ratio)
    contraction = hockey_stick(epsilon, setting.contraction_ratio)
    T = setting.iterations
    # sum_{t=1}^{T} c^(T-t) = (1 - c^T) / (1 - c), written to stay finite as c -> 1
    geometric = np.where(
        contraction < 1.0 - 1e-12,
        -np.expm1(T * np.log(np.maximum(contraction, 1e-300))) / (1.0 - contraction),
        float(T),
    )
    return np.minimum(1.0, setting.sampling_rate * first * geometric)


def last_iterate_epsilon(setting: LastIterateSetting, delta: float) -> float:
    """Smallest eps with ``delta(eps) <= delta`` (bisection; delta decreases in eps)."""
    delta = check_open_unit("delta", delta)
    high = np.array(1.0)
    while last_iterate_delta(setting, high) > delta:
        high = high * 2.0
        if high > 1e6:
            raise UsageError(f"no eps below 1e6 reaches delta={delta} for {setting}")
    if last_iterate_delta(setting, 0.0) <= delta:
        return 0.0
    return float(_bisect(lambda e: last_iterate_delta(setting, e) <= delta, np.array(0.0), high))


def partition_delta(setting: LastIterateSetting, epsilon: float | np.ndarray) -> np.ndarray:
    """delta(eps) of releasing EVERY iterate of the algorithm as it runs (a partition): each record
    is in exactly one batch, so only one step's release depends on it, and the whole transcript
    is that one Gaussian release (ratio ``a``) composed with steps that do not touch the record:
    ``theta_eps(a)``, with no amplification. The honest every-iterate baseline of this algorithm.
    """
    return hockey_stick(np.asarray(epsilon, np.float64), setting.first_ratio)


def partition_epsilon(setting: LastIterateSetting, delta: float) -> float:
    """eps at ``delta`` of :func:`partition_delta` (the exact analytic Gaussian)."""
    return float(analytic_gaussian_epsilon(setting.first_ratio, 1.0, delta))


def poisson_event(setting: LastIterateSetting):
    """Every iterate released, were the batches Poisson-sampled at rate q instead (the sampler
    DP-SGD accounting assumes): T steps of the Gaussian with multiplier ``1 / a``. A different
    algorithm than the partition; shown as what its amplification would buy."""
    return subsampled_gaussian_event(
        1.0 / setting.first_ratio, setting.sampling_rate, setting.iterations
    )


def poisson_epsilon(setting: LastIterateSetting, delta: float) -> float:
    """eps (PLD, replace-one) of :func:`poisson_event`."""
    return spent(poisson_event(setting), delta, accountant=Pld(), adjacency="replace-one")


def poisson_delta(setting: LastIterateSetting, epsilon: float) -> float:
    """delta at ``epsilon`` (PLD, replace-one) of :func:`poisson_event`."""
    return Pld().make("replace-one").compose(poisson_event(setting)).get_delta(epsilon)


def every_iterate_event(setting: LastIterateSetting):
    """A looser comparator for releasing EVERY iterate: T steps of the Gaussian mechanism with
    noise multiplier ``1 / a`` (replace-one adjacency), each on a batch of m drawn without
    replacement from n, as if the T batches were independent draws (as DP-SGD accounting usually
    treats them). The algorithm's batches are a partition, for which :func:`partition_delta` is
    the exact every-iterate bound; this one is kept for comparison with the seed's Figure 2."""
    return subsampled_gaussian_event(
        1.0 / setting.first_ratio,
        setting.sampling_rate,
        setting.iterations,
        without_replacement_of=setting.n,
    )


def standard_composition_epsilon(
    setting: LastIterateSetting, delta: float, accountant: AccountantSpec | str = "rdp"
) -> float:
    """eps of :func:`every_iterate_event` (dp-accounting's RDP supports this sampling)."""
    return dp_accountant(accountant).compose(every_iterate_event(setting)).get_epsilon(delta)


def dp_accountant(accountant: AccountantSpec | str):
    """A fresh replace-one accountant of ``accountant`` (a spec or its key). The every-iterate
    event states dp-accounting's own convention (z = std / the distance between neighbouring
    outputs), so it is composed as dp-accounting reads it."""
    return as_accountant(accountant).make("replace-one")


def standard_composition_delta(
    setting: LastIterateSetting, epsilon: float, accountant: AccountantSpec | str = "rdp"
) -> float:
    """delta at ``epsilon`` of :func:`every_iterate_event`."""
    return dp_accountant(accountant).compose(every_iterate_event(setting)).get_delta(epsilon)


FIGURE2: dict[str, Any] = dict(eta=0.5, lipschitz=1.0, radius=1.0, sigma=1.5, n=100)
FIGURE2_RATES = (0.1, 0.2, 0.3)


def figure2(epsilons: np.ndarray | None = None, accountant: AccountantSpec | str = "rdp") -> dict:
    """The seed's Figure 2 setting: delta(eps) of the last iterate for q in {0.1, 0.2, 0.3}
    (eta = 0.5, L = 1, rho = 1, sigma = 1.5, n = 100), beside standard composition.

    Returns:
      ``{"epsilon": f64[E], "last_iterate": {q: f64[E]}, "standard": {q: f64[E]},
      "partition": {q: f64[E]}, "poisson": {q: f64[E]}}``: the last-iterate bound, the
      without-replacement RDP comparator, the exact every-iterate bound of the partition, and
      Poisson sampling's PLD.
    """
    epsilons = np.linspace(0.1, 5.0, 50) if epsilons is None else np.asarray(epsilons, float)
    result: dict = {"epsilon": epsilons, "last_iterate": {}, "standard": {}, "partition": {},
                    "poisson": {}}  # fmt: skip
    for q in FIGURE2_RATES:
        setting = LastIterateSetting(**FIGURE2, sampling_rate=q)
        result["last_iterate"][q] = last_iterate_delta(setting, epsilons)
        result["standard"][q] = np.array(
            [standard_composition_delta(setting, e, accountant) for e in epsilons]
        )
        result["partition"][q] = partition_delta(setting, epsilons)
        result["poisson"][q] = np.array([poisson_delta(setting, e) for e in epsilons])
    return result
