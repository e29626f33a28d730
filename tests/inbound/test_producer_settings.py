"""The producer side takes its watermarks and shedding policy from one ``Settings``
(issue #12, item 9): an admission, a monitor and the ``tidegate watermarks`` commands
built from ``Settings.load(...)`` judge with those values, and none of them reads the
process environment a second time on the way."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NoReturn

import pytest
import redis
from click.testing import CliRunner

from tidegate.cli.monitor import watermarks as watermarks_command
from tidegate.load.admission import Admission
from tidegate.load.depth import QueueDepth
from tidegate.load.quarantine import Quarantine
from tidegate.load.watermarks import Level, Watermarks
from tidegate.ops.monitor import Monitor
from tidegate.settings import Settings

pytestmark = pytest.mark.redis

ENV = {
    "TIDEGATE_QUEUE_HWM": "40",
    "TIDEGATE_QUEUE_LWM": "4",
    "TIDEGATE_SHED_AFTER_INTERVALS": "2",
    "TIDEGATE_SHEDDABLE_CLASSES": "IFTSTA",
}
MARKS = Watermarks(hwm=40, lwm=4, shed_after=2)


class NoEnviron(dict[str, str]):
    """``os.environ`` for the test's duration: any read fails the test."""

    def _read(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise AssertionError("read os.environ on the producer path")

    __getitem__ = get = __contains__ = __iter__ = __len__ = _read  # type: ignore[assignment]
    keys = items = values = copy = _read  # type: ignore[assignment]


@contextlib.contextmanager
def no_environ() -> Iterator[None]:
    """Any read of ``os.environ`` inside the block fails the test."""
    guard = pytest.MonkeyPatch()
    guard.setattr(os, "environ", NoEnviron())
    try:
        yield
    finally:
        guard.undo()


class Depths:
    """A probe reporting one fixed depth for every queue."""

    def __init__(self, depth: int) -> None:
        self.depth = depth

    def sample(self, queues: Sequence[str]) -> dict[str, QueueDepth]:
        return {queue: QueueDepth(queue, self.depth) for queue in queues}


class Nowhere:
    name = "test"

    def send(self, queue: str, task: str, payload: Mapping[str, Any]) -> None:
        raise AssertionError("nothing is sent in these tests")


def test_the_guard_catches_a_read_of_the_environment() -> None:
    """Without this, the tests below could pass while the environment is read."""
    with no_environ(), pytest.raises(AssertionError, match=r"os\.environ"):
        Settings.load()


def test_an_admission_judges_with_its_settings_and_never_reads_the_environment(
    redis_client: redis.Redis, prefix: str
) -> None:
    settings = Settings.load(ENV)
    with no_environ():
        admission = Admission(
            Nowhere(),
            {"bulk": "bulk.store"},
            probe=Depths(50),
            quarantine=Quarantine(redis_client, prefix=prefix),
            settings=settings,
        )
        state = admission.load("bulk")  # 50 > the settings' HWM of 40 (not the default 1000)
    assert admission.policy.sheddable == frozenset({"IFTSTA"})
    assert (state.level, state.over_hwm_intervals) == (Level.HIGH, 1)


def test_for_celery_hands_the_settings_watermarks_to_its_store(
    redis_client: redis.Redis, prefix: str
) -> None:
    from celery import Celery

    settings = Settings.load(ENV)
    app = Celery("producer", broker="memory://", set_as_current=False)
    with no_environ():
        admission = Admission.for_celery(
            app,
            {"bulk": "bulk.store"},
            client=redis_client,
            prefix=prefix,
            probe=Depths(0),
            settings=settings,
        )
        assert admission.watermarks is not None
        marks = admission.watermarks.get("bulk")
    assert marks == MARKS


def test_a_monitor_built_from_settings_samples_with_their_watermarks(
    redis_client: redis.Redis, prefix: str
) -> None:
    settings = Settings.load(ENV)
    with no_environ():
        monitor = Monitor(
            redis_client, Depths(50), {"bulk": None}, prefix=prefix, settings=settings
        )
        entries = monitor.tick()
    assert [(e.marks, e.state.level) for e in entries] == [(MARKS, Level.HIGH)]


def test_without_settings_the_library_uses_the_built_in_values_not_the_environment(
    redis_client: redis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A library caller that passes nothing gets the documented defaults, whatever the
    process's environment says: only the process's settings object reads it."""
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    monitor = Monitor(redis_client, Depths(50), {"bulk": None}, prefix=prefix)
    assert monitor.watermarks.get("bulk") == Watermarks()


def test_the_watermarks_command_shows_the_settings_read_once_from_its_environment(
    redis_url: str, prefix: str
) -> None:
    result = CliRunner().invoke(
        watermarks_command,
        ["show", "--prefix", prefix, "--json", "--redis-url", redis_url],
        env=ENV,
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["defaults"] == MARKS.as_dict()


def test_the_watermarks_command_refuses_settings_it_cannot_use(redis_url: str, prefix: str) -> None:
    result = CliRunner().invoke(
        watermarks_command,
        ["show", "--prefix", prefix, "--redis-url", redis_url],
        env={"TIDEGATE_QUEUE_HWM": "10", "TIDEGATE_QUEUE_LWM": "20"},
    )
    assert result.exit_code == 1
    assert "QUEUE_LWM=20" in result.output
