"""The routing table: which document class a message is, hence its queue and shedding.

Everything downstream of the intake (which queue, whether overload may shed it,
whether it is split per B/L) follows from the one table :data:`DEFAULT_ROUTES`. The
decisions it encodes:

* **VERMAS** (verified gross mass, SOLAS VI/2) and customs filings (**CUSCAR**, and
  **IFCSUM** consolidated manifests, which are lodged with customs per B/L after the
  split) are *compliance-critical* and never sheddable: dropping one can stop a box
  from being loaded or draw a penalty. VERMAS and CUSCAR go to ``edi.customs``;
  IFCSUM goes to ``bulk.dispatch`` first, where it is split into B/L units.
* **COARRI**, **CODECO**, **BAPLIE** and **IFTMIN** are pushes to and from the
  terminal operating system (``edi.tos``). They are not sheddable either: a lost
  discharge/load confirmation, gate move, stowage plan or instruction leaves the TOS
  wrong until someone notices, and none of them is superseded by a later message.
* **IFTSTA** (status report) is the one sheddable class here: it is informational, a
  later status supersedes it, and shedding quarantines it for replay rather than
  dropping it. It goes to ``edi.tos`` with the other terminal messages.
* Anything else, and a UNH with no type at all, is class **OTHER** on
  ``edi.unrouted`` with a reason. It is *not* sheddable: a document nobody recognised
  has not been shown to be low-value, so it waits for a human instead.

The project-wide sheddable classes ``BULK_BL_PDF`` and ``ARCHIVE_REPLAY`` do not
arrive as EDIFACT, so they are not in this table.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidegate.edi.envelope import MessageIdentifier
from tidegate.edi.findings import FindingCode

__all__ = [
    "BAPLIE",
    "COARRI",
    "CODECO",
    "CUSCAR",
    "DEFAULT_ROUTES",
    "IFCSUM",
    "IFTMIN",
    "IFTSTA",
    "OTHER",
    "UNROUTED_QUEUE",
    "VERMAS",
    "Classification",
    "DocumentClass",
    "Route",
    "classify",
]

#: Where messages of unknown or empty type go, to be looked at by a person.
UNROUTED_QUEUE = "edi.unrouted"


@dataclass(frozen=True, slots=True)
class DocumentClass:
    """What tidegate does with a kind of document.

    Args:
        name: class name, used in metrics and quarantine keys.
        queue: the queue its units are routed to.
        sheddable: whether load shedding may quarantine it under overload.
        critical: compliance-critical (customs, SOLAS); never sheddable.
        split: carved into one unit per Bill of Lading before routing.
    """

    name: str
    queue: str
    sheddable: bool
    critical: bool
    split: bool = False

    def __post_init__(self) -> None:
        if self.critical and self.sheddable:
            raise ValueError(f"document class {self.name} cannot be critical and sheddable")


IFCSUM = DocumentClass("IFCSUM", "bulk.dispatch", sheddable=False, critical=True, split=True)
VERMAS = DocumentClass("VERMAS", "edi.customs", sheddable=False, critical=True)
CUSCAR = DocumentClass("CUSCAR", "edi.customs", sheddable=False, critical=True)
COARRI = DocumentClass("COARRI", "edi.tos", sheddable=False, critical=False)
CODECO = DocumentClass("CODECO", "edi.tos", sheddable=False, critical=False)
BAPLIE = DocumentClass("BAPLIE", "edi.tos", sheddable=False, critical=False)
IFTMIN = DocumentClass("IFTMIN", "edi.tos", sheddable=False, critical=False)
IFTSTA = DocumentClass("IFTSTA", "edi.tos", sheddable=True, critical=False)
OTHER = DocumentClass("OTHER", UNROUTED_QUEUE, sheddable=False, critical=False)


@dataclass(frozen=True, slots=True)
class Route:
    """One row of the routing table.

    Args:
        message_type: UNH message type it applies to.
        document_class: the class it assigns.
        release: only for this directory release (``"96A"``); ``None`` for any.
        association: only for this association code (``"SMDG20"``); ``None`` for any.

    The most specific matching row wins, so a partner's variant can be routed
    differently by adding a row with its association code.
    """

    message_type: str
    document_class: DocumentClass
    release: str | None = None
    association: str | None = None

    def matches(self, identifier: MessageIdentifier) -> bool:
        """Whether this row applies to ``identifier``."""
        return (
            self.message_type == identifier.type
            and (self.release is None or self.release == identifier.release)
            and (self.association is None or self.association == identifier.association)
        )

    @property
    def specificity(self) -> int:
        """How many optional conditions the row has; more wins."""
        return (self.release is not None) + (self.association is not None)


#: The one routing table; see the module docstring for why each row is what it is.
DEFAULT_ROUTES: tuple[Route, ...] = tuple(
    Route(document_class.name, document_class)
    for document_class in (IFCSUM, VERMAS, CUSCAR, COARRI, CODECO, BAPLIE, IFTMIN, IFTSTA)
)


@dataclass(frozen=True, slots=True)
class Classification:
    """The class of one message and why.

    Args:
        document_class: the class, :data:`OTHER` when no row matched.
        reason: for an operator: which row matched, or why none did.
        finding_code: set when the classification itself is worth a finding (an empty
            or unknown message type).
    """

    document_class: DocumentClass
    reason: str
    finding_code: FindingCode | None = None

    @property
    def queue(self) -> str:
        """The queue the message (or its units) goes to."""
        return self.document_class.queue

    @property
    def sheddable(self) -> bool:
        """Whether load shedding may quarantine it."""
        return self.document_class.sheddable


def classify(
    identifier: MessageIdentifier, *, routes: tuple[Route, ...] = DEFAULT_ROUTES
) -> Classification:
    """Classify a message by its UNH identifier.

    Never raises: an empty or unknown type is class :data:`OTHER` with a reason.

    Example:
        >>> classify(MessageIdentifier("VERMAS", "D", "16A", "UN")).queue
        'edi.customs'
        >>> classify(MessageIdentifier("")).reason
        'UNH carries no message type'
    """
    if not identifier.type:
        return Classification(OTHER, "UNH carries no message type", FindingCode.EMPTY_MESSAGE_TYPE)
    candidates = [route for route in routes if route.matches(identifier)]
    if not candidates:
        return Classification(
            OTHER,
            f"message type {identifier.type[:12]!r} has no route",
            FindingCode.UNKNOWN_MESSAGE_TYPE,
        )
    best = max(candidates, key=lambda route: route.specificity)
    detail = [
        f"{name} {value}"
        for name, value in (("release", best.release), ("association", best.association))
        if value is not None
    ]
    suffix = f" ({', '.join(detail)})" if detail else ""
    return Classification(
        best.document_class, f"UNH type {identifier.type}{suffix}", finding_code=None
    )
