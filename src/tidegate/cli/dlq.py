"""``tidegate dlq``: list, show, replay and purge dead letters.

Keys are printed whole: idempotency keys of the same kind share long prefixes (three
VERMAS keys can agree on their first 16 characters) and a B/L key may be 64 characters,
so a shortened key could neither be told apart nor pasted. ``show`` also takes a unique
start of a key.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import click
from rich.table import Table

from tidegate.cli._common import (
    FiniteFloat,
    TidegateCLIError,
    connection_options,
    echo_json,
    prefix_option,
    redis_client,
    redis_url_option,
    resolve_redis_url,
)
from tidegate.cli._output import console, print_table
from tidegate.flow import RateLimiter
from tidegate.load import DeadLetter, DeadLetterQueue
from tidegate.load.dlq import DEFAULT_REPLAY_HOLD_S
from tidegate.load.replay import DEFAULT_REPLAY_LIMIT, replay_dead_letters

__all__ = ["dlq"]

#: Fastest ``dlq replay --rate``: a replay feeds slow downstreams, it must never be a storm.
MAX_REPLAY_RATE = 1000.0
#: Most keys named in an "ambiguous key" error.
_AMBIGUOUS_SHOWN = 5


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


@click.group()
def dlq() -> None:
    """Dead letters: units that could not be delivered, with the reason."""


@dlq.command(name="ls")
@click.option("--reason", help="Only records whose reason contains this text.")
@click.option("--batch", "batch_id", help="Only records of this manifest batch.")
@click.option(
    "--limit",
    type=click.IntRange(1),
    default=100,
    show_default=True,
    help="Most records listed (oldest first).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@connection_options
def ls(
    reason: str | None,
    batch_id: str | None,
    limit: int,
    as_json: bool,
    redis_url: str | None,
    prefix: str,
) -> None:
    """List dead letters, oldest first, with their whole keys (never their payload)."""
    with redis_client(redis_url) as client:
        queue = DeadLetterQueue(client, prefix=prefix)
        letters = list(queue.iter(reason=reason, batch_id=batch_id, limit=limit))
        total = len(queue)
    if as_json:
        echo_json([letter.summary() for letter in letters])
        return
    table = Table(title=f"dead letters ({len(letters)} shown of {total})")
    for column in ("key", "task", "reason", "attempts", "replays", "B/L", "batch", "first failed"):
        table.add_column(column)
    for letter in letters:
        table.add_row(
            letter.key,
            letter.task,
            letter.reason,
            str(letter.attempts),
            str(letter.replays),
            letter.bl_number or "",
            letter.batch_id or "",
            _when(letter.first_failed_at),
        )
    print_table(console(), table)


def _find(queue: DeadLetterQueue, key: str) -> DeadLetter:
    """The record with ``key``, else the one record whose key starts with ``key``."""
    letter = queue.get(key)
    if letter is not None:
        return letter
    matches = [found for found in queue.iter() if found.key.startswith(key)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise TidegateCLIError(f"no dead letter with key {key!r} (nor a key starting with it)")
    shown = ", ".join(found.key for found in matches[:_AMBIGUOUS_SHOWN])
    more = f" and {len(matches) - _AMBIGUOUS_SHOWN} more" if len(matches) > _AMBIGUOUS_SHOWN else ""
    raise TidegateCLIError(
        f"{len(matches)} dead letters have a key starting with {key!r} ({shown}{more}); "
        "give more of the key"
    )


@dlq.command()
@click.argument("key")
@click.option("--payload", is_flag=True, help="Include the replay payload (may hold EDIFACT).")
@connection_options
def show(key: str, payload: bool, redis_url: str | None, prefix: str) -> None:
    """Show one dead letter as JSON; KEY is its whole key or a unique start of it."""
    with redis_client(redis_url) as client:
        letter = _find(DeadLetterQueue(client, prefix=prefix), key)
    shown: dict[str, Any] = letter.summary()
    if payload:
        shown["payload"] = letter.payload
    echo_json(shown)


@dlq.command()
@click.option(
    "--limit",
    type=click.IntRange(1),
    default=DEFAULT_REPLAY_LIMIT,
    show_default=True,
    help="Most records replayed in this run (oldest first).",
)
@click.option("--reason", help="Only records whose reason contains this text.")
@click.option("--batch", "batch_id", help="Only records of this manifest batch.")
@click.option(
    "--rate",
    type=FiniteFloat(min=0.01, max=MAX_REPLAY_RATE),
    default=20.0,
    show_default=True,
    help="Records republished per second, fleet-wide (no replay storms).",
)
@click.option(
    "--hold-minutes",
    type=click.FloatRange(min=0, min_open=True),
    default=DEFAULT_REPLAY_HOLD_S / 60,
    show_default=True,
    help="How long a replayed record is skipped by other replays if its unit never settles.",
)
@click.option(
    "--broker-url",
    envvar="TIDEGATE_BROKER_URL",
    help="Celery broker to republish to (default: the Redis URL).",
)
@click.option(
    "--rq-url",
    envvar="TIDEGATE_RQ_URL",
    help="RQ's Redis, where RQ dead letters are enqueued back (default: the Redis URL).",
)
@prefix_option
@redis_url_option
def replay(
    limit: int,
    reason: str | None,
    batch_id: str | None,
    rate: float,
    hold_minutes: float,
    broker_url: str | None,
    rq_url: str | None,
    prefix: str,
    redis_url: str | None,
) -> None:
    """Republish dead letters to their queues; each is removed once delivered.

    Each letter goes back through its own engine: Celery's ``send_task``, or an RQ
    ``enqueue`` to its queue.

    Records another replay still holds (published, not yet settled) are skipped and
    counted, so running replay twice never publishes the same record twice.
    """
    from tidegate.load.replay_engines import engine_replay_publisher

    with redis_client(redis_url) as client:
        publish, close = engine_replay_publisher(
            broker_url=broker_url or resolve_redis_url(redis_url),
            rq_url=rq_url or resolve_redis_url(redis_url),
        )
        pace = RateLimiter(client, "dlq-replay", rate=rate, burst=max(1, int(rate)), prefix=prefix)
        try:
            result = replay_dead_letters(
                DeadLetterQueue(client, prefix=prefix),
                publish,
                limit=limit,
                reason=reason,
                batch_id=batch_id,
                pace=pace,
                hold_s=hold_minutes * 60,
            )
        finally:
            close()
    click.echo(
        f"replayed {result.published} dead letter(s), skipped {result.skipped} already in replay"
    )


@dlq.command()
@click.option(
    "--older-than-days",
    type=FiniteFloat(min=0, min_open=True, max=36_500),
    required=True,
    help="Remove records first failed more than this many days ago.",
)
@click.option("--yes", is_flag=True, help="Confirm: expired records are deleted for good.")
@connection_options
def expire(older_than_days: float, yes: bool, redis_url: str | None, prefix: str) -> None:
    """Apply the retention: delete old records and report how many (asks for --yes)."""
    if not yes:
        raise TidegateCLIError("expire deletes dead letters for good; repeat with --yes")
    with redis_client(redis_url) as client:
        removed = DeadLetterQueue(client, prefix=prefix).expire(
            older_than_s=older_than_days * 86400
        )
    click.echo(f"expired {removed} dead letter(s) older than {older_than_days:g} day(s)")


@dlq.command()
@click.option("--yes", is_flag=True, help="Confirm: this deletes every dead letter.")
@connection_options
def purge(yes: bool, redis_url: str | None, prefix: str) -> None:
    """Delete every dead letter (asks for --yes)."""
    if not yes:
        raise TidegateCLIError("purge deletes every dead letter for good; repeat with --yes")
    with redis_client(redis_url) as client:
        removed = DeadLetterQueue(client, prefix=prefix).purge()
    click.echo(f"purged {removed} dead letter(s)")
