"""The walk every jfed accountant shares, apart so that accountants of other modules (the
discrete mechanisms') build on it without an import cycle: :class:`Walker` and the neighbouring
relation each :class:`~jfed.privacy.Adjacency` composes under."""

from __future__ import annotations

import math

import dp_accounting
from dp_accounting import dp_event as events
from dp_accounting.privacy_accountant import NeighboringRelation

from jfed.privacy.guarantee import Adjacency

NEIGHBORING = {
    Adjacency.ADD_OR_REMOVE: NeighboringRelation.ADD_OR_REMOVE_ONE,
    Adjacency.REPLACE_ONE: NeighboringRelation.REPLACE_ONE,
    # "bounded" states a release's sensitivity as the distance between its outputs on any two
    # neighbouring inputs (one client's message under local DP), which is how add-or-remove
    # reads GaussianDpEvent(z)
    Adjacency.BOUNDED: NeighboringRelation.ADD_OR_REMOVE_ONE,
    # zero-out: a unit's contribution replaced by zeros moves a clipped sum by at most the clip
    # norm, as adding or removing it does (the distributed sums' events are stated so)
    Adjacency.ZERO_OUT: NeighboringRelation.ADD_OR_REMOVE_ONE,
}


class Walker(dp_accounting.PrivacyAccountant):
    """Base of jfed's accountants: composed, self-composed, no-op and non-private events are
    walked here; each leaf goes to :meth:`_leaf`, which returns why it cannot compose it (or
    ``None`` when it can, composing it when ``do_compose``)."""

    def __init__(self, adjacency: Adjacency = Adjacency.ADD_OR_REMOVE) -> None:
        super().__init__(NEIGHBORING[Adjacency(adjacency)])
        self.adjacency = Adjacency(adjacency)
        self.non_private = False

    def _maybe_compose(self, event, count, do_compose):
        if isinstance(event, events.NoOpDpEvent):
            return None
        if isinstance(event, events.NonPrivateDpEvent):
            if do_compose:
                self.non_private = True
            return None
        if isinstance(event, events.SelfComposedDpEvent):
            return self._maybe_compose(event.event, event.count * count, do_compose)
        if isinstance(event, events.ComposedDpEvent):
            for inner in event.events:
                error = self._maybe_compose(inner, count, do_compose)
                if error is not None:
                    return error
            return None
        reason = self._leaf(event, count, do_compose)
        return None if reason is None else self.CompositionErrorDetails(event, reason)

    def _leaf(self, event: events.DpEvent, count: int, do_compose: bool) -> str | None:
        raise NotImplementedError

    def get_epsilon(self, target_delta: float) -> float:
        return math.inf if self.non_private else self._epsilon(target_delta)

    def get_delta(self, target_epsilon: float) -> float:
        return 1.0 if self.non_private else self._delta(target_epsilon)

    def _epsilon(self, delta: float) -> float:
        raise NotImplementedError

    def _delta(self, epsilon: float) -> float:
        raise ValueError(f"the {type(self).__name__} accountant answers eps for a delta only")
