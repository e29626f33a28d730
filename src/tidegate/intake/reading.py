"""From the bytes of one request to what the decision needs: messages, units, errors.

Reading adds no rules of its own: :class:`~tidegate.edi.Intake` checks the envelope,
classifies each message and splits manifests per B/L. This module only gathers the
result into immutable values — the interchange's header, each message with the units
it becomes and its errors already located for a CONTRL — and refuses, with a typed
error, input that is not one interchange the intake can answer for.

A message is rejected when it has an error-severity finding (the one severity table,
:data:`~tidegate.edi.DEFAULT_SEVERITIES`, says what is an error); the interchange is
rejected when the envelope around the messages has one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from tidegate.edi.classify import DEFAULT_ROUTES, DocumentClass, Route
from tidegate.edi.contrl import SUPPORTED_SYNTAX_VERSIONS, ErrorReport, SyntaxErrorCode
from tidegate.edi.envelope import Interchange, Message, MessageIdentifier
from tidegate.edi.findings import DEFAULT_POLICY, Finding, FindingCode, FindingPolicy, Severity
from tidegate.edi.ifcsum import ConsignmentSplitter, idempotency_key
from tidegate.edi.intake import Intake, IntakeResult
from tidegate.edi.syntax import DEFAULT_DELIMITERS, Delimiters
from tidegate.edi.tokenizer import DEFAULT_MAX_SEGMENT_BYTES, tokenize
from tidegate.intake.errors import NewlineTerminatedSegments, UnacceptableInterchange
from tidegate.load.admission import Inbound

__all__ = ["InterchangeHeader", "ReadMessage", "Reading", "read_interchange"]

_C = SyntaxErrorCode

#: Where each error finding is reported in a CONTRL: (code, service segment tag,
#: data element, component). A service tag puts the error on the UCM/UCI; without
#: one, a message's error gets a UCS at the finding's segment (and a UCD when the
#: element is known). Codes not listed are reported as "unspecified" at their segment.
_LOCATIONS: Mapping[FindingCode, tuple[SyntaxErrorCode, str | None, int | None, int | None]] = (
    MappingProxyType(
        {
            FindingCode.ENCODING_INVALID: (_C.INVALID_CHARACTERS, None, None, None),
            FindingCode.TRUNCATED_MESSAGE: (_C.MISSING, "UNT", None, None),
            FindingCode.UNT_COUNT_MISMATCH: (_C.CONTROL_COUNT_DOES_NOT_MATCH, "UNT", 1, None),
            FindingCode.MESSAGE_REFERENCE_MISMATCH: (_C.REFERENCES_DO_NOT_MATCH, "UNT", 2, None),
            FindingCode.TRUNCATED_INTERCHANGE: (_C.MISSING, "UNZ", None, None),
            FindingCode.UNZ_COUNT_MISMATCH: (_C.CONTROL_COUNT_DOES_NOT_MATCH, "UNZ", 1, None),
            FindingCode.INTERCHANGE_REFERENCE_MISMATCH: (
                _C.REFERENCES_DO_NOT_MATCH,
                "UNZ",
                2,
                None,
            ),
            FindingCode.TRUNCATED_GROUP: (_C.MISSING, "UNE", None, None),
            FindingCode.UNE_COUNT_MISMATCH: (_C.CONTROL_COUNT_DOES_NOT_MATCH, "UNE", 1, None),
            FindingCode.GROUP_REFERENCE_MISMATCH: (_C.REFERENCES_DO_NOT_MATCH, "UNE", 2, None),
            FindingCode.SEGMENT_OUTSIDE_MESSAGE: (
                _C.INVALID_OCCURRENCE_OUTSIDE_MESSAGE,
                None,
                None,
                None,
            ),
            FindingCode.TRAILER_WITHOUT_HEADER: (
                _C.INVALID_OCCURRENCE_OUTSIDE_MESSAGE,
                None,
                None,
                None,
            ),
            FindingCode.CONTAINER_MISSING: (_C.MISSING, None, 2, 1),
            FindingCode.CONTAINER_FORMAT: (_C.INVALID_VALUE, None, 2, 1),
            FindingCode.CONTAINER_CHECK_DIGIT: (_C.INVALID_VALUE, None, 2, 1),
            FindingCode.VGM_INVALID: (_C.INVALID_VALUE, None, 3, 2),
            FindingCode.VGM_MISSING: (_C.MISSING, None, None, None),
            FindingCode.BL_MISSING: (_C.MISSING, None, None, None),
            FindingCode.BL_AMBIGUOUS: (_C.INVALID_VALUE, None, 1, 2),
            FindingCode.CONSIGNMENT_TRUNCATED: (_C.MISSING, None, None, None),
        }
    )
)

_TAG_LINE = re.compile(rb"[A-Z][A-Z0-9]{2}")


@dataclass(frozen=True, slots=True)
class ReadMessage:
    """One message: its units if accepted, its located errors if not.

    Attributes:
        reference / identifier: from its UNH.
        document_class: its class.
        units: what publishing it means (one unit, keyed by its idempotency key; the
            payload carries the document text, so it is never logged).
        errors: error-severity findings, located for a CONTRL; empty = acceptable.
        error_codes: the finding codes behind ``errors``, for the JSON answer.
    """

    reference: str
    identifier: MessageIdentifier
    document_class: DocumentClass
    units: tuple[Inbound, ...]
    errors: tuple[ErrorReport, ...]
    error_codes: tuple[str, ...]

    @property
    def rejected(self) -> bool:
        """Whether the message must be rejected."""
        return bool(self.errors)


@dataclass(frozen=True, slots=True)
class InterchangeHeader:
    """What the UNB said, in full (the CONTRL needs the recipient's qualifier too)."""

    sender: str
    sender_qualifier: str
    recipient: str
    recipient_qualifier: str
    control_reference: str
    syntax_identifier: str
    syntax_version: str
    delimiters: Delimiters

    def to_dict(self) -> dict[str, str]:
        """The JSON shape of the ``interchange`` field."""
        return {
            "sender": self.sender,
            "recipient": self.recipient,
            "control_reference": self.control_reference,
            "syntax": f"{self.syntax_identifier}:{self.syntax_version}",
        }


@dataclass(frozen=True, slots=True)
class Reading:
    """One request's interchange, read.

    Attributes:
        header: the UNB; ``None`` for bare messages (no duplicate check, no CONTRL).
        messages: every message, in order.
        errors: error findings about the envelope around the messages, located.
        error_codes: their finding codes.
    """

    header: InterchangeHeader | None
    messages: tuple[ReadMessage, ...]
    errors: tuple[ErrorReport, ...] = ()
    error_codes: tuple[str, ...] = ()

    @property
    def units(self) -> tuple[Inbound, ...]:
        """The units of every message that is not rejected."""
        return tuple(u for m in self.messages if not m.rejected for u in m.units)


def _newline_terminated(body: bytes) -> bool:
    """Whether segments are separated by line breaks only, never by the terminator."""
    start = body.lstrip(b" \t\r\n\xef\xbb\xbf")
    terminator = start[8:9] if start.startswith(b"UNA") and len(start) >= 9 else b"'"
    if b"\n" not in start or terminator in (b"\n", b"\r"):
        return False
    if start.count(terminator) * 2 >= start.count(b"\n"):
        # About a terminator per line break: ordinary one-segment-per-line EDIFACT. Two
        # counts in C spare a large body the line split below.
        return False
    lines = [line.strip() for line in start.splitlines() if line.strip()]
    segments = [line for line in lines if _TAG_LINE.match(line) and not line.startswith(b"UNA")]
    if len(segments) < 2:
        return False
    return not any(line.endswith(terminator) for line in segments[:-1])


def _check_terminators(body: bytes) -> None:
    if _newline_terminated(body):
        raise NewlineTerminatedSegments(
            "segments are separated by newlines only: no segment ends with the segment "
            "terminator, so the interchange cannot be read; terminate each segment "
            "(default ') before the line break"
        )


def _unb_qualifier(body: bytes, max_segment_bytes: int) -> str:
    """The recipient's qualifier, which :class:`Interchange` does not keep."""
    for segment in tokenize(body, max_segment_bytes=max_segment_bytes):
        if segment.tag == "UNB":
            return segment.get(2, 1).strip()
        if segment.tag == "UNH":
            break
    return ""


def _located(finding: Finding, message: Message | None) -> ErrorReport:
    code, service, element, component = _LOCATIONS.get(
        finding.code, (_C.UNSPECIFIED, None, None, None)
    )
    position = None
    if service is None and message is not None and finding.segment_index is not None:
        position = max(1, finding.segment_index - message.segment_index + 1)
    if position is None and service is None:
        # Nothing to hang a data element on: the error is reported at its level only.
        element = component = None
    return ErrorReport(code, position, service, element, component)


def _errors(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity is Severity.ERROR]


def _texts(result: IntakeResult) -> tuple[str, str]:
    """The message as sent, and the normalised text its idempotency key is taken over.

    A split class's segments were taken by the splitter while they were read: the
    message keeps only its UNH and UNT, so the text is put back together from the
    splitter's header and each consignment's raw text (a consignment stands in the
    key by its own idempotency key, which covers its normalised text).
    """
    message = result.message
    head, tail = message.segments[:1], message.segments[1:]
    splitter = message.consumer
    if isinstance(splitter, ConsignmentSplitter):
        head = [*head, *splitter.header]
        raw = "".join(s.raw for s in head) + "".join(u.raw for u in result.units)
        identity = [
            *(s.normalised() for s in head),
            *(u.idempotency_key for u in result.units),
            *(s.normalised() for s in tail),
        ]
        return (raw + "".join(s.raw for s in tail)).lstrip(), "'".join(identity)
    raw = "".join(segment.raw for segment in message.segments).lstrip()
    return raw, "'".join(segment.normalised() for segment in message.segments)


def _unit(result: IntakeResult, delimiters: Delimiters) -> Inbound:
    """One message, one unit: the payload shape its queue's task takes.

    A split class (IFCSUM) goes whole to ``bulk.dispatch`` as ``{"batch_id",
    "edifact"}``, where the worker carves it per B/L under ``batch_id`` (at most once
    per batch); its consignments were split here only to check them. Every other
    message goes as the ``{"key", "type", "class", "body"}`` envelope.
    """
    message, cls = result.message, result.classification.document_class
    raw, normalised = _texts(result)
    text = raw if delimiters == DEFAULT_DELIMITERS else delimiters.una + raw
    key = idempotency_key(
        sender=message.sender,
        interchange_reference=message.control_reference,
        message_reference=message.reference,
        position=message.position,
        normalised_text=normalised,
    )
    payload: dict[str, Any] = {
        "key": key,
        "type": message.type,
        "class": cls.name,
        "sender": message.sender,
        "interchange_reference": message.control_reference,
        "message_reference": message.reference,
    }
    if cls.split:
        payload.update(batch_id=key, edifact=text)
        payload["consignments"] = len(result.units)
    else:
        payload["body"] = text
    return Inbound(key, cls, payload)


def _message(result: IntakeResult, delimiters: Delimiters) -> ReadMessage:
    message = result.message
    errors = _errors(result.all_findings())
    return ReadMessage(
        reference=message.reference,
        identifier=message.identifier,
        document_class=result.classification.document_class,
        units=() if errors else (_unit(result, delimiters),),
        errors=tuple(_located(f, message) for f in errors),
        error_codes=tuple(f.code.value for f in errors),
    )


def _header(interchange: Interchange, recipient_qualifier: str) -> InterchangeHeader:
    return InterchangeHeader(
        sender=interchange.sender,
        sender_qualifier=interchange.sender_qualifier,
        recipient=interchange.recipient,
        recipient_qualifier=recipient_qualifier,
        control_reference=interchange.control_reference,
        syntax_identifier=interchange.syntax_identifier,
        syntax_version=interchange.syntax_version,
        delimiters=interchange.delimiters,
    )


def read_interchange(
    body: bytes,
    *,
    policy: FindingPolicy = DEFAULT_POLICY,
    routes: tuple[Route, ...] = DEFAULT_ROUTES,
    max_segment_bytes: int = DEFAULT_MAX_SEGMENT_BYTES,
) -> Reading:
    """Read the one interchange (or the bare messages) of a request body.

    Args:
        body: the request body, whole (the HTTP layer has capped its size).
        policy: grades findings (never ``strict``: errors are answered, not raised).
        routes: the routing table.
        max_segment_bytes: see :data:`~tidegate.edi.DEFAULT_MAX_SEGMENT_BYTES`.

    Raises:
        NewlineTerminatedSegments: segments separated by line breaks only.
        UnacceptableInterchange: an empty body, more than one interchange (or an
            interchange with bare messages beside it), or a syntax version other than
            1 to 4.
        EdifactError: the input cannot be read as EDIFACT at all.
    """
    if not body.strip():
        raise UnacceptableInterchange("empty_body", "the body is empty")
    _check_terminators(body)
    intake = Intake(body, policy=policy, routes=routes, max_segment_bytes=max_segment_bytes)
    results = list(intake)
    interchanges = intake.interchanges
    bare = any(r.message.interchange is None for r in results)
    if len(interchanges) > 1 or (interchanges and bare):
        raise UnacceptableInterchange(
            "multiple_interchanges",
            f"the body holds {len(interchanges)} interchange(s)"
            + (" and bare messages" if bare else "")
            + "; send one interchange per request",
        )
    header = None
    delimiters = DEFAULT_DELIMITERS
    if interchanges:
        interchange = interchanges[0]
        if interchange.syntax_version not in SUPPORTED_SYNTAX_VERSIONS:
            raise UnacceptableInterchange(
                "unsupported_syntax_version",
                f"syntax version {interchange.syntax_version[:8]!r} is not supported "
                "(versions 1 to 4 are)",
            )
        header = _header(interchange, _unb_qualifier(body, max_segment_bytes))
        delimiters = interchange.delimiters
    envelope_errors = _errors(intake.findings)
    return Reading(
        header=header,
        messages=tuple(_message(r, delimiters) for r in results),
        errors=tuple(_located(f, None) for f in envelope_errors),
        error_codes=tuple(f.code.value for f in envelope_errors),
    )
