"""AsyncDownstreamClient: the same decisions as the sync client, over asyncio."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from tidegate.downstream import AsyncDownstreamClient
from tidegate.errors import (
    ConfigurationError,
    DownstreamRejected,
    DownstreamThrottled,
    DownstreamUnavailable,
)
from tidegate.sim import DatabaseSim, TosSim


def test_send_returns_the_json_answer(customs: Any) -> None:
    """The key is recorded by the sim and the answer parsed."""

    async def main() -> dict[str, Any]:
        async with AsyncDownstreamClient("customs", customs.url) as client:
            return await client.send("/declarations", {"n": 1}, idempotency_key="a")

    assert asyncio.run(main())["idempotency_key"] == "a"
    assert customs.accepted_keys() == ["a"]


def test_an_empty_key_is_refused(customs: Any) -> None:
    """Same validation as the sync client: nothing is sent."""

    async def main() -> None:
        async with AsyncDownstreamClient("customs", customs.url) as client:
            await client.send("/declarations", {}, idempotency_key="")

    with pytest.raises(ConfigurationError):
        asyncio.run(main())
    assert customs.stats()["requests"] == 0


def test_429_awaits_an_async_pause_then_raises(customs: Any, async_feedback: Any) -> None:
    """pause() returning a coroutine is awaited before DownstreamThrottled is raised."""

    async def main() -> None:
        async with AsyncDownstreamClient("customs", customs.url, feedback=async_feedback) as c:
            await c.send("/declarations", {}, idempotency_key="a")
            await c.send("/declarations", {}, idempotency_key="b")

    with capture_logs() as logs, pytest.raises(DownstreamThrottled) as raised:
        asyncio.run(main())
    assert raised.value.retry_after == 1.0
    assert async_feedback.calls == [(1.0, "http_429")]
    assert async_feedback.awaited == 1
    assert [e["event"] for e in logs if e["event"].startswith("downstream_")] == [
        "downstream_throttled"
    ]


def test_429_with_a_sync_pause(customs: Any, feedback: Any) -> None:
    """A plain (non-awaitable) pause works with the async client too."""
    customs.set_fault("429_no_retry_after", count=1)

    async def main() -> None:
        async with AsyncDownstreamClient("customs", customs.url, feedback=feedback) as c:
            await c.send("/declarations", {}, idempotency_key="a")

    with pytest.raises(DownstreamThrottled):
        asyncio.run(main())
    assert feedback.calls == [(1.0, "http_429")]


def test_503_is_unavailable(customs: Any, feedback: Any) -> None:
    """A 503 fault: DownstreamUnavailable, no pause."""
    customs.set_fault("503", count=1)

    async def main() -> None:
        async with AsyncDownstreamClient("customs", customs.url, feedback=feedback) as c:
            await c.send("/declarations", {}, idempotency_key="a")

    with pytest.raises(DownstreamUnavailable) as raised:
        asyncio.run(main())
    assert raised.value.status == 503
    assert feedback.calls == []


def test_connection_refused_is_unavailable() -> None:
    """Nothing listening: DownstreamUnavailable from httpx.ConnectError."""
    sim = DatabaseSim(0, 0).start()
    url = sim.url
    sim.stop()

    async def main() -> None:
        async with AsyncDownstreamClient("database", url) as client:
            await client.send("/writes", {}, idempotency_key="a")

    with pytest.raises(DownstreamUnavailable) as raised:
        asyncio.run(main())
    assert isinstance(raised.value.__cause__, httpx.ConnectError)


def test_a_timeout_is_unavailable(clock: Any) -> None:
    """The TOS holds the request past the client timeout."""
    release = threading.Event()

    async def main(url: str, path: str) -> None:
        timeout = httpx.Timeout(10.0, read=0.3)
        async with AsyncDownstreamClient("tos", url, timeout=timeout) as client:
            await client.send(path, {}, idempotency_key="slow")

    with TosSim(1, 30.0, sleep=lambda s: release.wait(timeout=30), clock=clock) as tos:
        try:
            with pytest.raises(DownstreamUnavailable) as raised:
                asyncio.run(main(tos.url, tos.path))
        finally:
            release.set()
    assert isinstance(raised.value.__cause__, httpx.ReadTimeout)


@pytest.mark.parametrize("status", [400, 404, 422])
def test_other_4xx_are_rejected(status: int) -> None:
    """MockTransport for the statuses no sim produces on purpose."""
    transport = httpx.MockTransport(lambda request: httpx.Response(status, json={}))

    async def main() -> None:
        async with AsyncDownstreamClient("x", "http://x.test", transport=transport) as client:
            await client.send("/a", {}, idempotency_key="k")

    with pytest.raises(DownstreamRejected) as raised:
        asyncio.run(main())
    assert raised.value.status == status


def test_many_concurrent_sends_are_all_recorded() -> None:
    """50 concurrent sends through one async client: 50 distinct keys accepted."""

    async def main(url: str) -> list[dict[str, Any]]:
        async with AsyncDownstreamClient("database", url) as client:
            return await asyncio.gather(
                *(client.send("/writes", {"i": i}, idempotency_key=f"k{i}") for i in range(50))
            )

    with DatabaseSim(0.0, 0.0) as db:
        answers = asyncio.run(main(db.url))
        assert len(answers) == 50
        assert db.stats()["distinct_keys"] == 50


def test_lookup_is_the_same_question_over_asyncio(customs: Any) -> None:
    async def main() -> tuple[Any, Any]:
        async with AsyncDownstreamClient("customs", customs.url) as client:
            before = await client.lookup("/declarations", idempotency_key="b")
            await client.send("/declarations", {"n": 1}, idempotency_key="b")
            return before, await client.lookup("/declarations", idempotency_key="b")

    before, after = asyncio.run(main())
    assert before is None
    assert after == {"status": "accepted", "idempotency_key": "b"}
