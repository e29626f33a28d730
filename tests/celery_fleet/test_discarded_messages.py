"""Messages Celery itself discards end in the DLQ with their reason, never in a log.

Planted raw on the broker, as a producer with a typo, a broken serializer or pickle
would send them, and consumed by the real fleet of ``conftest.py``.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

pytestmark = [pytest.mark.redis, pytest.mark.celery, pytest.mark.slow]

#: Personal data and identifiers that must reach the DLQ record and no log line.
PERSON = "Planted Ingrid Vestergaard"
EMAIL = "ingrid.vestergaard.planted@example.com"
CONTAINER = "PLNU7654321"
SECRETS = (PERSON, EMAIL, CONTAINER)


def _envelope(key: str) -> dict[str, Any]:
    return {
        "key": key,
        "type": "CODECO",
        "class": "gate_move",
        "body": f"UNB+UNOC:3+X+Y'NAD+CZ+{PERSON}'COM+{EMAIL}:EM'EQD+CN+{CONTAINER}'",
    }


def _logs(fleet: Any) -> str:
    return "".join(p.read_text(errors="replace") for p in fleet.fleet.log_dir.glob("*.log"))


def test_discarded_messages_are_dead_lettered_with_reason_and_never_logged(fleet: Any) -> None:
    """An unregistered task, an undecodable body, a pickle message and a body that is
    not a task each become one DLQ record with the reason and the body; no worker log
    line carries the body."""
    envelope = _envelope("typo-unit-1")
    broken = f'[[{{"key": "broken-1", "body": "{PERSON} {EMAIL} {CONTAINER}"'.encode()
    with fleet.producer.connection_for_write() as conn:
        plain = conn.Producer(serializer="json")
        plain.publish(
            [[envelope], {}, {}],
            routing_key="edi.tos",
            exchange="",
            headers={"task": "edi.tos.pushh", "id": "typo-task-id"},
        )
        plain.publish(
            broken,
            routing_key="edi.tos",
            exchange="",
            serializer=None,
            content_type="application/json",
            content_encoding="utf-8",
            headers={"task": "edi.tos.push", "id": "broken-id"},
        )
        conn.Producer(serializer="pickle").publish(
            [[_envelope("pickled-unit")], {}, {}],
            routing_key="edi.tos",
            exchange="",
            headers={"task": "edi.tos.push", "id": "pickled-id"},
        )
        plain.publish({"note": f"{PERSON} {EMAIL}"}, routing_key="edi.tos", exchange="")

    fleet.wait_for(lambda: len(fleet.dlq) == 4, timeout_s=30)
    letters = {letter.reason: letter for letter in fleet.dlq.iter()}

    assert set(letters) == {
        "unregistered task",
        "undecodable message body",
        "refused untrusted content (pickle)",
        "not a task message",
    }
    typo = letters["unregistered task"]
    # Keyed like the unit it would have been, with what a replay publishes.
    assert typo.key == "typo-unit-1"
    assert typo.task == "edi.tos.pushh"
    assert typo.payload["args"] == [envelope]
    assert typo.payload["queue"] == "edi.tos"
    undecodable = letters["undecodable message body"]
    assert undecodable.key == "broken-id"
    assert undecodable.exception == "DecodeError"
    assert undecodable.payload["body"].encode() == broken
    pickled = letters["refused untrusted content (pickle)"]
    assert pickled.key == "pickled-id"
    assert pickled.exception == "ContentDisallowed"
    raw = base64.b64decode(pickled.payload["body"])
    assert raw.startswith(b"\x80")  # the pickle, kept as it came and never unpickled
    assert CONTAINER.encode() in raw
    stray = letters["not a task message"]
    assert stray.key.startswith("discarded-")
    assert json.loads(stray.payload["body"]) == {"note": f"{PERSON} {EMAIL}"}

    # Nothing reached a downstream, nothing is left on the broker.
    assert fleet.tos.stats(timeline=False)["requests"] == 0
    fleet.wait_for(lambda: fleet.client.llen("edi.tos") == 0, timeout_s=10)
    logs = _logs(fleet)
    for secret in SECRETS:
        assert secret not in logs, f"{secret!r} leaked into a worker log"
    assert logs.count('"task_dead_lettered"') >= 4


def test_a_redelivered_discard_is_one_record(fleet: Any) -> None:
    """The same refused message twice (a producer retrying) is one record, two attempts."""
    with fleet.producer.connection_for_write() as conn:
        producer = conn.Producer(serializer="json")
        for _ in range(2):
            producer.publish(
                [[_envelope("retried-typo")], {}, {}],
                routing_key="edi.tos",
                exchange="",
                headers={"task": "edi.tos.unknown", "id": "retried-typo-id"},
            )

    fleet.wait_for(lambda: (fleet.dlq.get("retried-typo") or _NONE).attempts == 2, timeout_s=30)
    assert len(fleet.dlq) == 1


class _NoLetter:
    attempts = 0


_NONE = _NoLetter()
