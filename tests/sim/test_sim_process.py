"""``python -m tidegate.sim``: a sim in its own process, announced on stdout."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

import tidegate
from tidegate.errors import ConfigurationError
from tidegate.sim import SimProcess, SimProcessError
from tidegate.sim._cli import main


def _first_line(proc: subprocess.Popen[str], timeout: float = 30.0) -> str:
    """The child's first stdout line, or fail (with its stderr) instead of hanging."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            proc.kill()
            pytest.fail("the sim process printed nothing")
    line = proc.stdout.readline()
    if not line:
        _, stderr = proc.communicate(timeout=10)
        pytest.fail(f"the sim process exited with {proc.returncode}: {stderr}")
    return line


@pytest.fixture
def spawn() -> Iterator[Any]:
    """Start ``python -m tidegate.sim ARGS``; kill whatever is left at teardown."""
    procs: list[subprocess.Popen[str]] = []
    src = str(Path(tidegate.__file__).resolve().parents[1])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])),
    }

    def _spawn(*args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tidegate.sim", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        procs.append(proc)
        return proc

    yield _spawn
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


def test_customs_runs_as_its_own_process(spawn: Any) -> None:
    """Read the URL line, get one 200 and one 429, read /stats, SIGTERM exits 0."""
    proc = spawn("customs", "--port", "0", "--rate", "0.01", "--burst", "1")
    announced = json.loads(_first_line(proc))
    assert announced["kind"] == "customs"
    assert announced["url"].startswith("http://127.0.0.1:")
    assert announced["endpoint"] == announced["url"] + "/declarations"

    with httpx.Client(base_url=announced["url"], timeout=10.0) as client:
        statuses = [
            client.post("/declarations", json={"n": i}, headers={"Idempotency-Key": f"k{i}"})
            for i in range(2)
        ]
        assert [r.status_code for r in statuses] == [200, 429]
        assert int(statuses[1].headers["Retry-After"]) >= 1
        stats = client.get("/stats").json()
    assert (stats["accepted"], stats["responses_429"]) == (1, 1)

    proc.send_signal(signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert stdout == ""  # nothing after the announcement


@pytest.mark.parametrize(
    ("args", "path"),
    [
        (["tos", "--max-connections", "2", "--service-s", "0"], "/container-reports"),
        (["database", "--base-latency-s", "0", "--per-writer-s", "0"], "/writes"),
    ],
)
def test_tos_and_database_run_as_processes(spawn: Any, args: list[str], path: str) -> None:
    """Each kind announces itself and accepts a write on its default path."""
    proc = spawn(*args)
    announced = json.loads(_first_line(proc))
    assert announced["path"] == path
    response = httpx.post(
        announced["endpoint"], json={"n": 1}, headers={"Idempotency-Key": "a"}, timeout=10.0
    )
    assert response.status_code == 200
    proc.terminate()
    proc.communicate(timeout=10)
    assert proc.returncode == 0


@pytest.mark.parametrize(
    "args",
    [
        ["customs", "--rate", "0"],
        ["customs", "--burst", "0"],
        ["customs", "--suspend-s", "-1"],
        ["tos", "--max-connections", "0"],
        ["database", "--path", "/stats"],
    ],
)
def test_bad_options_exit_with_a_usage_error(args: list[str]) -> None:
    """Invalid options are refused before anything is bound."""
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2


def test_sim_process_reads_a_sim_in_another_process() -> None:
    """:class:`SimProcess`: the sim is a separate process, its stats and accepted keys
    (duplicates included, in accept order) are read over HTTP, and it is gone after."""
    with SimProcess("tos", "--max-connections", "2", "--service-s", "0") as tos:
        assert tos.pid != os.getpid()
        with httpx.Client(timeout=10.0) as client:
            for key in ("b", "a", "b"):
                response = client.post(
                    tos.endpoint, json={"n": 1}, headers={"Idempotency-Key": key}
                )
                assert response.status_code == 200
        assert tos.accepted_keys() == ["b", "a", "b"]
        stats = tos.stats()
        assert (stats["accepted"], stats["distinct_keys"], stats["duplicates"]) == (3, 2, 1)
        assert len(stats["service_timeline"]) == 3
        assert "accept_timeline" not in tos.stats(timeline=False)
        pid = tos.pid
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(SimProcessError, match="not running"):
        tos.stats()


def test_sim_process_refused_arguments_are_a_configuration_error() -> None:
    """A usage error in the child is the parent's typed error, with the child's words."""
    with pytest.raises(ConfigurationError, match="max-connections"):
        SimProcess("tos", "--max-connections", "0").start()


def test_sim_process_that_dies_before_announcing_is_a_typed_error() -> None:
    """A kind the sim does not know exits non-zero: :class:`SimProcessError`... or a
    usage error, both typed; never a hang or a bare JSON error."""
    with pytest.raises((SimProcessError, ConfigurationError)):
        SimProcess("no-such-sim").start()


_PARENT = """
import sys
import time
from tidegate.sim import SimProcess

with SimProcess("tos", "--service-s", "0") as tos:
    print(tos.url, flush=True)
    sys.stdin.read()  # until the test kills this process
"""


def test_a_sim_process_does_not_outlive_a_parent_killed_without_warning() -> None:
    """A demo SIGKILLed (the OOM killer, ``kill -9``) never runs ``stop()``: its TOS sim
    kept serving on its port until someone found it. The sim holds the parent's end of
    its stdin; when the parent dies the kernel closes it, and the sim exits."""
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = _first_line(parent).strip()
        assert httpx.get(f"{url}/stats", timeout=10.0).status_code == 200
        parent.kill()
        parent.wait(timeout=10)
        deadline = time.monotonic() + 20.0
        serving = True
        while serving and time.monotonic() < deadline:
            try:
                httpx.get(f"{url}/stats", timeout=1.0)
            except httpx.TransportError:
                serving = False
        assert not serving, "the sim still answers after its parent was killed"
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.communicate(timeout=10)
