"""User-level central DP for the federated methods built on DP-FedAvg's populations
(:class:`PrivateTraining`), shared by DP-SCAFFOLD, DP-Ditto, DP-FTRL and BLT-DP-FTRL. Every
configuration there subclasses :class:`~jfed.methods.declared.dp_fedavg.FederatedTraining`, so
the data flags (``--dataset``, ``--clients``, ``--dirichlet``, ``--records``, ...), the model and
the local training are DP-FedAvg's, and one sweep runs them beside ``dp-fedavg`` on the same
data."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Self

from jfed import catalog
from jfed.methods.cost import FLOAT32, Cost, CostPlan
from jfed.methods.declared.dp_fedavg import (
    POPULATIONS,
    ROLES,
    FederatedTraining,
    _model_shape,
    audit_canaries_param,
    check_central_privacy,
    check_noise,
    federated_cost,
    grid_accountant_param,
)
from jfed.methods.fields import EPSILON, OPEN_UNIT, POSITIVE, param


@dataclass(frozen=True)
class PrivateTraining(FederatedTraining):
    """A federated population trained with user-level central DP: eps, delta, the accountant,
    the clip norm of a client's update, and the canaries of an audit of the run."""

    epsilon: float = param(2.0, "target user-level eps of the whole run", range=EPSILON,
                           group="privacy")  # fmt: skip
    delta: float | None = param(None, "target delta of the whole run", kind=float,
                                range=OPEN_UNIT, default_text="1 / N^1.1",
                                group="privacy")  # fmt: skip
    accountant: str | None = param(
        None, "accountant that calibrates the noise (pld: add-or-remove; rdp: either cohort, "
        "the only one for uniform cohorts, replace-one)", kind=str,
        choices=catalog.COHORT_ACCOUNTANTS, default_text="pld for poisson and schedules, rdp "
        "for uniform", group="privacy",
    )  # fmt: skip
    update_clip: float = param(1.0, "clip norm C of a client's update (adaptive: C_0)",
                               unit="update norm", range=POSITIVE, tunable=True)  # fmt: skip

    audit_canaries: int = audit_canaries_param()

    def check(self) -> Self:
        check_central_privacy(self)
        return super().check()


CENTRAL_NOISES = ("discrete", "float")
"""``--noise`` where a trusted server noises the releases: discrete (the default: exact discrete
Gaussian on an integer grid) or float (float32 Gaussian: the ideal real-valued mechanism)."""


@dataclass(frozen=True)
class GridTraining(PrivateTraining):
    """:class:`PrivateTraining` whose releases may go on DP-FedAvg's integer grid (``--noise
    discrete``, the default, certified through its coupled Gaussian by PLD) or stay float32
    (``--noise float``), with DP-FedAvg's refusals of the pairs that do not fit."""

    accountant: str | None = grid_accountant_param()
    noise: str = param(
        "discrete", "the noise on every release: discrete (exact discrete Gaussian on an integer "
        "grid, added by a trusted server) or float (float32 Gaussian: the ideal real-valued "
        "mechanism, floating-point sampling not modelled)", choices=CENTRAL_NOISES,
        group="privacy",
    )  # fmt: skip

    def check(self) -> Self:
        checked = super().check()
        check_noise(self)
        return checked


def with_client_state(models_per_client: int) -> Callable[[FederatedTraining, CostPlan], Cost]:
    """The cost hook of a method that keeps ``models_per_client`` model-sized arrays per client
    (SCAFFOLD's control variate, Ditto's personal model): DP-FedAvg's round
    (:func:`~jfed.methods.declared.dp_fedavg.federated_cost`) plus the engine's table of every
    client's state (``N x models_per_client x parameters`` float32: on the device unless the
    plan keeps it in host memory or on disk) and, per round, the cohort's rows gathered and
    written back."""

    def cost(config: FederatedTraining, plan: CostPlan) -> Cost:
        base = federated_cost(config, plan)
        _, record, classes = POPULATIONS.get(config.dataset, (None, 784, 100))
        parameters, _ = _model_shape(config, record, classes)
        clients = ROLES if config.dataset == "shakespeare" else config.clients
        table = FLOAT32 * models_per_client * parameters * clients
        rows = 2 * FLOAT32 * models_per_client * parameters * min(clients, config.cohort_size)
        work = 2 * models_per_client * parameters * config.cohort_size * config.rounds
        on_device = table if plan.table_on_device else 0
        return dataclasses.replace(base, memory=base.memory + on_device + rows,
                                   work=base.work + work, sizes=("clients", *base.sizes),
                                   client_table=table,
                                   table_on_device=plan.table_on_device)  # fmt: skip

    return cost
