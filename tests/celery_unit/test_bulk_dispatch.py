"""``bulk.dispatch`` on documents it cannot read (issue #13 item 1), in-process on real Redis.

Every manifest must end dispatched or dead-lettered with the reason; acknowledging one
with only a log line loses it. The fan-out's parse tasks are recorded instead of sent
(no worker runs here): tests/celery_fleet/test_bulk.py drives it through real workers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery
from structlog.testing import capture_logs

from tidegate.bulk.celery import BulkTasks, install_bulk, manifest_key
from tidegate.bulk.store import BatchStore
from tidegate.edi.synthetic import synthetic_ifcsum
from tidegate.integrations.celery import setup
from tidegate.integrations.celery.gated import REPLAY_HEADER
from tidegate.integrations.celery.runtime import runtime
from tidegate.keys import Keyspace
from tidegate.load import DeadLetterQueue

pytestmark = pytest.mark.redis

#: Over the store's 500-unit write chunk, so that units are written before the error.
CONSIGNMENTS = 600
VALID = synthetic_ifcsum(CONSIGNMENTS, seed=3, bl_every=("BM",)).decode()
PERSONAL = "CONSIGNEE-PRIVATE-NAME"


@pytest.fixture
def app(redis_url: str, prefix: str, redis_client: redis.Redis) -> Iterator[Celery]:
    app = Celery("bulk-unit", broker=redis_url, set_as_current=False)
    app.conf.tidegate_redis_url = redis_url
    app.conf.tidegate_prefix = prefix
    setup(app, mover=False)
    yield app
    rt = runtime(app)
    for client in rt._clients.values():
        client.close()
    rt.client.close()


@pytest.fixture
def bulk(app: Celery) -> BulkTasks:
    return install_bulk(app, forward=lambda envelope: {"status": "ok"})


@pytest.fixture
def fanouts(bulk: BulkTasks, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many parse tasks each dispatched batch fanned out to (recorded, not sent)."""
    per_batch: dict[str, int] = {}

    def fake_parse(args: Any, **_: Any) -> None:
        batch_id, _key = args
        per_batch[batch_id] = per_batch.get(batch_id, 0) + 1

    monkeypatch.setattr(bulk.parse_bl, "apply_async", fake_parse)
    monkeypatch.setattr(bulk.aggregate, "apply_async", lambda *a, **k: None)
    return per_batch


def dlq(app: Celery) -> DeadLetterQueue:
    return runtime(app).dlq


def store(app: Celery, prefix: str) -> BatchStore:
    return BatchStore(runtime(app).client, prefix=prefix)


def dispatch(bulk: BulkTasks, manifest: dict[str, Any], **headers: Any) -> dict[str, Any]:
    result = bulk.dispatch.apply(args=[manifest], headers=headers or None)
    assert result.successful(), result.traceback
    value: dict[str, Any] = result.get()
    return value


UNREADABLE = {
    "pdf": (f"%PDF-1.7 {PERSONAL}", "NotEdifactError", "does not start with UNA, UNB or UNH"),
    "garbage-after-unz": (
        VALID + "UNAUNAUNA",
        "InvalidServiceStringAdvice",
        "unusable UNA service characters",
    ),
    "no-text": (None, "NotEdifactError", "the manifest's edifact field is NoneType, not text"),
    "lone-surrogate": ("UNB+UNOC:3+S+R+1+1'\ud800'", "NotEdifactError", "UTF-8 cannot encode"),
}


@pytest.mark.parametrize("case", sorted(UNREADABLE))
def test_an_unreadable_manifest_is_dead_lettered_whole(
    app: Celery, bulk: BulkTasks, fanouts: dict[str, int], prefix: str, case: str
) -> None:
    """Dead-lettered with the reason, replayable, no chord, no unit left behind."""
    body, exception, why = UNREADABLE[case]
    manifest = {"batch_id": "b-bad", "edifact": body}
    with capture_logs() as logs:
        outcome = dispatch(bulk, manifest)

    assert outcome["status"] == "dead_lettered"
    letter = dlq(app).get(manifest_key("b-bad"))
    assert letter is not None
    assert letter.task == "bulk.dispatch"
    assert letter.exception == exception
    assert letter.reason.startswith("manifest is not readable EDIFACT: ")
    assert why in letter.reason
    assert letter.batch_id == "b-bad"
    assert letter.payload == {"args": [manifest], "kwargs": {}, "queue": "bulk.dispatch"}
    assert fanouts == {}
    assert not store(app, prefix).dispatched("b-bad")
    assert runtime(app).client.exists(Keyspace(prefix).batch("b-bad").units) == 0
    events = [entry["event"] for entry in logs]
    assert events.count("task_dead_lettered") == 1
    assert PERSONAL not in json.dumps(logs, default=str)
    assert "UNAUNAUNA" not in json.dumps(logs, default=str)


def test_a_control_count_of_thousands_of_digits_no_longer_loses_the_manifest(
    app: Celery, bulk: BulkTasks, fanouts: dict[str, int], prefix: str
) -> None:
    """A huge UNZ count is a finding now: the manifest is dispatched with every unit."""
    head, _, _ = VALID.rpartition("UNZ+")
    body = head + "UNZ+" + "9" * 5000 + "+1'"
    outcome = dispatch(bulk, {"batch_id": "b-count", "edifact": body})
    assert outcome == {"status": "dispatched", "batch_id": "b-count", "units": CONSIGNMENTS}
    assert list(fanouts.values()) == [CONSIGNMENTS]
    assert store(app, prefix).dispatched("b-count")
    assert len(dlq(app)) == 0


def test_a_replayed_manifest_that_now_reads_leaves_the_dlq(
    app: Celery, bulk: BulkTasks, fanouts: dict[str, int]
) -> None:
    """After the record's document is fixed, its replay dispatches and removes the record."""
    dispatch(bulk, {"batch_id": "b-fix", "edifact": VALID + "UNAUNAUNA"})
    letter = dlq(app).get(manifest_key("b-fix"))
    assert letter is not None
    fixed = {**letter.payload["args"][0], "edifact": VALID}
    outcome = dispatch(bulk, fixed, **{REPLAY_HEADER: 1})
    assert outcome["status"] == "dispatched"
    assert list(fanouts.values()) == [CONSIGNMENTS]
    assert dlq(app).get(manifest_key("b-fix")) is None
