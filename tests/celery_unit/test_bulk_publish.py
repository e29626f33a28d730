"""The bulk path's publish loops cost a few broker round trips per page, not one per B/L
(issue #18, B/L units/s at 100,000 B/Ls), in-process on real Redis.

``bulk.dispatch`` publishes one parse task per B/L and ``bulk.aggregate`` one forward per
B/L, each from one pool process. One round trip per publish made both loops wait on the
broker once per B/L: on 2 CPUs shared with the TOS pool (which forwards while the
aggregate is still publishing), every wait is also a wait to be scheduled again, so the
aggregate of a 20,000-B/L batch published about five times slower per B/L than that of a
1,000-B/L batch. Counted here, not timed: the requests sent to Redis while each loop runs.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from celery import Celery
from redis.connection import AbstractConnection

from tidegate.bulk.celery import BulkTasks, install_bulk
from tidegate.bulk.store import BatchStore
from tidegate.edi.synthetic import synthetic_ifcsum
from tidegate.integrations.celery import setup, track_publishes
from tidegate.integrations.celery.runtime import runtime

pytestmark = pytest.mark.redis

#: Three pages of 500 and a partial one.
UNITS = 1_600
PAGES = 4
#: Requests a loop of UNITS publishes may send: a few per page of 500 (the page's keys,
#: its outcomes, the forwarded set, the flush), never one per B/L (1,600 and more before).
MAX_REQUESTS = 10 * PAGES


@pytest.fixture
def app(redis_url: str, prefix: str, redis_client: redis.Redis) -> Iterator[Celery]:
    app = Celery("bulk-publish", broker=redis_url, set_as_current=False)
    app.conf.tidegate_redis_url = redis_url
    app.conf.tidegate_prefix = prefix
    setup(app, mover=False)
    # What a worker process does at start: its publishes (the forwards) are tracked.
    untrack = track_publishes(None, runtime(app).outstanding, app=app)
    yield app
    untrack()
    rt = runtime(app)
    for client in rt._clients.values():
        client.close()
    rt.client.close()


@pytest.fixture
def queues(prefix: str, redis_client: redis.Redis) -> Iterator[dict[str, str]]:
    """This test's own forward queue; the parse queue (fixed by the routes) emptied."""
    names = {"parse": "bl.parse", "forward": f"{prefix}.tos"}
    redis_client.delete(*names.values())
    yield names
    redis_client.delete(*names.values())


@pytest.fixture
def bulk(app: Celery, queues: dict[str, str]) -> BulkTasks:
    return install_bulk(
        app, forward=lambda envelope: {"status": "ok"}, forward_queue=queues["forward"]
    )


