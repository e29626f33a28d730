"""Units published and not yet settled, so that a unit the broker lost can be given back.

kombu's Redis transport takes a message with ``BRPOP`` and records it in its
``unacked`` hash only afterwards, in a separate pipeline: a worker *main* process
killed between the two loses the message it just popped, and ``acks_late`` cannot
help because kombu never counted it as delivered (celery/kombu#305,
celery/celery#7950). Sidekiq sells "reliable fetch" for the same hole.

tidegate closes it from the outside. Every tracked publish records the unit here
(idempotency key → task, arguments, queue and the task id of its current message);
settling it — delivered, dead-lettered — removes the record. An orphan sweep
(:mod:`tidegate.integrations.celery.sweep`) compares the records with one atomic
snapshot of the broker's lists, its ``unacked`` hash and the parking lot: a unit
whose message is in none of them for ``misses`` sweeps in a row is republished. The
snapshot is one ``MULTI``, and kombu's own in-between states (popped but not yet in
``unacked``, taken out of ``unacked`` but not yet pushed back) last microseconds unless
the process dies there, so a live message is not missing for two sweeps (30 s apart by
default). Were one republished anyway, the copy that runs second finds the delivery
ledger at ``delivered`` or ``sending`` and does not send blindly; only two copies
running at the very same moment could both send, under the same idempotency key.

The records hold the unit's arguments, so a backlog takes about twice its size in
Redis while it drains; a record is removed as soon as its unit settles.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import redis

from tidegate._redis import map_redis_errors
from tidegate.errors import ConfigurationError
from tidegate.flow.backends.base import DEFAULT_PREFIX
from tidegate.logging import get_logger

__all__ = ["DEFAULT_MISSES", "OrphanVerdict", "Outstanding", "OutstandingUnit", "find_orphans"]

log = get_logger("tidegate.load")

#: Consecutive sweeps a unit's message must be missing before it is republished.
DEFAULT_MISSES = 2


@dataclass(frozen=True, slots=True)
class OutstandingUnit:
    """What is needed to publish a unit again, and which message carries it now."""

    key: str
    task: str
    task_id: str
    queue: str
    args: list[Any]
    kwargs: dict[str, Any]

    def to_json(self) -> str:
        return json.dumps(
            {
                "task": self.task,
                "task_id": self.task_id,
                "queue": self.queue,
                "args": self.args,
                "kwargs": self.kwargs,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, key: str, raw: str | bytes) -> OutstandingUnit:
        data = json.loads(raw)
        return cls(
            key,
            str(data["task"]),
            str(data["task_id"]),
            str(data["queue"]),
            list(data["args"]),
            dict(data["kwargs"]),
        )


@dataclass(frozen=True, slots=True)
class OrphanVerdict:
    """One sweep's decision: whom to republish, and the miss counts to store."""

    orphans: list[OutstandingUnit]
    misses: dict[str, int]


def find_orphans(
    units: Iterable[OutstandingUnit],
    *,
    present_task_ids: set[str],
    parked_keys: set[str],
    misses: Mapping[str, int],
    threshold: int = DEFAULT_MISSES,
) -> OrphanVerdict:
    """Decide from one consistent snapshot which units the broker has lost.

    A unit is present when its current message id is in a queue list or in
    ``unacked``, or its key is in the parking lot. A present unit's miss count
    returns to 0; an absent one's grows by one, and at ``threshold`` it is an orphan.
    """
    if threshold < 1:
        raise ConfigurationError(f"threshold must be >= 1, got {threshold!r}")
    orphans, counts = [], {}
    for unit in units:
        if unit.task_id in present_task_ids or unit.key in parked_keys:
            continue
        count = int(misses.get(unit.key, 0)) + 1
        if count >= threshold:
            orphans.append(unit)
        else:
            counts[unit.key] = count
    return OrphanVerdict(orphans, counts)


class Outstanding:
    """The registry of published, unsettled units of one namespace.

    Args:
        client: a sync Redis client (tidegate's Redis, not necessarily the broker's).
        prefix: key prefix; all keys share one ``{hash tag}``.
    """

    def __init__(self, client: redis.Redis, *, prefix: str = DEFAULT_PREFIX) -> None:
        self.client = client
        base = f"{prefix}:{{outstanding}}"
        self.units_key = f"{base}:units"
        self.misses_key = f"{base}:misses"
        self.lock_key = f"{base}:sweep-lock"

    def record(self, unit: OutstandingUnit) -> None:
        """Remember ``unit`` (replacing an older record of its key: a new message)."""
        with map_redis_errors("outstanding record"):
            pipe = self.client.pipeline(transaction=True)
            pipe.hset(self.units_key, unit.key, unit.to_json())
            pipe.hdel(self.misses_key, unit.key)
            pipe.execute()

    def settle(self, key: str) -> None:
        """Forget ``key``: it was delivered or dead-lettered."""
        with map_redis_errors("outstanding settle"):
            pipe = self.client.pipeline(transaction=False)
            pipe.hdel(self.units_key, key)
            pipe.hdel(self.misses_key, key)
            pipe.execute()

    def get(self, key: str) -> OutstandingUnit | None:
        with map_redis_errors("outstanding get"):
            raw = self.client.hget(self.units_key, key)
        return None if raw is None else OutstandingUnit.from_json(key, raw)

    def __len__(self) -> int:
        with map_redis_errors("outstanding count"):
            return int(self.client.hlen(self.units_key))

    @staticmethod
    def parse_units(raw: Mapping[bytes, bytes]) -> list[OutstandingUnit]:
        """Records as read with HGETALL (a malformed one is logged and skipped)."""
        units = []
        for key, value in raw.items():
            try:
                units.append(OutstandingUnit.from_json(key.decode(), value))
            except (ValueError, KeyError, TypeError):
                log.error("outstanding_record_unreadable", key=key.decode(errors="replace"))
        return units

    def store_misses(self, verdict: OrphanVerdict, *, present: Iterable[str]) -> None:
        """Write one sweep's miss counts (present units back to 0)."""
        with map_redis_errors("outstanding misses"):
            pipe = self.client.pipeline(transaction=True)
            gone = list(present)
            if gone:
                pipe.hdel(self.misses_key, *gone)
            if verdict.misses:
                counts: dict[Any, Any] = dict(verdict.misses)
                pipe.hset(self.misses_key, mapping=counts)
            pipe.execute()
