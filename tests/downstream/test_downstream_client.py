"""DownstreamClient against real sims on loopback (MockTransport only for odd statuses)."""

from __future__ import annotations

import threading
import types
from concurrent.futures import ThreadPoolExecutor
from email.utils import formatdate
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

import tidegate.downstream
from tidegate.downstream import (
    DEFAULT_RETRY_AFTER_S,
    DownstreamClient,
    RetryAfterPolicy,
)
from tidegate.errors import (
    BackendUnavailable,
    ConfigurationError,
    DownstreamRejected,
    DownstreamThrottled,
    DownstreamUnavailable,
)
from tidegate.sim import CustomsSim, DatabaseSim, TosSim

MARKER = "PAYLOAD-MARKER-7731"


def _mock(status: int, body: bytes = b"{}", headers: dict[str, str] | None = None) -> Any:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers=headers or {})

    return httpx.MockTransport(handler)


def test_send_posts_json_with_the_idempotency_key(customs: Any) -> None:
    """The sim records the key; the parsed JSON answer is returned."""
    with DownstreamClient("customs", customs.url) as client:
        answer = client.send("/declarations", {"mrn": "23NL0001"}, idempotency_key="VERMAS-1")
    assert answer == {"status": "accepted", "idempotency_key": "VERMAS-1", "duplicate": False}
    assert customs.accepted_keys() == ["VERMAS-1"]


def test_the_request_is_json_with_the_key_header() -> None:
    """Content-Type, Accept, Idempotency-Key and the body bytes, as sent on the wire."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json={"ok": True})

    transport = httpx.MockTransport(handler)
    with DownstreamClient(
        "x", "http://x.test/api", transport=transport, headers={"X-Api": "1"}
    ) as c:
        assert c.send("/docs", {"a": [1, 2]}, idempotency_key="k-1") == {"ok": True}
    (request,) = seen
    assert str(request.url) == "http://x.test/api/docs"
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["Idempotency-Key"] == "k-1"
    assert request.headers["X-Api"] == "1"
    assert request.content == b'{"a":[1,2]}'


@pytest.mark.parametrize("key", ["", "   ", "line\nbreak", "é", "k" * 256])
def test_an_unusable_idempotency_key_is_refused_before_sending(customs: Any, key: str) -> None:
    """Empty, blank, multi-line, non-ASCII or oversized keys: ValueError, nothing sent."""
    with (
        DownstreamClient("customs", customs.url) as client,
        pytest.raises(ValueError, match="idempotency_key"),
    ):
        client.send("/declarations", {}, idempotency_key=key)
    assert customs.stats()["requests"] == 0


def test_an_empty_key_is_a_configuration_error(customs: Any) -> None:
    """The ValueError is tidegate's ConfigurationError."""
    with DownstreamClient("customs", customs.url) as client, pytest.raises(ConfigurationError):
        client.send("/declarations", {}, idempotency_key="")


def test_sending_the_same_key_twice_is_visible_as_a_duplicate(customs: Any, clock: Any) -> None:
    """At-least-once: a resend is accepted again and counted as a duplicate by the sim."""
    with DownstreamClient("customs", customs.url) as client:
        client.send("/declarations", {}, idempotency_key="dup")
        clock.advance(1)
        assert client.send("/declarations", {}, idempotency_key="dup")["duplicate"] is True
    assert customs.stats()["duplicates"] == 1


def test_429_pauses_the_fleet_then_raises_throttled(customs: Any, feedback: Any) -> None:
    """The 2nd call within a second: feedback.pause(1.0, "http_429"), DownstreamThrottled."""
    with DownstreamClient("customs", customs.url, feedback=feedback) as client:
        client.send("/declarations", {}, idempotency_key="a")
        assert feedback.calls == []
        with capture_logs() as logs, pytest.raises(DownstreamThrottled) as raised:
            client.send("/declarations", {}, idempotency_key="b")
        assert feedback.calls == [(1.0, "http_429")]
    error = raised.value
    assert (error.downstream, error.retry_after, error.status) == ("customs", 1.0, 429)
    (event,) = [e for e in logs if e["event"] == "downstream_throttled"]
    assert event["downstream"] == "customs"
    assert event["retry_after_s"] == 1.0
    assert event["status"] == 429
    assert event["paused"] is True


def test_429_with_an_http_date_pauses_for_the_right_seconds(clock: Any, feedback: Any) -> None:
    """Retry-After as an HTTP-date 2 s ahead of the client's clock → pause(2.0)."""
    wall = 1_700_000_000.0
    sim = CustomsSim(0.5, 1, retry_after_format="http-date", clock=clock, wall_clock=lambda: wall)
    with sim, DownstreamClient("customs", sim.url, feedback=feedback, wall_clock=lambda: wall) as c:
        c.send("/declarations", {}, idempotency_key="a")
        with pytest.raises(DownstreamThrottled) as raised:
            c.send("/declarations", {}, idempotency_key="b")
    assert feedback.calls == [(2.0, "http_429")]
    assert raised.value.retry_after == 2.0


