"""Safe acknowledgement, proven on the real process: ``SIGKILL`` between publish and ack.

``tidegate intake serve`` runs as a subprocess on a Redis of its own with
``TIDEGATE_INTAKE_FAULT`` set, so it kills itself (``SIGKILL``: no handler, no flush, no
answer) at that point of the first request. The sender sees its connection drop — no
acknowledgement — and sends again to the restarted service.
"""

from __future__ import annotations

import base64
import json
import signal
from pathlib import Path

import httpx
import pytest
import redis

from tidegate.harness.celery_fleet import Fleet, Pool
from tidegate.sim import CustomsSim

pytestmark = [pytest.mark.redis, pytest.mark.slow]

FAULT = "TIDEGATE_INTAKE_FAULT"


def _three_vermas(build) -> bytes:
    return build.interchange(build.vermas("1"), build.vermas("2"), build.vermas("3"))


def _post_until_killed(served, body: bytes) -> None:
    with pytest.raises(httpx.TransportError):
        httpx.post(f"{served.url}/interchanges", content=body, timeout=30)
    assert served.process.wait(timeout=30) == -signal.SIGKILL


def _unit_keys(client: redis.Redis, queue: str) -> list[str]:
    """The idempotency keys of the units waiting in a Redis broker queue."""
    keys = []
    for raw in client.lrange(queue, 0, -1):
        message = json.loads(raw)
        args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
        keys.append(args[0]["key"])
    return sorted(keys)


def test_killed_after_recording_before_the_ack_the_retry_is_a_duplicate_and_each_unit_lands_once(
    own_redis: str, tmp_path: Path, intake_server, build, until
) -> None:
    """Killed after the units are on the broker and the interchange is recorded, before
    the answer: the sender got nothing and sends again; the restarted service answers
    409 with code 26 and publishes nothing; a real Celery worker then delivers each of
    the three units to the simulated customs gateway exactly once."""
    client = redis.Redis.from_url(own_redis)
    body = _three_vermas(build)
    crashing = intake_server(own_redis, env={FAULT: "before_ack"})
    _post_until_killed(crashing, body)
    published = _unit_keys(client, "edi.customs")
    assert len(set(published)) == 3

    restarted = intake_server(own_redis)
    try:
        retry = httpx.post(f"{restarted.url}/interchanges", content=body, timeout=30)
    finally:
        restarted.stop()
    assert retry.status_code == 409
    assert retry.json()["status"] == "duplicate"
    assert "UCI+REF1+ACME:ZZZ+PORT:ZZZ+4+26'" in retry.json()["contrl"]
    assert _unit_keys(client, "edi.customs") == published

    with CustomsSim(rate=50.0, burst=10) as customs:
        env = {
            "TIDEGATE_REDIS_URL": own_redis,
            "TIDEGATE_CUSTOMS_URL": customs.url,
            "TIDEGATE_TOS_URL": customs.url,
            "TIDEGATE_CUSTOMS_RATE": "50",
            "TIDEGATE_CUSTOMS_BURST": "5",
        }
        fleet = Fleet(
            "tidegate.harness.vessel_app",
            [Pool("customs", ["edi.customs"], concurrency=2)],
            env=env,
            log_dir=tmp_path,
        )
        fleet.start()
        try:
            until(lambda: len(customs.accepted_keys()) >= 3, 60, "three units delivered")
        finally:
            # A warm shutdown: a unit still being worked on is finished (or given back).
            fleet.stop()
        accepted = customs.accepted_keys()
        stats = customs.stats(timeline=False)
    assert sorted(accepted) == published
    assert stats["duplicates"] == 0
    assert client.llen("edi.customs") == 0
    client.close()


def test_killed_after_publishing_before_recording_the_retry_waits_out_the_claim(
    own_redis: str, tmp_path: Path, intake_server, build, until
) -> None:
    """The narrower window: units on the broker, the interchange only claimed. The
    claim outlives the process (for its lease), so the retry is told 503 ``in_flight``
    with Retry-After — not accepted and published a second time."""
    client = redis.Redis.from_url(own_redis)
    body = _three_vermas(build)
    crashing = intake_server(own_redis, env={FAULT: "after_publish"})
    _post_until_killed(crashing, body)
    assert client.llen("edi.customs") == 3
    restarted = intake_server(own_redis)
    try:
        retry = httpx.post(f"{restarted.url}/interchanges", content=body, timeout=30)
    finally:
        restarted.stop()
    assert retry.status_code == 503
    assert (retry.json()["status"], retry.json()["reason"]) == ("retry", "in_flight")
    assert "retry-after" in retry.headers
    assert client.llen("edi.customs") == 3
    client.close()
