"""Envelope checks: pairing, control references, counts, truncation, strict mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidegate.edi import (
    ControlCountMismatch,
    ControlReferenceMismatch,
    EnvelopeReader,
    EnvelopeStructureError,
    Finding,
    FindingCode,
    FindingPolicy,
    Message,
    Severity,
    TruncatedMessage,
)
from tidegate.edi.synthetic import interchange_segments, message_segments, render

FIXTURES = Path(__file__).parent / "fixtures"


def read(data: bytes, policy: FindingPolicy | None = None) -> tuple[list[Message], EnvelopeReader]:
    reader = EnvelopeReader(data) if policy is None else EnvelopeReader(data, policy=policy)
    return list(reader), reader


def codes(findings: list[Finding]) -> list[FindingCode]:
    return [finding.code for finding in findings]


def test_a_clean_interchange_has_no_findings() -> None:
    """Matching references and counts: messages, no findings, the UNB facts kept."""
    data = render(
        interchange_segments(
            message_segments("M1", "IFTSTA:D:00B:UN", "BGM+23"),
            message_segments("M2", "IFTSTA:D:00B:UN", "BGM+23"),
            reference="REF9",
            sender="ACME",
        )
    )
    messages, reader = read(data)
    assert [(m.reference, m.type, m.position) for m in messages] == [
        ("M1", "IFTSTA", 1),
        ("M2", "IFTSTA", 2),
    ]
    assert all(m.findings == [] for m in messages)
    assert reader.findings == []
    (interchange,) = reader.interchanges
    assert (interchange.sender, interchange.control_reference) == ("ACME", "REF9")
    assert (interchange.message_count, interchange.declared_count, interchange.closed) == (
        2,
        2,
        True,
    )
    assert messages[0].sender == "ACME"
    assert messages[0].control_reference == "REF9"
    assert reader.segment_count == 8


def test_wrong_unt_count_is_a_located_warning() -> None:
    """Real senders miscount: a warning with the UNT's position, never an exception."""
    data = render(message_segments("M1", "CODECO:D:95B:UN", "BGM+34", unt_count=7))
    (message,), _ = read(data)
    (finding,) = message.findings
    assert finding.code is FindingCode.UNT_COUNT_MISMATCH
    assert finding.severity is Severity.WARNING
    assert (finding.segment_index, finding.offset) == (2, data.index(b"UNT"))
    assert "7" in finding.message
    assert "3" in finding.message


def test_reference_mismatches_are_errors() -> None:
    """UNT/UNH and UNZ/UNB references must match; a mismatch is an error finding."""
    data = render(
        interchange_segments(
            message_segments("M1", "IFTSTA:D:00B:UN", "BGM+23", unt_reference="M2"),
            reference="A1",
            unz_reference="A2",
        )
    )
    (message,), reader = read(data)
    assert codes(message.findings) == [FindingCode.MESSAGE_REFERENCE_MISMATCH]
    assert codes(reader.findings) == [FindingCode.INTERCHANGE_REFERENCE_MISMATCH]
    assert reader.findings[0].severity is Severity.ERROR


def test_unz_count_mismatch_and_non_numeric_counts() -> None:
    """UNZ counts messages (or groups); a non-number is reported, not parsed."""
    data = render(
        interchange_segments(message_segments("M1", "IFTSTA:D:00B:UN", "BGM+23"), unz_count=3)
    )
    _, reader = read(data)
    assert codes(reader.findings) == [FindingCode.UNZ_COUNT_MISMATCH]
    data = render(message_segments("M1", "IFTSTA:D:00B:UN", "BGM+23", unt_count=0)).replace(
        b"UNT+0", b"UNT+X3"
    )
    (message,), _ = read(data)
    assert codes(message.findings) == [FindingCode.INVALID_CONTROL_COUNT]


def test_groups_are_counted_and_checked() -> None:
    """UNG/UNE: references and message counts; UNZ then counts groups."""
    messages, reader = read((FIXTURES / "groups_codeco.edi").read_bytes())
    assert [m.group_reference for m in messages] == ["GRP1", "GRP1"]
    assert reader.findings == []
    assert reader.interchanges[0].group_count == 1
    bad = (FIXTURES / "groups_codeco.edi").read_bytes().replace(b"UNE+2+GRP1", b"UNE+3+GRP9")
    _, reader = read(bad)
    assert codes(reader.findings) == [
        FindingCode.UNE_COUNT_MISMATCH,
        FindingCode.GROUP_REFERENCE_MISMATCH,
    ]


def test_truncation_at_end_of_input() -> None:
    """A message without UNT at the end is yielded, marked truncated, with an error."""
    messages, reader = read((FIXTURES / "truncated_ifcsum.edi").read_bytes())
    (message,) = messages
    assert message.truncated
    assert codes(message.findings) == [
        FindingCode.MISSING_TERMINATOR,
        FindingCode.TRUNCATED_MESSAGE,
    ]
    assert message.findings[1].severity is Severity.ERROR
    assert codes(reader.findings) == [FindingCode.TRUNCATED_INTERCHANGE]


