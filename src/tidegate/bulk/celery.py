"""The bulk path on Celery: one manifest → one parse task per B/L → one aggregate.

    bulk.dispatch(manifest)      split the IFCSUM (tidegate.edi), store the units, publish
                                 bulk.parse_bl(batch, key) for each, page by page, then
                                 seal the batch with its count; a document that cannot
                                 be read is dead-lettered whole
    bulk.parse_bl(batch, key)    check one unit; an unroutable one is dead-lettered; the
                                 outcome is recorded in Redis once, and the last one (or
                                 the seal, if later) starts the aggregate — never raises,
                                 so the batch always completes
    bulk.aggregate(batch)        claims the batch (SET NX: runs once), reads the outcomes
                                 back page by page, and fans the B/Ls out to the TOS
    edi.tos.forward_bl(b/l)      a GatedTask: through the TOS gate, keyed on the B/L
                                 number, so the TOS sees each B/L once across replays
                                 and redeliveries

Why not a Celery chord: its header is built in one process and its results come back
to one process as one message, so a 100,000-B/L manifest held every key and every
result at once (the bulk pool grew by about 15 KiB per B/L). The fan-out counts itself
in Redis instead (:class:`~tidegate.bulk.store.BatchStore`), and no process holds more
than a page of a batch. Transient failures inside ``parse_bl`` use Celery's own
``retry`` (same task id); the parse step calls no gated downstream, so its waits are
short. No task result is stored.

The tasks that publish per B/L (dispatch, aggregate) run with ``trail=False``: with
Celery's default every task sent from inside a task is kept as an ``AsyncResult`` on
the sender's request until it returns (and written into its stored result), about
0.5 KiB per publish — one bulk child reached 173 MiB at 100,000 B/Ls (issue #18). They
publish each page of 500 in one broker round trip (:mod:`tidegate.bulk.publish`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from celery import Celery, Task

from tidegate.bulk.publish import page_producer, redacted_reprs
from tidegate.bulk.store import BatchStore
from tidegate.delivery import RetryPolicy
from tidegate.downstream import backoff_delay
from tidegate.edi.errors import EdifactError, NotEdifactError
from tidegate.edi.ifcsum import BLUnit
from tidegate.edi.intake import Intake
from tidegate.errors import BackendError
from tidegate.integrations.celery.gated import REPLAY_HEADER, GatedTask
from tidegate.integrations.celery.runtime import runtime
from tidegate.load import DeadLetter
from tidegate.logging import get_logger

__all__ = ["BulkTasks", "install_bulk", "manifest_key", "submit_manifest", "unit_record"]

log = get_logger("tidegate.bulk")

#: Parse attempts against a flaky dependency (Redis) before the unit is dead-lettered.
PARSE_RETRY = RetryPolicy(max_attempts=5, backoff_base_s=0.5, backoff_cap_s=10.0)


def unit_record(unit: BLUnit, batch_id: str) -> dict[str, Any]:
    """The JSON form of a unit as stored for the fan-out (raw text kept for audit)."""
    return {
        "key": unit.idempotency_key,
        "batch_id": batch_id,
        "position": unit.position,
        "consignment_number": unit.consignment_number,
        "bl_number": unit.bl_number,
        "bl_source": unit.bl_source,
        "dead_letter_reason": unit.dead_letter_reason,
        "containers": [c.normalised for c in unit.containers],
        "raw": unit.raw,
    }


def _save_units(store: BatchStore, batch_id: str, source: bytes | Iterable[bytes]) -> int:
    """Carve every consignment of every IFCSUM message in ``source`` and store each as it
    is carved: no list of a manifest's units is ever built."""
    writer = store.unit_writer(batch_id)
    for _ in Intake(source, on_unit=lambda unit: writer.add(unit_record(unit, batch_id))):
        pass
    return writer.close()


