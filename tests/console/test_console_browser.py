"""End to end in a real headless Chromium: the console as an operator uses it.

Debian's ``chromium`` is driven by Playwright (never ``playwright install``). Each test
signs in with HTTP Basic as a browser does, reads figures off the page and checks the
effect of what it clicks in Redis itself. Live updates are awaited with Playwright's
``expect`` (which polls the page); nothing here sleeps.

Set ``TIDEGATE_CONSOLE_SCREENSHOTS=<dir>`` to keep the desktop and phone screenshots.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from playwright.sync_api import BrowserContext, Page, expect

from tidegate.console import ConsoleConfig, Users
from tidegate.console.access import Role
from tidegate.console.history import Point
from tidegate.console.publish import celery_publisher
from tidegate.console.quarantine_replay import celery_quarantine_replayer
from tidegate.flow import Gate
from tidegate.keys import Keyspace
from tidegate.load import DeadLetter, DeadLetterQueue
from tidegate.load.depth import QueueDepth
from tidegate.load.parking import ParkingLot
from tidegate.load.quarantine import Quarantine, QuarantinedDocument
from tidegate.load.watermarks import (
    BoardEntry,
    Level,
    LoadBoard,
    LoadState,
    Signal,
    Watermarks,
)

pytestmark = [pytest.mark.redis, pytest.mark.slow]

User = tuple[str, Role, str]
#: What the page may weigh, everything it loads and one live refresh included.
MAX_PAGE_BYTES = 300 * 1024
#: What the page must never show: a payload, a raw segment, a B/L number.
SECRETS = ("SECRET-PAYLOAD", "UNH+1+VERMAS", "MAEU9988776")


@pytest.fixture
def replay_queue(redis_client: redis.Redis, prefix: str) -> Iterator[str]:
    """The Celery queue replayed letters go to (a Redis list named like the queue)."""
    name = f"{prefix}-replayed"
    yield name
    redis_client.delete(name)


@pytest.fixture
def console_url(  # noqa: PLR0917 - pytest passes fixtures by name
    redis_client: redis.Redis,
    redis_url: str,
    prefix: str,
    replay_queue: str,
    make_users: Callable[..., Users],
    serve: Callable[[redis.Redis, ConsoleConfig], Any],
) -> Iterator[str]:
    """A console over the test's prefix: the customs gateway at 2/s, two dead letters."""
    Gate(redis_client, "customs", prefix=prefix).configure(rate=2.0, burst=4, concurrency=3)
    dlq = DeadLetterQueue(redis_client, prefix=prefix)
    dlq.add(
        DeadLetter(
            key="vermas-0001",
            task="edi.customs.submit",
            reason="rejected by customs: VGM missing",
            payload={"args": ["UNH+1+VERMAS SECRET-PAYLOAD"], "queue": replay_queue},
            first_failed_at=time.time() - 900,
        )
    )
    dlq.add(
        DeadLetter(
            key="bl-0002",
            task="edi.tos.push",
            reason="timeout",
            bl_number="MAEU9988776",
            payload={"args": ["SECRET-PAYLOAD"], "queue": replay_queue},
        )
    )
    publish, close = celery_publisher(redis_url)
    release, close_release = celery_quarantine_replayer(redis_client, redis_url, prefix=prefix)
    served = serve(
        redis_client,
        ConsoleConfig(
            users=make_users(),
            prefix=prefix,
            gates=("customs",),
            publish=publish,
            replay_quarantine=release,
            refresh_s=0.5,
            history_every_s=0.5,
            discover_every_s=0.2,
        ),
    )
    try:
        yield served.url
    finally:
        close()
        close_release()


def _context(browser: Any, user: User, **options: Any) -> BrowserContext:
    name, _, secret = user
    context: BrowserContext = browser.new_context(
        http_credentials={"username": name, "password": secret}, **options
    )
    context.set_default_timeout(30_000)  # a shared 2-CPU machine can take 10 s to load a page
    return context


@pytest.fixture
def as_operator(browser: Any, operator: User) -> Iterator[Page]:
    context = _context(browser, operator)
    try:
        yield context.new_page()
    finally:
        context.close()


