"""The conventions every ``tidegate`` command shares, checked over the whole command tree.

A new command that forgets one of them fails here, not in an operator's hands: every
option has help; every command that touches Redis addresses the fleet with the same
``--redis-url`` / ``--prefix`` (same environment variables, same default); every
listing prints a table by default and JSON with ``--json``.
"""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest

from tidegate.cli import cli
from tidegate.flow.backends.base import DEFAULT_PREFIX


def commands(
    group: click.Group = cli, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, click.Command]]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))
        else:
            yield " ".join((*path, name)), command


COMMANDS = dict(commands())
REDIS_COMMANDS = {
    name: command
    for name, command in COMMANDS.items()
    if any(param.name == "redis_url" for param in command.params)
}
LISTINGS = ("gate ls", "gate show", "dlq ls", "quarantine ls", "watermarks show")


def option(command: click.Command, name: str) -> click.Option:
    (found,) = [p for p in command.params if isinstance(p, click.Option) and p.name == name]
    return found


def test_the_tree_is_what_these_checks_cover() -> None:
    """The conventions below are checked on the commands that exist (none silently skipped)."""
    assert set(LISTINGS) <= set(COMMANDS)
    assert len(REDIS_COMMANDS) >= 18


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_has_help(name: str) -> None:
    """`--help` explains every option an operator can type."""
    missing = [
        param.opts[0]
        for param in COMMANDS[name].params
        if isinstance(param, click.Option) and not param.hidden and not param.help
    ]
    assert missing == []


@pytest.mark.parametrize("name", sorted(REDIS_COMMANDS))
def test_every_redis_command_addresses_the_fleet_the_same_way(name: str) -> None:
    """Same flags, environment variables and default prefix: no command can silently talk
    to a different fleet than the others."""
    command = REDIS_COMMANDS[name]
    url, prefix = option(command, "redis_url"), option(command, "prefix")

    assert url.opts == ["--redis-url"]
    assert url.envvar == ["TIDEGATE_REDIS_URL", "REDIS_URL"]
    assert not url.show_default
    assert prefix.opts == ["--prefix"]
    assert prefix.envvar == "TIDEGATE_PREFIX"
    assert prefix.default == DEFAULT_PREFIX
    assert prefix.callback is not None


@pytest.mark.parametrize("name", LISTINGS)
def test_every_listing_offers_json(name: str) -> None:
    """A table is the default; `--json` is the same data for a script."""
    command = COMMANDS[name]
    flag = option(command, "as_json")

    assert flag.opts == ["--json"]
    assert flag.is_flag
    assert flag.get_default(click.Context(command)) is False
