"""The quick gate scenario: several processes, one fleet-wide limit, nothing above it.

``tidegate demo --scenario gate`` starts an embedded Redis (unless ``REDIS_URL``) and
``processes`` real interpreter processes that each push documents through the same
``RateLimiter`` as fast as they can. Each records the time of every admission; the
report compares the busiest one-second window and the total with the ceiling
``burst + rate × elapsed`` — the numbers Celery's per-worker ``rate_limit`` multiplies
by the number of workers.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from dataclasses import dataclass
from typing import Any

from tidegate._redis import client_from_url
from tidegate.flow import RateLimiter
from tidegate.logging import configure as configure_logging

__all__ = ["GateDemoResult", "run_gate_demo"]


@dataclass(frozen=True, slots=True)
class GateDemoResult:
    """What the gate scenario measured."""

    processes: int
    rate: float
    burst: int
    admitted: int
    elapsed_s: float
    ceiling: float
    max_in_any_1s: int
    per_process: list[int]

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": "gate",
            "processes": self.processes,
            "rate": self.rate,
            "burst": self.burst,
            "admitted": self.admitted,
            "elapsed_s": round(self.elapsed_s, 3),
            "ceiling": round(self.ceiling, 1),
            "over_ceiling": max(0, self.admitted - int(self.ceiling)),
            "max_in_any_1s": self.max_in_any_1s,
            "allowed_in_any_1s": self.burst + self.rate,
            "per_process": self.per_process,
        }


def _worker(job: dict[str, Any], out: Any) -> None:
    configure_logging(level="WARNING")
    limiter = RateLimiter(
        client_from_url(job["url"]), job["name"], rate=job["rate"], burst=job["burst"]
    )
    while time.time() < job["start_at"]:
        time.sleep(0.001)
    stamps = []
    for _ in range(job["per_process"]):
        limiter.acquire(max_wait=60)
        stamps.append(time.time())
    out.put(stamps)


def _max_in_window(stamps: list[float], window_s: float) -> int:
    best, lo = 0, 0
    for hi, t in enumerate(stamps):
        while t - stamps[lo] >= window_s:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def run_gate_demo(
    url: str, *, processes: int = 4, rate: float = 20.0, burst: int = 5, documents: int = 120
) -> GateDemoResult:
    """Push ``documents`` through one gate from ``processes`` processes; measure the result."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    name = f"demo-{int(time.time() * 1000)}"
    per_process = max(1, documents // processes)
    start_at = time.time() + 2.0
    job = {
        "url": url,
        "name": name,
        "rate": rate,
        "burst": burst,
        "per_process": per_process,
        "start_at": start_at,
    }
    procs = [ctx.Process(target=_worker, args=(job, queue)) for _ in range(processes)]
    for proc in procs:
        proc.start()
    results = [queue.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
    stamps = sorted(t for r in results for t in r)
    elapsed = stamps[-1] - start_at
    return GateDemoResult(
        processes=processes,
        rate=rate,
        burst=burst,
        admitted=len(stamps),
        elapsed_s=elapsed,
        ceiling=burst + rate * elapsed,
        max_in_any_1s=_max_in_window(stamps, 1.0),
        per_process=[len(r) for r in results],
    )
