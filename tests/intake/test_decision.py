"""The pure decision: every row of its table, without Redis or a broker."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tidegate.intake import Claim, Status, decide, read_interchange
from tidegate.intake.decision import BARE_NOTE

NOW = datetime(2026, 3, 4, 5, 6, tzinfo=UTC)


def _decide(body: bytes, claim: Claim = Claim.NEW, saturated: frozenset[str] = frozenset()):
    return decide(
        read_interchange(body),
        claim=claim,
        saturated=saturated,
        contrl_reference="C1",
        now=NOW,
        retry_after_s=17,
    )


def test_an_acceptable_interchange_is_published_whole_and_acknowledged(build) -> None:
    """202, UCI 8, UCM 7 per message, every unit to publish, the claim to be recorded."""
    decision = _decide(build.interchange(build.vermas(), build.ifcsum()))
    assert decision.status is Status.ACCEPTED
    assert decision.http_status == 202
    assert [u.queue for u in decision.publish] == ["edi.customs", "bulk.dispatch"]
    assert decision.record
    assert not decision.release
    assert "UCI+REF1+ACME:ZZZ+PORT:ZZZ+8'" in decision.contrl
    assert decision.contrl.count("UCM+") == 2
    assert "+7'" in decision.contrl
    assert decision.body["status"] == "accepted"
    assert decision.body["units"] == 2
    assert decision.body["contrl"] == decision.contrl
    assert decision.body["interchange"]["control_reference"] == "REF1"


def test_a_bad_message_is_rejected_and_the_others_published(build) -> None:
    """202 partly_rejected, UCI 7, the bad message's UCM 4 with its UCS/UCD; only the
    good message's unit is published."""
    body = build.interchange(build.vermas("1", container="MSCU1234560"), build.ifcsum("2"))
    decision = _decide(body)
    assert decision.status is Status.PARTLY_REJECTED
    assert decision.http_status == 202
    assert [u.queue for u in decision.publish] == ["bulk.dispatch"]
    assert "UCI+REF1+ACME:ZZZ+PORT:ZZZ+7'" in decision.contrl
    assert "UCM+1+VERMAS:D:16A:UN:SMDG10+4'UCS+4+12'UCD+12+2:1'" in decision.contrl
    assert "UCM+2+IFCSUM:D:96A:UN+7'" in decision.contrl
    assert [m["action"] for m in decision.body["messages"]] == ["rejected", "accepted"]


def test_every_message_bad_is_a_rejection_with_nothing_published(build) -> None:
    """400 rejected, UCI 4; the claim is dropped so a corrected copy can be sent."""
    body = build.interchange(build.vermas("1", container="MSCU1234560"))
    decision = _decide(body)
    assert decision.status is Status.REJECTED
    assert decision.http_status == 400
    assert decision.publish == ()
    assert decision.release
    assert not decision.record
    assert "UCI+REF1+ACME:ZZZ+PORT:ZZZ+4'" in decision.contrl


def test_an_envelope_error_rejects_every_message(build) -> None:
    """A UNZ naming another reference: UCI 4 with error 28 on UNZ element 2."""
    body = build.interchange(build.vermas()).replace(b"UNZ+1+REF1", b"UNZ+1+OTHER")
    decision = _decide(body)
    assert decision.status is Status.REJECTED
    assert decision.publish == ()
    assert "UCI+REF1+ACME:ZZZ+PORT:ZZZ+4+28+UNZ+2'UCM+1+VERMAS:D:16A:UN:SMDG10+4'" in (
        decision.contrl
    )


def test_an_interchange_without_messages_is_rejected_as_empty(build) -> None:
    """Error 32, lower level empty."""
    decision = _decide(build.interchange())
    assert decision.status is Status.REJECTED
    assert "UCI+REF1+ACME:ZZZ+PORT:ZZZ+4+32'" in decision.contrl


