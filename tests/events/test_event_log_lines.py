"""The JSON line of each event is the line the plain log call wrote before.

Dashboards, alerts, the README and other tests read these lines, so the event names,
levels, components and key sets are pinned here, literally, as the log calls had them
(one deliberate change: ``document_shed`` names the document by ``key_hash``, never by
its key). Also: a subscriber that raises breaks neither the others nor the caller.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
import redis
import structlog
from structlog.testing import capture_logs

from tidegate.events import (
    ConcurrencyChanged,
    DocumentShed,
    DownstreamAnswered429,
    Event,
    EventSink,
    GatePaused,
    GatePausedAfterReserve,
    GatePauseWaited,
    GateResumed,
    GateThrottled,
    IntakeFolderPaused,
    IntakeFolderResumed,
    JobParked,
    LetterReplayed,
    LetterReplaySkipped,
    LetterResolved,
    MessageParked,
    QuarantineReplayed,
    RateChanged,
    RateStaleRejection,
    ScaleSignal,
    SheddingChanged,
    UnitDeadLettered,
    capture_events,
    emit,
    sink,
)
from tidegate.logging import configure
from tidegate.ops.metrics import install_event_counters

#: Added to every line by the processor chain.
CHAIN = {"event", "level", "ts", "component"}
H = "0123456789abcdef"

#: event → (name, level, component, the keys its log call passed).
PINNED: list[tuple[Event, str, str, str, set[str]]] = [
    (
        GateThrottled("customs", "rate", 0.5, 0, "try"),
        "downstream_gate_throttled",
        "info",
        "tidegate.flow",
        {"downstream", "reason", "wait_s", "tokens_left", "mode"},
    ),
    (
        GatePaused("customs", 5.0, "http_429", True, 1),
        "downstream_gate_paused",
        "warning",
        "tidegate.flow",
        {"downstream", "pause_s", "reason", "extended", "until_ms"},
    ),
    (
        GatePauseWaited("customs", 1.5),
        "downstream_gate_paused",
        "info",
        "tidegate.flow",
        {"downstream", "wait_s"},
    ),
    (
        GatePausedAfterReserve("customs", 1.5, 0.2),
        "downstream_gate_paused_after_reserve",
        "info",
        "tidegate.flow",
        {"downstream", "wait_s", "slot_forfeited_s"},
    ),
    (
        GateResumed("customs"),
        "downstream_gate_resumed",
        "warning",
        "tidegate.flow",
        {"downstream"},
    ),
    (
        DownstreamAnswered429(None, True, "customs", "/declarations", 429, H),
        "downstream_throttled",
        "warning",
        "tidegate.downstream",
        {"retry_after_s", "paused", "downstream", "path", "status", "key_hash"},
    ),
    (
        MessageParked("m1", "edi.customs.submit", 2.0, "gate_paused"),
        "message_parked",
        "info",
        "tidegate.load",
        {"message_id", "task", "delay_s", "reason"},
    ),
    (
        JobParked("j1", "j2", "jobs.send", 2.0, "gate_paused", 1),
        "message_parked",
        "info",
        "tidegate.rq",
        {"job_id", "scheduled_job_id", "task", "delay_s", "reason", "attempt"},
    ),
    (
        UnitDeadLettered(H, "t", "r", None, 1, None),
        "task_dead_lettered",
        "warning",
        "tidegate.load",
        {"key_hash", "task", "reason", "exception", "attempts", "batch_id"},
    ),
    (
        UnitDeadLettered(H, "t", "r", "E", 1, "b1", bl=True),
        "bl_dead_lettered",
        "warning",
        "tidegate.load",
        {"key_hash", "task", "reason", "exception", "attempts", "batch_id"},
    ),
    (
        LetterReplayed(H, "t", "r", 1, 1, 10.0, None),
        "dlq_item_replayed",
        "info",
        "tidegate.load",
        {"key_hash", "task", "reason", "attempts", "replays", "in_replay_until", "batch_id"},
    ),
    (
        LetterReplaySkipped(H, "t", 10.0),
        "dlq_item_replay_skipped",
        "info",
        "tidegate.load",
        {"key_hash", "task", "in_replay_until"},
    ),
    (
        LetterResolved("edi.customs.submit", "customs", "celery", H),
        "dlq_item_resolved",
        "info",
        "tidegate.delivery",
        {"task", "downstream", "engine", "key_hash"},
    ),
    (
        DocumentShed(H, "BULK_BL_PDF", "bulk", "sustained_overload", 12, False),
        "document_shed",
        "info",
        "tidegate.load",
        {"key_hash", "document_class", "queue", "reason", "depth", "duplicate"},
    ),
    (
        QuarantineReplayed("bulk", 2, 0, 0, {"BULK_BL_PDF": 2}, False),
        "quarantine_replayed",
        "info",
        "tidegate.load",
        {"queue", "documents", "released", "skipped_in_replay", "by_class", "forced"},
    ),
    (
        ScaleSignal("bulk", "scale_up", "hold", "backlog", 40, 3),
        "scaling_signal_changed",
        "warning",
        "tidegate.monitor",
        {"queue", "signal", "previous", "reason", "depth", "desired_workers"},
    ),
    (
        SheddingChanged("bulk", 40, 3, 10, 2),
        "shedding_started",
        "warning",
        "tidegate.monitor",
        {"queue", "depth", "over_hwm_intervals", "hwm", "lwm"},
    ),
    (
        SheddingChanged("bulk", 1, 0, 10, 2, started=False),
        "shedding_stopped",
        "warning",
        "tidegate.monitor",
        {"queue", "depth", "over_hwm_intervals", "hwm", "lwm"},
    ),
    (
        RateChanged("customs", "rate", 1.0, "throttled", 5.0, 10.0, 10.0, None, None),
        "adaptive_rate_changed",
        "warning",
        "tidegate.adaptive",
        {
            "downstream",
            "kind",
            "at_ms",
            "reason",
            "rate",
            "previous_rate",
            "ceiling",
            "previous_ceiling",
            "pause_s",
        },
    ),
    (
        RateStaleRejection(
            "customs", "rate", 1.0, "throttled_stale", 5.0, 5.0, 10.0, 10.0, None, 3, 0
        ),
        "adaptive_rate_stale_rejection",
        "warning",
        "tidegate.adaptive",
        {
            "downstream",
            "kind",
            "at_ms",
            "reason",
            "rate",
            "previous_rate",
            "ceiling",
            "previous_ceiling",
            "pause_s",
            "throttled",
            "unavailable",
        },
    ),
    (
        ConcurrencyChanged("customs", "concurrency", 1.0, "gradient", 4, 6, 4.2, 0.7, 30.0),
        "adaptive_concurrency_changed",
        "warning",
        "tidegate.adaptive",
        {
            "downstream",
            "kind",
            "at_ms",
            "reason",
            "concurrency",
            "previous_concurrency",
            "limit",
            "gradient",
            "min_latency_ms",
        },
    ),
    (
        IntakeFolderPaused("ACME", ["bulk"]),
        "intake_folder_paused",
        "info",
        "tidegate.intake",
        {"sender", "queues"},
    ),
    (
        IntakeFolderResumed("ACME"),
        "intake_folder_resumed",
        "info",
        "tidegate.intake",
        {"sender"},
    ),
]


def test_every_event_kind_is_pinned() -> None:
    """A new kind without a pinned line would escape this suite."""
    from tidegate import events

    kinds = {
        obj
        for obj in vars(events).values()
        if isinstance(obj, type) and issubclass(obj, Event) and obj is not Event
    }
    assert kinds == {type(event) for event, *_ in PINNED}


@pytest.mark.parametrize(
    ("event", "name", "level", "component", "keys"),
    PINNED,
    ids=[f"{type(e).__name__}-{n}" for e, n, *_ in PINNED],
)
def test_the_json_line_keeps_its_name_level_and_keys(
    event: Event, name: str, level: str, component: str, keys: set[str]
) -> None:
    """Rendered through the real JSON chain: one line, the old name, level and keys."""
    stream = io.StringIO()
    configure(level="DEBUG", stream=stream)
    emit(event)
    (line,) = stream.getvalue().splitlines()
    rendered = json.loads(line)
    assert set(rendered) == keys | CHAIN
    assert (rendered["event"], rendered["level"], rendered["component"]) == (
        name,
        level,
        component,
    )
    assert {k: rendered[k] for k in keys} == json.loads(json.dumps(event.log_fields()))


def test_the_log_level_filters_the_line_not_the_event() -> None:
    """At ERROR the throttle's line is gone; a subscriber still receives the event."""
    stream = io.StringIO()
    configure(level="ERROR", stream=stream)
    with capture_events() as events:
        emit(GateThrottled("customs", "rate", 0.5, 0, "try"))
    assert stream.getvalue() == ""
    assert events == [GateThrottled("customs", "rate", 0.5, 0, "try")]


