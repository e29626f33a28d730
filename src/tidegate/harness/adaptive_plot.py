"""The adaptive scenario's picture: what the customs gateway admitted each second
against the capacity it really had, and the rate the fleet's controller had learned.

The gate is never told the capacity line; the plot is where an operator sees that it
found it anyway (bars up to the line after the first seconds, down with the dip, back
up after) and that the learned rate stays under it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tidegate.harness.scenarios.adaptive import AdaptiveDemoConfig, capacity_at

__all__ = ["plot_adaptive"]


def plot_adaptive(report: Mapping[str, Any], path: Path) -> Path:
    """Write the PNG of one :func:`~tidegate.harness.scenarios.adaptive.run_adaptive_demo`
    report (with its ``_timelines`` and ``_adaptive``) to ``path`` and return it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    config = AdaptiveDemoConfig(**report["config"])
    origin = report["_adaptive"]["origin"]
    accepts = [ts - origin for ts in report["_timelines"]["customs"]]
    end = int(max(accepts, default=0.0)) + 2
    counts = [0] * end
    for t in accepts:
        counts[min(end - 1, max(0, int(t)))] += 1
    steps = [i * 0.1 for i in range(end * 10 + 1)]
    customs = report["downstreams"]["customs"]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    try:
        ax.bar(
            [i + 0.5 for i in range(end)],
            counts,
            width=0.9,
            color="tab:blue",
            alpha=0.6,
            label="admitted by the customs gateway, per second",
        )
        ax.step(
            steps,
            [capacity_at(config, t) for t in steps],
            where="post",
            color="#c0392b",
            label="true capacity (hidden from the gate)",
        )
        learned = report["_adaptive"]["learned"]
        if learned:
            ax.plot(
                [t for t, _ in learned],
                [r for _, r in learned],
                color="black",
                linewidth=1.2,
                label="rate learned by the controller",
            )
        ax.text(
            0.01,
            0.97,
            f"429: {customs['responses_429']} · suspensions: {customs['suspensions']}"
            f"\nutilisation: {customs['utilisation']} · 90 % of capacity at "
            f"{customs['converge_s']} s",
            transform=ax.transAxes,
            va="top",
            fontsize=9,
            bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.8},
        )
        ax.set_ylim(0, max([config.customs_rate, *counts]) * 1.4)
        ax.set_xlabel("seconds since the vessel's documents arrived")
        ax.set_ylabel("declarations / s")
        ax.set_title(
            f"customs gateway, adaptive gate: {report['submitted']:,} interchanges,"
            f" lost {report['lost']}, accepted twice {report['accepted_twice']}"
        )
        ax.legend(loc="upper right")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
    return path