def test_truncation_by_the_next_header() -> None:
    """A UNH (or UNZ) arriving inside a message truncates that message."""
    segments = [
        "UNB+UNOC:3+S+R+1:1+9",
        "UNH+M1+IFTSTA:D:00B:UN",
        "BGM+23",
        *message_segments("M2", "IFTSTA:D:00B:UN", "BGM+23"),
        "UNZ+2+9",
    ]
    messages, reader = read(render(segments))
    assert [(m.reference, m.truncated) for m in messages] == [("M1", True), ("M2", False)]
    assert codes(messages[0].findings) == [FindingCode.TRUNCATED_MESSAGE]
    assert messages[0].findings[0].segment_index == 3
    assert reader.findings == []


def test_unpaired_trailers_and_stray_segments() -> None:
    """Trailers without headers and data outside any message are located errors."""
    data = render(["UNH+M1+X:D:96A:UN", "UNT+2+M1", "BGM+1", "FTX+AAA", "UNT+2+M9", "UNZ+1+Z"])
    messages, reader = read(data)
    assert len(messages) == 1
    assert codes(reader.findings) == [
        FindingCode.SEGMENT_OUTSIDE_MESSAGE,
        FindingCode.TRAILER_WITHOUT_HEADER,
        FindingCode.TRAILER_WITHOUT_HEADER,
    ]
    assert reader.findings[0].segment_index == 2
    assert "2 segment(s)" in reader.findings[0].message


def test_bare_messages_and_duplicate_references() -> None:
    """UNH..UNT without UNB is read; a reused reference in one interchange is flagged."""
    bare = render(message_segments("1", "IFCSUM:D:01B:UN:EAN032", "BGM+610"))
    (message,), reader = read(bare)
    assert message.interchange is None
    assert (message.sender, message.control_reference) == ("", "")
    assert reader.interchanges == []
    twice = render(
        interchange_segments(
            message_segments("M1", "IFTSTA:D:00B:UN", "BGM+23"),
            message_segments("M1", "IFTSTA:D:00B:UN", "BGM+23"),
        )
    )
    messages, _ = read(twice)
    assert codes(messages[1].findings) == [FindingCode.DUPLICATE_MESSAGE_REFERENCE]


def test_una_inside_an_open_interchange() -> None:
    """A UNA before the previous UNZ is honoured and reported (its UNZ is missing)."""
    data = (
        b"UNB+UNOC:3+S+R+1:1+A1'UNH+1+X:D:96A:UN'UNT+2+1'UNA:+.? 'UNB+UNOC:3+S+R+1:1+A2'UNZ+0+A2'"
    )
    _, reader = read(data)
    assert codes(reader.findings) == [
        FindingCode.UNA_INSIDE_INTERCHANGE,
        FindingCode.TRUNCATED_INTERCHANGE,
    ]


def test_tokenizer_findings_go_to_their_message() -> None:
    """An encoding finding inside a message is attached to that message."""
    data = render(
        interchange_segments(
            message_segments("M1", "IFTSTA:D:00B:UN", "BGM+23"),
            message_segments("M2", "IFTSTA:D:00B:UN", "NAD+CA+++MÜLLER"),
            syntax="UNOW:4",
        ),
        encoding="latin-1",
    )
    messages, reader = read(data)
    assert messages[0].findings == []
    assert codes(messages[1].findings) == [FindingCode.ENCODING_INVALID]
    assert reader.findings == []


def test_strict_mode_raises_typed_errors() -> None:
    """strict=True turns error findings about the envelope into typed exceptions."""
    truncated = (FIXTURES / "truncated_ifcsum.edi").read_bytes()
    with pytest.raises(TruncatedMessage) as caught:
        read(truncated, FindingPolicy(strict=True))
    assert caught.value.finding_code == "truncated_message"
    assert caught.value.segment_index == 8
    miscounted = render(message_segments("M1", "X:D:96A:UN", unt_count=9))
    read(miscounted, FindingPolicy(strict=True))  # a warning by default: no raise
    stricter = FindingPolicy(
        severities={FindingCode.UNT_COUNT_MISMATCH: Severity.ERROR}, strict=True
    )
    with pytest.raises(ControlCountMismatch):
        read(miscounted, stricter)
    with pytest.raises(ControlReferenceMismatch):
        read(
            render(message_segments("M1", "X:D:96A:UN", unt_reference="M2")),
            FindingPolicy(strict=True),
        )
    with pytest.raises(EnvelopeStructureError):
        read(render(["UNH+1+X:D:96A:UN", "UNT+2+1", "BGM+1"]), FindingPolicy(strict=True))


def test_severity_override_without_strict() -> None:
    """A policy can regrade a finding without raising."""
    data = render(message_segments("M1", "X:D:96A:UN", unt_count=9))
    (message,), _ = read(
        data, FindingPolicy(severities={FindingCode.UNT_COUNT_MISMATCH: Severity.ERROR})
    )
    assert message.findings[0].severity is Severity.ERROR


def test_finding_to_dict_shape() -> None:
    """The JSON shape of a finding is the one the CLI documents."""
    (message,), _ = read(render(message_segments("M1", "X:D:96A:UN", unt_count=9)))
    assert message.findings[0].to_dict() == {
        "severity": "warning",
        "code": "unt_count_mismatch",
        "message": "UNT says 9 segments, message 'M1' has 2",
        "segment_index": 1,
        "offset": 18,
        "count": 1,
    }
