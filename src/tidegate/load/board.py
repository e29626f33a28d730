"""The load board: where the monitor publishes each queue's latest :class:`BoardEntry`.

Producers read it to decide shedding (the monitor is the one sampler, so "N
consecutive samples" means the same thing fleet-wide) and ``/metrics`` reads it to
export. An entry's age is measured on the board's clock — the fleet clock, Redis
``TIME``, unless one is injected — so a producer never compares its own clock with the
monitor's, and a board nobody refreshes goes stale (:meth:`BoardEntry.fresh`) rather
than being trusted forever.

Callers see a board as a :class:`~tidegate.load.protocols.LoadBoardStore`:
:class:`LoadBoard` is one Redis hash,
``<prefix>:{load}:board`` (queue → entry JSON);
:class:`tidegate.load.memory.MemoryLoadBoard` its one-process twin, holding the same
JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import redis

from tidegate._redis import clock_ms, map_redis_errors
from tidegate.keys import DEFAULT_PREFIX, Keyspace
from tidegate.load.depth import QueueDepth
from tidegate.load.levels import LoadState, Watermarks
from tidegate.load.scaling import GateView

__all__ = ["BoardEntry", "LoadBoard"]


@dataclass(frozen=True, slots=True)
class BoardEntry:
    """What the monitor published about one queue at one sample.

    Attributes:
        state: the load state after the sample.
        depth: the raw sample (ready / unacked / consumers).
        marks: the watermarks the sample was judged with.
        gate: the downstream gate's view, when the queue has one.
        sampled_at_ms: Redis ``TIME`` at the sample, ms since the epoch.
        interval_s: the monitor's sampling period.
        age_s: seconds since the sample (Redis clock), set when read.
    """

    state: LoadState
    depth: QueueDepth
    marks: Watermarks
    gate: GateView | None = None
    sampled_at_ms: float = 0.0
    interval_s: float = 1.0
    age_s: float = field(default=0.0, compare=False)

    def fresh(self, *, periods: float = 3.0) -> bool:
        """Whether the monitor sampled within ``periods`` sampling periods."""
        return self.age_s <= periods * self.interval_s

    def to_json(self) -> str:
        return json.dumps(
            {
                "state": self.state.as_dict(),
                "depth": {
                    "ready": self.depth.ready,
                    "unacked": self.depth.unacked,
                    "consumers": self.depth.consumers,
                },
                "marks": self.marks.as_dict(),
                "gate": self.gate.as_dict() if self.gate is not None else None,
                "sampled_at_ms": self.sampled_at_ms,
                "interval_s": self.interval_s,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, raw: str | bytes, now_ms: float) -> BoardEntry:
        data = json.loads(raw)
        state = LoadState.from_dict(data["state"])
        depth = data["depth"]
        sampled = float(data["sampled_at_ms"])
        return cls(
            state=state,
            depth=QueueDepth(state.queue, depth["ready"], depth["unacked"], depth["consumers"]),
            marks=Watermarks(**data["marks"]),
            gate=GateView.from_dict(data["gate"]) if data.get("gate") else None,
            sampled_at_ms=sampled,
            interval_s=float(data["interval_s"]),
            age_s=max(0.0, (now_ms - sampled) / 1000.0),
        )


class LoadBoard:
    """The board in Redis: one hash, ``<prefix>:{load}:board``, queue → entry JSON.

    Args:
        client: a sync Redis client.
        prefix: key prefix.
        clock: ms since the epoch; ``None`` = Redis ``TIME``, the fleet clock (tests
            pass a :class:`~tidegate.flow.backends.memory.ManualClock`'s ``now_ms``).
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.client = client
        self.key = Keyspace(prefix).load_board()
        self._clock = clock

    def now_ms(self) -> float:
        """The board's clock (Redis ``TIME`` unless one was injected), ms since the epoch."""
        return clock_ms(self.client, self._clock, "board clock")

    def publish(self, entries: Sequence[BoardEntry]) -> None:
        if not entries:
            return
        with map_redis_errors("publish load"):
            self.client.hset(
                self.key, mapping={entry.state.queue: entry.to_json() for entry in entries}
            )

    def read(self, queues: Sequence[str] | None = None) -> dict[str, BoardEntry]:
        """The latest entries (all, or of ``queues``), with their age on the board's clock."""
        with map_redis_errors("read load"):
            pipe = self.client.pipeline(transaction=False)
            if queues is None:
                pipe.hgetall(self.key)
            else:
                pipe.hmget(self.key, list(queues))
            if self._clock is None:
                pipe.time()
            raw, *rest = pipe.execute()
        if rest:
            seconds, micros = rest[0]
            now_ms = seconds * 1000.0 + micros / 1000.0
        else:
            now_ms = self.now_ms()
        if queues is None:
            items = [(k.decode(), v) for k, v in raw.items()]
        else:
            items = [(q, v) for q, v in zip(queues, raw, strict=True) if v is not None]
        return {queue: BoardEntry.from_json(value, now_ms) for queue, value in items}

    def clear(self) -> None:
        with map_redis_errors("clear load"):
            self.client.delete(self.key)
