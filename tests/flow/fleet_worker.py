"""A worker process for the multi-process tests: ``python fleet_worker.py MODE JSON-ARGS``.

Real, separate interpreters (not threads, not forks of the test process): each builds
its own Redis client, exactly like one Celery worker process on one host.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from tidegate._redis import client_from_url
from tidegate.flow import ConcurrencyLimiter, Gate, RateLimiter


def redis_ms(client: Any) -> float:
    seconds, micros = client.time()
    return seconds * 1000 + micros / 1000


def hammer(args: dict[str, Any]) -> dict[str, Any]:
    """try_acquire in a tight loop for `duration` s; report grants and the Redis-clock span."""
    client = client_from_url(str(args["url"]))
    limiter = RateLimiter(
        client,
        str(args["name"]),
        rate=float(args["rate"]),
        burst=int(args["burst"]),
        prefix=str(args["prefix"]),
    )
    while time.time() < float(args["start_at"]):
        time.sleep(0.001)
    first = redis_ms(client)
    deadline = time.monotonic() + float(args["duration"])
    grants = attempts = 0
    while time.monotonic() < deadline:
        attempts += 1
        grants += limiter.try_acquire().allowed
    return {"grants": grants, "attempts": attempts, "first_ms": first, "last_ms": redis_ms(client)}


def hold(args: dict[str, Any]) -> None:
    """Take a lease (renewed in the background) and hold it until killed."""
    sem = ConcurrencyLimiter(
        client_from_url(str(args["url"])),
        str(args["name"]),
        limit=1,
        lease_s=float(args["lease_s"]),
        prefix=str(args["prefix"]),
    )
    with sem.slot(max_wait=5):
        print("held", flush=True)
        while True:
            time.sleep(3600)


def acquire_on_go(args: dict[str, Any]) -> dict[str, Any]:
    """Say ready, wait for "go" on stdin, acquire the gate, report the Redis time of admission."""
    client = client_from_url(str(args["url"]))
    gate = Gate(client, str(args["name"]), prefix=str(args["prefix"]))
    gate.state()  # connect before saying ready
    print("ready", flush=True)
    sys.stdin.readline()
    with gate.slot(max_wait=10) as permit:
        return {"admitted_ms": redis_ms(client), "waited_s": permit.waited_s}


if __name__ == "__main__":
    mode, raw = sys.argv[1], json.loads(sys.argv[2])
    if mode == "hold":
        hold(raw)
    result = {"hammer": hammer, "acquire_on_go": acquire_on_go}[mode](raw)
    print(json.dumps(result), flush=True)
