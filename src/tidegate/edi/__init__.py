"""EDIFACT intake: read, check, classify and split UN/EDIFACT interchanges.

Every document enters tidegate as EDIFACT text. The intake streams it
(:class:`Tokenizer`, :class:`EnvelopeReader`), checks the envelope, decides each
message's class, queue and sheddability (:func:`classify`, from the one routing table
:data:`DEFAULT_ROUTES`), carves consolidated manifests into one unit per Bill of
Lading (:func:`split_ifcsum`) and extracts VGMs and container movements
(:func:`extract`). :class:`Intake` runs all of it per message.

Problems inside a readable document are :class:`Finding` values with a severity, a
stable code and a location; only input that cannot be read as EDIFACT raises (the
:class:`~tidegate.errors.EdifactError` subtree in :mod:`tidegate.edi.errors`).

Example:
    >>> from tidegate.edi import Intake
    >>> for result in Intake(b"UNH+1+IFCSUM:D:96A:UN'CNI+1+C1'RFF+BM:MSCU1'UNT+4+1'"):
    ...     print(result.classification.queue, [u.bl_number for u in result.units])
    bulk.dispatch ['MSCU1']
"""

from __future__ import annotations

from tidegate.edi.classify import (
    DEFAULT_ROUTES,
    UNROUTED_QUEUE,
    Classification,
    DocumentClass,
    Route,
    classify,
)
from tidegate.edi.contrl import (
    CONTRL,
    SUPPORTED_SYNTAX_VERSIONS,
    ContrlAction,
    ErrorReport,
    InterchangeReport,
    MessageReport,
    SyntaxErrorCode,
    is_contrl,
    write_contrl,
)
from tidegate.edi.envelope import EnvelopeReader, Interchange, Message, MessageIdentifier
from tidegate.edi.errors import (
    ControlCountMismatch,
    ControlReferenceMismatch,
    EdifactEncodingError,
    EdifactError,
    EdifactSyntaxError,
    EnvelopeError,
    EnvelopeStructureError,
    InvalidServiceStringAdvice,
    LocatedEdifactError,
    NotEdifactError,
    SegmentTooLarge,
    TruncatedMessage,
    UnreadableInput,
)
from tidegate.edi.extract import (
    ContainerEvent,
    ContainerRef,
    EventType,
    Extraction,
    VgmDeclaration,
    extract,
)
from tidegate.edi.findings import (
    DEFAULT_MAX_FINDINGS_PER_CODE,
    DEFAULT_POLICY,
    DEFAULT_SEVERITIES,
    Finding,
    FindingCap,
    FindingCode,
    FindingPolicy,
    Severity,
)
from tidegate.edi.ifcsum import BLSource, BLUnit, idempotency_key, split_ifcsum
from tidegate.edi.inspect import group_findings, has_errors, inspect_path, inspect_source
from tidegate.edi.intake import Intake, IntakeResult
from tidegate.edi.sources import DEFAULT_CHUNK_SIZE, read_chunks
from tidegate.edi.syntax import DEFAULT_DELIMITERS, Delimiters, Segment
from tidegate.edi.tokenizer import DEFAULT_MAX_SEGMENT_BYTES, Tokenizer, tokenize
from tidegate.edi.validate import (
    ContainerCheck,
    LocodeCheck,
    check_container,
    check_locode,
    iso6346_check_digit,
)

__all__ = [
    "CONTRL",
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_DELIMITERS",
    "DEFAULT_MAX_FINDINGS_PER_CODE",
    "DEFAULT_MAX_SEGMENT_BYTES",
    "DEFAULT_POLICY",
    "DEFAULT_ROUTES",
    "DEFAULT_SEVERITIES",
    "SUPPORTED_SYNTAX_VERSIONS",
    "UNROUTED_QUEUE",
    "BLSource",
    "BLUnit",
    "Classification",
    "ContainerCheck",
    "ContainerEvent",
    "ContainerRef",
    "ContrlAction",
    "ControlCountMismatch",
    "ControlReferenceMismatch",
    "Delimiters",
    "DocumentClass",
    "EdifactEncodingError",
    "EdifactError",
    "EdifactSyntaxError",
    "EnvelopeError",
    "EnvelopeReader",
    "EnvelopeStructureError",
    "ErrorReport",
    "EventType",
    "Extraction",
    "Finding",
    "FindingCap",
    "FindingCode",
    "FindingPolicy",
    "Intake",
    "IntakeResult",
    "Interchange",
    "InterchangeReport",
    "InvalidServiceStringAdvice",
    "LocatedEdifactError",
    "LocodeCheck",
    "Message",
    "MessageIdentifier",
    "MessageReport",
    "NotEdifactError",
    "Route",
    "Segment",
    "SegmentTooLarge",
    "Severity",
    "SyntaxErrorCode",
    "Tokenizer",
    "TruncatedMessage",
    "UnreadableInput",
    "VgmDeclaration",
    "check_container",
    "check_locode",
    "classify",
    "extract",
    "group_findings",
    "has_errors",
    "idempotency_key",
    "inspect_path",
    "inspect_source",
    "is_contrl",
    "iso6346_check_digit",
    "read_chunks",
    "split_ifcsum",
    "tokenize",
    "write_contrl",
]
