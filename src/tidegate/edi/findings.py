"""Findings: what is wrong with a readable document, where, and how much it matters.

Real senders get things wrong that do not make a document unusable (a UNT count off
by one, a container number with a space in it). Raising would lose the whole document
for one value, so every such problem becomes a :class:`Finding` attached to the thing it
concerns: the stream, a message, a B/L unit or an extraction. The severity of each
:class:`FindingCode` comes from one table, :data:`DEFAULT_SEVERITIES`, and a caller can
override it and/or ask for strict reading with a :class:`FindingPolicy`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from tidegate.edi.errors import (
    ControlCountMismatch,
    ControlReferenceMismatch,
    EdifactEncodingError,
    EdifactSyntaxError,
    EnvelopeError,
    EnvelopeStructureError,
    LocatedEdifactError,
    TruncatedMessage,
)

__all__ = [
    "DEFAULT_MAX_FINDINGS_PER_CODE",
    "DEFAULT_POLICY",
    "DEFAULT_SEVERITIES",
    "Finding",
    "FindingCap",
    "FindingCode",
    "FindingPolicy",
    "Severity",
]


class Severity(StrEnum):
    """How much a finding matters; ``ERROR`` means the data may be wrong or incomplete."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class FindingCode(StrEnum):
    """Every kind of finding; the value is the stable code used in JSON reports."""

    # Characters and encoding (tokenizer)
    ENCODING_FALLBACK = "encoding_fallback"
    ENCODING_INVALID = "encoding_invalid"
    OUTSIDE_REPERTOIRE = "outside_repertoire"
    UNKNOWN_SYNTAX_IDENTIFIER = "unknown_syntax_identifier"
    INVALID_SEGMENT_TAG = "invalid_segment_tag"
    EMPTY_SEGMENT = "empty_segment"
    MISSING_TERMINATOR = "missing_terminator"
    DANGLING_RELEASE = "dangling_release"
    UNA_INSIDE_INTERCHANGE = "una_inside_interchange"
    # Envelope
    TRUNCATED_MESSAGE = "truncated_message"
    TRUNCATED_INTERCHANGE = "truncated_interchange"
    TRUNCATED_GROUP = "truncated_group"
    UNT_COUNT_MISMATCH = "unt_count_mismatch"
    UNE_COUNT_MISMATCH = "une_count_mismatch"
    UNZ_COUNT_MISMATCH = "unz_count_mismatch"
    INVALID_CONTROL_COUNT = "invalid_control_count"
    MESSAGE_REFERENCE_MISMATCH = "message_reference_mismatch"
    GROUP_REFERENCE_MISMATCH = "group_reference_mismatch"
    INTERCHANGE_REFERENCE_MISMATCH = "interchange_reference_mismatch"
    MISSING_REFERENCE = "missing_reference"
    DUPLICATE_MESSAGE_REFERENCE = "duplicate_message_reference"
    TRAILER_WITHOUT_HEADER = "trailer_without_header"
    SEGMENT_OUTSIDE_MESSAGE = "segment_outside_message"
    # Classification
    EMPTY_MESSAGE_TYPE = "empty_message_type"
    UNKNOWN_MESSAGE_TYPE = "unknown_message_type"
    # IFCSUM split
    NO_CONSIGNMENTS = "no_consignments"
    BL_FROM_BOOKING = "bl_from_booking"
    BL_MISSING = "bl_missing"
    BL_AMBIGUOUS = "bl_ambiguous"
    CONSIGNMENT_TRUNCATED = "consignment_truncated"
    DUPLICATE_CONSIGNMENT_NUMBER = "duplicate_consignment_number"
    # Values
    CONTAINER_MISSING = "container_missing"
    CONTAINER_FORMAT = "container_format"
    CONTAINER_CHECK_DIGIT = "container_check_digit"
    CONTAINER_SPACE = "container_space"
    LOCODE_SHAPE = "locode_shape"
    VGM_MISSING = "vgm_missing"
    VGM_INVALID = "vgm_invalid"
    VGM_METHOD_MISSING = "vgm_method_missing"
    VGM_PARTY_MISSING = "vgm_party_missing"
    EVENT_UNKNOWN = "event_unknown"


_E, _W, _I = Severity.ERROR, Severity.WARNING, Severity.INFO

