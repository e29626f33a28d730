"""The charts' memory: one sample of every gate and queue per period, in a bounded ring.

Why the console samples, on its own timer, rather than the monitor or the page:

- the page cannot: with no browser open there would be no history, and with ten open
  there would be ten samplers;
- the monitor samples queues, not gates, and a fleet may run none (the vessel demo
  does not); a console is what wants the charts, so it keeps them.

Several consoles on one fleet take turns through a Redis key set with ``NX`` and a
expiry just under one period (``<prefix>:{console}:history:turn``): per period, one
console samples — one pipelined read, one pipelined write — and every other spends
one ``SET`` that fails. The ring (``<prefix>:{console}:history``, a list trimmed to
the window) is shared, so a console started later shows the last 15 minutes at once.
"""

from __future__ import annotations

import math
import os
import socket
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import cast

import redis

from tidegate._redis import map_redis_errors
from tidegate.console.history import DEFAULT_KEEP_S, Point, point_from_replies
from tidegate.errors import ConfigurationError
from tidegate.keys import DEFAULT_PREFIX, Keyspace

__all__ = ["DEFAULT_SAMPLE_EVERY_S", "HistorySampler"]

#: Seconds between two points of the charts (180 points over 15 minutes).
DEFAULT_SAMPLE_EVERY_S = 5.0


def queue_gate_commands(pipe: redis.client.Pipeline, names: Sequence[str], prefix: str) -> None:
    """Queue the gates view's commands on ``pipe``: ``[config, pause, leases, tat,
    admitted]`` per
    gate (the layout :func:`~tidegate.console.model.gate_rows` reads)."""
    for name in names:
        keys = Keyspace(prefix).limit(name)
        pipe.hgetall(keys.config)
        pipe.hgetall(keys.pause)
        pipe.zcard(keys.leases)
        pipe.get(keys.tat)
        pipe.get(keys.admitted)


class HistorySampler:
    """Takes this period's turn, if no other console has, and stores one point.

    Args:
        client: a sync Redis client.
        prefix: tidegate's key prefix.
        gates: the gates to sample (the console's own list, discovered or named).
        every_s: the period, seconds.
        keep_s: the window the ring holds, seconds.
        gate_env: where the gates' defaults are read (``TIDEGATE_<NAME>_*``); this
            process's environment when ``None``.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        gates: Callable[[], Sequence[str]] = tuple,
        every_s: float = DEFAULT_SAMPLE_EVERY_S,
        keep_s: float = DEFAULT_KEEP_S,
        gate_env: Mapping[str, str] | None = None,
    ) -> None:
        if not (math.isfinite(every_s) and every_s > 0):
            raise ConfigurationError(f"every_s must be a finite number > 0, got {every_s!r}")
        if not (math.isfinite(keep_s) and keep_s >= every_s):
            raise ConfigurationError(f"keep_s must be >= every_s, got {keep_s!r}")
        self.client = client
        self.prefix = prefix
        self.every_s = every_s
        self.keep_s = keep_s
        #: Points the ring keeps: the window, plus one so the oldest pair has a rate.
        self.capacity = math.ceil(keep_s / every_s) + 1
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._gates = gates
        self._gate_env = gate_env
        keyspace = Keyspace(prefix)
        self._ring = keyspace.console_history()
        self._turn = keyspace.console_turn()
        self._board = keyspace.load_board()

    def tick(self) -> Point | None:
        """Sample once if it is this console's turn; returns the point stored, if any."""
        with map_redis_errors("console history"):
            # Just under one period: the next tick of whoever sampled finds it free.
            turn_ms = max(1, int(self.every_s * 900))
            if not self.client.set(self._turn, self.holder, nx=True, px=turn_ms):
                return None
            names = list(self._gates())
            pipe = self.client.pipeline(transaction=False)
            queue_gate_commands(pipe, names, self.prefix)
            pipe.time()
            pipe.hgetall(self._board)
            *replies, board = pipe.execute()
            point = point_from_replies(
                names, replies, cast("dict[bytes, bytes]", board), env=self._gate_env
            )
            pipe = self.client.pipeline(transaction=False)
            pipe.lpush(self._ring, point.to_json())
            pipe.ltrim(self._ring, 0, self.capacity - 1)
            pipe.pexpire(self._ring, int(self.keep_s * 2000))
            pipe.execute()
        return point
