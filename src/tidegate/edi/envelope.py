"""Group segments into messages and check the envelope around them.

The reader yields one :class:`Message` at a time (UNH..UNT with everything between),
so memory is bounded by the largest message, not the file. Envelope problems become
located findings instead of exceptions: on each message (:attr:`Message.findings`) or,
for the interchange and group level, on the reader (:attr:`EnvelopeReader.findings`).
What the checks compare:

* UNH/UNT: pairing, message reference, UNT segment count (UNH and UNT included);
* UNG/UNE: pairing, group reference, UNE message count;
* UNB/UNZ: pairing, interchange control reference, UNZ count (of groups when the
  interchange has groups, else of messages);
* data segments outside any message, trailers without a header, a header arriving
  while the previous message or interchange is still open (truncation).

A bare UNH..UNT without UNB is read like any other message, with no interchange.

A :class:`MessageConsumer` can take a message's segments over as they are read (the
IFCSUM splitter does, so that a manifest's consignments are released one by one
instead of being held until the UNT); the envelope checks are the same either way.

Why one module of ~650 lines: the envelope is one state machine (interchange, group,
message open or closed), and every check above needs to see that state as the segment
arrives; the value types it hands out (:class:`Message`, :class:`Interchange`) are
defined beside it because nothing else builds them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from tidegate.edi.findings import (
    DEFAULT_MAX_FINDINGS_PER_CODE,
    DEFAULT_POLICY,
    Finding,
    FindingCap,
    FindingCode,
    FindingPolicy,
)
from tidegate.edi.syntax import Delimiters, Segment
from tidegate.edi.tokenizer import DEFAULT_MAX_SEGMENT_BYTES, Tokenizer

__all__ = ["EnvelopeReader", "Interchange", "Message", "MessageConsumer", "MessageIdentifier"]

_ENVELOPE_TAGS = frozenset({"UNA", "UNB", "UNG", "UNH", "UNT", "UNE", "UNZ"})


@dataclass(frozen=True, slots=True)
class MessageIdentifier:
    """UNH composite S009: which message, in which directory, under which guide.

    Args:
        type: message type (``"IFCSUM"``); may be empty, real senders omit it.
        version: ``"D"`` for a UN directory, ``"S"`` for a draft one.
        release: directory release (``"96A"``).
        agency: controlling agency (``"UN"``).
        association: association-assigned code, i.e. the implementation guide
            (``"SMDG20"``, ``"FIBO01"``).
    """

    type: str
    version: str = ""
    release: str = ""
    agency: str = ""
    association: str = ""

    @classmethod
    def from_unh(cls, unh: Segment) -> MessageIdentifier:
        """Read S009 from a UNH segment; missing parts are empty strings."""
        return cls(
            type=unh.get(1, 0).strip(),
            version=unh.get(1, 1).strip(),
            release=unh.get(1, 2).strip(),
            agency=unh.get(1, 3).strip(),
            association=unh.get(1, 4).strip(),
        )

    def __str__(self) -> str:
        parts = [self.type, self.version, self.release, self.agency, self.association]
        return ":".join(parts).rstrip(":")


@dataclass(slots=True)
class Interchange:
    """What the UNB said, and what was counted until its UNZ.

    ``closed`` is false when the input ended (or the next UNB arrived) without a UNZ.
    """

    sender: str
    sender_qualifier: str
    recipient: str
    control_reference: str
    syntax_identifier: str
    syntax_version: str
    delimiters: Delimiters
    segment_index: int
    offset: int
    message_count: int = 0
    group_count: int = 0
    declared_count: int | None = None
    closed: bool = False


@dataclass(slots=True)
class Message:
    """One UNH..UNT message and where it came from.

    Attributes:
        reference: UNH message reference number.
        identifier: UNH message identifier (type, directory, association).
        segments: every segment from UNH to UNT inclusive (no UNT when truncated).
        interchange: the enclosing interchange, ``None`` for a bare message.
        group_reference: the UNG group reference, when inside a group.
        position: 1-based position of the message in its interchange (or, for bare
            messages, among the bare messages of the stream).
        truncated: the input ended, or another header began, before the UNT.
        findings: envelope findings about this message.
        consumer: the :class:`MessageConsumer` that took the segments between UNH and
            UNT, if any; ``segments`` then holds only the UNH and the UNT.
    """

    reference: str
    identifier: MessageIdentifier
    segments: list[Segment]
    interchange: Interchange | None = None
    group_reference: str | None = None
    position: int = 1
    truncated: bool = False
    findings: list[Finding] = field(default_factory=list)
    consumer: MessageConsumer | None = None

    @property
    def type(self) -> str:
        """The UNH message type, ``""`` when the sender left it empty."""
        return self.identifier.type

    @property
    def sender(self) -> str:
        """UNB sender identification, ``""`` for a bare message."""
        return self.interchange.sender if self.interchange is not None else ""

    @property
    def control_reference(self) -> str:
        """UNB interchange control reference, ``""`` for a bare message."""
        return self.interchange.control_reference if self.interchange is not None else ""

    @property
    def segment_index(self) -> int:
        """Stream index of the UNH."""
        return self.segments[0].index

    @property
    def offset(self) -> int:
        """Byte offset of the UNH."""
        return self.segments[0].offset

    @property
    def body(self) -> list[Segment]:
        """The segments between UNH and UNT (empty when a consumer took them)."""
        end = -1 if not self.truncated and len(self.segments) > 1 else len(self.segments)
        return self.segments[1:end]

    @property
    def segment_count(self) -> int:
        """Segments read for this message, UNH and UNT included (what UNT should say)."""
        return len(self.segments) + (self.consumer.count() if self.consumer else 0)

    @property
    def last_segment(self) -> Segment:
        """The last segment read for this message."""
        last = self.segments[-1]
        if self.consumer is not None:
            consumed = self.consumer.last()
            if consumed is not None and consumed.index > last.index:
                return consumed
        return last


class MessageConsumer(Protocol):
    """Takes over the segments between a message's UNH and UNT as they are read.

    The reader appends each segment to the list the consumer last handed out, a
    plain ``list.append`` per segment, and calls back only on the consumer's
    ``boundary_tags``, so a consumer can release whole groups while the message is
    still being read.
    """

    #: Tags on which :meth:`boundary` is called instead of appending.
    boundary_tags: frozenset[str]

    def begin(self, message: Message) -> list[Segment]:
        """The message was opened; return the list that receives what follows the UNH."""

    def boundary(self, segment: Segment) -> list[Segment]:
        """A boundary segment arrived; return the list that receives it and what follows."""

    def end(self, message: Message) -> None:
        """The message was closed by its UNT, or truncated (``message.truncated``)."""

    def count(self) -> int:
        """Segments received so far."""

    def last(self) -> Segment | None:
        """The last segment received, if any."""


@dataclass(slots=True)
class _Group:
    reference: str
    segment: Segment
    message_count: int = 0


#: Most significant digits a control count may have. The directories allow n..10
#: (UNT) and n..6 (UNE, UNZ); anything much longer cannot count what a reader holds,
#: and ``int()`` refuses strings of over 4,300 digits with a bare ``ValueError``.
_MAX_COUNT_DIGITS = 18


def _as_count(value: str) -> int | None:
    """The count a trailer declares, or ``None`` when it is not a usable number."""
    value = value.strip()
    if not (value.isdigit() and value.isascii()):
        return None
    significant = value.lstrip("0") or "0"
    return int(significant) if len(significant) <= _MAX_COUNT_DIGITS else None


def _count_problem(declared: str) -> str:
    """Why ``_as_count`` refused ``declared``, for a finding message."""
    value = declared.strip()
    if value.isdigit() and value.isascii():
        return f"has {len(value)} digits, more than any count can have"
    return f"{declared[:20]!r} is not a number"


class EnvelopeReader:
    """Iterate over the messages of an EDIFACT stream, checking the envelope.

    Args:
        source: bytes, or an iterable of bytes chunks (see
            :func:`tidegate.edi.read_chunks` for files).
        policy: grades findings; ``strict=True`` raises on envelope errors.
        max_segment_bytes: passed to the :class:`~tidegate.edi.Tokenizer`.
        consumer_for: called when a message opens; a :class:`MessageConsumer` it
            returns takes that message's segments (``None``: the message keeps them).
        max_findings_per_code: per stream, for the tokenizer's findings and for
            those that belong to no message (see :class:`~tidegate.edi.FindingCap`).

    After (or during) iteration, :attr:`interchanges` lists every UNB seen,
    :attr:`findings` holds the findings that belong to no single message, and
    :attr:`segment_count` counts the segments read.

    Example:
        >>> reader = EnvelopeReader(b"UNH+1+VERMAS:D:16A:UN'BGM+749'UNT+3+1'")
        >>> [(m.type, m.findings) for m in reader]
        [('VERMAS', [])]
    """

    def __init__(
        self,
        source: bytes | Iterable[bytes],
        *,
        policy: FindingPolicy = DEFAULT_POLICY,
        max_segment_bytes: int = DEFAULT_MAX_SEGMENT_BYTES,
        consumer_for: Callable[[Message], MessageConsumer | None] | None = None,
        max_findings_per_code: int = DEFAULT_MAX_FINDINGS_PER_CODE,
    ) -> None:
        self._policy = policy
        self._consumer_for = consumer_for
        self._target: list[Segment] = []
        self._tokenizer = Tokenizer(
            source,
            max_segment_bytes=max_segment_bytes,
            policy=policy,
            on_finding=self._on_token_finding,
            max_findings_per_code=max_findings_per_code,
        )
        self._cap = FindingCap(max_findings_per_code)
        self.interchanges: list[Interchange] = []
        self.findings: list[Finding] = []
        self._open: Message | None = None
        self._interchange: Interchange | None = None
        self._group: _Group | None = None
        self._references: set[str] = set()
        self._bare_messages = 0
        #: The first segment of the current run outside any message, and the run's
        #: length: a count, so that a run of a million is not held in memory.
        self._stray: Segment | None = None
        self._stray_count = 0
        self._pending: list[Finding] = []

    def __iter__(self) -> Iterator[Message]:
        return self._messages()

    @property
    def segment_count(self) -> int:
        """Segments read so far; exact once iteration has finished."""
        return self._tokenizer.segment_count

    def _on_token_finding(self, finding: Finding) -> None:
        # The tokenizer runs up to one buffer ahead of the grouping below, so its
        # findings are held here and handed to the message that contains their
        # segment when that message is closed (see _assign).
        self._pending.append(finding)

    def _assign(self, message: Message | None) -> None:
        """Move pending tokenizer findings to ``message`` or to the stream's findings."""
        if not self._pending:
            return
        if message is None:
            self.findings.extend(self._pending)
            self._pending = []
            return
        first, last = message.segments[0].index, message.last_segment.index
        keep = []
        for finding in self._pending:
            index = -1 if finding.segment_index is None else finding.segment_index
            if index > last:
                keep.append(finding)
            elif index >= first:
                message.findings.append(finding)
            else:
                self.findings.append(finding)
        self._pending = keep

    def _finding(
        self, code: FindingCode, message: str, segment: Segment, sink: list[Finding] | None = None
    ) -> None:
        finding = self._policy.make(
            code, message, segment_index=segment.index, offset=segment.offset
        )
        if sink is not None:
            sink.append(finding)
        elif self._cap.admit(finding):
            self.findings.append(finding)

    def _messages(self) -> Iterator[Message]:
        try:
            yield from self._read()
        finally:
            # Also on an error or an abandoned iteration: nothing reported is lost.
            self._assign(None)
            self.findings.extend(self._cap.summaries())

    def _read(self) -> Iterator[Message]:
        # The inner loop is the hot path: a set lookup and a list append per segment.
        # Everything else (service segments, a consumer's boundaries) goes to _service.
        stops = _ENVELOPE_TAGS
        append = None
        last: Segment | None = None
        for batch in self._tokenizer.batches():
            for segment in batch:
                if append is not None and segment.tag not in stops:
                    append(segment)
                    continue
                if segment.tag in _ENVELOPE_TAGS or self._open is None:
                    last = segment
                yield from self._service(segment)
                append, stops = self._route()
        if self._open is not None:
            last = self._open.last_segment
        if last is None:
            return
        if self._open is not None:
            yield self._truncate_message(self._open, last, "the end of the input")
        self._flush_stray()
        if self._group is not None:
            self._finding(
                FindingCode.TRUNCATED_GROUP,
                f"group {self._group.reference!r} has no UNE before the end of the input",
                last,
            )
            self._group = None
        if self._interchange is not None:
            self._finding(
                FindingCode.TRUNCATED_INTERCHANGE,
                f"interchange {self._interchange.control_reference!r} has no UNZ before "
                "the end of the input",
                last,
            )
            self._interchange = None

    def _service(self, segment: Segment) -> Iterator[Message]:
        """Handle a segment the hot loop does not append, yielding any closed message."""
        open_message = self._open
        if open_message is None:
            self._envelope(segment)
            return
        if segment.tag not in _ENVELOPE_TAGS and open_message.consumer is not None:
            self._target = open_message.consumer.boundary(segment)
            return
        if segment.tag == "UNT":
            open_message.segments.append(segment)
            yield self._close_message(open_message, segment)
            return
        yield self._truncate_message(open_message, segment, "a new envelope segment")
        self._envelope(segment)

    def _route(self) -> tuple[Callable[[Segment], None] | None, frozenset[str]]:
        """Where the hot loop appends, and on which tags it must stop, in this state."""
        open_message = self._open
        if open_message is None:
            return None, _ENVELOPE_TAGS
        if open_message.consumer is None:
            return open_message.segments.append, _ENVELOPE_TAGS
        return self._target.append, _ENVELOPE_TAGS | open_message.consumer.boundary_tags

    def _envelope(self, segment: Segment) -> None:
        tag = segment.tag
        if tag not in _ENVELOPE_TAGS:
            if self._stray is None:
                self._stray = segment
            self._stray_count += 1
            return
        self._flush_stray()
        if tag == "UNH":
            self._open_message(segment)
        elif tag == "UNB":
            self._open_interchange(segment)
        elif tag == "UNZ":
            self._close_interchange(segment)
        elif tag == "UNG":
            self._open_group(segment)
        elif tag == "UNE":
            self._close_group(segment)
        elif tag == "UNT":
            self._finding(
                FindingCode.TRAILER_WITHOUT_HEADER,
                f"UNT {segment.get(1)!r} without a UNH",
                segment,
            )
        elif self._interchange is not None:  # UNA
            self._finding(
                FindingCode.UNA_INSIDE_INTERCHANGE,
                f"UNA inside interchange {self._interchange.control_reference!r} "
                "(its UNZ is missing); the new separators apply from here",
                segment,
            )

    def _flush_stray(self) -> None:
        first = self._stray
        if first is not None:
            self._finding(
                FindingCode.SEGMENT_OUTSIDE_MESSAGE,
                f"{self._stray_count} segment(s) outside any message, first {first.tag!r}",
                first,
            )
            self._stray, self._stray_count = None, 0

    def _open_message(self, unh: Segment) -> None:
        interchange = self._interchange
        reference = unh.get(0).strip()
        if interchange is not None:
            interchange.message_count += 1
            position = interchange.message_count
        else:
            self._bare_messages += 1
            position = self._bare_messages
        message = Message(
            reference=reference,
            identifier=MessageIdentifier.from_unh(unh),
            segments=[unh],
            interchange=interchange,
            group_reference=self._group.reference if self._group is not None else None,
            position=position,
        )
        if self._group is not None:
            self._group.message_count += 1
        if not reference:
            self._finding(
                FindingCode.MISSING_REFERENCE,
                "UNH without a message reference",
                unh,
                message.findings,
            )
        elif reference in self._references:
            self._finding(
                FindingCode.DUPLICATE_MESSAGE_REFERENCE,
                f"message reference {reference!r} used twice in one interchange",
                unh,
                message.findings,
            )
        self._references.add(reference)
        self._open = message
        consumer = self._consumer_for(message) if self._consumer_for is not None else None
        if consumer is not None:
            message.consumer = consumer
            self._target = consumer.begin(message)

    def _close_message(self, message: Message, unt: Segment) -> Message:
        self._open = None
        self._assign(message)
        if message.consumer is not None:
            message.consumer.end(message)
        declared = unt.get(0)
        count = _as_count(declared)
        actual = message.segment_count
        if count is None:
            self._finding(
                FindingCode.INVALID_CONTROL_COUNT,
                f"UNT segment count {_count_problem(declared)}",
                unt,
                message.findings,
            )
        elif count != actual:
            self._finding(
                FindingCode.UNT_COUNT_MISMATCH,
                f"UNT says {count} segments, message {message.reference!r} has {actual}",
                unt,
                message.findings,
            )
        reference = unt.get(1).strip()
        if reference != message.reference:
            self._finding(
                FindingCode.MESSAGE_REFERENCE_MISMATCH,
                f"UNT reference {reference!r} does not match UNH reference {message.reference!r}",
                unt,
                message.findings,
            )
        return message

    def _truncate_message(self, message: Message, at: Segment, cause: str) -> Message:
        self._open = None
        self._assign(message)
        message.truncated = True
        if message.consumer is not None:
            message.consumer.end(message)
        self._finding(
            FindingCode.TRUNCATED_MESSAGE,
            f"message {message.reference!r} ({message.type or 'no type'}) has no UNT before "
            f"{cause}",
            at,
            message.findings,
        )
        return message

    def _open_interchange(self, unb: Segment) -> None:
        if self._interchange is not None:
            self._finding(
                FindingCode.TRUNCATED_INTERCHANGE,
                f"interchange {self._interchange.control_reference!r} has no UNZ before the "
                "next UNB",
                unb,
            )
        if self._group is not None:
            self._finding(
                FindingCode.TRUNCATED_GROUP,
                f"group {self._group.reference!r} has no UNE before the next UNB",
                unb,
            )
            self._group = None
        interchange = Interchange(
            sender=unb.get(1, 0).strip(),
            sender_qualifier=unb.get(1, 1).strip(),
            recipient=unb.get(2, 0).strip(),
            control_reference=unb.get(4, 0).strip(),
            syntax_identifier=unb.get(0, 0).strip(),
            syntax_version=unb.get(0, 1).strip(),
            delimiters=unb.delimiters,
            segment_index=unb.index,
            offset=unb.offset,
        )
        if not interchange.control_reference:
            self._finding(
                FindingCode.MISSING_REFERENCE, "UNB without an interchange control reference", unb
            )
        self.interchanges.append(interchange)
        self._interchange = interchange
        self._references = set()

    def _close_interchange(self, unz: Segment) -> None:
        interchange = self._interchange
        if interchange is None:
            self._finding(
                FindingCode.TRAILER_WITHOUT_HEADER, f"UNZ {unz.get(1)!r} without a UNB", unz
            )
            return
        if self._group is not None:
            self._finding(
                FindingCode.TRUNCATED_GROUP,
                f"group {self._group.reference!r} has no UNE before the UNZ",
                unz,
            )
            self._group = None
        self._interchange = None
        self._references = set()
        interchange.closed = True
        declared = unz.get(0)
        count = _as_count(declared)
        interchange.declared_count = count
        actual = interchange.group_count or interchange.message_count
        counted = "groups" if interchange.group_count else "messages"
        if count is None:
            self._finding(
                FindingCode.INVALID_CONTROL_COUNT,
                f"UNZ count {_count_problem(declared)}",
                unz,
            )
        elif count != actual:
            self._finding(
                FindingCode.UNZ_COUNT_MISMATCH,
                f"UNZ says {count} {counted}, interchange "
                f"{interchange.control_reference!r} has {actual}",
                unz,
            )
        reference = unz.get(1).strip()
        if reference != interchange.control_reference:
            self._finding(
                FindingCode.INTERCHANGE_REFERENCE_MISMATCH,
                f"UNZ reference {reference!r} does not match UNB reference "
                f"{interchange.control_reference!r}",
                unz,
            )

    def _open_group(self, ung: Segment) -> None:
        if self._group is not None:
            self._finding(
                FindingCode.TRUNCATED_GROUP,
                f"group {self._group.reference!r} has no UNE before the next UNG",
                ung,
            )
        if self._interchange is not None:
            self._interchange.group_count += 1
        self._group = _Group(reference=ung.get(4).strip(), segment=ung)

    def _close_group(self, une: Segment) -> None:
        group = self._group
        if group is None:
            self._finding(
                FindingCode.TRAILER_WITHOUT_HEADER, f"UNE {une.get(1)!r} without a UNG", une
            )
            return
        self._group = None
        declared = une.get(0)
        count = _as_count(declared)
        if count is None:
            self._finding(
                FindingCode.INVALID_CONTROL_COUNT,
                f"UNE count {_count_problem(declared)}",
                une,
            )
        elif count != group.message_count:
            self._finding(
                FindingCode.UNE_COUNT_MISMATCH,
                f"UNE says {count} messages, group {group.reference!r} has {group.message_count}",
                une,
            )
        reference = une.get(1).strip()
        if reference != group.reference:
            self._finding(
                FindingCode.GROUP_REFERENCE_MISMATCH,
                f"UNE reference {reference!r} does not match UNG reference {group.reference!r}",
                une,
            )
