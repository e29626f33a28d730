"""What the dead-letter queue promises, on the memory twin and on a real Redis.

One record per idempotency key, FIFO by first failure, filtered listings; retention
that reports what it removed; replays that cannot double up: a letter is marked "in
replay" atomically with taking it, a second replay skips what the first holds and
goes on to later letters, and the mark ends when the unit settles (delivered →
removed, failed again → rewritten) or lapses after ``hold_s``.
"""

from __future__ import annotations

import threading

import pytest
from structlog.testing import capture_logs

from tidegate.errors import ConfigurationError
from tidegate.flow.backends.memory import ManualClock
from tidegate.load import DeadLetter
from tidegate.load.memory import MemoryDeadLetterQueue
from tidegate.load.protocols import DeadLetterStore
from tidegate.load.replay import ReplayResult, replay_dead_letters


def _fill(dlq: DeadLetterStore, count: int) -> list[str]:
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


# -- records ------------------------------------------------------------------------------


def test_dead_letter_keeps_one_record_per_key(dlq: DeadLetterStore, clock: ManualClock) -> None:
    """The same unit dead-lettered twice is one record with attempts counting up."""
    letter = DeadLetter(
        key="k1", task="bulk.parse_bl", reason="no B/L", payload={"raw": "CNI+1'"}, batch_id="b1"
    )
    first = dlq.add(letter)
    clock.advance(10)
    second = dlq.add(letter)

    assert len(dlq) == 1
    assert second.attempts == 2
    assert first.first_failed_at == second.first_failed_at == clock.now_ms() / 1000 - 10
    assert second.last_failed_at == clock.now_ms() / 1000
    assert dlq.get("k1") == second
    assert dlq.stats()["dead_lettered_total"] == 2


def test_dlq_filters_and_fifo_order(dlq: DeadLetterStore) -> None:
    for i, reason in enumerate(["no B/L in consignment", "HTTP 422", "no B/L in consignment"]):
        dlq.add(
            DeadLetter(
                key=f"k{2 - i}",
                task="t",
                reason=reason,
                batch_id=f"b{i % 2}",
                first_failed_at=1000.0 + i,
            )
        )

    assert [x.key for x in dlq.iter()] == ["k2", "k1", "k0"]
    assert [x.key for x in dlq.iter(reason="b/l")] == ["k2", "k0"]
    assert [x.key for x in dlq.iter(batch_id="b1")] == ["k1"]
    assert [x.key for x in dlq.iter(limit=1)] == ["k2"]
    assert dlq.get("missing") is None


def test_remove_resolves_one_record(dlq: DeadLetterStore) -> None:
    _fill(dlq, 2)
    assert dlq.remove("key-000")
    assert not dlq.remove("key-000")
    assert [x.key for x in dlq.iter()] == ["key-001"]
    assert dlq.stats()["records"] == 1


def test_expiry_is_counted_and_reported(dlq: DeadLetterStore, clock: ManualClock) -> None:
    """Retention removes old records, and says how many: nothing expires silently."""
    now = clock.now_ms() / 1000
    dlq.add(DeadLetter(key="old", task="t", reason="r", first_failed_at=now - 3600))
    dlq.add(DeadLetter(key="edge", task="t", reason="r", first_failed_at=now - 600))
    dlq.add(DeadLetter(key="new", task="t", reason="r"))

    with capture_logs() as logs:
        expired = dlq.expire(older_than_s=600)
    nothing = dlq.expire(older_than_s=600)

    assert (expired, nothing) == (2, 0)
    assert [x.key for x in dlq.iter()] == ["new"]
    assert dlq.stats()["expired_total"] == 2
    assert [e["event"] for e in logs] == ["dlq_records_expired"]
    assert logs[0]["records"] == 2


def test_purge_deletes_every_record_and_says_how_many(dlq: DeadLetterStore) -> None:
    _fill(dlq, 3)
    with capture_logs() as logs:
        purged = dlq.purge()

    assert purged == 3
    assert len(dlq) == 0
    assert list(dlq.iter()) == []
    assert dlq.stats()["dead_lettered_total"] == 3  # what happened stays counted
    assert [(e["event"], e["records"]) for e in logs] == [("dlq_purged", 3)]


