"""The safe Celery preset, without workers."""

from __future__ import annotations

import pytest
from celery import Celery

from tidegate.errors import ConfigurationError
from tidegate.integrations.celery import CeleryPreset, configure
from tidegate.keys import Keyspace


def test_preset_applies_the_safe_settings() -> None:
    app = configure(
        Celery(broker="redis://127.0.0.1:1/0"), CeleryPreset(rate_limits={"edi.tos.push": "50/s"})
    )
    conf = app.conf
    assert conf.worker_prefetch_multiplier == 1
    assert conf.task_acks_late is True
    assert conf.task_reject_on_worker_lost is True
    assert conf.accept_content == ["json"]
    assert conf.task_serializer == "json"
    assert [q.name for q in conf.task_queues] == [
        "edi.customs",
        "edi.tos",
        "bulk.dispatch",
        "bl.parse",
    ]
    assert conf.task_routes["edi.customs.*"] == {"queue": "edi.customs"}
    assert conf.task_annotations == {"edi.tos.push": {"rate_limit": "50/s"}}


def test_short_visibility_timeout_is_refused() -> None:
    """acks_late on Redis with a visibility timeout below the time limit runs tasks twice."""
    app = Celery(broker="redis://127.0.0.1:1/0")
    app.conf.broker_transport_options = {"visibility_timeout": 400}

    with pytest.raises(ConfigurationError, match="visibility_timeout=400s"):
        configure(app, CeleryPreset(soft_time_limit_s=200, hard_time_limit_s=300))


def test_amqp_broker_is_not_subject_to_the_redis_check() -> None:
    app = Celery(broker="amqp://guest@127.0.0.1:1//")
    app.conf.broker_transport_options = {"visibility_timeout": 1}
    configure(app)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"soft_time_limit_s": 300, "hard_time_limit_s": 300},
        {"max_tasks_per_child": 0},
        {"routes": {"x.*": "nowhere"}},
    ],
)
def test_invalid_preset(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        CeleryPreset(**kwargs)  # type: ignore[arg-type]


def test_runtime_takes_its_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """TIDEGATE_REDIS_URL / TIDEGATE_PREFIX / TIDEGATE_FAIL_OPEN reach the worker runtime."""
    from tidegate.integrations.celery.runtime import runtime

    monkeypatch.setenv("TIDEGATE_REDIS_URL", "redis://127.0.0.1:1/3")
    monkeypatch.setenv("TIDEGATE_PREFIX", "port-rtm")
    monkeypatch.setenv("TIDEGATE_FAIL_OPEN", "true")
    app = configure(Celery(broker="amqp://guest@127.0.0.1:1//"))

    rt = runtime(app)

    assert rt.prefix == "port-rtm"
    assert rt.client.connection_pool.connection_kwargs["db"] == 3
    assert rt.gate("customs").fail_open is True
    assert rt.gate("customs").limit.keys == Keyspace("port-rtm").limit("customs")


def test_runtime_without_any_redis_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tidegate.integrations.celery.runtime import runtime

    monkeypatch.delenv("TIDEGATE_REDIS_URL", raising=False)
    with pytest.raises(ConfigurationError, match="TIDEGATE_REDIS_URL"):
        runtime(configure(Celery(broker="amqp://guest@127.0.0.1:1//")))
