"""The discard guard's pure parts: the record a refused message becomes, the log filter."""

from __future__ import annotations

import base64
import logging

from celery import Celery
from kombu.message import Message

from tidegate.integrations.celery import setup
from tidegate.integrations.celery.discards import (
    CeleryPayloadFilter,
    DiscardGuard,
    dead_letter_for,
)

PERSONAL = "Planted Person jp@example.com"


def _message(body: bytes, content_type: str, headers: dict[str, object]) -> Message:
    return Message(
        body=body,
        content_type=content_type,
        content_encoding="utf-8",
        headers=headers,
        delivery_info={"routing_key": "edi.tos", "exchange": ""},
    )


def test_json_task_body_keeps_replay_shape_and_envelope_key() -> None:
    """A decodable protocol-2 body keeps args/kwargs/queue and the envelope's key."""
    body = b'[[{"key": "u-1", "bl_number": "BL9", "body": "x"}], {"a": 1}, {}]'
    letter = dead_letter_for(
        _message(body, "application/json", {"task": "edi.tos.pushh", "id": "t-1"}),
        "unregistered task",
        KeyError("edi.tos.pushh"),
    )
    assert letter.key == "u-1"
    assert letter.task == "edi.tos.pushh"
    assert letter.exception == "KeyError"
    assert letter.bl_number == "BL9"
    assert letter.payload["args"] == [{"key": "u-1", "bl_number": "BL9", "body": "x"}]
    assert letter.payload["kwargs"] == {"a": 1}
    assert letter.payload["queue"] == "edi.tos"
    assert "body" not in letter.payload


def test_pickle_body_is_kept_base64_and_never_unpickled() -> None:
    """A pickle is stored byte for byte; decoding it would run the sender's code."""
    raw = b"\x80\x04\x95" + PERSONAL.encode() + b"\xff"
    letter = dead_letter_for(
        _message(raw, "application/x-python-serialize", {"task": "edi.tos.push", "id": "p-1"}),
        "refused untrusted content (pickle)",
        None,
    )
    assert letter.key == "p-1"
    assert letter.payload["body_encoding"] == "base64"
    assert base64.b64decode(letter.payload["body"]) == raw
    assert letter.payload["content_type"] == "application/x-python-serialize"


def test_message_without_id_is_keyed_by_its_body() -> None:
    """No envelope key, no task id: the same body gives the same key (one record)."""
    first = dead_letter_for(_message(b"{oops", "application/json", {}), "x", None)
    second = dead_letter_for(_message(b"{oops", "application/json", {}), "x", None)
    other = dead_letter_for(_message(b"{oops!", "application/json", {}), "x", None)
    assert first.key == second.key != other.key
    assert first.key.startswith("discarded-")
    assert first.task == "(no task name)"


def test_filter_strips_body_from_celerys_discard_lines() -> None:
    """Celery's own 'unregistered task' line loses its arguments (the body) and its
    traceback; other lines pass untouched."""
    from celery.worker.consumer import consumer

    template = consumer.UNKNOWN_TASK_ERROR  # type: ignore[attr-defined]
    record = logging.LogRecord(
        "celery.worker.consumer.consumer", logging.ERROR, __file__, 1, template,
        ("KeyError", PERSONAL, {"id": PERSONAL}, {}), None,
    )  # fmt: skip
    other = logging.LogRecord("celery", logging.INFO, __file__, 1, "hello %s", ("w",), None)

    assert CeleryPayloadFilter().filter(record)
    assert PERSONAL not in record.getMessage()
    assert record.levelno == logging.ERROR
    assert CeleryPayloadFilter().filter(other)
    assert other.getMessage() == "hello w"


def test_setup_installs_the_guard_once() -> None:
    """``setup`` adds the consumer step; a second call does not add it twice."""
    app = Celery("t", broker="redis://127.0.0.1:1/0")
    setup(app, mover=False)
    setup(app, mover=False)
    assert DiscardGuard in app.steps["consumer"]
    assert sum(step is DiscardGuard for step in app.steps["consumer"]) == 1
    celery_log = logging.getLogger("celery.worker.consumer.consumer")
    assert sum(isinstance(f, CeleryPayloadFilter) for f in celery_log.filters) == 1