def _document(store: BatchStore, manifest: Mapping[str, Any]) -> bytes | Iterator[bytes]:
    """The manifest's bytes: inline (``edifact``), or streamed back from the store when
    the producer used :func:`submit_manifest` (``stored: true``).

    Raises:
        EdifactError: the ``edifact`` field is not text at all.
    """
    if manifest.get("stored"):
        return store.document_chunks(str(manifest["batch_id"]))
    edifact = manifest.get("edifact")
    if not isinstance(edifact, str):
        raise NotEdifactError(f"the manifest's edifact field is {type(edifact).__name__}, not text")
    try:
        return edifact.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise NotEdifactError(
            "the manifest's edifact text has characters UTF-8 cannot encode (lone surrogates)"
        ) from exc


def submit_manifest(producer: Celery, store: BatchStore, batch_id: str, data: bytes) -> None:
    """Send a manifest to ``bulk.dispatch`` by claim check: the bytes go to the batch
    store in chunks and the message carries only the batch id, so no broker message and
    no worker process ever holds a large manifest whole."""
    store.save_document(batch_id, data)
    producer.send_task(
        "bulk.dispatch",
        args=[{"batch_id": batch_id, "stored": True}],
        queue="bulk.dispatch",
        ignore_result=True,
    )


def _forward_envelope(outcome: Mapping[str, Any], batch_id: str) -> dict[str, Any]:
    return {
        "key": outcome["bl_number"],
        "bl_number": outcome["bl_number"],
        "batch_id": batch_id,
        "unit_key": outcome["key"],
        "containers": outcome.get("containers", []),
    }


def _dead_letter(app: Celery, unit: Mapping[str, Any], reason: str) -> None:
    """Dead-letter an unroutable unit, keeping all a replay needs."""
    runtime(app).dlq.add(
        DeadLetter(
            key=str(unit["key"]),
            task="bulk.parse_bl",
            reason=reason,
            exception="",
            payload={
                "args": [unit["batch_id"], unit["key"]],
                "kwargs": {},
                "queue": "bl.parse",
                "unit": dict(unit),
            },
            bl_number=unit.get("bl_number"),
            batch_id=str(unit["batch_id"]),
        )
    )


def manifest_key(batch_id: str) -> str:
    """The dead-letter key of a whole manifest (its units are keyed by B/L)."""
    return f"manifest:{batch_id}"


def _dead_letter_manifest(
    app: Celery, manifest: Mapping[str, Any], batch_id: str, exc: EdifactError
) -> str:
    """Dead-letter a manifest that cannot be read, whole, so that a replay can resend it.

    The reason is the error's own message (``LocatedEdifactError`` messages name what
    and where, never payload text); the body travels only in the record's payload,
    which is never logged.
    """
    reason = f"manifest is not readable EDIFACT: {exc}"
    runtime(app).dlq.add(
        DeadLetter(
            key=manifest_key(batch_id),
            task="bulk.dispatch",
            reason=reason,
            exception=type(exc).__name__,
            payload={"args": [dict(manifest)], "kwargs": {}, "queue": "bulk.dispatch"},
            batch_id=batch_id,
        )
    )
    return reason


def _replayed(task: Task[Any, Any]) -> bool:
    """Whether this run is a replay from the DLQ: a worker puts the header on the
    request itself, ``task.apply(headers=...)`` leaves it in ``headers``."""
    request = task.request
    return bool(request.get(REPLAY_HEADER) or (request.get("headers") or {}).get(REPLAY_HEADER))


def _summary(batch_id: str, counts: Mapping[str, int], *, forwarded: int) -> dict[str, Any]:
    return {
        "batch_id": batch_id,
        "units": sum(counts.values()),
        "ok": counts.get("ok", 0),
        "dead_lettered": counts.get("dead_lettered", 0),
        "failed": counts.get("failed", 0) + counts.get("missing", 0),
        "forwarded": forwarded,
        "aggregated_at": time.time(),
    }


