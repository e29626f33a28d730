"""Thin adapters from worker frameworks (Celery, RQ) to ``tidegate.flow`` and ``tidegate.load``."""

from __future__ import annotations

__all__: list[str] = []
