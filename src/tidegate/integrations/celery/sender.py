"""The Celery side of admission: how an admitted document is put on the broker.

A publish that the broker refuses comes back from kombu as its own ``OperationalError``
around redis-py's (a full Redis: ``OOM command not allowed``) or a socket error. The
admission promises a :class:`~tidegate.errors.BackendUnavailable` for it ("nothing was
sent"), so that the intake answers 503 with ``Retry-After`` and a producer waits: left
as kombu's, it escaped the intake as a 500 and a traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import kombu.exceptions
import redis

from tidegate._redis import refused_write_in_chain
from tidegate.errors import BackendError, BackendUnavailable, BackendUnwritable

__all__ = ["CelerySender", "broker_errors"]


def _broker_error(exc: BaseException, operation: str) -> BackendError:
    """A refused write anywhere in ``exc``'s chain (kombu wraps redis-py's errors) is
    :class:`BackendUnwritable`; anything else the broker raised, unavailable. The
    message names the error's type only: kombu's text can carry the broker's URL."""
    cause = refused_write_in_chain(exc)
    if cause is not None:
        return BackendUnwritable(cause, operation)
    return BackendUnavailable(f"broker unavailable during {operation} ({type(exc).__name__})")


@contextlib.contextmanager
def broker_errors(operation: str) -> Iterator[None]:
    """Raise the broker's errors in the block as tidegate's (see the module docstring)."""
    try:
        yield
    except (kombu.exceptions.KombuError, redis.exceptions.RedisError, OSError) as exc:
        raise _broker_error(exc, operation) from exc


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
        with broker_errors("publish"):
            self.app.send_task(task, args=[dict(payload)], queue=queue, ignore_result=True)
