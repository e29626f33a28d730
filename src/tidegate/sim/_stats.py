"""What a simulated downstream counts, and the two reductions benchmarks need.

A sim records every *accepted* write with its ``Idempotency-Key`` and the instant it
was accepted, and counts every answer it gave by status. Duplicates (one key accepted
twice) and losses (a key never accepted) are computed from the keys; "never above the
real capacity" is checked with :func:`max_in_window` over the accept timeline, and a
call-rate plot is :func:`bucket_counts` of the same timeline. Each admitted write's
service interval (when it started and when it ended) is kept too, so how busy a
connection-limited downstream was is read from its own record (:func:`busy_share`),
not inferred from the clients.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["StatsRecorder", "bucket_counts", "busy_share", "max_in_window"]


def max_in_window(timestamps: Sequence[float], window_s: float = 1.0) -> int:
    """The largest number of timestamps inside any half-open window ``[t, t + window_s)``.

    Args:
        timestamps: accept instants in seconds, in any order.
        window_s: the window length in seconds (> 0).

    A token bucket of ``rate`` per second and ``burst`` never accepts more than
    ``burst + rate * window_s`` in such a window, which is what a benchmark asserts.

    Example::

        >>> max_in_window([0.0, 0.1, 0.9, 1.0, 1.05], 1.0)
        4
    """
    if not window_s > 0:
        raise ValueError(f"window_s must be > 0, got {window_s!r}")
    ordered = sorted(timestamps)
    best = 0
    start = 0
    for end, t in enumerate(ordered):
        while t - ordered[start] >= window_s:
            start += 1
        best = max(best, end - start + 1)
    return best


def bucket_counts(
    timestamps: Sequence[float], bucket_s: float = 0.1, *, start: float | None = None
) -> list[int]:
    """Count timestamps per consecutive bucket of ``bucket_s`` seconds, for a rate plot.

    Args:
        timestamps: accept instants in seconds, in any order.
        bucket_s: bucket width in seconds (> 0); 0.1 gives a 100-ms resolution.
        start: the left edge of the first bucket; the earliest timestamp by default.
            Timestamps before it are ignored.

    Returns:
        One count per bucket, from ``start`` to the bucket holding the latest timestamp
        (empty when there are no timestamps).
    """
    if not bucket_s > 0:
        raise ValueError(f"bucket_s must be > 0, got {bucket_s!r}")
    if not timestamps:
        return []
    origin = min(timestamps) if start is None else start
    indexes = [math.floor((t - origin) / bucket_s) for t in timestamps if t >= origin]
    if not indexes:
        return []
    counts = [0] * (max(indexes) + 1)
    for index in indexes:
        counts[index] += 1
    return counts


def busy_share(intervals: Sequence[tuple[float, float]], connections: int) -> float | None:
    """How much of ``connections`` × the drain the downstream spent serving calls.

    Args:
        intervals: ``(start, end)`` of every served call, seconds, in any order.
        connections: the calls the downstream serves at once (>= 1).

    Returns:
        The summed service time over ``connections × (last end − first start)``, in
        [0, 1] when no more than ``connections`` overlap; ``None`` without a call of
        non-zero length. The drain runs from the first call's start to the last call's
        end, so idle connections before the first call and after the last do not count,
        while every gap between calls does.

    Example::

        >>> busy_share([(0.0, 1.0), (0.0, 0.5), (0.6, 1.0)], 2)
        0.95
    """
    if connections < 1:
        raise ValueError(f"connections must be >= 1, got {connections!r}")
    if not intervals:
        return None
    first = min(start for start, _ in intervals)
    last = max(end for _, end in intervals)
    if not last > first:
        return None
    busy = sum(end - start for start, end in intervals)
    return busy / (connections * (last - first))


class StatsRecorder:
    """The counters of one sim. Not thread-safe: the sim calls it under its own lock.

    Instants are recorded on the sim's monotonic clock and turned into ``time.time()``
    floats only when reported, through ``to_wall``.
    """

    __slots__ = (
        "_accept_times",
        "_answers",
        "_keys",
        "_lookups",
        "_max_concurrent",
        "_requests",
        "_responses",
        "_seen",
        "_service",
    )

    def __init__(self) -> None:
        self._keys: list[str] = []
        self._seen: set[str] = set()
        self._accept_times: list[float] = []
        self._answers: list[tuple[float, int]] = []
        self._service: list[tuple[float, float]] = []
        self._responses: Counter[int] = Counter()
        self._max_concurrent = 0
        self._requests = 0
        self._lookups = 0

    def reset(self, *, in_flight: int = 0) -> None:
        """Forget everything; requests still in flight keep counting as concurrent."""
        self._keys.clear()
        self._seen.clear()
        self._accept_times.clear()
        self._answers.clear()
        self._service.clear()
        self._responses.clear()
        self._max_concurrent = in_flight
        self._requests = 0
        self._lookups = 0

    def arrived(self, in_flight: int) -> None:
        """A write request arrived; ``in_flight`` includes it."""
        self._requests += 1
        self._max_concurrent = max(self._max_concurrent, in_flight)

    def answered(self, status: int, now: float | None = None) -> None:
        """A write request was answered with ``status`` (at ``now``, for the timeline)."""
        self._responses[status] += 1
        if now is not None:
            self._answers.append((now, status))

    def accepted(self, key: str, now: float) -> bool:
        """Record an accepted write; return whether its key had been accepted before."""
        duplicate = key in self._seen
        self._seen.add(key)
        self._keys.append(key)
        self._accept_times.append(now)
        return duplicate

    def served(self, start: float, end: float) -> None:
        """An admitted write held its connection from ``start`` to ``end``."""
        self._service.append((start, end))

    def busy_share(self, connections: int) -> float | None:
        """:func:`busy_share` of every write served since the last reset."""
        return busy_share(self._service, connections)

    def lookup(self, key: str, *, count: bool = True) -> bool:
        """Count a status lookup; return whether ``key`` was ever accepted.

        ``count=False`` asks without counting (the sim's own question, not a client's).
        """
        if count:
            self._lookups += 1
        return key in self._seen

    def accepted_keys(self) -> list[str]:
        """Every accepted key in accept order, a duplicate once per acceptance."""
        return list(self._keys)

    def snapshot(
        self, *, in_flight: int, to_wall: Callable[[float], float], timeline: bool = True
    ) -> dict[str, Any]:
        """The counters as the JSON-ready dict served at ``GET /stats``."""
        times = self._accept_times
        responses_4xx = sum(
            n for status, n in self._responses.items() if 400 <= status < 500 and status != 429
        )
        snapshot: dict[str, Any] = {
            "accepted": len(self._keys),
            "distinct_keys": len(self._seen),
            "duplicates": len(self._keys) - len(self._seen),
            "requests": self._requests,
            "lookups": self._lookups,
            "responses": {str(status): n for status, n in sorted(self._responses.items())},
            "responses_429": self._responses[429],
            "responses_503": self._responses[503],
            "responses_4xx": responses_4xx,
            "max_concurrent_seen": self._max_concurrent,
            "in_flight": in_flight,
            "first_accept_ts": to_wall(times[0]) if times else None,
            "last_accept_ts": to_wall(times[-1]) if times else None,
            "max_accepted_1s": max_in_window(times, 1.0),
            "served": len(self._service),
            "service_s_total": round(sum(end - start for start, end in self._service), 6),
        }
        if timeline:
            snapshot["accept_timeline"] = [to_wall(t) for t in times]
            snapshot["request_timeline"] = [[to_wall(t), status] for t, status in self._answers]
            snapshot["service_timeline"] = [
                [to_wall(start), to_wall(end)] for start, end in self._service
            ]
        return snapshot
