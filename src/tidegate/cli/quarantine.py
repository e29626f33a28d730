"""``tidegate quarantine ls | replay | purge``: the shed documents, for an operator.

``replay`` is bounded (``--limit``, 100 by default) and goes through the normal
intake: a queue that is still under sustained overload keeps its documents (they are
put back in line) unless ``--force``. ``purge`` deletes documents for good and asks
for ``--yes``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import click
from rich.table import Table

from tidegate.cli._common import (
    TidegateCLIError,
    connection_options,
    echo_json,
    redis_client,
    redis_url_option,
)
from tidegate.cli._output import console, print_table
from tidegate.cli.monitor import (
    broker_url_option,
    build_replay_admission,
    prefix_option,
    resolve_broker,
    sender_option,
)

__all__ = ["DEFAULT_REPLAY_LIMIT", "quarantine"]

#: Documents replayed by one ``tidegate quarantine replay`` unless ``--limit`` says more.
DEFAULT_REPLAY_LIMIT = 100

queue_option = click.option("--queue", default=None, help="Only this queue.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _render(listing: dict[str, Any]) -> None:
    out = console()
    counters = Table(title=f"quarantine: {listing['documents']} document(s) waiting")
    for column in ("queue", "waiting"):
        counters.add_column(column)
    for queue, waiting in listing["by_queue"].items():
        counters.add_row(queue, str(waiting))
    print_table(out, counters)
    for label, counts in (("shed", listing["shed_total"]), ("replayed", listing["replayed_total"])):
        out.print(
            f"{label}: " + (", ".join(f"{name} {n}" for name, n in counts.items()) or "none"),
            markup=False,
        )
    out.print(
        f"oldest waiting: {listing['oldest_age_s']}s; duplicates: {listing['duplicates']}; "
        f"purged: {listing['purged']}",
        markup=False,
    )
    documents = Table(title=f"oldest documents ({len(listing['documents_listed'])} listed)")
    for column in ("key", "class", "queue", "task", "reason", "depth", "quarantined at"):
        documents.add_column(column)
    for doc in listing["documents_listed"]:
        documents.add_row(
            doc["key"],
            doc["document_class"],
            doc["queue"],
            doc["task"],
            doc["reason"],
            str(doc["depth"]),
            _when(doc["quarantined_at"]),
        )
    print_table(out, documents)


@click.group()
def quarantine() -> None:
    """List, replay or purge the documents shed under overload."""


@quarantine.command("ls")
@connection_options
@queue_option
@click.option(
    "--limit",
    type=click.IntRange(1),
    default=20,
    show_default=True,
    help="Most documents listed (oldest first).",
)
@json_option
def ls(redis_url: str | None, prefix: str, queue: str | None, limit: int, as_json: bool) -> None:
    """Counters and the oldest documents, whole keys (metadata only, never the payload)."""
    from tidegate.load.quarantine import Quarantine

    with redis_client(redis_url) as client:
        store = Quarantine(client, prefix=prefix)
        listing = {
            **store.stats(),
            "documents_listed": [doc.summary() for doc in store.iter(queue=queue, limit=limit)],
        }
    if as_json:
        echo_json(listing)
    else:
        _render(listing)


@quarantine.command("replay")
@redis_url_option
@broker_url_option
@prefix_option
@queue_option
@click.option(
    "--limit",
    type=click.IntRange(1),
    default=DEFAULT_REPLAY_LIMIT,
    show_default=True,
    help="Most documents replayed per queue by this run.",
)
@click.option("--force", is_flag=True, help="Replay even if the queue is still overloaded.")
@sender_option
def replay(
    redis_url: str | None,
    broker_url: str | None,
    prefix: str,
    queue: str | None,
    limit: int,
    force: bool,
    sender: str,
) -> None:
    """Queue quarantined documents again, oldest first, through the intake.

    Documents another replay has claimed and not yet queued are skipped and counted
    (``skipped``): two replays never queue one document twice.
    """
    from tidegate.load.quarantine import Quarantine

    broker = resolve_broker(redis_url, broker_url)
    with redis_client(redis_url) as client:
        queues = [queue] if queue else Quarantine(client, prefix=prefix).queues()
        if not queues:
            echo_json({"replayed": 0, "released": 0, "skipped": 0, "queues": {}})
            return
        admission = build_replay_admission(client, broker, queues, prefix=prefix, sender=sender)
        results = {}
        for name in queues:
            report = admission.replay(name, limit, force=force)
            results[name] = {
                "replayed": report.replayed,
                "released": report.released,
                "skipped": report.skipped,
                "by_class": dict(report.by_class),
            }
        echo_json(
            {
                "replayed": sum(r["replayed"] for r in results.values()),
                "released": sum(r["released"] for r in results.values()),
                "skipped": sum(r["skipped"] for r in results.values()),
                "queues": results,
            }
        )


@quarantine.command("purge")
@connection_options
@queue_option
@click.option("--yes", is_flag=True, help="Confirm: the documents are deleted for good.")
@click.option("--json", "as_json", is_flag=True, help="Print the count as JSON.")
def purge(redis_url: str | None, prefix: str, queue: str | None, yes: bool, as_json: bool) -> None:
    """Delete quarantined documents for good (needs --yes)."""
    from tidegate.load.quarantine import Quarantine

    if not yes:
        raise TidegateCLIError(
            "purge deletes quarantined documents for good; pass --yes to confirm"
        )
    with redis_client(redis_url) as client:
        purged = Quarantine(client, prefix=prefix).purge(queue=queue)
    if as_json:
        echo_json({"purged": purged})
    else:
        click.echo(f"purged {purged} quarantined document(s)")
