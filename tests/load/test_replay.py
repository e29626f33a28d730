"""DLQ replays that cannot double up, against a real Redis.

A replay marks each letter "in replay" atomically with taking it; a second replay
skips what the first holds and goes on to later letters. The mark ends when the unit
settles (delivered → removed, failed again → rewritten) or lapses after ``hold_s``.
"""

from __future__ import annotations

import threading
import time

import pytest
import redis
from structlog.testing import capture_logs

from tidegate._redis import client_from_url
from tidegate.errors import ConfigurationError
from tidegate.flow.backends.memory import ManualClock
from tidegate.keys import Keyspace
from tidegate.load import DeadLetter, DeadLetterQueue
from tidegate.load.replay import ReplayResult, replay_dead_letters

pytestmark = pytest.mark.redis


def _fill(dlq: DeadLetterQueue, count: int) -> list[str]:
    keys = [f"key-{i:03d}" for i in range(count)]
    for i, key in enumerate(keys):
        dlq.add(
            DeadLetter(
                key=key,
                task="edi.tos.forward_bl",
                reason="downstream rejected the document (HTTP 422)",
                payload={"args": [{"key": key}], "kwargs": {}, "queue": "q"},
                first_failed_at=1_000.0 + i,
            )
        )
    return keys


def test_a_second_replay_while_the_first_is_in_flight_takes_only_later_letters(
    redis_client: redis.Redis, redis_url: str, prefix: str
) -> None:
    """The issue's scenario: replay B starts while replay A is still publishing.

    Before the mark, B republished A's letters (attempts 1 → 2 → 3) and never reached
    the later ones.
    """
    dlq = DeadLetterQueue(redis_client, prefix=prefix)
    keys = _fill(dlq, 4)
    published: list[str] = []
    second: list[ReplayResult] = []
    other = client_from_url(redis_url)

    def publish_second(letter: DeadLetter) -> None:
        published.append(letter.key)

    def publish_first(letter: DeadLetter) -> None:
        published.append(letter.key)
        if not second:
            second.append(
                replay_dead_letters(DeadLetterQueue(other, prefix=prefix), publish_second, limit=2)
            )

    try:
        first = replay_dead_letters(dlq, publish_first, limit=2)
    finally:
        other.close()

    assert sorted(published) == keys
    assert second[0].keys == ["key-001", "key-002"]
    assert second[0].skipped == 1
    assert first.keys == ["key-000", "key-003"]
    assert first.skipped == 2
    assert [letter.replays for letter in dlq.iter()] == [1, 1, 1, 1]