@dataclass(frozen=True, slots=True)
class _Careless(Event):
    """An event whose author forgot the rule: a payload field."""

    EVENT: ClassVar[str] = "careless_event"

    downstream: str
    payload: str


def test_the_redaction_net_still_applies_to_events() -> None:
    """``RedactSensitive`` sits in the chain the log subscriber renders through."""
    stream = io.StringIO()
    configure(level="INFO", stream=stream)
    emit(_Careless("customs", "UNH+1+VERMAS'"))
    rendered = json.loads(stream.getvalue())
    assert rendered["payload"] == "[redacted]"
    assert "UNH" not in stream.getvalue()


def test_a_raising_subscriber_breaks_neither_the_others_nor_the_caller() -> None:
    """Counted on every failure, logged once, and the next subscriber still called."""
    events = EventSink()
    seen: list[Event] = []

    def broken(event: Event) -> None:
        raise RuntimeError("subscriber bug")

    events.subscribe(broken)
    events.subscribe(seen.append)
    throttle = GateThrottled("customs", "rate", 0.5, 0, "try")
    with capture_logs() as logs:
        events.emit(throttle)
        events.emit(throttle)
    assert seen == [throttle, throttle]
    assert events.failures == 2
    (failed,) = [e for e in logs if e["event"] == "event_subscriber_failed"]
    assert failed["failed_event"] == "downstream_gate_throttled"
    assert failed["error"] == "RuntimeError"
    assert "subscriber bug" not in json.dumps(failed)


