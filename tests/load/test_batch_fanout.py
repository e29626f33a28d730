"""The bulk fan-out counts itself in Redis: each outcome once, the aggregate started once.

Whichever comes last — the dispatch's seal or the last unit's outcome — starts the
aggregate; redelivered parse tasks count nothing; a stored manifest comes back whole.
"""

from __future__ import annotations

import threading

import redis

from tidegate.bulk import BatchStore


def _units(n: int, batch: str = "b1") -> list[dict[str, object]]:
    return [{"key": f"k{i:05d}", "batch_id": batch, "position": i} for i in range(n)]


def test_outcomes_before_the_seal_fire_at_the_seal(redis_client: redis.Redis, prefix: str) -> None:
    """Fast parse tasks can finish before the dispatch has published the last one."""
    store = BatchStore(redis_client, prefix=prefix)
    store.save_units("b1", _units(3))
    fired = [store.record_outcome("b1", f"k{i:05d}", {"status": "ok"}) for i in range(3)]
    assert fired == [False, False, False]
    assert store.seal("b1", 3) is True
    assert store.seal("b1", 3) is False  # a redelivered dispatch does not start it twice


def test_the_last_outcome_after_the_seal_fires_once(redis_client: redis.Redis, prefix: str) -> None:
    """A redelivered parse task records nothing and starts nothing."""
    store = BatchStore(redis_client, prefix=prefix)
    store.save_units("b1", _units(3))
    assert store.seal("b1", 3) is False
    assert store.record_outcome("b1", "k00000", {"status": "ok"}) is False
    assert store.record_outcome("b1", "k00000", {"status": "failed"}) is False  # redelivery
    assert store.record_outcome("b1", "k00001", {"status": "dead_lettered"}) is False
    assert store.record_outcome("b1", "k00002", {"status": "ok"}) is True
    assert store.record_outcome("b1", "k00002", {"status": "ok"}) is False
    assert store.outcomes("b1", ["k00000", "k00001", "k00009"]) == [
        {"status": "ok"},
        {"status": "dead_lettered"},
        None,
    ]


def test_racing_outcomes_and_seal_start_the_aggregate_exactly_once(
    redis_client: redis.Redis, prefix: str
) -> None:
    """Eight threads record 400 outcomes (each twice) while the seal lands: one start."""
    store = BatchStore(redis_client, prefix=prefix)
    store.save_units("b1", _units(400))
    starts: list[bool] = []
    lock = threading.Lock()
    barrier = threading.Barrier(9)

    def record(part: int) -> None:
        barrier.wait()
        for i in range(part, 400, 8):
            for _ in range(2):
                fired = store.record_outcome("b1", f"k{i:05d}", {"status": "ok"})
                with lock:
                    starts.append(fired)

    threads = [threading.Thread(target=record, args=(p,)) for p in range(8)]
    for thread in threads:
        thread.start()
    barrier.wait()
    sealed = store.seal("b1", 400)
    for thread in threads:
        thread.join()
    assert starts.count(True) + int(sealed) == 1


def test_keys_come_back_in_manifest_order_page_by_page(
    redis_client: redis.Redis, prefix: str
) -> None:
    """A key seen twice in a manifest is one unit, at its first position."""
    store = BatchStore(redis_client, prefix=prefix)
    units = [*_units(1_203), {"key": "k00007", "batch_id": "b1", "position": 9_999}]
    assert store.save_units("b1", units) == 1_204
    pages = list(store.unit_keys("b1", page=500))
    assert [len(p) for p in pages] == [500, 500, 203]
    assert [k for p in pages for k in p] == [f"k{i:05d}" for i in range(1_203)]
    assert store.distinct_units("b1") == 1_203


def test_a_stored_manifest_streams_back_whole(redis_client: redis.Redis, prefix: str) -> None:
    """The claim check: chunks in, the same bytes out, one chunk at a time."""
    store = BatchStore(redis_client, prefix=prefix)
    data = bytes(range(256)) * 4_000 + b"UNZ+1+1'"
    assert store.save_document("b1", data, chunk=65_536) == 16
    chunks = list(store.document_chunks("b1"))
    assert max(len(c) for c in chunks) == 65_536
    assert b"".join(chunks) == data
    assert list(store.document_chunks("never-stored")) == []
