"""The CONTRL writer: what it reports, and that two independent readers read it back."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydifact.segmentcollection import Interchange as PydifactInterchange

from tidegate.edi import EnvelopeReader, MessageIdentifier, Severity
from tidegate.edi.contrl import (
    ContrlAction,
    ErrorReport,
    InterchangeReport,
    MessageReport,
    SyntaxErrorCode,
    is_contrl,
    write_contrl,
)
from tidegate.edi.syntax import Delimiters
from tidegate.errors import ConfigurationError

NOW = datetime(2026, 3, 4, 5, 6, tzinfo=UTC)
pydifact_warnings = pytest.mark.filterwarnings(
    "ignore::pydifact.exceptions.MissingImplementationWarning"
)


def _report(**changes: object) -> InterchangeReport:
    values: dict[str, object] = {
        "control_reference": "REF1",
        "sender": "ACME",
        "sender_qualifier": "ZZZ",
        "recipient": "PORT",
        "recipient_qualifier": "ZZZ",
        "syntax_identifier": "UNOC",
        "syntax_version": "3",
        "action": ContrlAction.ACKNOWLEDGED,
        "messages": (
            MessageReport(
                "1", MessageIdentifier("VERMAS", "D", "16A", "UN"), ContrlAction.ACKNOWLEDGED
            ),
            MessageReport(
                "2",
                MessageIdentifier("IFCSUM", "D", "96A", "UN"),
                ContrlAction.REJECTED,
                (
                    ErrorReport(SyntaxErrorCode.REFERENCES_DO_NOT_MATCH, None, "UNT", 2),
                    ErrorReport(SyntaxErrorCode.INVALID_VALUE, 5, None, 2, 1),
                ),
            ),
        ),
    }
    values.update(changes)
    return InterchangeReport(**values)  # type: ignore[arg-type]


def test_a_partly_rejected_interchange_gets_uci_7_and_a_ucm_per_message_down_to_the_element() -> (
    None
):
    """UCI 7; UCM 7 for the good message, UCM 4 with the UNT error for the bad one, and
    a UCS at the failing segment with a UCD naming element 2, component 1."""
    text = write_contrl(_report(), reference="C1", now=NOW)
    assert text == (
        "UNB+UNOC:3+PORT:ZZZ+ACME:ZZZ+260304:0506+C1'"
        "UNH+1+CONTRL:2:2:UN'"
        "UCI+REF1+ACME:ZZZ+PORT:ZZZ+7'"
        "UCM+1+VERMAS:D:16A:UN+7'"
        "UCM+2+IFCSUM:D:96A:UN+4+28+UNT+2'"
        "UCS+5+12'"
        "UCD+12+2:1'"
        "UNT+7+1'"
        "UNZ+1+C1'"
    )


def test_syntax_version_4_writes_a_four_digit_year_and_contrl_4_1() -> None:
    """Version 4 has CCYYMMDD in the UNB and the CONTRL message of version 4."""
    text = write_contrl(_report(syntax_version="4", messages=()), reference="C1", now=NOW)
    assert text.startswith("UNB+UNOC:4+PORT:ZZZ+ACME:ZZZ+20260304:0506+C1'UNH+1+CONTRL:4:1:UN'")


def test_a_duplicate_is_reported_on_the_uci_with_code_26() -> None:
    """Rejected as a whole: action 4, syntax error 26, no message reported."""
    report = _report(
        action=ContrlAction.REJECTED,
        error=ErrorReport(SyntaxErrorCode.DUPLICATE_DETECTED),
        messages=(),
    )
    text = write_contrl(report, reference="C1", now=NOW)
    assert "'UCI+REF1+ACME:ZZZ+PORT:ZZZ+4+26'UNT+3+1'" in text


def test_the_senders_una_is_honoured_and_values_are_escaped_with_its_release() -> None:
    """Under the sender's separators, a value holding one of them is released."""
    delimiters = Delimiters(component="!", element="*", release="#", terminator="~")
    report = _report(delimiters=delimiters, control_reference="A*B", messages=())
    text = write_contrl(report, reference="C1", now=NOW)
    assert text.startswith("UNA!*.# ~UNB*UNOC!3*PORT!ZZZ*ACME!ZZZ*260304!0506*C1~")
    assert "UCI*A#*B*ACME!ZZZ" in text
    assert "'" not in text
    assert "+" not in text


@pytest.mark.parametrize("version", ["1", "2", "3", "4"])
@pytest.mark.parametrize("delimiters", [Delimiters(), Delimiters("!", "*", ".", "#", " ", "~")])
@pydifact_warnings
def test_a_contrl_reads_back_through_tidegates_reader_and_pydifact(
    version: str, delimiters: Delimiters
) -> None:
    """Both readers see one CONTRL, addressed back to the sender, with every UCx segment;
    tidegate's envelope checks (counts, references) find nothing wrong with it."""
    text = write_contrl(
        _report(syntax_version=version, delimiters=delimiters), reference="C9", now=NOW
    )
    reader = EnvelopeReader(text.encode())
    messages = list(reader)
    assert [m.type for m in messages] == ["CONTRL"]
    errors = [f for m in messages for f in m.findings] + reader.findings
    assert [f for f in errors if f.severity is not Severity.INFO] == []
    (interchange,) = reader.interchanges
    assert (interchange.sender, interchange.recipient) == ("PORT", "ACME")
    assert interchange.closed
    assert interchange.control_reference == "C9"
    tags = [s.tag for s in messages[0].segments]
    assert tags == ["UNH", "UCI", "UCM", "UCM", "UCS", "UCD", "UNT"]

    parsed = PydifactInterchange.from_str(text)
    segments = list(parsed.segments)
    assert [s.tag for s in segments] == ["UNH", "UCI", "UCM", "UCM", "UCS", "UCD", "UNT"]
    assert segments[1].elements[:2] == ["REF1", ["ACME", "ZZZ"]]
    assert segments[5].elements == ["12", ["2", "1"]]
    assert parsed.sender == ["PORT", "ZZZ"]
    assert parsed.control_reference == "C9"


def test_an_unsupported_syntax_version_or_reference_is_refused() -> None:
    """Versions 1 to 4 only; a control reference of 1 to 14 characters."""
    with pytest.raises(ConfigurationError, match="syntax versions 1 to 4"):
        write_contrl(_report(syntax_version="5"), reference="C1", now=NOW)
    with pytest.raises(ConfigurationError, match="1 to 14"):
        write_contrl(_report(), reference="X" * 15, now=NOW)


def test_a_contrl_is_recognised_whatever_its_case() -> None:
    """The guard against answering a CONTRL with a CONTRL."""
    assert is_contrl(MessageIdentifier("CONTRL", "2", "2", "UN"))
    assert is_contrl(MessageIdentifier("contrl"))
    assert not is_contrl(MessageIdentifier("VERMAS"))
