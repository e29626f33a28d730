"""The console's actions against a real fleet, checked on the downstream's own record.

One real Celery worker pool (the vessel app's customs pool) calls a simulated customs
gateway for the whole module. An operator in headless Chromium pauses the gateway from
the page — and the gateway's record shows the workers stop calling it — or replays a
quarantined document from the page — and the gateway's record shows it delivered.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from playwright.sync_api import Page, expect

from tidegate._redis import client_from_url
from tidegate.console import ConsoleConfig, Users
from tidegate.console.access import Role
from tidegate.console.publish import celery_publisher
from tidegate.console.quarantine_replay import celery_quarantine_replayer
from tidegate.flow import Gate
from tidegate.harness.burst import vessel_burst
from tidegate.harness.celery_fleet import Fleet, Pool
from tidegate.harness.polling import wait_for
from tidegate.load.quarantine import Quarantine, QuarantinedDocument
from tidegate.sim import CustomsSim

pytestmark = [pytest.mark.redis, pytest.mark.celery, pytest.mark.slow]

#: The workers' longest wait in place for the gate (a slot reserved before a pause
#: may still be used this long after it).
MAX_WAIT_S = 1.5
#: Customs worker processes: at most this many calls are under way at any instant.
WORKERS = 2


@dataclass
class Port:
    url: str
    prefix: str
    client: redis.Redis
    customs: CustomsSim
    producer: Celery

    def customs_documents(self, count: int) -> list[tuple[str, dict[str, Any], str]]:
        """``count`` customs documents with keys no other test uses: (key, envelope, class)."""
        salt = uuid.uuid4().hex[:12]
        out = []
        for doc in vessel_burst(count * 40, seed=time.time_ns()):
            if doc.queue == "edi.customs":
                envelope = {**doc.envelope(), "key": f"{doc.key[:40]}-{salt}"}
                out.append((str(envelope["key"]), envelope, doc.document_class))
                if len(out) == count:
                    return out
        raise AssertionError("the burst did not hold enough customs documents")

    def accepted(self) -> int:
        return int(self.customs.stats(timeline=False)["distinct_keys"])

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 60.0) -> None:
        """Poll a real condition (not a sleep) until it holds or fail with the gateway's
        record."""
        wait_for(predicate, timeout_s, lambda: str(self.customs.stats()), every_s=0.1)


@pytest.fixture(scope="module")
def port(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Port]:
    """A customs gateway at 5/s and the customs worker pool calling it through the gate."""
    prefix = f"tgcon-{uuid.uuid4().hex[:8]}"
    client = client_from_url(redis_url)
    with CustomsSim(rate=5.0, burst=3) as customs:
        env = {
            "TIDEGATE_REDIS_URL": redis_url,
            "TIDEGATE_PREFIX": prefix,
            "TIDEGATE_CUSTOMS_URL": customs.url,
            "TIDEGATE_TOS_URL": customs.url,
            "TIDEGATE_CUSTOMS_RATE": "5",
            "TIDEGATE_CUSTOMS_BURST": "1",
            "TIDEGATE_MAX_WAIT_S": repr(MAX_WAIT_S),
        }
        log_dir: Path = tmp_path_factory.mktemp("console-fleet-logs")
        fleet = Fleet(
            "tidegate.harness.vessel_app",
            [Pool("customs", ["edi.customs"], concurrency=WORKERS)],
            env=env,
            log_dir=log_dir,
        )
        producer = Celery(broker=redis_url, set_as_current=False)
        fleet.start()
        try:
            yield Port(redis_url, prefix, client, customs, producer)
        finally:
            fleet.stop()
            producer.close()
            keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
            if keys:
                client.delete(*keys)
            client.delete("edi.customs")
            client.close()


@pytest.fixture
def console(
    port: Port,
    make_users: Callable[..., Users],
    serve: Callable[[redis.Redis, ConsoleConfig], Any],
) -> Iterator[str]:
    """The console on the port's fleet, replay of dead letters and quarantine on."""
    port.customs.reset()
    publish, close_publish = celery_publisher(port.url)
    release, close_release = celery_quarantine_replayer(port.client, port.url, prefix=port.prefix)
    served = serve(
        port.client,
        ConsoleConfig(
            users=make_users(),
            prefix=port.prefix,
            gates=("customs",),
            publish=publish,
            replay_quarantine=release,
            refresh_s=0.5,
            history_every_s=1.0,
            gate_env={"TIDEGATE_CUSTOMS_RATE": "5", "TIDEGATE_CUSTOMS_BURST": "1"},
        ),
    )
    try:
        yield served.url
    finally:
        close_publish()
        close_release()


