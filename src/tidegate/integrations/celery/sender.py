"""The Celery side of admission: how an admitted document is put on the broker."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["CelerySender"]


class _CeleryApp(Protocol):
    def send_task(self, name: str, *args: Any, **kwargs: Any) -> Any: ...


class CelerySender:
    """A :class:`~tidegate.load.admission.Sender` that sends with
    ``app.send_task(task, args=[payload], queue=queue)``."""

    name = "celery"

    def __init__(self, app: _CeleryApp) -> None:
        self.app = app

    def send(self, queue: str, task: str, payload: Mapping[str, Any]) -> None:
        # The intake never reads a unit's result: a Redis result backend would otherwise
        # subscribe this process to one channel per document, for good.
        self.app.send_task(task, args=[dict(payload)], queue=queue, ignore_result=True)