def test_a_longer_wait_is_passed_on_exactly(clock: Any, feedback: Any) -> None:
    """One call per 5 s: the pause asked of the fleet is 5 s."""
    with (
        CustomsSim(0.2, 1, clock=clock) as sim,
        DownstreamClient("customs", sim.url, feedback=feedback) as client,
    ):
        client.send("/declarations", {}, idempotency_key="a")
        with pytest.raises(DownstreamThrottled):
            client.send("/declarations", {}, idempotency_key="b")
    assert feedback.calls == [(5.0, "http_429")]


@pytest.mark.parametrize("mode", ["429_no_retry_after", "429_bad_retry_after"])
def test_an_unusable_retry_after_pauses_for_the_default(
    customs: Any, feedback: Any, mode: str
) -> None:
    """No or garbage Retry-After: pause for the policy default and log the lie."""
    customs.set_fault(mode, count=1)
    policy = RetryAfterPolicy(default_s=2.5)
    with (
        DownstreamClient("customs", customs.url, feedback=feedback, retry_after_policy=policy) as c,
        capture_logs() as logs,
        pytest.raises(DownstreamThrottled) as raised,
    ):
        c.send("/declarations", {}, idempotency_key="a")
    assert feedback.calls == [(2.5, "http_429")]
    assert raised.value.retry_after == 2.5
    (event,) = [e for e in logs if e["event"] == "downstream_retry_after_invalid"]
    assert event["issue"] == ("missing" if mode == "429_no_retry_after" else "invalid")
    assert event["downstream"] == "customs"


def test_an_absurd_retry_after_is_clamped_and_logged(customs: Any, feedback: Any) -> None:
    """A day-long Retry-After becomes the policy max (300 s by default)."""
    customs.set_fault("429_huge_retry_after", count=1)
    with (
        DownstreamClient("customs", customs.url, feedback=feedback) as client,
        capture_logs() as logs,
        pytest.raises(DownstreamThrottled),
    ):
        client.send("/declarations", {}, idempotency_key="a")
    assert feedback.calls == [(300.0, "http_429")]
    assert [e["event"] for e in logs].count("downstream_retry_after_clamped") == 1


def test_throttled_is_raised_even_when_the_pause_fails(customs: Any) -> None:
    """A gate that cannot pause (Redis down) does not hide the 429: it is the cause."""

    class BrokenGate:
        def pause(self, seconds: float, reason: str) -> None:
            raise BackendUnavailable("redis down")

    with DownstreamClient("customs", customs.url, feedback=BrokenGate()) as client:
        client.send("/declarations", {}, idempotency_key="a")
        with capture_logs() as logs, pytest.raises(DownstreamThrottled) as raised:
            client.send("/declarations", {}, idempotency_key="b")
    assert isinstance(raised.value.__cause__, BackendUnavailable)
    events = {e["event"]: e for e in logs}
    assert events["downstream_throttled"]["paused"] is False
    assert events["downstream_pause_failed"]["error"] == "BackendUnavailable"


def test_a_sync_client_refuses_a_pause_it_would_have_to_await(
    customs: Any, async_feedback: Any
) -> None:
    """An asyncio gate given to the sync client is a loud ConfigurationError, not a skip."""
    with DownstreamClient("customs", customs.url, feedback=async_feedback) as client:
        client.send("/declarations", {}, idempotency_key="a")
        with pytest.raises(ConfigurationError, match="AsyncDownstreamClient"):
            client.send("/declarations", {}, idempotency_key="b")
    assert async_feedback.awaited == 0


def test_without_feedback_429_still_raises(customs: Any) -> None:
    """feedback=None: nothing to pause, the error is the same."""
    with DownstreamClient("customs", customs.url) as client:
        client.send("/declarations", {}, idempotency_key="a")
        with pytest.raises(DownstreamThrottled):
            client.send("/declarations", {}, idempotency_key="b")


def test_503_is_unavailable_and_does_not_pause(customs: Any, feedback: Any) -> None:
    """A 503 outage with Retry-After: DownstreamUnavailable(retry_after=60), no pause."""
    customs.set_outage(60, retry_after=True)
    with (
        DownstreamClient("customs", customs.url, feedback=feedback) as client,
        capture_logs() as logs,
        pytest.raises(DownstreamUnavailable) as raised,
    ):
        client.send("/declarations", {}, idempotency_key="a")
    assert (raised.value.status, raised.value.retry_after) == (503, 60.0)  # type: ignore[attr-defined]
    assert feedback.calls == []
    (event,) = [e for e in logs if e["event"] == "downstream_unavailable"]
    assert (event["status"], event["retry_after_s"]) == (503, 60.0)


