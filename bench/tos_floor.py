"""The floor of a per-call lease: how busy can a connection-limited TOS be kept at all?

``make demo``'s goal for the TOS is its connections busy >= 95 % of the drain. Every call
holds one of the gate's leases from the admission to the release after the answer, and
the TOS takes no more calls than it has connections, so each call's turn leaves the
connection idle for the hand-over: the answer's way back, the release, the next
holder's wake-up and admission, its request's way in. This bench measures that floor
*without* Celery, the ledger or the intake: ``--processes`` plain processes, each in a
loop of ``gate.acquire()`` → one POST → release, against the TOS sim in its own process
(``--connections`` connections, calls of ``--service-s``). Whatever the pipeline adds on
top, ``make demo`` cannot be busier than this.

``--client tidegate`` posts through :class:`~tidegate.downstream.DownstreamClient`
(httpx), ``--client stdlib`` through a kept-alive ``http.client`` connection (to see
what the HTTP client's own work costs); ``--mark`` adds one ``HSET`` with the lease held,
as the ledger's ``sending`` mark does.

Run: ``python bench/tos_floor.py [--service-s 0.05 0.1 0.15] [--client tidegate stdlib]
[--processes 5] [--calls 300] [--mark] [--out bench/results/tos_floor.json]``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis

from _harness import clip_busy
from tidegate.downstream import DownstreamClient
from tidegate.flow.gate import Gate
from tidegate.logging import configure as configure_logging
from tidegate.redis_server import redis_url
from tidegate.sim import SimProcess

_PATH = "/container-reports"
_BODY = {"container": "MSCU1234567", "event": "discharge", "vessel": "9321483", "pad": "x" * 300}


def _stdlib_post(tos_url: str) -> Callable[[str], object]:
    """One POST a call through a kept-alive ``http.client`` connection."""
    parts = urlsplit(tos_url)
    connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port)

    def post(key: str) -> object:
        connection.request(
            "POST",
            _PATH,
            body=json.dumps(_BODY).encode(),
            headers={"Idempotency-Key": key, "Content-Type": "application/json"},
        )
        return connection.getresponse().read()

    return post


def _tidegate_post(tos_url: str) -> Callable[[str], object]:
    """One POST a call through tidegate's :class:`DownstreamClient` (httpx)."""
    downstream = DownstreamClient("tos", tos_url)
    return lambda key: downstream.send(_PATH, _BODY, idempotency_key=key)


def _loop(
    url: str, tos_url: str, *, calls: int, index: int, client: str, mark: bool, out: Any
) -> None:
    """One process: acquire, (mark,) post, release — ``calls`` times; report its segments."""
    configure_logging(level="WARNING", stream=sys.stderr)
    r = redis.Redis.from_url(url)
    gate = Gate(r, "tos-floor")
    post = _stdlib_post(tos_url) if client == "stdlib" else _tidegate_post(tos_url)
    seg: dict[str, list[float]] = {"hold_less_service": [], "post": [], "release": []}
    for i in range(calls):
        key = f"{index}-{i}"
        permit = gate.acquire(max_wait=60)
        held = time.perf_counter()
        with permit:
            if mark:
                r.hset(f"tos-floor:ledger:{key}", mapping={"state": "sending", "at": time.time()})
            posted = time.perf_counter()
            post(key)
            answered = time.perf_counter()
        released = time.perf_counter()
        seg["post"].append(answered - posted)
        seg["release"].append(released - answered)
        seg["hold_less_service"].append(released - held)
    out.put(seg)


def _run(url: str, args: argparse.Namespace, service_s: float, client: str) -> dict[str, Any]:
    gate = Gate(redis.Redis.from_url(url), "tos-floor")
    gate.configure(concurrency=args.connections, rate=1000.0, burst=100)
    cli = ("--max-connections", str(args.connections), "--service-s", str(service_s))
    with SimProcess("tos", *cli) as tos:
        queue: Any = multiprocessing.Queue()
        procs = [
            multiprocessing.Process(
                target=_loop,
                args=(url, tos.url),
                kwargs={
                    "calls": args.calls,
                    "index": i,
                    "client": client,
                    "mark": args.mark,
                    "out": queue,
                },
            )
            for i in range(args.processes)
        ]
        load = os.getloadavg()[0]
        for p in procs:
            p.start()
        segs = [queue.get(timeout=600) for _ in procs]
        for p in procs:
            p.join()
        stats = tos.stats()
    service = [(float(s), float(e)) for s, e in stats["service_timeline"]]
    first, last = min(s for s, _ in service), max(e for _, e in service)
    tenth = 0.1 * (last - first)

    def ms(name: str, less: float = 0.0) -> dict[str, float]:
        values = [v - less for seg in segs for v in seg[name]]
        return {
            "mean": round(statistics.mean(values) * 1e3, 2),
            "p50": round(statistics.median(values) * 1e3, 2),
        }

    return {
        "service_s": service_s,
        "client": client,
        "mark": args.mark,
        "load_avg_1min_before": round(load, 2),
        "accepted": stats["accepted"],
        "responses_503": stats["responses_503"],
        "duplicates": stats["duplicates"],
        "max_in_service_seen": stats["max_in_service_seen"],
        "busy_whole": round(clip_busy(service, first, last, args.connections), 4),
        "busy_middle_80": round(
            clip_busy(service, first + tenth, last - tenth, args.connections), 4
        ),
        "ms_lease_held_less_service": ms("hold_less_service", service_s),
        "ms_post_less_service": ms("post", service_s),
        "ms_answer_to_released": ms("release"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--service-s", type=float, nargs="+", default=[0.05, 0.1, 0.15])
    parser.add_argument("--client", nargs="+", choices=["tidegate", "stdlib"], default=["tidegate"])
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--calls", type=int, default=300, help="per process")
    parser.add_argument("--mark", action="store_true", help="one HSET with the lease held")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    configure_logging(level="WARNING", stream=sys.stderr)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    runs = []
    with redis_url() as url:
        for service_s in args.service_s:
            for client in args.client:
                runs.append(_run(url, args, service_s, client))
                print(json.dumps(runs[-1]), flush=True)
    result = {
        "started": started,
        "processes": args.processes,
        "connections": args.connections,
        "calls_per_process": args.calls,
        "nproc": os.cpu_count(),
        "runs": runs,
    }
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
