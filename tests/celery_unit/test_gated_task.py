"""GatedTask's bookkeeping around one call, run in-process (``task.apply``) on real Redis.

The fleet tests (tests/celery_fleet) show the same paths through real worker
processes; these pin each decision down without the timing of a fleet.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
from celery import Celery
from structlog.testing import capture_logs

from tidegate.delivery import RetryPolicy
from tidegate.downstream import DownstreamClient
from tidegate.errors import BackendUnavailable, ConfigurationError, DownstreamUnavailable
from tidegate.integrations.celery import GatedTask, setup
from tidegate.integrations.celery import gated as gated_module
from tidegate.integrations.celery.gated import (
    ATTEMPT_HEADER,
    AWAITING_COMMIT,
    FIRST_FAILED_HEADER,
)
from tidegate.integrations.celery.runtime import runtime
from tidegate.keys import Keyspace
from tidegate.load import DeadLetterQueue, DeliveryLedger, DeliveryState, ParkingLot
from tidegate.load.ledger import LedgerEntry
from tidegate.load.outstanding import Outstanding, OutstandingUnit
from tidegate.logging import key_hash
from tidegate.settings import Settings
from tidegate.sim import TosSim

ENVELOPE = {"key": "COARRI-0001", "type": "COARRI", "class": "terminal", "body": "UNH+1'"}


@pytest.fixture
def tos() -> Iterator[TosSim]:
    with TosSim(max_connections=4, service_s=0.0) as sim:
        yield sim


@pytest.fixture
def app(
    redis_url: str,
    prefix: str,
    redis_client: redis.Redis,
    tos: TosSim,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Celery]:
    monkeypatch.setenv("TIDEGATE_TOS_URL", tos.url)
    app = Celery("gated-unit", broker=redis_url, set_as_current=False)
    app.conf.tidegate_redis_url = redis_url
    app.conf.tidegate_prefix = prefix
    setup(app)
    yield app
    rt = runtime(app)
    for client in rt._clients.values():
        client.close()
    rt.client.close()


def _task(app: Celery, tos: TosSim, calls: list[str], **options: Any) -> Any:
    """A gated TOS push that records each body execution and really POSTs."""

    options = {"lookup_path": tos.path, "required_fields": ("key", "type", "body"), **options}

    @app.task(base=GatedTask, name=f"unit.push.{len(app.tasks)}", downstream="tos", **options)
    def push(envelope: dict[str, Any]) -> dict[str, Any]:
        calls.append(envelope["key"])
        client = runtime(app).downstream("tos")
        client.send(tos.path, {"edifact": envelope["body"]}, idempotency_key=envelope["key"])
        return {"tidegate": "delivered"}

    return push


def _parked(client: redis.Redis, prefix: str) -> list[dict[str, Any]]:
    """The envelopes in the parking lot (claimed by nobody: no mover runs here)."""
    assert ParkingLot(client, prefix=prefix).depth() >= 0
    return [json.loads(raw) for raw in client.hvals(Keyspace(prefix).parking().env)]


def _ledger(client: redis.Redis, prefix: str) -> DeliveryLedger:
    return DeliveryLedger(client, prefix=prefix)


def test_a_delivered_call_marks_the_ledger_and_a_redelivery_is_skipped(
    app: Celery, tos: TosSim, redis_client: redis.Redis, prefix: str
) -> None:
    calls: list[str] = []
    push = _task(app, tos, calls)

    assert push.apply(args=[ENVELOPE]).get() == {"tidegate": "delivered"}
    assert push.apply(args=[ENVELOPE]).get() == {"tidegate": "already_delivered"}

    assert calls == [ENVELOPE["key"]]
    assert _ledger(redis_client, prefix).state("tos", ENVELOPE["key"]) is DeliveryState.DELIVERED
    assert tos.stats(timeline=False)["accepted"] == 1


def test_an_interrupted_attempt_that_landed_is_confirmed_not_resent(
    app: Celery, tos: TosSim, redis_client: redis.Redis, prefix: str
) -> None:
    """The previous run was killed after the TOS accepted but before the ledger mark."""
    with DownstreamClient("tos", tos.url) as client:
        client.send(tos.path, {"edifact": "x"}, idempotency_key=ENVELOPE["key"])
    _ledger(redis_client, prefix).sending("tos", ENVELOPE["key"])
    calls: list[str] = []
    push = _task(app, tos, calls)

    with capture_logs() as logs:
        assert push.apply(args=[ENVELOPE]).get() == {"tidegate": "already_delivered"}

    stats = tos.stats(timeline=False)
    assert calls == []
    assert stats["accepted"] == 1
    assert stats["duplicates"] == 0
    assert stats["lookups"] == 1
    assert _ledger(redis_client, prefix).state("tos", ENVELOPE["key"]) is DeliveryState.DELIVERED
    reconciled = [e for e in logs if e["event"] == "delivery_reconciled"]
    assert [e["outcome"] for e in reconciled] == ["accepted_before"]


def test_an_interrupted_attempt_that_never_landed_is_sent_once(
    app: Celery, tos: TosSim, redis_client: redis.Redis, prefix: str
) -> None:
    _ledger(redis_client, prefix).sending("tos", ENVELOPE["key"])
    calls: list[str] = []
    push = _task(app, tos, calls)

    assert push.apply(args=[ENVELOPE]).get() == {"tidegate": "delivered"}

    stats = tos.stats(timeline=False)
    assert calls == [ENVELOPE["key"]]
    assert stats["accepted"] == 1
    assert stats["lookups"] == 1


def test_a_downstream_without_lookup_is_resent_under_its_idempotency_key(
    app: Celery, tos: TosSim, redis_client: redis.Redis, prefix: str
) -> None:
    _ledger(redis_client, prefix).sending("tos", ENVELOPE["key"])
    calls: list[str] = []
    push = _task(app, tos, calls, lookup_path=None)

    with capture_logs() as logs:
        push.apply(args=[ENVELOPE]).get()

    assert calls == [ENVELOPE["key"]]
    assert tos.stats(timeline=False)["lookups"] == 0
    assert [e["outcome"] for e in logs if e["event"] == "delivery_reconciled"] == ["unknown"]


def test_a_ledger_failure_after_delivery_neither_raises_nor_requeues(
    app: Celery,
    tos: TosSim,
    redis_client: redis.Redis,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Redis dies between the TOS's yes and the mark: the unit is still delivered once."""
    calls: list[str] = []
    push = _task(app, tos, calls)
    rt = runtime(app)
    monkeypatch.setattr(gated_module, "_MARK_BACKOFF_S", (0.0, 0.0))
    marks: list[str] = []

    def mark_fails(downstream: str, key: str) -> None:
        marks.append(key)
        raise BackendUnavailable("ledger mark: connection refused")

    monkeypatch.setattr(rt.ledger, "mark", mark_fails)
    with capture_logs() as logs:
        result = push.apply(args=[ENVELOPE])

    assert result.get() == {"tidegate": "delivered"}  # not a Reject(requeue=True)
    assert len(marks) == 3  # tried, retried twice, then given up on
    marks = [e["key_hash"] for e in logs if e["event"] == "ledger_mark_failed"]
    assert marks == [key_hash(ENVELOPE["key"])]
    # The ledger still says "sending": a redelivery asks the TOS and does not resend.
    monkeypatch.undo()
    assert push.apply(args=[ENVELOPE]).get() == {"tidegate": "already_delivered"}
    assert calls == [ENVELOPE["key"]]
    assert tos.stats(timeline=False)["accepted"] == 1