def count_requests(monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """Count every request any redis-py connection of this process sends from now on
    (a pipeline is one request)."""
    sent = [0]
    original = AbstractConnection.send_packed_command

    def counting(self: AbstractConnection, command: Any, check_health: bool = True) -> None:
        sent[0] += 1
        original(self, command, check_health)

    monkeypatch.setattr(AbstractConnection, "send_packed_command", counting)
    return lambda: sent[0]


@pytest.fixture
def batch(app: Celery, prefix: str) -> BatchStore:
    return BatchStore(runtime(app).client, prefix=prefix)


def test_the_dispatch_publishes_a_page_of_parse_tasks_in_a_few_requests(
    bulk: BulkTasks,
    batch: BatchStore,
    queues: dict[str, str],
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    document = synthetic_ifcsum(UNITS, seed=5, bl_every=("BM",))
    batch.save_document("b-dispatch", document)
    # The aggregate would start when the (absent) parse tasks end: not run here.
    monkeypatch.setattr(bulk.aggregate, "apply_async", lambda *a, **k: None)
    # Carving stores the units in pages too; count only the publish loop.
    save_units = batch.unit_writer
    requests = count_requests(monkeypatch)
    marks: list[int] = []

    def writer(batch_id: str) -> Any:
        w = save_units(batch_id)
        close = w.close

        def closing() -> int:
            n = close()
            marks.append(requests())
            return n

        w.close = closing  # type: ignore[method-assign]
        return w

    monkeypatch.setattr(BatchStore, "unit_writer", lambda self, batch_id: writer(batch_id))
    result = bulk.dispatch.apply(args=[{"batch_id": "b-dispatch", "stored": True}])
    assert result.successful(), result.traceback
    assert result.get()["units"] == UNITS
    published = requests() - marks[0]

    messages = [json.loads(m) for m in redis_client.lrange(queues["parse"], 0, -1)]
    assert len(messages) == UNITS
    keys = {json.loads(base64.b64decode(m["body"]))[0][1] for m in messages}
    assert len(keys) == UNITS  # every unit once
    assert published <= MAX_REQUESTS, f"{published} requests to publish {UNITS} parse tasks"


def test_the_aggregate_forwards_a_page_in_a_few_requests_and_tracks_every_forward(
    bulk: BulkTasks,
    batch: BatchStore,
    queues: dict[str, str],
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    units = [{"key": f"u{i}", "bl_number": f"BL{i:06d}"} for i in range(UNITS)]
    batch.save_units("b-agg", units)
    for unit in units:
        outcome = {"status": "ok", "key": unit["key"], "bl_number": unit["bl_number"]}
        batch.record_outcome("b-agg", unit["key"], {**outcome, "containers": []})
    batch.seal("b-agg", UNITS)

    requests = count_requests(monkeypatch)
    result = bulk.aggregate.apply(args=["b-agg"])
    assert result.successful(), result.traceback
    sent = requests()

    summary = result.get()
    assert (summary["ok"], summary["forwarded"]) == (UNITS, UNITS)
    messages = [json.loads(m) for m in redis_client.lrange(queues["forward"], 0, -1)]
    assert len(messages) == UNITS
    # The headers name a forward by its key hash: no B/L number outside the body.
    assert not [m for m in messages if "BL0" in json.dumps(m["headers"])]
    # Each forward is recorded for the orphan sweep as it is pushed, batched or not.
    assert len(runtime(bulk.aggregate.app).outstanding) == UNITS
    assert sent <= MAX_REQUESTS, f"{sent} requests to forward {UNITS} B/Ls"


class Killed(BaseException):
    """The aggregate's worker dying: nothing of the run after it happens."""


def _forwarded_keys(redis_client: redis.Redis, queue: str) -> list[str]:
    messages = [json.loads(m) for m in redis_client.lrange(queue, 0, -1)]
    return [json.loads(base64.b64decode(m["body"]))[0][0]["key"] for m in messages]


@pytest.mark.parametrize("dies", ["before_flush", "after_flush"])
def test_an_aggregate_killed_part_way_forwards_every_bl_when_it_runs_again(
    bulk: BulkTasks,
    batch: BatchStore,
    queues: dict[str, str],
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    *,
    dies: str,
) -> None:
    """The aggregate's message comes back after its worker died (acks late). Its second
    run must forward what the first did not get to the broker. (It used to skip the
    batch as "already aggregated", and it marked a page forwarded before publishing it:
    both lost the B/Ls of the rest of the batch.)"""
    units = [{"key": f"u{i}", "bl_number": f"BL{i:06d}"} for i in range(UNITS)]
    batch.save_units("b-kill", units)
    for unit in units:
        outcome = {"status": "ok", "key": unit["key"], "bl_number": unit["bl_number"]}
        batch.record_outcome("b-kill", unit["key"], {**outcome, "containers": []})
    batch.seal("b-kill", UNITS)

    mark = BatchStore.mark_forwarded
    calls = [0]

    def dying_mark(self: BatchStore, batch_id: str, numbers: list[str]) -> None:
        calls[0] += 1
        if calls[0] == 2 and dies == "after_flush":  # the second page
            raise Killed  # published, not marked
        mark(self, batch_id, numbers)

    publish = bulk.forward_bl.apply_async
    sent = [0]

    def dying_publish(*args: Any, **kwargs: Any) -> Any:
        sent[0] += 1
        if dies == "before_flush" and sent[0] == 700:  # inside the second page
            raise Killed
        return publish(*args, **kwargs)

    monkeypatch.setattr(BatchStore, "mark_forwarded", dying_mark)
    monkeypatch.setattr(bulk.forward_bl, "apply_async", dying_publish)
    with pytest.raises(Killed):
        bulk.aggregate.run("b-kill")
    first = set(_forwarded_keys(redis_client, queues["forward"]))
    assert 0 < len(first) < UNITS

    monkeypatch.setattr(BatchStore, "mark_forwarded", mark)
    monkeypatch.setattr(bulk.forward_bl, "apply_async", publish)
    summary = bulk.aggregate.run("b-kill")

    keys = _forwarded_keys(redis_client, queues["forward"])
    assert set(keys) == {u["bl_number"] for u in units}  # nothing lost (keyed by B/L)
    # Sent twice at most: the page the first run published and did not mark (the
    # forward's idempotency key keeps the TOS from taking one twice).
    assert len(keys) - UNITS <= (500 if dies == "after_flush" else 0)
    assert summary["forwarded"] == UNITS
    assert bulk.aggregate.run("b-kill")["status"] == "already_aggregated"
