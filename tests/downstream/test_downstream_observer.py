"""DownstreamClient tells its observer about every call: the adaptive controller's input."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tidegate.downstream import AsyncDownstreamClient, DownstreamClient
from tidegate.errors import DownstreamRejected, DownstreamThrottled, DownstreamUnavailable
from tidegate.flow.adaptive import RateLimitHint


class Recorder:
    """A CallObserver that keeps what it was told."""

    def __init__(self, *, fail: bool = False) -> None:
        self.calls: list[tuple[str, float | None, RateLimitHint | None]] = []
        self.fail = fail

    def observe(
        self, outcome: Any, *, latency_ms: float | None, hint: RateLimitHint | None
    ) -> None:
        self.calls.append((outcome, latency_ms, hint))
        if self.fail:
            raise ConnectionError("the window is unreachable")


def answer(status: int, headers: dict[str, str] | None = None) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json={"ok": status < 300}, headers=headers or {})

    return httpx.MockTransport(handler)


def client(transport: httpx.BaseTransport, observer: Recorder) -> DownstreamClient:
    return DownstreamClient(
        "customs", "http://customs.test", transport=transport, observer=observer
    )


def test_an_accepted_call_is_reported_with_its_rate_limit_headers() -> None:
    """200 with X-RateLimit-Limit-Minute: 600 → ("ok", hint of 600 per 60 s)."""
    seen = Recorder()
    with client(answer(200, {"X-RateLimit-Limit-Minute": "600"}), seen) as http:
        http.send("/declarations", {"n": 1}, idempotency_key="k1")

    [(outcome, _latency, hint)] = seen.calls
    assert outcome == "ok"
    assert hint is not None
    assert hint.sustained_rate == pytest.approx(10.0)


@pytest.mark.parametrize(
    ("status", "error", "outcome"),
    [(429, DownstreamThrottled, "throttled"), (503, DownstreamUnavailable, "unavailable")],
)
def test_a_refusal_is_reported_before_the_error_is_raised(
    status: int, error: type[Exception], outcome: str
) -> None:
    """429 and 503 are the controller's cuts: reported, then raised as before."""
    seen = Recorder()
    with client(answer(status, {"Retry-After": "1"}), seen) as http, pytest.raises(error):
        http.send("/declarations", {"n": 1}, idempotency_key="k1")

    assert [call[0] for call in seen.calls] == [outcome]


def test_a_rejection_says_nothing_about_capacity_and_is_not_reported() -> None:
    """A 400 is the document's fault, not the downstream's load."""
    seen = Recorder()
    with client(answer(400), seen) as http, pytest.raises(DownstreamRejected):
        http.send("/declarations", {"n": 1}, idempotency_key="k1")

    assert seen.calls == []


def test_no_answer_is_reported_as_unavailable() -> None:
    """A refused connection: ("unavailable", no latency, no hint)."""

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    seen = Recorder()
    with client(httpx.MockTransport(refuse), seen) as http, pytest.raises(DownstreamUnavailable):
        http.send("/declarations", {"n": 1}, idempotency_key="k1")

    assert seen.calls == [("unavailable", None, None)]


def test_an_observer_that_fails_never_fails_the_delivery() -> None:
    """The window in Redis unreachable: the call's own result stands."""
    seen = Recorder(fail=True)
    with client(answer(200), seen) as http:
        assert http.send("/declarations", {"n": 1}, idempotency_key="k1") == {"ok": True}

    assert len(seen.calls) == 1


def test_the_async_client_reports_too() -> None:
    """Same core: the async client's 429 is reported."""
    seen = Recorder()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, headers={"Retry-After": "2"})

    async def main() -> None:
        async with AsyncDownstreamClient(
            "customs", "http://customs.test", transport=httpx.MockTransport(handler), observer=seen
        ) as http:
            with pytest.raises(DownstreamThrottled):
                await http.send("/declarations", {"n": 1}, idempotency_key="k1")

    asyncio.run(main())

    assert [call[0] for call in seen.calls] == ["throttled"]