def test_a_malformed_unit_is_dead_lettered_before_the_gate(
    app: Celery, tos: TosSim, redis_client: redis.Redis, prefix: str
) -> None:
    calls: list[str] = []
    push = _task(app, tos, calls)
    broken = {k: v for k, v in ENVELOPE.items() if k != "body"}

    assert push.apply(args=[broken]).get()["tidegate"] == "dead_lettered"

    letter = DeadLetterQueue(redis_client, prefix=prefix).get(ENVELOPE["key"])
    assert letter is not None
    assert letter.reason == "malformed unit: envelope lacks 'body'"
    assert letter.exception == "MalformedUnit"
    assert calls == []
    assert tos.stats(timeline=False)["requests"] == 0
    # Nothing was spent at the gate either: its bucket is still full.
    state = runtime(app).gate("tos").state()
    assert state.tokens_available == state.policy.burst


def test_an_outage_parks_with_the_first_failure_time_and_respects_the_horizon(
    app: Celery, tos: TosSim, redis_client: redis.Redis, prefix: str
) -> None:
    """Attempts exhausted but the outage is younger than min_horizon_s: parked, not lost."""
    tos.set_outage(None, mode="503")
    calls: list[str] = []
    policy = RetryPolicy(max_attempts=2, min_horizon_s=3600, backoff_base_s=0.1)
    push = _task(app, tos, calls, retry_policy=policy)
    first_failed = time.time() - 60

    result = push.apply(
        args=[ENVELOPE], headers={ATTEMPT_HEADER: 5, FIRST_FAILED_HEADER: first_failed}
    ).get()

    assert result["tidegate"] == "parked"
    assert result["reason"] == "downstream_unavailable"
    assert len(DeadLetterQueue(redis_client, prefix=prefix)) == 0
    (parked,) = _parked(redis_client, prefix)
    assert parked["attempt"] == 6
    assert parked["first_failed_at"] == pytest.approx(first_failed)