def test_two_replays_started_at_the_same_moment_never_share_a_letter(
    redis_url: str, redis_client: redis.Redis, prefix: str
) -> None:
    """Two threads, two clients, one barrier: every letter is published exactly once."""
    keys = _fill(DeadLetterQueue(redis_client, prefix=prefix), 40)
    start = threading.Barrier(2)
    results: dict[str, ReplayResult] = {}
    sink = f"{prefix}:published"

    def run(name: str) -> None:
        client = client_from_url(redis_url)

        def publish(letter: DeadLetter) -> None:
            client.rpush(sink, letter.key)

        try:
            start.wait(timeout=10)
            results[name] = replay_dead_letters(
                DeadLetterQueue(client, prefix=prefix), publish, limit=40
            )
        finally:
            client.close()

    threads = [threading.Thread(target=run, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    published = [raw.decode() for raw in redis_client.lrange(sink, 0, -1)]
    assert sorted(published) == keys
    assert results["a"].published + results["b"].published == 40
    for result in results.values():
        assert result.published + result.skipped == 40


def test_a_letter_in_replay_shows_it_until_its_unit_is_delivered(
    redis_client: redis.Redis, prefix: str
) -> None:
    """Delivered: the settle path removes the record, and the mark with it."""
    dlq = DeadLetterQueue(redis_client, prefix=prefix)
    (key,) = _fill(dlq, 1)
    before = time.time()

    replay_dead_letters(dlq, lambda letter: None, limit=1, hold_s=600)
    shown = dlq.get(key)
    summary = shown.summary() if shown else {}
    in_replay = dlq.stats()["in_replay"]
    resolved = dlq.remove(key)

    assert summary["replays"] == 1
    assert before + 599 < summary["in_replay_until"] <= time.time() + 600
    assert in_replay == 1
    assert resolved
    assert dlq.get(key) is None
    assert dlq.stats()["in_replay"] == 0
    assert redis_client.zcard(Keyspace(prefix).dlq().replaying) == 0


def test_a_replayed_unit_that_fails_again_comes_back_replayable(
    redis_client: redis.Redis, prefix: str
) -> None:
    """Failed again: the record is rewritten (attempts + 1), its mark ends, a replay takes it."""
    dlq = DeadLetterQueue(redis_client, prefix=prefix)
    (key,) = _fill(dlq, 1)
    replay_dead_letters(dlq, lambda letter: None, limit=1)
    blocked = replay_dead_letters(dlq, lambda letter: None, limit=1)

    dlq.add(DeadLetter(key=key, task="edi.tos.forward_bl", reason="still 422"))
    back = dlq.get(key)
    again = replay_dead_letters(dlq, lambda letter: None, limit=1)

    assert (blocked.published, blocked.skipped) == (0, 1)
    assert back is not None
    assert back.attempts == 2
    assert back.in_replay_until is None
    assert back.replays == 1
    assert again.keys == [key]
    again_letter = dlq.get(key)
    assert again_letter is not None
    assert again_letter.replays == 2


def test_a_lost_unit_holds_its_letter_only_until_the_hold_lapses(
    redis_client: redis.Redis, prefix: str
) -> None:
    """No settle ever comes: the mark lapses by itself (an injected clock, no sleeping)."""
    clock = ManualClock(start_ms=time.time() * 1000)
    dlq = DeadLetterQueue(redis_client, prefix=prefix, clock=clock.now_ms)
    (key,) = _fill(dlq, 1)

    first = replay_dead_letters(dlq, lambda letter: None, hold_s=300)
    clock.advance(299)
    held = replay_dead_letters(dlq, lambda letter: None, hold_s=300)
    still = dlq.get(key)
    clock.advance(2)
    lapsed = dlq.get(key)
    after = replay_dead_letters(dlq, lambda letter: None, hold_s=300)

    assert first.keys == [key]
    assert (held.published, held.skipped) == (0, 1)
    assert still is not None
    assert still.in_replay_until is not None
    assert lapsed is not None
    assert lapsed.in_replay_until is None
    assert after.keys == [key]


def test_a_failed_publish_leaves_nothing_marked(redis_client: redis.Redis, prefix: str) -> None:
    """A publish that raises undoes its mark and its replay count: nothing half-written."""
    dlq = DeadLetterQueue(redis_client, prefix=prefix)
    (key,) = _fill(dlq, 1)

    def broken(letter: DeadLetter) -> None:
        raise ConnectionError("broker down")

    with pytest.raises(ConnectionError):
        replay_dead_letters(dlq, broken)
    letter = dlq.get(key)

    assert letter is not None
    assert letter.in_replay_until is None
    assert letter.replays == 0
    assert replay_dead_letters(dlq, lambda letter: None).keys == [key]


def test_replay_logs_one_event_per_decision_without_payload(
    redis_client: redis.Redis, prefix: str
) -> None:
    """One event per letter taken or skipped, one for the run; never the payload."""
    dlq = DeadLetterQueue(redis_client, prefix=prefix)
    _fill(dlq, 2)
    replay_dead_letters(dlq, lambda letter: None, limit=1)

    with capture_logs() as logs:
        replay_dead_letters(dlq, lambda letter: None, limit=1)

    assert [e["event"] for e in logs] == [
        "dlq_item_replay_skipped",
        "dlq_item_replayed",
        "dlq_replay_finished",
    ]
    assert logs[-1]["skipped_in_replay"] == 1
    assert all("payload" not in e and "args" not in e for e in logs)


@pytest.mark.parametrize(("limit", "hold_s"), [(0, 60.0), (1, 0.0), (1, float("nan"))])
def test_bad_limits_are_configuration_errors(
    redis_client: redis.Redis, prefix: str, limit: int, hold_s: float
) -> None:
    """A bad limit or hold is a typed error before anything is marked."""
    dlq = DeadLetterQueue(redis_client, prefix=prefix)
    empty = DeadLetterQueue(redis_client, prefix=f"{prefix}:empty")
    (key,) = _fill(dlq, 1)

    with pytest.raises(ConfigurationError):
        replay_dead_letters(dlq, lambda letter: None, limit=limit, hold_s=hold_s)
    with pytest.raises(ConfigurationError):
        replay_dead_letters(empty, lambda letter: None, limit=limit, hold_s=hold_s)

    letter = dlq.get(key)
    assert letter is not None
    assert letter.in_replay_until is None
