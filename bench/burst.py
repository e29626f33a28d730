"""The burst benchmark: one vessel burst through Celery defaults, the seed design and tidegate.

The same burst (``tidegate.harness.burst.vessel_burst``: VERMAS/CUSCAR for customs,
COARRI/CODECO for the TOS), the same simulated downstreams and the same worker topology
for all three, one after the other, each with fresh sims and its own Redis database:

- **customs** — ``CustomsSim(rate=10, burst=3, suspend_after=5, suspend_s=30)``: a
  per-second bucket answering 429 + ``Retry-After`` above it, and suspending (30 s of
  429 for everything) a caller that collects 5 × 429 within 10 s.
- **TOS** — ``TosSim(max_connections=4, service_s=0.05)``: 503 beyond 4 in flight.
- **workers** — real ``celery worker`` processes (``tidegate.harness.celery_fleet.Fleet``): a
  customs pool of W processes on ``edi.customs`` and a TOS pool of 2W on ``edi.tos``.

Scenarios:

(a) ``celery-defaults`` — ``bench/burst_apps/celery_defaults.py``: prefetch 4, early acks,
    ``rate_limit`` = the downstream's limit (``10/s``, ``80/s``; per worker instance),
    ``self.retry(countdown=Retry-After)`` on 429, exponential backoff on 503.
(b) ``seed-design`` — ``bench/burst_apps/seed_design.py``: prefetch 1 + acks_late, the
    read-modify-write Redis bucket (HMGET → refill with ``time.monotonic()`` → HSET),
    ``self.retry(countdown=…)`` when throttled and on 429/503.
(c) ``tidegate`` — ``tidegate.harness.scenarios.vessel.run_vessel_demo`` (what ``make demo`` runs):
    ``GatedTask`` behind the fleet-wide gate, prefetch 1 + acks_late, parking instead of ETA.

A run stops when every document was accepted by a sim (distinct idempotency keys) or
given up on, or at the timeout (default 4 × the customs ideal time + 60 s). Measured:
429s and suspensions at customs, drain time (first → last customs accept) against the
ideal (accepted / rate), the most accepts in any 1 s, duplicates, lost, what was still
pending, peak worker RSS (main + pool processes, every 0.5 s), and the ETA tasks held in
worker memory (``inspect().scheduled()``, every ~2 s).

Run: ``python bench/burst.py [--interchanges N] [--workers W] [--seed S]
[--max-retries R] [--timeout-s T] [--only a,b,c] [--out PATH] [--plot PATH]``.
Redis: ``REDIS_URL`` or an embedded ``redis-server`` (``tidegate.redis_server``); the
scenarios use databases 1, 2 and 3 of it, which must be empty.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import math
import os
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from _harness import machine_info, machine_markdown, md_table
from tidegate._redis import client_from_url
from tidegate.harness.burst import Document, vessel_burst
from tidegate.harness.celery_fleet import Fleet, Pool
from tidegate.harness.scenarios.vessel import VesselConfig, run_vessel_demo
from tidegate.logging import configure as configure_logging
from tidegate.redis_server import redis_url
from tidegate.sim import CustomsSim, TosSim, max_in_window

BENCH_DIR = Path(__file__).resolve().parent
QUEUES = ("edi.customs", "edi.tos")
TASK_FOR_QUEUE = {"edi.customs": "edi.customs.submit", "edi.tos": "edi.tos.push"}

SCENARIOS = ("celery-defaults", "seed-design", "tidegate")
SHORT = {"a": "celery-defaults", "b": "seed-design", "c": "tidegate"}
TITLES = {
    "celery-defaults": "(a) Celery defaults",
    "seed-design": "(b) seed design",
    "tidegate": "(c) tidegate",
}
APP_MODULES = {
    "celery-defaults": "burst_apps.celery_defaults",
    "seed-design": "burst_apps.seed_design",
}
PREFETCH = {"celery-defaults": 4, "seed-design": 1}
PACKAGES = ("celery", "kombu", "billiard", "redis", "httpx", "psutil")


@dataclass(frozen=True, slots=True)
class Settings:
    interchanges: int
    workers: int
    seed: int
    max_retries: int
    timeout_s: float
    customs_rate: float = 10.0
    customs_burst: int = 3
    suspend_after: int = 5
    suspend_s: float = 30.0
    tos_connections: int = 4
    tos_service_s: float = 0.05
    interval_s: float = 0.5
    inspect_every_s: float = 2.0

    @property
    def tos_rate(self) -> float:
        return self.tos_connections / self.tos_service_s


# --- helpers ------------------------------------------------------------------------------


def _db_url(base: str, db: int) -> str:
    parts = urlsplit(base)
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", parts.query, parts.fragment))


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class InspectSampler:
    """Counts the tasks workers hold in memory: ETA (``scheduled``) and ``reserved``.

    Runs ``app.control.inspect()`` every ``every_s`` in its own thread, so a worker whose
    event loop stalls delays this sampler, not the 0.5 s sampling of counters and RSS.
    """

    def __init__(self, url: str, nodes: int, every_s: float) -> None:
        self.url = url
        self.nodes = nodes
        self.every_s = every_s
        self.points: list[tuple[float, int, int]] = []  # (t, scheduled, reserved)
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="inspect-sampler", daemon=True)

    def start(self, t0: float) -> None:
        self.t0 = t0
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        from celery import Celery

        app = Celery(broker=self.url)
        try:
            while not self._stop.wait(self.every_s):
                try:
                    inspect = app.control.inspect(timeout=1.0, limit=self.nodes)
                    scheduled = inspect.scheduled() or {}
                    reserved = inspect.reserved() or {}
                except Exception as exc:  # a sampling hiccup must not end the run
                    _log(f"  inspect failed: {exc!r}")
                    continue
                self.points.append(
                    (
                        round(time.monotonic() - self.t0, 2),
                        sum(len(v) for v in scheduled.values()),
                        sum(len(v) for v in reserved.values()),
                    )
                )
        finally:
            app.close()

    @property
    def max_scheduled(self) -> int | None:
        return max((p[1] for p in self.points), default=None)

    @property
    def max_reserved(self) -> int | None:
        return max((p[2] for p in self.points), default=None)


def _message_key(raw: bytes) -> str | None:
    """The idempotency key inside a kombu Redis message (queue entry or ``unacked`` value)."""
    try:
        payload = json.loads(raw)
        if isinstance(payload, list):  # unacked: [message, exchange, routing_key]
            payload = payload[0]
        body = payload["body"]
        if payload.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args = json.loads(body)[0]
        return str(args[0]["key"])
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def _broker_keys(client: Any) -> tuple[set[str], int]:
    """Keys of every task message left in the broker: queues (all priority lists) and
    the ``unacked`` hash. Returns (keys, messages)."""
    keys: set[str] = set()
    messages = 0
    for name in client.scan_iter(match="edi.*", count=1000):
        if client.type(name) != b"list":
            continue
        for raw in client.lrange(name, 0, -1):
            messages += 1
            if (key := _message_key(raw)) is not None:
                keys.add(key)
    for raw in client.hvals("unacked"):
        messages += 1
        if (key := _message_key(raw)) is not None:
            keys.add(key)
    return keys, messages


def _rss_by_process(fleet: Fleet) -> dict[str, list[float]]:
    """RSS in MiB per pool: ``[main process, pool child, …]`` (where a pool grows)."""
    import psutil

    out: dict[str, list[float]] = {}
    for name, proc in fleet.procs.items():
        try:
            parent = psutil.Process(proc.pid)
            members = [parent, *parent.children(recursive=True)]
            out[name] = [round(m.memory_info().rss / 2**20, 1) for m in members]
        except psutil.NoSuchProcess:
            out[name] = []
    return out


def _columns(samples: Sequence[dict[str, Any]]) -> dict[str, list[Any]]:
    """Samples as columns (one flat list per counter), for a compact results file."""
    columns: dict[str, list[Any]] = {}
    for sample in samples:
        flat: dict[str, Any] = {}
        for key, value in sample.items():
            if key == "rss_by_process":
                continue
            if key == "retries":  # reasons appear during the run: keep the total
                flat["retries_total"] = sum(value.values())
                continue
            if isinstance(value, dict):
                for sub, v in value.items():
                    flat[f"{key}.{sub}"] = v
            else:
                flat[key] = value
        for key, value in flat.items():
            columns.setdefault(key, []).append(value)
    return columns


def _inspect_columns(points: Sequence[tuple[float, int, int]]) -> dict[str, list[Any]]:
    return {
        "t": [p[0] for p in points],
        "scheduled": [p[1] for p in points],
        "reserved": [p[2] for p in points],
    }


def _process_first_peak(samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per pool: each process's RSS at the first sample and its peak (main, children…)."""
    if not samples:
        return {}
    out: dict[str, Any] = {}
    for pool, first in samples[0]["rss_by_process"].items():
        peaks = list(first)
        for sample in samples:
            for i, value in enumerate(sample["rss_by_process"].get(pool, [])[: len(peaks)]):
                peaks[i] = max(peaks[i], value)
        out[pool] = {"first": first, "peak": peaks}
    return out


