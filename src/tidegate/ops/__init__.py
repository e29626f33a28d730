"""Operations: what an operator runs in production — the monitor loop and its metrics.

The rule of this package: only the shipped operational modules live here — the
monitor (:mod:`~tidegate.ops.monitor`), the Prometheus metrics it or ``tidegate
metrics`` serves (:mod:`~tidegate.ops.metrics`, :mod:`~tidegate.ops.adaptive_metrics`)
— and none of them imports :mod:`tidegate.harness`. Demonstrations, worker fleets and
fault injection are the harness's (``tests/test_layout.py`` holds the line).
"""

from __future__ import annotations

__all__: list[str] = []
