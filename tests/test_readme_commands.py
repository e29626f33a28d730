"""README's command examples, checked against the code so that they cannot drift.

Every ``tidegate …`` line of a ``sh`` block and every inline ```tidegate …``` span is
parsed by click (the command exists, its options and arguments are valid, and a demo
line passes the demo's own flag check). The cheap ones — ``gate`` and ``dlq`` — are run,
in README order, against the test Redis under this test's key prefix; ``demo`` is
parsed only (it starts a worker fleet). ``make demo``'s command line comes from the
Makefile and is checked the same way, and so are the flags the README lists for it.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import shlex
from pathlib import Path

import click
import pytest
import redis
from click.testing import CliRunner

from tidegate.cli import cli
from tidegate.cli.demo import check_flags
from tidegate.cli.demo import demo as demo_command
from tidegate.flow import Gate
from tidegate.harness.scenarios.vessel import TASK_FOR_QUEUE
from tidegate.load import DeadLetter, DeadLetterQueue

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
MAKEFILE = (ROOT / "Makefile").read_text(encoding="utf-8")


def _sh_lines(text: str) -> list[list[str]]:
    """Each command line of the README's ``sh`` blocks, split as a shell would."""
    lines = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, flags=re.M | re.S):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                lines.append(words)
    return lines


SH = _sh_lines(README)
TIDEGATE = [words[1:] for words in SH if words[0] == "tidegate"]
INLINE = re.findall(r"`tidegate ([^`]+)`", README)


def _resolve(args: list[str]) -> tuple[click.Command, list[str], list[str]]:
    """(command, its path, the rest) for ``tidegate <args>``."""
    command: click.Command = cli
    path: list[str] = []
    rest = list(args)
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        sub = command.get_command(click.Context(command), rest[0])
        assert sub is not None, f"README names a command that does not exist: {path + rest[:1]}"
        path.append(rest.pop(0))
        command = sub
    return command, path, rest


def _parse(args: list[str]) -> click.Context:
    """Parse ``tidegate <args>`` as click would run it, without running it."""
    command, path, rest = _resolve(args)
    assert not isinstance(command, click.Group), f"README line stops at a group: {args}"
    ctx = command.make_context(" ".join(["tidegate", *path]), rest)
    if command is demo_command:
        check_flags(ctx)
    return ctx


def _id(args: list[str]) -> str:
    return " ".join(args)[:60]


def test_the_readme_has_command_examples() -> None:
    """Guards the extraction itself: an empty list would check nothing."""
    groups = {args[0] for args in TIDEGATE}

    assert {"gate", "dlq", "demo"} <= groups
    assert len(TIDEGATE) >= 10
    assert INLINE


@pytest.mark.parametrize("args", TIDEGATE, ids=_id)
def test_every_readme_command_line_parses(args: list[str]) -> None:
    """Options and arguments of each sh-block line are valid for the command it names."""
    _parse(args)


@pytest.mark.parametrize("span", INLINE, ids=lambda s: s[:60])
def test_every_inline_command_names_a_real_command(span: str) -> None:
    """Inline spans may list alternatives (``ls|replay|purge``): each must exist."""
    words = shlex.split(span)
    head = list(itertools.takewhile(lambda word: not word.startswith("-"), words))[:2]
    alternatives = [[head[0], alt] for alt in head[1].split("|")] if len(head) > 1 else [head]
    for path in alternatives:
        command, resolved, _ = _resolve(path)
        result = CliRunner().invoke(cli, [*resolved, "--help"])
        assert result.exit_code == 0, (span, result.output)
        assert command.name == resolved[-1]


def test_make_demo_runs_a_valid_demo_line_writing_the_files_the_readme_names() -> None:
    recipe = re.search(r"^demo:.*\n((?:\t.*\n)+)", MAKEFILE, flags=re.M)
    assert recipe is not None
    line = next(line for line in recipe.group(1).splitlines() if "tidegate demo" in line)
    args = shlex.split(line.split("tidegate", 1)[1])

    ctx = _parse(args)

    for option in ("json_path", "plot_path"):
        assert f"`{ctx.params[option]}`" in README


def test_the_flags_the_readme_lists_for_the_demo_exist() -> None:
    top = README.split("\n---\n", 1)[0]
    flags = {span.split()[0] for span in re.findall(r"`(--[^`]+)`", top)}
    options = {opt for param in demo_command.params for opt in getattr(param, "opts", [])}

    assert flags
    assert flags <= options, flags - options


def test_the_celery_worker_lines_name_a_real_app_and_queue() -> None:
    workers = [words for words in SH if words[0] == "celery"]
    assert workers
    for words in workers:
        app, queue = words[words.index("-A") + 1], words[words.index("-Q") + 1]
        assert importlib.util.find_spec(app) is not None, app
        assert queue in TASK_FOR_QUEUE, queue


# -- the cheap ones, run -------------------------------------------------------------------


def _runnable(group: str) -> list[list[str]]:
    return [args for args in TIDEGATE if args[0] == group]


def _seed_dead_letter(client: redis.Redis, prefix: str) -> str:
    """A dead letter every dlq line of the README finds: its key, reason and batch are
    the ones those lines name."""
    values: dict[str, str] = {}
    for args in _runnable("dlq"):
        ctx = _parse(args)
        for name in ("key", "reason", "batch_id"):
            if ctx.params.get(name):
                values[name] = ctx.params[name]
    DeadLetterQueue(client, prefix=prefix).add(
        DeadLetter(
            key=values["key"],
            task="edi.tos.push",
            reason=f"downstream rejected the document ({values.get('reason', 'HTTP 422')})",
            payload={"args": [{"key": values["key"]}], "kwargs": {}, "queue": f"{prefix}-q"},
            batch_id=values.get("batch_id"),
        )
    )
    return values["key"]


@pytest.mark.redis
def test_the_gate_and_dlq_examples_run(
    redis_url: str, redis_client: redis.Redis, prefix: str
) -> None:
    """Each gate and dlq line of the README, in order, exits 0 and does what its comment
    says: the listings find the seeded record, replay publishes it, purge empties."""
    key = _seed_dead_letter(redis_client, prefix)
    for name in {args[2] for args in _runnable("gate")}:
        # The README talks to a running fleet: its gates exist.
        Gate(redis_client, name, prefix=prefix).configure(rate=10, burst=3, concurrency=4)
    env = {"TIDEGATE_REDIS_URL": redis_url, "TIDEGATE_PREFIX": prefix}
    outputs = {}
    try:
        for args in [*_runnable("gate"), *_runnable("dlq")]:
            result = CliRunner().invoke(cli, args, env=env)
            assert result.exit_code == 0, (args, result.output)
            outputs[" ".join(args[:2])] = result.output
    finally:
        redis_client.delete(f"{prefix}-q")

    assert key in outputs["dlq ls"]
    assert json.loads(outputs["dlq show"])["key"] == key
    assert "replayed 1 " in outputs["dlq replay"]
    assert len(DeadLetterQueue(redis_client, prefix=prefix)) == 0
