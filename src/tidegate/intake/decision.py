"""The intake's decision: a pure function from what was read and seen to the answer.

:func:`decide` takes the read interchange, the duplicate verdict and the admission
verdict (which queues are above their high watermark) and returns a
:class:`Decision`: the status, the HTTP status, the CONTRL text, the units to
publish and what to do with the duplicate claim afterwards. It does no I/O and reads
no clock (``now`` is an argument), so every branch of the table below is a plain
unit test; :class:`~tidegate.intake.pipeline.IntakePipeline` carries it out.

=====================  ======  ========================================================
status                 HTTP    when
=====================  ======  ========================================================
``duplicate``          409     the same sender and control reference were accepted
                               within the window: CONTRL UCI action 4, error 26
``retry``              503     another request holds the same interchange right now,
                               a queue a unit would go to is above its HWM, or the
                               broker failed while publishing: nothing acknowledged
``rejected``           400     an envelope error, no message, or every message rejected
``partly_rejected``    202     some messages rejected (UCM 4), the rest published
``accepted``           202     every message published: UCI action 8, UCM 7 each
=====================  ======  ========================================================

A document is never half-admitted: saturation is checked for every unit's queue
before the first unit is published, so either all go or none do.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tidegate.edi.contrl import (
    ContrlAction,
    ErrorReport,
    InterchangeReport,
    MessageReport,
    SyntaxErrorCode,
    is_contrl,
    write_contrl,
)
from tidegate.intake.reading import Reading, ReadMessage
from tidegate.load.admission import Inbound

__all__ = ["BARE_NOTE", "Claim", "Decision", "Status", "decide", "retry"]

#: What the JSON answer says about a bare UNH..UNT without UNB.
BARE_NOTE = "bare messages without UNB: no duplicate detection and no CONTRL"


class Status(enum.StrEnum):
    """The ``status`` of the JSON answer."""

    ACCEPTED = "accepted"
    PARTLY_REJECTED = "partly_rejected"
    REJECTED = "rejected"
    DUPLICATE = "duplicate"
    RETRY = "retry"


class Claim(enum.Enum):
    """The duplicate verdict on an interchange's sender and control reference."""

    #: Bare messages: there is no interchange to remember.
    NOT_CHECKED = "not_checked"
    #: Not seen before; this request now holds the claim.
    NEW = "new"
    #: Accepted before, within the window.
    DUPLICATE = "duplicate"
    #: Another request holds the claim and has not finished.
    IN_FLIGHT = "in_flight"


