"""Fixtures for the downstream clients: a recording feedback and a steppable clock."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tidegate.sim import CustomsSim


class FakeClock:
    """A monotonic clock that only moves on :meth:`advance`."""

    def __init__(self, start: float = 1_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


class RecordingFeedback:
    """A fake of the fleet gate: records every ``pause(seconds, reason)``.

    With ``fail=exc`` it raises ``exc`` instead (the gate's Redis is down).
    """

    def __init__(self, fail: Exception | None = None) -> None:
        self.calls: list[tuple[float, str]] = []
        self.fail = fail

    def pause(self, seconds: float, reason: str) -> None:
        self.calls.append((seconds, reason))
        if self.fail is not None:
            raise self.fail


class AsyncRecordingFeedback(RecordingFeedback):
    """Like :class:`RecordingFeedback`, but ``pause`` returns a coroutine to await."""

    def __init__(self) -> None:
        super().__init__()
        self.awaited = 0

    def pause(self, seconds: float, reason: str) -> object:  # type: ignore[override]
        self.calls.append((seconds, reason))

        async def _done() -> None:
            self.awaited += 1

        return _done()


@pytest.fixture
def clock() -> FakeClock:
    """A fake monotonic clock for the sims."""
    return FakeClock()


@pytest.fixture
def feedback() -> RecordingFeedback:
    """A recording stand-in for the fleet-wide gate."""
    return RecordingFeedback()


@pytest.fixture
def async_feedback() -> AsyncRecordingFeedback:
    """A recording stand-in whose ``pause`` must be awaited."""
    return AsyncRecordingFeedback()


@pytest.fixture
def customs(clock: FakeClock) -> Iterator[CustomsSim]:
    """Customs at 1 call/s, burst 1, on the fake clock: the 2nd call is a 429."""
    with CustomsSim(1.0, 1, clock=clock) as sim:
        yield sim


@pytest.fixture
def recording_feedback_type() -> type[RecordingFeedback]:
    """The class itself, for tests that need a failing instance."""
    return RecordingFeedback
