"""An unreachable Redis: fail closed by default, fail open only when asked, typed errors."""

from __future__ import annotations

import socket

import pytest
from structlog.testing import capture_logs

from tidegate._redis import client_from_url
from tidegate.errors import BackendUnavailable, ConfigurationError
from tidegate.flow import Gate, RateLimiter


@pytest.fixture
def dead_url() -> str:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


def test_unreachable_redis_fails_closed(dead_url: str) -> None:
    """No fleet-wide count means no admission: BackendUnavailable, and one log event."""
    limiter = RateLimiter(
        client_from_url(dead_url, socket_connect_timeout=0.5), "customs", rate=1.0, burst=1
    )

    with capture_logs() as logs, pytest.raises(BackendUnavailable):
        limiter.try_acquire()

    assert [e["event"] for e in logs] == ["downstream_gate_backend_unavailable"]
    assert logs[0]["policy"] == "closed"


def test_unreachable_redis_fails_open_only_when_asked(dead_url: str) -> None:
    """fail_open=True admits, says so in the decision and in the log."""
    gate = Gate(client_from_url(dead_url, socket_connect_timeout=0.5), "customs", fail_open=True)

    with capture_logs() as logs:
        decision = gate.try_acquire()
        permit = gate.acquire(max_wait=1)

    assert decision.allowed
    assert decision.reason == "fail_open"
    assert not permit.leased
    assert {e["policy"] for e in logs} == {"open"}


def test_bad_url_scheme_is_a_configuration_error() -> None:
    """A typo in the URL is caught before any connection attempt, password not echoed."""
    with pytest.raises(ConfigurationError) as info:
        client_from_url("http://user:hunter2@localhost:6379/0")

    assert "hunter2" not in str(info.value)


def test_release_failure_after_the_call_is_logged_not_raised() -> None:
    """The call succeeded; Redis vanished before the release. The lease will expire on
    its own — raising would make a delivered unit look failed and be sent again."""
    from tidegate.errors import BackendUnavailable as Down
    from tidegate.flow import ConcurrencyLimiter
    from tidegate.flow.backends import MemoryBackend

    class FlakyRelease(MemoryBackend):
        def release(self, keys, holder, *, wake_cap):  # type: ignore[no-untyped-def]
            raise Down("Redis unreachable during lease release")

    sem = ConcurrencyLimiter(FlakyRelease(), "tos", limit=1, lease_s=5)
    with capture_logs() as logs, sem.slot(max_wait=0, auto_renew=False):
        delivered = True

    assert delivered
    assert [e["event"] for e in logs] == ["gate_lease_release_failed"]
