"""Small helpers shared by the benchmarks: machine facts, statistics, tables, JSON.

The benchmark machines are small VMs whose speed drifts within seconds, so every
benchmark reports medians with their min–max over repeated, interleaved runs, and says
on which machine they were taken.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import statistics
import time
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = [
    "CpuWatch",
    "describe_interference",
    "machine_info",
    "machine_markdown",
    "md_table",
    "med",
    "med_range",
    "package_versions",
    "sleep_until",
    "write_json",
]


class CpuWatch:
    """How much CPU *other* processes used while a section ran.

    The machine may be shared (other people's test runs): the whole system's busy CPU
    time minus this process tree's (workers and an embedded redis-server included) is
    the interference; it is reported next to the numbers, never subtracted from them.
    """

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        self._me = psutil.Process()
        self._start = self._sample()

    def _ours(self) -> float:
        total = 0.0
        for proc in [self._me, *self._me.children(recursive=True)]:
            try:
                t = proc.cpu_times()
                total += t.user + t.system
            except self._psutil.Error:
                continue
        return total

    def _sample(self) -> tuple[float, float, float, float]:
        t = self._psutil.cpu_times()
        busy = t.user + t.nice + t.system + t.irq + t.softirq
        return time.monotonic(), busy, self._ours(), getattr(t, "steal", 0.0)

    def stop(self) -> dict[str, float]:
        wall0, busy0, ours0, steal0 = self._start
        wall1, busy1, ours1, steal1 = self._sample()
        busy, ours = busy1 - busy0, ours1 - ours0
        return {
            "wall_s": round(wall1 - wall0, 2),
            "busy_cpu_s": round(busy, 2),
            "ours_cpu_s": round(ours, 2),
            "foreign_cpu_s": round(max(0.0, busy - ours), 2),
            "foreign_cpu_share": round(max(0.0, busy - ours) / max(1e-9, wall1 - wall0), 3),
            "steal_s": round(steal1 - steal0, 2),
            "loadavg_1m_end": round(os.getloadavg()[0], 2),
        }


def describe_interference(watch: dict[str, float]) -> str:
    return (
        f"other processes used {watch['foreign_cpu_s']:.1f} CPU-s during these "
        f"{watch['wall_s']:.0f} s ({watch['foreign_cpu_share']:.2f} of one CPU; "
        f"steal {watch['steal_s']:.1f} s)"
    )


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def package_versions(names: Iterable[str]) -> dict[str, str]:
    """Installed versions of ``names`` (``"-"`` when missing)."""
    out: dict[str, str] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "-"
    return out


def machine_info(client: Any = None, packages: Iterable[str] = ()) -> dict[str, Any]:
    """Facts to print above every table: CPUs, CPU model, Python, Redis, date."""
    info: dict[str, Any] = {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "packages": package_versions(packages),
    }
    if client is not None:
        server = client.info("server")
        info["redis_server"] = server.get("redis_version")
    return info


def machine_markdown(info: dict[str, Any]) -> str:
    packages = ", ".join(f"{k} {v}" for k, v in info.get("packages", {}).items())
    return (
        f"**Machine:** nproc={info['nproc']}, {info['cpu_model']}, Python {info['python']}, "
        f"redis-server {info.get('redis_server', '?')}, {info['date_utc']} "
        f"(load avg at start {info['loadavg_at_start']})  \n**Packages:** {packages}"
    )


def med(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def pct(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile as the ``int(q × n)``-th smallest value (the largest for
    ``q = 1``); ``None`` when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def clip_busy(intervals: Sequence[tuple[float, float]], lo: float, hi: float, lanes: int) -> float:
    """The share of ``lanes`` × [``lo``, ``hi``] spent inside the service ``intervals``
    (``(start, end)`` pairs, seconds): a downstream's busy share over a window of the
    drain (the sim's own ``busy_share`` is the whole drain's)."""
    busy = sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in intervals)
    return busy / (lanes * (hi - lo))


def med_range(values: Sequence[float], fmt: str = "{:,.0f}") -> str:
    """``"median [min–max]"``, or just the value when there is one."""
    if not values:
        return "-"
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(med(values))} [{fmt.format(min(values))}–{fmt.format(max(values))}]"


def md_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def sleep_until(wall_ts: float) -> None:
    """Sleep until ``time.time() >= wall_ts``; the last 2 ms are spun for precision."""
    while True:
        left = wall_ts - time.time()
        if left <= 0:
            return
        if left > 0.002:
            time.sleep(left - 0.002)


def write_json(path: str | Path, data: dict[str, Any]) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