def test_gate_figures_follow_the_gate_changed_behind_the_page(
    as_operator: Page, console_url: str, redis_client: redis.Redis, prefix: str
) -> None:
    """Retune and pause the gate in Redis (as the CLI would): the open page shows the new
    figures without a reload."""
    page = as_operator
    page.goto(console_url)
    card = page.locator('[data-gate="customs"]')
    expect(card.locator("h3")).to_have_text("customs gateway")
    expect(card.locator('[data-field="rate"]')).to_have_text("2 /s")
    expect(card.locator('[data-field="leases"]')).to_have_text("0 / 3")
    loads = []
    page.on("load", lambda _: loads.append(1))
    gate = Gate(redis_client, "customs", prefix=prefix)
    gate.configure(rate=7.5, burst=9)
    expect(card.locator('[data-field="rate"]')).to_have_text("7.5 /s")
    expect(card.locator('[data-field="burst"]')).to_have_text("9")
    gate.pause(600, "429 from the gateway")
    expect(card.locator('[data-field="pause"]')).to_contain_text("Paused")
    expect(card.locator('[data-field="pause"]')).to_contain_text("429 from the gateway")
    assert loads == []  # updated in place, never reloaded


def test_pause_a_gate_from_the_page(
    as_operator: Page, console_url: str, redis_client: redis.Redis, prefix: str
) -> None:
    """Fill the pause form, confirm on the second page: the gate is paused in Redis."""
    page = as_operator
    page.goto(console_url)
    form = page.locator("#form-pause")
    form.locator('select[name="target"]').select_option("customs")
    form.locator('input[name="seconds"]').fill("300")
    form.locator('input[name="reason"]').fill("berth 4 crane down")
    form.locator("button").click()
    expect(page.locator("h2")).to_contain_text("Confirm: pause")
    assert Gate(redis_client, "customs", prefix=prefix).state().paused_for_s == 0
    page.locator("#confirm button").click()
    expect(page.locator("#outcome")).to_contain_text("paused for")
    state = Gate(redis_client, "customs", prefix=prefix).state()
    assert 250 < state.paused_for_s <= 300
    assert state.pause_reason == "console: berth 4 crane down"


def test_replay_one_dead_letter_from_the_page(
    as_operator: Page,
    console_url: str,
    redis_client: redis.Redis,
    prefix: str,
    replay_queue: str,
) -> None:
    """Replay the VGM letters, one at most: one Celery message lands on its queue and
    that letter, and only it, is marked in replay."""
    page = as_operator
    page.goto(console_url)
    expect(page.locator("#dlq")).to_contain_text("rejected by customs: VGM missing")
    form = page.locator("#form-replay")
    form.locator('input[name="target"]').fill("VGM")
    form.locator('input[name="rate"]').fill("5")
    form.locator('input[name="limit"]').fill("1")
    form.locator("button").click()
    expect(page.locator("h2")).to_contain_text("Confirm: replay")
    assert redis_client.llen(replay_queue) == 0
    page.locator("#confirm button").click()
    expect(page.locator("#outcome")).to_contain_text("replayed 1, skipped 0")
    messages = [json.loads(raw) for raw in redis_client.lrange(replay_queue, 0, -1)]
    assert [m["headers"]["task"] for m in messages] == ["edi.customs.submit"]
    assert messages[0]["headers"]["tidegate_replay"] == 1
    dlq = DeadLetterQueue(redis_client, prefix=prefix)
    vermas, bl = dlq.get("vermas-0001"), dlq.get("bl-0002")
    assert vermas is not None
    assert vermas.in_replay_until is not None
    assert bl is not None
    assert bl.in_replay_until is None


def test_a_viewer_cannot_act(
    browser: Any, viewer: User, console_url: str, redis_client: redis.Redis, prefix: str
) -> None:
    """A viewer sees the figures but no action form, and a pause they post anyway
    (from the console's own page) is refused 403 with the gate left running."""
    context = _context(browser, viewer)
    try:
        page = context.new_page()
        page.goto(console_url)
        expect(page.locator('[data-gate="customs"] [data-field="rate"]')).to_have_text("2 /s")
        assert page.locator("#form-pause").count() == 0
        status = page.evaluate(
            """async () => (await fetch('/act/pause', {method: 'POST',
                headers: {'Content-Type': 'application/x-www-form-urlencoded'},
                body: 'target=customs&seconds=60&confirmed=yes'})).status"""
        )
    finally:
        context.close()
    assert status == 403
    assert Gate(redis_client, "customs", prefix=prefix).state().paused_for_s == 0