@pytest.fixture
def page(browser: Any, operator: tuple[str, Role, str]) -> Iterator[Page]:
    name, _, secret = operator
    context = browser.new_context(http_credentials={"username": name, "password": secret})
    context.set_default_timeout(15_000)
    try:
        yield context.new_page()
    finally:
        context.close()


def test_pause_from_the_page_stops_the_workers_calling_the_gateway(
    port: Port, console: str, page: Page
) -> None:
    """100 filings flow at 5/s; the operator pauses the customs gateway from the page.
    On the gateway's own record: once the calls already admitted have landed (at most
    one per worker, up to the longest wait in place later), no call arrives for the
    rest of the pause — and when it ends by itself, every filing is delivered once."""
    page.goto(console)
    expect(page.locator('[data-gate="customs"] [data-field="rate"]')).to_have_text("5 /s")
    form = page.locator("#form-pause")
    form.locator('input[name="seconds"]').fill("20")
    form.locator('input[name="reason"]').fill("gateway maintenance")
    form.locator("button").click()
    confirm = page.locator("#confirm button")
    expect(confirm).to_be_visible()  # the pause is one click away before anything flows
    documents = port.customs_documents(100)
    for _, envelope, _ in documents:
        port.producer.send_task("edi.customs.submit", args=[envelope], queue="edi.customs")
    port.wait_for(lambda: port.accepted() >= 3)
    confirm.click()
    expect(page.locator("#outcome")).to_contain_text("paused for")
    paused_at = time.time()
    at_pause = port.accepted()

    # An observation window inside the pause: the workers have every chance to call.
    window_end = paused_at + 6.0
    port.wait_for(lambda: time.time() >= window_end, timeout_s=10)
    stats = port.customs.stats()
    late = [t for t in stats["accept_timeline"] if t > paused_at + MAX_WAIT_S + 0.5]
    assert late == []
    assert stats["distinct_keys"] - at_pause <= WORKERS
    assert stats["distinct_keys"] < len(documents)  # work was waiting all along

    port.wait_for(lambda: port.accepted() == len(documents), timeout_s=180)
    assert port.customs.stats(timeline=False)["duplicates"] == 0
    assert Gate(port.client, "customs", prefix=port.prefix).state().paused_for_s == 0


def test_replay_a_quarantined_document_from_the_page(port: Port, console: str, page: Page) -> None:
    """A VERMAS shed under overload waits in the quarantine; the operator replays it from
    the page; the gateway's record shows it delivered, once, and the quarantine is empty."""
    ((key, envelope, document_class),) = port.customs_documents(1)
    quarantine = Quarantine(port.client, prefix=port.prefix)
    quarantine.add(
        QuarantinedDocument(
            key=key,
            document_class=document_class,
            queue="edi.customs",
            task="edi.customs.submit",
            payload=envelope,
            depth=2500,
        )
    )
    page.goto(console)
    expect(page.locator("#quarantine")).to_contain_text(document_class)
    form = page.locator("#form-release")
    expect(form.locator('select[name="target"]')).to_have_value("edi.customs")
    form.locator('input[name="limit"]').fill("1")
    form.locator("button").click()
    expect(page.locator("h2")).to_contain_text("Confirm: replay-quarantine")
    assert len(quarantine) == 1
    page.locator("#confirm button").click()
    expect(page.locator("#outcome")).to_contain_text("replayed 1")

    port.wait_for(lambda: key in port.customs.accepted_keys(), timeout_s=30)
    assert port.customs.accepted_keys().count(key) == 1
    assert len(quarantine) == 0
