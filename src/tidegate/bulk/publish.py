"""One broker round trip per page of a batch's publishes, not one per B/L.

``bulk.dispatch`` publishes a parse task per B/L and ``bulk.aggregate`` a forward per
B/L, each from a single pool process, a page of units at a time. Publishing them one
``LPUSH`` (or one tracked-push script) at a time made that process wait on Redis once
per B/L. On a machine whose CPUs are busy — with the TOS pool, which forwards while the
aggregate is still publishing — every such wait is also a wait to be scheduled again,
so the aggregate of a 20,000-B/L batch published about five times slower per B/L than
that of a 1,000-B/L batch, and B/L units/s fell with the manifest's size (issue #18).

A page goes through one producer in kombu's batch mode instead: on a Redis broker the
page's messages (and, for tracked tasks, their outstanding records, in the same script
as each push) reach Redis in one pipelined round trip when the page ends. Where the
transport cannot batch (RabbitMQ: each publish waits for its confirm), kombu publishes
each message at once, as before. An error inside a page discards what the page had not
flushed and propagates, as an error in the old loop stopped it.

Each message also gets its ``argsrepr`` from :func:`redacted_reprs`: Celery otherwise
builds a ``repr`` of the arguments for every message (a fifth of the aggregate's CPU per
forward, by cProfile) and puts it in the headers, where a forward's would carry its B/L
number and containers to every tool that shows headers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from celery import Celery

from tidegate.logging import key_hash

__all__ = ["page_producer", "redacted_reprs"]


@contextlib.contextmanager
def page_producer(app: Celery, page: int) -> Iterator[Any]:
    """A producer whose publishes reach the broker together when the block ends.

    Args:
        app: the Celery app publishing.
        page: most publishes per flush (the caller's page size).
    """
    with app.producer_or_acquire() as producer, producer.batch(max_size=max(1, page)):
        yield producer


def redacted_reprs(key: str) -> dict[str, Any]:
    """``apply_async`` options that show a message's unit by its key hash only."""
    return {"argsrepr": f"(<unit {key_hash(key)}>,)", "kwargsrepr": "{}"}
