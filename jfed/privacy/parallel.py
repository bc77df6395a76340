"""Runs whose releases are parallel over disjoint parts of the data, composed part by part.

A release on disjoint data (:class:`~jfed.privacy.ParallelDpEvent`: each protected unit lies in
one branch, e.g. each record in one silo) repeated R times on the same data touches every unit
in the same branch each time. R rounds of it are therefore the parallel composition of each
branch's own R-fold composition::

    SelfComposed(Parallel(b_1, ..., b_N), R)
        = Parallel(SelfComposed(b_1, R), ..., SelfComposed(b_N, R))

which every accountant composes (:func:`jfed.privacy.certify` takes the worst branch of a
top-level parallel event), while the left side would need an accountant that knows parallel
events inside a composition. Identical branches (silos of one size and one noise) are one branch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jfed.privacy.accounting import rounds_of

if TYPE_CHECKING:
    import dp_accounting


def branches(event: dp_accounting.DpEvent) -> tuple[dp_accounting.DpEvent, ...]:
    """Every branch's own composed event of ``event``: a ``ParallelDpEvent`` or R rounds of
    one (``SelfComposedDpEvent``), in the branches' order; any other event is one branch."""
    from dp_accounting import dp_event as events

    from jfed.privacy.accountants import ParallelDpEvent

    if isinstance(event, ParallelDpEvent):
        return tuple(event.branches)
    if isinstance(event, events.SelfComposedDpEvent) and isinstance(event.event, ParallelDpEvent):
        return tuple(rounds_of(branch, event.count) for branch in event.event.branches)
    return (event,)


def per_branch(event: dp_accounting.DpEvent) -> dp_accounting.DpEvent:
    """``event`` composed branch by branch (see the module docstring): a ``ParallelDpEvent`` of
    the distinct :func:`branches`, or the one branch itself."""
    from jfed.privacy.accountants import ParallelDpEvent

    distinct = tuple(dict.fromkeys(branches(event)))
    return distinct[0] if len(distinct) == 1 else ParallelDpEvent(distinct)