def test_past_the_horizon_an_outage_dead_letters(
    app: Celery, tos: TosSim, redis_client: redis.Redis, prefix: str
) -> None:
    tos.set_outage(None, mode="503")
    policy = RetryPolicy(max_attempts=2, min_horizon_s=30, backoff_base_s=0.1)
    push = _task(app, tos, [], retry_policy=policy)

    result = push.apply(
        args=[ENVELOPE], headers={ATTEMPT_HEADER: 1, FIRST_FAILED_HEADER: time.time() - 31}
    ).get()

    assert result["tidegate"] == "dead_lettered"
    letter = DeadLetterQueue(redis_client, prefix=prefix).get(ENVELOPE["key"])
    assert letter is not None
    assert letter.reason == "retries exhausted after 2 attempts (DownstreamUnavailable)"


def test_a_first_failure_is_stamped_on_the_parked_unit(
    app: Celery, tos: TosSim, redis_client: redis.Redis, prefix: str
) -> None:
    tos.set_outage(None, mode="503")
    push = _task(app, tos, [])
    before = time.time()

    push.apply(args=[ENVELOPE]).get()

    (parked,) = _parked(redis_client, prefix)
    assert parked["attempt"] == 1
    assert before <= parked["first_failed_at"] <= time.time()


def test_a_parked_unit_leaves_the_orphan_sweeps_index(
    app: Celery, tos: TosSim, redis_client: redis.Redis, prefix: str
) -> None:
    """The lot holds a parked unit: the sweep must not take it for lost (its record
    stays, for the mover's republish to replace)."""
    tos.set_outage(None, mode="503")
    push = _task(app, tos, [])
    outstanding = Outstanding(redis_client, prefix=prefix)
    s0 = outstanding.record(OutstandingUnit(ENVELOPE["key"], push.name, "t-1", "q", [], {}))
    assert outstanding.pushed(ENVELOPE["key"], "q", s0) > 0

    push.apply(args=[ENVELOPE]).get()

    assert len(_parked(redis_client, prefix)) == 1
    assert outstanding.get(ENVELOPE["key"]) is not None
    assert redis_client.zscore(outstanding.pushed_key("q"), ENVELOPE["key"]) is None


