"""Reading one request's body: what is refused outright, and how errors are located."""

from __future__ import annotations

import pytest

from tidegate.edi.contrl import ErrorReport, SyntaxErrorCode
from tidegate.edi.errors import NotEdifactError
from tidegate.intake import NewlineTerminatedSegments, UnacceptableInterchange, read_interchange


def test_newline_separated_segments_are_rejected_naming_that_cause(build) -> None:
    """Without a single terminator the whole file would be one segment: the error says
    newlines are the only separator instead of a confusing syntax error."""
    body = build.interchange(build.vermas()).replace(b"'", b"\n")
    with pytest.raises(NewlineTerminatedSegments, match="separated by newlines only") as caught:
        read_interchange(body)
    assert caught.value.code == "newline_terminated_segments"


def test_newline_separation_is_recognised_behind_a_una_too(build) -> None:
    """The declared terminator is the one looked for."""
    body = b"UNA:+.? '\n" + build.interchange(build.vermas()).replace(b"'", b"\n")
    with pytest.raises(NewlineTerminatedSegments):
        read_interchange(body)


def test_terminated_segments_on_separate_lines_are_read(build) -> None:
    """One segment per line, each terminated, is ordinary EDIFACT."""
    body = build.interchange(build.vermas()).replace(b"'", b"'\r\n")
    reading = read_interchange(body)
    assert [m.identifier.type for m in reading.messages] == ["VERMAS"]
    assert not reading.messages[0].rejected


def test_one_interchange_per_request(build) -> None:
    """Two interchanges, or an interchange with bare messages, are refused whole."""
    two = build.interchange(build.vermas()) + build.interchange(build.vermas(), reference="R2")
    with pytest.raises(UnacceptableInterchange, match="2 interchange") as caught:
        read_interchange(two)
    assert caught.value.reason_code == "multiple_interchanges"
    mixed = build.interchange(build.vermas()) + build.bare(build.vermas("9"))
    with pytest.raises(UnacceptableInterchange, match="bare messages"):
        read_interchange(mixed)


def test_only_syntax_versions_1_to_4_are_taken(build) -> None:
    """A CONTRL can only be written for them (versions 1 and 2: test_syntax_versions)."""
    with pytest.raises(UnacceptableInterchange, match="syntax version '5'") as caught:
        read_interchange(build.interchange(build.vermas(), syntax="UNOA:5"))
    assert caught.value.reason_code == "unsupported_syntax_version"
    assert read_interchange(build.interchange(build.vermas(), syntax="UNOC:4")).header
    assert read_interchange(build.interchange(build.vermas(), syntax="UNOA:2")).header


def test_an_empty_body_and_a_non_edifact_body_are_refused() -> None:
    """Typed errors from the one tree, never an unhandled exception."""
    with pytest.raises(UnacceptableInterchange, match="empty"):
        read_interchange(b"  \r\n")
    with pytest.raises(NotEdifactError):
        read_interchange(b"%PDF-1.7 not an interchange")


def test_a_bad_check_digit_is_located_at_its_segment_and_element(build) -> None:
    """The EQD is the 4th segment of the message (UNH = 1); the container is element 2,
    component 1; the message is rejected and publishes nothing."""
    body = build.interchange(build.vermas(container="MSCU1234560"))
    (message,) = read_interchange(body).messages
    assert message.rejected
    assert message.units == ()
    assert message.error_codes == ("container_check_digit",)
    assert message.errors == (ErrorReport(SyntaxErrorCode.INVALID_VALUE, 4, None, 2, 1),)


def test_an_unt_reference_mismatch_is_a_service_segment_error(build) -> None:
    """Reported on the UCM (tag UNT, element 2), not as a UCS."""
    vermas = build.vermas()
    vermas[-1] = "UNT+7+99"
    (message,) = read_interchange(build.interchange(vermas)).messages
    assert message.errors == (ErrorReport(SyntaxErrorCode.REFERENCES_DO_NOT_MATCH, None, "UNT", 2),)


def test_an_unz_reference_mismatch_is_an_interchange_error(build) -> None:
    """The envelope error is on the reading, for the UCI."""
    body = build.interchange(build.vermas()).replace(b"UNZ+1+REF1", b"UNZ+1+OTHER")
    reading = read_interchange(body)
    assert reading.error_codes == ("interchange_reference_mismatch",)
    assert reading.errors == (ErrorReport(SyntaxErrorCode.REFERENCES_DO_NOT_MATCH, None, "UNZ", 2),)


def test_units_carry_idempotency_keys_stable_across_line_endings_and_the_manifest_shape(
    build,
) -> None:
    """The same interchange re-sent with other line endings gives the same keys; a
    manifest is one unit in the bulk path's shape, its consignments counted."""
    body = build.interchange(build.vermas(), build.ifcsum(bls=("BL1", "BL2", "BL3")))
    first = read_interchange(body)
    again = read_interchange(body.replace(b"'", b"'\n"))
    assert [u.key for u in first.units] == [u.key for u in again.units]
    assert len({u.key for u in first.units}) == 2
    vermas, manifest = first.units
    assert vermas.queue == "edi.customs"
    assert vermas.payload["body"].startswith("UNH+1+VERMAS")
    assert manifest.queue == "bulk.dispatch"
    assert manifest.payload["batch_id"] == manifest.key
    assert manifest.payload["consignments"] == 3
    assert manifest.payload["edifact"].startswith("UNH+2+IFCSUM")


def test_a_unit_under_the_senders_una_carries_that_una(build) -> None:
    """A worker reads the message on its own, so the separators travel with it."""
    body = build.interchange(build.vermas(), una="!*.? ~")
    (unit,) = read_interchange(body).units
    assert unit.payload["body"].startswith("UNA!*.? ~UNH*1*VERMAS!D")


def test_a_manifest_unit_carries_the_whole_message_for_the_bulk_worker(build) -> None:
    """The splitter takes a manifest's segments while it is read; the published text
    must still hold every consignment, so that bulk.dispatch carves the same B/Ls, and
    two manifests differing only in a consignment get different keys."""
    from tidegate.edi import Intake

    bls = [f"BL{i}" for i in range(40)]
    (unit,) = read_interchange(build.interchange(build.ifcsum(bls=bls))).units
    (result,) = Intake(unit.payload["edifact"].encode())
    assert [u.bl_number for u in result.units] == bls
    assert result.all_findings() == []
    other = read_interchange(build.interchange(build.ifcsum(bls=[*bls[:-1], "BLX"]))).units
    assert other[0].key != unit.key
