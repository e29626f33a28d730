"""Baseline (a): Celery as most fleets run it, no tidegate.

- ``worker_prefetch_multiplier=4`` (Celery's default) and early acks (``acks_late`` off,
  Celery's default): each worker reserves 4 × its processes.
- a per-task ``rate_limit`` set to the downstream's limit (customs ``10/s``, TOS ``80/s``
  = 4 connections / 0.05 s) — per worker *instance*, as Celery enforces it.
- on 429: ``self.retry(countdown=<Retry-After>)``; on 503 or a transport error:
  ``self.retry(countdown=<2^retries s, full jitter>)`` (what ``retry_backoff=True`` does);
  ``max_retries`` from ``BENCH_MAX_RETRIES``.
"""

from __future__ import annotations

from typing import Any

from burst_apps._common import CUSTOMS_RATE, MAX_RETRIES, TOS_RATE, handle, make_app

app = make_app("bench-burst-celery-defaults")
app.conf.worker_prefetch_multiplier = 4
app.conf.task_acks_late = False


def _per_second(rate: float) -> str:
    return f"{rate:g}/s"


@app.task(
    bind=True,
    name="edi.customs.submit",
    rate_limit=_per_second(CUSTOMS_RATE),
    max_retries=MAX_RETRIES,
)
def submit_customs(self: Any, envelope: dict[str, Any]) -> dict[str, Any]:
    """Lodge one customs-bound document with the single window."""
    return handle(self, "customs", envelope)


@app.task(
    bind=True,
    name="edi.tos.push",
    rate_limit=_per_second(TOS_RATE),
    max_retries=MAX_RETRIES,
)
def push_tos(self: Any, envelope: dict[str, Any]) -> dict[str, Any]:
    """Push one terminal message to the TOS."""
    return handle(self, "tos", envelope)
