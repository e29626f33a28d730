"""Units published and not yet settled, so that a unit the broker lost can be given back.

kombu's Redis transport takes a message with ``BRPOP`` and records it in its
``unacked`` hash only afterwards, in a separate pipeline: a worker *main* process
killed between the two loses the message it just popped, and ``acks_late`` cannot
help because kombu never counted it as delivered (celery/kombu#305,
celery/celery#7950). Sidekiq sells "reliable fetch" for the same hole.

tidegate closes it from the outside. Every tracked publish records the unit here
(idempotency key → task, arguments, queue and the task id of its current message);
settling it — delivered, dead-lettered — removes the record. Every worker main
process beats (:meth:`Outstanding.beat`); a worker silent for longer than a few beats
died without a clean shutdown, and only then is there anything to look for: its death
*arms* a few orphan sweeps (:mod:`tidegate.integrations.celery.sweep`). In normal
operation the sweep costs one small Redis call per interval, whatever the backlog.

An armed sweep reads the broker's lists, its ``unacked`` hash and the parking lot in
bounded pages into a scratch set in Redis, then walks the records in pages against
it: a unit whose message is in none of them for ``misses`` sweeps in a row is
republished. Reading order makes the pages safe without one atomic snapshot: a message
only moves from a list to ``unacked`` (read after the lists) while the sweep reads,
and a unit published after its list was read is missing once, not twice. kombu's own
in-between states (popped but not yet in ``unacked``) last microseconds unless the
process dies there. Were a live unit republished anyway, the copy that runs second
finds the delivery ledger at ``delivered`` or ``sending`` and does not send blindly;
only two copies running at the very same moment could both send, under the same
idempotency key.

The records hold the unit's arguments, so a backlog takes about twice its size in
Redis while it drains; a record is removed as soon as its unit settles.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

import redis

from tidegate._redis import hash_pages, lua_script, map_redis_errors
from tidegate.errors import ConfigurationError
from tidegate.flow.backends.base import DEFAULT_PREFIX
from tidegate.logging import get_logger, key_hash

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
        self.workers_key = f"{base}:workers"
        self.armed_key = f"{base}:armed"
        self.present_key = f"{base}:present"
        self.queues_key = f"{base}:queues"
        self._beat = client.register_script(lua_script("worker_beat", "tidegate.load"))
        self._take = client.register_script(lua_script("sweep_take", "tidegate.load"))

    def beat(
        self, worker: str, *, dead_after_s: float, arm_sweeps: int, now_ms: float | None = None
    ) -> int:
        """Record that ``worker`` is alive; arm ``arm_sweeps`` sweeps if another worker
        has been silent for ``dead_after_s``. Returns how many dead workers were found."""
        args: list[str | int | float] = [
            worker,
            int(dead_after_s * 1000),
            arm_sweeps,
            "" if now_ms is None else now_ms,
        ]
        with map_redis_errors("worker beat"):
            return int(self._beat([self.workers_key, self.armed_key], args))

    def retire(self, worker: str) -> None:
        """``worker`` stops cleanly: its silence is no death."""
        with map_redis_errors("worker retire"):
            self.client.zrem(self.workers_key, worker)

    def arm(self, sweeps: int) -> None:
        """Arm ``sweeps`` sweeps now (an operator who knows a worker died)."""
        with map_redis_errors("arm sweep"):
            self.client.set(self.armed_key, sweeps)

    def take_armed_sweep(self) -> bool:
        """Use one armed sweep; False when none is armed (and the miss counts are gone)."""
        with map_redis_errors("take sweep"):
            return int(self._take([self.armed_key, self.misses_key], [])) > 0

    def iter_pages(self, page: int) -> Iterator[list[OutstandingUnit]]:
        """Every record, ``page`` at a time (HSCAN: never the whole registry at once)."""
        for raw in hash_pages(self.client, self.units_key, page, "outstanding scan"):
            yield self.parse_units(raw)

    def misses_of(self, keys: list[str]) -> dict[str, int]:
        """The stored miss counts of ``keys`` (absent keys have none)."""
        if not keys:
            return {}
        with map_redis_errors("outstanding misses"):
            values = cast("list[bytes | None]", self.client.hmget(self.misses_key, keys))
        return {k: int(v) for k, v in zip(keys, values, strict=True) if v is not None}

    def record(self, unit: OutstandingUnit) -> None:
        """Remember ``unit`` (replacing an older record of its key: a new message)."""
        with map_redis_errors("outstanding record"):
            pipe = self.client.pipeline(transaction=True)
            pipe.hset(self.units_key, unit.key, unit.to_json())
            pipe.hdel(self.misses_key, unit.key)
            pipe.sadd(self.queues_key, unit.queue)
            pipe.execute()

    def queues(self) -> list[str]:
        """Every queue a recorded unit was published to (a handful of names)."""
        with map_redis_errors("outstanding queues"):
            names = cast("set[bytes]", self.client.smembers(self.queues_key))
        return sorted(name.decode() for name in names)

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
                log.error(
                    "outstanding_record_unreadable", key_hash=key_hash(key.decode(errors="replace"))
                )
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
