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

``--design lanes`` measures the other design, a sender that owns the connections: one
process holds ``--connections`` leases for the whole run (one thread, one kept-alive
connection each) and sends the requests that ``--processes`` client processes queue in
Redis (``RPUSH`` a request, ``BLPOP`` its answer), so the next request is already
waiting when an answer comes back and no lease changes hands between calls. The
clients do what a worker would do around its call; the hand-over leaves the
connection's critical path. (A spike to measure the design's floor, not tidegate code.)
``--design pipelined`` is the same sender with HTTP/1.1 pipelining: each lane writes the
next queued request while the one before is in service (at most two on a connection, the
TOS still serving one at a time), so the TOS reads it from its buffer as it answers and
the HTTP exchange leaves the connection's critical path too.
``--design alone`` is one process posting one call at a time, no gate: what the HTTP
exchange itself costs beyond the service on an otherwise idle machine — the bound of
any design (``service / (service + that)``).

``--client tidegate`` posts through :class:`~tidegate.downstream.DownstreamClient`
(httpx), ``--client stdlib`` through a kept-alive ``http.client`` connection (to see
what the HTTP client's own work costs); ``--mark`` adds one ``HSET`` with the lease held,
as the ledger's ``sending`` mark does.

Run: ``python bench/tos_floor.py [--service-s 0.05 0.1 0.15] [--client tidegate stdlib]
[--design alone per-call lanes pipelined] [--processes 5] [--calls 300] [--mark]
[--out bench/results/tos_floor.json]``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import queue as queue_mod
import socket
import statistics
import sys
import threading
import time
import uuid
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


_REQUESTS = "tos-floor:lanes:requests"
_STOP = "stop"


def _lane(url: str, tos_url: str, client: str, gaps: list[float], stop: threading.Event) -> None:
    """One lane of the sender: hold one lease for the whole run; send what is queued."""
    r = redis.Redis.from_url(url)
    post = _stdlib_post(tos_url) if client == "stdlib" else _tidegate_post(tos_url)
    with Gate(r, "tos-floor").acquire(max_wait=60):
        answered: float | None = None
        while not stop.is_set():
            item = r.blpop([_REQUESTS], timeout=1)
            if item is None:
                continue
            request = json.loads(item[1])
            if request == _STOP:
                stop.set()
                break
            posted = time.perf_counter()
            if answered is not None:
                gaps.append(posted - answered)
            post(request["key"])
            answered = time.perf_counter()
            r.rpush(request["reply"], "ok")


_PIPE_DEPTH = 2


def _read_answer(reader: Any) -> int:
    """Read one HTTP/1.1 answer (status line, headers, Content-Length body); its status."""
    status = int(reader.readline().split()[1])
    length = 0
    while (line := reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    reader.read(length)
    return status


def _pipelined_lane(url: str, tos_url: str, gaps: list[float], stop: threading.Event) -> None:
    """One lane, pipelined: up to ``_PIPE_DEPTH`` requests written ahead on one connection.

    A writer thread sends the next queued request while the one before is in service, so
    the TOS reads it from its buffer the moment it answers; this thread reads the answers
    in order and hands each back to its client.
    """
    parts = urlsplit(tos_url)
    r = redis.Redis.from_url(url)
    with Gate(r, "tos-floor").acquire(max_wait=60):
        sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = sock.makefile("rb")
        room = threading.Semaphore(_PIPE_DEPTH)
        sent: queue_mod.Queue[str | None] = queue_mod.Queue()

        def write() -> None:
            wr = redis.Redis.from_url(url)
            while True:
                room.acquire()
                item = None
                while item is None and not stop.is_set():
                    item = wr.blpop([_REQUESTS], timeout=1)
                if item is None:
                    sent.put(None)
                    return
                request = json.loads(item[1])
                if request == _STOP:
                    stop.set()
                    sent.put(None)
                    return
                body = json.dumps(_BODY).encode()
                head = (
                    f"POST {_PATH} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                    f"Content-Type: application/json\r\nIdempotency-Key: {request['key']}\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n"
                ).encode()
                sent.put(request["reply"])
                sock.sendall(head + body)

        writer = threading.Thread(target=write)
        writer.start()
        answered: float | None = None
        while (reply := sent.get()) is not None:
            status = _read_answer(reader)
            now = time.perf_counter()
            if answered is not None:
                gaps.append(now - answered)
            answered = now
            room.release()
            r.rpush(reply, str(status))
        writer.join()
        sock.close()


def _sender(
    url: str, tos_url: str, *, lanes: int, client: str, out: Any, pipelined: bool = False
) -> None:
    """The process that owns the connections: ``lanes`` threads, one lease each."""
    configure_logging(level="WARNING", stream=sys.stderr)
    gaps: list[float] = []
    stop = threading.Event()
    threads = [
        threading.Thread(target=_pipelined_lane, args=(url, tos_url, gaps, stop))
        if pipelined
        else threading.Thread(target=_lane, args=(url, tos_url, client, gaps, stop))
        for _ in range(lanes)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out.put({"lane_gap": gaps})


def _queue_loop(url: str, *, calls: int, index: int, out: Any) -> None:
    """One client of the sender: queue a request, wait for its answer — ``calls`` times."""
    r = redis.Redis.from_url(url)
    seg: dict[str, list[float]] = {"round_trip": []}
    for i in range(calls):
        reply = f"tos-floor:lanes:reply:{uuid.uuid4().hex}"
        started = time.perf_counter()
        r.rpush(_REQUESTS, json.dumps({"key": f"{index}-{i}", "reply": reply}))
        if r.blpop([reply], timeout=60) is None:
            raise RuntimeError("the sender did not answer within 60 s")
        seg["round_trip"].append(time.perf_counter() - started)
    out.put(seg)


def _alone(tos_url: str, *, calls: int, client: str, out: Any) -> None:
    """One process, no gate, one call at a time: the HTTP exchange's own cost."""
    configure_logging(level="WARNING", stream=sys.stderr)
    post = _stdlib_post(tos_url) if client == "stdlib" else _tidegate_post(tos_url)
    seg: dict[str, list[float]] = {"post": []}
    for i in range(calls):
        posted = time.perf_counter()
        post(f"alone-{i}")
        seg["post"].append(time.perf_counter() - posted)
    out.put(seg)


def _start(args: argparse.Namespace, url: str, tos_url: str, client: str, queue: Any) -> list[Any]:
    """The processes of one run: the lone poster, the per-call loops, or the sender and
    its clients."""
    if args.design == "alone":
        kwargs = {"calls": args.calls, "client": client, "out": queue}
        return [multiprocessing.Process(target=_alone, args=(tos_url,), kwargs=kwargs)]
    if args.design == "per-call":
        return [
            multiprocessing.Process(
                target=_loop,
                args=(url, tos_url),
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
    sender = multiprocessing.Process(
        target=_sender,
        args=(url, tos_url),
        kwargs={
            "lanes": args.connections,
            "client": client,
            "out": queue,
            "pipelined": args.design == "pipelined",
        },
    )
    clients = [
        multiprocessing.Process(
            target=_queue_loop,
            args=(url,),
            kwargs={"calls": args.calls, "index": i, "out": queue},
        )
        for i in range(args.processes)
    ]
    return [sender, *clients]


def _run(url: str, args: argparse.Namespace, service_s: float, client: str) -> dict[str, Any]:
    r = redis.Redis.from_url(url)
    r.delete(_REQUESTS)
    gate = Gate(r, "tos-floor")
    gate.configure(concurrency=args.connections, rate=1000.0, burst=100)
    cli = ("--max-connections", str(args.connections), "--service-s", str(service_s))
    with SimProcess("tos", *cli) as tos:
        queue: Any = multiprocessing.Queue()
        procs = _start(args, url, tos.url, client, queue)
        load = os.getloadavg()[0]
        for p in procs:
            p.start()
        segs = [
            queue.get(timeout=600) for _ in range(1 if args.design == "alone" else args.processes)
        ]
        if args.design in ("lanes", "pipelined"):
            r.rpush(_REQUESTS, json.dumps(_STOP))
            segs.append(queue.get(timeout=60))
        for p in procs:
            p.join()
        stats = tos.stats()
    service = [(float(s), float(e)) for s, e in stats["service_timeline"]]
    first, last = min(s for s, _ in service), max(e for _, e in service)
    tenth = 0.1 * (last - first)

    def ms(name: str, less: float = 0.0) -> dict[str, float]:
        values = [v - less for seg in segs for v in seg.get(name, ())]
        return {
            "mean": round(statistics.mean(values) * 1e3, 2),
            "p50": round(statistics.median(values) * 1e3, 2),
        }

    if args.design == "alone":
        timings = {"ms_post_less_service": ms("post", service_s)}
    elif args.design == "pipelined":
        timings = {
            "ms_lane_answer_to_answer_less_service": ms("lane_gap", service_s),
            "ms_client_round_trip_less_service": ms("round_trip", service_s),
        }
    elif args.design == "lanes":
        timings = {
            "ms_lane_gap_answer_to_next_post": ms("lane_gap"),
            "ms_client_round_trip_less_service": ms("round_trip", service_s),
        }
    else:
        timings = {
            "ms_lease_held_less_service": ms("hold_less_service", service_s),
            "ms_post_less_service": ms("post", service_s),
            "ms_answer_to_released": ms("release"),
        }
    return {
        "design": args.design,
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
        **timings,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--service-s", type=float, nargs="+", default=[0.05, 0.1, 0.15])
    parser.add_argument("--client", nargs="+", choices=["tidegate", "stdlib"], default=["tidegate"])
    parser.add_argument(
        "--design",
        nargs="+",
        choices=["alone", "per-call", "lanes", "pipelined"],
        default=["per-call"],
    )
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
                for design in args.design:
                    one = argparse.Namespace(**vars(args))
                    one.design = design
                    runs.append(_run(url, one, service_s, client))
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
