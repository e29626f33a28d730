"""The relay: pipelined lanes that own a connection-limited downstream's connections.

Real Redis and a real TOS sim on loopback: the point is the wire (pipelined HTTP/1.1,
the request list, the answers) and the lease each lane holds.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import httpx
import pytest
import redis

from tidegate.downstream import DownstreamClient, RelayTransport
from tidegate.downstream._pipeline import PipelinedConnection
from tidegate.downstream.relay import Relay, RelayPolicy
from tidegate.errors import ConfigurationError, DownstreamUnavailable
from tidegate.flow import Gate
from tidegate.harness.polling import wait_for
from tidegate.keys import Keyspace
from tidegate.sim import TosSim

_PATH = "/container-reports"


@pytest.fixture
def tos() -> Iterator[TosSim]:
    with TosSim(max_connections=2, service_s=0.05) as sim:
        yield sim


def _client(redis_client: redis.Redis, prefix: str, url: str, **kwargs: object) -> DownstreamClient:
    transport = RelayTransport(redis_client, "tos", prefix=prefix)
    return DownstreamClient("tos", url, transport=transport, **kwargs)  # type: ignore[arg-type]


def test_a_pipelined_connection_writes_ahead_and_reads_the_answers_in_order() -> None:
    with TosSim(max_connections=1, service_s=0.02) as tos:
        connection = PipelinedConnection(tos.url, connect_timeout_s=2, read_timeout_s=5)
        connection.connect()
        try:
            pending = [
                connection.write(
                    "POST",
                    _PATH,
                    [("Idempotency-Key", f"k{i}"), ("Content-Type", "application/json")],
                    json.dumps({"n": i}).encode(),
                )
                for i in range(3)
            ]
            answers = [connection.read(p) for p in pending]
        finally:
            connection.close()
        stats = tos.stats(timeline=False)
    assert [a.status for a in answers] == [200, 200, 200]
    assert [json.loads(a.body)["idempotency_key"] for a in answers] == ["k0", "k1", "k2"]
    assert all(a.reusable for a in answers)
    # All three were on the one connection before the first answer was read, and the
    # TOS (one connection) served them one at a time: no 503.
    assert stats["accepted"] == 3
    assert stats["responses_503"] == 0
    assert stats["max_in_service_seen"] == 1


def test_the_fleet_calls_through_the_lanes_within_the_connection_cap(
    redis_client: redis.Redis, prefix: str, tos: TosSim
) -> None:
    Gate(redis_client, "tos", prefix=prefix).configure(concurrency=2, rate=1000.0, burst=100)
    results: list[str] = []
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        with _client(redis_client, prefix, tos.url) as client:
            for i in range(5):
                try:
                    body = client.send(_PATH, {"n": i}, idempotency_key=f"w{index}-{i}")
                except BaseException as exc:
                    errors.append(exc)
                else:
                    results.append(body["idempotency_key"])

    with Relay(redis_client, "tos", tos.url, prefix=prefix) as relay:
        assert relay.lanes == 2
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        held_while_running = Gate(redis_client, "tos", prefix=prefix).state().leases_held
    assert errors == []
    assert sorted(results) == sorted(f"w{w}-{i}" for w in range(6) for i in range(5))
    stats = tos.stats(timeline=False)
    assert stats["accepted"] == 30
    assert stats["duplicates"] == 0
    assert stats["responses_503"] == 0
    assert stats["max_in_service_seen"] <= 2
    assert held_while_running == 2
    assert Gate(redis_client, "tos", prefix=prefix).state().leases_held == 0
    assert redis_client.llen(Keyspace(prefix).relay_requests("tos")) == 0


def test_with_no_lane_the_request_is_taken_back_and_reads_as_never_sent(
    redis_client: redis.Redis, prefix: str, tos: TosSim
) -> None:
    timeout = httpx.Timeout(5.0, connect=0.2)
    with (
        _client(redis_client, prefix, tos.url, timeout=timeout) as client,
        pytest.raises(DownstreamUnavailable) as caught,
    ):
        client.send(_PATH, {"n": 1}, idempotency_key="orphan-1")
    assert isinstance(caught.value.__cause__, httpx.ConnectTimeout)
    assert redis_client.llen(Keyspace(prefix).relay_requests("tos")) == 0
    assert tos.stats(timeline=False)["accepted"] == 0


def test_a_connection_lost_under_written_requests_answers_them_lost(
    redis_client: redis.Redis, prefix: str
) -> None:
    with TosSim(max_connections=1, service_s=0.5) as tos:
        Gate(redis_client, "tos", prefix=prefix).configure(concurrency=1)
        outcomes: list[BaseException | dict[str, object]] = []

        def call(key: str) -> None:
            with _client(redis_client, prefix, tos.url) as client:
                try:
                    outcomes.append(client.send(_PATH, {}, idempotency_key=key))
                except DownstreamUnavailable as exc:
                    outcomes.append(exc)

        with Relay(redis_client, "tos", tos.url, prefix=prefix):
            threads = [threading.Thread(target=call, args=(f"k{i}",)) for i in range(2)]
            for thread in threads:
                thread.start()
            wait_for(lambda: tos.stats(timeline=False)["in_flight"] >= 1, 10, "a call in service")
            tos.set_outage(None, mode="refuse")
            for thread in threads:
                thread.join()
            tos.end_outage()
    assert len(outcomes) == 2
    for outcome in outcomes:
        assert isinstance(outcome, DownstreamUnavailable)
        assert isinstance(outcome.__cause__, httpx.ReadError)


def test_a_relay_needs_a_concurrency_cap(redis_client: redis.Redis, prefix: str) -> None:
    with pytest.raises(ConfigurationError, match="concurrency"):
        Relay(redis_client, "tos", "http://127.0.0.1:9", prefix=prefix)


@pytest.mark.parametrize("depth", [0, -1, 1.5, True])
def test_a_pipeline_depth_is_a_whole_number_of_at_least_one(depth: object) -> None:
    with pytest.raises(ConfigurationError, match="depth"):
        RelayPolicy(depth=depth)  # type: ignore[arg-type]


def test_an_idle_lane_gives_its_lease_back(
    redis_client: redis.Redis, prefix: str, tos: TosSim
) -> None:
    gate = Gate(redis_client, "tos", prefix=prefix)
    gate.configure(concurrency=2)
    policy = RelayPolicy(idle_s=0.3)
    with Relay(redis_client, "tos", tos.url, prefix=prefix, policy=policy):
        with _client(redis_client, prefix, tos.url) as client:
            client.send(_PATH, {}, idempotency_key="one")
        wait_for(lambda: gate.state().leases_held == 0, 10, "the idle lanes' leases given back")
        with _client(redis_client, prefix, tos.url) as client:
            assert client.send(_PATH, {}, idempotency_key="two")["idempotency_key"] == "two"
    assert tos.stats(timeline=False)["accepted"] == 2


def test_a_malformed_item_on_the_list_is_dropped_and_the_lane_goes_on(
    redis_client: redis.Redis, prefix: str, tos: TosSim
) -> None:
    """Nothing but RelayTransport writes the list; if something else did, the lane logs
    it (without its content) and serves the next request."""
    from structlog.testing import capture_logs

    Gate(redis_client, "tos", prefix=prefix).configure(concurrency=1)
    redis_client.rpush(Keyspace(prefix).relay_requests("tos"), b"\x00not json")
    with (
        capture_logs() as logs,
        Relay(redis_client, "tos", tos.url, prefix=prefix),
        _client(redis_client, prefix, tos.url) as client,
    ):
        assert client.send(_PATH, {}, idempotency_key="after")["idempotency_key"] == "after"
    malformed = [e for e in logs if e["event"] == "relay_request_malformed"]
    expected = {
        "event": "relay_request_malformed",
        "downstream": "tos",
        "component": "tidegate.relay",
        "log_level": "error",
    }
    assert malformed == [expected]


def test_a_base_url_with_a_path_reaches_the_same_path_through_the_relay(
    redis_client: redis.Redis, prefix: str
) -> None:
    """The worker's client builds the whole path from its base URL; the lane sends it as
    it is (it once put its own base path in front a second time)."""
    with TosSim(max_connections=1, service_s=0.0, path="/api/container-reports") as tos:
        Gate(redis_client, "tos", prefix=prefix).configure(concurrency=1)
        base = f"{tos.url}/api"
        with (
            Relay(redis_client, "tos", base, prefix=prefix),
            _client(redis_client, prefix, base) as client,
        ):
            assert client.send(_PATH, {}, idempotency_key="p")["idempotency_key"] == "p"