def _depth(client: Any) -> dict[str, int]:
    pipe = client.pipeline(transaction=False)
    for queue in QUEUES:
        pipe.llen(queue)
    pipe.hlen("unacked")
    values = pipe.execute()
    depth = dict(zip(QUEUES, values[:-1], strict=True))
    depth["unacked"] = values[-1]
    return depth


def _customs_numbers(
    stats: dict[str, Any], rate: float, t0_wall: float, timeline: Sequence[float]
) -> dict[str, Any]:
    first, last = stats.get("first_accept_ts"), stats.get("last_accept_ts")
    accepted = stats["distinct_keys"]
    drain = (last - first) if first is not None and last is not None else 0.0
    ideal = accepted / rate
    return {
        "accepted": accepted,
        "duplicates": stats["duplicates"],
        "responses_429": stats["responses_429"],
        "responses_503": stats["responses_503"],
        "suspensions": stats.get("suspensions"),
        "max_accepted_1s": max_in_window(timeline, 1.0) if timeline else 0,
        "drain_s": round(drain, 3),
        "ideal_s": round(ideal, 3),
        "drain_over_ideal": round(drain / ideal, 3) if ideal > 0 else None,
        "done_at_s": round(last - t0_wall, 3) if last is not None else None,
    }


def _tos_numbers(
    accepted: int,
    *,
    duplicates: int,
    responses_503: int,
    drain_s: float,
    rate: float,
    max_concurrent: int | None,
) -> dict[str, Any]:
    ideal = accepted / rate
    return {
        "accepted": accepted,
        "duplicates": duplicates,
        "responses_503": responses_503,
        "drain_s": round(drain_s, 3),
        "ideal_s": round(ideal, 3),
        "drain_over_ideal": round(drain_s / ideal, 3) if ideal > 0 else None,
        "max_concurrent_seen": max_concurrent,
    }


