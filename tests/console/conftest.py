"""Console fixtures: users, a console served on loopback, a Redis client that counts
round trips, and Debian's headless Chromium driven by Playwright.

The browser skips locally when it cannot start, and fails under ``CI=true`` — a green
CI run means the browser tests ran.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
import uvicorn

from tidegate.console import ConsoleConfig, Users, create_app, hash_secret
from tidegate.console.access import Role

CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
#: Debian's chromium; TIDEGATE_CHROMIUM points elsewhere (tests/console/test_console_ci.py).
CHROMIUM = os.environ.get("TIDEGATE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

#: (name, role, secret) of the test users; few PBKDF2 iterations keep tests fast.
OPERATOR = ("ana", Role.OPERATOR, "ana-operator-secret")
VIEWER = ("vic", Role.VIEWER, "vic-viewer-secret")


def _make_users(*, allow_anonymous_read: bool = False) -> Users:
    return Users(
        [
            (name, role, hash_secret(secret, iterations=1000))
            for name, role, secret in (OPERATOR, VIEWER)
        ],
        allow_anonymous_read=allow_anonymous_read,
    )


@pytest.fixture
def make_users() -> Callable[..., Users]:
    """Builds the test users (an operator and a viewer)."""
    return _make_users


@pytest.fixture
def operator() -> tuple[str, Role, str]:
    return OPERATOR


@pytest.fixture
def viewer() -> tuple[str, Role, str]:
    return VIEWER


class CountingConnection(redis.Connection):
    """A connection that counts what it sends: one count per round trip (a pipeline
    is sent as one packed write), with no MONITOR on the server."""

    sent: list[int]

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        self.sent.append(1)
        super().send_packed_command(command, check_health)


@dataclass
class RoundTrips:
    """The round trips of every client made by :func:`counting_client`."""

    sent: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.sent)

    def reset(self) -> None:
        self.sent.clear()


@pytest.fixture
def round_trips() -> RoundTrips:
    return RoundTrips()


@pytest.fixture
def counting_client(redis_url: str, round_trips: RoundTrips) -> Iterator[redis.Redis]:
    """A client to the session Redis whose round trips land in ``round_trips``."""
    counter = type("Counting", (CountingConnection,), {"sent": round_trips.sent})
    pool = redis.ConnectionPool.from_url(redis_url, connection_class=counter)
    client = redis.Redis(connection_pool=pool)
    try:
        yield client
    finally:
        client.close()
        pool.disconnect()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Served:
    url: str
    server: uvicorn.Server


@pytest.fixture
def serve() -> Iterator[Callable[[redis.Redis, ConsoleConfig], Served]]:
    """Start consoles on loopback; every one is stopped and joined at teardown."""
    running: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(client: redis.Redis, config: ConsoleConfig) -> Served:
        port = _free_port()
        server = uvicorn.Server(
            uvicorn.Config(
                create_app(client, config),
                host="127.0.0.1",
                port=port,
                log_config=None,
                access_log=False,
                lifespan="on",
            )
        )
        thread = threading.Thread(target=server.run, name="tidegate-console-test", daemon=True)
        thread.start()
        running.append((server, thread))
        deadline = time.monotonic() + 20
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                pytest.fail("the console did not start")
            time.sleep(0.02)
        return Served(f"http://127.0.0.1:{port}", server)

    yield start
    for server, thread in running:
        server.should_exit = True
        thread.join(15)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's headless Chromium; skips locally, fails under CI, when it cannot start.

    Module-scoped: Playwright's sync API keeps an event loop running in the main thread
    while it lives, and every asyncio test after it would find that loop running.
    """
    from playwright.sync_api import Error, sync_playwright

    if not os.path.exists(CHROMIUM):
        if CI:
            pytest.fail(f"{CHROMIUM} is missing (apt-get install chromium)")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    with sync_playwright() as playwright:
        try:
            launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        except Error as exc:
            if CI:
                pytest.fail(f"chromium did not start: {exc}")
            pytest.skip(f"chromium did not start: {exc}")
        try:
            yield launched
        finally:
            launched.close()
