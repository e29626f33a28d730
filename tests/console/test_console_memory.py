"""The console's reads in memory: the same figures as from Redis, and every view rendered
and tested without Redis, on a clock that moves only when told."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from tidegate.console import ConsoleConfig, MemoryReads, RedisReads, Users, create_app
from tidegate.console.access import Role
from tidegate.flow import Gate
from tidegate.flow.backends.memory import ManualClock
from tidegate.load import DeadLetter, DeadLetterQueue
from tidegate.load.depth import QueueDepth
from tidegate.load.parking import ParkingLot
from tidegate.load.quarantine import Quarantine, QuarantinedDocument
from tidegate.load.watermarks import BoardEntry, LoadBoard, LoadState, Watermarks

User = tuple[str, Role, str]

LETTERS = [
    DeadLetter(key=f"v-{n}", task="edi.customs.submit", reason="rejected: VGM missing")
    for n in range(3)
] + [DeadLetter(key="bl-1", task="edi.tos.push", reason="timeout", bl_number="MAEU1")]
SHED = QuarantinedDocument(
    key="pdf-1", document_class="BULK_BL_PDF", queue="bulk.documents", task="store"
)


def _entry(now_ms: float) -> BoardEntry:
    return BoardEntry(
        state=LoadState("edi.customs", depth=1200, reason="above_hwm", desired_workers=6),
        depth=QueueDepth("edi.customs", ready=1100, unacked=100),
        marks=Watermarks(hwm=1000, lwm=200),
        sampled_at_ms=now_ms,
        interval_s=5.0,
    )


def _without(rows: list[Any], *fields: str) -> list[Any]:
    return [replace(row, **dict.fromkeys(fields, 0)) for row in rows]


@pytest.mark.redis
def test_the_twin_reads_what_redis_reads(redis_client: redis.Redis, prefix: str) -> None:
    """One fleet state written through the real APIs to Redis and through the twin's
    writers to memory: every view gives the same rows (ages aside: the clocks differ by
    the time the writes took)."""
    seconds, micros = redis_client.time()
    twin = MemoryReads(clock=ManualClock(seconds * 1000 + micros / 1000))
    customs = Gate(redis_client, "customs", prefix=prefix)
    customs.configure(rate=2.0, burst=4, concurrency=3)
    customs.pause(90, "429 from the gateway")
    twin.configure_gate("customs", rate=2.0, burst=4, concurrency=3)
    twin.pause_gate("customs", 90, "429 from the gateway")
    Gate(redis_client, "tos", prefix=prefix).configure(rate=5.0)
    twin.configure_gate("tos", rate=5.0)
    board = LoadBoard(redis_client, prefix=prefix)
    board.publish([_entry(board.now_ms())])
    twin.publish([_entry(twin.clock.now_ms())])
    dlq = DeadLetterQueue(redis_client, prefix=prefix)
    for letter in LETTERS:
        dlq.add(letter)
        twin.add_letter(letter)
    Quarantine(redis_client, prefix=prefix).add(SHED)
    twin.add_quarantined(SHED)
    for _ in range(2):
        ParkingLot(redis_client, prefix=prefix).park({"task": "t"}, delay_s=60, reason="paused")
        twin.park(60)

    reads = RedisReads(redis_client, prefix=prefix, discover_every_s=0, gates=["customs", "tos"])
    names = reads.gate_names()
    assert names == twin.gate_names() == ["customs", "tos"]
    from_redis, from_memory = reads.gates(names), twin.gates(names)
    assert _without(from_redis, "paused_for_s") == _without(from_memory, "paused_for_s")
    assert from_redis[0].paused_for_s == pytest.approx(from_memory[0].paused_for_s, abs=5)
    assert _without(reads.queues(), "age_s") == _without(twin.queues(), "age_s")
    (letters, shed, lot), (m_letters, m_shed, m_lot) = reads.held_back(), twin.held_back()
    assert _without(letters, "oldest_age_s") == _without(m_letters, "oldest_age_s")
    assert _without(shed, "oldest_age_s") == _without(m_shed, "oldest_age_s")
    assert (lot.waiting, lot.moving) == (m_lot.waiting, m_lot.moving) == (2, 0)


def test_views_render_without_redis(make_users: Callable[..., Users], operator: User) -> None:
    """The whole page and each live view from the twin — a client to a port where no
    Redis listens proves nothing is read from one — on a clock moved by the test: the
    pause counts down, the charts show the admissions between two samples."""
    clock = ManualClock(1_800_000_000_000.0)
    twin = MemoryReads(clock=clock, gates=["customs"])
    twin.configure_gate("customs", rate=2.0, burst=4)
    twin.pause_gate("customs", 120, "gateway maintenance")
    twin.publish([_entry(clock.now_ms())])
    twin.add_letter(replace(LETTERS[0], payload={"args": ["SECRET-PAYLOAD"]}))
    twin.sample()
    clock.advance(5)
    twin.admit("customs", 10)  # 10 admissions in 5 s: 2 per second, at the limit
    twin.sample()
    nowhere = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.1)
    config = ConsoleConfig(users=make_users(), prefix="unused", history_every_s=0)
    name, _, secret = operator
    auth = {"Authorization": "Basic " + base64.b64encode(f"{name}:{secret}".encode()).decode()}
    with TestClient(create_app(nowhere, config, reads=twin)) as client:
        page = client.get("/", headers=auth)
        assert page.status_code == 200
        assert "Paused · 115 s left · gateway maintenance" in page.text
        assert "customs filings" in page.text
        assert "rejected: VGM missing" in page.text
        assert "SECRET-PAYLOAD" not in page.text
        charts = client.get("/live/charts", headers=auth).text
        assert 'data-field="admitted">2.0<' in charts
        assert "limit 2/s" in charts
        clock.advance(60)
        gates = client.get("/live/gates", headers=auth).text
        assert "Paused · 55 s left" in gates


def test_the_twin_never_keeps_a_payload() -> None:
    """A letter and a shed document handed over with their payload are kept without it."""
    twin = MemoryReads()
    twin.add_letter(replace(LETTERS[0], payload={"args": ["SECRET-PAYLOAD"]}))
    twin.add_quarantined(replace(SHED, payload={"pdf": "SECRET-PAYLOAD"}))
    assert "SECRET-PAYLOAD" not in repr(vars(twin))
    letters, shed, _ = twin.held_back()
    assert (letters[0].count, shed[0].count) == (1, 1)
    assert time.time() * 1000 - twin.clock.now_ms() < 60_000  # starts at the wall clock
