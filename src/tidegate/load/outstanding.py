"""Units published and not yet settled, so that a unit the broker lost can be given back.

kombu's Redis transport takes a message with ``BRPOP`` and records it in its
``unacked`` hash only afterwards, in a separate pipeline: a worker *main* process
killed between the two loses the message it just popped, and ``acks_late`` cannot
help because kombu never counted it as delivered (celery/kombu#305,
celery/celery#7950). Sidekiq sells "reliable fetch" for the same hole.

tidegate closes it from the outside. Every tracked publish records the unit here
(idempotency key -> task, arguments, queue and the task id of its current message);
settling it (delivered, dead-lettered) removes the record. Every worker main process
beats (:meth:`Outstanding.beat`); only a worker silent for longer than a few beats
can have lost a message, and only its death *arms* a few orphan sweeps
(:mod:`tidegate.integrations.celery.sweep`). Unarmed, a sweep is one small call.

How an armed sweep finds the units that can have been lost without reading the queues
(publish sequences ``s0``/``s1`` and the oldest queued message) is explained in
:mod:`tidegate.integrations.celery.sweep_index`, which reads the index this registry keeps.

The values and the verdict live in :mod:`tidegate.load.outstanding_units` (re-exported
here), with :class:`~tidegate.load.protocols.OutstandingStore`, the protocol
this Redis store and its memory twin (:class:`tidegate.load.memory.MemoryOutstanding`)
share. The clock is injectable (``clock=``, ms since epoch): it stamps the sequences
and the workers' beats; without one, Redis ``TIME`` does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast

import redis

from tidegate._redis import hash_pages, lua_script, map_redis_errors, script_now_ms
from tidegate.keys import DEFAULT_PREFIX, Keyspace
from tidegate.load.outstanding_units import (
    DEFAULT_MISSES,
    LANE_HEADER,
    SEQ_HEADER,
    IndexEntry,
    OrphanVerdict,
    OutstandingUnit,
    find_orphans,
)
from tidegate.logging import get_logger, key_hash

if TYPE_CHECKING:
    from redis.commands.core import Script

__all__ = [
    "DEFAULT_MISSES",
    "LANE_HEADER",
    "SEQ_HEADER",
    "IndexEntry",
    "OrphanVerdict",
    "Outstanding",
    "OutstandingUnit",
    "find_orphans",
]

log = get_logger("tidegate.load")


class Outstanding:
    """The registry of published, unsettled units of one namespace, and its sweep index.

    Args:
        client: a sync Redis client (tidegate's Redis, not necessarily the broker's).
        prefix: key prefix (keys: :meth:`tidegate.keys.Keyspace.outstanding`).
        clock: ms since the epoch for sequences and beats; ``None`` = Redis ``TIME``,
            the fleet clock (tests pass a ``ManualClock``'s ``now_ms``).
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.client = client
        self._clock = clock
        self.keys = keys = Keyspace(prefix).outstanding()
        self.base = keys.base
        self.units_key = keys.units
        self.misses_key = keys.misses
        self.lock_key = keys.sweep_lock
        self.workers_key = keys.workers
        self.armed_key = keys.armed
        self.present_key = keys.present
        self.queues_key = keys.queues
        self.seq_key = keys.seq
        self.seen_key = keys.seen
        self.indexed_key = keys.indexed
        self._beat = client.register_script(lua_script("worker_beat", "tidegate.load"))
        self._take = client.register_script(lua_script("sweep_take", "tidegate.load"))
        self._record = client.register_script(lua_script("outstanding_record", "tidegate.load"))
        self._pushed = client.register_script(lua_script("outstanding_pushed", "tidegate.load"))
        self._publish = client.register_script(lua_script("outstanding_publish", "tidegate.load"))
        self._drop = client.register_script(lua_script("outstanding_drop", "tidegate.load"))
        self._requeued = client.register_script(lua_script("outstanding_requeued", "tidegate.load"))

    def _now_arg(self) -> str:
        return script_now_ms(self._clock)

    def published_key(self, lane: str) -> str:
        """Units of ``lane`` whose push is not confirmed yet (score ``s0``)."""
        return self.keys.published(lane)

    def pushed_key(self, lane: str) -> str:
        """Units of ``lane`` pushed to the broker (score ``s1``)."""
        return self.keys.pushed(lane)

    # -- the fleet's roll -------------------------------------------------------------

    def beat(
        self, worker: str, *, dead_after_s: float, arm_sweeps: int, now_ms: float | None = None
    ) -> int:
        """Record that ``worker`` is alive; arm ``arm_sweeps`` sweeps if another worker
        has been silent for ``dead_after_s``. Returns how many dead workers were found."""
        args: list[str | int | float] = [
            worker,
            int(dead_after_s * 1000),
            arm_sweeps,
            self._now_arg() if now_ms is None else now_ms,
        ]
        with map_redis_errors("worker beat"):
            return int(self._beat([self.workers_key, self.armed_key], args))

    def retire(self, worker: str) -> None:
        """``worker`` stops cleanly: its silence is no death."""
        with map_redis_errors("worker retire"):
            self.client.zrem(self.workers_key, worker)

    def workers(self) -> list[str]:
        """The workers on the roll (alive, or not yet found dead), sorted."""
        with map_redis_errors("worker roll"):
            names = cast("list[bytes]", self.client.zrange(self.workers_key, 0, -1))
        return sorted(name.decode() for name in names)

    def arm(self, sweeps: int) -> None:
        """Arm ``sweeps`` sweeps now (an operator who knows a worker died)."""
        with map_redis_errors("arm sweep"):
            self.client.set(self.armed_key, sweeps)

    def take_armed_sweep(self) -> bool:
        """Use one armed sweep; False when none is armed (and the miss counts are gone)."""
        with map_redis_errors("take sweep"):
            keys = [self.armed_key, self.misses_key, self.seen_key]
            return int(self._take(keys, [])) > 0

    # -- a unit's life ----------------------------------------------------------------

    def record(self, unit: OutstandingUnit) -> int:
        """Remember ``unit`` before its message is pushed (replacing an older record of
        its key); returns its ``s0``, for the message's :data:`SEQ_HEADER`."""
        keys = [self.units_key, self.misses_key, self.queues_key, self.seq_key, self.indexed_key]
        with map_redis_errors("outstanding record"):
            args = [unit.key, unit.to_json(), self.base, unit.queue, unit.index_lane]
            return int(self._record(keys, [*args, self._now_arg()]))

    def publish_keys_args(
        self, unit: OutstandingUnit, list_key: str, head: str, tail: str
    ) -> tuple[list[str], list[str]]:
        """KEYS and ARGV of ``outstanding_publish.lua`` (see :meth:`publish`)."""
        keys = [self.units_key, self.misses_key, self.queues_key, self.seq_key, self.indexed_key]
        args = [unit.key, unit.to_json(), self.base, unit.queue, unit.index_lane, head, tail]
        return [*keys, list_key], [*args, self._now_arg()]

    @property
    def publish_script(self) -> str:
        """The text of ``outstanding_publish.lua``."""
        return str(self._publish.script)

    @property
    def publish_script_object(self) -> Script:
        """``outstanding_publish.lua`` as redis-py's :class:`~redis.commands.core.Script`
        (its SHA1), for a pipeline that runs it by ``EVALSHA`` and loads it if missing."""
        return self._publish

    def publish(
        self, unit: OutstandingUnit, list_key: str, head: str, tail: str
    ) -> tuple[int, int]:
        """:meth:`record`, the broker's LPUSH of ``head + s0 + tail`` to ``list_key``,
        and :meth:`pushed`, in one round trip; returns ``(s0, s1)``.

        Only for a broker list on this registry's own Redis server and database. Redis
        errors are raised as redis-py raises them, as the LPUSH alone would be, so that
        the publisher's retry policy still recognises them.
        """
        keys, args = self.publish_keys_args(unit, list_key, head, tail)
        s0, s1 = cast("list[int]", self._publish(keys, args))
        return int(s0), int(s1)

    def pushed(self, key: str, lane: str, s0: int, *, s1: int | None = None) -> int:
        """The message recorded under ``s0`` is in the broker (list ``lane``): index the
        unit under a new ``s1`` (or the given one). Returns ``s1``, 0 if the unit was not
        waiting under ``s0``."""
        keys = [self.published_key(lane), self.pushed_key(lane), self.seq_key]
        with map_redis_errors("outstanding pushed"):
            args: list[str | int] = [key, s0, "" if s1 is None else s1, self._now_arg()]
            return int(self._pushed(keys, args))

    def requeued(self, key: str, task_id: str) -> int:
        """kombu pushed ``task_id`` (the unit's current message) again at the newest end
        of its list: a new ``s1``. Returns it, 0 if the record is of another message."""
        with map_redis_errors("outstanding requeued"):
            keys = [self.units_key, self.seq_key, self.misses_key]
            return int(self._requeued(keys, [key, task_id, self.base, self._now_arg()]))

    def hold(self, key: str) -> None:
        """``key`` is parked: the lot holds it, the sweep need not look for it."""
        with map_redis_errors("outstanding hold"):
            self._drop([self.units_key, self.misses_key], [key, self.base, "hold"])

    def settle(self, key: str) -> None:
        """Forget ``key``: it was delivered or dead-lettered."""
        with map_redis_errors("outstanding settle"):
            self._drop([self.units_key, self.misses_key], [key, self.base, "settle"])

    def queues(self) -> list[str]:
        """Every queue a recorded unit was published to (a handful of names)."""
        with map_redis_errors("outstanding queues"):
            names = cast("set[bytes]", self.client.smembers(self.queues_key))
        return sorted(name.decode() for name in names)

    def get(self, key: str) -> OutstandingUnit | None:
        with map_redis_errors("outstanding get"):
            raw = self.client.hget(self.units_key, key)
        return None if raw is None else OutstandingUnit.from_json(key, raw)

    def indexed(self, key: str, lane: str) -> IndexEntry | None:
        """Where the sweep's index of ``lane`` has ``key``, if anywhere."""
        with map_redis_errors("outstanding index"):
            pipe = self.client.pipeline(transaction=False)
            pipe.zscore(self.published_key(lane), key)
            pipe.zscore(self.pushed_key(lane), key)
            published, pushed = pipe.execute()
        if pushed is not None:
            return IndexEntry("pushed", int(pushed))
        return None if published is None else IndexEntry("published", int(published))

    def __len__(self) -> int:
        with map_redis_errors("outstanding count"):
            return int(self.client.hlen(self.units_key))

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
