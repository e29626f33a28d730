"""One outcome per submitted key, from the parties' own records (tidegate.harness.reconcile)."""

from __future__ import annotations

import base64
import json

from tidegate.harness.reconcile import OUTCOMES, keys_in_messages, reconcile


def test_each_key_gets_one_outcome_in_order_of_precedence() -> None:
    """Delivered beats dead-lettered (a replay that worked), and so on down the list."""
    result = reconcile(
        ["d", "x", "q", "r", "p", "gone", "both"],
        accepted={"d": 1, "both": 1},
        dead_lettered=["x", "both"],
        quarantined=["q"],
        refused=["r"],
        pending=["p"],
    )
    assert result.outcome == {
        "d": "delivered",
        "x": "dead_lettered",
        "q": "quarantined",
        "r": "refused",
        "p": "pending",
        "gone": "lost",
        "both": "delivered",
    }
    assert result.counts() == dict.fromkeys(OUTCOMES, 1) | {"delivered": 2}
    assert result.keys("lost") == ["gone"]
    assert result.delivered_and_dead_lettered == ["both"]


def test_a_duplicate_cannot_hide_a_loss() -> None:
    """One key accepted twice and another never: subtraction says 0 lost; this says 1."""
    result = reconcile(["a", "b"], accepted={"a": 2})
    assert result.keys("lost") == ["b"]
    assert result.accepted_twice == ["a"]
    subtraction = 2 - sum({"a": 2}.values())
    assert subtraction == 0  # what a report computed by subtraction would have said


def test_keys_nobody_submitted_are_unexpected() -> None:
    result = reconcile(["a"], accepted={"a": 1, "stranger": 1})
    assert result.unexpected == ["stranger"]
    assert result.count("delivered") == 1


def test_keys_are_read_from_kombu_messages_in_lists_and_unacked() -> None:
    """Envelope keys and idempotency_key keywords; other messages are skipped."""

    def message(args: list[object], kwargs: dict[str, object]) -> str:
        body = base64.b64encode(json.dumps([args, kwargs, {}]).encode()).decode()
        return json.dumps({"body": body, "properties": {"body_encoding": "base64"}})

    raws = [
        message([{"key": "K1"}], {}),
        json.dumps([json.loads(message([], {"idempotency_key": "K2"})), "", "q"]),
        message(["no-envelope"], {}),
        "not json",
    ]
    assert keys_in_messages(raws) == ["K1", "K2"]