def test_a_forged_post_from_another_site_is_refused(
    browser: Any, operator: User, console_url: str, redis_client: redis.Redis, prefix: str
) -> None:
    """An operator signed in to the console visits a hostile page whose form posts a
    pause to the console: the browser sends the operator's credentials, but not the
    CSRF token, and from another origin — refused, the gate untouched."""
    context = _context(browser, operator)
    hostile = f"""<!doctype html><form id="f" method="post" action="{console_url}/act/pause">
      <input name="target" value="customs"><input name="seconds" value="3600">
      <input name="confirmed" value="yes"></form>
      <script>document.getElementById('f').submit()</script>"""
    try:
        page = context.new_page()
        page.goto(console_url)  # signed in: the browser now holds the credentials
        context.route(
            "http://hostile.test/**",
            lambda route: route.fulfill(status=200, content_type="text/html", body=hostile),
        )
        with page.expect_response(f"{console_url}/act/pause") as answer:
            page.goto("http://hostile.test/")
        assert answer.value.status == 403
        expect(page.locator("#refusal")).to_contain_text("another site")
        # Same origin (a script that got onto the console's page), still without the token.
        page.goto(console_url)
        status, text = page.evaluate(
            """async () => { const a = await fetch('/act/pause', {method: 'POST',
                headers: {'Content-Type': 'application/x-www-form-urlencoded'},
                body: 'target=customs&seconds=3600&confirmed=yes'});
                return [a.status, await a.text()]; }"""
        )
        assert status == 403
        assert "CSRF token" in text
    finally:
        context.close()
    assert Gate(redis_client, "customs", prefix=prefix).state().paused_for_s == 0


def test_the_chart_shows_admissions_against_the_limit(
    as_operator: Page, console_url: str, redis_client: redis.Redis, prefix: str
) -> None:
    """Four calls through the customs gate while the page is open: the console's own
    sampler sees the gate's schedule move, and the customs chart draws admitted/s above
    zero, under a limit line at 2/s."""
    page = as_operator
    page.goto(console_url)
    chart = page.locator('[data-chart-gate="customs"]')
    expect(chart).to_contain_text("limit 2/s")
    gate = Gate(redis_client, "customs", prefix=prefix)
    for _ in range(4):
        with gate.acquire():
            pass
    measured = chart.locator("polyline.line-measured")
    expect(measured).to_have_count(1)
    expect(chart.locator("polyline.line-limit")).to_have_count(1)

    def highest_admitted() -> float:
        points = measured.get_attribute("points") or ""
        heights = [float(xy.split(",")[1]) for xy in points.split()]
        return 80.0 - min(heights)  # SVG y grows downwards from the top of an 80-unit box

    # The chart redraws every period; wait for a redraw whose line left the axis.
    page.wait_for_function(
        """() => {
            const l = document.querySelector(
                '[data-chart-gate="customs"] polyline.line-measured');
            return l && l.getAttribute('points').split(' ')
                .some(p => parseFloat(p.split(',')[1]) < 79.9); }"""
    )
    assert highest_admitted() > 0.1


def test_page_weight_and_nothing_private_shown(as_operator: Page, console_url: str) -> None:
    """The page, its CSS and script and one round of live refreshes stay under 300 KB,
    and no payload, raw segment or B/L number is ever on it."""
    page = as_operator
    sizes: list[int] = []
    page.on("response", lambda response: sizes.append(len(response.body())))
    with (
        page.expect_response(f"{console_url}/live/held"),
        page.expect_response(f"{console_url}/live/charts"),
    ):
        page.goto(console_url)
    expect(page.locator("#dlq")).to_contain_text("timeout")
    html = page.content()
    assert sum(sizes) < MAX_PAGE_BYTES
    assert len(sizes) >= 7  # page, CSS, script, four live views
    for secret in SECRETS:
        assert secret not in html


def _busy_port(client: redis.Redis, prefix: str) -> None:
    """A vessel working: the terminal's gate paused, queues published, a PDF shed,
    terminal reports parked until the pause ends."""
    tos = Gate(client, "tos", prefix=prefix)
    tos.configure(rate=5.0, burst=10, concurrency=8)
    tos.pause(240, "503 from the TOS")
    now = _publish_board(client, prefix)
    lot = ParkingLot(client, prefix=prefix)
    for _ in range(3):
        lot.park({"task": "edi.tos.push"}, delay_s=240, reason="gate_paused")
    Quarantine(client, prefix=prefix).add(
        QuarantinedDocument(
            key="pdf-0001",
            document_class="BULK_BL_PDF",
            queue="bulk.documents",
            task="bulk.documents.store",
        )
    )
    _vessel_history(client, prefix, now)


