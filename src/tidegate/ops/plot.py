"""The demo's picture: queue depth and downstream call rate over time.

Two panels sharing the time axis: the backlog per queue (it should rise at once and
drain steadily), and the calls each downstream accepted per second against its limit
(the customs line should sit on its limit and never cross it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tidegate.ops.vessel_demo import Sample

__all__ = ["plot_run"]


def _per_second(timestamps: Sequence[float], t0: float) -> tuple[list[float], list[int]]:
    if not timestamps:
        return [], []
    last = int(max(timestamps) - t0) + 1
    counts = [0] * (last + 1)
    for ts in timestamps:
        counts[max(0, int(ts - t0))] += 1
    return [i + 0.5 for i in range(len(counts))], counts


def plot_run(report: dict[str, Any], samples: Sequence[Sample], path: Path) -> Path:
    """Write the PNG to ``path`` and return it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (depth_ax, rate_ax) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    times = [s.t for s in samples]
    queues = sorted({q for s in samples for q in s.depth if q != "unacked"})
    for queue in queues:
        depth_ax.plot(times, [s.depth.get(queue, 0) for s in samples], label=queue)
    depth_ax.plot(times, [s.parked for s in samples], label="parked", linestyle="--")
    depth_ax.set_ylabel("messages waiting")
    depth_ax.set_title(
        f"vessel burst: {report['submitted']} interchanges, delivered {report['delivered']}, "
        f"lost {report['lost']}, duplicates {report['duplicates']}"
    )
    depth_ax.legend(loc="upper right")
    depth_ax.grid(alpha=0.3)

    timelines = report.get("_timelines", {})
    t0 = timelines.get("t0", 0.0)
    for name, stats in report["downstreams"].items():
        xs, ys = _per_second(timelines.get(name, []), t0)
        (line,) = rate_ax.step(xs, ys, where="mid", label=f"{name} accepted/s")
        rate_ax.axhline(
            stats["limit_per_s"],
            color=line.get_color(),
            linestyle=":",
            label=f"{name} limit {stats['limit_per_s']:g}/s",
        )
    rate_ax.set_ylabel("calls accepted per second")
    rate_ax.set_xlabel("seconds since the burst was submitted")
    rate_ax.legend(loc="upper right")
    rate_ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
