"""The record of what a run certifies: never an eps without its notion and accountant."""

from __future__ import annotations

import enum
import math
from dataclasses import asdict, dataclass

IDEAL_MECHANISM = "ideal real-valued mechanism; floating-point sampling not modelled"
"""What a release on float noise certifies (its record's ``mechanism_model``, and appended to its
notion): the real-valued mechanism's guarantee, the float32 draws not modelled (their bounded
reach is a delta term of its own, :func:`jfed.privacy.reach_delta`)."""


class Adjacency(enum.Enum):
    """Which datasets are neighbours: what one protected unit's change is.

    - ``ADD_OR_REMOVE``: a unit joins or leaves (the natural adjacency of Poisson sampling);
    - ``REPLACE_ONE``: a unit's data is swapped for another's (fixed-size samples; a clipped sum
      then moves by up to twice the clip norm);
    - ``BOUNDED``: a release's sensitivity is stated as the distance between its outputs on any
      two neighbouring inputs, as for one client's message under local DP (the notion then names
      the neighbours itself);
    - ``ZERO_OUT``: a unit's data is replaced by zeros while it still takes part (distributed DP
      with secure aggregation: a client's update zeroed while its noise share is still sent, so
      the number of shares does not depend on the protected data). Its sensitivities read as
      add-or-remove ones: a clipped sum moves by at most the clip norm.

    The values are the names records and the command line use.
    """

    ADD_OR_REMOVE = "add-or-remove"
    REPLACE_ONE = "replace-one"
    BOUNDED = "bounded"
    ZERO_OUT = "zero-out"

    @classmethod
    def of(cls, value: Adjacency | str) -> Adjacency:
        """``value`` as an adjacency; ``ValueError`` listing the names."""
        if isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            names = [a.value for a in cls]
            raise ValueError(f"unknown adjacency {value!r}; expected one of {names}") from None

    def states(self, notion: str) -> str:
        """``notion`` as a guarantee states it: a central adjacency is appended (``"central
        (eps, delta)-DP, add-or-remove adjacency"``); a bounded one is the notion's own."""
        return notion if self is Adjacency.BOUNDED else f"{notion}, {self.value} adjacency"


@dataclass(frozen=True)
class PrivacyGuarantee:
    """A differential-privacy guarantee as it is reported.

    Attributes:
      epsilon: eps of the (eps, delta)-DP statement (``inf`` for a non-private run).
      delta: delta of the statement (0 for a non-private run).
      accountant: how eps was obtained, e.g. ``"zcdp"``.
      notion: the DP notion, e.g. ``"local (eps, delta)-DP"``.
      protected: what one adjacency changes, e.g. ``"one client's feature vector x_i"``.
      trust_model: who sees what, e.g. ``"untrusted server; each client randomizes"``.
      rho: total zCDP rho when the accountant is zCDP, else ``None``.
      adjacency: the neighbouring relation the eps holds for (``None`` where the notion states
        it in words, e.g. a non-private run).
    """

    epsilon: float
    delta: float
    accountant: str
    notion: str
    protected: str
    trust_model: str
    rho: float | None = None
    adjacency: Adjacency | None = None

    @classmethod
    def non_private(cls, protected: str = "nothing") -> PrivacyGuarantee:
        """The guarantee of a run that adds no noise: none."""
        return cls(
            epsilon=math.inf,
            delta=0.0,
            accountant="none",
            notion="none (non-private)",
            protected=protected,
            trust_model="trusted server sees raw data",
        )

    def describe(self) -> str:
        """One line for humans, e.g. ``(eps=1, delta=1e-05) local DP [zcdp] protecting ...``."""
        if math.isinf(self.epsilon):
            return "non-private (no DP guarantee)"
        return (
            f"(eps={self.epsilon:.4g}, delta={self.delta:.3g}) {self.notion} "
            f"[accountant: {self.accountant}] protecting {self.protected}"
        )

    def record_fields(self, sigma: float | None = None) -> dict:
        """The privacy section of a record (a run's, a sweep row's, ``jfed account``'s): the
        certified ``epsilon_certified``, ``delta``, ``accountant``, ``notion``, ``protected``,
        ``trust_model``, the ``adjacency`` by its name where the guarantee states one, and the
        noise std ``sigma`` of one release where the caller has one."""
        fields: dict = {
            "epsilon_certified": self.epsilon,
            "delta": self.delta,
            "accountant": self.accountant,
            "notion": self.notion,
            "protected": self.protected,
            "trust_model": self.trust_model,
        }
        if self.adjacency is not None:
            fields["adjacency"] = self.adjacency.value
        return fields if sigma is None else {**fields, "sigma": float(sigma)}

    def to_dict(self) -> dict:
        """JSON-ready fields (the adjacency by its name)."""
        fields = asdict(self)
        fields["adjacency"] = None if self.adjacency is None else self.adjacency.value
        return fields
