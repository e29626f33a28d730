"""``tidegate console``: the operator web console, and the secrets of its user file.

``serve`` refuses to start without a user file unless asked for anonymous reading,
and even then only viewers read without signing in: nobody acts anonymously. Replay
of dead letters and of the quarantine is on when the console knows a broker
(``--broker-url``, default the Redis URL); ``--no-replay`` turns both off.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

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

__all__ = ["console"]

log = get_logger("tidegate.console")


@click.group()
def console() -> None:
    """The operator console: live gates, queues and dead letters in a browser."""


@console.command()
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=8470,
    show_default=True,
    help="TCP port to listen on.",
)
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0: all)."
)
@connection_options
@broker_url_option
@click.option(
    "--users-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar="TIDEGATE_CONSOLE_USERS_FILE",
    show_envvar=True,
    default=None,
    help="JSON file of users, their role (viewer/operator) and hashed secret.",
)
@click.option(
    "--allow-anonymous-read",
    is_flag=True,
    help="Let anyone read without signing in (actions still need an operator).",
)
@click.option(
    "--gate",
    "gates",
    multiple=True,
    help="A downstream gate always shown (repeatable); others are found in Redis.",
)
@click.option(
    "--refresh",
    type=FiniteFloat(min=0.5, max=60),
    default=2.0,
    show_default=True,
    help="Seconds between live updates of the page.",
)
@click.option(
    "--no-replay",
    is_flag=True,
    help="Hide dead-letter and quarantine replay (no broker needed).",
)
@click.option(
    "--history-every",
    type=FiniteFloat(min=0, max=60),
    default=5.0,
    show_default=True,
    help="Seconds between the charts' samples (consoles of one fleet take turns); "
    "0: sample nothing, show what other consoles sample.",
)
def serve(
    port: int,
    host: str,
    redis_url: str | None,
    prefix: str,
    broker_url: str | None,
    users_file: Path | None,
    allow_anonymous_read: bool,
    gates: tuple[str, ...],
    refresh: float,
    no_replay: bool,
    history_every: float,
) -> None:
    """Serve the console until interrupted."""
    try:
        import uvicorn

        from tidegate.console import ConsoleConfig, Users, create_app
        from tidegate.console.publish import celery_publisher
        from tidegate.console.quarantine_replay import celery_quarantine_replayer
    except ImportError as exc:
        raise TidegateCLIError(
            f"{exc}: `tidegate console` needs the console extra (pip install 'tidegate[console]')"
        ) from None
    if users_file is None and not allow_anonymous_read:
        raise click.UsageError("pass --users-file, or --allow-anonymous-read for a read-only wall")
    try:
        users = (
            Users.from_file(users_file, allow_anonymous_read=allow_anonymous_read)
            if users_file is not None
            else Users([], allow_anonymous_read=True)
        )
    except TidegateError as exc:
        raise TidegateCLIError(str(exc)) from None
    with redis_client(redis_url) as client, contextlib.ExitStack() as stack:
        publish = release = None
        if not no_replay:
            broker = resolve_broker(redis_url, broker_url)
            publish, close_publish = celery_publisher(broker)
            stack.callback(close_publish)
            release, close_release = celery_quarantine_replayer(
                client, broker, prefix=prefix, settings=process_settings()
            )
            stack.callback(close_release)
        app = create_app(
            client,
            ConsoleConfig(
                users=users,
                prefix=prefix,
                gates=gates,
                publish=publish,
                replay_quarantine=release,
                refresh_s=refresh,
                history_every_s=history_every,
            ),
        )
        log.info(
            "console_started",
            host=host,
            port=port,
            prefix=prefix,
            users=len(users),
            anonymous_read=allow_anonymous_read,
            replay=publish is not None,
        )
        options: dict[str, Any] = {"log_config": None, "access_log": False}
        uvicorn.run(app, host=host, port=port, **options)


@console.command(name="hash-secret")
@click.option(
    "--secret",
    prompt=True,
    hide_input=True,
    confirmation_prompt=True,
    help="The password or token to hash (asked for when not given).",
)
def hash_secret_command(secret: str) -> None:
    """Print the stored form of a password or token for the users file."""
    from tidegate.console.access import hash_secret

    try:
        click.echo(hash_secret(secret))
    except TidegateError as exc:
        raise TidegateCLIError(str(exc)) from None
