"""Quarantine replays that cannot double up, against a real Redis broker.

A document is claimed for one replayer atomically (``lease_claim.lua``); a second
replay skips what the first holds, says how many, and takes the later ones.
"""

from __future__ import annotations

import base64
import io
import json
import threading
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from tidegate._redis import client_from_url
from tidegate.cli.monitor import build_replay_admission
from tidegate.cli.quarantine import quarantine
from tidegate.load.quarantine import Quarantine, QuarantinedDocument
from tidegate.logging import configure

pytestmark = pytest.mark.redis


def _shed(store: Quarantine, queue: str, count: int) -> list[str]:
    keys = [f"k{n:02d}" for n in range(count)]
    for key in keys:
        store.add(
            QuarantinedDocument(key, "BULK_BL_PDF", queue, "bulk.documents.store", {"n": key})
        )
    return keys


def _queued(client: redis.Redis, queue: str) -> list[str]:
    """The ``n`` of every message on ``queue`` (kombu's JSON body, base64)."""
    return [
        json.loads(base64.b64decode(json.loads(raw)["body"]))[0][0]["n"]
        for raw in client.lrange(queue, 0, -1)
    ]


def test_cli_replay_while_another_holds_documents_skips_them_and_says_so(
    redis_client: redis.Redis, redis_url: str, prefix: str, queues: dict[str, str]
) -> None:
    """Issue #11.3 for the quarantine: the second replay reports what it skipped."""
    bulk = queues["bulk"]
    store = Quarantine(redis_client, prefix=prefix)
    _shed(store, bulk, 5)
    in_flight = store.claim(bulk, 2)  # a first replay, still queueing these

    configure(level="INFO", stream=io.StringIO())
    result = CliRunner().invoke(
        quarantine,
        ["replay", "--prefix", prefix, "--queue", bulk, "--redis-url", redis_url],
    )
    report = json.loads(result.output)

    assert result.exit_code == 0, result.output
    assert (report["replayed"], report["skipped"]) == (3, 2)
    assert report["queues"][bulk]["skipped"] == 2
    assert sorted(_queued(redis_client, bulk)) == ["k02", "k03", "k04"]
    assert [d.key for d in in_flight] == ["k00", "k01"]


def test_two_replays_started_at_once_queue_every_document_exactly_once(
    redis_url: str, redis_client: redis.Redis, prefix: str, queues: dict[str, str]
) -> None:
    """Two admissions, two clients, one barrier (a guard: the claim was atomic before too)."""
    bulk = queues["bulk"]
    keys = _shed(Quarantine(redis_client, prefix=prefix), bulk, 30)
    start = threading.Barrier(2)
    reports: list[Any] = []

    def run() -> None:
        client = client_from_url(redis_url)
        try:
            admission = build_replay_admission(
                client, redis_url, [bulk], prefix=prefix, sender="celery"
            )
            start.wait(timeout=10)
            for _ in range(6):
                reports.append(admission.replay(bulk, 5, force=True))
        finally:
            client.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert sorted(_queued(redis_client, bulk)) == keys
    assert sum(r.replayed for r in reports) == 30
    assert len(Quarantine(redis_client, prefix=prefix)) == 0
