"""What the operator console costs: page weight in a real browser, Redis round trips per
view per refresh, and the charts' sampler with several consoles on one fleet.

A fleet's keyspace is filled as during a vessel burst — ``--gates`` gates (one paused),
four queues on the monitor's board, 200 dead letters, 50 quarantined documents, 100
parked units and fifteen minutes of chart points — and one console is served over a
client whose connections count what they send (one count per round trip: a pipeline
is one write). Then:

1. **page weight** — headless Chromium (``/usr/bin/chromium``) loads the page and waits
   for one live refresh of every view; the weight is the sum over every response of
   its header and body bytes as the browser received them (Playwright's
   ``request.sizes()``), page, CSS, script and the refreshes included;
2. **round trips per view per refresh** — each live view is fetched 20 times over HTTP;
   the round trips its reads sent are counted on the console's client, and the commands
   Redis executed for it are read from ``INFO commandstats`` before and after (the
   ``info`` calls themselves excluded);
3. **sampler** — ``--consoles`` samplers tick in the same period, 20 periods: the round
   trips of all of them together, and the points stored.

Every figure is a count, not a time, so the machine's load does not move it.

Run: ``python bench/console.py [--gates 3,30] [--consoles 3] [--out bench/results/console.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import redis
import uvicorn

from _harness import machine_info, md_table, write_json
from tidegate.console import ConsoleConfig, Users, create_app, hash_secret
from tidegate.console.access import Role
from tidegate.console.history import Point
from tidegate.console.sampler import HistorySampler
from tidegate.flow import Gate
from tidegate.keys import Keyspace
from tidegate.load import DeadLetter, DeadLetterQueue
from tidegate.load.depth import QueueDepth
from tidegate.load.parking import ParkingLot
from tidegate.load.quarantine import Quarantine, QuarantinedDocument
from tidegate.load.watermarks import BoardEntry, LoadBoard, LoadState, Watermarks
from tidegate.redis_server import redis_url

CHROMIUM = os.environ.get("TIDEGATE_CHROMIUM", "/usr/bin/chromium")
VIEWS = ("gates", "queues", "held", "charts")
USER, SECRET = "bench", "bench-operator-secret"
QUEUES = ("edi.customs", "edi.tos", "bulk.dispatch", "bulk.documents")


class Counted:
    """Round trips sent by every connection of one pool."""

    def __init__(self) -> None:
        self.sent = 0


def counting_client(url: str, counted: Counted) -> redis.Redis:
    class Connection(redis.Connection):
        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            counted.sent += 1
            super().send_packed_command(command, check_health)

    return redis.Redis(
        connection_pool=redis.ConnectionPool.from_url(url, connection_class=Connection)
    )


def fill(client: redis.Redis, prefix: str, gates: int) -> list[str]:
    """A fleet mid-burst; returns the gate names."""
    names = ["customs", "tos", "docstore", *(f"partner-{i:02d}" for i in range(gates - 3))][:gates]
    for i, name in enumerate(names):
        Gate(client, name, prefix=prefix).configure(rate=2.0 + i, burst=4, concurrency=3)
    Gate(client, "tos", prefix=prefix).pause(240, "503 from the TOS")
    board = LoadBoard(client, prefix=prefix)
    now = board.now_ms()
    board.publish(
        [
            BoardEntry(
                state=LoadState(queue, depth=100 * (i + 1), reason="within_watermarks"),
                depth=QueueDepth(queue, ready=90 * (i + 1), unacked=10 * (i + 1)),
                marks=Watermarks(hwm=1500, lwm=300),
                sampled_at_ms=now,
                interval_s=5.0,
            )
            for i, queue in enumerate(QUEUES)
        ]
    )
    dlq = DeadLetterQueue(client, prefix=prefix)
    for n in range(200):
        dlq.add(
            DeadLetter(
                key=f"vermas-{n:04d}",
                task="edi.customs.submit",
                reason=("rejected by customs: VGM missing", "timeout")[n % 2],
                payload={"args": ["UNH+1+VERMAS" + "x" * 600], "queue": "edi.customs"},
                first_failed_at=time.time() - n,
            )
        )
    quarantine = Quarantine(client, prefix=prefix)
    for n in range(50):
        quarantine.add(
            QuarantinedDocument(
                key=f"pdf-{n:04d}",
                document_class="BULK_BL_PDF",
                queue="bulk.documents",
                task="bulk.documents.store",
                payload={"pdf": "x" * 600},
            )
        )
    lot = ParkingLot(client, prefix=prefix)
    for _ in range(100):
        lot.park({"task": "edi.tos.push"}, delay_s=240, reason="gate_paused")
    points = [
        Point(
            now - 900_000 + i * 5000,
            dict.fromkeys(names, (now - 900000 + i * 5000 + 500, 2.0, 4, None)),
            dict.fromkeys(QUEUES, (100 + i, 1500, 300)),
        )
        for i in range(180)
    ]
    client.lpush(Keyspace(prefix).console_history(), *[p.to_json() for p in points])
    return names


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def served(client: redis.Redis, prefix: str) -> Iterator[str]:
    users = Users([(USER, Role.OPERATOR, hash_secret(SECRET, iterations=1000))])
    app = create_app(
        client,
        ConsoleConfig(
            users=users, prefix=prefix, refresh_s=2.0, history_every_s=0, discover_every_s=3600
        ),
    )
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)


def page_weight(url: str) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        context = browser.new_context(http_credentials={"username": USER, "password": SECRET})
        page = context.new_page()
        responses: list[Any] = []
        page.on("requestfinished", lambda r: responses.append(r))  # noqa: PLW0108 - Playwright needs a Python function
        waits = [page.expect_response(f"{url}/live/{view}") for view in VIEWS]
        for wait in waits:
            wait.__enter__()
        page.goto(url)
        for wait in waits:
            wait.__exit__(None, None, None)
        page.wait_for_load_state("networkidle")
        by_path: dict[str, int] = {}
        for request in responses:
            sizes = request.sizes()
            size = sizes["responseHeadersSize"] + sizes["responseBodySize"]
            path = request.url.removeprefix(url) or "/"
            by_path[path] = by_path.get(path, 0) + size
        browser.close()
    return {"bytes": sum(by_path.values()), "responses": len(responses), "by_path": by_path}


def commands(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {k: int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info"}


def uncached(http: httpx.Client, view: str, counted: Counted) -> int:
    """Round trips of one read of ``view`` when no cached answer is fresh (the charts
    are cached per half period in each console; the other views never are)."""
    if view == "charts":
        time.sleep(3.0)  # past the half period of the default 5-s chart period
    sent = counted.sent
    http.get(f"/live/{view}").raise_for_status()
    return counted.sent - sent


def view_costs(url: str, counted: Counted, probe: redis.Redis, repeat: int = 20) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with httpx.Client(base_url=url, auth=(USER, SECRET), timeout=30) as http:
        http.get("/").raise_for_status()  # signs in and discovers the gates once
        for view in VIEWS:
            trips, cmds = [], []
            for _ in range(repeat):
                before, sent = commands(probe), counted.sent
                http.get(f"/live/{view}").raise_for_status()
                trips.append(counted.sent - sent)
                after = commands(probe)
                cmds.append(sum(after.get(k, 0) - before.get(k, 0) for k in after))
            out[view] = {
                "round_trips_max": max(trips),
                "round_trips_uncached": uncached(http, view, counted),
                "round_trips_min": min(trips),
                "commands_median": sorted(cmds)[len(cmds) // 2],
                "response_bytes": len(http.get(f"/live/{view}").content),
            }
    return out


def sampler_cost(url: str, prefix: str, names: list[str], consoles: int) -> dict[str, Any]:
    counted = Counted()
    client = counting_client(url, counted)
    keys = Keyspace(prefix)
    client.delete(keys.console_history())  # also opens the connection: its set-up is not counted
    samplers = [
        HistorySampler(client, prefix=prefix, gates=lambda: names, every_s=0.2)
        for _ in range(consoles)
    ]
    periods, stored, sent = 20, 0, 0
    for _ in range(periods):
        client.delete(keys.console_turn())  # a new period for every sampler
        before = counted.sent
        stored += sum(s.tick() is not None for s in samplers)
        sent += counted.sent - before

    client.close()
    return {
        "consoles": consoles,
        "periods": periods,
        "points_stored": stored,
        "round_trips_per_period": sent / periods,
    }


def run(url: str, gates: int, consoles: int) -> dict[str, Any]:
    prefix = f"tgbench-console-{uuid.uuid4().hex[:8]}"
    plain = redis.Redis.from_url(url)
    names = fill(plain, prefix, gates)
    counted = Counted()
    client = counting_client(url, counted)
    try:
        with served(client, prefix) as console:
            weight = page_weight(console)
            costs = view_costs(console, counted, plain)
        sampler = sampler_cost(url, prefix, names, consoles)
    finally:
        keys = list(plain.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            plain.delete(*keys)
        client.close()
    return {"gates": gates, "page": weight, "views": costs, "sampler": sampler}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gates", default="3,30")
    parser.add_argument("--consoles", type=int, default=3)
    parser.add_argument("--out", default="bench/results/console.json")
    args = parser.parse_args()
    with redis_url() as url:
        info = machine_info(redis.Redis.from_url(url), ["starlette", "uvicorn", "playwright"])
        runs = [run(url, int(g), args.consoles) for g in args.gates.split(",")]
    rows = []
    for result in runs:
        for view, cost in result["views"].items():
            rows.append(
                [
                    result["gates"],
                    view,
                    f"{cost['round_trips_min']}–{cost['round_trips_max']}"
                    f" (uncached {cost['round_trips_uncached']})",
                    cost["commands_median"],
                    f"{cost['response_bytes']:,}",
                ]
            )
    print(md_table(["gates", "view", "round trips per refresh", "commands", "bytes"], rows))
    for result in runs:
        page, sampler = result["page"], result["sampler"]
        print(
            f"gates={result['gates']}: page {page['bytes']:,} B in {page['responses']} responses;"
            f" sampler with {sampler['consoles']} consoles: {sampler['round_trips_per_period']}"
            f" round trips and {sampler['points_stored'] / sampler['periods']:g} point per period"
        )
    write_json(args.out, {"machine": info, "runs": runs, "argv": sys.argv[1:]})
    print(json.dumps({"out": args.out}))


if __name__ == "__main__":
    main()
