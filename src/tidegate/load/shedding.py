"""Load shedding at intake: which documents may wait in the quarantine, and when.

Under sustained overload — the pool cannot grow, the downstream cannot go faster —
the intake stops queueing documents that can wait (Stripe's and Google SRE's
criticality classes, applied to a port): they go to the durable quarantine with the
reason and are replayed once the surge clears. Nothing is dropped.

*What* may be shed is a policy of document classes; *when* is the queue's
:class:`~tidegate.load.watermarks.LoadState` (``shedding`` latches after
``shed_after`` consecutive samples above the HWM, so a brief spike never sheds).

Sheddable by default: ``BULK_BL_PDF`` (scanned bills of lading, bulk) and
``ARCHIVE_REPLAY`` (historical re-sends), which do not arrive as EDIFACT and are
defined here, plus every EDIFACT class the routing table marks sheddable (IFTSTA).
Never sheddable, whatever the configuration says: compliance-critical classes —
VERMAS (SOLAS VGM) and customs filings (CUSCAR, IFCSUM, anything routed to
``edi.customs``). Configuring one is a :class:`~tidegate.errors.ConfigurationError`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tidegate.edi.classify import DEFAULT_ROUTES, OTHER, DocumentClass
from tidegate.errors import ConfigurationError
from tidegate.load.watermarks import LoadState

__all__ = [
    "ARCHIVE_REPLAY",
    "BULK_BL_PDF",
    "BULK_QUEUE",
    "CUSTOMS_QUEUE",
    "DEFAULT_SHEDDABLE",
    "DOCUMENT_CLASSES",
    "ShedDecision",
    "SheddingPolicy",
    "document_class",
    "protected",
]

#: Where customs filings are queued; nothing routed here is ever shed.
CUSTOMS_QUEUE = "edi.customs"
#: The queue of the bulk, non-EDIFACT documents.
BULK_QUEUE = "bulk.documents"

#: A scanned or generated bill-of-lading PDF: bulky, informational, can wait.
BULK_BL_PDF = DocumentClass("BULK_BL_PDF", BULK_QUEUE, sheddable=True, critical=False)
#: A historical document re-sent from an archive: by definition not urgent.
ARCHIVE_REPLAY = DocumentClass("ARCHIVE_REPLAY", BULK_QUEUE, sheddable=True, critical=False)

#: Every known class by name: the EDIFACT routing table, OTHER, and the bulk classes.
DOCUMENT_CLASSES: Mapping[str, DocumentClass] = {
    **{route.document_class.name: route.document_class for route in DEFAULT_ROUTES},
    OTHER.name: OTHER,
    BULK_BL_PDF.name: BULK_BL_PDF,
    ARCHIVE_REPLAY.name: ARCHIVE_REPLAY,
}

#: The default sheddable set: the bulk classes and what the EDI table marks sheddable.
DEFAULT_SHEDDABLE: frozenset[str] = frozenset(
    name for name, cls in DOCUMENT_CLASSES.items() if cls.sheddable
)


def protected(cls: DocumentClass) -> bool:
    """Whether ``cls`` may never be shed: compliance-critical or a customs filing."""
    return cls.critical or cls.queue == CUSTOMS_QUEUE


def document_class(name: str) -> DocumentClass:
    """The class called ``name`` (see :data:`DOCUMENT_CLASSES`).

    Raises:
        ConfigurationError: no such class.
    """
    try:
        return DOCUMENT_CLASSES[name]
    except KeyError:
        raise ConfigurationError(
            f"unknown document class {name!r}; known: {sorted(DOCUMENT_CLASSES)}"
        ) from None


@dataclass(frozen=True, slots=True)
class ShedDecision:
    """Whether to quarantine one document instead of queueing it, and why."""

    shed: bool
    reason: str


@dataclass(frozen=True, slots=True)
class SheddingPolicy:
    """Which document classes the intake may quarantine under sustained overload.

    Args:
        sheddable: class names (default :data:`DEFAULT_SHEDDABLE`).
        classes: the known classes, to check names against (default
            :data:`DOCUMENT_CLASSES`; add your own classes here).

    Raises:
        ConfigurationError: a protected class (VERMAS, a customs filing, any class
            marked critical) or an unknown class name is configured.

    Example::

        SheddingPolicy(sheddable={"BULK_BL_PDF", "IFTSTA"})   # fine
        SheddingPolicy(sheddable={"VERMAS"})                  # ConfigurationError
    """

    sheddable: frozenset[str] = DEFAULT_SHEDDABLE
    classes: Mapping[str, DocumentClass] = field(default_factory=lambda: dict(DOCUMENT_CLASSES))

    def __post_init__(self) -> None:
        names = frozenset(self.sheddable)
        object.__setattr__(self, "sheddable", names)
        unknown = sorted(names - set(self.classes))
        if unknown:
            raise ConfigurationError(
                f"unknown document classes in the sheddable set: {', '.join(unknown)}"
            )
        forbidden = sorted(name for name in names if protected(self.classes[name]))
        if forbidden:
            raise ConfigurationError(
                "never sheddable (compliance-critical or customs filings): " + ", ".join(forbidden)
            )

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, *, extra: Iterable[DocumentClass] = ()
    ) -> SheddingPolicy:
        """The policy from ``TIDEGATE_SHEDDABLE_CLASSES`` (comma-separated names)."""
        source = os.environ if env is None else env
        classes = {**DOCUMENT_CLASSES, **{c.name: c for c in extra}}
        raw = source.get("TIDEGATE_SHEDDABLE_CLASSES", "").strip()
        if not raw:
            return cls(classes=classes)
        names = frozenset(part.strip() for part in raw.split(",") if part.strip())
        return cls(sheddable=names, classes=classes)

    def may_shed(self, cls: DocumentClass) -> bool:
        """Whether documents of ``cls`` may ever be quarantined under this policy."""
        return cls.name in self.sheddable and not protected(cls)

    def decide(self, cls: DocumentClass, state: LoadState | None) -> ShedDecision:
        """Quarantine a document of ``cls`` given its queue's load ``state``?

        A protected class is never shed, even if someone built a ``DocumentClass``
        that claims otherwise; no load state (nothing sampled yet) never sheds.
        """
        if protected(cls):
            return ShedDecision(False, "protected_class")
        if cls.name not in self.sheddable:
            return ShedDecision(False, "not_sheddable")
        if state is None or not state.shedding:
            return ShedDecision(False, "not_overloaded")
        return ShedDecision(True, "sustained_overload")
