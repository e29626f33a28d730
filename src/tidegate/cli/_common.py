"""Helpers every sub-command shares: which fleet to talk to, errors, JSON output.

Every command that touches Redis takes the same two connection options from here
(:func:`connection_options`), so no command can address a fleet differently from the
others: ``--redis-url`` (``TIDEGATE_REDIS_URL`` / ``REDIS_URL``) and ``--prefix``
(``TIDEGATE_PREFIX``, default the package's one :data:`DEFAULT_PREFIX`).
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlsplit

import click
import redis

from tidegate._redis import client_from_url
from tidegate.errors import ConfigurationError, TidegateError
from tidegate.keys import DEFAULT_PREFIX
from tidegate.settings import PREFIX_PATTERN, Settings

__all__ = [
    "FiniteFloat",
    "TidegateCLIError",
    "bad_option",
    "connection_options",
    "echo_json",
    "prefix_option",
    "process_settings",
    "redis_client",
    "redis_url_option",
    "resolve_redis_url",
]

F = TypeVar("F", bound=Callable[..., Any])


class TidegateCLIError(click.ClickException):
    """A tidegate error shown to an operator: message on stderr, non-zero exit."""

    exit_code: ClassVar[int] = 1


def _check_prefix(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A prefix is part of every key and SCAN pattern: a glob character in it would make
    a listing read another fleet's keys."""
    if not re.fullmatch(PREFIX_PATTERN, value):
        raise click.BadParameter(
            f"{value!r} is not a key prefix (letters, digits, '_', '.', ':', '-')",
            ctx=ctx,
            param=param,
        )
    return value


redis_url_option = click.option(
    "--redis-url",
    envvar=["TIDEGATE_REDIS_URL", "REDIS_URL"],
    show_envvar=True,
    # Never show the value: it may carry a password.
    show_default=False,
    help="Redis holding the fleet's state (redis://, rediss://, unix://; "
    "user:password@ accepted, percent-encode '/', '#', '?' and '@' in a password).",
)
prefix_option = click.option(
    "--prefix",
    envvar="TIDEGATE_PREFIX",
    show_envvar=True,
    default=DEFAULT_PREFIX,
    show_default=True,
    callback=_check_prefix,
    help="Prefix of the fleet's Redis keys: the workers' TIDEGATE_PREFIX.",
)


def connection_options(func: F) -> F:
    """``--redis-url`` and ``--prefix``: which fleet a command reads or changes."""
    return redis_url_option(prefix_option(func))


class FiniteFloat(click.FloatRange):
    """A float range that also refuses NaN and infinities.

    ``click.FloatRange`` lets ``nan`` through (every comparison with NaN is false), and
    an unbounded side lets ``inf`` through: neither is a value an operator means.
    """

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(number, param, ctx)


def bad_option(exc: ConfigurationError, flags: dict[str, str]) -> click.BadParameter:
    """A usage error naming the flag the operator typed (``--lease-s``) for a library
    error that names the field (``lease_s``) or the environment variable."""
    names = sorted(flags, key=len, reverse=True)
    pattern = re.compile(r"\b(" + "|".join(re.escape(name) for name in names) + r")\b")
    message = str(exc)
    hint = sorted({flags[found] for found in pattern.findall(message)})
    return click.BadParameter(
        pattern.sub(lambda match: flags[match.group(1)], message), param_hint=hint or None
    )


_URL_HELP = (
    "the Redis URL (--redis-url) is not valid; a password holding '/', '#', '?' or '@' "
    "must be percent-encoded (%2F, %23, %3F, %40)"
)


def _check_url(url: str) -> None:
    """Refuse a URL that would be parsed with part of its password as the host, port or
    database: the error redis-py raises then quotes that part."""
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError:
        raise TidegateCLIError(_URL_HELP) from None
    if parts.scheme == "unix":
        return
    tail = url[len(parts.scheme) + 3 + len(parts.netloc) :]
    database = parts.path.strip("/")
    if "@" in tail or parts.fragment or not (database == "" or database.isdigit()):
        raise TidegateCLIError(_URL_HELP)


def resolve_redis_url(url: str | None) -> str:
    """``url`` (from ``--redis-url`` or its environment variables), checked."""
    if not url:
        raise TidegateCLIError("no Redis: pass --redis-url (or set TIDEGATE_REDIS_URL)")
    _check_url(url)
    return url


@contextlib.contextmanager
def redis_client(url: str | None) -> Iterator[redis.Redis]:
    """Connect to ``url``; tidegate errors become clean CLI errors, never a traceback."""
    target = resolve_redis_url(url)
    try:
        client = client_from_url(target)
    except TidegateError as exc:
        raise TidegateCLIError(str(exc)) from None
    except ValueError:
        raise TidegateCLIError(_URL_HELP) from None
    try:
        yield client
    except TidegateError as exc:
        raise TidegateCLIError(str(exc)) from exc
    finally:
        client.close()


def echo_json(value: Any) -> None:
    """Print ``value`` as indented JSON on stdout; NaN or an infinity is a bug, not JSON."""
    click.echo(json.dumps(value, indent=2, sort_keys=False, default=str, allow_nan=False))


def process_settings() -> Settings:
    """The command's settings, read from the environment once; a value that cannot be
    used (inverted watermarks, an unknown sheddable class) is an operator error."""
    try:
        return Settings.load()
    except ConfigurationError as exc:
        raise TidegateCLIError(str(exc)) from None
