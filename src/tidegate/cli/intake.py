"""``tidegate intake serve``: the HTTP front door for senders' interchanges.

Senders ``POST /interchanges`` with the raw EDIFACT as the body and get the CONTRL and a
JSON summary back, or drop files into their folder under ``--watch``; see
:mod:`tidegate.intake` for what is acknowledged when. Units go to the Celery broker
(``--broker-url``, default the Redis URL) with the task of their queue (``--task
QUEUE=TASK``); the duplicate window, watermarks and quarantine live in tidegate's Redis
under ``--prefix``. ``TIDEGATE_INTAKE_FAULT`` (crash tests only) names a point where the
process kills itself: see :mod:`tidegate.intake.faults`.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tidegate.cli._common import (
    FiniteFloat,
    TidegateCLIError,
    connection_options,
    process_settings,
    redis_client,
)
from tidegate.cli.monitor import broker_url_option, resolve_broker
from tidegate.errors import TidegateError
from tidegate.logging import get_logger

if TYPE_CHECKING:
    from tidegate.load.admission import Admission

__all__ = ["DEFAULT_TASKS", "intake"]

log = get_logger("tidegate.intake")

#: The task each queue's units are sent to, unless ``--task`` says otherwise.
DEFAULT_TASKS: dict[str, str] = {
    "edi.customs": "edi.customs.submit",
    "edi.tos": "edi.tos.push",
    "bulk.dispatch": "bulk.dispatch",
    "edi.unrouted": "edi.unrouted.hold",
}

_DAY_MS = 24 * 3600 * 1000


def _tasks(values: tuple[str, ...], *, engine: str = "celery") -> dict[str, str]:
    # RQ runs the user's job functions: there is no default to fall back on.
    tasks = dict(DEFAULT_TASKS) if engine == "celery" else {}
    for value in values:
        queue, _, task = value.partition("=")
        if not queue.strip() or not task.strip():
            raise click.BadParameter(f"expected QUEUE=TASK, got {value!r}", param_hint="--task")
        tasks[queue.strip()] = task.strip()
    if engine == "rq":
        missing = sorted(set(DEFAULT_TASKS) - set(tasks))
        if missing:
            raise click.UsageError(
                "--engine rq needs --task QUEUE=module.function for every routed queue; "
                f"missing: {', '.join(missing)}"
            )
    return tasks


def _admission(
    engine: str, broker: str, tasks: dict[str, str], client: Any, prefix: str
) -> Admission:
    """The admission publishing to the chosen engine's queues (a Redis reply each), on
    the command's settings (watermark defaults, sheddable classes), read once here."""
    settings = process_settings()
    if engine == "rq":
        from tidegate._redis import client_from_url
        from tidegate.integrations.rq import rq_admission

        if not broker.startswith(("redis://", "rediss://", "unix://")):
            scheme = broker.partition(":")[0]
            raise TidegateCLIError(f"--engine rq needs a Redis broker, got {scheme}")
        return rq_admission(
            client_from_url(broker), tasks, client=client, prefix=prefix, settings=settings
        )
    from celery import Celery

    from tidegate.load.admission import Admission

    return Admission.for_celery(
        Celery("tidegate-intake", broker=broker),
        tasks,
        client=client,
        prefix=prefix,
        settings=settings,
    )


@click.group()
def intake() -> None:
    """The front door: take interchanges from senders over HTTP."""


