"""The routing table: class, queue, sheddability, and no crash on odd types."""

from __future__ import annotations

import pytest

from tidegate.edi import (
    DEFAULT_ROUTES,
    UNROUTED_QUEUE,
    DocumentClass,
    FindingCode,
    Intake,
    MessageIdentifier,
    Route,
    classify,
)
from tidegate.edi.synthetic import message_segments, render


@pytest.mark.parametrize(
    ("message_type", "queue", "sheddable", "critical"),
    [
        ("IFCSUM", "bulk.dispatch", False, True),
        ("VERMAS", "edi.customs", False, True),
        ("CUSCAR", "edi.customs", False, True),
        ("COARRI", "edi.tos", False, False),
        ("CODECO", "edi.tos", False, False),
        ("BAPLIE", "edi.tos", False, False),
        ("IFTMIN", "edi.tos", False, False),
        ("IFTSTA", "edi.tos", True, False),
    ],
)
def test_table(message_type: str, queue: str, sheddable: bool, critical: bool) -> None:
    """Each known type has its queue and shedding decision from the one table."""
    result = classify(MessageIdentifier(message_type, "D", "96A", "UN"))
    assert result.document_class.name == message_type
    assert (result.queue, result.sheddable, result.document_class.critical) == (
        queue,
        sheddable,
        critical,
    )
    assert result.finding_code is None


def test_compliance_critical_classes_are_never_sheddable() -> None:
    """VERMAS and customs filings can never be shed, whatever the table says."""
    for route in DEFAULT_ROUTES:
        if route.message_type in {"VERMAS", "CUSCAR", "IFCSUM"}:
            assert route.document_class.critical
            assert not route.document_class.sheddable
    with pytest.raises(ValueError, match="critical and sheddable"):
        DocumentClass("BAD", "edi.customs", sheddable=True, critical=True)


def test_unknown_and_empty_types_get_their_own_class_with_a_reason() -> None:
    """No crash: OTHER on the unrouted queue, with the reason and a finding code."""
    unknown = classify(MessageIdentifier("PAORES", "93", "1", "IA"))
    assert unknown.document_class.name == "OTHER"
    assert unknown.queue == UNROUTED_QUEUE
    assert not unknown.sheddable
    assert "PAORES" in unknown.reason
    assert unknown.finding_code is FindingCode.UNKNOWN_MESSAGE_TYPE
    empty = classify(MessageIdentifier("", "D", "95B", "UN"))
    assert empty.document_class.name == "OTHER"
    assert empty.reason == "UNH carries no message type"
    assert empty.finding_code is FindingCode.EMPTY_MESSAGE_TYPE


def test_most_specific_route_wins() -> None:
    """A row with an association code beats the generic row for that type."""
    special = DocumentClass("IFTSTA_RAIL", "edi.rail", sheddable=False, critical=False)
    routes = (*DEFAULT_ROUTES, Route("IFTSTA", special, association="RAIL01"))
    rail = classify(MessageIdentifier("IFTSTA", "D", "00B", "UN", "RAIL01"), routes=routes)
    plain = classify(MessageIdentifier("IFTSTA", "D", "00B", "UN"), routes=routes)
    assert (rail.queue, plain.queue) == ("edi.rail", "edi.tos")
    assert rail.reason == "UNH type IFTSTA (association RAIL01)"


def test_intake_reports_the_empty_type_as_a_finding() -> None:
    """Through the intake, the classification's finding sits on the result."""
    (result,) = Intake(render(message_segments("1", ":D:95B:UN", "BGM+85")))
    assert result.classification.document_class.name == "OTHER"
    assert [f.code for f in result.findings] == [FindingCode.EMPTY_MESSAGE_TYPE]
    assert result.findings[0].segment_index == 0
