"""One settings object, read once, handed to one runtime that Celery and RQ share.

Before, each module read its own variables when it needed them: the Celery runtime
the prefix and fail-open, the gate its shape, the sweep its interval, the lifecycle
its commit wait, RQ its prefix and URLs — and RQ built its downstream client without
the adaptive controller a Celery worker got for the same settings.
"""

from __future__ import annotations

import pytest
import redis
from celery import Celery

from tidegate import runtime as runtime_module
from tidegate.errors import ConfigurationError
from tidegate.integrations.celery.runtime import runtime as celery_runtime
from tidegate.integrations.rq._runtime import downstream_client, runtime_for
from tidegate.runtime import Runtime
from tidegate.settings import GatePolicy, Settings

ENV = {
    "TIDEGATE_PREFIX": "port-a",
    "TIDEGATE_FAIL_OPEN": "true",
    "TIDEGATE_SWEEP_INTERVAL_S": "7.5",
    "TIDEGATE_QUEUE_HWM": "400",
    "TIDEGATE_QUEUE_LWM": "40",
    "TIDEGATE_SHED_AFTER_INTERVALS": "3",
    "TIDEGATE_SHEDDABLE_CLASSES": "BULK_BL_PDF",
    "TIDEGATE_CUSTOMS_URL": "http://customs.example:8080",
    "TIDEGATE_CUSTOMS_RATE": "0.5",
    "TIDEGATE_CUSTOMS_BURST": "2",
    "TIDEGATE_CUSTOMS_ADAPTIVE": "on",
    "TIDEGATE_CUSTOMS_SUSPENSION_PRONE": "true",
    "TIDEGATE_TOS_CONCURRENCY": "6",
    "TIDEGATE_TOS_MAX_REQUEST_S": "12.5",
}


def test_every_part_comes_from_the_one_mapping_it_was_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TIDEGATE_PREFIX", "from-the-process")  # not the mapping: ignored
    settings = Settings.load(ENV)

    assert (settings.prefix, settings.fail_open, settings.sweep_interval_s) == (
        "port-a",
        True,
        7.5,
    )
    assert settings.watermarks.as_dict() == {"hwm": 400, "lwm": 40, "shed_after": 3}
    assert settings.shedding.sheddable == frozenset({"BULK_BL_PDF"})
    customs = settings.downstream("customs")
    assert customs.url == "http://customs.example:8080"
    assert customs.gate == GatePolicy(rate=0.5, burst=2)
    assert customs.adaptive is not None
    assert customs.adaptive.rate.suspension_prone
    tos = settings.downstream("tos")
    assert (tos.url, tos.gate.concurrency, tos.adaptive, tos.max_request_s) == (
        None,
        6,
        None,
        12.5,
    )
    assert Settings.load({}).prefix == "tidegate"


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"TIDEGATE_SWEEP_INTERVAL_S": "0"}, "TIDEGATE_SWEEP_INTERVAL_S"),
        ({"TIDEGATE_PREFIX": "two words"}, "TIDEGATE_PREFIX"),
        ({"TIDEGATE_FAIL_OPEN": "perhaps"}, "TIDEGATE_FAIL_OPEN"),
        ({"TIDEGATE_QUEUE_HWM": "50", "TIDEGATE_QUEUE_LWM": "80"}, "QUEUE_LWM"),
        ({"TIDEGATE_SHEDDABLE_CLASSES": "VERMAS"}, "never sheddable"),
    ],
)
def test_a_value_the_process_cannot_use_fails_the_load_and_names_it(
    env: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigurationError, match=named):
        Settings.load(env)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("TIDEGATE_CUSTOMS_RATE", "-1"),
        ("TIDEGATE_CUSTOMS_BURST", "1.5"),
        ("TIDEGATE_CUSTOMS_MAX_REQUEST_S", "soon"),
        ("TIDEGATE_CUSTOMS_ADAPTIVE", "sometimes"),
    ],
)
def test_a_downstream_value_it_cannot_use_fails_when_that_downstream_is_asked_for(
    variable: str, value: str
) -> None:
    settings = Settings.load({variable: value})
    field = variable.removeprefix("TIDEGATE_CUSTOMS_")
    with pytest.raises(ConfigurationError, match=f"(?i)downstream 'customs'.*{field}"):
        settings.downstream("customs")
    settings.downstream("tos")  # another downstream's settings are unaffected


@pytest.fixture
def settings_env(monkeypatch: pytest.MonkeyPatch, prefix: str) -> None:
    for name, value in {**ENV, "TIDEGATE_PREFIX": prefix}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TIDEGATE_REDIS_URL", raising=False)


@pytest.mark.redis
def test_celery_and_rq_workers_build_the_same_runtime_from_the_same_settings(
    settings_env: None, redis_url: str, redis_client: redis.Redis, prefix: str
) -> None:
    app = Celery("settings-runtime", broker=redis_url, set_as_current=False)
    app.conf.tidegate_redis_url = redis_url
    celery = celery_runtime(app)
    rq = runtime_for(redis_client)
    try:
        assert type(celery) is Runtime
        assert type(rq) is Runtime
        for rt in (celery, rq):
            assert rt.prefix == prefix
            assert rt.fail_open is True
            assert rt.gate("customs").defaults == GatePolicy(rate=0.5, burst=2)
            assert rt.gate("tos").defaults.concurrency == 6
            assert rt.settings_of("tos").max_request_s == 12.5
            assert rt.settings.sweep_interval_s == 7.5
    finally:
        for rt in (celery, rq):
            for loop in rt._adaptive.values():
                loop.stop()
        celery.client.close()