_HTTP = {
    Status.ACCEPTED: 202,
    Status.PARTLY_REJECTED: 202,
    Status.REJECTED: 400,
    Status.DUPLICATE: 409,
    Status.RETRY: 503,
}


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do and what to answer.

    Attributes:
        status / http_status: the answer's status.
        reason: why, in one snake_case word (``saturated``, ``in_flight`` …).
        contrl: the CONTRL text, ``None`` when none is sent.
        publish: the units to publish, all before answering.
        record: after publishing, mark the interchange accepted (duplicate window).
        release: drop this request's claim (nothing was acknowledged).
        retry_after_s: the ``Retry-After`` of a 503.
        saturated: the queues found above their HWM.
        body: the JSON answer.
    """

    status: Status
    reason: str
    contrl: str | None
    publish: tuple[Inbound, ...]
    record: bool
    release: bool
    body: dict[str, Any]
    retry_after_s: int | None = None
    saturated: tuple[str, ...] = ()

    @property
    def http_status(self) -> int:
        """The HTTP status of the answer."""
        return _HTTP[self.status]


def _message_json(message: ReadMessage, rejected: bool) -> dict[str, Any]:
    return {
        "reference": message.reference,
        "type": message.identifier.type,
        "class": message.document_class.name,
        "queue": message.document_class.queue,
        "action": "rejected" if rejected else "accepted",
        "units": 0 if rejected else len(message.units),
        "errors": list(message.error_codes),
    }


def _body(
    reading: Reading,
    status: Status,
    reason: str,
    contrl: str | None,
    units: int,
    *,
    all_rejected: bool = False,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "status": status.value,
        "reason": reason,
        "contrl": contrl,
        "interchange": reading.header.to_dict() if reading.header is not None else None,
        "units": units,
        "messages": [_message_json(m, all_rejected or m.rejected) for m in reading.messages],
    }
    if reading.errors:
        body["errors"] = list(reading.error_codes)
    if reading.header is None:
        body["note"] = BARE_NOTE
    return body


def _contrl(
    reading: Reading,
    action: ContrlAction,
    error: ErrorReport | None,
    *,
    reference: str,
    now: datetime,
    all_rejected: bool = False,
    with_messages: bool = True,
) -> str | None:
    header = reading.header
    if header is None:
        return None
    if reading.messages and all(is_contrl(m.identifier) for m in reading.messages):
        return None  # never a CONTRL in answer to a CONTRL
    messages = tuple(
        MessageReport(
            m.reference,
            m.identifier,
            ContrlAction.REJECTED if all_rejected or m.rejected else ContrlAction.ACKNOWLEDGED,
            m.errors,
        )
        for m in reading.messages
        if with_messages and not is_contrl(m.identifier)
    )
    report = InterchangeReport(
        control_reference=header.control_reference,
        sender=header.sender,
        sender_qualifier=header.sender_qualifier,
        recipient=header.recipient,
        recipient_qualifier=header.recipient_qualifier,
        syntax_identifier=header.syntax_identifier,
        syntax_version=header.syntax_version,
        delimiters=header.delimiters,
        action=action,
        error=error,
        messages=messages,
    )
    return write_contrl(report, reference=reference, now=now)


def retry(
    reading: Reading, reason: str, *, retry_after_s: int, saturated: tuple[str, ...] = ()
) -> Decision:
    """Tell the sender to send again later; nothing is acknowledged, the claim is dropped."""
    return Decision(
        Status.RETRY,
        reason,
        None,
        (),
        record=False,
        release=True,
        body={**_body(reading, Status.RETRY, reason, None, 0), "retry_after_s": retry_after_s},
        retry_after_s=retry_after_s,
        saturated=saturated,
    )


def decide(
    reading: Reading,
    *,
    claim: Claim,
    saturated: frozenset[str],
    contrl_reference: str,
    now: datetime,
    retry_after_s: int,
) -> Decision:
    """The answer to one request, and what must happen before it is given.

    Args:
        reading: the request's interchange, read.
        claim: the duplicate verdict (:attr:`Claim.NOT_CHECKED` for bare messages).
        saturated: queues above their high watermark (the admission's verdict).
        contrl_reference: the control reference a CONTRL would carry.
        now: the CONTRL's preparation time.
        retry_after_s: the ``Retry-After`` of a 503.
    """
    if claim is Claim.DUPLICATE:
        error = ErrorReport(SyntaxErrorCode.DUPLICATE_DETECTED)
        contrl = _contrl(
            reading,
            ContrlAction.REJECTED,
            error,
            reference=contrl_reference,
            now=now,
            with_messages=False,
        )
        body = _body(
            reading, Status.DUPLICATE, "duplicate_interchange", contrl, 0, all_rejected=True
        )
        return Decision(
            Status.DUPLICATE,
            "duplicate_interchange",
            contrl,
            (),
            record=False,
            release=False,
            body=body,
        )
    if claim is Claim.IN_FLIGHT:
        return retry(reading, "in_flight", retry_after_s=retry_after_s)
    interchange_error: ErrorReport | None = reading.errors[0] if reading.errors else None
    if interchange_error is None and not reading.messages:
        interchange_error = ErrorReport(SyntaxErrorCode.LOWER_LEVEL_EMPTY)
    units = () if interchange_error is not None else reading.units
    if interchange_error is not None or not units:
        all_rejected = interchange_error is not None
        contrl = _contrl(
            reading,
            ContrlAction.REJECTED,
            interchange_error,
            reference=contrl_reference,
            now=now,
            all_rejected=all_rejected,
        )
        reason = "envelope_error" if all_rejected else "messages_rejected"
        body = _body(reading, Status.REJECTED, reason, contrl, 0, all_rejected=all_rejected)
        return Decision(Status.REJECTED, reason, contrl, (), record=False, release=True, body=body)
    full = tuple(sorted({u.queue for u in units} & saturated))
    if full:
        return retry(reading, "saturated", retry_after_s=retry_after_s, saturated=full)
    partly = any(m.rejected for m in reading.messages)
    status = Status.PARTLY_REJECTED if partly else Status.ACCEPTED
    action = ContrlAction.ACKNOWLEDGED if partly else ContrlAction.RECEIVED
    contrl = _contrl(reading, action, None, reference=contrl_reference, now=now)
    reason = "messages_rejected" if partly else "accepted"
    body = _body(reading, status, reason, contrl, len(units))
    return Decision(status, reason, contrl, units, record=True, release=False, body=body)
