"""The live views' reads: the right figures, in one pipelined round trip per view.

Round trips are counted by a client whose connections count their writes (a pipeline
is one write), so no MONITOR and no other client's traffic enters the count.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis

from tidegate.console.reads import RedisReads
from tidegate.flow import Gate
from tidegate.load import DeadLetter, DeadLetterQueue
from tidegate.load.depth import QueueDepth
from tidegate.load.parking import ParkingLot
from tidegate.load.quarantine import Quarantine, QuarantinedDocument
from tidegate.load.watermarks import BoardEntry, LoadBoard, LoadState, Watermarks

pytestmark = pytest.mark.redis


def _fill(client: redis.Redis, prefix: str) -> None:
    for name, rate in (("customs", 2.0), ("tos", 5.0), ("docstore", 20.0)):
        Gate(client, name, prefix=prefix).configure(rate=rate, burst=4, concurrency=3)
    Gate(client, "customs", prefix=prefix).pause(90, "429 from the gateway")
    board = LoadBoard(client, prefix=prefix)
    board.publish(
        [
            BoardEntry(
                state=LoadState("edi.customs", depth=1200, reason="above_hwm", desired_workers=6),
                depth=QueueDepth("edi.customs", ready=1100, unacked=100),
                marks=Watermarks(hwm=1000, lwm=200),
                sampled_at_ms=board.now_ms(),
                interval_s=5.0,
            )
        ]
    )
    dlq = DeadLetterQueue(client, prefix=prefix)
    for n in range(3):
        dlq.add(
            DeadLetter(
                key=f"vermas-{n}",
                task="edi.customs.submit",
                reason="rejected by customs: VGM missing",
                payload={"args": ["UNH+1+VERMAS SECRET-PAYLOAD"]},
                first_failed_at=time.time() - 600,
            )
        )
    dlq.add(
        DeadLetter(
            key="bl-MAEU123",
            task="edi.tos.push",
            reason="timeout",
            bl_number="MAEU123",
            first_failed_at=time.time() - 30,
        )
    )
    lot = ParkingLot(client, prefix=prefix)
    lot.park({"task": "edi.customs.submit"}, delay_s=60, reason="gate_paused")
    lot.park({"task": "edi.tos.push"}, delay_s=3600, reason="backoff")
    Quarantine(client, prefix=prefix).add(
        QuarantinedDocument(
            key="pdf-1", document_class="BULK_BL_PDF", queue="bulk.documents", task="bulk.store"
        )
    )


def test_every_view_reads_its_figures(redis_client: redis.Redis, prefix: str) -> None:
    """Gates, queues, dead letters and quarantine come back with the values written."""
    _fill(redis_client, prefix)
    reads = RedisReads(redis_client, prefix=prefix)
    gates = {row.name: row for row in reads.gates(reads.gate_names())}
    assert sorted(gates) == ["customs", "docstore", "tos"]
    customs = gates["customs"]
    assert (customs.label, customs.rate, customs.burst, customs.concurrency) == (
        "customs gateway",
        2.0,
        4,
        3,
    )
    assert 80 < customs.paused_for_s <= 90
    assert customs.pause_reason == "429 from the gateway"
    assert customs.tokens == 4
    assert not gates["tos"].paused
    (queue,) = reads.queues()
    assert (queue.label, queue.depth, queue.hwm, queue.desired_workers, queue.stale) == (
        "customs filings",
        1200,
        1000,
        6,
        False,
    )
    assert queue.reason == "backlog over the high mark"
    letters, shed, lot = reads.held_back()
    assert [(g.reason, g.count) for g in letters] == [
        ("rejected by customs: VGM missing", 3),
        ("timeout", 1),
    ]
    assert 590 < letters[0].oldest_age_s < 700
    assert letters[1].document_class == "terminal report (COARRI / CODECO), per B/L"
    assert [(g.document_class, g.count) for g in shed] == [("BULK_BL_PDF", 1)]
    assert (lot.waiting, lot.moving) == (2, 0)
    assert lot.next_due_s is not None
    assert lot.last_due_s is not None
    assert 50 < lot.next_due_s <= 60
    assert 3500 < lot.last_due_s <= 3600


def test_one_round_trip_per_view_whatever_the_number_of_gates(
    counting_client: redis.Redis, round_trips: Any, prefix: str
) -> None:
    """Each refresh of each view (the charts' ring included) is one pipelined round
    trip — three gates or one."""
    _fill(counting_client, prefix)
    reads = RedisReads(
        counting_client, prefix=prefix, gates=("customs", "tos", "docstore"), discover_every_s=0
    )
    names = reads.gate_names()
    assert len(names) == 3
    for view in (lambda: reads.gates(names), reads.queues, reads.held_back, reads.history):
        round_trips.reset()
        view()
        assert len(round_trips) == 1
    round_trips.reset()
    reads.gates(names[:1])
    assert len(round_trips) == 1


def test_gate_discovery_is_spaced(
    counting_client: redis.Redis, round_trips: Any, prefix: str
) -> None:
    """Gates are looked for with SCAN once per period, not on every refresh."""
    _fill(counting_client, prefix)
    now = [0.0]
    reads = RedisReads(
        counting_client, prefix=prefix, discover_every_s=15, monotonic=lambda: now[0]
    )
    assert "tos" in reads.gate_names()
    round_trips.reset()
    now[0] = 14.0
    assert "tos" in reads.gate_names()
    assert len(round_trips) == 0
    now[0] = 15.0
    reads.gate_names()
    assert len(round_trips) >= 1


def test_a_stale_board_entry_is_marked(redis_client: redis.Redis, prefix: str) -> None:
    """A sample older than three monitor periods is flagged stale, with its age."""
    board = LoadBoard(redis_client, prefix=prefix)
    board.publish(
        [
            BoardEntry(
                state=LoadState("edi.tos"),
                depth=QueueDepth("edi.tos", ready=3),
                marks=Watermarks(hwm=100, lwm=10),
                sampled_at_ms=board.now_ms() - 60_000,
                interval_s=5.0,
            )
        ]
    )
    (row,) = RedisReads(redis_client, prefix=prefix).queues()
    assert row.stale
    assert row.age_s >= 60
    assert json.dumps(row.label) == '"terminal reports"'


def test_a_live_refresh_over_http_is_one_round_trip_per_view(
    counting_client: redis.Redis, round_trips: Any, prefix: str, make_users: Any
) -> None:
    """What the page's script asks every period — ``GET /live/<view>`` — costs Redis one
    round trip each (sign-in costs none), once the gates have been discovered."""
    from starlette.testclient import TestClient

    from tidegate.console import ConsoleConfig, create_app

    _fill(counting_client, prefix)
    app = create_app(counting_client, ConsoleConfig(users=make_users(), prefix=prefix))
    auth = {"Authorization": "Bearer vic:vic-viewer-secret"}
    with TestClient(app) as client:
        assert client.get("/", headers=auth).status_code == 200  # discovers the gates
        for view in ("gates", "queues", "held"):
            round_trips.reset()
            answer = client.get(f"/live/{view}", headers=auth)
            assert answer.status_code == 200
            assert len(round_trips) == 1, view
        assert "terminal operating system" in client.get("/live/gates", headers=auth).text


def test_redis_down_is_a_503_not_a_traceback(make_users: Any) -> None:
    """An unreachable Redis answers the live view 503 (the page then shows it is stale)."""
    from starlette.testclient import TestClient

    from tidegate.console import ConsoleConfig, create_app

    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    app = create_app(
        dead, ConsoleConfig(users=make_users(), prefix="tgtest-dead", gates=("customs",))
    )
    with TestClient(app) as client:
        answer = client.get(
            "/live/gates", headers={"Authorization": "Bearer vic:vic-viewer-secret"}
        )
    assert answer.status_code == 503
    assert "Refused (503)" in answer.text
    assert "127.0.0.1" not in answer.text