@pytest.mark.redis
def test_an_rq_job_gets_the_adaptive_controller_a_celery_worker_gets(
    settings_env: None, redis_url: str, redis_client: redis.Redis
) -> None:
    """The downstream client of an RQ job reports every call to the fleet's controller
    when the downstream is adaptive (RQ's client had no observer before)."""
    app = Celery("settings-runtime-adaptive", broker=redis_url, set_as_current=False)
    app.conf.tidegate_redis_url = redis_url
    celery = celery_runtime(app)
    rq = runtime_for(redis_client)
    try:
        assert celery.downstream("customs").observer is not None
        assert rq.downstream("customs").observer is not None
        assert rq.downstream("tos", "http://tos.example").observer is None  # not adaptive
    finally:
        for rt in (celery, rq):
            for loop in rt._adaptive.values():
                loop.stop()
            for client in rt._clients.values():
                client.close()
        celery.client.close()


def test_rq_downstream_client_outside_a_job_without_a_redis_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TIDEGATE_REDIS_URL", raising=False)
    with pytest.raises(ConfigurationError, match="TIDEGATE_REDIS_URL"):
        downstream_client("customs")


def test_stores_build_the_downstream_client_before_the_unit_takes_a_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The client used to be built on the first call, inside the gate's slot: its setup
    was spent holding a lease with nothing in service (about a second per process at a
    fleet's start, bench/tos_turn.py). The lifecycle's stores are asked for first."""
    built: list[str] = []

    def client(name: str, url: str, **_: object) -> object:
        built.append(name)
        return object()

    monkeypatch.setattr(runtime_module, "DownstreamClient", client)
    settings = Settings.load({"TIDEGATE_TOS_URL": "http://tos.example"})
    rt = Runtime(redis.Redis(), settings)

    rt.stores("tos")
    assert built == ["tos"]
    rt.downstream("tos")
    assert built == ["tos"]  # the same client, not a second one
    rt.stores("db")  # no URL configured: nothing to build, and no error
    assert built == ["tos"]


@pytest.mark.parametrize("value", ["0", "17", "two", "-1", "1.5"])
def test_a_relay_depth_the_fleet_cannot_use_is_refused(value: str) -> None:
    settings = Settings.load({"TIDEGATE_TOS_RELAY_DEPTH": value, "TIDEGATE_TOS_CONCURRENCY": "4"})
    with pytest.raises(ConfigurationError, match="TIDEGATE_TOS_RELAY_DEPTH"):
        settings.downstream("tos")


def test_a_relay_without_a_concurrency_cap_is_refused() -> None:
    """A lane holds one connection under one of the cap's leases: with no cap, every
    process's lane would open one."""
    settings = Settings.load({"TIDEGATE_TOS_RELAY_DEPTH": "2"})
    with pytest.raises(ConfigurationError, match="CONCURRENCY"):
        settings.downstream("tos")
    capped = Settings.load({"TIDEGATE_TOS_RELAY_DEPTH": "2", "TIDEGATE_TOS_CONCURRENCY": "4"})
    assert capped.downstream("tos").relay_depth == 2


def test_a_relay_with_a_commit_wait_is_refused() -> None:
    """A relayed request may wait in the relay's queue after its ``sending`` mark, so a
    commit wait counted from the mark could end before the request does."""
    settings = Settings.load(
        {
            "TIDEGATE_TOS_RELAY_DEPTH": "2",
            "TIDEGATE_TOS_CONCURRENCY": "4",
            "TIDEGATE_TOS_MAX_REQUEST_S": "5",
        }
    )
    with pytest.raises(ConfigurationError, match="MAX_REQUEST_S"):
        settings.downstream("tos")


@pytest.mark.redis
def test_a_relayed_downstream_is_called_through_the_lanes_of_a_pool_child(
    redis_client: redis.Redis, prefix: str
) -> None:
    """A worker of a relayed downstream takes no lease; its client hands the call to the
    lanes; a runtime that runs lanes (a Celery pool child) starts one, a runtime that does
    not (an RQ job) starts none; stopping the lanes ends their threads."""
    from tidegate.downstream import RelayTransport
    from tidegate.flow import Gate
    from tidegate.sim import TosSim

    with TosSim(max_connections=2, service_s=0.0) as tos:
        env = {
            "TIDEGATE_TOS_URL": tos.url,
            "TIDEGATE_TOS_CONCURRENCY": "2",
            "TIDEGATE_TOS_RELAY_DEPTH": "2",
            "TIDEGATE_PREFIX": prefix,
        }
        child = Runtime(redis_client, Settings.load(env), relay_lanes=True)
        job = Runtime(redis_client, Settings.load(env))
        try:
            client = child.downstream("tos")
            answer = client.send("/container-reports", {}, idempotency_key="relayed-1")
            assert answer["idempotency_key"] == "relayed-1"
            assert isinstance(client._http._transport, RelayTransport)
            assert child.relay("tos") is not None
            assert job.relay("tos") is None
            assert not job.gate("tos").limit.leases
            # The worker's admission took no lease; the lane's lease is the only one.
            job.gate("tos").acquire(max_wait=0)
            assert Gate(redis_client, "tos", prefix=prefix).state().leases_held <= 1
        finally:
            child.stop_relays()
            for rt in (child, job):
                for c in rt._clients.values():
                    c.close()
    assert tos.stats(timeline=False)["accepted"] == 1