#: Severity of every finding code. A wrong UNT count is only a warning because real
#: senders get it wrong while the content is intact; a truncated message is an error
#: because content is missing.
DEFAULT_SEVERITIES: Mapping[FindingCode, Severity] = MappingProxyType(
    {
        FindingCode.ENCODING_FALLBACK: _W,
        FindingCode.ENCODING_INVALID: _E,
        FindingCode.OUTSIDE_REPERTOIRE: _I,
        FindingCode.UNKNOWN_SYNTAX_IDENTIFIER: _W,
        FindingCode.INVALID_SEGMENT_TAG: _E,
        FindingCode.EMPTY_SEGMENT: _I,
        FindingCode.MISSING_TERMINATOR: _W,
        FindingCode.DANGLING_RELEASE: _W,
        FindingCode.UNA_INSIDE_INTERCHANGE: _W,
        FindingCode.TRUNCATED_MESSAGE: _E,
        FindingCode.TRUNCATED_INTERCHANGE: _E,
        FindingCode.TRUNCATED_GROUP: _E,
        FindingCode.UNT_COUNT_MISMATCH: _W,
        FindingCode.UNE_COUNT_MISMATCH: _W,
        FindingCode.UNZ_COUNT_MISMATCH: _W,
        FindingCode.INVALID_CONTROL_COUNT: _W,
        FindingCode.MESSAGE_REFERENCE_MISMATCH: _E,
        FindingCode.GROUP_REFERENCE_MISMATCH: _E,
        FindingCode.INTERCHANGE_REFERENCE_MISMATCH: _E,
        FindingCode.MISSING_REFERENCE: _W,
        FindingCode.DUPLICATE_MESSAGE_REFERENCE: _W,
        FindingCode.TRAILER_WITHOUT_HEADER: _E,
        FindingCode.SEGMENT_OUTSIDE_MESSAGE: _E,
        FindingCode.EMPTY_MESSAGE_TYPE: _W,
        FindingCode.UNKNOWN_MESSAGE_TYPE: _I,
        FindingCode.NO_CONSIGNMENTS: _W,
        FindingCode.BL_FROM_BOOKING: _W,
        FindingCode.BL_MISSING: _E,
        FindingCode.BL_AMBIGUOUS: _E,
        FindingCode.CONSIGNMENT_TRUNCATED: _E,
        FindingCode.DUPLICATE_CONSIGNMENT_NUMBER: _W,
        FindingCode.CONTAINER_MISSING: _E,
        FindingCode.CONTAINER_FORMAT: _E,
        FindingCode.CONTAINER_CHECK_DIGIT: _E,
        FindingCode.CONTAINER_SPACE: _W,
        FindingCode.LOCODE_SHAPE: _W,
        FindingCode.VGM_MISSING: _E,
        FindingCode.VGM_INVALID: _E,
        FindingCode.VGM_METHOD_MISSING: _W,
        FindingCode.VGM_PARTY_MISSING: _W,
        FindingCode.EVENT_UNKNOWN: _W,
    }
)

#: The exception a strict reader raises for an error-severity finding. Only codes
#: about the stream and its envelope are here: a bad value (check digit, LOCODE) is
#: never a reason to stop reading, whatever the policy.
_STRICT_ERRORS: Mapping[FindingCode, type[LocatedEdifactError]] = MappingProxyType(
    {
        FindingCode.ENCODING_FALLBACK: EdifactEncodingError,
        FindingCode.ENCODING_INVALID: EdifactEncodingError,
        FindingCode.OUTSIDE_REPERTOIRE: EdifactEncodingError,
        FindingCode.INVALID_SEGMENT_TAG: EdifactSyntaxError,
        FindingCode.EMPTY_SEGMENT: EdifactSyntaxError,
        FindingCode.DANGLING_RELEASE: EdifactSyntaxError,
        FindingCode.MISSING_TERMINATOR: TruncatedMessage,
        FindingCode.TRUNCATED_MESSAGE: TruncatedMessage,
        FindingCode.TRUNCATED_INTERCHANGE: TruncatedMessage,
        FindingCode.TRUNCATED_GROUP: TruncatedMessage,
        FindingCode.UNT_COUNT_MISMATCH: ControlCountMismatch,
        FindingCode.UNE_COUNT_MISMATCH: ControlCountMismatch,
        FindingCode.UNZ_COUNT_MISMATCH: ControlCountMismatch,
        FindingCode.INVALID_CONTROL_COUNT: ControlCountMismatch,
        FindingCode.MESSAGE_REFERENCE_MISMATCH: ControlReferenceMismatch,
        FindingCode.GROUP_REFERENCE_MISMATCH: ControlReferenceMismatch,
        FindingCode.INTERCHANGE_REFERENCE_MISMATCH: ControlReferenceMismatch,
        FindingCode.MISSING_REFERENCE: ControlReferenceMismatch,
        FindingCode.DUPLICATE_MESSAGE_REFERENCE: ControlReferenceMismatch,
        FindingCode.TRAILER_WITHOUT_HEADER: EnvelopeStructureError,
        FindingCode.SEGMENT_OUTSIDE_MESSAGE: EnvelopeStructureError,
        FindingCode.UNA_INSIDE_INTERCHANGE: EnvelopeStructureError,
    }
)


