"""The bulk path: a consolidated manifest fanned out per Bill of Lading and back.

``store`` keeps a batch's units and its once-only aggregate claim in Redis; ``celery``
registers the dispatch → parse → aggregate → forward tasks on a Celery app.
"""

from __future__ import annotations

from tidegate.bulk.store import BatchStore

__all__ = ["BatchStore"]
