"""``tidegate demo --console`` as a newcomer runs it: open the printed URL with the
printed password in headless Chromium and watch the burst move.

The demo runs as its own process (its own embedded Redis, workers and sims), exactly
as typed at a terminal; the test reads the URL and the password from its output.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.celery, pytest.mark.slow]

_ANNOUNCED = re.compile(r"console: (http://127\.0\.0\.1:\d+/) · user (\w+) · password (\S+)")


class Demo:
    """A running ``tidegate demo`` and everything it printed so far."""

    def __init__(self, args: list[str]) -> None:
        env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}  # its own Redis
        env["COLUMNS"] = "200"
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "tidegate"), "demo", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        self.lines: list[str] = []
        self.announced = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if _ANNOUNCED.search(line):
                self.announced.set()

    def console(self) -> tuple[str, str, str]:
        """(url, user, password) as the demo printed them."""
        if not self.announced.wait(120):
            raise AssertionError("no console line:\n" + "".join(self.lines))
        match = next(m for line in self.lines if (m := _ANNOUNCED.search(line)))
        return match.group(1), match.group(2), match.group(3)

    def wait(self) -> int:
        code = self.proc.wait(timeout=300)
        self._reader.join(10)
        return code


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[tuple[Demo, Path]]:
    report = tmp_path / "report.json"
    run = Demo(["--interchanges", "300", "--customs-rate", "5", "--console", "--json", str(report)])
    try:
        yield run, report
    finally:
        if run.proc.poll() is None:
            run.proc.terminate()
            run.proc.wait(60)


def test_demo_console_shows_the_burst_moving(demo: tuple[Demo, Path], browser: Any) -> None:
    """The console answers on loopback with the printed password only; in Chromium the
    customs queue's depth and the gates' figures (tokens, calls in flight) change while
    the page stays open, the customs gateway shows the rate the workers were given and
    has its chart; the demo still delivers everything once."""
    run, report_path = demo
    url, user, password = run.console()
    assert password not in "".join(line for line in run.lines if "console:" not in line)

    context = browser.new_context(http_credentials={"username": user, "password": password})
    context.set_default_timeout(60_000)
    try:
        page = context.new_page()
        page.goto(url)
        # The socket listens from the start; the console answers once the fleet is up
        # (the run's prefix is known then), so this first load waits for it.
        wait = {"timeout": 60_000}  # a loaded 2-CPU machine runs the demo slowly
        depth = page.locator('[data-queue="edi.customs"] [data-field="depth"]')
        expect(depth).to_be_visible(**wait)
        expect(page.locator('[data-gate="customs"] [data-field="rate"]')).to_have_text(
            "5 /s", **wait
        )
        gates = page.locator("#gates dl")
        first_depth, first_gates = depth.inner_text(), gates.all_inner_texts()
        expect(depth).not_to_have_text(first_depth, **wait)
        expect(gates).not_to_have_text(first_gates, **wait)
        admitted = page.locator('[data-chart-gate="customs"] [data-field="admitted"]')
        expect(admitted).to_have_text(re.compile(r"^\d+\.\d$"), **wait)
        assert httpx.get(url, timeout=30, auth=(user, "not-the-password")).status_code == 401
    finally:
        context.close()

    assert run.wait() == 0, "".join(run.lines[-40:])
    report = json.loads(report_path.read_text())
    assert report["delivered"] == report["submitted"] == 300
    assert report["lost"] == 0
    assert "chaos" not in report
    with pytest.raises(httpx.TransportError):
        httpx.get(url, timeout=5)  # closed with the run


@pytest.mark.parametrize("scenario", ["bulk", "overload", "gate"])
def test_console_is_refused_where_it_would_do_nothing(scenario: str) -> None:
    """Only the vessel burst carries a console: elsewhere --console is a usage error,
    before anything starts."""
    from click.testing import CliRunner

    from tidegate.cli import cli

    result = CliRunner().invoke(cli, ["demo", "--scenario", scenario, "--console"])
    assert result.exit_code == 2
    assert "--console does not apply" in result.output
