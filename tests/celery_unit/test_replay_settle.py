"""A DLQ replay's mark ends where GatedTask settles the replayed unit (``task.apply``, real Redis).

Delivered: the record is resolved, its mark with it. Refused again: the record comes
back with one more attempt and no mark, so the next replay takes it again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from celery import Celery

from tidegate.integrations.celery import GatedTask, setup
from tidegate.integrations.celery.gated import REPLAY_HEADER
from tidegate.integrations.celery.runtime import runtime
from tidegate.load import DeadLetter, DeadLetterQueue
from tidegate.load.replay import replay_dead_letters
from tidegate.sim import TosSim

pytestmark = pytest.mark.redis

KEY = "COARRI-0042"
ENVELOPE = {"key": KEY, "type": "COARRI", "class": "terminal", "body": "UNH+1'"}


@pytest.fixture
def tos() -> Iterator[TosSim]:
    with TosSim(max_connections=4, service_s=0.0) as sim:
        yield sim


@pytest.fixture
def push(
    redis_url: str,
    prefix: str,
    redis_client: redis.Redis,
    tos: TosSim,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Any]:
    """A gated TOS push, and its letter already in the DLQ (a first attempt refused)."""
    monkeypatch.setenv("TIDEGATE_TOS_URL", tos.url)
    app = Celery("replay-settle", broker=redis_url, set_as_current=False)
    app.conf.tidegate_redis_url = redis_url
    app.conf.tidegate_prefix = prefix

    setup(app)

    @app.task(base=GatedTask, name="unit.replay.push", downstream="tos", lookup_path=tos.path)
    def task(envelope: dict[str, Any]) -> dict[str, Any]:
        client = runtime(app).downstream("tos")
        client.send(tos.path, {"edifact": envelope["body"]}, idempotency_key=envelope["key"])
        return {"tidegate": "delivered"}

    DeadLetterQueue(redis_client, prefix=prefix).add(
        DeadLetter(
            key=KEY,
            task=task.name,
            reason="downstream rejected the document (422)",
            payload={"args": [ENVELOPE], "kwargs": {}, "queue": "celery"},
        )
    )
    yield task
    rt = runtime(app)
    for client in rt._clients.values():
        client.close()
    rt.client.close()


def _run(push: Any) -> Callable[[DeadLetter], None]:
    """A publish that runs the replayed unit in-process, as a worker would."""

    def publish(letter: DeadLetter) -> None:
        push.apply(args=letter.payload["args"], headers={REPLAY_HEADER: letter.replays + 1}).get()

    return publish


def test_a_delivered_replay_resolves_the_letter_and_its_mark(
    push: Any, tos: TosSim, redis_client: redis.Redis, prefix: str
) -> None:
    """GatedTask's settle path (``_replay_done`` → ``remove``) ends the mark with the record."""
    dlq = DeadLetterQueue(redis_client, prefix=prefix)

    result = replay_dead_letters(dlq, _run(push))

    assert result.keys == [KEY]
    assert dlq.get(KEY) is None
    assert dlq.stats()["in_replay"] == 0
    assert tos.stats(timeline=False)["accepted"] == 1


def test_a_replay_refused_again_comes_back_with_one_more_attempt_and_no_mark(
    push: Any, tos: TosSim, redis_client: redis.Redis, prefix: str
) -> None:
    """GatedTask dead-letters the replayed unit again: the letter is replayable at once."""
    tos.reject_keys([KEY])
    dlq = DeadLetterQueue(redis_client, prefix=prefix)

    first = replay_dead_letters(dlq, _run(push))
    back = dlq.get(KEY)
    second = replay_dead_letters(dlq, _run(push))

    assert first.keys == [KEY]
    assert back is not None
    assert back.attempts == 2
    assert back.in_replay_until is None
    assert second.keys == [KEY]
    assert second.skipped == 0