def test_unsubscribe_removes_only_that_subscriber() -> None:
    events = EventSink()
    first: list[Event] = []
    second: list[Event] = []
    drop_first = events.subscribe(first.append)
    events.subscribe(second.append)
    drop_first()
    drop_first()  # idempotent
    events.emit(GateResumed("customs"))
    assert (first, second) == ([], [GateResumed("customs")])


@pytest.mark.redis
def test_a_broken_log_chain_does_not_stop_the_counters(
    redis_client: redis.Redis, prefix: str
) -> None:
    """The logger is one subscriber among others: a processor that raises loses the
    line, and the throttle is counted all the same."""

    def broken(logger: Any, method: str, event_dict: Any) -> Any:
        raise ValueError("broken processor")

    structlog.configure(processors=[broken])
    counters = install_event_counters(redis_client, prefix=prefix)
    emit(GateThrottled("customs", "rate", 0.5, 0, "try"))
    assert sink().failures == 1
    assert redis_client.hget(counters.key, "throttles|customs|rate|try") == b"1"


@pytest.mark.redis
def test_installing_the_counters_twice_counts_once(redis_client: redis.Redis, prefix: str) -> None:
    """A second install replaces the first in the sink: no decision is counted twice."""
    install_event_counters(redis_client, prefix=prefix)
    counters = install_event_counters(redis_client, prefix=prefix)
    emit(GatePaused("customs", 5.0, "http_429", True, 1))
    assert redis_client.hget(counters.key, "pauses|customs|http_429") == b"1"
