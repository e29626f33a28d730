"""Two ``tidegate relay`` processes: the lane holding the TOS's one connection is
SIGKILLed mid-burst, and the standby's lane takes the lease over once it expires.

Real processes (the CLI as an operator starts it), real Redis, a real TOS on loopback.
What must hold: every call ends accepted (those the killed lane had on its connection
are answered as in doubt and resent with the same key), the TOS never serves more
than its one connection's worth, and the calls after the kill are sent by the standby.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from tidegate.downstream import DownstreamClient, RelayTransport
from tidegate.errors import DownstreamUnavailable
from tidegate.flow import Gate
from tidegate.harness.polling import wait_for
from tidegate.sim import TosSim

pytestmark = [pytest.mark.redis, pytest.mark.slow]

_PATH = "/container-reports"


def _relay_process(log: Path, redis_url: str, prefix: str, tos_url: str) -> subprocess.Popen[bytes]:
    executable = shutil.which("tidegate", path=os.path.dirname(sys.executable))
    assert executable is not None
    env = {
        **os.environ,
        "TIDEGATE_REDIS_URL": redis_url,
        "TIDEGATE_PREFIX": prefix,
        "TIDEGATE_TOS_URL": tos_url,
        "TIDEGATE_TOS_RELAY_DEPTH": "2",
        "TIDEGATE_TOS_CONCURRENCY": "1",
    }
    with log.open("wb") as err:
        process = subprocess.Popen(
            [executable, "--log-level", "INFO", "relay", "tos"],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
        )
    wait_for(lambda: "lane(s), depth 2" in log.read_text(), 30, log.read_text)
    return process


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.terminate()
            process.wait(30)


def test_a_killed_lane_hands_its_connection_to_the_standby(
    tmp_path: Path,
    redis_url: str,
    redis_client: redis.Redis,
    prefix: str,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    Gate(redis_client, "tos", prefix=prefix).configure(concurrency=1, lease_s=1.0)
    timeout = httpx.Timeout(3.0, connect=3.0)

    def client() -> DownstreamClient:
        transport = RelayTransport(redis_client, "tos", prefix=prefix)
        return DownstreamClient("tos", tos.url, transport=transport, timeout=timeout)

    with TosSim(max_connections=1, service_s=0.1) as tos:
        first = _relay_process(tmp_path / "a.log", redis_url, prefix, tos.url)
        processes.append(first)
        with client() as warm:  # the first relay's lane takes the one lease
            warm.send(_PATH, {}, idempotency_key="warm")
        processes.append(_relay_process(tmp_path / "b.log", redis_url, prefix, tos.url))

        keys = [f"k{w}-{i}" for w in range(4) for i in range(5)]
        failed: list[str] = []
        lock = threading.Lock()

        def worker(mine: list[str]) -> None:
            with client() as c:
                for key in mine:
                    try:
                        c.send(_PATH, {}, idempotency_key=key)
                    except DownstreamUnavailable:
                        with lock:
                            failed.append(key)

        threads = [threading.Thread(target=worker, args=(keys[w::4],)) for w in range(4)]
        for thread in threads:
            thread.start()
        wait_for(lambda: tos.stats(timeline=False)["accepted"] >= 5, 30, "calls served")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        accepted_at_kill = tos.stats(timeline=False)["accepted"]
        for thread in threads:
            thread.join()
        with client() as again:  # what the killed lane had in doubt, resent
            for key in failed:
                again.send(_PATH, {}, idempotency_key=key)
        stats = tos.stats(timeline=False)
        accepted = set(tos.accepted_keys())

    assert accepted == {"warm", *keys}
    assert stats["accepted"] > accepted_at_kill  # the standby sent the rest
    assert stats["max_in_service_seen"] == 1
    assert stats["responses_503"] == 0
