"""The twins' default clock: the wall clock in ms, as Redis ``TIME`` would give."""

from __future__ import annotations

import time

__all__ = ["wall_ms"]


def wall_ms() -> float:
    """ms since the epoch (the host's clock: a twin is one process, so one host)."""
    return time.time() * 1000.0
