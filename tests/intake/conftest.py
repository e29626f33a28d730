"""Fixtures of the intake tests: interchanges built to order, per-test queues, a producer.

Broker queues are named under the test's key prefix (``<prefix>:edi.customs``), so the
``redis_client`` fixture's cleanup removes them and no test sees another's messages.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import redis
from celery import Celery

from tidegate.edi import DEFAULT_ROUTES, Route, iso6346_check_digit
from tidegate.load.admission import Admission, CelerySender
from tidegate.load.depth import RedisDepthProbe
from tidegate.load.quarantine import Quarantine
from tidegate.load.watermarks import Watermarks, WatermarkStore


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
