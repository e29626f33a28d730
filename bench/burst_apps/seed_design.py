"""Baseline (b): the seed design — prefetch 1 + acks_late, a read-modify-write Redis
token bucket shared by every worker process, retry with countdown.

The bucket is the racy one on purpose (it is what is being measured): HMGET
``tokens``/``ts``, refill with this process's ``time.monotonic()``, HSET — two round
trips, no Lua, no WATCH (the same code as ``NaiveBucket`` in ``bench/gate.py``).
Customs: rate 10/s, burst 3 (the gateway's real shape); TOS: 80/s, burst 4.

- throttled by the bucket: ``self.retry(countdown=wait + U(0, 1) s)`` — the wait the
  bucket computed plus up to 1 s of jitter so the throttled tasks do not all come back
  on the same tick;
- 429: ``self.retry(countdown=<Retry-After>)``; 503 / transport error:
  ``self.retry(countdown=<2^retries s, full jitter>)``; ``max_retries`` from
  ``BENCH_MAX_RETRIES``. A throttle costs a retry attempt, as in the seed design.
"""

from __future__ import annotations

import random
import time
from typing import Any

from burst_apps._common import (
    CUSTOMS_BURST,
    CUSTOMS_RATE,
    MAX_RETRIES,
    PREFIX,
    TOS_BURST,
    TOS_RATE,
    handle,
    make_app,
    redis_client,
    retry_or_give_up,
)

app = make_app("bench-burst-seed-design")
app.conf.worker_prefetch_multiplier = 1
app.conf.task_acks_late = True

#: Up to this much random delay is added to a throttled task's countdown.
THROTTLE_JITTER_S = 1.0


class NaiveBucket:
    """HMGET tokens/ts → refill in Python with ``time.monotonic()`` → HSET. Racy."""

    def __init__(self, key: str, *, rate: float, burst: int) -> None:
        self.key = key
        self.rate = rate
        self.burst = float(burst)

    def try_acquire(self) -> float:
        """0.0 when a token was taken, else the seconds until one should be available."""
        client = redis_client()
        tokens, ts = client.hmget(self.key, "tokens", "ts")
        now = time.monotonic()
        if tokens is None or ts is None:
            level = self.burst
        else:
            level = min(self.burst, float(tokens) + (now - float(ts)) * self.rate)
        allowed = level >= 1.0
        if allowed:
            level -= 1.0
        client.hset(self.key, mapping={"tokens": repr(level), "ts": repr(now)})
        return 0.0 if allowed else (1.0 - level) / self.rate


BUCKETS = {
    "customs": NaiveBucket(f"{PREFIX}:bucket:customs", rate=CUSTOMS_RATE, burst=CUSTOMS_BURST),
    "tos": NaiveBucket(f"{PREFIX}:bucket:tos", rate=TOS_RATE, burst=TOS_BURST),
}


def _gated(task: Any, name: str, envelope: dict[str, Any]) -> dict[str, Any]:
    wait_s = BUCKETS[name].try_acquire()
    if wait_s > 0:
        countdown = wait_s + random.uniform(0.0, THROTTLE_JITTER_S)
        return retry_or_give_up(task, str(envelope["key"]), "throttled", countdown)
    return handle(task, name, envelope)


@app.task(bind=True, name="edi.customs.submit", max_retries=MAX_RETRIES)
def submit_customs(self: Any, envelope: dict[str, Any]) -> dict[str, Any]:
    """Lodge one customs-bound document with the single window."""
    return _gated(self, "customs", envelope)


@app.task(bind=True, name="edi.tos.push", max_retries=MAX_RETRIES)
def push_tos(self: Any, envelope: dict[str, Any]) -> dict[str, Any]:
    """Push one terminal message to the TOS."""
    return _gated(self, "tos", envelope)
