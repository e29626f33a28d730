"""Carve a consolidated manifest (IFCSUM) into one unit per Bill of Lading.

Each ``CNI`` consignment group (from its CNI to the next CNI or the UNT) becomes one
:class:`BLUnit` that carries its raw segment text unchanged, for audit. The B/L comes
from ``RFF+BM`` in the group; failing that from ``RFF+BN`` (the booking number, flagged
as a fallback); failing that the unit is marked for the dead-letter queue with the
precise reason. A B/L number is never invented, and no consignment is ever dropped:
a unit that cannot be routed is still a unit, with ``dead_letter_reason`` set.

The idempotency key is a SHA-256 over the sender, the interchange control reference,
the message reference, the consignment's position in the message and the normalised
segment text (default separators, no whitespace between segments). It is stable
across replays of the same interchange, whatever its line endings or UNA, and it
still separates consignments that repeat the same number within one message, because
the position is part of it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from operator import attrgetter
from typing import Any, Literal, NamedTuple

from tidegate.edi.envelope import Message
from tidegate.edi.extract import ContainerRef, container_refs, location_findings
from tidegate.edi.findings import DEFAULT_POLICY, Finding, FindingCode, FindingPolicy
from tidegate.edi.syntax import Segment, canonical_separators

__all__ = ["BLSource", "BLUnit", "ConsignmentSplitter", "idempotency_key", "split_ifcsum"]

_text = attrgetter("text")
_lead = attrgetter("lead")

#: The only segments of a consignment the splitter reads into.
_LOOKED_AT = frozenset({"RFF", "EQD", "LOC"})

#: Where a unit's B/L number came from.
BLSource = Literal["RFF+BM", "RFF+BN"]


class BLUnit(NamedTuple):
    """One consignment of a manifest, ready to be routed (or dead-lettered).

    Immutable. A named tuple rather than a frozen dataclass because a manifest makes
    thousands of them and frozen-dataclass construction is several times slower.

    Attributes:
        idempotency_key: hex SHA-256, see the module docstring.
        position: 1-based position of the CNI group in its message.
        consignment_number: CNI consolidation item number as sent (may repeat).
        bl_number: the B/L number, ``None`` when the unit is dead-lettered.
        bl_source: ``"RFF+BM"``, ``"RFF+BN"`` (a fallback), or ``None``.
        dead_letter_reason: why the unit cannot be routed; ``None`` if it can.
        sender: UNB sender identification (``""`` for a bare message).
        interchange_reference: UNB control reference (``""`` for a bare message).
        message_reference: UNH message reference.
        containers: ``EQD+CN`` containers in the group.
        findings: findings about this unit (B/L, containers, truncation).
        segment_index: stream index of the CNI.
        offset: byte offset of the CNI.
        segment_count: segments in the group.
        raw: the group's segments exactly as sent, from the CNI to the last
            terminator, including whitespace between segments.
    """

    idempotency_key: str
    position: int
    consignment_number: str
    bl_number: str | None
    bl_source: BLSource | None
    dead_letter_reason: str | None
    sender: str
    interchange_reference: str
    message_reference: str
    containers: tuple[ContainerRef, ...]
    findings: tuple[Finding, ...]
    segment_index: int
    offset: int
    segment_count: int
    raw: str

    def __repr__(self) -> str:
        # Without the raw text: units carry names and addresses, and a repr() in a log
        # line must not leak them (see tidegate.logging).
        state = f"dead-letter: {self.dead_letter_reason}" if self.dead_letter else self.bl_number
        return f"<BLUnit #{self.position} {state} key={self.idempotency_key[:12]}>"

    @property
    def dead_letter(self) -> bool:
        """Whether the unit must go to the dead-letter queue instead of its route."""
        return self.dead_letter_reason is not None

    def to_dict(self, *, raw: bool = False) -> dict[str, Any]:
        """JSON shape for ``tidegate edi split``; ``raw`` adds the segment text."""
        data: dict[str, Any] = {
            "idempotency_key": self.idempotency_key,
            "position": self.position,
            "consignment_number": self.consignment_number,
            "bl_number": self.bl_number,
            "bl_source": self.bl_source,
            "dead_letter_reason": self.dead_letter_reason,
            "sender": self.sender,
            "interchange_reference": self.interchange_reference,
            "message_reference": self.message_reference,
            "containers": [c.to_dict() for c in self.containers],
            "findings": [f.to_dict() for f in self.findings],
            "segment_index": self.segment_index,
            "offset": self.offset,
            "segment_count": self.segment_count,
        }
        if raw:
            data["raw"] = self.raw
        return data


def idempotency_key(
    *,
    sender: str,
    interchange_reference: str,
    message_reference: str,
    position: int,
    normalised_text: str,
) -> str:
    """SHA-256 (hex) over the five inputs.

    Each text is length-prefixed (``len:text``, netstring style), so no choice of
    values can make two different inputs encode to the same bytes.
    """
    payload = (
        f"tidegate.edi.bl/1,{len(sender)}:{sender},{len(interchange_reference)}:"
        f"{interchange_reference},{len(message_reference)}:{message_reference},{position},"
        f"{len(normalised_text)}:{normalised_text}"
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _header_bl(header: list[Segment]) -> str | None:
    for segment in header:
        if segment.tag == "RFF":
            reference = segment.components(0)
            if reference and reference[0].strip() == "BM" and len(reference) > 1:
                return reference[1].strip() or None
    return None


def _choose_bl(
    rffs: list[Segment], header_bl: str | None
) -> tuple[str | None, BLSource | None, FindingCode | None, str]:
    """(bl, source, finding code, message) for one consignment group's RFF segments."""
    found: dict[str, list[str]] = {}
    for rff in rffs:
        reference = rff.components(0)
        qualifier = reference[0].strip() if reference else ""
        value = reference[1].strip() if len(reference) > 1 else ""
        values = found.get(qualifier)
        if values is None:
            found[qualifier] = [value] if value else []
        elif value and value not in values:
            values.append(value)
    bm = found.get("BM")
    if bm and len(bm) == 1:
        return bm[0], "RFF+BM", None, ""
    for qualifier in ("BM", "BN"):
        values = found.get(qualifier) or []
        if len(values) > 1:
            shown = ", ".join(repr(v[:35]) for v in values[:3])
            return (
                None,
                None,
                FindingCode.BL_AMBIGUOUS,
                f"consignment has {len(values)} different RFF+{qualifier} values ({shown})",
            )
        if values and qualifier == "BN":
            return (
                values[0],
                "RFF+BN",
                FindingCode.BL_FROM_BOOKING,
                f"no RFF+BM; booking number {values[0][:35]!r} (RFF+BN) used as the B/L",
            )
    present = sorted(q for q in found if q)
    detail = f"; RFF present: {', '.join(present)}" if present else "; no RFF in the group"
    if "BM" in found or "BN" in found:
        detail += " (RFF+BM/BN with an empty value)"
    if header_bl is not None:
        detail += f"; the message header's RFF+BM {header_bl[:35]!r} is not applied per consignment"
    return None, None, FindingCode.BL_MISSING, f"consignment has no RFF+BM or RFF+BN{detail}"


