"""Extraction: VGMs, container movements, EQD containers and LOC codes."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from tidegate.edi import EventType, FindingCode, Intake, IntakeResult
from tidegate.edi.synthetic import message_segments, render

FIXTURES = Path(__file__).parent / "fixtures"


def results(data: bytes) -> list[IntakeResult]:
    return list(Intake(data))


def test_vermas_under_a_custom_una() -> None:
    """Container, weight with decimal comma, unit, method, party and signatory."""
    (result,) = results((FIXTURES / "una_custom_separators.edi").read_bytes())
    assert result.classification.queue == "edi.customs"
    first, second = result.extraction.vgm
    assert first.container is not None
    assert (first.container.normalised, first.container.valid) == ("MSCU1234566", True)
    assert (first.weight, first.weight_text, first.unit) == (Decimal("12345.5"), "12345,5", "KGM")
    assert first.method == "SM1"
    assert first.responsible_party == "ACME* SHIPPING ~ LOGISTICS"
    assert first.responsible_person == "JANE ROE"
    assert first.booking == "BK778899"
    assert second.container is not None
    assert second.container.normalised == "TGHU8865435"
    assert second.weight is None
    assert [f.code for f in result.extraction.findings] == [
        FindingCode.CONTAINER_SPACE,
        FindingCode.VGM_METHOD_MISSING,
        FindingCode.VGM_PARTY_MISSING,
        FindingCode.VGM_INVALID,
    ]
    assert first.to_dict()["weight"] == "12345.5"


def test_vermas_without_a_weight() -> None:
    """An equipment group with no MEA+VGM is an error finding, the container kept."""
    data = render(
        message_segments(
            "1", "VERMAS:D:16A:UN", "BGM+749+V1+9", "EQD+CN+CSQU3054383", "DOC+SM2:VGM:306"
        )
    )
    (result,) = results(data)
    (declaration,) = result.extraction.vgm
    assert declaration.weight is None
    assert declaration.method == "SM2"
    assert FindingCode.VGM_MISSING in [f.code for f in result.extraction.findings]
    assert [c.normalised for c in result.extraction.containers] == ["CSQU3054383"]


def test_coarri_loading_and_discharge() -> None:
    """BGM 46 is a loading report; B/L per container from RFF+BM."""
    coarri = next(
        r
        for r in results((FIXTURES / "two_interchanges_second_una.edi").read_bytes())
        if r.message.type == "COARRI"
    )
    events = coarri.extraction.events
    assert [(e.container.normalised, e.event, e.bl_number) for e in events] == [
        ("CSQU3054383", EventType.LOAD, "MAEU000000001"),
        ("MSCU1234566", EventType.LOAD, None),
    ]
    assert events[0].full_empty == "5"


def test_coarri_event_falls_back_to_the_equipment_status() -> None:
    """An unknown BGM code: EQD status 3 (import) means discharged, 2 (export) loaded."""
    data = render(
        message_segments(
            "1",
            "COARRI:D:23A:UN:ITG10",
            "BGM+119++9",
            "EQD+CN+CSQU3054383+:102:5++3+5",
            "RFF+BM:BL1",
            "EQD+CN+MSCU1234566+:102:5++2+5",
        )
    )
    (result,) = results(data)
    assert [e.event for e in result.extraction.events] == [EventType.DISCHARGE, EventType.LOAD]
    assert result.extraction.findings == ()


def test_codeco_gate_in_and_gate_out() -> None:
    """BGM 34 is gate-in, 36 gate-out; booking from RFF+BN."""
    gate_in, gate_out = results((FIXTURES / "groups_codeco.edi").read_bytes())
    assert [(e.event, e.booking) for e in gate_in.extraction.events] == [
        (EventType.GATE_IN, "BOOK9")
    ]
    assert [(e.event, e.full_empty) for e in gate_out.extraction.events] == [
        (EventType.GATE_OUT, "4")
    ]


def test_codeco_unknown_report_and_header_booking() -> None:
    """An unknown BGM code is one finding per message; the header booking applies."""
    data = render(
        message_segments(
            "1",
            "CODECO:D:00B:UN:SMDG21",
            "BGM+109+800255846+9+AB",
            "RFF+BN:800255846",
            "EQD+CN+CSQU3054383+4532:102:5+2+2+5",
            "EQD+CN+MSCU1234566+4532:102:5+2+2+5",
        )
    )
    (result,) = results(data)
    assert [(e.event, e.booking) for e in result.extraction.events] == [
        (EventType.UNKNOWN, "800255846"),
        (EventType.UNKNOWN, "800255846"),
    ]
    assert [f.code for f in result.extraction.findings] == [FindingCode.EVENT_UNKNOWN]


def test_containers_and_locations_in_other_classes() -> None:
    """Any class: EQD+CN containers validated, port LOCs shape-checked, others skipped."""
    data = render(
        message_segments(
            "1",
            "BAPLIE:D:95B:UN:SMDG20",
            "LOC+5+USLGB:139:6",
            "LOC+147+0780690::5",
            "LOC+80+SG:139",
            "LOC+9+ AUMEL:139:6",
            "LOC+11+:139",
            "EQD+CN+CBHU1234567+4200",
            "EQD+SW+    1",
        )
    )
    (result,) = results(data)
    containers = result.extraction.containers
    assert [(c.normalised, c.valid) for c in containers] == [("CBHU1234567", False)]
    assert [(f.code, f.segment_index) for f in result.extraction.findings] == [
        (FindingCode.LOCODE_SHAPE, 4),
        (FindingCode.CONTAINER_CHECK_DIGIT, 6),
    ]


def test_all_findings_are_merged_once_in_stream_order() -> None:
    """IntakeResult.all_findings deduplicates what message, units and extraction share."""
    (result,) = results((FIXTURES / "ifcsum_bl_sources.edi").read_bytes())
    findings = result.all_findings()
    keys = [(f.code, f.segment_index) for f in findings]
    assert len(keys) == len(set(keys))
    assert [f.segment_index for f in findings] == sorted(f.segment_index or 0 for f in findings)
    assert [(c.normalised, c.valid) for c in result.extraction.containers] == [
        ("MSCU1234566", True),
        ("CSQU3054383", True),
        ("CBHU1234567", False),
    ]
