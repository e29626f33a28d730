"""The real thing: ``tidegate intake serve`` as a process on loopback, posted to over TCP.

The server gets a Redis of its own (its broker queues carry the real queue names, which
must not mix with other tests' state) and is stopped with the test.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
import redis

from tidegate.errors import ConfigurationError
from tidegate.redis_server import EmbeddedRedis

pytestmark = [pytest.mark.redis, pytest.mark.slow]


@dataclass
class Server:
    url: str
    redis: redis.Redis
    process: subprocess.Popen[bytes]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_healthy(url: str, process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the server exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"the server did not answer within {timeout_s}s")


@pytest.fixture
def server(tmp_path) -> Iterator[Server]:
    try:
        store = EmbeddedRedis().start()
    except ConfigurationError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no Redis: {exc}")
    port = _free_port()
    executable = shutil.which("tidegate", path=os.path.dirname(sys.executable))
    assert executable is not None
    stderr = tmp_path / "stderr.log"
    with stderr.open("wb") as err:
        process = subprocess.Popen(
            [
                executable,
                "--log-level",
                "INFO",
                "intake",
                "serve",
                "--port",
                str(port),
                "--host",
                "127.0.0.1",
                "--redis-url",
                store.url,
                "--allow-anonymous",
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    client = redis.Redis.from_url(store.url)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, process)
        yield Server(url, client, process)
    finally:
        process.terminate()
        process.wait(timeout=30)
        client.close()
        store.stop()
        server_log = stderr.read_text()
        assert "--allow-anonymous" in server_log


def test_the_served_intake_acknowledges_after_publishing_and_refuses_the_repeat(
    server: Server, build
) -> None:
    """Over real HTTP: 202 with the CONTRL once the Celery message is in the broker's
    Redis list with the queue's task; the same interchange again is 409."""
    body = build.interchange(build.vermas())
    response = httpx.post(f"{server.url}/interchanges", content=body, timeout=30)
    assert response.status_code == 202
    assert response.json()["status"] == "accepted"
    assert "UCI+REF1+ACME:ZZZ+PORT:ZZZ+8'" in response.json()["contrl"]
    (raw,) = server.redis.lrange("edi.customs", 0, -1)
    assert json.loads(raw)["headers"]["task"] == "edi.customs.submit"

    repeat = httpx.post(f"{server.url}/interchanges", content=body, timeout=30)
    assert repeat.status_code == 409
    assert server.redis.llen("edi.customs") == 1
