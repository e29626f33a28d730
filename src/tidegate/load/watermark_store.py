"""The live watermarks, fleet-wide: the process's defaults, overridden in a store.

Like the gate's policy, values set here (``tidegate watermarks set``) win over the
defaults without a restart. Overrides can be global or per queue (``hwm``,
``hwm@edi.customs``); a per-queue value wins over a global one.

The rules (which value wins, what a change must not break) live once, in
:class:`WatermarkOverrides`; a store only reads, writes and deletes the raw override
fields: :class:`WatermarkStore` in one Redis hash, ``<prefix>:{load}:watermarks``,
:class:`tidegate.load.memory.MemoryWatermarkStore` in a dict. Callers see either as a
:class:`~tidegate.load.protocols.WatermarkConfigStore`.

The defaults are the process's :attr:`Settings.watermarks
<tidegate.settings.Settings.watermarks>`, handed in by whoever built the settings (the
CLI, the runtime); without them a store uses the built-in :class:`Watermarks`, never
the environment behind the caller's back.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from typing import Any, cast

import redis

from tidegate._redis import map_redis_errors
from tidegate.errors import ConfigurationError
from tidegate.keys import DEFAULT_PREFIX, Keyspace
from tidegate.load.levels import Watermarks
from tidegate.logging import get_logger

__all__ = ["WatermarkOverrides", "WatermarkStore", "effective_watermarks"]

log = get_logger("tidegate.load")

_FIELDS = ("hwm", "lwm", "shed_after")


def effective_watermarks(
    defaults: Watermarks, raw: Mapping[str, float], queue: str | None
) -> Watermarks:
    """``queue``'s watermarks (or the global ones): defaults, then global overrides,
    then the queue's own. Raises :class:`ConfigurationError` when they do not fit."""
    values: dict[str, float] = {k: float(v) for k, v in defaults.as_dict().items()}
    for name in _FIELDS:
        if name in raw:
            values[name] = raw[name]
        if queue is not None and f"{name}@{queue}" in raw:
            values[name] = raw[f"{name}@{queue}"]
    return Watermarks(**values)  # type: ignore[arg-type]


class WatermarkOverrides(abc.ABC):
    """The override rules over three storage primitives (:meth:`_read`, :meth:`_write`,
    :meth:`_delete`), so the Redis store and its twin cannot disagree on them.

    Args:
        defaults: the process's watermarks (``Settings.watermarks``); the built-in
            :class:`Watermarks` when omitted.
    """

    def __init__(self, *, defaults: Watermarks | None = None) -> None:
        self.defaults = defaults if defaults is not None else Watermarks()

    @abc.abstractmethod
    def _read(self) -> dict[str, float]:
        """Every stored override field and its value."""

    @abc.abstractmethod
    def _write(self, fields: Mapping[str, float]) -> None:
        """Store these override fields (others are kept)."""

    @abc.abstractmethod
    def _delete(self, fields: Iterable[str] | None) -> None:
        """Drop these override fields; ``None``: every one."""

    def get(self, queue: str | None = None) -> Watermarks:
        """The effective watermarks of ``queue`` (or the global ones)."""
        return effective_watermarks(self.defaults, self._read(), queue)

    def get_many(self, queues: Iterable[str]) -> dict[str, Watermarks]:
        """The effective watermarks of several queues, in one read."""
        raw = self._read()
        return {queue: effective_watermarks(self.defaults, raw, queue) for queue in queues}

    def overrides(self) -> dict[str, float]:
        """The stored overrides (``hwm``, ``hwm@edi.customs`` …)."""
        return self._read()

    def configure(
        self,
        *,
        queue: str | None = None,
        hwm: int | None = None,
        lwm: int | None = None,
        shed_after: int | None = None,
    ) -> Watermarks:
        """Retune the running fleet; validated against every queue it affects.

        Raises:
            ConfigurationError: nothing to change, or the result would be invalid
                (e.g. ``lwm >= hwm``) for this queue or, for a global change, for any
                queue with its own overrides.
        """
        given = (("hwm", hwm), ("lwm", lwm), ("shed_after", shed_after))
        changes = {name: value for name, value in given if value is not None}
        if not changes:
            raise ConfigurationError("nothing to change: give hwm, lwm or shed_after")
        suffix = f"@{queue}" if queue is not None else ""
        raw = self._read()
        updated = {**raw, **{f"{k}{suffix}": float(v) for k, v in changes.items()}}
        result = effective_watermarks(self.defaults, updated, queue)
        for other in {k.split("@", 1)[1] for k in updated if "@" in k}:
            effective_watermarks(self.defaults, updated, other)
        self._write({f"{k}{suffix}": v for k, v in changes.items()})
        log.warning("queue_watermarks_configured", queue=queue, **changes)
        return result

    def reset(self, queue: str | None = None) -> None:
        """Drop the stored overrides of ``queue`` (or every override)."""
        self._delete(None if queue is None else [f"{name}@{queue}" for name in _FIELDS])
        log.warning("queue_watermarks_reset", queue=queue)


class WatermarkStore(WatermarkOverrides):
    """The live watermarks in Redis: one hash, ``<prefix>:{load}:watermarks``.

    Args:
        client: a sync Redis client.
        prefix: key prefix.
        defaults: the process's watermarks (``Settings.watermarks``); the built-in
            :class:`Watermarks` when omitted.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        defaults: Watermarks | None = None,
    ) -> None:
        super().__init__(defaults=defaults)
        self.client = client
        self.key = Keyspace(prefix).watermarks()

    def _read(self) -> dict[str, float]:
        with map_redis_errors("read watermarks"):
            raw = cast("dict[bytes, bytes]", self.client.hgetall(self.key))
        return {k.decode(): float(v) for k, v in raw.items()}

    def _write(self, fields: Mapping[str, float]) -> None:
        mapping: dict[Any, Any] = dict(fields)
        with map_redis_errors("configure watermarks"):
            self.client.hset(self.key, mapping=mapping)

    def _delete(self, fields: Iterable[str] | None) -> None:
        with map_redis_errors("reset watermarks"):
            if fields is None:
                self.client.delete(self.key)
            else:
                self.client.hdel(self.key, *fields)
