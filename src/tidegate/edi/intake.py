"""The intake: read, classify, split or extract, one message at a time.

This is what a worker calls on an incoming document. It adds no rules of its own;
it runs the envelope reader and hands each message to the classifier and then to the
IFCSUM splitter (classes with ``split=True``, carved while they are read) or the
extractors, so that every decision stays in the module that owns it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from tidegate.edi.classify import DEFAULT_ROUTES, Classification, Route, classify
from tidegate.edi.envelope import EnvelopeReader, Interchange, Message
from tidegate.edi.extract import Extraction, extract
from tidegate.edi.findings import DEFAULT_POLICY, Finding, FindingCode, FindingPolicy
from tidegate.edi.ifcsum import BLUnit, ConsignmentSplitter
from tidegate.edi.tokenizer import DEFAULT_MAX_SEGMENT_BYTES

__all__ = ["Intake", "IntakeResult"]


@dataclass(frozen=True, slots=True)
class IntakeResult:
    """One message, its class, and what was carved or extracted from it.

    Attributes:
        message: the message, with its envelope findings.
        classification: class, queue, sheddability and why.
        units: one per CNI group when the class is split (IFCSUM), else empty.
        extraction: containers, VGMs and movements, with value findings.
        findings: classification findings on top of ``message.findings``.
    """

    message: Message
    classification: Classification
    units: tuple[BLUnit, ...]
    extraction: Extraction
    findings: tuple[Finding, ...] = ()

    def all_findings(self) -> list[Finding]:
        """Every finding about this message, each once, in stream order."""
        seen: set[tuple[FindingCode, int | None, str]] = set()
        merged = []
        sources = [self.message.findings, self.findings, self.extraction.findings]
        sources.extend(unit.findings for unit in self.units)
        for source in sources:
            for finding in source:
                key = (finding.code, finding.segment_index, finding.message)
                if key not in seen:
                    seen.add(key)
                    merged.append(finding)
        merged.sort(key=lambda f: -1 if f.segment_index is None else f.segment_index)
        return merged


class Intake:
    """Iterate over :class:`IntakeResult` for every message of ``source``.

    Args:
        source: bytes, or an iterable of bytes chunks (see
            :func:`~tidegate.edi.read_chunks`).
        policy: grades findings; ``strict=True`` raises on stream/envelope errors.
        routes: the routing table.
        max_segment_bytes: see :data:`~tidegate.edi.DEFAULT_MAX_SEGMENT_BYTES`.
        on_unit: called with each B/L unit of a split class as soon as it is carved;
            the units are then not kept (each result's ``units`` is empty), so a
            manifest of any size holds one unit at a time.

    :attr:`findings` and :attr:`interchanges` describe the stream outside the
    messages and are complete once iteration has finished.

    Example:
        >>> intake = Intake(b"UNH+1+VERMAS:D:16A:UN'BGM+749'UNT+3+1'")
        >>> [r.classification.queue for r in intake]
        ['edi.customs']
    """

    def __init__(
        self,
        source: bytes | Iterable[bytes],
        *,
        policy: FindingPolicy = DEFAULT_POLICY,
        routes: tuple[Route, ...] = DEFAULT_ROUTES,
        max_segment_bytes: int = DEFAULT_MAX_SEGMENT_BYTES,
        on_unit: Callable[[BLUnit], object] | None = None,
    ) -> None:
        self._policy = policy
        self._routes = routes
        self._on_unit = on_unit
        self.reader = EnvelopeReader(
            source,
            policy=policy,
            max_segment_bytes=max_segment_bytes,
            consumer_for=self._consumer_for,
        )

    @property
    def findings(self) -> list[Finding]:
        """Findings about the stream, interchanges and groups."""
        return self.reader.findings

    @property
    def interchanges(self) -> list[Interchange]:
        """Every interchange (UNB) read so far."""
        return self.reader.interchanges

    def _consumer_for(self, message: Message) -> ConsignmentSplitter | None:
        # Split classes are carved while they are read: a manifest's consignments are
        # released one by one instead of holding every segment until the UNT.
        if classify(message.identifier, routes=self._routes).document_class.split:
            return ConsignmentSplitter(message, policy=self._policy, on_unit=self._on_unit)
        return None

    def __iter__(self) -> Iterator[IntakeResult]:
        for message in self.reader:
            result = self._result(message)
            # Drop this frame's references before the reader goes on to the next
            # message, so that memory holds one message's results, not two.
            del message
            yield result
            del result

    def _result(self, message: Message) -> IntakeResult:
        policy = self._policy
        classification = classify(message.identifier, routes=self._routes)
        unh = message.segments[0]
        findings: list[Finding] = []
        if classification.finding_code is not None:
            findings.append(
                policy.make(
                    classification.finding_code,
                    classification.reason,
                    segment_index=unh.index,
                    offset=unh.offset,
                )
            )
        units: tuple[BLUnit, ...] = ()
        splitter = message.consumer
        if isinstance(splitter, ConsignmentSplitter):
            units = tuple(splitter.units)
            extraction = Extraction(
                containers=(
                    *splitter.header_containers,
                    *(c for u in units for c in u.containers),
                ),
                findings=tuple(splitter.header_findings),
            )
        else:
            extraction = extract(message, classification.document_class, policy=policy)
        unit_count = splitter.unit_count if isinstance(splitter, ConsignmentSplitter) else 0
        if classification.document_class.split and not unit_count:
            findings.append(
                policy.make(
                    FindingCode.NO_CONSIGNMENTS,
                    f"{message.type} message {message.reference!r} has no CNI group",
                    segment_index=unh.index,
                    offset=unh.offset,
                )
            )
        return IntakeResult(message, classification, units, extraction, tuple(findings))