# --- (a) and (b): the baselines -----------------------------------------------------------


@contextlib.contextmanager
def _sims(settings: Settings) -> Iterator[tuple[CustomsSim, TosSim]]:
    customs = CustomsSim(
        rate=settings.customs_rate,
        burst=settings.customs_burst,
        suspend_after=settings.suspend_after,
        suspend_s=settings.suspend_s,
    )
    tos = TosSim(max_connections=settings.tos_connections, service_s=settings.tos_service_s)
    with customs, tos:
        yield customs, tos


def run_baseline(
    scenario: str, url: str, settings: Settings, docs: Sequence[Document], log_dir: Path | None
) -> dict[str, Any]:
    from celery import Celery

    prefix = f"bench-burst-{scenario}-{uuid.uuid4().hex[:8]}"
    client = client_from_url(url)
    samples: list[dict[str, Any]] = []
    submitted = len(docs)
    with _sims(settings) as (customs, tos):
        pythonpath = os.pathsep.join(
            p for p in (str(BENCH_DIR), os.environ.get("PYTHONPATH", "")) if p
        )
        env = {
            "TIDEGATE_REDIS_URL": url,
            "PYTHONPATH": pythonpath,
            "BENCH_PREFIX": prefix,
            "BENCH_CUSTOMS_URL": customs.url,
            "BENCH_TOS_URL": tos.url,
            "BENCH_MAX_RETRIES": str(settings.max_retries),
            "BENCH_CUSTOMS_RATE": repr(settings.customs_rate),
            "BENCH_CUSTOMS_BURST": str(settings.customs_burst),
            "BENCH_TOS_RATE": repr(settings.tos_rate),
            "BENCH_TOS_BURST": str(settings.tos_connections),
        }
        pools = [
            Pool("customs", ["edi.customs"], settings.workers, prefetch=PREFETCH[scenario]),
            Pool("tos", ["edi.tos"], settings.workers * 2, prefetch=PREFETCH[scenario]),
        ]
        fleet = Fleet(APP_MODULES[scenario], pools, env=env, log_dir=log_dir)
        producer = Celery(broker=url)
        sampler = InspectSampler(url, nodes=len(pools), every_s=settings.inspect_every_s)
        timed_out = False
        try:
            fleet.start()
            rss_idle = sum(fleet.rss_mb().values())
            start = time.monotonic()
            t0_wall = time.time()
            sampler.start(start)
            with producer.connection_for_write() as conn:
                for doc in docs:
                    producer.send_task(
                        TASK_FOR_QUEUE[doc.queue],
                        args=[doc.envelope()],
                        queue=doc.queue,
                        connection=conn,
                    )
            submit_s = time.time() - t0_wall
            deadline = start + settings.timeout_s
            while True:
                c_stats, t_stats = customs.stats(timeline=False), tos.stats(timeline=False)
                depth = _depth(client)
                rss = fleet.rss_mb()
                gave_up = client.smembers(f"{prefix}:gave_up")
                retries = {
                    k.decode(): int(v) for k, v in client.hgetall(f"{prefix}:retries").items()
                }
                delivered = c_stats["distinct_keys"] + t_stats["distinct_keys"]
                sample = {
                    "t": round(time.monotonic() - start, 3),
                    "depth": depth,
                    "accepted": {
                        "customs": c_stats["distinct_keys"],
                        "tos": t_stats["distinct_keys"],
                    },
                    "customs_429": c_stats["responses_429"],
                    "responses_429": c_stats["responses_429"] + t_stats["responses_429"],
                    "responses_503": c_stats["responses_503"] + t_stats["responses_503"],
                    "suspended": c_stats.get("suspended"),
                    "gave_up": len(gave_up),
                    "retries": retries,
                    "rss_mb": round(sum(rss.values()), 1),
                    "rss_by_pool": {k: round(v, 1) for k, v in rss.items()},
                    "rss_by_process": _rss_by_process(fleet),
                }
                samples.append(sample)
                if len(samples) % 10 == 1:
                    _progress(scenario, sample, submitted)
                if delivered + len(gave_up) >= submitted:
                    break
                if time.monotonic() > deadline:
                    timed_out = True
                    break
                time.sleep(settings.interval_s)
            elapsed = time.monotonic() - start
        finally:
            sampler.stop()
            # Warm shutdown: running tasks finish, reserved and ETA messages go back
            # to the broker (what a real deploy or scale-in does with them).
            fleet.stop()
            producer.close()
        c_full, t_full = customs.stats(), tos.stats()
        delivered_keys = set(customs.accepted_keys()) | set(tos.accepted_keys())
    left_keys, left_messages = _broker_keys(client)
    gave_up_keys = {k.decode() for k in client.smembers(f"{prefix}:gave_up")}
    pending_keys = left_keys - delivered_keys
    all_keys = {d.key for d in docs}
    lost_keys = all_keys - delivered_keys - pending_keys
    report = {
        "scenario": scenario,
        "app": APP_MODULES[scenario],
        "prefetch_multiplier": PREFETCH[scenario],
        "submitted": submitted,
        "submit_s": round(submit_s, 3),
        "delivered": len(delivered_keys & all_keys),
        "pending": len(pending_keys),
        "pending_messages_in_broker_after_stop": left_messages,
        "lost": len(lost_keys),
        "gave_up_max_retries": len(gave_up_keys & lost_keys),
        "lost_other": len(lost_keys - gave_up_keys),
        "dead_lettered": None,
        "duplicates": c_full["duplicates"] + t_full["duplicates"],
        "timed_out": timed_out,
        "elapsed_s": round(elapsed, 3),
        "retries": {k.decode(): int(v) for k, v in client.hgetall(f"{prefix}:retries").items()},
        "rss_idle_mb": round(rss_idle, 1),
        "rss_first_mb": samples[0]["rss_mb"] if samples else None,
        "peak_worker_rss_mb": max((s["rss_mb"] for s in samples), default=0.0),
        "max_scheduled_eta": sampler.max_scheduled,
        "max_reserved": sampler.max_reserved,
        "max_unacked": max((s["depth"]["unacked"] for s in samples), default=0),
        "max_parked": None,
        "customs": _customs_numbers(
            c_full, settings.customs_rate, t0_wall, c_full.get("accept_timeline", [])
        ),
        "tos": _tos_numbers(
            t_full["distinct_keys"],
            duplicates=t_full["duplicates"],
            responses_503=t_full["responses_503"],
            drain_s=(t_full["last_accept_ts"] or 0.0) - (t_full["first_accept_ts"] or 0.0),
            rate=settings.tos_rate,
            max_concurrent=t_full["max_concurrent_seen"],
        ),
        "timelines": {
            "t0_wall": t0_wall,
            "customs_accepts": [round(t - t0_wall, 3) for t in c_full.get("accept_timeline", [])],
            "customs_429": [
                round(t - t0_wall, 3) for t, status in c_full["request_timeline"] if status == 429
            ],
        },
        "rss_by_process_first_peak_mb": _process_first_peak(samples),
        "inspect": _inspect_columns(sampler.points),
        "samples": _columns(samples),
    }
    with contextlib.suppress(Exception):
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
    client.close()
    return report