def test_stats_age_the_oldest_record_on_the_clock(dlq: DeadLetterStore, clock: ManualClock) -> None:
    assert dlq.stats() == {
        "records": 0,
        "in_replay": 0,
        "dead_lettered_total": 0,
        "expired_total": 0,
        "oldest_age_s": 0,
    }
    dlq.add(DeadLetter(key="a", task="t", reason="r"))
    clock.advance(100)
    dlq.add(DeadLetter(key="b", task="t", reason="r"))
    clock.advance(20.5)

    assert dlq.stats()["oldest_age_s"] == 120
    assert dlq.stats()["records"] == 2


def test_dead_letter_log_never_carries_the_payload(dlq: DeadLetterStore) -> None:
    with capture_logs() as logs:
        dlq.add(DeadLetter(key="k", task="t", reason="HTTP 422", payload={"body": "UNB+SECRET'"}))
        dlq.add(DeadLetter(key="bl", task="t", reason="no B/L", bl_number="MAEU123"))
    assert "SECRET" not in repr(logs)
    assert "MAEU123" not in repr(logs)
    assert [e["event"] for e in logs] == ["task_dead_lettered", "bl_dead_lettered"]
    assert all("key" not in e and "key_hash" in e for e in logs)


# -- replay marks ---------------------------------------------------------------------------


def test_begin_replay_marks_once_and_says_gone_for_an_unknown_letter(
    dlq: DeadLetterStore, clock: ManualClock
) -> None:
    (key,) = _fill(dlq, 1)
    now = clock.now_ms() / 1000

    taken = dlq.begin_replay(key, hold_s=60)
    held = dlq.begin_replay(key, hold_s=60)
    gone = dlq.begin_replay("nobody", hold_s=60)

    assert (taken.status, taken.taken, taken.in_replay_until, taken.replays) == (
        "marked",
        True,
        now + 60,
        1,
    )
    assert (held.status, held.taken, held.in_replay_until, held.replays) == (
        "in_replay",
        False,
        now + 60,
        1,
    )
    assert (gone.status, gone.in_replay_until) == ("gone", None)


def test_a_second_replay_while_the_first_is_in_flight_takes_only_later_letters(
    dlq: DeadLetterStore, other_dlq: DeadLetterStore
) -> None:
    """Replay B starts while replay A is still publishing (another client on Redis).

    Before the mark, B republished A's letters (attempts 1 → 2 → 3) and never reached
    the later ones.
    """
    keys = _fill(dlq, 4)
    published: list[str] = []
    second: list[ReplayResult] = []

    def publish_second(letter: DeadLetter) -> None:
        published.append(letter.key)

    def publish_first(letter: DeadLetter) -> None:
        published.append(letter.key)
        if not second:
            second.append(replay_dead_letters(other_dlq, publish_second, limit=2))

    first = replay_dead_letters(dlq, publish_first, limit=2)

    assert sorted(published) == keys
    assert second[0].keys == ["key-001", "key-002"]
    assert second[0].skipped == 1
    assert first.keys == ["key-000", "key-003"]
    assert first.skipped == 2
    assert [letter.replays for letter in dlq.iter()] == [1, 1, 1, 1]


