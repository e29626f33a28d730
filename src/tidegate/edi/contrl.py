"""Write CONTRL syntax and service reports (ISO 9735 syntax versions 1 to 4).

A CONTRL tells the sender of an interchange what became of it: the UCI answers for
the interchange as a whole (action ``8`` received, ``7`` acknowledged with some
lower level rejected, ``4`` rejected), one UCM per message answers for that message
(``7`` acknowledged, ``4`` rejected), and UCS/UCD pairs point at the failing segment
(its position in the message body, UNH = 1) and data element, each with a standard
syntax error code (:class:`SyntaxErrorCode`). Service segment errors (UNT, UNZ) are
reported on the UCM or UCI itself, in elements 0013 and S011, as the standard asks.

The writer is pure: the caller says what to report and passes the clock's reading,
so the same report always gives the same text. The reply travels back under the
sender's own service characters (its UNA is repeated when it is not the default),
with sender and recipient swapped, so the sender's EDI software reads it with the
settings it already has for that partner.

Syntax versions 1 and 2 — what most interchanges in the wild still declare (``UNOA:2``,
``UNOB:1``) — are answered in the sender's own version: our UNB repeats its syntax
identifier and version, with the six-digit date of versions 1 to 3. The UCI/UCM/UCS/UCD
structure is the same as for version 3. The message identifier is ``CONTRL:2:2:UN``, the
one tidegate already writes for version 3. The choice, after the standard's notes:

* the 1997 UN/EDIFACT CONTRL ``D:3`` says of itself that it "can be used for version 1,
  2, or 3 of the EDIFACT syntax" — so ``D:3`` would have been admissible too;
* the code list of 0052 says that for the earlier, stand-alone UN CONTRL messages the
  version to use is the one in that message's documentation: ``2:2`` is that earlier
  CONTRL (EANCOM 1997 writes ``CONTRL:2:2:UN:EAN002``);
* a sender still on syntax version 1 or 2 runs software that predates ``D:3`` more
  often than not, and an older reader that knows ``2:2`` fails on an unknown release,
  while a newer one reads the (identical) segments of ``2:2``.

So versions 1, 2 and 3 all get ``2:2``, version 4 gets ``4:1`` (ISO 9735-4). A partner
that wants ``D:3`` is a per-partner setting this module does not have yet.

Never answer a CONTRL with a CONTRL: a sender acknowledging our acknowledgement would
otherwise start an endless exchange. :func:`is_contrl` is the test the caller applies.

Example:
    >>> from datetime import UTC, datetime
    >>> report = InterchangeReport(
    ...     control_reference="42", sender="ACME", recipient="PORT",
    ...     syntax_identifier="UNOA", syntax_version="3", action=ContrlAction.RECEIVED,
    ... )
    >>> print(write_contrl(report, reference="7", now=datetime(2026, 1, 2, 3, 4, tzinfo=UTC)))
    UNB+UNOA:3+PORT+ACME+260102:0304+7'UNH+1+CONTRL:2:2:UN'UCI+42+ACME+PORT+8'UNT+3+1'UNZ+1+7'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import IntEnum

from tidegate.edi.envelope import MessageIdentifier
from tidegate.edi.syntax import DEFAULT_DELIMITERS, Delimiters, escape
from tidegate.errors import ConfigurationError

__all__ = [
    "CONTRL",
    "SUPPORTED_SYNTAX_VERSIONS",
    "ContrlAction",
    "ErrorReport",
    "InterchangeReport",
    "MessageReport",
    "SyntaxErrorCode",
    "is_contrl",
    "write_contrl",
]

#: The message type of a syntax and service report.
CONTRL = "CONTRL"
#: Syntax versions a CONTRL can be written for.
SUPPORTED_SYNTAX_VERSIONS = frozenset({"1", "2", "3", "4"})

#: S009 of the CONTRL message itself, per syntax version: the UN CONTRL 2.2 for
#: versions 1 to 3 (see the module docstring for why not D.3), CONTRL 4.1 for
#: version 4 (ISO 9735-4).
_IDENTIFIER = {"1": ("2", "2"), "2": ("2", "2"), "3": ("2", "2"), "4": ("4", "1")}


class ContrlAction(IntEnum):
    """Action, coded (data element 0083): what the CONTRL says became of a level."""

    REJECTED = 4
    ACKNOWLEDGED = 7
    RECEIVED = 8


class SyntaxErrorCode(IntEnum):
    """Syntax error, coded (data element 0085): the codes tidegate reports."""

    SYNTAX_VERSION_NOT_SUPPORTED = 2
    INVALID_VALUE = 12
    MISSING = 13
    NOT_SUPPORTED_IN_POSITION = 15
    UNSPECIFIED = 18
    INVALID_CHARACTERS = 21
    DUPLICATE_DETECTED = 26
    REFERENCES_DO_NOT_MATCH = 28
    CONTROL_COUNT_DOES_NOT_MATCH = 29
    LOWER_LEVEL_EMPTY = 32
    INVALID_OCCURRENCE_OUTSIDE_MESSAGE = 33


@dataclass(frozen=True, slots=True)
class ErrorReport:
    """One error, located as precisely as it is known.

    Args:
        code: the syntax error code.
        segment_position: position of the failing data segment in the message body,
            UNH = 1 (a UCS); ``None`` for an error in a service segment or with no
            segment to name.
        service_segment: tag of the failing service segment (``"UNT"``, ``"UNZ"``),
            reported in 0013 of the UCM or UCI instead of a UCS.
        element: 1-based position of the failing data element in its segment
            (0098), when known.
        component: 1-based position of the failing component in that element (0104).
    """

    code: SyntaxErrorCode
    segment_position: int | None = None
    service_segment: str | None = None
    element: int | None = None
    component: int | None = None


@dataclass(frozen=True, slots=True)
class MessageReport:
    """What becomes of one message: a UCM, then a UCS (and UCD) per data segment error.

    Args:
        reference: the message's UNH reference (0062).
        identifier: its message identifier (S009).
        action: acknowledged or rejected.
        errors: the errors to report; a service segment error (UNT) goes on the UCM,
            the first one only, and the data segment errors each get a UCS.
    """

    reference: str
    identifier: MessageIdentifier
    action: ContrlAction
    errors: tuple[ErrorReport, ...] = ()


@dataclass(frozen=True, slots=True)
class InterchangeReport:
    """What becomes of one interchange: the UCI and the UCMs under it.

    Args:
        control_reference: the interchange's UNB control reference (0020).
        sender / sender_qualifier: its UNB sender (S002), the CONTRL's recipient.
        recipient / recipient_qualifier: its UNB recipient (S003), the CONTRL's sender.
        syntax_identifier: its syntax identifier (``"UNOC"``), repeated in our UNB.
        syntax_version: ``"1"`` to ``"4"``.
        delimiters: its service characters; the CONTRL is written with them.
        action: the UCI action.
        error: an interchange-level error (duplicate, UNZ mismatch), on the UCI.
        messages: one report per message.
    """

    control_reference: str
    sender: str
    recipient: str
    syntax_identifier: str
    syntax_version: str
    action: ContrlAction
    sender_qualifier: str = ""
    recipient_qualifier: str = ""
    delimiters: Delimiters = DEFAULT_DELIMITERS
    error: ErrorReport | None = None
    messages: tuple[MessageReport, ...] = ()


def is_contrl(identifier: MessageIdentifier) -> bool:
    """Whether a message is itself a CONTRL (which is never answered)."""
    return identifier.type.upper() == CONTRL


class _Writer:
    """Joins components, elements and segments under one set of delimiters."""

    def __init__(self, delimiters: Delimiters) -> None:
        self.delimiters = delimiters
        self.segments: list[str] = []

    def element(self, *components: str | int | None) -> str:
        parts = ["" if c is None else escape(str(c), self.delimiters) for c in components]
        while parts and not parts[-1]:
            parts.pop()
        return self.delimiters.component.join(parts)

    def segment(self, tag: str, *elements: str) -> None:
        parts = [tag, *elements]
        while len(parts) > 1 and not parts[-1]:
            parts.pop()
        self.segments.append(self.delimiters.element.join(parts))


def _location(writer: _Writer, error: ErrorReport | None) -> tuple[str, str, str]:
    """0085, 0013 and S011 of a UCI or UCM for ``error`` (empty when there is none)."""
    if error is None:
        return "", "", ""
    return (
        writer.element(int(error.code)),
        writer.element(error.service_segment),
        writer.element(error.element, error.component),
    )


def _message(writer: _Writer, report: MessageReport) -> None:
    service = next((e for e in report.errors if e.segment_position is None), None)
    ident = report.identifier
    writer.segment(
        "UCM",
        writer.element(report.reference),
        writer.element(ident.type, ident.version, ident.release, ident.agency, ident.association),
        writer.element(int(report.action)),
        *_location(writer, service),
    )
    for error in report.errors:
        if error.segment_position is None:
            continue
        writer.segment(
            "UCS", writer.element(error.segment_position), writer.element(int(error.code))
        )
        if error.element is not None:
            writer.segment(
                "UCD",
                writer.element(int(error.code)),
                writer.element(error.element, error.component),
            )


def write_contrl(report: InterchangeReport, *, reference: str, now: datetime) -> str:
    """The CONTRL interchange answering ``report``'s interchange.

    Args:
        report: what to acknowledge or reject.
        reference: the CONTRL interchange's own control reference (0020), at most 14
            characters; its message reference is ``1``.
        now: the preparation date and time written in the UNB.

    Raises:
        ConfigurationError: an unsupported syntax version, or a reference that is
            empty or longer than 14 characters.
    """
    version = report.syntax_version
    if version not in SUPPORTED_SYNTAX_VERSIONS:
        raise ConfigurationError(
            f"CONTRL is written for syntax versions 1 to 4, not {version[:8]!r}"
        )
    if not 1 <= len(reference) <= 14:
        raise ConfigurationError("a CONTRL control reference has 1 to 14 characters")
    delimiters = report.delimiters
    writer = _Writer(delimiters)
    stamp = now.strftime("%Y%m%d" if version == "4" else "%y%m%d")
    writer.segment(
        "UNB",
        writer.element(report.syntax_identifier, version),
        writer.element(report.recipient, report.recipient_qualifier),
        writer.element(report.sender, report.sender_qualifier),
        writer.element(stamp, now.strftime("%H%M")),
        writer.element(reference),
    )
    first = len(writer.segments)
    message_version, message_release = _IDENTIFIER[version]
    writer.segment(
        "UNH", writer.element("1"), writer.element(CONTRL, message_version, message_release, "UN")
    )
    writer.segment(
        "UCI",
        writer.element(report.control_reference),
        writer.element(report.sender, report.sender_qualifier),
        writer.element(report.recipient, report.recipient_qualifier),
        writer.element(int(report.action)),
        *_location(writer, report.error),
    )
    for message in report.messages:
        _message(writer, message)
    count = len(writer.segments) - first + 1
    writer.segment("UNT", writer.element(count), writer.element("1"))
    writer.segment("UNZ", writer.element("1"), writer.element(reference))
    return _join(writer.segments, delimiters)


def _join(segments: Sequence[str], delimiters: Delimiters) -> str:
    una = "" if delimiters == DEFAULT_DELIMITERS else delimiters.una
    terminator = delimiters.terminator
    return una + "".join(segment + terminator for segment in segments)
