"""What every sim shares: recording keys, /stats, /reset, faults and outages."""

from __future__ import annotations

import threading
import time
import types
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tidegate.sim
from tidegate.errors import ConfigurationError
from tidegate.sim import (
    BAD_RETRY_AFTER,
    HUGE_RETRY_AFTER_S,
    CustomsSim,
    DatabaseSim,
    bucket_counts,
    max_in_window,
)

STATS_KEYS = {
    "accepted",
    "distinct_keys",
    "duplicates",
    "responses_429",
    "responses_503",
    "responses_4xx",
    "max_concurrent_seen",
    "first_accept_ts",
    "last_accept_ts",
    "max_accepted_1s",
    "accept_timeline",
}


@pytest.fixture
def db(clock: Any) -> Any:
    """A database sim with no latency on the fake clock: it accepts everything."""
    with DatabaseSim(0.0, 0.0, clock=clock, wall_clock=lambda: 1_000_000.0) as sim:
        yield sim


def _until(condition: Any, timeout: float = 10.0) -> bool:
    """Poll ``condition`` until true or ``timeout``: waiting for a state, not for time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_an_accepted_write_is_recorded_with_its_key(db: Any, write: Any) -> None:
    """200 with the key echoed back; the key is in accepted_keys()."""
    response = write(db.endpoint, key="VERMAS-1")
    assert response.status_code == 200
    assert response.json()["idempotency_key"] == "VERMAS-1"
    assert response.json()["duplicate"] is False
    assert db.accepted_keys() == ["VERMAS-1"]


@pytest.mark.parametrize("headers", [{}, {"Idempotency-Key": ""}], ids=["absent", "empty"])
def test_a_write_without_an_idempotency_key_is_400(db: Any, http: Any, headers: Any) -> None:
    """Every write must carry a key: without one it is refused and not recorded."""
    response = http.post(db.endpoint, json={"n": 1}, headers=headers)
    assert response.status_code == 400
    assert response.json() == {"error": "missing_idempotency_key"}
    stats = db.stats()
    assert (stats["accepted"], stats["responses_4xx"]) == (0, 1)


def test_a_body_that_is_not_json_is_refused(db: Any, http: Any) -> None:
    """Invalid JSON is a 400, another media type a 415; neither is recorded."""
    broken = http.post(
        db.endpoint,
        content=b"{not json",
        headers={"Content-Type": "application/json", "Idempotency-Key": "a"},
    )
    text = http.post(
        db.endpoint,
        content=b"hello",
        headers={"Content-Type": "text/plain", "Idempotency-Key": "b"},
    )
    assert (broken.status_code, text.status_code) == (400, 415)
    assert db.stats()["accepted"] == 0
    assert db.stats()["responses"] == {"400": 1, "415": 1}


def test_duplicates_are_counted(db: Any, write: Any) -> None:
    """The same key accepted three times counts as two duplicates."""
    answers = [write(db.endpoint, key=key).json()["duplicate"] for key in ["a", "b", "a", "a"]]
    assert answers == [False, False, True, True]
    stats = db.stats()
    assert (stats["accepted"], stats["distinct_keys"], stats["duplicates"]) == (4, 2, 2)
    assert db.accepted_keys() == ["a", "b", "a", "a"]


def test_stats_over_http_are_the_python_stats(db: Any, http: Any, write: Any) -> None:
    """GET /stats serves exactly sim.stats(), with every documented key."""
    write(db.endpoint, key="a")
    over_http = http.get(f"{db.url}/stats").json()
    assert over_http == db.stats()
    assert over_http.keys() >= STATS_KEYS
    assert over_http["kind"] == "database"


def test_stats_can_leave_out_the_timeline(db: Any, http: Any, write: Any) -> None:
    """GET /stats?timeline=0 keeps the counters and drops the per-accept list."""
    write(db.endpoint, key="a")
    light = http.get(f"{db.url}/stats", params={"timeline": "0"}).json()
    assert "accept_timeline" not in light
    assert (light["accepted"], light["max_accepted_1s"]) == (1, 1)
    assert light["first_accept_ts"] == db.stats()["accept_timeline"][0]


def test_the_accept_timeline_follows_the_sim_clock(db: Any, clock: Any, write: Any) -> None:
    """Accepts at +0, +0.5, +0.9, +1.2 s: exact wall timestamps, at most 3 in one second."""
    origin = 1_000_000.0
    for step, key in zip([0.0, 0.5, 0.4, 0.3], "abcd", strict=True):
        clock.advance(step)
        write(db.endpoint, key=key)
    stats = db.stats()
    assert stats["accept_timeline"] == pytest.approx(
        [origin, origin + 0.5, origin + 0.9, origin + 1.2]
    )
    assert stats["first_accept_ts"] == pytest.approx(origin)
    assert stats["last_accept_ts"] == pytest.approx(origin + 1.2)
    assert stats["max_accepted_1s"] == 3
    assert bucket_counts(stats["accept_timeline"], 0.5) == [1, 2, 1]


def test_reset_over_http_clears_the_counters(db: Any, http: Any, write: Any) -> None:
    """POST /reset: nothing accepted, no timeline, keys forgotten."""
    write(db.endpoint, key="a")
    write(db.endpoint, key=None)
    assert http.post(f"{db.url}/reset").status_code == 200
    stats = db.stats()
    assert (stats["accepted"], stats["responses_4xx"], stats["accept_timeline"]) == (0, 0, [])
    assert stats["first_accept_ts"] is None
    assert db.accepted_keys() == []


def test_unknown_paths_are_404(db: Any, http: Any, write: Any) -> None:
    """A write to the wrong path is a 404, counted; a GET elsewhere than /stats too."""
    assert write(f"{db.url}/nowhere").status_code == 404
    assert http.get(f"{db.url}/nowhere").status_code == 404
    assert db.stats()["responses_4xx"] == 1


def test_writes_from_many_threads_are_all_recorded(db: Any, http: Any) -> None:
    """200 writes from 8 threads: 200 accepted, 200 distinct keys, none lost."""

    def send(i: int) -> int:
        response = http.post(db.endpoint, json={"i": i}, headers={"Idempotency-Key": f"k{i}"})
        return response.status_code

    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = list(pool.map(send, range(200)))
    assert statuses == [200] * 200
    stats = db.stats()
    assert (stats["accepted"], stats["distinct_keys"]) == (200, 200)
    assert set(db.accepted_keys()) == {f"k{i}" for i in range(200)}


# -- faults -----------------------------------------------------------------------


def test_a_503_fault_for_the_next_two_calls(db: Any, write: Any) -> None:
    """set_fault("503", count=2): two 503s without Retry-After, then normal service."""
    db.set_fault("503", count=2)
    responses = [write(db.endpoint, key=f"k{i}") for i in range(3)]
    assert [r.status_code for r in responses] == [503, 503, 200]
    assert "Retry-After" not in responses[0].headers
    stats = db.stats()
    assert (stats["responses_503"], stats["accepted"], stats["fault"]) == (2, 1, None)


@pytest.mark.parametrize(
    ("mode", "retry_after"),
    [
        ("429_no_retry_after", None),
        ("429_bad_retry_after", BAD_RETRY_AFTER),
        ("429_huge_retry_after", str(HUGE_RETRY_AFTER_S)),
    ],
)
def test_429_faults_lie_about_retry_after(
    db: Any, write: Any, mode: str, retry_after: str | None
) -> None:
    """The 429 faults send no, garbage or absurd Retry-After values."""
    db.set_fault(mode, count=1)
    response = write(db.endpoint)
    assert response.status_code == 429
    assert response.headers.get("Retry-After") == retry_after
    assert db.stats()["accepted"] == 0


def test_a_200_that_is_not_json_still_takes_the_write(db: Any, write: Any) -> None:
    """200_not_json: the write is recorded, the answer is an HTML page."""
    db.set_fault("200_not_json", count=1)
    response = write(db.endpoint, key="a")
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "text/html"
    with pytest.raises(ValueError, match="Expecting value"):
        response.json()
    assert db.accepted_keys() == ["a"]
    assert write(db.endpoint, key="b").json()["status"] == "accepted"


def test_a_fault_window_runs_on_the_sim_clock(db: Any, clock: Any, write: Any) -> None:
    """A 5-s fault ends when the sim clock says so."""
    db.set_fault("503", seconds=5)
    assert write(db.endpoint).status_code == 503
    clock.advance(4.9)
    assert write(db.endpoint).status_code == 503
    clock.advance(0.1)
    assert write(db.endpoint).status_code == 200


def test_faults_over_http(db: Any, http: Any, write: Any) -> None:
    """POST /fault sets one, DELETE /fault clears it; a bad mode is a 400."""
    assert http.post(f"{db.url}/fault", json={"mode": "429_no_retry_after"}).status_code == 202
    assert write(db.endpoint).status_code == 429
    assert write(db.endpoint).status_code == 429
    assert http.delete(f"{db.url}/fault").status_code == 200
    assert write(db.endpoint).status_code == 200
    assert http.post(f"{db.url}/fault", json={"mode": "teapot"}).status_code == 400


def test_a_bad_fault_is_a_configuration_error(db: Any) -> None:
    """Unknown modes and counts below 1 are refused."""
    with pytest.raises(ConfigurationError):
        db.set_fault("teapot")
    with pytest.raises(ConfigurationError):
        db.set_fault("503", count=0)


# -- outages ----------------------------------------------------------------------


def test_a_503_outage_keeps_stats_reachable(db: Any, clock: Any, http: Any, write: Any) -> None:
    """A 60-s 503 outage: writes get 503 with the remaining time; /stats still answers."""
    db.set_outage(60, retry_after=True)
    first = write(db.endpoint)
    assert first.status_code == 503
    assert first.headers["Retry-After"] == "60"
    clock.advance(45.5)
    assert write(db.endpoint).headers["Retry-After"] == "15"
    stats = http.get(f"{db.url}/stats").json()
    assert (stats["outage"], stats["responses_503"], stats["accepted"]) == ("503", 2, 0)
    clock.advance(14.5)
    assert write(db.endpoint).status_code == 200
    assert db.stats()["outage"] is None


def test_a_503_outage_over_http_ends_on_delete(db: Any, http: Any, write: Any) -> None:
    """POST /outage {"mode": "503"} until DELETE /outage."""
    assert http.post(f"{db.url}/outage", json={"mode": "503", "seconds": None}).status_code == 202
    assert write(db.endpoint).status_code == 503
    assert http.delete(f"{db.url}/outage").status_code == 200
    assert write(db.endpoint).status_code == 200


def test_a_refuse_outage_resets_connections_then_reopens_the_same_port(
    db: Any, http: Any, write: Any
) -> None:
    """refuse: pooled and new connections fail; end_outage() rebinds the same port."""
    assert write(db.endpoint, key="before").status_code == 200  # leaves a pooled connection
    port = db.port
    db.set_outage(None, mode="refuse")
    with pytest.raises(httpx.TransportError):
        write(db.endpoint, key="pooled")
    with httpx.Client() as fresh, pytest.raises(httpx.ConnectError):
        fresh.post(db.endpoint, json={}, headers={"Idempotency-Key": "fresh"})
    assert db.stats()["outage"] == "refuse"

    db.end_outage()
    assert db.port == port
    assert write(db.endpoint, key="after").status_code == 200
    assert db.accepted_keys() == ["before", "after"]


def test_a_refuse_outage_ends_by_itself(db: Any) -> None:
    """A timed refuse outage reopens the port without anyone calling end_outage()."""
    db.set_outage(0.2, mode="refuse")

    def reachable() -> bool:
        try:
            httpx.get(f"{db.url}/stats", timeout=2.0)
        except httpx.TransportError:
            return False
        return True

    assert _until(reachable)
    assert db.stats()["outage"] is None


def test_a_refuse_outage_over_http(db: Any, http: Any) -> None:
    """POST /outage {"mode": "refuse"} answers 202, then the port refuses connections."""
    assert http.post(f"{db.url}/outage", json={"mode": "refuse"}).status_code == 202

    def refused() -> bool:
        try:
            httpx.get(f"{db.url}/stats", timeout=2.0)
        except httpx.ConnectError:
            return True
        except httpx.TransportError:
            return False  # accepted just before the close, then reset: not yet refusing
        return False

    assert _until(refused)
    db.end_outage()
    assert http.get(f"{db.url}/stats").status_code == 200


def test_stop_closes_the_port_and_is_idempotent(write: Any) -> None:
    """After stop(), the port refuses connections; a second stop() is a no-op."""
    sim = DatabaseSim(0.0, 0.0).start()
    endpoint = sim.endpoint
    assert write(endpoint).status_code == 200
    sim.stop()
    sim.stop()
    with httpx.Client() as fresh, pytest.raises(httpx.ConnectError):
        fresh.post(endpoint, json={}, headers={"Idempotency-Key": "x"})


def test_stop_waits_for_an_answer_still_being_written() -> None:
    """A handler busy past its client's timeout has finished when stop() returns.

    Otherwise it answers (and logs) after the sim is gone, into whatever runs next.
    """
    entered, release = threading.Event(), threading.Event()
    finished: list[str] = []

    def hold(seconds: float) -> None:
        entered.set()
        release.wait(timeout=30)
        time.sleep(0.2)  # the answer is still being written when stop() is called
        finished.append(threading.current_thread().name)

    sim = DatabaseSim(1.0, 0.0, sleep=hold).start()
    try:
        with (
            httpx.Client(timeout=httpx.Timeout(5.0, read=0.2)) as client,
            pytest.raises(httpx.ReadTimeout),
        ):
            client.post(sim.endpoint, json={}, headers={"Idempotency-Key": "slow"})
        assert entered.wait(timeout=10)
    finally:
        release.set()
        sim.stop()
    assert finished == ["tidegate-sim-database-handler"]
    assert not [t for t in threading.enumerate() if t.name.startswith("tidegate-sim-")]


def test_an_unstarted_sim_has_no_url() -> None:
    """Asking for the URL before start() is a RuntimeError, not a wrong port."""
    with pytest.raises(RuntimeError, match="not started"):
        _ = CustomsSim(1.0).url


# -- reductions -------------------------------------------------------------------


def test_max_in_window_is_half_open() -> None:
    """[t, t + 1) holds 0.0, 0.1 and 0.9 but not 1.0."""
    assert max_in_window([0.0, 0.1, 0.9, 1.0, 1.05], 1.0) == 4
    assert max_in_window([0.0, 1.0, 2.0], 1.0) == 1
    assert max_in_window([], 1.0) == 0


@settings(deadline=None)  # a noisy CI box must not fail on timing
@given(st.lists(st.floats(min_value=0, max_value=100, allow_nan=False), max_size=60))
def test_max_in_window_matches_brute_force(timestamps: list[float]) -> None:
    """The two-pointer scan agrees with counting every window starting at a timestamp."""
    brute = max((sum(1 for u in timestamps if t <= u < t + 1.0) for t in timestamps), default=0)
    assert max_in_window(timestamps, 1.0) == brute


def test_bucket_counts_cover_every_timestamp() -> None:
    """Per-100-ms counts, from the first timestamp (or an explicit start)."""
    stamps = [10.0, 10.1, 10.6, 10.8]
    assert bucket_counts(stamps, 0.25) == [2, 0, 1, 1]
    assert bucket_counts(stamps, 0.25, start=9.5) == [0, 0, 2, 0, 1, 1]
    assert bucket_counts(stamps, 0.25, start=10.5) == [1, 1]
    assert bucket_counts([], 0.25) == []


def test_exported_names() -> None:
    """__all__ names every public object of the package, once."""
    exported = tidegate.sim.__all__
    public = {
        name
        for name, value in vars(tidegate.sim).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name != "annotations"
    }
    assert len(exported) == len(set(exported))
    assert set(exported) == public


def test_rejected_keys_get_422_until_cleared() -> None:
    """A downstream that refuses particular documents (unknown reference data)."""
    import httpx

    from tidegate.sim import TosSim

    with TosSim(max_connections=2, service_s=0.0) as tos:
        tos.reject_keys({"BL-POISON"})
        refused = httpx.post(tos.endpoint, json={}, headers={"Idempotency-Key": "BL-POISON"})
        other = httpx.post(tos.endpoint, json={}, headers={"Idempotency-Key": "BL-OK"})
        tos.reject_keys(())
        later = httpx.post(tos.endpoint, json={}, headers={"Idempotency-Key": "BL-POISON"})

        assert (refused.status_code, other.status_code, later.status_code) == (422, 200, 200)
        assert tos.stats(timeline=False)["distinct_keys"] == 2


def test_a_lookup_answers_whether_a_key_was_accepted(db: Any) -> None:
    """GET <path>/<key>: 200 once a write with that key was accepted, 404 before."""
    url = f"{db.endpoint}/{'VERMAS 1/2'.replace(' ', '%20').replace('/', '%2F')}"
    assert httpx.get(url).status_code == 404
    httpx.post(db.endpoint, json={"n": 1}, headers={"Idempotency-Key": "VERMAS 1/2"})
    found = httpx.get(url)
    assert found.status_code == 200
    assert found.json() == {"status": "accepted", "idempotency_key": "VERMAS 1/2"}
    stats = db.stats(timeline=False)
    assert stats["lookups"] == 2
    assert stats["accepted"] == 1
    assert stats["requests"] == 1


def test_a_lookup_during_an_outage_is_503(db: Any) -> None:
    db.set_outage(None, mode="503")
    assert httpx.get(f"{db.endpoint}/K-1").status_code == 503