def _publish_board(client: redis.Redis, prefix: str) -> float:
    """The monitor's latest sample of both queues, taken now; returns now (ms)."""
    board = LoadBoard(client, prefix=prefix)
    now = board.now_ms()
    board.publish(
        [
            BoardEntry(
                state=LoadState(
                    "edi.customs",
                    depth=1850,
                    level=Level.HIGH,
                    signal=Signal.SCALE_OUT,
                    reason="above_hwm",
                    desired_workers=6,
                ),
                depth=QueueDepth("edi.customs", ready=1800, unacked=50),
                marks=Watermarks(hwm=1500, lwm=300),
                sampled_at_ms=now,
                interval_s=5.0,
            ),
            BoardEntry(
                state=LoadState("edi.tos", depth=40, reason="downstream_paused", desired_workers=2),
                depth=QueueDepth("edi.tos", ready=32, unacked=8),
                marks=Watermarks(hwm=1000, lwm=200),
                sampled_at_ms=now,
                interval_s=5.0,
            ),
        ]
    )
    return now


def _vessel_history(client: redis.Redis, prefix: str, now_ms: float) -> None:
    """Fifteen minutes of a vessel working, in the charts' ring: customs quiet, then at
    its 2/s with workers queueing for slots (its schedule a second or two ahead of the
    clock); the terminal's gate at its 5/s until its pause; the customs backlog climbing
    over its high mark, the terminal queue calm."""
    points = []
    step = 5000.0
    for i in range(180):
        t = now_ms - 900_000 + i * step
        customs = t + 1500 + 500 * math.sin(i / 4) if i >= 12 else t - 60_000
        tos = t + 800 if i < 132 else now_ms - 900_000 + 132 * step
        depth = min(1900, 40 + i * 14) if i < 150 else 1900 - (i - 150) * 5 // 3
        points.append(
            Point(
                t,
                {"customs": (customs, 2.0, 4, None), "tos": (tos, 5.0, 10, None)},
                {"edi.customs": (depth, 1500, 300), "edi.tos": (40 + i % 7, 1000, 200)},
            )
        )
    client.lpush(Keyspace(prefix).console_history(), *[p.to_json() for p in points])


@pytest.mark.parametrize(
    ("name", "viewport"),
    [("desktop", {"width": 1440, "height": 900}), ("phone", {"width": 390, "height": 844})],
)
def test_fits_a_phone_and_a_desktop(  # noqa: PLR0917 - pytest passes fixtures by name
    browser: Any,
    operator: User,
    console_url: str,
    redis_client: redis.Redis,
    prefix: str,
    tmp_path: Path,
    name: str,
    viewport: dict[str, int],
) -> None:
    """With every view filled, no sideways scrolling at either width; the screenshot is
    kept when asked."""
    _busy_port(redis_client, prefix)
    context = _context(browser, operator, viewport=viewport, device_scale_factor=1)
    try:
        page = context.new_page()
        page.goto(console_url)
        expect(page.locator("#dlq")).to_be_visible()
        expect(page.locator('[data-gate="tos"] [data-field="pause"]')).to_contain_text("Paused")
        expect(page.locator('#parked [data-field="parked"]')).to_have_text("3")
        expect(
            page.locator('[data-chart-queue="edi.customs"] polyline.line-measured')
        ).to_have_count(1)
        # A loaded machine can take longer than three monitor periods to get here: sample
        # again, so the picture shows live queues, not "sample 20 s old".
        _publish_board(redis_client, prefix)
        expect(page.locator('[data-queue="edi.customs"]')).not_to_have_class(re.compile("stale"))
        width = page.evaluate("document.documentElement.scrollWidth")
        wide = page.evaluate(
            """(w) => Array.from(document.querySelectorAll('*'))
                .filter(e => e.getBoundingClientRect().right > w)
                .map(e => e.tagName + '#' + e.id + '.' + e.className).slice(0, 8)""",
            viewport["width"],
        )
        assert width <= viewport["width"], wide
        folder = Path(os.environ.get("TIDEGATE_CONSOLE_SCREENSHOTS") or tmp_path)
        shot = folder / f"console-{name}.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 0
    finally:
        context.close()
