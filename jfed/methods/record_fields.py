"""Every record field classified by one mechanism, for every method, built-in or a user's
(docs/concepts/guarantee.md, "What a record releases beside the mechanism").

A field of a run's record is one of:

- :data:`INSIDE` the guarantee: a post-processing of the noised releases (the final model, its
  accuracy on held-out data outside the protected population);
- :data:`PUBLIC`: a function of the settings alone (every configuration field, the guarantee's
  statement, the noise it calibrated, the population's size, the method, the program, where and
  when it ran);
- :data:`OUTSIDE` it: an unnoised statistic of client data (clipped fractions, norms before
  clipping, realised cohort sizes, training accuracy, rounding fallbacks, personal models'
  accuracy, ...) or a side channel no guarantee here models (the wall-clock time);
- :data:`SECRET`: ``seed``, the simulation's run key, regenerates every noise draw of the run:
  published beside the outputs it would void the guarantee, which holds for a release whose
  noise seed is kept secret.

Who says which: a record's sections (:func:`jfed.sweep.schema.sections`) other than its
metrics are public, but for ``seed`` (secret) and ``run_seconds`` (outside); a metric is
classified by its method's declaration: the experiment's :attr:`~jfed.methods.Experiment.
record_fields` (a :class:`RecordFields`, merged along its class hierarchy) and the ``kind`` of
its declared :class:`~jfed.methods.Output` (the default ``evaluate`` keeps outputs under their
names), else an aggregator diagnostic known to be outside (:data:`jfed.privacy.NOT_PRIVATE`).
A private run's record lists its outside fields in ``not_private_fields`` and its secret ones
in ``secret_fields``; a metric nobody classified is listed in ``unclassified_fields`` and
counted outside (nothing says the guarantee covers it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

INSIDE = "inside"
PUBLIC = "public"
OUTSIDE = "outside"
SECRET = "secret"
KINDS = (INSIDE, PUBLIC, OUTSIDE, SECRET)

SECRET_FIELDS = ("seed",)
"""Configuration fields that regenerate the run's noise draws."""
OUTSIDE_RUN_FIELDS = ("run_seconds",)
"""Fields of the run section outside the guarantee: the wall-clock time (a side channel; a
sampler's rejection loops and the clients' work depend on the data)."""
LABELS = ("not_private_fields", "secret_fields", "unclassified_fields")
"""The fields that carry the classification (public themselves)."""


@dataclass(frozen=True)
class RecordFields:
    """A method's metrics by kind (its ``evaluate``'s field names).

    Attributes:
      inside: post-processing of the noised releases (or of public data).
      outside: unnoised statistics of client data, or of who took part.
      public: functions of the settings alone (e.g. the noise's scale per round).

    Example::

        record_fields = RecordFields(inside=("test_error",), outside=("train_error",))
    """

    inside: tuple[str, ...] = ()
    outside: tuple[str, ...] = ()
    public: tuple[str, ...] = ()

    def __or__(self, other: RecordFields) -> RecordFields:
        return RecordFields(self.inside + other.inside, self.outside + other.outside,
                            self.public + other.public)  # fmt: skip

    def kinds(self) -> dict[str, str]:
        """``{name: kind}``; ``ValueError`` for a name declared under two kinds."""
        found: dict[str, str] = {}
        for kind, names in ((INSIDE, self.inside), (OUTSIDE, self.outside),
                            (PUBLIC, self.public)):  # fmt: skip
            for name in names:
                if found.setdefault(name, kind) != kind:
                    raise ValueError(
                        f"record field {name!r} is declared both {found[name]} and {kind}"
                    )
        return found


def declared(classes: Iterable[type], outputs: Iterable = ()) -> RecordFields:
    """The record fields ``classes`` declare (each class's own ``record_fields``, in the order
    given) and the kinds of ``outputs`` (:class:`~jfed.methods.Output` with a ``kind``)."""
    merged = RecordFields()
    for cls in classes:
        own = vars(cls).get("record_fields")
        if isinstance(own, RecordFields):
            merged = merged | own
    for output in outputs:
        kind = getattr(output, "kind", None)
        if kind is not None:
            merged = merged | RecordFields(**{kind: (output.name,)})
    return merged


def kinds_of(sections: Mapping[str, Mapping], metrics: Mapping[str, str]) -> dict[str, str | None]:
    """The kind of every field of a record's ``sections``, its metrics by ``metrics`` (``{name:
    kind}``; ``None`` for a metric nobody classified)."""
    from jfed.privacy.aggregators import NOT_PRIVATE

    by_section = {
        "metrics": lambda name: metrics.get(name) or (OUTSIDE if name in NOT_PRIVATE else None),
        "configuration": lambda name: SECRET if name in SECRET_FIELDS else PUBLIC,
        "run": lambda name: OUTSIDE if name in OUTSIDE_RUN_FIELDS else PUBLIC,
    }
    kinds: dict[str, str | None] = {}
    for section, fields in sections.items():
        kind_of = by_section.get(section, lambda name: PUBLIC)
        for name in fields:
            kinds[name] = _stronger(kinds.get(name), kind_of(name))
    return kinds


_STRENGTH = {None: 0, PUBLIC: 1, INSIDE: 2, OUTSIDE: 3, SECRET: 4}


def _stronger(a: str | None, b: str | None) -> str | None:
    """The kind that says more of a field two sections state (the same value)."""
    return a if _STRENGTH[a] >= _STRENGTH[b] else b


def labels(kinds: Mapping[str, str | None], private: bool) -> dict:
    """The record's classification fields: a private run's ``not_private_fields`` (outside and
    unclassified) and ``secret_fields``; ``unclassified_fields`` where a metric has no kind."""
    unclassified = sorted(name for name, kind in kinds.items() if kind is None)
    fields: dict = {}
    if private:
        fields["not_private_fields"] = sorted(
            name for name, kind in kinds.items() if kind in (OUTSIDE, None)
        )
        fields["secret_fields"] = sorted(name for name, kind in kinds.items() if kind == SECRET)
    if unclassified:
        fields["unclassified_fields"] = unclassified
    return fields