def test_a_duplicate_is_answered_409_with_code_26_and_nothing_published(build) -> None:
    """The claim is neither recorded again nor released: it is the first copy's."""
    decision = _decide(build.interchange(build.vermas()), claim=Claim.DUPLICATE)
    assert decision.status is Status.DUPLICATE
    assert decision.http_status == 409
    assert decision.publish == ()
    assert not decision.record
    assert not decision.release
    assert "UCI+REF1+ACME:ZZZ+PORT:ZZZ+4+26'UNT+3+1'" in decision.contrl


@pytest.mark.parametrize(
    ("claim", "saturated", "reason"),
    [
        (Claim.IN_FLIGHT, frozenset(), "in_flight"),
        (Claim.NEW, frozenset({"bulk.dispatch"}), "saturated"),
    ],
)
def test_a_retry_publishes_nothing_and_sends_no_contrl(
    build, claim: Claim, saturated: frozenset[str], reason: str
) -> None:
    """503 with Retry-After; one saturated queue holds back the units of every other
    queue too, so the interchange is never half-published."""
    decision = _decide(build.interchange(build.vermas(), build.ifcsum()), claim, saturated)
    assert decision.status is Status.RETRY
    assert decision.http_status == 503
    assert decision.reason == reason
    assert decision.retry_after_s == 17
    assert decision.publish == ()
    assert decision.contrl is None
    assert decision.body["retry_after_s"] == 17


def test_saturation_of_a_queue_no_unit_goes_to_does_not_hold_back(build) -> None:
    """Only the queues of this interchange's units count."""
    decision = _decide(build.interchange(build.vermas()), saturated=frozenset({"edi.tos"}))
    assert decision.status is Status.ACCEPTED


def test_a_rejected_interchange_is_answered_even_when_saturated(build) -> None:
    """Nothing would be published, so there is nothing to hold back."""
    body = build.interchange(build.vermas("1", container="MSCU1234560"))
    decision = _decide(body, saturated=frozenset({"edi.customs"}))
    assert decision.status is Status.REJECTED


def test_bare_messages_are_accepted_without_contrl_and_say_so(build) -> None:
    """No UNB: no duplicate check, no CONTRL, and the JSON says why."""
    decision = _decide(build.bare(build.vermas()), claim=Claim.NOT_CHECKED)
    assert decision.status is Status.ACCEPTED
    assert len(decision.publish) == 1
    assert decision.contrl is None
    assert decision.body["contrl"] is None
    assert decision.body["interchange"] is None
    assert decision.body["note"] == BARE_NOTE


def test_a_contrl_is_never_answered_with_a_contrl(build) -> None:
    """An interchange of CONTRL messages is taken, but gets no CONTRL back."""
    contrl = ["UNH+1+CONTRL:2:2:UN", "UCI+X1+PORT:ZZZ+ACME:ZZZ+8", "UNT+3+1"]
    decision = _decide(build.interchange(contrl))
    assert decision.status is Status.ACCEPTED
    assert decision.contrl is None


@pytest.mark.filterwarnings("ignore::pydifact.exceptions.MissingImplementationWarning")
def test_the_contrl_answers_a_version_4_interchange_under_the_senders_una(build) -> None:
    """End to end from the sender's bytes: CONTRL 4.1 with a CCYYMMDD date, written with
    the sender's separators, readable by tidegate and by pydifact."""
    from pydifact.segmentcollection import Interchange as PydifactInterchange

    from tidegate.edi import EnvelopeReader

    body = build.interchange(build.vermas(), syntax="UNOC:4", una="!*.? ~")
    contrl = _decide(body).contrl
    assert contrl.startswith("UNA!*.? ~UNB*UNOC!4*PORT!ZZZ*ACME!ZZZ*20260304!0506*C1~")
    assert "UNH*1*CONTRL!4!1!UN~UCI*REF1*ACME!ZZZ*PORT!ZZZ*8~" in contrl
    (message,) = EnvelopeReader(contrl.encode())
    assert message.type == "CONTRL"
    assert message.findings == []
    tags = [s.tag for s in PydifactInterchange.from_str(contrl).segments]
    assert tags == ["UNH", "UCI", "UCM", "UNT"]