def _progress(scenario: str, sample: dict[str, Any], submitted: int) -> None:
    acc = sample["accepted"]
    _log(
        f"  [{scenario}] t={sample['t']:6.1f}s customs={acc['customs']} tos={acc['tos']} "
        f"/{submitted} 429={sample['responses_429']} depth={sample['depth']} "
        f"rss={sample['rss_mb']:.0f}MiB"
        + (f" gave_up={sample['gave_up']}" if "gave_up" in sample else "")
    )


# --- (c) tidegate -------------------------------------------------------------------------


def run_tidegate(url: str, settings: Settings, log_dir: Path | None) -> dict[str, Any]:
    config = VesselConfig(
        interchanges=settings.interchanges,
        customs_rate=settings.customs_rate,
        customs_burst=settings.customs_burst,
        tos_connections=settings.tos_connections,
        tos_service_s=settings.tos_service_s,
        workers=settings.workers,
        seed=settings.seed,
        timeout_s=settings.timeout_s,
    )
    sampler = InspectSampler(url, nodes=2, every_s=settings.inspect_every_s)
    count = 0

    def on_sample(sample: Any, submitted: int) -> None:
        nonlocal count
        count += 1
        if count == 1:
            sampler.start(time.monotonic() - sample.t)
        if count % 10 == 1:
            _progress(
                "tidegate",
                {
                    "t": sample.t,
                    "accepted": sample.accepted,
                    "responses_429": sample.responses_429,
                    "depth": sample.depth,
                    "rss_mb": sample.rss_mb,
                },
                submitted,
            )

    try:
        report, samples = run_vessel_demo(url, config, on_sample=on_sample, log_dir=log_dir)
    finally:
        if count:
            sampler.stop()
    timelines = report.pop("_timelines")
    t0_wall = timelines["t0"]
    customs_stats = report["downstreams"]["customs"]
    first = timelines["customs"][0] if timelines["customs"] else None
    last = timelines["customs"][-1] if timelines["customs"] else None
    customs = _customs_numbers(
        {
            "distinct_keys": customs_stats["accepted"],
            "duplicates": customs_stats["duplicates"],
            "responses_429": customs_stats["responses_429"],
            "responses_503": customs_stats["responses_503"],
            # run_vessel_demo does not report the sim's suspension count; a suspension
            # needs 5 × 429, so none is certain when there was no 429.
            "suspensions": 0 if customs_stats["responses_429"] == 0 else None,
            "first_accept_ts": first,
            "last_accept_ts": last,
        },
        settings.customs_rate,
        t0_wall,
        timelines["customs"],
    )
    tos_stats = report["downstreams"]["tos"]
    return {
        "scenario": "tidegate",
        "app": "tidegate.harness.vessel_app (run_vessel_demo)",
        "prefetch_multiplier": 1,
        "submitted": report["submitted"],
        "submit_s": report["submit_s"],
        "delivered": report["delivered"],
        "pending": report["pending"],
        "pending_messages_in_broker_after_stop": None,
        "lost": report["lost"],
        "gave_up_max_retries": None,
        "lost_other": None,
        "dead_lettered": report["dead_lettered"],
        "duplicates": report["duplicates"],
        "timed_out": report["delivered"] + report["dead_lettered"] < report["submitted"],
        "elapsed_s": report["elapsed_s"],
        "retries": {},
        "rss_idle_mb": None,
        "rss_first_mb": samples[0].rss_mb if samples else None,
        "peak_worker_rss_mb": report["peak_worker_rss_mb"],
        "max_scheduled_eta": sampler.max_scheduled,
        "max_reserved": sampler.max_reserved,
        "max_unacked": max((s.depth["unacked"] for s in samples), default=0),
        "max_parked": max((s.parked for s in samples), default=0),
        "customs": customs,
        "tos": _tos_numbers(
            tos_stats["accepted"],
            duplicates=tos_stats["duplicates"],
            responses_503=tos_stats["responses_503"],
            drain_s=tos_stats["drain_s"],
            rate=settings.tos_rate,
            max_concurrent=None,
        ),
        "timelines": {
            "t0_wall": t0_wall,
            "customs_accepts": [round(t - t0_wall, 3) for t in timelines["customs"]],
            "customs_429": None,
        },
        "rss_by_process_first_peak_mb": None,
        "inspect": _inspect_columns(sampler.points),
        "samples": _columns(
            [
                {
                    "t": x.t,
                    "depth": x.depth,
                    "accepted": x.accepted,
                    "responses_429": x.responses_429,
                    "responses_503": x.responses_503,
                    "parked": x.parked,
                    "dead_lettered": x.dead_lettered,
                    "rss_mb": x.rss_mb,
                }
                for x in samples
            ]
        ),
        "demo_report": report,
    }


