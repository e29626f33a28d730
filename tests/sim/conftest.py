"""Fixtures for the simulated downstreams: a steppable clock, a sleep that holds.

Tests never sleep to make things pass: time moves when a test says so
(:class:`FakeClock`), and "a request in service" is a handler thread parked in
:class:`HeldSleep` until the test releases it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest


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


class HeldSleep:
    """An injectable ``sleep`` that parks the calling thread until :meth:`release`.

    ``durations`` records what each caller asked for; :meth:`wait_entered` blocks until
    ``n`` threads are parked (bounded, so a bug fails the test instead of hanging it).
    """

    def __init__(self) -> None:
        self.durations: list[float] = []
        self._entered = threading.Semaphore(0)
        self._released = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, seconds: float) -> None:
        with self._lock:
            self.durations.append(seconds)
        self._entered.release()
        self._released.wait(timeout=30)

    def wait_entered(self, n: int, timeout: float = 10.0) -> None:
        for _ in range(n):
            assert self._entered.acquire(timeout=timeout), "a request never reached service"

    def release(self) -> None:
        self._released.set()


@pytest.fixture
def clock() -> FakeClock:
    """A fake monotonic clock starting at 1000 s."""
    return FakeClock()


@pytest.fixture
def held_sleep() -> Iterator[HeldSleep]:
    """A sleep that holds handler threads; released at teardown whatever happens."""
    sleep = HeldSleep()
    yield sleep
    sleep.release()


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    """A plain httpx client (keep-alive, 10 s timeout)."""
    with httpx.Client(timeout=10.0) as client:
        yield client


@pytest.fixture
def write(http: httpx.Client) -> Callable[..., httpx.Response]:
    """``write(url, key="k1", body={...}, **kwargs)``: one JSON POST with a key.

    ``key=None`` sends no ``Idempotency-Key`` header.
    """

    def _write(url: str, key: str | None = "k1", body: Any = None, **kwargs: Any) -> httpx.Response:
        headers = dict(kwargs.pop("headers", {}))
        if key is not None:
            headers["Idempotency-Key"] = key
        return http.post(url, json={"n": 1} if body is None else body, headers=headers, **kwargs)

    return _write
