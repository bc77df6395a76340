"""The record of what a run certifies: never an eps without its notion and accountant."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


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
    """

    epsilon: float
    delta: float
    accountant: str
    notion: str
    protected: str
    trust_model: str
    rho: float | None = None

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

    @classmethod
    def local(
        cls,
        epsilon: float,
        delta: float,
        accountant: str,
        protected: str,
        trust_model: str,
        rho: float | None = None,
    ) -> PrivacyGuarantee:
        """A local-DP guarantee (each client randomizes its own message)."""
        notion = "local (eps, delta)-DP" + (" via zCDP" if accountant == "zcdp" else "")
        return cls(float(epsilon), float(delta), accountant, notion, protected, trust_model, rho)

    def describe(self) -> str:
        """One line for humans, e.g. ``(eps=1, delta=1e-05) local DP [zcdp] protecting ...``."""
        if math.isinf(self.epsilon):
            return "non-private (no DP guarantee)"
        return (
            f"(eps={self.epsilon:.4g}, delta={self.delta:.3g}) {self.notion} "
            f"[accountant: {self.accountant}] protecting {self.protected}"
        )

    def to_dict(self) -> dict:
        """JSON-ready fields."""
        return asdict(self)
