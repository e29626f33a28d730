"""Pull the operational facts out of VERMAS, COARRI, CODECO and any EQD segment.

Each extractor returns values plus located findings; an invalid value (a bad check
digit, a weight that is not a number) is reported and kept, never raised, so the
document still reaches its queue with the problem attached.

Equipment groups are cut at each ``EQD`` and end at the next ``EQD``, ``CNT`` or the
end of the message body: that is the shape of segment group "EQD" in VERMAS, COARRI
and CODECO alike, including the nested NAD/CTA/DOC groups of VERMAS.

Why one module of ~400 lines: the extractors read the same equipment groups (an EQD
and the segments up to the next one) with the same reference, location and finding
helpers; one module per message type would share all of them and add nothing of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from types import MappingProxyType
from typing import Any, NamedTuple

from tidegate.edi.classify import COARRI, CODECO, VERMAS, DocumentClass
from tidegate.edi.envelope import Message
from tidegate.edi.findings import DEFAULT_POLICY, Finding, FindingCode, FindingPolicy
from tidegate.edi.syntax import Segment
from tidegate.edi.validate import check_container, check_locode, is_locode, is_valid_container

__all__ = [
    "LOCODE_QUALIFIERS",
    "ContainerEvent",
    "ContainerRef",
    "EventType",
    "Extraction",
    "VgmDeclaration",
    "container_refs",
    "extract",
    "location_findings",
]

#: LOC qualifiers (3227) that name a port or inland place, i.e. should hold a
#: UN/LOCODE. Others (147 stowage cell, 28/80 countries, 41 or 60 terminal codes...)
#: legitimately hold other things and are not checked.
LOCODE_QUALIFIERS = frozenset(
    {"5", "7", "8", "9", "11", "12", "13", "24", "61", "65", "76", "83", "88", "94", "152", "175"}
)


class EventType(StrEnum):
    """What happened to a container, as reported by COARRI or CODECO."""

    DISCHARGE = "discharge"
    LOAD = "load"
    GATE_IN = "gate_in"
    GATE_OUT = "gate_out"
    UNKNOWN = "unknown"


#: BGM document name codes (1001) per message type. COARRI 44/46 as used by the ITG
#: and SMDG guides; CODECO 34/36 gate-in/gate-out reports.
_EVENTS_BY_BGM = MappingProxyType(
    {
        "COARRI": {"44": EventType.DISCHARGE, "46": EventType.LOAD},
        "CODECO": {"34": EventType.GATE_IN, "36": EventType.GATE_OUT},
    }
)
#: COARRI fallback when the BGM code is not one we know: EQD equipment status (8249)
#: 3 is import (so discharged), 2 is export (so loaded).
_COARRI_BY_STATUS = MappingProxyType({"3": EventType.DISCHARGE, "2": EventType.LOAD})


class ContainerRef(NamedTuple):
    """A container named in an ``EQD+CN`` segment (a named tuple: one per container).

    Args:
        number: as sent (stripped of nothing; see ``normalised``).
        normalised: without whitespace; use this as the key.
        valid: passes ISO 6346 (after removing whitespace).
        segment_index: stream index of the EQD.
        offset: byte offset of the EQD.
    """

    number: str
    normalised: str
    valid: bool
    segment_index: int
    offset: int

    def to_dict(self) -> dict[str, Any]:
        """JSON shape."""
        return {"number": self.normalised, "valid": self.valid, "segment_index": self.segment_index}


@dataclass(frozen=True, slots=True)
class VgmDeclaration:
    """One verified gross mass from a VERMAS equipment group.

    Args:
        container: the container weighed, ``None`` if the EQD has no usable number.
        weight: the mass, ``None`` when missing or not a number.
        weight_text: the value as sent (decimal comma kept).
        unit: measurement unit (``KGM``, ``LBR``).
        method: weighing method from ``DOC`` (``SM1`` weighs the packed container,
            ``SM2`` sums the contents and the tare).
        responsible_party: ``NAD+SPC`` party name or identification.
        responsible_person: ``CTA+RP`` contact name, the signatory.
        booking: ``RFF+BN`` in the group.
        segment_index: stream index of the EQD.
    """

    container: ContainerRef | None
    weight: Decimal | None
    weight_text: str
    unit: str
    method: str | None
    # Names of people and companies: kept out of repr() so they cannot reach a log.
    responsible_party: str | None = field(repr=False)
    responsible_person: str | None = field(repr=False)
    booking: str | None
    segment_index: int

    def to_dict(self) -> dict[str, Any]:
        """JSON shape; the weight is a string so that no precision is lost."""
        return {
            "container": self.container.normalised if self.container else None,
            "weight": None if self.weight is None else str(self.weight),
            "unit": self.unit,
            "method": self.method,
            "responsible_party": self.responsible_party,
            "responsible_person": self.responsible_person,
            "booking": self.booking,
            "segment_index": self.segment_index,
        }


@dataclass(frozen=True, slots=True)
class ContainerEvent:
    """One container movement from COARRI or CODECO.

    Args:
        container: the container.
        event: what happened.
        bl_number: ``RFF+BM`` in the equipment group, else in the message header.
        booking: ``RFF+BN`` in the equipment group, else in the message header.
        full_empty: EQD full/empty indicator (``4`` empty, ``5`` full).
        segment_index: stream index of the EQD.
    """

    container: ContainerRef
    event: EventType
    bl_number: str | None
    booking: str | None
    full_empty: str
    segment_index: int

    def to_dict(self) -> dict[str, Any]:
        """JSON shape."""
        return {
            "container": self.container.normalised,
            "event": self.event.value,
            "bl_number": self.bl_number,
            "booking": self.booking,
            "full_empty": self.full_empty,
            "segment_index": self.segment_index,
        }


@dataclass(frozen=True, slots=True)
class Extraction:
    """Everything extracted from one message, with the findings made on the way."""

    containers: tuple[ContainerRef, ...] = ()
    vgm: tuple[VgmDeclaration, ...] = ()
    events: tuple[ContainerEvent, ...] = ()
    findings: tuple[Finding, ...] = ()


def _finding(policy: FindingPolicy, code: FindingCode, message: str, segment: Segment) -> Finding:
    return policy.make(code, message, segment_index=segment.index, offset=segment.offset)


def container_refs(
    segments: Iterable[Segment], findings: list[Finding], *, policy: FindingPolicy = DEFAULT_POLICY
) -> list[ContainerRef]:
    """Every ``EQD+CN`` container in ``segments``; problems are appended to ``findings``."""
    refs = []
    for segment in segments:
        if segment.tag == "EQD" and segment.get(0).strip() == "CN":
            number = segment.get(1)
            if is_valid_container(number):
                refs.append(ContainerRef(number, number, True, segment.index, segment.offset))
            else:
                refs.append(_container(segment, findings, policy))
    return refs


def _container(segment: Segment, findings: list[Finding], policy: FindingPolicy) -> ContainerRef:
    check = check_container(segment.get(1))
    if check.problems:
        findings.extend(_finding(policy, code, text, segment) for code, text in check.problems)
    return ContainerRef(check.number, check.normalised, check.valid, segment.index, segment.offset)


def location_findings(
    segments: Iterable[Segment], *, policy: FindingPolicy = DEFAULT_POLICY
) -> list[Finding]:
    """Findings for ``LOC`` segments whose port/place code is not UN/LOCODE-shaped."""
    findings = []
    for segment in segments:
        if segment.tag != "LOC" or segment.get(0).strip() not in LOCODE_QUALIFIERS:
            continue
        code = segment.get(1)
        if is_locode(code) or not code.strip():
            continue
        check = check_locode(code)
        if check.problem is not None:
            findings.append(_finding(policy, FindingCode.LOCODE_SHAPE, check.problem, segment))
    return findings


def _equipment_groups(body: Sequence[Segment]) -> list[list[Segment]]:
    groups: list[list[Segment]] = []
    current: list[Segment] | None = None
    for segment in body:
        if segment.tag == "EQD":
            current = [segment]
            groups.append(current)
        elif segment.tag == "CNT":
            current = None
        elif current is not None:
            current.append(segment)
    return groups


def _reference(segments: Iterable[Segment], qualifier: str) -> str | None:
    for segment in segments:
        if segment.tag == "RFF" and segment.get(0, 0).strip() == qualifier:
            value = segment.get(0, 1).strip()
            if value:
                return value
    return None


def _header(body: Sequence[Segment]) -> list[Segment]:
    for position, segment in enumerate(body):
        if segment.tag == "EQD":
            return list(body[:position])
    return list(body)


def _parse_weight(text: str) -> Decimal | None:
    value = text.strip()
    if value.count(",") == 1 and "." not in value:
        value = value.replace(",", ".")
    try:
        weight = Decimal(value)
    except (InvalidOperation, ValueError):
        return None
    return weight if weight.is_finite() and weight > 0 else None


def _vgm(group: list[Segment], findings: list[Finding], policy: FindingPolicy) -> VgmDeclaration:
    eqd = group[0]
    container = _container(eqd, findings, policy) if eqd.get(0).strip() == "CN" else None
    weight_text, unit, measured = "", "", None
    for segment in group:
        if segment.tag == "MEA" and segment.get(1).strip() == "VGM":
            measured = segment
            unit = segment.get(2, 0).strip()
            weight_text = segment.get(2, 1).strip()
            break
    weight = _parse_weight(weight_text) if measured is not None else None
    if measured is None:
        findings.append(
            _finding(policy, FindingCode.VGM_MISSING, "equipment group without MEA+...+VGM", eqd)
        )
    elif weight is None:
        findings.append(
            _finding(
                policy,
                FindingCode.VGM_INVALID,
                f"VGM {weight_text[:20]!r} is not a positive number",
                measured,
            )
        )
    method = next(
        (s.get(0, 0).strip() or None for s in group if s.tag == "DOC" and s.get(0, 0).strip()),
        None,
    )
    if method is None:
        findings.append(
            _finding(policy, FindingCode.VGM_METHOD_MISSING, "no DOC with the weighing method", eqd)
        )
    party = next(
        (
            s.get(3, 0).strip() or s.get(1, 0).strip() or None
            for s in group
            if s.tag == "NAD" and s.get(0).strip() == "SPC"
        ),
        None,
    )
    person = next(
        (
            s.get(1, 1).strip() or s.get(1, 0).strip() or None
            for s in group
            if s.tag == "CTA" and s.get(0).strip() == "RP"
        ),
        None,
    )
    if party is None and person is None:
        findings.append(
            _finding(
                policy,
                FindingCode.VGM_PARTY_MISSING,
                "no responsible party (NAD+SPC) or person (CTA+RP)",
                eqd,
            )
        )
    return VgmDeclaration(
        container=container,
        weight=weight,
        weight_text=weight_text,
        unit=unit,
        method=method,
        responsible_party=party,
        responsible_person=person,
        booking=_reference(group, "BN"),
        segment_index=eqd.index,
    )


def _events(
    message: Message,
    groups: list[list[Segment]],
    findings: list[Finding],
    policy: FindingPolicy,
) -> list[ContainerEvent]:
    body = message.body
    header = _header(body)
    bgm = next((s for s in header if s.tag == "BGM"), None)
    code = bgm.get(0, 0).strip() if bgm is not None else ""
    by_bgm = _EVENTS_BY_BGM.get(message.type, {}).get(code)
    header_bl, header_booking = _reference(header, "BM"), _reference(header, "BN")
    events = []
    unknown_reported = False
    for group in groups:
        eqd = group[0]
        if eqd.get(0).strip() != "CN":
            continue
        event = by_bgm
        if event is None and message.type == "COARRI":
            event = _COARRI_BY_STATUS.get(eqd.get(4).strip())
        if event is None:
            event = EventType.UNKNOWN
            if not unknown_reported:
                unknown_reported = True
                findings.append(
                    _finding(
                        policy,
                        FindingCode.EVENT_UNKNOWN,
                        f"{message.type} BGM document code {code[:8]!r} is not a known "
                        "movement report",
                        bgm if bgm is not None else eqd,
                    )
                )
        events.append(
            ContainerEvent(
                container=_container(eqd, findings, policy),
                event=event,
                bl_number=_reference(group, "BM") or header_bl,
                booking=_reference(group, "BN") or header_booking,
                full_empty=eqd.get(5).strip(),
                segment_index=eqd.index,
            )
        )
    return events


def extract(
    message: Message, document_class: DocumentClass, *, policy: FindingPolicy = DEFAULT_POLICY
) -> Extraction:
    """Extract containers (any class), VGMs (VERMAS) and movements (COARRI, CODECO).

    Args:
        message: the message.
        document_class: its class, from :func:`~tidegate.edi.classify`.
        policy: grades the findings.
    """
    body = message.body
    findings: list[Finding] = []
    vgm: list[VgmDeclaration] = []
    events: list[ContainerEvent] = []
    if document_class in (VERMAS, COARRI, CODECO):
        groups = _equipment_groups(body)
        if document_class is VERMAS:
            vgm = [_vgm(group, findings, policy) for group in groups]
            containers = [d.container for d in vgm if d.container is not None]
        else:
            events = _events(message, groups, findings, policy)
            containers = [e.container for e in events]
    else:
        containers = container_refs(body, findings, policy=policy)
    findings.extend(location_findings(body, policy=policy))
    findings.sort(key=lambda f: f.segment_index or 0)
    return Extraction(tuple(containers), tuple(vgm), tuple(events), tuple(findings))
