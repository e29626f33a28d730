"""TosSim's connection cap and DatabaseSim's latency under concurrent writers."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tidegate.errors import ConfigurationError
from tidegate.sim import DatabaseSim, TosSim


def test_tos_refuses_beyond_k_requests_in_flight(held_sleep: Any, write: Any) -> None:
    """K=3 held in service: the 4th gets 503 + Retry-After; the 3 complete with 200."""
    with TosSim(3, 0.5, retry_after_s=2, sleep=held_sleep) as tos, ThreadPoolExecutor(3) as pool:
        held = [pool.submit(write, tos.endpoint, key=f"k{i}") for i in range(3)]
        held_sleep.wait_entered(3)

        extra = write(tos.endpoint, key="k3")
        assert extra.status_code == 503
        assert extra.headers["Retry-After"] == "2"
        assert extra.json() == {"error": "connection_limit"}

        held_sleep.release()
        assert [future.result().status_code for future in held] == [200, 200, 200]
        stats = tos.stats()
        assert stats["accepted"] == 3
        assert stats["responses_503"] == 1
        assert stats["max_concurrent_seen"] == 4
        assert held_sleep.durations == [0.5, 0.5, 0.5]


def test_tos_frees_the_slot_when_service_ends(held_sleep: Any, write: Any) -> None:
    """K=1: once the request in service completes, the next one is admitted."""
    with TosSim(1, 0.1, sleep=held_sleep) as tos, ThreadPoolExecutor(1) as pool:
        first = pool.submit(write, tos.endpoint, key="a")
        held_sleep.wait_entered(1)
        refused = write(tos.endpoint, key="b")
        assert refused.status_code == 503
        assert "Retry-After" not in refused.headers
        held_sleep.release()
        assert first.result().status_code == 200
        assert write(tos.endpoint, key="b").status_code == 200
        assert tos.accepted_keys() == ["a", "b"]


def test_database_latency_grows_with_concurrent_writers(held_sleep: Any, write: Any) -> None:
    """base 10 ms + 5 ms per extra writer: three writers take 10, 15 and 20 ms."""
    with (
        DatabaseSim(0.010, 0.005, sleep=held_sleep) as db,
        ThreadPoolExecutor(3) as pool,
    ):
        futures = []
        for i in range(3):
            futures.append(pool.submit(write, db.endpoint, key=f"w{i}"))
            held_sleep.wait_entered(1)  # one more writer in service before the next arrives
        assert held_sleep.durations == pytest.approx([0.010, 0.015, 0.020])
        held_sleep.release()
        bodies = [future.result().json() for future in futures]
        assert [body["writers"] for body in bodies] == [1, 2, 3]
        assert [body["latency_s"] for body in bodies] == pytest.approx([0.010, 0.015, 0.020])
        assert db.stats()["max_writers_seen"] == 3

        alone = write(db.endpoint, key="alone").json()
        assert (alone["writers"], alone["latency_s"]) == (1, pytest.approx(0.010))


@pytest.mark.parametrize(
    ("factory", "kwargs"),
    [
        (TosSim, {"max_connections": 0}),
        (TosSim, {"service_s": -1}),
        (TosSim, {"retry_after_s": 0}),
        (DatabaseSim, {"base_latency_s": -0.1}),
        (DatabaseSim, {"per_writer_s": float("nan")}),
    ],
)
def test_bad_settings_are_configuration_errors(factory: Any, kwargs: dict[str, Any]) -> None:
    """Nonsense settings fail at construction."""
    with pytest.raises(ConfigurationError):
        factory(**kwargs)