# --- report -------------------------------------------------------------------------------


def _is_flat(value: Any) -> bool:
    scalars = (str, int, float, bool, type(None))
    if isinstance(value, scalars):
        return True
    if isinstance(value, list):
        return all(isinstance(v, scalars) for v in value)
    return False


def to_json(value: Any, indent: int = 0) -> str:
    """JSON with dicts indented but flat lists (timelines) on one line each, so the
    results file stays small and still diffs by key."""
    pad, inner = " " * indent, " " * (indent + 2)
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(str(k))}: {to_json(v, indent + 2)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list | tuple) and value and not _is_flat(list(value)):
        if all(_is_flat(v) for v in value):  # e.g. [[t, status], ...] or a list of short lists
            return "[" + ", ".join(json.dumps(v) for v in value) + "]"
        items = [f"{inner}{to_json(v, indent + 2)}" for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(value)


def _fmt(value: Any, spec: str = "") -> str:
    if value is None:
        return "n/a"
    return format(value, spec)


def table(results: dict[str, dict[str, Any]], settings: Settings) -> str:
    names = list(results)
    bound = settings.customs_burst + math.floor(settings.customs_rate)

    def row(label: str, fn: Any) -> list[str]:
        return [label, *(fn(results[n]) for n in names)]

    def lost(r: dict[str, Any]) -> str:
        text = str(r["lost"])
        if r["lost"] and r.get("gave_up_max_retries") is not None:
            text += f" ({r['gave_up_max_retries']} exhausted max_retries)"
        if r.get("dead_lettered"):
            text += f" (+ {r['dead_lettered']} dead-lettered, with a reason)"
        return text

    def drain(r: dict[str, Any]) -> str:
        c = r["customs"]
        return f"{c['drain_s']:.1f} / {c['ideal_s']:.1f}"

    def ratio(r: dict[str, Any]) -> str:
        c = r["customs"]
        text = _fmt(c["drain_over_ideal"], ".3f")
        customs_docs = r["customs_submitted"]
        if c["accepted"] < customs_docs:
            text += f" (only {c['accepted']}/{customs_docs} accepted)"
        return text

    def tos_drain(r: dict[str, Any]) -> str:
        t = r["tos"]
        return f"{t['drain_s']:.1f} / {t['ideal_s']:.1f} ({_fmt(t['drain_over_ideal'], '.2f')}×)"

    def retries(r: dict[str, Any]) -> str:
        if r["scenario"] == "tidegate":
            return "n/a (parks; no retry spent on throttling)"
        items = r["retries"]
        return ", ".join(f"{k} {v}" for k, v in sorted(items.items())) or "0"

    def rss(r: dict[str, Any]) -> str:
        first, peak = r["rss_first_mb"], r["peak_worker_rss_mb"]
        if first is None:
            return f"? → {peak:.0f}"
        return f"{first:.0f} → {peak:.0f} (+{peak - first:.0f})"

    def submitted(r: dict[str, Any]) -> str:
        customs_docs = r["customs_submitted"]
        return f"{r['submitted']} ({customs_docs} + {r['submitted'] - customs_docs})"

    def load(r: dict[str, Any]) -> str:
        before, after = r["loadavg_1m"]
        return f"{before:.1f} → {after:.1f}"

    def ended(r: dict[str, Any]) -> str:
        return f"{r['elapsed_s']:.1f} ({'yes' if r['timed_out'] else 'no'})"

    def customs(field: str, spec: str = "") -> Any:
        return lambda r: _fmt(r["customs"][field], spec)

    rows_spec: list[tuple[str, Any]] = [
        ("submitted (customs + TOS)", submitted),
        ("delivered (distinct keys accepted)", lambda r: str(r["delivered"])),
        ("lost", lost),
        ("still pending at the end", lambda r: str(r["pending"])),
        ("duplicates", lambda r: str(r["duplicates"])),
        ("customs 429s", customs("responses_429")),
        ("customs suspensions (30 s each)", customs("suspensions")),
        ("customs drain s / ideal s", drain),
        ("customs drain / ideal", ratio),
        ("last customs accept, s after submit", customs("done_at_s", ".1f")),
        (f"customs max accepted in any 1 s (bucket allows {bound})", customs("max_accepted_1s")),
        ("TOS 503s", lambda r: str(r["tos"]["responses_503"])),
        ("TOS drain s / ideal s (4 conn. × 0.05 s = 80/s)", tos_drain),
        ("retries scheduled (by reason)", retries),
        ("max ETA tasks held by workers (inspect, ~2 s)", lambda r: _fmt(r["max_scheduled_eta"])),
        ("max messages parked in Redis", lambda r: _fmt(r["max_parked"])),
        ("worker RSS MiB, first sample → peak (growth)", rss),
        ("run ended at, s (timed out?)", ended),
        ("load avg 1 min, before → after (2 vCPUs)", load),
    ]
    rows = [row(label, fn) for label, fn in rows_spec]
    return md_table(["", *(TITLES[n] for n in names)], rows)


def plot(results: dict[str, dict[str, Any]], settings: Settings, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(10, 10), sharex=True)
    for name, r in results.items():
        accepts = r["timelines"]["customs_accepts"]
        axes[0].plot(accepts, range(1, len(accepts) + 1), label=TITLES[name])
        samples = r["samples"]
        axes[1].plot(samples["t"], samples["responses_429"], label=TITLES[name])
        axes[2].plot(samples["t"], samples["rss_mb"], label=TITLES[name])
    customs_docs = next(iter(results.values()))["customs_submitted"]
    ideal_end = customs_docs / settings.customs_rate
    axes[0].plot([0, ideal_end], [0, customs_docs], "k:", label="ideal (rate × t)")
    axes[0].set_ylabel("customs accepted (cumulative)")
    axes[1].set_ylabel("429s (cumulative)")
    axes[2].set_ylabel("worker RSS MiB")
    axes[2].set_xlabel("seconds after the burst was submitted")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    fig.suptitle(
        f"{settings.interchanges} interchanges, customs {settings.customs_rate:g}/s burst "
        f"{settings.customs_burst}, W={settings.workers}"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- main ---------------------------------------------------------------------------------


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--interchanges", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2, help="customs processes W (TOS: 2W)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--max-retries", type=int, default=100, help="baselines' max_retries")
    parser.add_argument(
        "--timeout-s", type=float, default=None, help="per scenario (default 4 × ideal + 60)"
    )
    parser.add_argument("--only", default="a,b,c", help="scenarios, e.g. a,c or tidegate")
    parser.add_argument("--out", default=str(BENCH_DIR / "results" / "burst.json"))
    parser.add_argument("--plot", default=str(BENCH_DIR / "results" / "burst.png"))
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--log-dir", default=None, help="worker logs go here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    configure_logging(level="WARNING")  # the sims log to stderr; keep stdout for the table
    chosen = [SHORT.get(s.strip(), s.strip()) for s in args.only.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenario(s) {unknown}; choose from a, b, c or {SCENARIOS}")
    docs = list(vessel_burst(args.interchanges, seed=args.seed))
    customs_docs = sum(1 for d in docs if d.queue == "edi.customs")
    settings = Settings(
        interchanges=args.interchanges,
        workers=args.workers,
        seed=args.seed,
        max_retries=args.max_retries,
        timeout_s=args.timeout_s or (4 * customs_docs / 10.0 + 60.0),
    )
    log_dir = Path(args.log_dir) if args.log_dir else None
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
    command = " ".join(["python bench/burst.py", *(sys.argv[1:] if argv is None else argv)])
    results: dict[str, dict[str, Any]] = {}
    embedded = not os.environ.get("REDIS_URL")
    with redis_url() as base:
        probe = client_from_url(base)
        info = machine_info(probe, PACKAGES)
        probe.close()
        _log(machine_markdown(info))
        _log(
            f"burst: {len(docs)} interchanges ({customs_docs} customs), W={settings.workers}, "
            f"timeout {settings.timeout_s:.0f} s per scenario"
        )
        for index, scenario in enumerate(SCENARIOS, start=1):
            if scenario not in chosen:
                continue
            url = _db_url(base, index)
            client = client_from_url(url)
            if client.dbsize():
                raise SystemExit(f"Redis database {index} is not empty; refusing to use it")
            _log(f"{TITLES[scenario]} …")
            sub_log = None
            if log_dir is not None:
                sub_log = log_dir / scenario
                sub_log.mkdir(exist_ok=True)
            load_before = os.getloadavg()[0]
            if scenario == "tidegate":
                result = run_tidegate(url, settings, sub_log)
            else:
                result = run_baseline(scenario, url, settings, docs, sub_log)
            # The machine may be shared: say how busy it was around each scenario.
            result["loadavg_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
            result["customs_submitted"] = customs_docs
            result["redis_db"] = index
            results[scenario] = result
            if embedded:
                client.flushdb()
            client.close()
            c = result["customs"]
            _log(
                f"  done: delivered {result['delivered']}/{result['submitted']}, lost "
                f"{result['lost']}, 429 {c['responses_429']}, drain/ideal "
                f"{c['drain_over_ideal']}, peak RSS {result['peak_worker_rss_mb']} MiB"
            )
    markdown = table(results, settings)
    print(machine_markdown(info))
    print()
    print(f"**Command:** `{command}`")
    print()
    print(
        f"Burst: {len(docs)} interchanges, seed {settings.seed} ({customs_docs} customs-bound, "
        f"{len(docs) - customs_docs} TOS-bound). Customs sim: {settings.customs_rate:g}/s, "
        f"burst {settings.customs_burst}, suspends for {settings.suspend_s:g} s after "
        f"{settings.suspend_after} × 429 in 10 s. TOS sim: {settings.tos_connections} "
        f"connections × {settings.tos_service_s:g} s. Workers: customs pool "
        f"-c {settings.workers}, TOS pool -c {2 * settings.workers}. Baselines' max_retries "
        f"{settings.max_retries}; timeout {settings.timeout_s:.0f} s per scenario."
    )
    print()
    print(markdown)
    data = {
        "benchmark": "burst",
        "command": command,
        "machine": info,
        "settings": {k: getattr(settings, k) for k in settings.__dataclass_fields__},
        "burst": {
            "interchanges": len(docs),
            "customs": customs_docs,
            "tos": len(docs) - customs_docs,
            "by_type": {
                t: sum(1 for d in docs if d.message_type == t)
                for t in sorted({d.message_type for d in docs})
            },
        },
        "results": results,
        "table_markdown": markdown,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(to_json(data) + "\n", encoding="utf-8")
    _log(f"wrote {args.out}")
    if not args.no_plot:
        plot(results, settings, Path(args.plot))
        _log(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
