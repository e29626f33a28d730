"""The front door under load: ``tidegate intake serve`` against a floor, in the same run.

Two HTTP services on loopback, each one uvicorn process on the same embedded Redis:

* **floor** — a Starlette endpoint that reads the body and publishes it, as is, to the
  Redis broker with Celery's ``send_task``, batched the way the intake publishes
  (concurrent requests' bodies share one kombu batch from one thread;
  ``--floor-unbatched`` publishes on each request's thread, as the first runs did): the
  cost of taking an interchange over HTTP and putting bytes on the broker, nothing
  else;
* **intake** — the real ``tidegate intake serve --allow-anonymous``: read and check the
  envelope, classify, claim the duplicate window, check the watermarks, publish each unit
  with ``send_task``, record, write the CONTRL.

Senders (an ``httpx.AsyncClient``, up to ``--connections`` at once) post distinct
interchanges of the vessel burst **open loop**: request ``i`` is sent at ``t0 + i/rate``
whatever the answers, for ``--step-s`` seconds per offered rate. Per service and rate:
acknowledged interchanges/s (202s over the time until the last answer) and the ack
latency p50/p99 (request sent → answer read).

Then, for the intake only:

* **80 % of saturation.** The saturation rate is the highest acknowledged rate seen in
  the ramp; one more step is offered at 80 % of it. Goal: p99 ≤ 250 ms there.
* **Above saturation, backpressure.** With a small HWM and a stand-in fleet draining
  the broker queues at ``--drain-rate``/s, ``--senders`` senders post a burst as fast
  as they are answered (closed loop), each honouring ``Retry-After`` on a 503 and sending
  the same bytes again. (The served intake has no monitor's board here, so it samples
  the depth itself every 5 s: the burst must outlast a few samples.) Goals: every
  sender gets at least one 503 with ``Retry-After``; every interchange is acknowledged
  exactly once in the end; the broker + the drained units hold each unit's key exactly
  once (nothing lost, nothing twice).

Usage::

    .venv/bin/python bench/intake.py [--out bench/results/intake.json]

The machine is shared (2 CPUs, other sessions running): the CPU used by other
processes during each phase is reported beside the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import redis

sys.path.insert(0, str(Path(__file__).parent))
from _harness import CpuWatch, describe_interference, machine_info, md_table, write_json

QUEUES = ("edi.customs", "edi.tos")


# -- the floor service ------------------------------------------------------------------


def serve_floor(port: int, broker: str, *, batching: bool = True) -> None:
    """Run the floor endpoint (this script, re-run as a subprocess).

    With ``batching`` the floor publishes the way the intake does on a Redis broker:
    concurrent requests' bodies go to one publishing thread and share one kombu batch
    (:class:`~tidegate.intake.batching.PublishThread` over a
    :class:`~tidegate.intake.batching.BatchingCelerySender`), so the comparison is of
    the intake's own work, not of two ways of publishing.
    """
    import uvicorn
    from celery import Celery
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    from tidegate.intake.batching import BatchingCelerySender, PublishThread, can_batch

    producer = Celery("floor", broker=broker)
    thread: PublishThread | None = None
    if batching and can_batch(producer):
        sender = BatchingCelerySender(producer)

        def publish_bodies(bodies: Any) -> None:
            for body in bodies:
                sender.send("floor", "floor.store", {"body": body})

        thread = PublishThread(publish_bodies, batch=sender.batch, name="floor-publish")

    def publish(body: bytes) -> None:
        text = body.decode("latin-1")
        if thread is not None:
            thread.publish([text])
        else:
            producer.send_task("floor.store", args=[{"body": text}], queue="floor")

    async def post(request: Request) -> Response:
        body = await request.body()
        await run_in_threadpool(publish, body)
        return JSONResponse({"status": "accepted", "units": 1}, status_code=202)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    app = Starlette(
        routes=[
            Route("/interchanges", post, methods=["POST"]),
            Route("/healthz", health, methods=["GET"]),
        ]
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_config=None, access_log=False)


# -- processes --------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(args: list[str], env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    args = [a.replace("{port}", str(port)) for a in args]
    with log.open("wb") as err:
        proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, **env}
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{args[0]} exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"{args} did not start")


def _intake(redis_url: str, env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    exe = shutil.which("tidegate", path=os.path.dirname(sys.executable))
    assert exe is not None
    args = [exe, "--log-level", "WARNING", "intake", "serve", "--port", "{port}"]
    args += ["--redis-url", redis_url, "--allow-anonymous", "--retry-after", "1"]
    return _start(args, env, log)


def _floor(
    redis_url: str, log: Path, *, batching: bool = True
) -> tuple[subprocess.Popen[bytes], str]:
    args = [sys.executable, __file__, "--serve-floor", "{port}", "--broker", redis_url]
    if not batching:
        args.append("--floor-unbatched")
    return _start(args, {}, log)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


# -- load -------------------------------------------------------------------------------


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)], 1)


async def _open_loop(
    url: str, bodies: list[bytes], rate: float, connections: int
) -> dict[str, Any]:
    """Send ``bodies`` at ``rate``/s whatever the answers; what came back."""
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    last = [0.0]
    async with httpx.AsyncClient(limits=limits, timeout=120.0) as client:
        loop = asyncio.get_running_loop()
        t0 = loop.time() + 0.05

        # At most ``connections`` requests are handed to httpx at once: its pool serves
        # waiting requests in a way that costs more per request the more are waiting,
        # so thousands of queued posts above saturation made the *sender* the
        # bottleneck (the floor "fell" from 434/s at 480/s offered to 74/s at 720/s).
        # The wait for a free connection still counts in the latency.
        free = asyncio.Semaphore(connections)

        async def one(index: int, body: bytes) -> None:
            await asyncio.sleep(max(0.0, t0 + index / rate - loop.time()))
            start = time.perf_counter()
            try:
                async with free:
                    response = await client.post(f"{url}/interchanges", content=body)
                status = response.status_code
            except httpx.TransportError:
                status = 0
            statuses[status] += 1
            if status == 202:
                latencies.append((time.perf_counter() - start) * 1000)
            last[0] = max(last[0], loop.time())

        await asyncio.gather(*(one(i, b) for i, b in enumerate(bodies)))
        span = max(1e-9, last[0] - t0)
    return {
        "offered_per_s": rate,
        "sent": len(bodies),
        "acknowledged": statuses[202],
        "other_statuses": {str(k): v for k, v in statuses.items() if k != 202},
        "acked_per_s": round(statuses[202] / span, 1),
        "ack_p50_ms": _pct(latencies, 0.50),
        "ack_p99_ms": _pct(latencies, 0.99),
    }


def _step(url: str, bodies: list[bytes], rate: float, connections: int) -> dict[str, Any]:
    return asyncio.run(_open_loop(url, bodies, rate, connections))


def _broker_keys(client: redis.Redis, queues: tuple[str, ...]) -> list[str]:
    keys = []
    for queue in queues:
        for raw in client.lrange(queue, 0, -1):
            keys.append(_key_of(raw))
    return keys


def _key_of(raw: bytes) -> str:
    args, _kwargs, _embed = json.loads(base64.b64decode(json.loads(raw)["body"]))
    return str(args[0]["key"])


def _overload(
    url: str, client: redis.Redis, bodies: list[bytes], senders: int, drain_rate: float
) -> dict[str, Any]:
    """Closed-loop senders honouring Retry-After against a fleet draining at drain_rate."""
    from tidegate.harness.front_door import intake_keys

    drained: list[str] = []
    stop = threading.Event()

    def fleet() -> None:
        # A stand-in for the workers: take one unit every 1/drain_rate s, oldest first.
        period = 1.0 / drain_rate
        next_at = time.monotonic()
        while not stop.is_set():
            for queue in QUEUES:
                raw = client.rpop(queue)
                if raw is not None:
                    drained.append(_key_of(raw))
                    break
            next_at += period
            time.sleep(max(0.0, next_at - time.monotonic()))

    per_sender: list[Counter[str]] = [Counter() for _ in range(senders)]

    def sender(number: int) -> None:
        seen = per_sender[number]
        with httpx.Client(timeout=120.0) as http:
            for index in range(number, len(bodies), senders):
                while True:
                    response = http.post(f"{url}/interchanges", content=bodies[index])
                    if response.status_code == 503:
                        seen["503"] += 1
                        if "retry-after" in response.headers:
                            seen["503_with_retry_after"] += 1
                        time.sleep(float(response.headers.get("retry-after", "1")))
                        continue
                    seen[str(response.status_code)] += 1
                    break

    drainer = threading.Thread(target=fleet, daemon=True)
    drainer.start()
    start = time.monotonic()
    threads = [threading.Thread(target=sender, args=(n,)) for n in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - start
    stop.set()
    drainer.join()
    expected = sorted(k for body in bodies for k in intake_keys(body))
    held = sorted(drained + _broker_keys(client, QUEUES))
    total = sum(per_sender, Counter())
    return {
        "senders": senders,
        "interchanges": len(bodies),
        "drain_per_s": drain_rate,
        "elapsed_s": round(elapsed, 1),
        "acknowledged": total["202"],
        "answers": dict(total),
        "senders_told_retry_after": sum(1 for s in per_sender if s["503_with_retry_after"]),
        "every_503_had_retry_after": total["503"] == total["503_with_retry_after"],
        "units_expected": len(expected),
        "units_held_once": held == expected,
        "units_lost": len(set(expected) - set(held)),
        "units_twice": len(held) - len(set(held)),
    }


# -- main -------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--serve-floor", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--broker", help=argparse.SUPPRESS)
    parser.add_argument(
        "--floor-unbatched",
        action="store_true",
        help="the floor publishes each body on its request thread (the first runs' floor)",
    )
    parser.add_argument("--rates", default="160,240,320,400,480,640", help="offered rates, /s")
    parser.add_argument("--step-s", type=float, default=5.0, help="seconds per rate")
    parser.add_argument("--connections", type=int, default=8, help="senders at once")
    parser.add_argument("--senders", type=int, default=8, help="overload phase senders")
    parser.add_argument("--overload-n", type=int, default=5000, help="overload interchanges")
    parser.add_argument("--drain-rate", type=float, default=20.0, help="stand-in fleet, /s")
    parser.add_argument("--hwm", type=int, default=50, help="overload phase HWM")
    parser.add_argument("--out", default="bench/results/intake.json")
    args = parser.parse_args()
    if args.serve_floor:
        serve_floor(args.serve_floor, args.broker, batching=not args.floor_unbatched)
        return

    from tidegate.harness.burst import vessel_burst
    from tidegate.redis_server import EmbeddedRedis

    rates = [float(r) for r in args.rates.split(",")]
    per_step = [max(1, round(r * args.step_s)) for r in rates]
    warmup = 20
    need = 2 * warmup + sum(per_step) + round(max(rates) * args.step_s) + args.overload_n
    print(f"generating {need} interchanges of the vessel burst…", flush=True)
    bodies = [d.text.encode("latin-1") for d in vessel_burst(need, seed=11)]
    logs = Path(tempfile.mkdtemp(prefix="bench-intake-"))

    store = EmbeddedRedis().start()
    client = redis.Redis.from_url(store.url)
    info = machine_info(client, ["uvicorn", "starlette", "celery", "redis", "httpx"])
    results: dict[str, Any] = {"machine": info, "args": vars(args), "ramp": []}
    try:
        # No backpressure in the ramp: it measures the services, not the watermarks.
        quiet = {"TIDEGATE_QUEUE_HWM": str(10**9), "TIDEGATE_QUEUE_LWM": str(10**8)}
        intake, intake_url = _intake(store.url, quiet, logs / "intake.log")
        floor, floor_url = _floor(store.url, logs / "floor.log", batching=not args.floor_unbatched)
        # A first request pays for imports and connections: not part of any step.
        cursor = 0
        for url in (floor_url, intake_url):
            _step(url, bodies[cursor : cursor + warmup], 10.0, 1)
            cursor += warmup
        client.delete(*QUEUES, "floor")
        watch = CpuWatch()
        saturation = {"intake": 0.0, "floor": 0.0}
        for rate, n in zip(rates, per_step, strict=True):
            # Interleaved, fresh interchanges each: a repeat would be a (cheap) duplicate.
            for name, url in (("floor", floor_url), ("intake", intake_url)):
                step = _step(url, bodies[cursor : cursor + n], rate, args.connections)
                cursor += n if name == "intake" else 0
                step["service"] = name
                results["ramp"].append(step)
                saturation[name] = max(saturation[name], step["acked_per_s"])
                print(json.dumps(step), flush=True)
            client.delete(*QUEUES, "floor")
        target = round(0.8 * saturation["intake"], 1)
        n80 = max(1, round(target * args.step_s))
        at80 = _step(intake_url, bodies[cursor : cursor + n80], target, args.connections)
        cursor += n80
        print(json.dumps({"at_80pct": at80}), flush=True)
        results["ramp_cpu"] = watch.stop()
        _stop(intake)
        _stop(floor)
        client.delete(*QUEUES, "floor")

        small = {
            "TIDEGATE_QUEUE_HWM": str(args.hwm),
            "TIDEGATE_QUEUE_LWM": str(max(1, args.hwm // 5)),
            # Nothing sheds here: the point is the senders' Retry-After, not the quarantine.
            "TIDEGATE_SHED_AFTER_INTERVALS": str(10**6),
        }
        intake, intake_url = _intake(store.url, small, logs / "intake-overload.log")
        watch = CpuWatch()
        overload = _overload(
            intake_url,
            client,
            bodies[cursor : cursor + args.overload_n],
            args.senders,
            args.drain_rate,
        )
        overload["cpu"] = watch.stop()
        _stop(intake)
        print(json.dumps({"overload": overload}), flush=True)
    finally:
        client.close()
        store.stop()

    ratio = saturation["intake"] / max(1e-9, saturation["floor"])
    results.update(
        saturation_per_s=saturation,
        intake_over_floor=round(ratio, 3),
        at_80pct=at80,
        overload=overload,
        goals={
            "p99_at_80pct_le_250ms": at80["ack_p99_ms"] is not None and at80["ack_p99_ms"] <= 250,
            "intake_ge_half_floor": ratio >= 0.5,
            "every_sender_told_retry_after": overload["senders_told_retry_after"]
            == overload["senders"],
            "nothing_lost_or_twice": overload["units_held_once"],
        },
    )
    rows = [
        (
            s["service"],
            f"{s['offered_per_s']:g}",
            s["acked_per_s"],
            s["ack_p50_ms"],
            s["ack_p99_ms"],
            s["other_statuses"] or "-",
        )
        for s in results["ramp"]
    ]
    print(md_table(("service", "offered/s", "acked/s", "p50 ms", "p99 ms", "other answers"), rows))
    print(f"saturation: {saturation}; intake/floor = {ratio:.2f}")
    print(f"at 80 % ({target}/s): p50 {at80['ack_p50_ms']} ms, p99 {at80['ack_p99_ms']} ms")
    print(f"ramp: {describe_interference(results['ramp_cpu'])}")
    print(f"overload: {json.dumps(overload)}")
    print(f"goals: {results['goals']}")
    write_json(args.out, results)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