@dataclass(frozen=True, slots=True)
class Finding:
    """One located problem.

    Args:
        severity: how much it matters.
        code: what kind of problem; stable across releases.
        message: for an operator. Names values such as a container number or a
            reference, never a whole segment.
        segment_index: 0-based index of the segment in the stream (UNA counts).
        offset: byte offset of that segment from the start of the stream.
        count: how many findings this one stands for: 1, or more for the summary a
            :class:`FindingCap` makes of the findings it did not keep.
    """

    severity: Severity
    code: FindingCode
    message: str
    segment_index: int | None = None
    offset: int | None = None
    count: int = 1

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape used by ``tidegate edi inspect --json``."""
        return {
            "severity": self.severity.value,
            "code": self.code.value,
            "message": self.message,
            "segment_index": self.segment_index,
            "offset": self.offset,
            "count": self.count,
        }

    def to_error(self) -> LocatedEdifactError:
        """The typed exception a strict reader raises for this finding."""
        error_type = _STRICT_ERRORS.get(self.code, EnvelopeError)
        if issubclass(error_type, EnvelopeError):
            return error_type(
                self.message,
                finding_code=self.code.value,
                offset=self.offset,
                segment_index=self.segment_index,
            )
        return error_type(self.message, offset=self.offset, segment_index=self.segment_index)


@dataclass(frozen=True, slots=True)
class FindingPolicy:
    """How findings are graded, and whether reading stops on an error.

    Args:
        severities: overrides of :data:`DEFAULT_SEVERITIES`, e.g. make
            ``UNT_COUNT_MISMATCH`` an error for a partner known to count right.
        strict: raise the finding's typed exception (see :meth:`Finding.to_error`)
            as soon as an error-severity finding about the stream or the envelope is
            made. Value findings (check digits, LOCODEs, missing B/L) never raise.

    Example:
        >>> from tidegate.edi import FindingCode, FindingPolicy, Severity
        >>> policy = FindingPolicy(
        ...     severities={FindingCode.UNT_COUNT_MISMATCH: Severity.ERROR}, strict=True
        ... )
    """

    severities: Mapping[FindingCode, Severity] = field(default_factory=dict)
    strict: bool = False

    def severity_of(self, code: FindingCode) -> Severity:
        """The severity ``code`` gets under this policy."""
        return self.severities.get(code) or DEFAULT_SEVERITIES[code]

    def make(
        self,
        code: FindingCode,
        message: str,
        *,
        segment_index: int | None = None,
        offset: int | None = None,
    ) -> Finding:
        """Build a finding; in strict mode, raise instead when it is a stream error."""
        finding = Finding(self.severity_of(code), code, message, segment_index, offset)
        if self.strict and finding.severity is Severity.ERROR and code in _STRICT_ERRORS:
            raise finding.to_error()
        return finding


#: Default severities, never raising.
DEFAULT_POLICY = FindingPolicy()

#: Findings of one code kept one by one per stream; the rest become one summary.
DEFAULT_MAX_FINDINGS_PER_CODE = 100


class FindingCap:
    """Keep the first ``limit`` findings of each code; count the rest into one summary.

    A damaged file can repeat one problem on every segment: two megabytes of invalid
    tags are a million findings, and listing each would cost far more memory than
    the file while telling an operator nothing the first hundred do not. Counting
    keeps memory bounded by the number of codes, and the summary keeps the total.

    Args:
        limit: findings of one code admitted before the rest are only counted.

    Example:
        >>> cap = FindingCap(limit=1)
        >>> empty = [Finding(Severity.INFO, FindingCode.EMPTY_SEGMENT, "x", i) for i in range(3)]
        >>> [cap.admit(finding) for finding in empty]
        [True, False, False]
        >>> [(f.code.value, f.segment_index, f.count) for f in cap.summaries()]
        [('empty_segment', 1, 2)]
    """

    __slots__ = ("_kept", "_over", "limit")

    def __init__(self, limit: int = DEFAULT_MAX_FINDINGS_PER_CODE) -> None:
        self.limit = limit
        self._kept: dict[FindingCode, int] = {}
        #: code -> (first finding not kept, how many findings were not kept)
        self._over: dict[FindingCode, tuple[Finding, int]] = {}

    def admit(self, finding: Finding) -> bool:
        """Whether to keep ``finding``; when not, it is counted (with its own ``count``)."""
        code = finding.code
        kept = self._kept.get(code, 0)
        if kept < self.limit:
            self._kept[code] = kept + 1
            return True
        first, total = self._over.get(code, (finding, 0))
        self._over[code] = (first, total + finding.count)
        return False

    def summaries(self) -> list[Finding]:
        """One finding per code that went over the limit, located at its first one.

        The counts start again afterwards, so calling this twice reports nothing twice.
        """
        summaries = [
            Finding(
                first.severity,
                code,
                f"{total} more {code.value} findings from here on, not listed one by one "
                f"(the first {self.limit} are)",
                first.segment_index,
                first.offset,
                total,
            )
            for code, (first, total) in self._over.items()
        ]
        self._over = {}
        return summaries
