"""The HTTP app: the ASGI test client against real Redis and a real Celery producer."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis
from pydifact.segmentcollection import Interchange as PydifactInterchange
from starlette.testclient import TestClient

from tidegate.edi import Route
from tidegate.intake import (
    AdmissionPublisher,
    ApiKeys,
    IntakePipeline,
    Limits,
    RedisDuplicates,
    create_app,
    hash_key,
)
from tidegate.load.admission import Admission

pytestmark = [
    pytest.mark.redis,
    pytest.mark.filterwarnings("ignore::pydifact.exceptions.MissingImplementationWarning"),
]

URL = "/interchanges"


@pytest.fixture
def pipeline(
    redis_client: redis.Redis, prefix: str, admission: Admission, routes: tuple[Route, ...]
) -> IntakePipeline:
    return IntakePipeline(
        duplicates=RedisDuplicates(redis_client, prefix=prefix),
        publisher=AdmissionPublisher(admission),
        routes=routes,
        retry_after_s=11,
    )


@pytest.fixture
def client(pipeline: IntakePipeline) -> Iterator[TestClient]:
    with TestClient(create_app(pipeline, allow_anonymous=True)) as test_client:
        yield test_client


def test_an_interchange_is_accepted_after_its_units_are_on_the_broker(
    client: TestClient, build, redis_client: redis.Redis, queue_of: Callable[[str], str]
) -> None:
    """202 with the CONTRL and the summary; by then each unit is in its broker queue."""
    response = client.post(URL, content=build.interchange(build.vermas(), build.ifcsum()))
    assert response.status_code == 202
    body = response.json()
    assert body["status"] == "accepted"
    assert body["units"] == 2
    assert body["interchange"] == {
        "sender": "ACME",
        "recipient": "PORT",
        "control_reference": "REF1",
        "syntax": "UNOC:3",
    }
    assert redis_client.llen(queue_of("edi.customs")) == 1
    assert redis_client.llen(queue_of("bulk.dispatch")) == 1
    segments = list(PydifactInterchange.from_str(body["contrl"]).segments)
    assert [s.tag for s in segments] == ["UNH", "UCI", "UCM", "UCM", "UNT"]
    assert segments[1].elements[3] == "8"


def test_a_repeated_interchange_is_409_with_code_26_and_nothing_more_published(
    client: TestClient, build, redis_client: redis.Redis, queue_of: Callable[[str], str]
) -> None:
    """The duplicate window lives in Redis: the second post publishes nothing."""
    body = build.interchange(build.vermas())
    assert client.post(URL, content=body).status_code == 202
    repeat = client.post(URL, content=body)
    assert repeat.status_code == 409
    assert repeat.json()["status"] == "duplicate"
    assert "UCI+REF1+ACME:ZZZ+PORT:ZZZ+4+26'" in repeat.json()["contrl"]
    assert redis_client.llen(queue_of("edi.customs")) == 1


def test_above_the_hwm_the_sender_gets_503_with_retry_after_and_nothing_is_published(
    client: TestClient, build, redis_client: redis.Redis, queue_of: Callable[[str], str]
) -> None:
    """The customs queue holds 6 > HWM 5: the VERMAS would go there, so neither it nor
    the manifest (another queue) is published; the retry is not a duplicate."""
    customs = queue_of("edi.customs")
    redis_client.lpush(customs, *[b"backlog"] * 6)
    body = build.interchange(build.vermas(), build.ifcsum())
    response = client.post(URL, content=body)
    assert response.status_code == 503
    assert response.headers["retry-after"] == "11"
    assert response.json()["status"] == "retry"
    assert response.json()["contrl"] is None
    assert redis_client.llen(customs) == 6
    assert redis_client.llen(queue_of("bulk.dispatch")) == 0


def test_a_rejected_interchange_is_400_with_its_contrl(client: TestClient, build) -> None:
    """A bad check digit: UCI 4, the UCS at the EQD, the UCD at element 2."""
    response = client.post(URL, content=build.interchange(build.vermas(container="MSCU1234560")))
    assert response.status_code == 400
    assert response.json()["status"] == "rejected"
    assert "UCS+4+12'UCD+12+2:1'" in response.json()["contrl"]


def test_newline_separated_segments_are_400_naming_the_cause(client: TestClient, build) -> None:
    """The error code and message say what is wrong with the file."""
    response = client.post(URL, content=build.interchange(build.vermas()).replace(b"'", b"\n"))
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "newline_terminated_segments"
    assert "newlines only" in error["message"]


def test_a_bare_message_is_accepted_without_contrl_and_says_so(
    client: TestClient, build, redis_client: redis.Redis, queue_of: Callable[[str], str]
) -> None:
    """No UNB: published, but no duplicate check and no CONTRL."""
    response = client.post(URL, content=build.bare(build.vermas()))
    assert response.status_code == 202
    body = response.json()
    assert body["contrl"] is None
    assert body["interchange"] is None
    assert "no duplicate detection" in body["note"]
    assert redis_client.llen(queue_of("edi.customs")) == 1


def _keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.json"
    clients = [{"name": "acme", "key_sha256": hash_key("acme-secret"), "senders": ["ACME"]}]
    path.write_text(json.dumps({"clients": clients}))
    return path


def test_api_keys_are_required_and_a_client_sends_only_for_its_senders(
    pipeline: IntakePipeline, build, tmp_path: Path
) -> None:
    """401 without or with an unknown key; 403 for another sender id; 202 otherwise."""
    app = create_app(pipeline, keys=ApiKeys.from_file(_keys_file(tmp_path)))
    with TestClient(app) as test_client:
        body = build.interchange(build.vermas())
        assert test_client.post(URL, content=body).status_code == 401
        wrong = {"Authorization": "Bearer guessed"}
        assert test_client.post(URL, content=body, headers=wrong).status_code == 401
        good = {"Authorization": "Bearer acme-secret"}
        other = build.interchange(build.vermas(), sender="OTHER")
        refused = test_client.post(URL, content=other, headers=good)
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "sender_not_permitted"
        assert test_client.post(URL, content=body, headers=good).status_code == 202


def _call(app: Any, headers: list[tuple[bytes, bytes]], receive: Any) -> tuple[int, Any]:
    """One raw ASGI request; returns the status and the JSON body."""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": URL,
        "raw_path": URL.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 80),
    }
    anyio.run(app, scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, json.loads(body)


def test_a_1_gb_content_length_is_refused_without_reading_the_body(
    pipeline: IntakePipeline,
) -> None:
    """413 from the header alone: the app never asks for a byte of the body."""
    app = create_app(pipeline, allow_anonymous=True, limits=Limits(max_body_bytes=1000))

    async def receive() -> dict[str, Any]:
        raise AssertionError("the body was read")

    status, body = _call(app, [(b"content-length", str(1 << 30).encode())], receive)
    assert status == 413
    assert body["error"]["code"] == "body_too_large"


def test_a_body_without_content_length_is_cut_off_at_the_limit(pipeline: IntakePipeline) -> None:
    """A chunked upload is read only until it passes the limit: 413 after 11 of 100
    chunks of 100 bytes, with a 1000-byte limit."""
    app = create_app(pipeline, allow_anonymous=True, limits=Limits(max_body_bytes=1000))
    taken = 0

    async def receive() -> dict[str, Any]:
        nonlocal taken
        taken += 1
        return {"type": "http.request", "body": b"x" * 100, "more_body": taken < 100}

    status, _ = _call(app, [(b"transfer-encoding", b"chunked")], receive)
    assert status == 413
    assert taken == 11


def test_a_stalled_upload_is_408(pipeline: IntakePipeline) -> None:
    """A sender that stops sending does not hold the request past the read timeout."""
    app = create_app(pipeline, allow_anonymous=True, limits=Limits(read_timeout_s=0.05))
    chunks = 0

    async def receive() -> dict[str, Any]:
        nonlocal chunks
        chunks += 1
        if chunks > 1:
            await anyio.sleep_forever()
        return {"type": "http.request", "body": b"UNB+UNOC:3", "more_body": True}

    status, body = _call(app, [], receive)
    assert status == 408
    assert body["error"]["code"] == "upload_timeout"


def test_the_app_refuses_to_start_without_keys_or_anonymous(pipeline: IntakePipeline) -> None:
    """No silent open door."""
    from tidegate.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="API keys"):
        create_app(pipeline)


def test_a_unit_above_the_payload_limit_refuses_the_whole_interchange_before_publishing(
    client: TestClient,
    build,
    admission: Admission,
    redis_client: redis.Redis,
    queue_of: Callable[[str], str],
) -> None:
    """The VERMAS fits, the manifest does not: 413 and neither is on the broker (no
    half-published interchange), and the claim is dropped for the split-up retry."""
    admission.max_payload_bytes = 600
    bls = [f"BL{i}" for i in range(40)]
    response = client.post(URL, content=build.interchange(build.vermas(), build.ifcsum(bls=bls)))
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "unit_too_large"
    assert redis_client.llen(queue_of("edi.customs")) == 0
    admission.max_payload_bytes = 1 << 20
    retry = client.post(URL, content=build.interchange(build.vermas(), build.ifcsum(bls=bls)))
    assert retry.status_code == 202


def test_a_sheddable_document_is_quarantined_once_its_queue_sheds_instead_of_503(
    client: TestClient,
    build,
    admission: Admission,
    redis_client: redis.Redis,
    queue_of: Callable[[str], str],
) -> None:
    """IFTSTA may wait: while its queue is merely above HWM the sender is told to retry;
    once overload is sustained (shed after 3 samples) the admission quarantines it,
    durably, and the sender gets its CONTRL instead of 503s for the whole surge."""
    tos = queue_of("edi.tos")
    redis_client.lpush(tos, *[b"backlog"] * 6)
    body = build.interchange(["UNH+1+IFTSTA:D:00B:UN", "BGM+23+ST1+9", "UNT+3+1"])
    assert client.post(URL, content=body).status_code == 503
    assert client.post(URL, content=body).status_code == 503
    accepted = client.post(URL, content=body)
    assert accepted.status_code == 202
    assert accepted.json()["status"] == "accepted"
    assert redis_client.llen(tos) == 6
    assert admission.quarantine.stats()["by_queue"] == {tos: 1}
