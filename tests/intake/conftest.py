"""Fixtures of the intake tests: interchanges built to order, per-test queues, a producer.

Broker queues are named under the test's key prefix (``<prefix>:edi.customs``), so the
``redis_client`` fixture's cleanup removes them and no test sees another's messages.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from celery import Celery

from tidegate.edi import DEFAULT_ROUTES, Route, iso6346_check_digit
from tidegate.errors import ConfigurationError
from tidegate.harness.polling import wait_for
from tidegate.integrations.celery.depth import RedisDepthProbe
from tidegate.integrations.celery.sender import CelerySender
from tidegate.load.admission import Admission
from tidegate.load.quarantine import Quarantine
from tidegate.load.watermarks import Watermarks, WatermarkStore
from tidegate.redis_server import EmbeddedRedis


def _container(serial: int) -> str:
    owner = f"MSCU{serial:06d}"
    return owner + str(iso6346_check_digit(owner))


class Build:
    """EDIFACT text built to order (default separators unless a UNA is given)."""

    container = staticmethod(_container)

    @staticmethod
    def vermas(ref: str = "1", *, container: str | None = None) -> list[str]:
        box = container if container is not None else _container(int(ref) if ref.isdigit() else 7)
        return [
            f"UNH+{ref}+VERMAS:D:16A:UN:SMDG10",
            f"BGM+749+VGM{ref}+9",
            "RFF+BN:BK1",
            f"EQD+CN+{box}+45G1:6346:5+++5",
            "MEA+AAE+VGM+KGM:20000",
            "DTM+798:202601010900:203",
            f"UNT+7+{ref}",
        ]

    @staticmethod
    def ifcsum(ref: str = "2", bls: Sequence[str] = ("BL1", "BL2")) -> list[str]:
        body = [f"UNH+{ref}+IFCSUM:D:96A:UN", f"BGM+785+M{ref}+9"]
        for index, bl in enumerate(bls, 1):
            body += [f"CNI+{index}+C{index}", f"RFF+BM:{bl}", f"EQD+CN+{_container(index)}"]
        return [*body, f"UNT+{len(body) + 1}+{ref}"]

    @staticmethod
    def interchange(
        *messages: list[str],
        sender: str = "ACME",
        reference: str = "REF1",
        syntax: str = "UNOC:3",
        una: str | None = None,
    ) -> bytes:
        """One interchange; with ``una`` (e.g. ``":+.? '"`` style six characters) the
        segments are written with those separators instead of the defaults."""
        segments = [f"UNB+{syntax}+{sender}:ZZZ+PORT:ZZZ+260101:1200+{reference}"]
        for message in messages:
            segments += message
        segments.append(f"UNZ+{len(messages)}+{reference}")
        if una is None:
            return "".join(s + "'" for s in segments).encode()
        component, element, _decimal, _release, _rep, terminator = una
        text = "".join(
            s.replace(":", "\x00").replace("+", element).replace("\x00", component) + terminator
            for s in segments
        )
        return f"UNA{una}{text}".encode()

    @staticmethod
    def bare(*messages: list[str]) -> bytes:
        return "".join(s + "'" for m in messages for s in m).encode()


@pytest.fixture
def build() -> type[Build]:
    """The interchange builder."""
    return Build


@pytest.fixture
def routes(prefix: str) -> tuple[Route, ...]:
    """The real routing table, with every queue under this test's prefix."""
    return tuple(
        dataclasses.replace(
            route,
            document_class=dataclasses.replace(
                route.document_class, queue=f"{prefix}:{route.document_class.queue}"
            ),
        )
        for route in DEFAULT_ROUTES
    )


@pytest.fixture
def queue_of(prefix: str) -> Any:
    """This test's name of a real queue (``edi.customs`` → ``<prefix>:edi.customs``)."""
    return lambda name: f"{prefix}:{name}"


@pytest.fixture
def producer(redis_url: str, redis_client: redis.Redis, prefix: str) -> Iterator[Celery]:
    """A Celery producer on the test Redis; kombu's shared bookkeeping is cleaned after."""
    app = Celery("tidegate-intake-test", broker=redis_url)
    try:
        yield app
    finally:
        app.close()
        for tag, raw in list(redis_client.hscan_iter("unacked", count=500)):
            try:
                _, _exchange, routing_key = json.loads(raw)
            except ValueError:
                continue
            if str(routing_key).startswith(prefix):
                redis_client.hdel("unacked", tag)
                redis_client.zrem("unacked_index", tag)
        for key in list(redis_client.scan_iter(match=f"_kombu.binding*{prefix}*")):
            redis_client.delete(key)


@pytest.fixture
def admission(
    producer: Celery, redis_client: redis.Redis, prefix: str, routes: tuple[Route, ...]
) -> Admission:
    """A real admission on this test's queues: HWM 5, LWM 1, local samples every time."""
    queues = {r.document_class.queue for r in routes}
    return Admission(
        CelerySender(producer),
        dict.fromkeys(queues, "intake.test.task"),
        probe=RedisDepthProbe(redis_client),
        quarantine=Quarantine(redis_client, prefix=prefix),
        watermarks=WatermarkStore(
            redis_client, prefix=prefix, defaults=Watermarks(hwm=5, lwm=1, shed_after=3)
        ),
        board=None,
        interval_s=1e-9,
    )


@dataclasses.dataclass
class ServedIntake:
    """A ``tidegate intake serve`` process on loopback and the Redis it uses."""

    url: str
    redis_url: str
    process: subprocess.Popen[bytes]
    stderr: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def serve_intake(
    redis_url: str,
    log_dir: Path,
    *args: str,
    env: dict[str, str] | None = None,
    timeout_s: float = 30.0,
    ready: bool = True,
) -> ServedIntake:
    """Start ``tidegate intake serve --allow-anonymous`` on ``redis_url``; wait for /healthz
    (unless not ``ready``: a process meant to die may do so before it answers)."""
    port = free_port()
    executable = shutil.which("tidegate", path=os.path.dirname(sys.executable))
    assert executable is not None
    stderr = log_dir / f"intake-{port}.log"
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
                "--redis-url",
                redis_url,
                "--allow-anonymous",
                *args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={**os.environ, **(env or {})},
        )
    url = f"http://127.0.0.1:{port}"
    if not ready:
        return ServedIntake(url, redis_url, process, stderr)
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise AssertionError(
                f"the intake exited with {process.returncode}: {stderr.read_text()}"
            )
        try:
            if httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200:
                return ServedIntake(url, redis_url, process, stderr)
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"the intake did not answer within {timeout_s}s")
        time.sleep(0.1)


@pytest.fixture
def own_redis() -> Iterator[str]:
    """A Redis of the test's own: a served intake uses the real queue names."""
    try:
        store = EmbeddedRedis().start()
    except ConfigurationError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no Redis: {exc}")
    try:
        yield store.url
    finally:
        store.stop()


@pytest.fixture
def intake_server(tmp_path: Path) -> Iterator[Any]:
    """``serve_intake`` bound to this test's log folder; every server is stopped after."""
    started: list[ServedIntake] = []

    def start(
        redis_url: str, *args: str, env: dict[str, str] | None = None, ready: bool = True
    ) -> ServedIntake:
        served = serve_intake(redis_url, tmp_path, *args, env=env, ready=ready)
        started.append(served)
        return served

    try:
        yield start
    finally:
        for served in started:
            served.stop()


@pytest.fixture
def until() -> Any:
    """:func:`~tidegate.harness.polling.wait_for`, for tests."""
    return wait_for
