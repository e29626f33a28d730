"""Shared fixtures: a real Redis, per-test key prefixes, clean logging.

Redis comes from ``REDIS_URL`` or an embedded ``redis-server`` started once per session.
RabbitMQ comes from ``RABBITMQ_URL`` or the local default (``.ci/run`` starts one).
When either cannot be had its tests skip locally — and fail under ``CI=true``, so a
green CI run always means they ran.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import structlog

import tidegate.events
from tidegate._redis import client_from_url
from tidegate.errors import ConfigurationError
from tidegate.redis_server import EmbeddedRedis

CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of a real Redis for the whole session."""
    from_env = os.environ.get("REDIS_URL")
    if from_env:
        yield from_env
        return
    try:
        server = EmbeddedRedis().start()
    except ConfigurationError as exc:
        if CI:
            raise
        pytest.skip(f"no Redis: {exc}")
    try:
        yield server.url
    finally:
        server.stop()


#: Where a local RabbitMQ listens when ``RABBITMQ_URL`` is unset (the Debian package).
DEFAULT_RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672//"


@pytest.fixture(scope="session")
def rabbitmq_url() -> str:
    """URL of a real RabbitMQ for the whole session, checked with one connection."""
    from kombu import Connection
    from kombu.exceptions import OperationalError

    url = os.environ.get("RABBITMQ_URL") or DEFAULT_RABBITMQ_URL
    conn = Connection(url, connect_timeout=3)
    try:
        conn.ensure_connection(max_retries=1)
    except (OperationalError, *conn.connection_errors) as exc:
        if CI:
            pytest.fail(f"no RabbitMQ at {conn.as_uri()} under CI: {exc!r}")
        pytest.skip(f"no RabbitMQ at {conn.as_uri()}: {exc!r}")
    finally:
        conn.release()
    return url


@pytest.fixture(scope="session")
def rabbitmq_management_url(rabbitmq_url: str) -> str:
    """The management API of the session's RabbitMQ (``RABBITMQ_MANAGEMENT_URL`` or
    derived from the broker URL), checked with one request; ``.ci/run`` enables it."""
    import httpx

    from tidegate.integrations.celery.depth import management_url_for

    url = os.environ.get("RABBITMQ_MANAGEMENT_URL") or management_url_for(rabbitmq_url)
    try:
        httpx.get(f"{url}/api/overview", timeout=3).raise_for_status()
    except httpx.HTTPError as exc:
        if CI:
            pytest.fail(f"no RabbitMQ management API under CI: {exc!r}")
        pytest.skip(f"no RabbitMQ management API (rabbitmq_management plugin): {exc!r}")
    return url


@pytest.fixture
def prefix() -> str:
    """A key prefix unique to this test, so tests never see each other's state."""
    return f"tgtest-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def redis_client(redis_url: str, prefix: str) -> Iterator[redis.Redis]:
    """A client to the session Redis; this test's keys are deleted afterwards."""
    client = client_from_url(redis_url)
    try:
        yield client
    finally:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()


@pytest.fixture(autouse=True)
def _reset_structlog() -> Iterator[None]:
    yield
    structlog.reset_defaults()
    tidegate.events.reset_defaults()  # drops counters a test subscribed


#: How long a test's own background threads may take to end after its teardown.
_THREAD_GRACE_S = 10.0


@pytest.fixture(autouse=True)
def _no_leaked_threads() -> Iterator[None]:
    """A tidegate thread a test started must be gone when the test is.

    A sim handler or a lease renewer that outlives its test logs into the next test's
    ``capture_logs`` and can change what that test sees; so the leak fails the test that
    caused it, not the one it disturbs. (Every thread tidegate starts is named
    ``tidegate-…``; a sim's handler serving a fixture that outlives the test is fine.)
    """
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + _THREAD_GRACE_S
    leaked = [
        thread
        for thread in threading.enumerate()
        if thread not in before
        and thread.name.startswith("tidegate-")
        # a keep-alive connection of a sim that a module-scoped fixture still runs
        and not getattr(getattr(thread, "tidegate_sim", None), "running", False)
    ]
    for thread in leaked:
        thread.join(max(0.0, deadline - time.monotonic()))
    alive = sorted(thread.name for thread in leaked if thread.is_alive())
    if alive:
        pytest.fail(f"threads outlived the test: {alive}")


#: Fixtures that reach the session's shared RabbitMQ (its queue names are the fleet's,
#: not the test's, and a fleet test deletes them before it starts).
_RABBITMQ_FIXTURES = {"rabbitmq_url", "rabbitmq_management_url"}
#: What names a test that reaches it: its directory, its broker parameter or its name.
_RABBITMQ_WORDS = ("amqp", "rabbitmq")


def _xdist_scope(nodeid: str) -> str:
    """The unit ``make test``'s two ``pytest -n`` workers share out: every test that
    reaches RabbitMQ is one unit (one broker for both workers, so they run one after
    another), every other test goes with its module (a module-scoped fleet is started
    once, as without workers; each worker has its own embedded Redis)."""
    if any(word in nodeid.lower() for word in _RABBITMQ_WORDS):
        return "rabbitmq"
    return nodeid.split("::", 1)[0]


#: The longest units, longest first (seconds in the one-process run of 2026-12-03: the
#: RabbitMQ unit ~350, the RQ kill windows 247 — RQ's own minute-long floors — the chaos
#: scenarios ~190, the RQ demo ~150). They are handed out before the rest, so that no
#: worker starts a four-minute unit when the other is nearly done. Only the order of the
#: work changes; a unit missing here is handed out in collection order after them.
_LONGEST_FIRST = (
    "rabbitmq",
    "tests/rq/test_rq_kill_windows.py",
    "tests/chaos/test_chaos_scenarios.py",
    "tests/rq/test_rq_demo.py",
)


def _longest_first(nodeids: list[str]) -> list[str]:
    rank = {scope: i for i, scope in enumerate(_LONGEST_FIRST)}
    order = {nodeid: i for i, nodeid in enumerate(nodeids)}
    return sorted(nodeids, key=lambda n: (rank.get(_xdist_scope(n), len(rank)), order[n]))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Share out :func:`_xdist_scope`'s units, :data:`_LONGEST_FIRST` first. (Not
    ``--dist loadgroup`` with marks: pytest-xdist 3.8 passes the group in the node id,
    which pytest 9.2 no longer lets it change — pytest-xdist issue 1386 — and the tests
    were silently shared out one by one.)"""
    from xdist.scheduler import LoadScopeScheduling

    # Units in the order given here, not by how many tests each holds.
    config.option.loadscopereorder = False

    class ScopeScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _xdist_scope(nodeid)

        def schedule(self) -> None:
            if self.collection is None:
                for node, nodeids in self.registered_collections.items():
                    self.registered_collections[node] = _longest_first(list(nodeids))
            super().schedule()

    return ScopeScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that asks for RabbitMQ must say so in its node id, or the workers would
    run it beside another that deletes its queues."""
    for item in items:
        uses = _RABBITMQ_FIXTURES & set(getattr(item, "fixturenames", ()))
        if uses and _xdist_scope(item.nodeid) != "rabbitmq":
            raise pytest.UsageError(
                f"{item.nodeid} uses {sorted(uses)}: name it (or its module) with one of "
                f"{_RABBITMQ_WORDS}, so that tests/conftest.py keeps it off the other worker"
            )
