"""One privacy plan for every method: the privacy-carrying parameters, the noise calibrated for
them, the event the run emits and the guarantee an accountant certifies for that event, built
together so they cannot drift apart (as jax_privacy's plans bundle clipping, noise and
accounting). The traced hyper-parameters come from :meth:`PrivacyPlan.hyperparams`, which takes
only what does not change privacy."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from jfed._validation import check_int_range, check_open_unit, check_positive
from jfed.privacy.guarantee import Adjacency, PrivacyGuarantee

if TYPE_CHECKING:
    from jfed.privacy.accounting import AccountantSpec


@dataclass(frozen=True)
class PrivacyPlan:
    """What a run releases and what it certifies.

    Attributes:
      noise_std: the noise scale per coordinate per release (the Gaussian's sigma; a Laplace
        randomizer's b).
      sensitivity: the sensitivity of one release, in the norm its noise is calibrated in (L2
        for Gaussian noise, L1 for Laplace noise).
      rounds: releases per protected unit.
      release: noise multiplier -> the ``DpEvent`` of one release (``event`` composes them).
      guarantee: what the accountant certifies for ``event``.
      parameters: the privacy-carrying parameters the hyper-parameters are built from (e.g.
        ``clip_norm``), readable as attributes (``plan.clip_norm``).
      build: ``build(noise_std=..., **parameters, **server) -> hyperparams`` of the algorithm.
    """

    noise_std: float
    sensitivity: float
    rounds: int
    release: Callable[[float], Any]
    guarantee: PrivacyGuarantee
    parameters: Mapping[str, Any] = field(default_factory=dict)
    build: Callable[..., Any] | None = None

    @property
    def event(self) -> Any:
        """The ``DpEvent`` of everything the run releases: ``rounds`` releases of
        ``release(noise_std / sensitivity)`` (built on demand: dp-accounting loads in a second,
        and a closed-form accountant does not need it)."""
        from dp_accounting import SelfComposedDpEvent

        one = self.release(self.noise_std / self.sensitivity)
        return one if self.rounds == 1 else SelfComposedDpEvent(one, self.rounds)

    def __getattr__(self, name: str) -> Any:
        parameters = self.__dict__.get("parameters", {})
        if name in parameters:
            return parameters[name]
        raise AttributeError(f"{type(self).__name__} has no {name!r}")

    def hyperparams(self, **server: Any) -> Any:
        """The traced hyper-parameters: the plan's noise and parameters, and ``server`` (what
        does not change privacy). Passing a privacy-carrying field again is a ``TypeError``."""
        if self.build is None:
            raise TypeError("this plan was built without a hyper-parameter builder")
        again = sorted(set(server) & ({"noise_std"} | set(self.parameters)))
        if again:
            raise TypeError(f"{again} come from the privacy plan; they cannot be passed again")
        return self.build(noise_std=self.noise_std, **self.parameters, **server)


def rounds_plan(
    sensitivity: float,
    epsilon: float,
    delta: float,
    rounds: int,
    *,
    accountant: AccountantSpec,
    notion: str,
    protected: str,
    trust_model: str,
    randomizer: Any = None,
    adjacency: Adjacency | str = Adjacency.BOUNDED,
    parameters: Mapping[str, Any] | None = None,
    build: Callable[..., Any] | None = None,
) -> PrivacyPlan:
    """Calibrate ``rounds`` releases of a randomizer (every protected unit in every round) to
    (eps, delta), and certify the event they emit through the same accountant.

    Args:
      sensitivity: the sensitivity of one release in the randomizer's norm (> 0).
      epsilon, delta: the target of the whole run.
      rounds: releases per unit, R >= 1.
      accountant: :class:`~jfed.privacy.Zcdp`, :class:`~jfed.privacy.Pld`, ...
      notion, protected, trust_model, adjacency: the guarantee's statement
        (:func:`~jfed.privacy.certify`).
      randomizer: a :class:`~jfed.privacy.NoiseRandomizer` (default
        :class:`~jfed.privacy.GaussianNoise`); its ``rounds_noise`` calibrates where it has one
        (the Gaussian's: the accountant's closed form), else the noise multiplier is searched
        through ``accountant`` on the randomizer's own event.
      parameters, build: see :class:`PrivacyPlan`.
    """
    from jfed.privacy.accounting import calibrate, certify
    from jfed.privacy.privatizers import GaussianNoise

    randomizer = GaussianNoise() if randomizer is None else randomizer
    sensitivity = check_positive("sensitivity", sensitivity)
    epsilon = check_positive("epsilon", epsilon)
    delta = check_open_unit("delta", delta)
    rounds = check_int_range("rounds", rounds, 1, 10**9)
    statement: dict[str, Any] = dict(accountant=accountant, adjacency=adjacency, notion=notion,
                     protected=protected, trust_model=trust_model)  # fmt: skip
    plan = PrivacyPlan(0.0, sensitivity, rounds, randomizer.dp_event, None,  # type: ignore[arg-type]
                       dict(parameters or {}), build)  # fmt: skip
    if hasattr(randomizer, "rounds_noise"):
        noise_std = float(randomizer.rounds_noise(accountant, sensitivity, epsilon, delta, rounds))
    else:
        multiplier = calibrate(lambda z: replace(plan, noise_std=z * sensitivity).event, epsilon,
                               delta, accountant=accountant, adjacency=adjacency)  # fmt: skip
        noise_std = multiplier * sensitivity
    plan = replace(plan, noise_std=noise_std)
    return replace(plan, guarantee=certify(plan.event, delta, **statement))
