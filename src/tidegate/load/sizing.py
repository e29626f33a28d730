"""How many worker processes a pool needs around a downstream's limits.

A worker cycles through three phases: it waits for admission (holding nothing — a
worker queued for a lease or a token holds no downstream connection), holds a
connection for the *service time* ``s``, then spends an *overhead* ``o`` on its own
bookkeeping (ledger writes, the broker ack, fetching the next message) with the
connection already given back. So one worker keeps a connection busy only
``s / (s + o)`` of the time:

* under a concurrency cap, keeping all ``cap`` connections busy takes
  ``cap × (s + o) / s`` workers, plus a spare: with exactly that many, a cycle that runs
  long leaves a connection idle, while one more worker waiting on the lease (which costs
  a process's memory, no connection) is there the moment a lease frees. A pool with as
  many processes as connections keeps them busy ``s / (s + o)`` of the drain;
* under a rate limit, Little's law: ``rate × (s + o)`` workers sustain the rate.

The pool needs the smaller of the two when both limits apply. The overhead is measured,
not guessed: :func:`overhead_from_busy_share` reads it back from a run whose pool had no
more processes than connections (each connection then follows one worker's cycle).

With a relay (:mod:`tidegate.downstream.relay`) each connection carries ``depth``
requests at once, one in service and the rest written ahead, so the pool must keep
``cap × depth`` requests outstanding and still cover its overhead: ``cap × (depth + o / s)``
workers, plus the spare (depth 1 is the rule above).

What no pool size buys back is the part of a cycle spent *with the lease held and no
request in service* — the admission's reply, the ledger's ``sending`` write, the HTTP
exchange's own overhead, the release: call it ``h``. The lease is held ``s + h``, so a
connection is busy at most ``s / (s + h)`` of the drain however many workers wait, and
the rule above is right only with ``s`` read as the lease's hold. A busy share from a
run with one worker per connection mixes ``o`` and ``h``; ``bench/tos_turn.py`` tells
them apart (BENCHMARKS.md, "The TOS's connections busy").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tidegate.errors import ConfigurationError

__all__ = [
    "DEFAULT_SPARE_WORKERS",
    "PoolSize",
    "connection_workers",
    "overhead_from_busy_share",
    "pool_size",
    "rate_workers",
]

#: Workers beyond ``cap × cycle / service``: one waiter ready when a cycle runs long.
DEFAULT_SPARE_WORKERS = 1
#: Rounding slack, so ``4 × 0.06 / 0.05`` (4.8000000000000001) is not taken for 4.8 + ε.
_EPS = 1e-9


def _check(service_s: float, overhead_s: float) -> None:
    if not (math.isfinite(service_s) and service_s > 0):
        raise ConfigurationError(f"service_s must be a finite number > 0, got {service_s!r}")
    if not (math.isfinite(overhead_s) and overhead_s >= 0):
        raise ConfigurationError(f"overhead_s must be a finite number >= 0, got {overhead_s!r}")


def connection_workers(
    concurrency: int,
    service_s: float,
    overhead_s: float,
    *,
    spare: int = DEFAULT_SPARE_WORKERS,
    depth: int = 1,
) -> int:
    """Workers that keep ``concurrency`` connections busy, ``depth`` requests on each:
    ``ceil(cap × (depth + o / s)) + spare``.

    Example::

        >>> connection_workers(4, 0.05, 0.02)   # 4 × 0.07 / 0.05 = 5.6 → 6, + 1 spare
        7
        >>> connection_workers(4, 0.05, 0.02, depth=2)   # 4 × (2 + 0.4) = 9.6 → 10, + 1
        11
    """
    _check(service_s, overhead_s)
    if concurrency < 1 or spare < 0 or depth < 1:
        raise ConfigurationError(
            f"need concurrency >= 1, spare >= 0 and depth >= 1, got {concurrency}, {spare}, {depth}"
        )
    return math.ceil(concurrency * (depth + overhead_s / service_s) - _EPS) + spare


def rate_workers(rate: float, service_s: float, overhead_s: float) -> int:
    """Workers that sustain ``rate`` calls per second: ``ceil(rate × (s + o))``, at least 1."""
    _check(service_s, overhead_s)
    if not (math.isfinite(rate) and rate > 0):
        raise ConfigurationError(f"rate must be a finite number > 0, got {rate!r}")
    return max(1, math.ceil(rate * (service_s + overhead_s) - _EPS))


@dataclass(frozen=True, slots=True)
class PoolSize:
    """A pool's size and why.

    Attributes:
        workers: processes the pool needs to keep the downstream busy.
        basis: ``"connections"`` (the concurrency cap binds) or ``"rate"``.
        reason: the arithmetic, for a log line or a report.
    """

    workers: int
    basis: str
    reason: str


def pool_size(
    *,
    rate: float,
    concurrency: int,
    service_s: float,
    overhead_s: float = 0.0,
    spare: int = DEFAULT_SPARE_WORKERS,
    depth: int = 1,
) -> PoolSize:
    """The workers a downstream limited by ``rate`` (0 = none) and ``concurrency``
    (0 = no cap) can keep busy, whichever limit binds first; ``depth``: requests a
    relay keeps on each connection.

    Raises:
        ConfigurationError: neither limit is set, or a time is not finite and positive.

    Example::

        >>> pool_size(rate=1000, concurrency=4, service_s=0.05, overhead_s=0.02).reason
        'connections: ceil(4 × (0.05 + 0.02) s / 0.05 s) + 1 spare = 7'
    """
    _check(service_s, overhead_s)
    sizes: list[PoolSize] = []
    if concurrency > 0:
        n = connection_workers(concurrency, service_s, overhead_s, spare=spare, depth=depth)
        if depth == 1:
            reason = (
                f"connections: ceil({concurrency} × ({service_s:g} + {overhead_s:g}) s / "
                f"{service_s:g} s) + {spare} spare = {n}"
            )
        else:
            reason = (
                f"connections × depth: ceil({concurrency} × ({depth} + {overhead_s:g} s / "
                f"{service_s:g} s)) + {spare} spare = {n}"
            )
        sizes.append(PoolSize(n, "connections", reason))
    if rate > 0:
        n = rate_workers(rate, service_s, overhead_s)
        reason = f"rate: ceil({rate:g}/s × ({service_s:g} + {overhead_s:g}) s) = {n}"
        sizes.append(PoolSize(n, "rate", reason))
    if not sizes:
        raise ConfigurationError("a pool size needs a rate or a concurrency cap")
    return min(sizes, key=lambda size: size.workers)


def overhead_from_busy_share(busy_share: float, service_s: float) -> float:
    """The per-task overhead a run shows, from its downstream's busy share.

    Valid for a run whose pool had at most as many processes as connections: each
    connection then follows one worker's cycle, so ``busy = s / (s + o)`` and
    ``o = s × (1 / busy − 1)``.

    Example::

        >>> round(overhead_from_busy_share(0.8, 0.05), 4)
        0.0125
    """
    if not (math.isfinite(busy_share) and 0 < busy_share <= 1):
        raise ConfigurationError(f"busy_share must be in (0, 1], got {busy_share!r}")
    _check(service_s, 0.0)
    return service_s * (1.0 / busy_share - 1.0)