@dataclass(frozen=True, slots=True)
class BulkTasks:
    """The registered tasks, for callers that want to send or inspect them."""

    dispatch: Task[Any, Any]
    parse_bl: Task[Any, Any]
    aggregate: Task[Any, Any]
    forward_bl: Task[Any, Any]


def install_bulk(  # noqa: PLR0915 - four task bodies registered as closures on the app
    app: Celery,
    *,
    forward: Callable[[Mapping[str, Any]], dict[str, Any]],
    downstream: str = "tos",
    forward_queue: str = "edi.tos",
    lookup_path: str | None = None,
) -> BulkTasks:
    """Register the bulk tasks on ``app``.

    Args:
        app: a Celery app set up with :func:`tidegate.integrations.celery.setup` and a
            Redis result backend (chords need one; never RPC).
        forward: sends one B/L to the downstream (an HTTP client call with the B/L
            number as idempotency key); runs inside the downstream's gate.
        downstream: the gate (and delivery ledger) name of the forward step.
        forward_queue: the queue of the forward tasks (that downstream's pool).
        lookup_path: the downstream's write path if it answers ``GET <path>/<key>``,
            so a forward interrupted mid-call is confirmed rather than resent (see
            :meth:`GatedTask.confirm_delivery`).
    """

    def _store() -> BatchStore:
        rt = runtime(app)
        return BatchStore(rt.client, prefix=rt.prefix)

    # shared=False: these closures belong to this app only; Celery's default would
    # register them on every app created afterwards in the process.
    @app.task(
        shared=False,
        base=GatedTask,
        name=f"{forward_queue}.forward_bl",
        downstream=downstream,
        lookup_path=lookup_path,
        ignore_result=True,
    )
    def forward_bl(envelope: dict[str, Any]) -> dict[str, Any]:
        """Send one B/L downstream (gated, keyed on the B/L number)."""
        return forward(envelope)

    @app.task(
        shared=False,
        bind=True,
        name="bulk.parse_bl",
        ignore_result=True,
        max_retries=None,
        trail=False,
    )
    def parse_bl(self: Task[Any, Any], batch_id: str, key: str) -> dict[str, Any]:
        """Check one unit and record its outcome; never raises, so the batch completes."""
        outcome = _parse(self, batch_id, key)
        if self.request.get(REPLAY_HEADER):
            return outcome  # the batch was aggregated long ago
        if _store().record_outcome(batch_id, key, outcome):
            aggregate.apply_async((batch_id,), ignore_result=True)
        return outcome

    def _parse(self: Task[Any, Any], batch_id: str, key: str) -> dict[str, Any]:
        try:
            unit = _store().unit(batch_id, key)
            if unit is None:
                letter = runtime(app).dlq.get(key)
                unit = letter.payload.get("unit") if letter else None
            if unit is None:
                log.error("bl_unit_missing", batch_id=batch_id, key=key)
                return {"status": "missing", "key": key}
            if unit["dead_letter_reason"]:
                _dead_letter(app, unit, unit["dead_letter_reason"])
                return {"status": "dead_lettered", "key": key, "reason": unit["dead_letter_reason"]}
            outcome = {
                "status": "ok",
                "key": key,
                "bl_number": unit["bl_number"],
                "containers": unit["containers"],
            }
            if self.request.get(REPLAY_HEADER):
                # The batch was aggregated long ago: a recovered unit forwards itself.
                forward_bl.apply_async(
                    args=(_forward_envelope(outcome, batch_id),), queue=forward_queue
                )
                runtime(app).dlq.remove(key)
            return outcome
        except BackendError as exc:
            attempt = self.request.retries
            if attempt + 1 >= PARSE_RETRY.max_attempts:
                return {"status": "failed", "key": key, "reason": f"retries exhausted ({exc})"}
            delay = backoff_delay(
                attempt, base=PARSE_RETRY.backoff_base_s, cap=PARSE_RETRY.backoff_cap_s
            )
            raise self.retry(countdown=delay, exc=exc) from exc

    @app.task(shared=False, name="bulk.aggregate", ignore_result=False, trail=False)
    def aggregate(batch_id: str) -> dict[str, Any]:
        """Read the batch's outcomes page by page and forward each B/L once.

        Resumable: a run killed part-way (its message comes back, acks late) starts
        over and forwards what is not marked forwarded yet. A page is marked only after
        its flush reached the broker, so nothing published is skipped; what a killed
        run published but had not marked goes out again, and the forward's idempotency
        key keeps the TOS from taking it twice. A batch whose summary is saved is done.
        """
        store = _store()
        if store.summary(batch_id) is not None:
            log.info("batch_aggregate_skipped", batch_id=batch_id, reason="already_aggregated")
            return {"status": "already_aggregated", "batch_id": batch_id}
        counts: dict[str, int] = {}
        for keys in store.unit_keys(batch_id):
            outcomes = [o or {"status": "missing"} for o in store.outcomes(batch_id, keys)]
            for outcome in outcomes:
                counts[outcome["status"]] = counts.get(outcome["status"], 0) + 1
            ok = [o for o in outcomes if o["status"] == "ok"]
            numbers = [str(o["bl_number"]) for o in ok]
            due = store.not_forwarded(batch_id, numbers)
            with page_producer(app, len(ok)) as producer:
                for outcome, new in zip(ok, due, strict=True):
                    if new:
                        envelope = _forward_envelope(outcome, batch_id)
                        forward_bl.apply_async(
                            args=(envelope,),
                            queue=forward_queue,
                            producer=producer,
                            **redacted_reprs(str(envelope["key"])),
                        )
            store.mark_forwarded(batch_id, [n for n, new in zip(numbers, due, strict=True) if new])
        summary = _summary(batch_id, counts, forwarded=store.forwarded(batch_id))
        store.save_summary(batch_id, summary)
        log.info("batch_aggregated", **summary)
        return summary

    @app.task(shared=False, bind=True, name="bulk.dispatch", ignore_result=True, trail=False)
    def dispatch(self: Task[Any, Any], manifest: dict[str, Any]) -> dict[str, Any]:
        """Split a manifest and start its chord (at most once per batch id).

        A batch is dispatched complete or not at all: a document that cannot be read
        to its end (not EDIFACT, garbage after the last UNZ, a segment over the size
        cap) is dead-lettered whole with the reason, and the units stored before the
        error are deleted. Acknowledging it with only a log line would lose it.
        """
        batch_id = str(manifest["batch_id"])
        store = _store()
        if store.dispatched(batch_id):
            log.info("batch_dispatch_skipped", batch_id=batch_id, reason="already_dispatched")
            return {"status": "already_dispatched", "batch_id": batch_id}
        try:
            count = _save_units(store, batch_id, _document(store, manifest))
        except EdifactError as exc:
            store.discard_units(batch_id)
            reason = _dead_letter_manifest(app, manifest, batch_id, exc)
            return {"status": "dead_lettered", "batch_id": batch_id, "reason": reason}
        expected = 0
        for keys in store.unit_keys(batch_id):
            # One round trip per page, not one per publish (bulk.publish).
            with page_producer(app, len(keys)) as producer:
                for key in keys:
                    parse_bl.apply_async(
                        (batch_id, key),
                        ignore_result=True,
                        producer=producer,
                        **redacted_reprs(key),
                    )
            expected += len(keys)
        if store.seal(batch_id, expected):
            aggregate.apply_async((batch_id,), ignore_result=True)
        store.mark_dispatched(batch_id)
        if _replayed(self) and runtime(app).dlq.remove(manifest_key(batch_id)):
            log.info("dlq_item_resolved", task=self.name, key=manifest_key(batch_id))
        log.info("batch_dispatched", batch_id=batch_id, units=count)
        return {"status": "dispatched", "batch_id": batch_id, "units": count}

    return BulkTasks(dispatch, parse_bl, aggregate, forward_bl)