@intake.command()
@click.option("--port", type=click.IntRange(1, 65535), required=True, help="TCP port to listen on.")
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0: all)."
)
@connection_options
@broker_url_option
@click.option(
    "--task",
    "tasks",
    multiple=True,
    metavar="QUEUE=TASK",
    help="The Celery task of a queue's units (repeatable). Default: "
    + ", ".join(f"{q}={t}" for q, t in DEFAULT_TASKS.items())
    + ".",
)
@click.option(
    "--engine",
    type=click.Choice(["celery", "rq"]),
    default="celery",
    show_default=True,
    help="Publish units as Celery tasks, or as RQ jobs (then --task names each queue's "
    "job function).",
)
@click.option(
    "--keys-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar="TIDEGATE_INTAKE_KEYS_FILE",
    show_envvar=True,
    default=None,
    help="JSON file of API keys (SHA-256) and the UNB sender ids each client owns.",
)
@click.option(
    "--allow-anonymous",
    is_flag=True,
    help="Take interchanges without credentials, for any sender (closed networks only).",
)
@click.option(
    "--max-body-bytes",
    type=click.IntRange(1),
    default=64 * 1024 * 1024,
    show_default=True,
    help="Largest body taken; larger ones are answered 413 without being read.",
)
@click.option(
    "--read-timeout",
    type=FiniteFloat(min=0.1, max=3600),
    default=60.0,
    show_default=True,
    help="Seconds a whole upload may take; slower ones are answered 408.",
)
@click.option(
    "--duplicate-window-days",
    type=FiniteFloat(min=0.001, max=3650),
    default=30.0,
    show_default=True,
    help="How long a sender id + control reference is remembered; a repeat is answered 409.",
)
@click.option(
    "--watch",
    "watch",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Also take files from this drop folder: one sub-folder per sender id "
    "(see the README's convention for writing files).",
)
@click.option(
    "--watch-poll",
    type=FiniteFloat(min=0.05, max=3600),
    default=1.0,
    show_default=True,
    help="Seconds between two looks at the drop folders.",
)
@click.option(
    "--retry-after",
    type=click.IntRange(1, 3600),
    default=30,
    show_default=True,
    help="Retry-After (seconds) of a 503 when a queue is above its high watermark.",
)
def serve(
    port: int,
    host: str,
    redis_url: str | None,
    prefix: str,
    broker_url: str | None,
    tasks: tuple[str, ...],
    engine: str,
    keys_file: Path | None,
    allow_anonymous: bool,
    max_body_bytes: int,
    read_timeout: float,
    duplicate_window_days: float,
    watch: Path | None,
    watch_poll: float,
    retry_after: int,
) -> None:
    """Serve POST /interchanges (and the --watch drop folder) until interrupted."""
    try:
        import uvicorn

        from tidegate.intake import (
            AdmissionPublisher,
            ApiKeys,
            FaultPoint,
            FolderWatcher,
            IntakePipeline,
            Limits,
            RedisDuplicates,
            create_app,
        )
    except ImportError as exc:
        raise TidegateCLIError(
            f"{exc}: `tidegate intake serve` needs the intake extra "
            "(pip install 'tidegate[intake]')"
        ) from None
    if keys_file is None and not allow_anonymous:
        raise click.UsageError("pass --keys-file (API keys), or --allow-anonymous")
    if keys_file is not None and allow_anonymous:
        raise click.UsageError("--keys-file and --allow-anonymous exclude each other")
    queue_tasks = _tasks(tasks, engine=engine)
    try:
        keys = ApiKeys.from_file(keys_file) if keys_file is not None else None
        fault = FaultPoint.from_env()
    except TidegateError as exc:
        raise TidegateCLIError(str(exc)) from None
    broker = resolve_broker(redis_url, broker_url)
    with redis_client(redis_url) as client:
        try:
            admission = _admission(engine, broker, queue_tasks, client, prefix)
            pipeline = IntakePipeline(
                duplicates=RedisDuplicates(
                    client, prefix=prefix, window_ms=max(1, round(duplicate_window_days * _DAY_MS))
                ),
                publisher=AdmissionPublisher(admission),
                retry_after_s=retry_after,
                fault=fault,
            )
            watcher = (
                FolderWatcher(watch, pipeline, poll_s=watch_poll, max_file_bytes=max_body_bytes)
                if watch is not None
                else None
            )
            app = create_app(
                pipeline,
                keys=keys,
                allow_anonymous=allow_anonymous,
                limits=Limits(max_body_bytes=max_body_bytes, read_timeout_s=read_timeout),
            )
        except TidegateError as exc:
            raise TidegateCLIError(str(exc)) from None
        if allow_anonymous:
            click.secho(
                "WARNING: --allow-anonymous: this intake takes interchanges from anyone, "
                "for any sender id. Use it on a closed network only.",
                fg="red",
                bold=True,
                err=True,
            )
            log.warning("intake_anonymous", host=host, port=port)
        if fault.point is not None:
            click.secho(
                f"WARNING: fault point {fault.point!r} set: this process kills itself there "
                "(crash tests only).",
                fg="red",
                bold=True,
                err=True,
            )
            log.warning("intake_fault_point", point=fault.point)
        options: dict[str, Any] = {"log_config": None, "access_log": False}
        log.info(
            "intake_started",
            host=host,
            port=port,
            prefix=prefix,
            clients=len(keys) if keys is not None else 0,
            anonymous=allow_anonymous,
            queues=sorted(queue_tasks),
            engine=engine,
            max_body_bytes=max_body_bytes,
            watch=str(watch) if watch is not None else None,
        )
        stop = threading.Event()
        thread = None
        if watcher is not None:
            thread = threading.Thread(
                target=watcher.run, args=(stop,), name="intake-watcher", daemon=True
            )
            thread.start()
        try:
            uvicorn.run(app, host=host, port=port, **options)
        finally:
            stop.set()
            if thread is not None:
                thread.join(timeout=max(5.0, 2 * watch_poll))
            pipeline.close()
