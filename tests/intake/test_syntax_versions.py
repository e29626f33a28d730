"""Syntax versions 1 and 2: most interchanges in the wild still declare them.

They are read like versions 3 and 4 and answered with a CONTRL in the sender's own
syntax version (its UNB says ``UNOA:2`` back), which reads back through tidegate's
reader and through pydifact.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis
from pydifact.segmentcollection import Interchange as PydifactInterchange
from starlette.testclient import TestClient

from tidegate.edi import EnvelopeReader, Route, Severity
from tidegate.intake import (
    AdmissionPublisher,
    Claim,
    IntakePipeline,
    RedisDuplicates,
    Status,
    UnacceptableInterchange,
    create_app,
    decide,
    read_interchange,
)
from tidegate.load.admission import Admission

NOW = datetime(2026, 3, 4, 5, 6, tzinfo=UTC)
pydifact_warnings = pytest.mark.filterwarnings(
    "ignore::pydifact.exceptions.MissingImplementationWarning"
)


def _contrl(body: bytes, claim: Claim = Claim.NEW) -> str:
    decision = decide(
        read_interchange(body),
        claim=claim,
        saturated=frozenset(),
        contrl_reference="CTL1",
        now=NOW,
        retry_after_s=5,
    )
    assert decision.contrl is not None
    return decision.contrl


@pytest.mark.parametrize("syntax", ["UNOA:1", "UNOA:2", "UNOB:1", "UNOB:2"])
@pydifact_warnings
def test_a_version_1_or_2_interchange_gets_a_contrl_in_its_own_syntax(build, syntax: str) -> None:
    """The CONTRL's UNB repeats the sender's syntax identifier and version, with a
    six-digit date; its UNH names CONTRL 2:2 (the CONTRL the pre-1997 syntax versions
    know); both readers see the UCI answering the sender's interchange."""
    body = build.interchange(build.vermas(), build.ifcsum(), syntax=syntax)
    reading = read_interchange(body)
    assert reading.header is not None
    assert reading.header.syntax_version == syntax[-1]
    text = _contrl(body)
    assert text.startswith(f"UNB+{syntax}+PORT:ZZZ+ACME:ZZZ+260304:0506+CTL1'")
    assert "UNH+1+CONTRL:2:2:UN'" in text

    reader = EnvelopeReader(text.encode("latin-1"))
    messages = list(reader)
    assert [m.type for m in messages] == ["CONTRL"]
    problems = [f for m in messages for f in m.findings] + reader.findings
    assert [f for f in problems if f.severity is not Severity.INFO] == []
    (interchange,) = reader.interchanges
    assert interchange.syntax_version == syntax[-1]
    assert (interchange.sender, interchange.recipient) == ("PORT", "ACME")

    parsed = PydifactInterchange.from_str(text)
    segments = list(parsed.segments)
    assert [s.tag for s in segments] == ["UNH", "UCI", "UCM", "UCM", "UNT"]
    assert segments[1].elements[0] == "REF1"
    assert segments[1].elements[3] == "8"
    assert parsed.syntax_identifier == (syntax[:4], int(syntax[-1]))


@pydifact_warnings
def test_a_version_2_duplicate_is_answered_with_code_26_in_version_2(build) -> None:
    """The duplicate answer is a CONTRL too, in the same syntax version."""
    text = _contrl(build.interchange(build.vermas(), syntax="UNOA:2"), Claim.DUPLICATE)
    assert text.startswith("UNB+UNOA:2+")
    assert "UCI+REF1+ACME:ZZZ+PORT:ZZZ+4+26'" in text
    assert [s.tag for s in PydifactInterchange.from_str(text).segments][1] == "UCI"


def test_a_version_2_interchange_with_a_bad_message_points_at_it(build) -> None:
    """Error location works as in version 3: a wrong check digit in the VERMAS is a UCM 4
    with its UCS/UCD, the manifest beside it is acknowledged, the UCI says partly."""
    body = build.interchange(
        build.vermas("1", container="MSCU1234560"), build.ifcsum("2"), syntax="UNOB:2"
    )
    text = _contrl(body)
    assert text.startswith("UNB+UNOB:2+")
    assert "UCI+REF1+ACME:ZZZ+PORT:ZZZ+7'" in text
    assert "UCM+1+VERMAS:D:16A:UN:SMDG10+4'UCS+4+12'UCD+12+2:1'" in text
    assert "UCM+2+IFCSUM:D:96A:UN+7'" in text


def test_syntax_versions_outside_1_to_4_are_still_refused(build) -> None:
    """No CONTRL can be written for a version the standard does not have."""
    for syntax in ("UNOA:5", "UNOA:X"):
        with pytest.raises(UnacceptableInterchange) as caught:
            read_interchange(build.interchange(build.vermas(), syntax=syntax))
        assert caught.value.reason_code == "unsupported_syntax_version"


@pytest.fixture
def client(
    redis_client: redis.Redis, prefix: str, admission: Admission, routes: tuple[Route, ...]
) -> Iterator[TestClient]:
    pipeline = IntakePipeline(
        duplicates=RedisDuplicates(redis_client, prefix=prefix),
        publisher=AdmissionPublisher(admission),
        routes=routes,
        retry_after_s=11,
    )
    with TestClient(create_app(pipeline, allow_anonymous=True)) as test_client:
        yield test_client


@pytest.mark.redis
@pydifact_warnings
def test_a_version_2_interchange_posted_to_the_front_door_is_accepted(
    client: TestClient, build, redis_client: redis.Redis, queue_of
) -> None:
    """202, the units on the broker, the CONTRL in version 2; a resend is 409."""
    body = build.interchange(build.vermas(), build.ifcsum(), syntax="UNOA:2")
    response = client.post("/interchanges", content=body)
    assert response.status_code == 202, response.text
    payload = response.json()
    assert payload["status"] == "accepted"
    assert payload["interchange"]["syntax"] == "UNOA:2"
    assert redis_client.llen(queue_of("edi.customs")) == 1
    assert redis_client.llen(queue_of("bulk.dispatch")) == 1
    assert payload["contrl"].startswith("UNB+UNOA:2+PORT:ZZZ+ACME:ZZZ+")
    assert PydifactInterchange.from_str(payload["contrl"]).syntax_identifier == ("UNOA", 2)
    assert client.post("/interchanges", content=body).status_code == 409


FIXTURES = Path(__file__).parent.parent / "edi" / "fixtures"


@pytest.mark.parametrize(
    ("name", "syntax"),
    [("syntax2_unoa_codeco.edi", "UNOA:2"), ("syntax1_unob_iftsta.edi", "UNOB:1")],
)
@pydifact_warnings
def test_the_version_1_and_2_fixtures_are_acknowledged_in_their_own_version(
    name: str, syntax: str
) -> None:
    """The project's own samples (test_contrl_samples reads every CONTRL back): each is
    accepted whole, every message acknowledged, in the sender's syntax."""
    body = (FIXTURES / name).read_bytes()
    decision = decide(
        read_interchange(body),
        claim=Claim.NEW,
        saturated=frozenset(),
        contrl_reference="CTL1",
        now=NOW,
        retry_after_s=5,
    )
    assert decision.status is Status.ACCEPTED
    assert decision.contrl is not None
    tags = [s.tag for s in PydifactInterchange.from_str(decision.contrl).segments]
    assert tags.count("UCM") == len(decision.publish) >= 1
    assert PydifactInterchange.from_str(decision.contrl).syntax_identifier == (
        syntax[:4],
        int(syntax[-1]),
    )