def _redis_now(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1_000_000


def test_a_worker_clock_running_ahead_does_not_shorten_the_horizon(
    app: Celery,
    tos: TosSim,
    redis_client: redis.Redis,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """This worker's wall clock runs a day ahead; on the fleet clock (Redis TIME) the
    outage is a minute old, well inside the hour's horizon: parked, not dead-lettered."""
    tos.set_outage(None, mode="503")
    policy = RetryPolicy(max_attempts=2, min_horizon_s=3600, backoff_base_s=0.1)
    push = _task(app, tos, [], retry_policy=policy)
    first_failed = _redis_now(redis_client) - 60
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 86_400)

    result = push.apply(
        args=[ENVELOPE], headers={ATTEMPT_HEADER: 5, FIRST_FAILED_HEADER: first_failed}
    ).get()

    monkeypatch.undo()
    assert result["tidegate"] == "parked"
    assert len(DeadLetterQueue(redis_client, prefix=prefix)) == 0
    (parked,) = _parked(redis_client, prefix)
    assert parked["first_failed_at"] == pytest.approx(first_failed)


def test_the_first_failure_is_stamped_on_the_fleet_clock(
    app: Celery,
    tos: TosSim,
    redis_client: redis.Redis,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker a day ahead stamps the first failure with Redis's time, not its own."""
    tos.set_outage(None, mode="503")
    push = _task(app, tos, [])
    before = _redis_now(redis_client)
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 86_400)

    push.apply(args=[ENVELOPE]).get()

    monkeypatch.undo()
    (parked,) = _parked(redis_client, prefix)
    assert before <= parked["first_failed_at"] <= _redis_now(redis_client)


def test_redis_down_before_the_call_requeues_without_sending(
    app: Celery, tos: TosSim, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ledger read fails: nothing was sent, so the broker keeps the message."""
    calls: list[str] = []
    push = _task(app, tos, calls)

    def down(downstream: str, key: str) -> LedgerEntry:
        raise BackendUnavailable("ledger check: connection refused")

    monkeypatch.setattr(runtime(app).ledger, "entry", down)
    result = push.apply(args=[ENVELOPE])

    assert type(result.result).__name__ == "Reject"
    assert calls == []
    assert tos.stats(timeline=False)["requests"] == 0


def test_the_unavailable_error_is_what_a_503_lookup_raises(tos: TosSim) -> None:
    tos.set_outage(None, mode="503")
    with DownstreamClient("tos", tos.url) as client, pytest.raises(DownstreamUnavailable):
        client.lookup(tos.path, idempotency_key="K-1")


def test_a_settled_unit_leaves_the_outstanding_registry(
    app: Celery, tos: TosSim, redis_client: redis.Redis, prefix: str
) -> None:
    """Delivered or dead-lettered: the orphan sweep has nothing left to watch."""
    outstanding = Outstanding(redis_client, prefix=prefix)
    push = _task(app, tos, [])
    broken = {k: v for k, v in ENVELOPE.items() if k != "body"} | {"key": "BROKEN-1"}
    for envelope in (ENVELOPE, broken):
        outstanding.record(
            OutstandingUnit(envelope["key"], push.name, "t", "edi.tos", [envelope], {})
        )

    push.apply(args=[ENVELOPE]).get()
    push.apply(args=[broken]).get()

    assert len(outstanding) == 0


# -- issue #13 item 4: a ledger that lost writes (host crash) -------------------------


def _apply_redelivered(push: Any, envelope: dict[str, Any]) -> Any:
    """Run ``push`` as a worker runs a message the broker flags redelivered.

    ``task.apply`` cannot set ``delivery_info``; a worker's request carries the
    broker's, so the request is pushed by hand around the task's own ``__call__``.
    """
    push.push_request(
        id="redelivered-1", args=[envelope], kwargs={}, delivery_info={"redelivered": True}
    )
    try:
        return push(envelope)
    finally:
        push.pop_request()


@pytest.mark.parametrize(
    ("basis", "run"),
    [
        pytest.param("redelivered", _apply_redelivered, id="broker-redelivered"),
        pytest.param(
            "redelivered",
            lambda push, env: push.apply(args=[env], headers={"redelivered": True}).get(),
            id="kombu-redelivered-header",
        ),
        pytest.param(
            "earlier_attempts",
            lambda push, env: push.apply(args=[env], headers={ATTEMPT_HEADER: 1}).get(),
            id="attempt-header",
        ),
        pytest.param(
            "earlier_attempts",
            lambda push, env: push.apply(
                args=[env], headers={FIRST_FAILED_HEADER: time.time() - 5}
            ).get(),
            id="first-failed-header",
        ),
    ],
)
def test_a_unit_the_ledger_forgot_is_confirmed_not_resent(
    *, app: Celery, tos: TosSim, redis_client: redis.Redis, prefix: str, basis: str, run: Any
) -> None:
    """A host crash took the ledger's record with the AOF's last second; the TOS has the
    document. The message is not new, so the empty ledger is not believed: it asks."""
    with DownstreamClient("tos", tos.url) as client:
        client.send(tos.path, {"edifact": "x"}, idempotency_key=ENVELOPE["key"])
    assert _ledger(redis_client, prefix).state("tos", ENVELOPE["key"]) is DeliveryState.NEW
    calls: list[str] = []
    push = _task(app, tos, calls)

    with capture_logs() as logs:
        result = run(push, ENVELOPE)

    stats = tos.stats(timeline=False)
    assert result == {"tidegate": "already_delivered"}
    assert calls == []
    assert (stats["accepted"], stats["duplicates"], stats["lookups"]) == (1, 0, 1)
    assert _ledger(redis_client, prefix).state("tos", ENVELOPE["key"]) is DeliveryState.DELIVERED
    reconciled = [(e["basis"], e["outcome"]) for e in logs if e["event"] == "delivery_reconciled"]
    assert reconciled == [(basis, "accepted_before")]


def test_a_new_message_with_no_record_is_sent_without_a_lookup(
    app: Celery, tos: TosSim, redis_client: redis.Redis, prefix: str
) -> None:
    """The doubt costs nothing on the common path: a first delivery asks nobody."""
    calls: list[str] = []
    push = _task(app, tos, calls)

    assert push.apply(args=[ENVELOPE]).get() == {"tidegate": "delivered"}

    stats = tos.stats(timeline=False)
    assert calls == [ENVELOPE["key"]]
    assert (stats["accepted"], stats["lookups"]) == (1, 0)


def test_a_forgotten_unit_that_never_landed_is_sent_once(
    app: Celery, tos: TosSim, redis_client: redis.Redis, prefix: str
) -> None:
    calls: list[str] = []
    push = _task(app, tos, calls)

    assert push.apply(args=[ENVELOPE], headers={ATTEMPT_HEADER: 2}).get() == {
        "tidegate": "delivered"
    }

    stats = tos.stats(timeline=False)
    assert calls == [ENVELOPE["key"]]
    assert (stats["accepted"], stats["lookups"]) == (1, 1)


# -- issue #13 item 5: a downstream that commits at the end of a slow request ---------


def _until(condition: Any, timeout: float = 10.0) -> bool:
    """Poll a real condition (not a timing assumption) until it holds or time is up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return bool(condition())


def test_a_timed_out_call_is_not_resent_before_the_downstream_can_have_committed(
    app: Celery, redis_client: redis.Redis, prefix: str
) -> None:
    """The TOS records a document only when its (held) request finishes; the client
    gave up after 0.3 s. The unit is parked until max_request_s after the call started;
    brought back early (a mover, a redelivery), it parks again without asking; once
    the window is over, the lookup finds the document and nothing is resent."""
    release = threading.Event()
    key = ENVELOPE["key"]
    with TosSim(max_connections=4, service_s=1.0, sleep=lambda s: release.wait(30)) as slow:
        slow.set_commit_at_end()
        rt = runtime(app)
        rt._clients["tos"] = DownstreamClient(
            "tos", slow.url, feedback=rt.gate("tos"), timeout=httpx.Timeout(0.3, connect=3.0)
        )
        calls: list[str] = []
        push = _task(app, slow, calls, max_request_s=30.0)
        try:
            with capture_logs() as logs:
                first = push.apply(args=[ENVELOPE]).get()
            early = push.apply(args=[ENVELOPE], headers={ATTEMPT_HEADER: 1}).get()
            during = slow.stats(timeline=False)
        finally:
            release.set()
        assert _until(lambda: slow.stats(timeline=False)["in_flight"] == 0)
        # max_request_s later: the ledger's send time is moved back instead of sleeping.
        seconds, micros = redis_client.time()
        ledger = _ledger(redis_client, prefix)
        ledger.sending("tos", key, now_ms=str(seconds * 1000 + micros / 1000 - 31_000))
        later = push.apply(args=[ENVELOPE], headers={ATTEMPT_HEADER: 1}).get()
        final = slow.stats(timeline=False)

    assert (first["tidegate"], first["reason"]) == ("parked", "downstream_unavailable")
    assert 29.0 <= first["delay_s"] <= 30.0
    (awaiting,) = [e for e in logs if e["event"] == "delivery_awaiting_commit"]
    assert (awaiting["error"], awaiting["key_hash"]) == ("DownstreamUnavailable", key_hash(key))
    assert (early["tidegate"], early["reason"]) == ("parked", AWAITING_COMMIT)
    assert 28.0 <= early["delay_s"] <= 30.0
    assert (during["requests"], during["lookups"], during["accepted"]) == (1, 0, 0)
    assert later == {"tidegate": "already_delivered"}
    assert calls == [key]
    assert (final["accepted"], final["duplicates"], final["requests"]) == (1, 0, 1)
    assert final["lookups"] == 1
    assert ledger.state("tos", key) is DeliveryState.DELIVERED
    parked = sorted(p["attempt"] for p in _parked(redis_client, prefix))
    assert parked == [1, 1]  # the wait for the commit costs no attempt


def test_a_refused_call_is_retried_on_its_backoff_not_the_commit_window(
    app: Celery, tos: TosSim, redis_client: redis.Redis, prefix: str
) -> None:
    """A 503 says the TOS did not take the request in: nothing can still commit."""
    tos.set_outage(None, mode="503")
    policy = RetryPolicy(backoff_base_s=0.5)
    push = _task(app, tos, [], max_request_s=30.0, retry_policy=policy)

    result = push.apply(args=[ENVELOPE]).get()

    assert (result["tidegate"], result["reason"]) == ("parked", "downstream_unavailable")
    assert result["delay_s"] < 2.0


def test_max_request_s_comes_from_the_environment_and_is_checked(
    app: Celery, tos: TosSim, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's runtime reads it with the rest of the settings; a value it cannot
    use refuses the unit before anything is sent."""
    monkeypatch.setenv("TIDEGATE_TOS_MAX_REQUEST_S", "12.5")
    assert Settings.load().downstream("tos").max_request_s == 12.5
    push = _task(app, tos, [])
    monkeypatch.setenv("TIDEGATE_TOS_MAX_REQUEST_S", "soon")
    with pytest.raises(ConfigurationError, match="TIDEGATE_TOS_MAX_REQUEST_S"):
        push.apply(args=[ENVELOPE]).get()
    assert tos.stats(timeline=False)["requests"] == 0


def test_after_a_redis_restart_a_unit_without_a_record_asks_first(
    app: Celery, tos: TosSim, redis_client: redis.Redis, prefix: str
) -> None:
    """The crash lost the delivered mark *and* the broker's pop: the message is back,
    looking new. The ledger last saw another Redis run, so it is in doubt: ask."""
    with DownstreamClient("tos", tos.url) as client:
        client.send(tos.path, {"edifact": "x"}, idempotency_key=ENVELOPE["key"])
    redis_client.hset(Keyspace(prefix).ledger_epoch("tos"), "run_id", "0" * 40)
    calls: list[str] = []
    push = _task(app, tos, calls)

    with capture_logs() as logs:
        result = push.apply(args=[ENVELOPE]).get()

    stats = tos.stats(timeline=False)
    assert result == {"tidegate": "already_delivered"}
    assert calls == []
    assert (stats["accepted"], stats["lookups"]) == (1, 1)
    reconciled = [(e["basis"], e["outcome"]) for e in logs if e["event"] == "delivery_reconciled"]
    assert reconciled == [("redis_restarted", "accepted_before")]


def test_a_refused_call_leaves_no_commit_to_wait_for(
    app: Celery, tos: TosSim, redis_client: redis.Redis, prefix: str
) -> None:
    """A 503 then the unit back at once: it asks and sends, it does not wait out
    max_request_s for a request the TOS never took in."""
    calls: list[str] = []
    push = _task(app, tos, calls, max_request_s=30.0)
    tos.set_fault("503", count=1)

    first = push.apply(args=[ENVELOPE]).get()
    again = push.apply(args=[ENVELOPE], headers={ATTEMPT_HEADER: 1}).get()

    assert (first["tidegate"], first["reason"]) == ("parked", "downstream_unavailable")
    assert again == {"tidegate": "delivered"}
    stats = tos.stats(timeline=False)
    assert calls == [ENVELOPE["key"]] * 2
    assert (stats["accepted"], stats["lookups"]) == (1, 1)


def test_without_skip_delivered_nothing_is_looked_up(
    app: Celery, tos: TosSim, redis_client: redis.Redis, prefix: str
) -> None:
    """A task that opted out of the ledger relies on the idempotency key alone."""
    calls: list[str] = []
    push = _task(app, tos, calls, skip_delivered=False)

    push.apply(args=[ENVELOPE], headers={ATTEMPT_HEADER: 1, "redelivered": True}).get()

    assert calls == [ENVELOPE["key"]]
    assert tos.stats(timeline=False)["lookups"] == 0