def test_tos_connection_cap_surfaces_as_unavailable(clock: Any) -> None:
    """K=1 held in service: the second concurrent send gets DownstreamUnavailable."""
    entered, release = threading.Event(), threading.Event()

    def hold(seconds: float) -> None:
        entered.set()
        release.wait(timeout=30)

    with (
        TosSim(1, 1.0, sleep=hold, clock=clock) as tos,
        DownstreamClient("tos", tos.url) as client,
        ThreadPoolExecutor(1) as pool,
    ):
        try:
            first = pool.submit(client.send, tos.path, {}, idempotency_key="a")
            assert entered.wait(timeout=10)
            with pytest.raises(DownstreamUnavailable) as raised:
                client.send(tos.path, {}, idempotency_key="b")
            assert raised.value.status == 503
        finally:
            release.set()
        assert first.result()["status"] == "accepted"


def test_connection_refused_is_unavailable() -> None:
    """Nothing listening: DownstreamUnavailable chained from httpx.ConnectError."""
    sim = DatabaseSim(0, 0).start()
    url = sim.url
    sim.stop()
    with (
        DownstreamClient("database", url) as client,
        capture_logs() as logs,
        pytest.raises(DownstreamUnavailable) as raised,
    ):
        client.send("/writes", {}, idempotency_key="a")
    assert isinstance(raised.value.__cause__, httpx.ConnectError)
    assert raised.value.status is None
    (event,) = [e for e in logs if e["event"] == "downstream_unavailable"]
    assert event["error"] == "ConnectError"


def test_a_refuse_outage_is_unavailable_and_recovers(customs: Any, clock: Any) -> None:
    """The sim closes its port mid-life (keep-alive pooled): unavailable, then ok again."""
    with DownstreamClient("customs", customs.url) as client:
        client.send("/declarations", {}, idempotency_key="a")
        customs.set_outage(None, mode="refuse")
        with pytest.raises(DownstreamUnavailable):
            client.send("/declarations", {}, idempotency_key="b")
        customs.end_outage()
        clock.advance(1)
        assert client.send("/declarations", {}, idempotency_key="b")["status"] == "accepted"


def test_a_timeout_is_unavailable_though_the_write_was_taken(clock: Any) -> None:
    """The TOS takes the write but answers too late: unavailable, and the key is recorded.

    This is why every write carries an idempotency key: the retry will be a duplicate.
    """
    entered, release = threading.Event(), threading.Event()

    def hold(seconds: float) -> None:
        entered.set()
        release.wait(timeout=30)

    with (
        TosSim(2, 30.0, sleep=hold, clock=clock) as tos,
        DownstreamClient("tos", tos.url, timeout=httpx.Timeout(10.0, read=0.3)) as client,
    ):
        try:
            with pytest.raises(DownstreamUnavailable) as raised:
                client.send(tos.path, {}, idempotency_key="slow")
            assert entered.wait(timeout=10)
            assert tos.accepted_keys() == ["slow"]
        finally:
            release.set()
    assert isinstance(raised.value.__cause__, httpx.ReadTimeout)


@pytest.mark.parametrize("status", [400, 404, 409, 422])
def test_other_4xx_are_rejected(status: int) -> None:
    """400/404/409/422: DownstreamRejected, logged as downstream_rejected, never paused."""
    feedback_calls: list[Any] = []
    gate = types.SimpleNamespace(pause=lambda seconds, reason: feedback_calls.append(seconds))
    with (
        DownstreamClient("customs", "http://x.test", transport=_mock(status), feedback=gate) as c,
        capture_logs() as logs,
        pytest.raises(DownstreamRejected) as raised,
    ):
        c.send("/declarations", {}, idempotency_key="a")
    assert raised.value.status == status
    assert feedback_calls == []
    assert [e["event"] for e in logs] == ["downstream_rejected"]


def test_a_wrong_path_on_a_real_sim_is_rejected(customs: Any) -> None:
    """The sim answers 404 for an unknown path: unrecoverable, dead-letter it."""
    with DownstreamClient("customs", customs.url) as client, pytest.raises(DownstreamRejected):
        client.send("/nowhere", {}, idempotency_key="a")


def test_a_200_that_is_not_json_is_unavailable(customs: Any) -> None:
    """200 with an HTML page: the write was taken, the answer is unreadable → retry safely."""
    customs.set_fault("200_not_json", count=1)
    with (
        DownstreamClient("customs", customs.url) as client,
        capture_logs() as logs,
        pytest.raises(DownstreamUnavailable) as raised,
    ):
        client.send("/declarations", {}, idempotency_key="a")
    assert raised.value.status == 200
    assert customs.accepted_keys() == ["a"]
    (event,) = [e for e in logs if e["event"] == "downstream_unavailable"]
    assert event["error"] == "unreadable_body"


