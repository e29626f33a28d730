"""The EDIFACT part of the error tree.

An :class:`~tidegate.errors.EdifactError` means tidegate could not read the input as
EDIFACT at all, or (only when a caller asked for ``strict`` reading) that a finding it
would otherwise merely report was serious enough to stop. Problems inside a readable
document (a wrong UNT count, a bad check digit) are :class:`~tidegate.edi.Finding`
values, never exceptions: an exception would lose the whole document for one bad value.
::

    EdifactError                          (tidegate.errors)
    ├── UnreadableInput                   the file or stream itself failed (OSError)
    ├── NotEdifactError                   no UNA/UNB/UNH where EDIFACT must start
    ├── EdifactSyntaxError                the character stream cannot be cut into segments
    │   ├── InvalidServiceStringAdvice    a UNA with unusable or truncated separators
    │   └── SegmentTooLarge               no terminator within ``max_segment_bytes``
    ├── EdifactEncodingError              bytes not valid in the declared character set
    └── EnvelopeError                     a strict-mode finding about the envelope
        ├── TruncatedMessage              input ended inside a message or interchange
        ├── ControlCountMismatch          UNT/UNE/UNZ count differs from what was read
        ├── ControlReferenceMismatch      UNT/UNE/UNZ reference differs from its header
        └── EnvelopeStructureError        trailers without headers, stray segments

Every error carries ``offset`` (bytes from the start of the stream) and
``segment_index`` (0-based, counting every segment including UNA) when it is known, and
a stable ``code`` for machine-readable reports such as ``tidegate edi inspect --json``.
"""

from __future__ import annotations

from typing import ClassVar

from tidegate.errors import EdifactError

__all__ = [
    "ControlCountMismatch",
    "ControlReferenceMismatch",
    "EdifactEncodingError",
    "EdifactError",
    "EdifactSyntaxError",
    "EnvelopeError",
    "EnvelopeStructureError",
    "InvalidServiceStringAdvice",
    "LocatedEdifactError",
    "NotEdifactError",
    "SegmentTooLarge",
    "TruncatedMessage",
    "UnreadableInput",
]


class LocatedEdifactError(EdifactError):
    """Base of every EDIFACT error tidegate raises: a message plus where it happened.

    Args:
        message: what went wrong, for an operator; never contains payload text.
        offset: byte offset from the start of the stream, when known.
        segment_index: 0-based index of the segment, when known.
    """

    #: Stable machine-readable identifier, used in JSON reports.
    code: ClassVar[str] = "edifact"

    def __init__(
        self, message: str, *, offset: int | None = None, segment_index: int | None = None
    ) -> None:
        self.offset = offset
        self.segment_index = segment_index
        where = []
        if segment_index is not None:
            where.append(f"segment {segment_index}")
        if offset is not None:
            where.append(f"byte {offset}")
        super().__init__(f"{message} (at {', '.join(where)})" if where else message)
        self.reason = message


class UnreadableInput(LocatedEdifactError):
    """The file or stream could not be read; the ``OSError`` is the ``__cause__``."""

    code = "unreadable"


class NotEdifactError(LocatedEdifactError):
    """The input does not start like EDIFACT (UNA, UNB or UNH after an optional BOM).

    Checked on the first bytes so that a PDF or a JSON body sent to the EDI queue is
    rejected at once instead of being buffered in search of a segment terminator.
    """

    code = "not_edifact"


class EdifactSyntaxError(LocatedEdifactError):
    """The character stream cannot be cut into segments."""

    code = "syntax"


class InvalidServiceStringAdvice(EdifactSyntaxError):
    """A UNA segment is truncated or declares separators that cannot work.

    Separators must be distinct and must not be letters or digits: with a letter as
    element separator every tag would be split apart, so guessing would corrupt data.
    """

    code = "invalid_una"


class SegmentTooLarge(EdifactSyntaxError):
    """No segment terminator within ``max_segment_bytes``.

    This is what keeps memory bounded on input that is not really segmented (a binary
    file that happens to start with ``UNB``): the tokenizer never buffers more than one
    incomplete segment.
    """

    code = "segment_too_large"

    def __init__(
        self,
        message: str,
        *,
        limit: int,
        offset: int | None = None,
        segment_index: int | None = None,
    ) -> None:
        self.limit = limit
        super().__init__(message, offset=offset, segment_index=segment_index)


class EdifactEncodingError(LocatedEdifactError):
    """Bytes are not valid in the character set the interchange declares (strict mode)."""

    code = "encoding"


class EnvelopeError(LocatedEdifactError):
    """A finding about the envelope, raised only when reading in strict mode.

    ``finding_code`` is the :class:`~tidegate.edi.FindingCode` value that was raised.
    """

    code = "envelope"

    def __init__(
        self,
        message: str,
        *,
        finding_code: str,
        offset: int | None = None,
        segment_index: int | None = None,
    ) -> None:
        self.finding_code = finding_code
        super().__init__(message, offset=offset, segment_index=segment_index)


class TruncatedMessage(EnvelopeError):
    """The input ended (or a new header began) inside a message or interchange."""

    code = "truncated"


class ControlCountMismatch(EnvelopeError):
    """A trailer's count (UNT segments, UNE/UNZ messages) differs from what was read."""

    code = "control_count"


class ControlReferenceMismatch(EnvelopeError):
    """A trailer's control reference differs from its header's."""

    code = "control_reference"


class EnvelopeStructureError(EnvelopeError):
    """Segments out of envelope order: trailers without headers, data outside messages."""

    code = "envelope_structure"
