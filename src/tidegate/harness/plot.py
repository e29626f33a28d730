"""The demo's picture, for a port operator rather than for us.

Three panels share the time axis. The backlog: documents waiting for the customs
gateway and for the terminal system (it should rise at once and drain steadily). The
customs gateway: what it accepted each second against its published limit — the bars
should sit on the limit line and never cross it, and the 429 count and the peak are
written on the panel, because those are what the gateway's operator will ask about.
The terminal system: what it accepted each second, under a limit that is a number of
connections, not a rate — so no rate line is drawn there; "4 connections" is what its
operator configured, and an "80/s" line would be a figure nobody set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["QUEUE_LABELS", "build_figure", "plot_run"]

#: What each queue is, in the port's words.
QUEUE_LABELS = {
    "edi.customs": "waiting for the customs gateway (edi.customs)",
    "edi.tos": "waiting for the terminal system (edi.tos)",
}

_LIMIT_COLOUR = "#c0392b"


def _per_second(timestamps: Sequence[float], t0: float) -> tuple[list[float], list[int]]:
    if not timestamps:
        return [], []
    last = int(max(timestamps) - t0) + 1
    counts = [0] * (last + 1)
    for ts in timestamps:
        counts[max(0, int(ts - t0))] += 1
    return [i + 0.5 for i in range(len(counts))], counts


def _title(report: Mapping[str, Any]) -> str:
    classes = ", ".join(f"{name} {count:,}" for name, count in report.get("by_class", {}).items())
    scenario = str(report.get("scenario", "vessel"))
    what = f"chaos {scenario.split(':', 1)[1]} — " if scenario.startswith("chaos:") else ""
    return (
        f"{what}A vessel berths: {report['submitted']:,} interchanges"
        + (f" ({classes})" if classes else "")
        + f"\ndelivered {report['delivered']:,} · dead-lettered {report['dead_lettered']:,}"
        f" · lost {report['lost']:,} · sent twice {report['duplicates']:,}"
    )


def _backlog(ax: Axes, report: Mapping[str, Any], samples: Sequence[Any]) -> None:
    times = [s.t for s in samples]
    queues = sorted({q for s in samples for q in s.depth if q != "unacked"})
    for queue in queues:
        ax.plot(
            times,
            [s.depth.get(queue, 0) for s in samples],
            label=QUEUE_LABELS.get(queue, f"waiting in {queue}"),
        )
    ax.plot(
        times,
        [s.parked for s in samples],
        linestyle="--",
        label="parked in Redis (waiting out a gate or a retry)",
    )
    ax.set_ylabel("documents waiting")
    ax.set_title(_title(report))
    ax.legend(loc="upper right")
    ax.grid(alpha=0.3)


def _accepted_bars(ax: Axes, xs: list[float], ys: list[int], colour: str, label: str) -> None:
    """What was accepted, as bars: filled areas read as "what happened", apart from the
    dashed limit line drawn over them."""
    ax.bar(xs, ys, width=1.0, color=colour, alpha=0.55, edgecolor=colour, label=label)


def _peak(stats: Mapping[str, Any], ys: list[int]) -> int:
    peak = stats.get("max_accepted_1s")
    return int(peak) if peak is not None else max(ys, default=0)


def _box(ax: Axes, text: str) -> None:
    ax.text(
        0.01,
        0.95,
        text,
        transform=ax.transAxes,
        va="top",
        fontsize=9,
        bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.85},
    )


def _customs(ax: Axes, report: Mapping[str, Any], timelines: Mapping[str, Any]) -> None:
    stats = report["downstreams"]["customs"]
    xs, ys = _per_second(timelines.get("customs", []), timelines.get("t0", 0.0))
    _accepted_bars(ax, xs, ys, "tab:blue", "accepted by the customs gateway, per second")
    limit = stats["limit_per_s"]
    ax.axhline(
        limit,
        color=_LIMIT_COLOUR,
        linestyle="--",
        linewidth=2.0,
        label=f"the gateway's limit: {stats.get('limit', f'{limit:g}/s')}",
    )
    burst = report.get("config", {}).get("customs_burst")
    _box(
        ax,
        f"429 (too many requests): {stats['responses_429']}\n"
        f"peak: {_peak(stats, ys)} accepted in any one second (the gateway allows "
        f"{limit:g}/s" + (f" plus a burst of {burst})" if burst else ")"),
    )
    ax.set_ylim(0, max([limit, *ys]) * 1.4)
    ax.set_ylabel("declarations / s")
    ax.set_title("customs gateway (VERMAS, CUSCAR): accepted per second against its limit")
    ax.legend(loc="upper right")
    ax.grid(alpha=0.3)


def _terminal(ax: Axes, report: Mapping[str, Any], timelines: Mapping[str, Any]) -> None:
    stats = report["downstreams"]["tos"]
    connections = report.get("config", {}).get("tos_connections")
    limit = stats.get("limit") or (f"{connections} connections" if connections else "-")
    xs, ys = _per_second(timelines.get("tos", []), timelines.get("t0", 0.0))
    _accepted_bars(ax, xs, ys, "tab:green", "accepted by the terminal system, per second")
    _box(
        ax,
        f"limit: {limit} at a time (not a rate)\n"
        f"peak: {_peak(stats, ys)} accepted in any one second\n"
        f"429: {stats['responses_429']} · 503 (busy): {stats['responses_503']}",
    )
    ax.set_ylim(0, max([1, *ys]) * 1.5)
    ax.set_ylabel("reports / s")
    ax.set_xlabel("seconds since the vessel's documents arrived")
    ax.set_title(f"terminal system (COARRI, CODECO): accepted per second, {limit}")
    ax.legend(loc="upper right")
    ax.grid(alpha=0.3)


def build_figure(report: Mapping[str, Any], samples: Sequence[Any]) -> Figure:
    """The picture of one vessel run (also a chaos run) as a matplotlib figure.

    ``report`` is :func:`~tidegate.harness.scenarios.vessel.run_vessel_demo`'s (with its
    ``_timelines``); ``samples`` its samples. The caller closes the figure.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (backlog_ax, customs_ax, tos_ax) = plt.subplots(
        3, 1, figsize=(11, 10), sharex=True, height_ratios=(3, 2, 2)
    )
    timelines = report.get("_timelines", {})
    _backlog(backlog_ax, report, samples)
    _customs(customs_ax, report, timelines)
    _terminal(tos_ax, report, timelines)
    fig.tight_layout()
    return fig


def plot_run(report: Mapping[str, Any], samples: Sequence[Any], path: Path) -> Path:
    """Write the PNG of :func:`build_figure` to ``path`` and return it."""
    fig = build_figure(report, samples)
    import matplotlib.pyplot as plt

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
    return path
