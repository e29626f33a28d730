"""Messages Celery itself would discard: dead-lettered with the reason, never logged.

A worker's consumer drops four kinds of message before any task runs — an
unregistered task name (a typo), a body it cannot decode, a content type it refuses
(pickle), a message that is not a task at all — and Celery logs each one at ERROR
*with the whole body*: party names, e-mail addresses, container numbers end up in
the log store, and the document itself is gone. :class:`DiscardGuard`, a consumer
bootstep, replaces those four consumer callbacks: the message becomes one
:class:`~tidegate.load.DeadLetter` (the body goes into the record's payload, which is
never logged) and only then leaves the broker. :class:`CeleryPayloadFilter` is the
safety net for Celery's own log lines of these cases, should any path still emit one.

A record is keyed like the unit it would have been — the envelope's ``key`` when the
body is JSON with one, else the task id, else a hash of the body — so a redelivered
copy is the same record, and a replay after the fix (the task registered, the
producer fixed) resolves it like any other dead letter.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from celery import Celery, bootsteps, signals
from celery.worker.consumer import consumer as celery_consumer

from tidegate.errors import BackendError
from tidegate.integrations.celery.runtime import runtime
from tidegate.load import DeadLetter
from tidegate.logging import get_logger, key_hash

__all__ = ["CeleryPayloadFilter", "DiscardGuard", "dead_letter_for", "install_discard_guard"]

log = get_logger("tidegate.celery")
#: kombu's ``reject_log_error`` reports a failed reject here (no payload in it).
logger = logging.getLogger("tidegate.celery.discards")

#: Dead-letter reasons, stable: ``tidegate dlq list --reason`` filters on them.
REASON_UNKNOWN_TASK = "unregistered task"
REASON_UNDECODABLE = "undecodable message body"
REASON_REFUSED_CONTENT = "refused untrusted content"
REASON_INVALID = "invalid task message"
REASON_NOT_A_TASK = "not a task message"

#: Celery's log templates that quote a message body or its headers (not in the stubs).
_BODY_TEMPLATES: frozenset[str] = frozenset(
    getattr(celery_consumer, name)
    for name in (
        "UNKNOWN_TASK_ERROR",
        "INVALID_TASK_ERROR",
        "MESSAGE_DECODE_ERROR",
        "UNKNOWN_FORMAT",
    )
)
#: The logger Celery's consumer writes those lines to.
_CELERY_CONSUMER_LOGGER = "celery.worker.consumer.consumer"


def _raw_body(message: Any) -> bytes:
    body = getattr(message, "body", b"")
    if isinstance(body, str):
        return body.encode("utf-8", "surrogateescape")
    return bytes(body or b"")


def _json_body(message: Any) -> Any:
    """The body as JSON, or ``None``: never another serializer (pickle runs code)."""
    if "json" not in str(getattr(message, "content_type", "") or ""):
        return None
    try:
        return json.loads(_raw_body(message))
    except (ValueError, UnicodeDecodeError):
        return None


def _headers(message: Any) -> dict[str, Any]:
    headers = getattr(message, "headers", None)
    return dict(headers) if isinstance(headers, Mapping) else {}


def _unit_key(message: Any, decoded: Any) -> str:
    """The envelope key, else the task id, else a hash of the body (see module)."""
    if isinstance(decoded, list) and decoded and isinstance(decoded[0], list) and decoded[0]:
        envelope = decoded[0][0]
        if isinstance(envelope, Mapping) and isinstance(envelope.get("key"), str | int):
            return str(envelope["key"])
    task_id = _headers(message).get("id")
    if isinstance(task_id, str) and task_id:
        return task_id
    return "discarded-" + hashlib.sha256(_raw_body(message)).hexdigest()[:32]


def dead_letter_for(message: Any, reason: str, exc: BaseException | None) -> DeadLetter:
    """The dead letter of a message the consumer refused (pure; reads no Redis).

    A protocol-2 JSON body keeps the shape a replay publishes (``task``, ``args``,
    ``kwargs``, ``queue``); any other body is kept whole, as text when it is UTF-8 and
    base64 otherwise, with its content type, so nothing of it is lost — it is never
    decoded with a serializer other than JSON.
    """
    headers = _headers(message)
    delivery = getattr(message, "delivery_info", None) or {}
    queue = delivery.get("routing_key") if isinstance(delivery, Mapping) else None
    decoded = _json_body(message)
    task = headers.get("task")
    task_name = task if isinstance(task, str) else ""
    payload: dict[str, Any] = {"task": task_name, "queue": queue}
    if (
        isinstance(decoded, list)
        and len(decoded) == 3
        and isinstance(decoded[0], list)
        and isinstance(decoded[1], Mapping)
    ):
        payload.update(args=decoded[0], kwargs=dict(decoded[1]))
    else:
        raw = _raw_body(message)
        try:
            payload.update(body=raw.decode("utf-8"), body_encoding="utf-8")
        except UnicodeDecodeError:
            payload.update(body=base64.b64encode(raw).decode("ascii"), body_encoding="base64")
        payload.update(
            content_type=str(getattr(message, "content_type", "") or ""),
            content_encoding=str(getattr(message, "content_encoding", "") or ""),
        )
    payload["headers"] = {k: v for k, v in headers.items() if _jsonable(v)}
    envelope = decoded[0][0] if payload.get("args") else None
    return DeadLetter(
        key=_unit_key(message, decoded),
        task=task_name or "(no task name)",
        reason=reason,
        exception=type(exc).__name__ if exc is not None else "",
        payload=payload,
        bl_number=envelope.get("bl_number") if isinstance(envelope, Mapping) else None,
        batch_id=envelope.get("batch_id") if isinstance(envelope, Mapping) else None,
    )


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


class DiscardGuard(bootsteps.StartStopStep):
    """Consumer bootstep: dead-letter what the consumer would discard (see module).

    Installed by :func:`install_discard_guard` (``setup`` does it). The four consumer
    callbacks are replaced on the consumer instance when the blueprint is built, so
    the task handler the event loop creates afterwards calls these.
    """

    label = "tidegate discard guard"

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        consumer = parent
        app: Celery = consumer.app

        def settle(message: Any, reason: str, exc: BaseException | None) -> bool:
            """Dead-letter, then take the message off the broker; ``False`` if the
            DLQ could not be written (the message is then put back, not dropped)."""
            letter = dead_letter_for(message, reason, exc)
            try:
                runtime(app).dlq.add(letter)
            except BackendError as error:
                log.error(
                    "discarded_message_requeued",
                    key_hash=key_hash(letter.key),
                    reason=reason,
                    error=type(error).__name__,
                )
                message.reject_log_error(logger, consumer.connection_errors, requeue=True)
                return False
            message.reject_log_error(logger, consumer.connection_errors)
            return True

        def on_unknown_message(body: Any, message: Any) -> None:
            if settle(message, REASON_NOT_A_TASK, None):
                signals.task_rejected.send(sender=consumer, message=message, exc=None)

        def on_unknown_task(body: Any, message: Any, exc: BaseException) -> None:
            if not settle(message, REASON_UNKNOWN_TASK, exc):
                return
            headers = _headers(message)
            name, task_id = headers.get("task"), headers.get("id")
            signals.task_unknown.send(
                sender=consumer, message=message, exc=exc, name=name, id=task_id
            )

        def on_invalid_task(body: Any, message: Any, exc: BaseException) -> None:
            refused = type(exc).__name__ == "ContentDisallowed"
            reason = (
                f"{REASON_REFUSED_CONTENT} ({_content_name(message)})"
                if refused
                else REASON_INVALID
            )
            if settle(message, reason, exc):
                signals.task_rejected.send(sender=consumer, message=message, exc=exc)

        def on_decode_error(message: Any, exc: BaseException) -> None:
            refused = type(exc).__name__ == "ContentDisallowed"
            reason = (
                f"{REASON_REFUSED_CONTENT} ({_content_name(message)})"
                if refused
                else REASON_UNDECODABLE
            )
            settle(message, reason, exc)

        consumer.on_unknown_message = on_unknown_message
        consumer.on_unknown_task = on_unknown_task
        consumer.on_invalid_task = on_invalid_task
        consumer.on_decode_error = on_decode_error


_CONTENT_NAMES = {
    "application/x-python-serialize": "pickle",
    "application/x-yaml": "yaml",
    "application/x-msgpack": "msgpack",
    "application/json": "json",
}


def _content_name(message: Any) -> str:
    content_type = str(getattr(message, "content_type", "") or "unknown")
    return _CONTENT_NAMES.get(content_type, content_type[:64])


class CeleryPayloadFilter(logging.Filter):
    """Strip the body and headers from Celery's discard log lines (the safety net).

    Celery formats these lines with the message body and headers as arguments; the
    filter keeps the level and replaces the text with a fixed sentence and no
    traceback (an exception's text can quote the body too).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg in _BODY_TEMPLATES:
            record.msg = "celery discarded a message (body withheld by tidegate)"
            record.args = ()
            record.exc_info = None
            record.exc_text = None
        return True


def install_discard_guard(app: Celery) -> None:
    """Add :class:`DiscardGuard` to ``app``'s consumer and the filter to Celery's logger."""
    steps = app.steps["consumer"]
    if DiscardGuard not in steps:
        steps.add(DiscardGuard)
    celery_log = logging.getLogger(_CELERY_CONSUMER_LOGGER)
    if not any(isinstance(f, CeleryPayloadFilter) for f in celery_log.filters):
        celery_log.addFilter(CeleryPayloadFilter())
