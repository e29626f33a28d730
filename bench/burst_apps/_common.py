"""What both baseline apps share: configuration from the environment, the HTTP call,
and the retry decision with its bookkeeping.

Environment (set by ``bench/burst.py``):

- ``TIDEGATE_REDIS_URL`` — broker and the counters below;
- ``BENCH_PREFIX`` — key prefix of this run's counters;
- ``BENCH_CUSTOMS_URL`` / ``BENCH_TOS_URL`` — the sims' base URLs;
- ``BENCH_MAX_RETRIES`` — ``max_retries`` of every task;
- ``BENCH_CUSTOMS_RATE`` / ``_BURST``, ``BENCH_TOS_RATE`` / ``_BURST`` — the downstreams'
  limits (``rate_limit`` annotations, the seed design's bucket).

Counters (in Redis, so the benchmark reads them while the run goes on):
``<prefix>:retries`` (hash: reason → retries scheduled), ``<prefix>:gave_up`` (set of
idempotency keys whose task exhausted ``max_retries`` or got a non-retryable answer).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

import httpx
import redis
from celery import Celery
from celery.utils.time import get_exponential_backoff_interval

REDIS_URL = os.environ.get("TIDEGATE_REDIS_URL", "redis://127.0.0.1:6379/0")
PREFIX = os.environ.get("BENCH_PREFIX", "bench-burst")
MAX_RETRIES = int(os.environ.get("BENCH_MAX_RETRIES", "100"))
CUSTOMS_RATE = float(os.environ.get("BENCH_CUSTOMS_RATE", "10"))
CUSTOMS_BURST = int(os.environ.get("BENCH_CUSTOMS_BURST", "3"))
TOS_RATE = float(os.environ.get("BENCH_TOS_RATE", "80"))
TOS_BURST = int(os.environ.get("BENCH_TOS_BURST", "4"))

PATHS = {"customs": "/declarations", "tos": "/container-reports"}
HTTP_TIMEOUT_S = 10.0
#: Celery's own ``retry_backoff=True`` settings: factor 1 s, capped at 600 s, full jitter.
BACKOFF_FACTOR_S = 1
BACKOFF_MAX_S = 600

_LOCAL: dict[tuple[int, str], Any] = {}
_LOCK = threading.Lock()


def make_app(name: str) -> Celery:
    """A Celery app on the benchmark's broker, JSON only, results ignored."""
    app = Celery(name, broker=REDIS_URL)
    app.conf.task_serializer = "json"
    app.conf.result_serializer = "json"
    app.conf.accept_content = ["json"]
    app.conf.task_ignore_result = True
    app.conf.worker_hijack_root_logger = False
    return app


def _per_process(kind: str, factory: Any) -> Any:
    key = (os.getpid(), kind)
    with _LOCK:
        if key not in _LOCAL:
            _LOCAL[key] = factory()
        return _LOCAL[key]


def redis_client() -> redis.Redis:
    """One Redis client per process (the pool forks after import)."""
    return _per_process("redis", lambda: redis.Redis.from_url(REDIS_URL))


def http_client() -> httpx.Client:
    """One keep-alive HTTP client per process."""
    return _per_process("http", lambda: httpx.Client(timeout=HTTP_TIMEOUT_S))


def post(name: str, envelope: Mapping[str, Any]) -> httpx.Response | None:
    """POST one document to downstream ``name``; ``None`` on a transport error."""
    base = os.environ[f"BENCH_{name.upper()}_URL"]
    body = {"type": envelope["type"], "class": envelope["class"], "edifact": envelope["body"]}
    try:
        return http_client().post(
            base + PATHS[name], json=body, headers={"Idempotency-Key": str(envelope["key"])}
        )
    except httpx.HTTPError:
        return None


def retry_after_s(response: httpx.Response) -> float:
    """The 429's ``Retry-After`` in seconds (the sims send delay-seconds); 1 s if absent."""
    raw = response.headers.get("Retry-After", "")
    try:
        return max(0.0, float(raw))
    except ValueError:
        return 1.0


def backoff_s(task: Any) -> float:
    """What ``autoretry_for=…, retry_backoff=True`` would wait: 2^retries s, full jitter."""
    return float(
        get_exponential_backoff_interval(
            BACKOFF_FACTOR_S, task.request.retries, BACKOFF_MAX_S, full_jitter=True
        )
    )


def retry_or_give_up(task: Any, key: str, reason: str, countdown: float) -> dict[str, Any]:
    """``raise task.retry(countdown=…)``, or — retries exhausted — record the loss.

    Celery would fail the task with ``MaxRetriesExceededError``; the outcome for the
    document is the same (it is never delivered), but here it is counted.
    """
    if task.request.retries >= task.max_retries:
        redis_client().sadd(f"{PREFIX}:gave_up", key)
        return {"delivered": False, "reason": f"max_retries ({reason})"}
    redis_client().hincrby(f"{PREFIX}:retries", reason, 1)
    raise task.retry(countdown=countdown)


def handle(task: Any, name: str, envelope: Mapping[str, Any]) -> dict[str, Any]:
    """Send one document and act on the answer the way a Celery user typically does."""
    key = str(envelope["key"])
    response = post(name, envelope)
    if response is None:
        return retry_or_give_up(task, key, "network", backoff_s(task))
    status = response.status_code
    if status == 200:
        return {"delivered": True, "downstream": name}
    if status == 429:
        return retry_or_give_up(task, key, "http_429", retry_after_s(response))
    if status >= 500:
        return retry_or_give_up(task, key, f"http_{status}", backoff_s(task))
    redis_client().sadd(f"{PREFIX}:gave_up", key)
    return {"delivered": False, "reason": f"http_{status}"}
