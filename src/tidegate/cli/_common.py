"""Helpers every sub-command shares: Redis connection, errors, JSON output."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any, ClassVar

import click
import redis

from tidegate._redis import client_from_url
from tidegate.errors import TidegateError

__all__ = [
    "TidegateCLIError",
    "echo_json",
    "redis_client",
    "redis_url_option",
    "resolve_redis_url",
]


class TidegateCLIError(click.ClickException):
    """A tidegate error shown to an operator: message on stderr, non-zero exit."""

    exit_code: ClassVar[int] = 1


redis_url_option = click.option(
    "--redis-url",
    envvar=["TIDEGATE_REDIS_URL", "REDIS_URL"],
    show_envvar=True,
    # Never show the value: it may carry a password.
    show_default=False,
    help="Redis holding the gate state (redis://, rediss://, user:password@ accepted).",
)


def resolve_redis_url(url: str | None) -> str:
    """``url``, else REDIS_URL; a clear error when neither is set."""
    target = url or os.environ.get("REDIS_URL")
    if not target:
        raise TidegateCLIError("no Redis: pass --redis-url or set TIDEGATE_REDIS_URL / REDIS_URL")
    return target


@contextlib.contextmanager
def redis_client(url: str | None) -> Iterator[redis.Redis]:
    """Connect to ``url`` (or REDIS_URL); tidegate errors become clean CLI errors."""
    target = resolve_redis_url(url)
    try:
        client = client_from_url(target)
    except TidegateError as exc:
        raise TidegateCLIError(str(exc)) from exc
    try:
        yield client
    except TidegateError as exc:
        raise TidegateCLIError(str(exc)) from exc
    finally:
        client.close()


def echo_json(value: Any) -> None:
    """Print ``value`` as indented JSON on stdout."""
    click.echo(json.dumps(value, indent=2, sort_keys=False, default=str))