def _texts(group: list[Segment]) -> tuple[str, str]:
    """(normalised text, raw text) of a group; one join each in the common case."""
    joined = "'".join(map(_text, group)) + "'"
    canonical = canonical_separators(group[0].delimiters) and "?" not in joined
    normalised = joined if canonical else "'".join([s.normalised() for s in group]) + "'"
    # Every segment but the stream's very last is terminated, and a message has one
    # terminator throughout (a UNA inside it would have truncated it), so checking the
    # first and last segments' terminators covers the group.
    leads = "".join(map(_lead, group))
    if not leads and group[0].term == "'" and group[-1].term == "'":
        raw = joined
    else:
        raw = group[0].text + group[0].term + "".join([s.raw for s in group[1:]])
    return normalised, raw


class ConsignmentSplitter:
    """Turns each CNI group into a :class:`BLUnit` as soon as the next one starts.

    It is a :class:`~tidegate.edi.MessageConsumer`: given to the envelope reader, it
    receives the message's segments as they are read and keeps only the message
    header, the consignment in progress and the finished units, so memory is one
    consignment's segments plus the units, not the whole manifest's segments. Used on
    an already read message by :func:`split_ifcsum`.

    Args:
        message: the IFCSUM message being read (UNH seen).
        policy: grades the findings.

    Attributes:
        units: finished units, in order.
        header: the segments before the first CNI.
        header_findings: value findings about the header (containers, LOCODEs).
        header_containers: containers named in the header.
    """

    boundary_tags = frozenset({"CNI"})

    def __init__(
        self,
        message: Message,
        *,
        policy: FindingPolicy = DEFAULT_POLICY,
        on_unit: Callable[[BLUnit], object] | None = None,
    ) -> None:
        # Only the identifying strings are kept, not the message: the message refers
        # to its consumer, and a cycle would keep every finished manifest alive until
        # the cyclic garbage collector ran.
        #: Each finished unit goes to ``on_unit`` when one is given, and is not kept:
        #: a manifest of 100,000 B/Ls then never holds more than the one being read.
        self._on_unit = on_unit
        #: Units finished so far, whether kept in :attr:`units` or handed on.
        self.unit_count = 0
        self._sender = message.sender
        self._control_reference = message.control_reference
        self._reference = message.reference
        self._policy = policy
        self.units: list[BLUnit] = []
        self.header: list[Segment] = []
        self.header_findings: list[Finding] = []
        self.header_containers: list[ContainerRef] = []
        self._group: list[Segment] | None = None
        self._header_bl: str | None = None
        self._finished_segments = 0
        self._last_finished: Segment | None = None
        self._numbers: set[str] = set()

    def begin(self, message: Message) -> list[Segment]:
        """Segments after the UNH go to the header until the first CNI."""
        return self.header

    def boundary(self, segment: Segment) -> list[Segment]:
        """A CNI: finish the consignment in progress and start the next one."""
        if self._group is None:
            self._close_header()
        else:
            self._finish(self._group, truncated=False)
        self._group = [segment]
        return self._group

    def end(self, message: Message) -> None:
        """UNT (or truncation): finish the last consignment."""
        if self._group is None:
            self._close_header()
        else:
            self._finish(self._group, truncated=message.truncated)
            self._group = None

    def count(self) -> int:
        """Segments received so far."""
        in_progress = len(self._group) if self._group is not None else 0
        return len(self.header) + self._finished_segments + in_progress

    def last(self) -> Segment | None:
        """The last segment received."""
        if self._group:
            return self._group[-1]
        if self._last_finished is not None:
            return self._last_finished
        return self.header[-1] if self.header else None

    def _close_header(self) -> None:
        if self._header_bl is None:
            self._header_bl = _header_bl(self.header) or ""
            self.header_containers = container_refs(
                self.header, self.header_findings, policy=self._policy
            )
            self.header_findings.extend(location_findings(self.header, policy=self._policy))

    def _finish(self, group: list[Segment], *, truncated: bool) -> None:
        policy = self._policy
        self.unit_count += 1
        position = self.unit_count
        cni = group[0]
        findings: list[Finding] = []
        number = cni.get(1).strip()
        if number in self._numbers and number:
            findings.append(
                policy.make(
                    FindingCode.DUPLICATE_CONSIGNMENT_NUMBER,
                    f"consignment number {number[:35]!r} repeats an earlier CNI in the message",
                    segment_index=cni.index,
                    offset=cni.offset,
                )
            )
        self._numbers.add(number)
        looked_at = [segment for segment in group if segment.tag in _LOOKED_AT]
        bl, source, code, text = _choose_bl(
            [segment for segment in looked_at if segment.tag == "RFF"], self._header_bl or None
        )
        reason = None
        if code is not None:
            findings.append(policy.make(code, text, segment_index=cni.index, offset=cni.offset))
            if bl is None:
                reason = text
        if truncated:
            last = group[-1]
            text = "the message ends before its UNT: this consignment may be incomplete"
            findings.append(
                policy.make(
                    FindingCode.CONSIGNMENT_TRUNCATED,
                    text,
                    segment_index=last.index,
                    offset=last.offset,
                )
            )
            reason = text if reason is None else f"{reason}; {text}"
        containers = container_refs(looked_at, findings, policy=policy)
        findings.extend(location_findings(looked_at, policy=policy))
        normalised, raw = _texts(group)
        sender = self._sender
        control_reference = self._control_reference
        unit = BLUnit(
            idempotency_key(
                sender=sender,
                interchange_reference=control_reference,
                message_reference=self._reference,
                position=position,
                normalised_text=normalised,
            ),
            position,
            number,
            bl,
            source,
            reason,
            sender,
            control_reference,
            self._reference,
            tuple(containers),
            tuple(findings),
            cni.index,
            cni.offset,
            len(group),
            raw,
        )
        if self._on_unit is not None:
            self._on_unit(unit)
        else:
            self.units.append(unit)
        self._finished_segments += len(group)
        self._last_finished = group[-1]


def split_ifcsum(message: Message, *, policy: FindingPolicy = DEFAULT_POLICY) -> list[BLUnit]:
    """One :class:`BLUnit` per CNI group of ``message``, in order.

    A message without CNI yields no unit (the caller reports it). When the message is
    truncated, its last consignment may be cut short, so that unit is dead-lettered
    with a :attr:`~tidegate.edi.FindingCode.CONSIGNMENT_TRUNCATED` finding; the
    consignments before it ended at the next CNI and are complete. Other message
    findings (a wrong UNT count, a reference mismatch) stay on the message: they do
    not make a consignment's own content doubtful.

    When the message was read with a :class:`ConsignmentSplitter` (as
    :class:`~tidegate.edi.Intake` does), its units are returned as they are.
    """
    if isinstance(message.consumer, ConsignmentSplitter):
        return list(message.consumer.units)
    splitter = ConsignmentSplitter(message, policy=policy)
    target = splitter.begin(message)
    for segment in message.body:
        if segment.tag == "CNI":
            target = splitter.boundary(segment)
        else:
            target.append(segment)
    splitter.end(message)
    return splitter.units
