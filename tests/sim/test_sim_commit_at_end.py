"""A downstream that records a write only when the request finishes (issue #13, item 5).

Such a downstream cannot confirm a write by lookup while the request runs — and the
request runs on after the client gave up waiting. The sim's handler thread is held in
:class:`HeldSleep` for "still running": nothing here races the wall clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tidegate.sim import TosSim


@pytest.fixture
def tos(held_sleep: Any) -> Iterator[TosSim]:
    with TosSim(max_connections=2, service_s=5.0, sleep=held_sleep) as sim:
        yield sim


def _lookup(sim: TosSim, key: str) -> int:
    return httpx.get(f"{sim.endpoint}/{key}", timeout=5.0).status_code


def test_commit_at_end_answers_not_received_until_the_request_is_over(
    tos: TosSim, held_sleep: Any
) -> None:
    """The client times out; the lookup says 404 while the request runs, 200 after."""
    tos.set_commit_at_end()

    with pytest.raises(httpx.ReadTimeout):
        httpx.post(tos.endpoint, json={"n": 1}, headers={"Idempotency-Key": "K-1"}, timeout=0.3)
    held_sleep.wait_entered(1)
    during = _lookup(tos, "K-1"), tos.stats(timeline=False)["accepted"]
    held_sleep.release()
    tos.stop()  # waits for the held request to finish

    assert during == (404, 0)
    assert tos.accepted_keys() == ["K-1"]
    stats = tos.stats(timeline=False)
    assert (stats["accepted"], stats["requests"], stats["lookups"]) == (1, 1, 1)


def test_by_default_a_write_is_recorded_when_admitted(tos: TosSim, held_sleep: Any) -> None:
    """The default mode is unchanged: a lookup during the request already finds it."""
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(tos.endpoint, json={"n": 1}, headers={"Idempotency-Key": "K-2"}, timeout=0.3)
    held_sleep.wait_entered(1)
    during = _lookup(tos, "K-2"), tos.stats(timeline=False)["accepted"]
    held_sleep.release()

    assert during == (200, 1)


def test_a_repeat_committed_at_the_end_is_counted_as_a_duplicate(
    tos: TosSim, held_sleep: Any
) -> None:
    """Two writes of one key in service at once both land: the second is a duplicate."""
    tos.set_commit_at_end()
    for _ in range(2):
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(tos.endpoint, json={"n": 1}, headers={"Idempotency-Key": "K-3"}, timeout=0.3)
    held_sleep.wait_entered(2)
    held_sleep.release()
    tos.stop()

    stats = tos.stats(timeline=False)
    assert (stats["accepted"], stats["distinct_keys"], stats["duplicates"]) == (2, 1, 1)


def test_stragglers_take_their_own_service_time_one_in_every(held_sleep: Any) -> None:
    """Two stragglers, one in three writes: writes 3 and 6 are slow, the rest not."""
    with TosSim(max_connections=10, service_s=0.0, sleep=held_sleep) as tos:
        tos.set_stragglers(7.5, count=2, every=3)
        statuses = []
        for n in range(8):
            try:
                reply = httpx.post(
                    tos.endpoint, json={"n": n}, headers={"Idempotency-Key": f"K-{n}"}, timeout=0.3
                )
                statuses.append(reply.status_code)
            except httpx.ReadTimeout:
                statuses.append(None)
        held_sleep.release()

    assert statuses == [200, 200, None, 200, 200, None, 200, 200]
    assert held_sleep.durations == [7.5, 7.5]
