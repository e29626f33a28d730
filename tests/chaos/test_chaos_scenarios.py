"""The fault scenarios of issue 7, trimmed, with real processes.

Each test runs one :func:`tidegate.harness.chaos.run_chaos` scenario — its own embedded
Redis, real Celery worker processes, simulated customs and TOS — and asserts on what
the run measured: the shared invariant (every document delivered, dead-lettered,
quarantined, refused at intake or reported pending; each idempotency key accepted
once) and the scenario's own claims. Nothing sleeps to make a test pass: each run
ends when the system has settled (or its timeout says it did not).

A fault *between* the downstream's acceptance and the delivery-ledger mark (a
SIGKILL, Redis dying) leaves the ledger at ``sending``: the redelivered message asks
the downstream instead of calling again, so "accepted once" holds there too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tidegate.harness.chaos import POISON_KINDS, preset, run_chaos
from tidegate.integrations.celery.preset import UNACKED_MUTEX_EXPIRE_S

pytestmark = [pytest.mark.redis, pytest.mark.celery, pytest.mark.slow]


def _run(kind: Any, **tuned: Any) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    report, _ = run_chaos(preset(kind, "test").tuned(**tuned))
    checks = {c["name"]: c for c in report["chaos"]["checks"]}
    return report, checks


def _failed(checks: dict[str, dict[str, Any]], *, allowed: frozenset[str] = frozenset()) -> list:
    return [c for name, c in checks.items() if not c["ok"] and name not in allowed]


def _assert_invariant(report: dict[str, Any]) -> None:
    accounted = (
        report["delivered"]
        + report["dead_lettered"]
        + report["quarantined"]
        + report["refused_at_intake"]
        + report["pending"]
    )
    assert accounted == report["submitted"]
    assert report["lost"] == 0
    assert report["pending"] == 0
    assert report["chaos"]["unaccounted_keys"] == []


@pytest.mark.parametrize("relay_depth", [None, 2], ids=["per-call-lease", "relay"])
def test_kill_workers(redis_binary: str, relay_depth: int | None) -> None:
    """SIGKILL pool children and worker main processes through the burst.

    Children: ``reject_on_worker_lost`` requeues their message at once. Mains: their
    message waits in ``unacked`` for the visibility timeout (20 s here), then the next
    sweep requeues it; the harness restarts the main. With each main kill the harness
    also takes one message off the broker — what a main killed between kombu's BRPOP
    and its unacked write loses — and tidegate's orphan sweep must give it back. A
    killed lease holder's TOS slot expires; the TOS never sees more than its 4
    connections. With the relay (``relay``) a killed child may be a lane with requests
    on its connection: they are answered as in doubt, looked up and resent, and a
    standby lane takes the connection once the lease expires.
    """
    report, checks = _run("kill-workers", tos_relay_depth=relay_depth)
    chaos = report["chaos"]

    _assert_invariant(report)
    assert _failed(checks) == []
    assert report["duplicates"] == 0
    assert chaos["messages_lost_with_mains"] >= 1
    # Matched by unit: a taken stale copy (unit settled, or carried by another message)
    # is not owed by the sweep (tidegate.harness.chaos.steals).
    assert chaos["lost_messages_owed"] >= 1
    assert chaos["lost_messages_swept_back"] >= 1
    # An owed unit the sweep did not give back was delivered by a copy a live worker
    # still held; every other one was republished.
    assert (
        chaos["lost_messages_swept_back"] + chaos["lost_messages_delivered_by_a_copy"]
        == chaos["lost_messages_owed"]
    )
    assert chaos["kills_by_role"]["main"] >= 1
    assert chaos["kills_by_role"]["child"] >= 1
    assert report["dead_lettered"] == 0
    assert chaos["tos_max_concurrent_seen"] <= 4
    # Every repeat call is a kill inside the accept → ledger-mark window.
    assert chaos["duplicates_explained"] == report["duplicates"]
    # A killed main's message waited the visibility timeout (plus, if a main was killed
    # holding kombu's restore lock, the preset's lock expiry), not an hour.
    assert chaos["max_unacked_age_s"] <= 20 + UNACKED_MUTEX_EXPIRE_S + 1 + 3


def test_redis_restart(redis_binary: str) -> None:
    """Redis (AOF everysec) SIGKILLed mid-burst, down 4 s, started on the same port/dir.

    Workers, movers and the demo's sampling reconnect on their own; while Redis is away
    the gate fails closed: not one downstream request after a 1 s grace for calls
    already admitted. Customs is in a maintenance pause across the outage, so its
    documents are parked in Redis when it dies: they come back from the AOF, the movers
    republish them and the gate paces the whole backlog — never above rate + burst.
    """
    report, checks = _run("redis-restart")
    chaos = report["chaos"]

    _assert_invariant(report)
    assert _failed(checks) == []
    assert report["duplicates"] == 0
    assert chaos["requests_while_down"] == {"customs": 0, "tos": 0}
    assert report["downstreams"]["customs"]["responses_429"] == 0
    assert report["samples_skipped"] >= 1
    assert chaos["parked_when_redis_died"] >= 1
    assert chaos["mover_thread_died"] == 0
    assert chaos["duplicates_explained"] == report["duplicates"]


def test_downstream_outage(redis_binary: str) -> None:
    """Customs answers 503 for 5 s, then refuses connections for 5 s.

    Calls during the outage stay within the gate's rate (no retry storm), no document
    is dead-lettered by an outage this much shorter than the retry horizon, and
    everything drains afterwards.
    """
    report, checks = _run("downstream-outage")
    chaos = report["chaos"]

    _assert_invariant(report)
    assert _failed(checks) == []
    assert report["dead_lettered"] == 0
    assert report["duplicates"] == 0
    assert chaos["calls_in_outage_503_seen_by_sim"] >= 1
    assert chaos["calls_in_outage_refused"] >= 1
    bound = checks["no_retry_storm"]["bound"]
    assert chaos["calls_in_outage"] <= min(bound["gate"], bound["backoff"])


def test_slow_downstream(redis_binary: str) -> None:
    """TOS 20 × slower for 8 s with 6 TOS worker processes and 4 connections.

    The concurrency leases hold the cap (never a 5th call in the TOS, no 503), no
    message stays unacknowledged near the visibility timeout, none runs twice.
    """
    report, checks = _run("slow-downstream")
    chaos = report["chaos"]

    _assert_invariant(report)
    assert _failed(checks) == []
    assert chaos["tos_max_concurrent_seen"] <= 4
    assert report["downstreams"]["tos"]["responses_503"] == 0
    assert report["duplicates"] == 0
    assert chaos["max_unacked_age_s"] < 20
    assert chaos["tos_accepted_while_slow"] >= 1


def test_poison(redis_binary: str) -> None:
    """Malformed documents end in the DLQ with their reason; oversized ones never reach
    the broker; the rest of the burst is delivered once."""
    report, checks = _run("poison")
    chaos = report["chaos"]

    _assert_invariant(report)
    assert _failed(checks) == []
    by_kind: dict[str, set[tuple[str, Any]]] = {}
    for outcome in chaos["poison"]:
        by_kind.setdefault(outcome["kind"], set()).add((outcome["outcome"], outcome["reason"]))
    assert by_kind == {
        **{kind: {("dead_lettered", reason)} for kind, reason in POISON_KINDS.items()},
        "oversized": {("refused_at_intake", None)},
    }
    assert report["refused_at_intake"] == 2
    assert report["dead_lettered"] == 2 * len(POISON_KINDS)
    assert report["duplicates"] == 0
    assert chaos["clean_dead_lettered"] == []


def test_cli_demo_chaos(tmp_path: Path, redis_binary: str) -> None:
    """``tidegate demo --chaos poison`` as a user runs it, checked on its JSON report."""
    from click.testing import CliRunner

    from tidegate.cli import cli

    report_path = tmp_path / "chaos.json"
    result = CliRunner().invoke(
        cli,
        ["demo", "--chaos", "poison", "--interchanges", "60", "--json", str(report_path)],
    )

    assert result.exit_code == 0, result.output
    report = json.loads(report_path.read_text())
    assert report["scenario"] == "chaos:poison"
    assert report["ok"] is True
    assert report["submitted"] == 60 + 5 * (len(POISON_KINDS) + 1)
    assert report["refused_at_intake"] == 5
    assert report["lost"] == 0
    assert "_timelines" not in report
    rows = [line.split() for line in result.output.splitlines()]
    assert ["accounted", "held"] in [row[:2] for row in rows]
    assert not [row for row in rows if len(row) > 1 and row[1] == "FAILED"]


def test_host_crash(redis_binary: str) -> None:
    """Redis SIGKILLed *and* its AOF cut back to its size a second before (what
    ``appendfsync everysec`` loses with the host), down 4 s, started again.

    Delivered marks and the broker's pops of the messages they settled are gone with
    that second; the downstreams have the documents. A restart puts the ledger in
    doubt and a redelivered message is not new: each such unit asks the downstream,
    and no key is accepted twice.
    """
    report, checks = _run("host-crash")
    chaos = report["chaos"]

    _assert_invariant(report)
    assert _failed(checks) == []
    assert report["duplicates"] == 0
    assert chaos["aof_bytes_lost"] > 0
    assert chaos["aof_lost_s"] >= 1.0
    assert chaos["accepted_in_lost_window"] >= 1
    assert chaos["requests_while_down"] == {"customs": 0, "tos": 0}
    assert chaos["reconciled_by_basis"].get("redis_restarted", {}).get("accepted_before", 0) >= 1


def test_slow_commit(redis_binary: str) -> None:
    """The TOS records a document only when its request ends; two of its requests
    take 12 s (the task's soft limit is 8 s) while the other connections go through.
    Each given-up unit is parked until max_request_s after its call started, then its
    lookup finds the late commit: no key is accepted twice."""
    report, checks = _run("slow-commit")
    chaos = report["chaos"]

    _assert_invariant(report)
    assert _failed(checks) == []
    assert report["duplicates"] == 0
    assert chaos["tos_calls_given_up"] == 2
    assert chaos["reconciled"].get("accepted_before", 0) >= 2
