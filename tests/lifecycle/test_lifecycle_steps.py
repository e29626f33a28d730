"""The lifecycle generator on its own: steps in, answers out, no I/O, no clock."""

from __future__ import annotations

from typing import Any

from tidegate.delivery import AWAITING_COMMIT, LifecyclePolicy, Requeue, Unit, lifecycle, steps
from tidegate.errors import BackendUnavailable, DownstreamUnavailable
from tidegate.load.ledger import DeliveryState, LedgerEntry

NEW = LedgerEntry(DeliveryState.NEW, None, 0.0)


def unit(**fields: Any) -> Unit:
    return Unit(key="K-1", downstream="customs", engine="memory", task="t", **fields)


def drive(flow: Any, answers: dict[type, Any]) -> tuple[list[str], Any]:
    """Run ``flow`` answering each step from ``answers`` (an exception is thrown in)."""
    seen: list[str] = []
    answer: Any = None
    while True:
        try:
            step = flow.throw(answer) if isinstance(answer, Exception) else flow.send(answer)
        except StopIteration as stop:
            return seen, stop.value
        seen.append(type(step).__name__)
        answer = answers.get(type(step))
        if callable(answer) and not isinstance(answer, Exception):
            answer = answer(step)


def test_a_new_unit_is_marked_sending_called_then_marked_delivered() -> None:
    """The plain path, in order: nothing is sent before ``sending`` is written, and the
    slot is left before the delivered mark."""
    seen, result = drive(
        lifecycle(unit(), LifecyclePolicy()),
        {steps.ReadLedger: NEW, steps.Now: 1.0, steps.Call: {"ok": True}},
    )
    assert seen == [
        "CheckUnit",
        "ReadLedger",
        "Acquire",
        "Now",
        "MarkSending",
        "Call",
        "Release",
        "MarkDelivered",
        "Forget",
    ]
    assert result == {"ok": True}


def test_a_replayed_unit_asks_first_and_resolves_its_letter() -> None:
    """A replay is not new: the downstream is asked inside the gate; its yes settles
    the unit and removes the dead letter, without a call."""
    seen, result = drive(
        lifecycle(unit(replay=1), LifecyclePolicy()),
        {steps.ReadLedger: NEW, steps.ConfirmByLookup: True},
    )
    assert "Call" not in seen
    assert seen[-5:] == ["ConfirmByLookup", "Release", "MarkDelivered", "ResolveReplay", "Forget"]
    assert result == {"tidegate": "already_delivered"}


def test_a_young_sending_record_parks_for_the_rest_of_max_request_s() -> None:
    """The earlier request started 2 s ago and may take 30 s: park 28 s, ask nothing."""
    entry = LedgerEntry(DeliveryState.SENDING, 10_000.0, 0.0)._replace(now_ms=12_000.0)
    parks: list[steps.Park] = []

    def park(step: steps.Park) -> dict[str, str]:
        parks.append(step)
        return {"tidegate": "parked"}

    seen, _ = drive(
        lifecycle(unit(), LifecyclePolicy(max_request_s=30)),
        {steps.ReadLedger: entry, steps.Park: park},
    )
    assert seen == ["CheckUnit", "ReadLedger", "Park"]
    assert parks[0].verdict.reason == AWAITING_COMMIT
    assert parks[0].verdict.delay_s == 28.0


def test_a_call_that_may_have_reached_parks_until_the_request_can_be_over() -> None:
    """A timeout 5 s into a call to a downstream that may take 60 s: the unit waits
    out the other 55 s, longer than the backoff would have."""
    clock = iter([100.0, 105.0])
    parks: list[steps.Park] = []
    seen, _ = drive(
        lifecycle(unit(), LifecyclePolicy(max_request_s=60)),
        {
            steps.ReadLedger: NEW,
            steps.Now: lambda _: next(clock),
            steps.Call: DownstreamUnavailable("customs", "read timeout"),
            steps.ReadClock: 1_000.0,
            steps.Park: parks.append,
        },
    )
    assert "Decision" in seen
    assert parks[0].verdict.delay_s == 55.0


def test_redis_down_ends_in_a_requeue_not_a_park() -> None:
    """The ledger cannot be read and the clock neither: nothing can be parked or
    dead-lettered, the engine must give the unit back to its broker."""
    down = BackendUnavailable("redis: connection refused")
    _, result = drive(
        lifecycle(unit(), LifecyclePolicy()),
        {steps.ReadLedger: down, steps.ReadClock: down},
    )
    assert isinstance(result, Requeue)
    assert result.reason == "redis_unavailable"
