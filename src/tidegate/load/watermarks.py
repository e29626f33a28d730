"""Watermarks: from a queue's depth samples to a load state, a scaling signal and shedding.

This module is the one import for all of it; the parts live in modules with one job each:

- :mod:`tidegate.load.levels` — the pure maths: :class:`Watermarks`, :class:`Level`,
  :class:`Signal`, :class:`LoadState` and :func:`advance` (hysteresis, shedding);
- :mod:`tidegate.load.scaling` — what the worker count is sized from:
  :class:`ScalingPolicy`, :class:`GateView`;
- :mod:`tidegate.load.watermark_store` — the live configuration:
  :class:`WatermarkStore` (Redis; its contract is
  :class:`~tidegate.load.protocols.WatermarkConfigStore`);
- :mod:`tidegate.load.board` — where the monitor publishes each state:
  :class:`LoadBoard` (Redis; its contract is
  :class:`~tidegate.load.protocols.LoadBoardStore`), :class:`BoardEntry`;
- :mod:`tidegate.load.memory` — the stores' one-process twins.
"""

from __future__ import annotations

from tidegate.load.board import BoardEntry, LoadBoard
from tidegate.load.levels import (
    DEFAULT_HWM,
    DEFAULT_LWM,
    DEFAULT_SHED_AFTER_INTERVALS,
    Level,
    LoadState,
    Signal,
    Watermarks,
    advance,
)
from tidegate.load.scaling import GateView, ScalingPolicy
from tidegate.load.watermark_store import WatermarkStore

__all__ = [
    "DEFAULT_HWM",
    "DEFAULT_LWM",
    "DEFAULT_SHED_AFTER_INTERVALS",
    "BoardEntry",
    "GateView",
    "Level",
    "LoadBoard",
    "LoadState",
    "ScalingPolicy",
    "Signal",
    "WatermarkStore",
    "Watermarks",
    "advance",
]