def test_two_replays_started_at_the_same_moment_never_share_a_letter(
    dlq: DeadLetterStore, other_dlq: DeadLetterStore
) -> None:
    """Two threads (two clients on Redis), one barrier: every letter published once."""
    keys = _fill(dlq, 40)
    start = threading.Barrier(2)
    results: dict[str, ReplayResult] = {}
    published: list[str] = []

    def run(name: str, store: DeadLetterStore) -> None:
        start.wait(timeout=10)
        results[name] = replay_dead_letters(
            store, lambda letter: published.append(letter.key), limit=40
        )

    threads = [
        threading.Thread(target=run, args=(name, store))
        for name, store in (("a", dlq), ("b", other_dlq))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert sorted(published) == keys
    assert results["a"].published + results["b"].published == 40
    for result in results.values():
        assert result.published + result.skipped == 40


def test_a_letter_in_replay_shows_it_until_its_unit_is_delivered(
    dlq: DeadLetterStore, clock: ManualClock
) -> None:
    """Delivered: the settle path removes the record, and the mark with it."""
    (key,) = _fill(dlq, 1)

    replay_dead_letters(dlq, lambda letter: None, limit=1, hold_s=600)
    shown = dlq.get(key)
    summary = shown.summary() if shown else {}
    in_replay = dlq.stats()["in_replay"]
    resolved = dlq.remove(key)

    assert summary["replays"] == 1
    assert summary["in_replay_until"] == clock.now_ms() / 1000 + 600
    assert in_replay == 1
    assert resolved
    assert dlq.get(key) is None
    assert dlq.stats()["in_replay"] == 0
    assert dlq.begin_replay(key).status == "gone"


def test_a_replayed_unit_that_fails_again_comes_back_replayable(dlq: DeadLetterStore) -> None:
    """Failed again: the record is rewritten (attempts + 1), its mark ends, a replay takes it."""
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
    assert back.first_failed_at == 1_000.0
    assert again.keys == [key]
    again_letter = dlq.get(key)
    assert again_letter is not None
    assert again_letter.replays == 2


def test_a_lost_unit_holds_its_letter_only_until_the_hold_lapses(
    dlq: DeadLetterStore, clock: ManualClock
) -> None:
    """No settle ever comes: the mark lapses by itself (the clock moves, nobody sleeps)."""
    (key,) = _fill(dlq, 1)

    first = replay_dead_letters(dlq, lambda letter: None, hold_s=300)
    clock.advance(299)
    held = replay_dead_letters(dlq, lambda letter: None, hold_s=300)
    still = dlq.get(key)
    in_replay = dlq.stats()["in_replay"]
    clock.advance(2)
    lapsed = dlq.get(key)
    after = replay_dead_letters(dlq, lambda letter: None, hold_s=300)

    assert first.keys == [key]
    assert (held.published, held.skipped) == (0, 1)
    assert still is not None
    assert still.in_replay_until is not None
    assert in_replay == 1
    assert lapsed is not None
    assert lapsed.in_replay_until is None
    assert after.keys == [key]


def test_a_failed_publish_leaves_nothing_marked(dlq: DeadLetterStore) -> None:
    """A publish that raises undoes its mark and its replay count: nothing half-written."""
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


def test_replay_logs_one_event_per_decision_without_payload(dlq: DeadLetterStore) -> None:
    """One event per letter taken or skipped, one for the run; never the payload."""
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
    dlq: DeadLetterStore, limit: int, hold_s: float
) -> None:
    """A bad limit or hold is a typed error before anything is marked."""
    (key,) = _fill(dlq, 1)
    empty = MemoryDeadLetterQueue()

    with pytest.raises(ConfigurationError):
        replay_dead_letters(dlq, lambda letter: None, limit=limit, hold_s=hold_s)
    with pytest.raises(ConfigurationError):  # checked before reading: an empty DLQ too
        replay_dead_letters(empty, lambda letter: None, limit=limit, hold_s=hold_s)
    if hold_s != 60.0:
        with pytest.raises(ConfigurationError):
            dlq.begin_replay(key, hold_s=hold_s)

    letter = dlq.get(key)
    assert letter is not None
    assert letter.in_replay_until is None
    assert letter.replays == 0


@pytest.mark.parametrize("limit", [0, 1, 2])
def test_a_listing_gives_at_most_its_limit(dlq: DeadLetterStore, limit: int) -> None:
    """``limit=0`` lists nothing (it used to list one record)."""
    _fill(dlq, 3)

    assert [letter.key for letter in dlq.iter(limit=limit)] == [
        f"key-{i:03d}" for i in range(limit)
    ]