@pytest.mark.parametrize(("status", "body"), [(200, b"[1, 2]"), (200, b'"yes"')])
def test_a_json_answer_that_is_not_an_object_is_unavailable(status: int, body: bytes) -> None:
    """The contract is a JSON object; anything else is unreadable."""
    with (
        DownstreamClient("x", "http://x.test", transport=_mock(status, body)) as client,
        pytest.raises(DownstreamUnavailable),
    ):
        client.send("/a", {}, idempotency_key="k")


@pytest.mark.parametrize("status", [202, 204])
def test_an_empty_answer_is_an_empty_dict(status: int) -> None:
    """204 (or an empty 2xx body) returns {}."""
    with DownstreamClient("x", "http://x.test", transport=_mock(status, b"")) as client:
        assert client.send("/a", {}, idempotency_key="k") == {}


def test_nothing_from_the_body_reaches_the_logs(customs: Any, feedback: Any) -> None:
    """Across ok, throttled and invalid-Retry-After paths, no log value holds the payload."""
    body = {"consignee": MARKER}
    with (
        DownstreamClient("customs", customs.url, feedback=feedback) as client,
        capture_logs() as logs,
    ):
        client.send("/declarations", body, idempotency_key="a")
        with pytest.raises(DownstreamThrottled):
            client.send("/declarations", body, idempotency_key="b")
        customs.set_fault("429_bad_retry_after", count=1)
        with pytest.raises(DownstreamThrottled):
            client.send("/declarations", body, idempotency_key="c")
    assert logs
    assert MARKER not in repr(logs)
    assert not {"body", "payload", "json_body"} & {key for e in logs for key in e}


def test_a_nameless_client_is_refused() -> None:
    """The name is how the fleet gate and the logs know the downstream."""
    with pytest.raises(ConfigurationError):
        DownstreamClient("", "http://x.test")


def test_default_pause_constant_is_one_second() -> None:
    """The documented default pause."""
    assert DEFAULT_RETRY_AFTER_S == 1.0


def test_exported_names() -> None:
    """__all__ names every public object of the package, once."""
    exported = tidegate.downstream.__all__
    public = {
        name
        for name, value in vars(tidegate.downstream).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name != "annotations"
    }
    assert len(exported) == len(set(exported))
    assert set(exported) == public


def test_formatdate_helper_sanity() -> None:
    """The HTTP-date used in these tests round-trips to whole seconds."""
    assert formatdate(1_700_000_002.0, usegmt=True) == "Tue, 14 Nov 2023 22:13:22 GMT"


def test_lookup_finds_an_accepted_key_and_not_an_unknown_one(customs: Any) -> None:
    with DownstreamClient("customs", customs.url) as client:
        assert client.lookup("/declarations", idempotency_key="VERMAS-9") is None
        client.send("/declarations", {"mrn": "1"}, idempotency_key="VERMAS-9")
        found = client.lookup("/declarations/", idempotency_key="VERMAS-9")
    assert found == {"status": "accepted", "idempotency_key": "VERMAS-9"}
    assert customs.accepted_keys() == ["VERMAS-9"]


def test_lookup_of_an_unreachable_downstream_is_unavailable() -> None:
    with (
        DownstreamClient("tos", "http://127.0.0.1:1", timeout=0.5) as client,
        pytest.raises(DownstreamUnavailable),
    ):
        client.lookup("/container-reports", idempotency_key="K")


def test_a_rejection_carries_the_downstreams_error_code() -> None:
    with TosSim(4, 0.0) as tos, DownstreamClient("tos", tos.url) as client:
        tos.reject_keys(["BAD-REF"])
        with pytest.raises(DownstreamRejected) as refused:
            client.send("/container-reports", {"n": 1}, idempotency_key="BAD-REF")
    assert refused.value.status == 422
    assert refused.value.code == "unknown_reference"


def test_a_rejection_code_that_is_not_a_token_is_dropped() -> None:
    """A gateway echoing the document back in its error field: that never becomes a reason."""
    body = b'{"error": "UNH+1+IFTMIN:D:96A:UN\'BGM+610+' + MARKER.encode() + b"'\"}"
    with (
        DownstreamClient("tos", "http://tos.test", transport=_mock(400, body)) as client,
        pytest.raises(DownstreamRejected) as refused,
    ):
        client.send("/x", {}, idempotency_key="k")
    assert refused.value.code is None
    assert MARKER not in str(refused.value)
