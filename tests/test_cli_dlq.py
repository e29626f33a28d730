"""`tidegate dlq …` against a real Redis."""

from __future__ import annotations

import base64
import json

import pytest
import redis
from click.testing import CliRunner

from tidegate.cli import cli
from tidegate.load import DeadLetter, DeadLetterQueue

pytestmark = pytest.mark.redis


def run(url: str, prefix: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        cli, ["dlq", *args, "--prefix", prefix], env={"TIDEGATE_REDIS_URL": url}
    )
    return result.exit_code, result.output


@pytest.fixture
def letters(redis_client: redis.Redis, prefix: str) -> DeadLetterQueue:
    dlq = DeadLetterQueue(redis_client, prefix=prefix)
    for i in range(3):
        dlq.add(
            DeadLetter(
                key=f"key-{i}",
                task="edi.tos.forward_bl",
                reason="downstream rejected the document (HTTP 422)" if i else "no B/L",
                payload={
                    "args": [{"key": f"key-{i}", "body": "UNB+SECRET'"}],
                    "kwargs": {},
                    "queue": f"{prefix}-replayq",
                },
                bl_number=f"BL{i}",
                batch_id="b1",
            )
        )
    return dlq


def test_ls_json_lists_without_payload(
    redis_url: str, prefix: str, letters: DeadLetterQueue
) -> None:
    code, out = run(redis_url, prefix, "ls", "--json", "--reason", "422")
    listed = json.loads(out)
    assert code == 0
    assert [x["key"] for x in listed] == ["key-1", "key-2"]
    assert "SECRET" not in out


def test_show_and_unknown_key(redis_url: str, prefix: str, letters: DeadLetterQueue) -> None:
    code, out = run(redis_url, prefix, "show", "key-0")
    assert code == 0
    assert json.loads(out)["reason"] == "no B/L"
    assert "SECRET" not in out
    missing_code, missing_out = run(redis_url, prefix, "show", "nope")
    assert missing_code == 1
    assert "no dead letter" in missing_out


def test_replay_is_bounded_and_counts(
    redis_url: str, redis_client: redis.Redis, prefix: str, letters: DeadLetterQueue
) -> None:
    """--limit bounds a run; each published record counts a replay and stays until delivered."""
    code, out = run(redis_url, prefix, "replay", "--limit", "2")

    assert code == 0
    assert "replayed 2" in out
    assert redis_client.llen(f"{prefix}-replayq") == 2
    assert [x.replays for x in letters.iter()] == [1, 1, 0]
    assert len(letters) == 3
    redis_client.delete(f"{prefix}-replayq")


def test_a_second_replay_skips_letters_in_replay_and_reaches_later_ones(
    redis_url: str, redis_client: redis.Redis, prefix: str, letters: DeadLetterQueue
) -> None:
    """Issue #11.3: replay twice while the first is in flight — no record goes out twice."""
    first_code, first_out = run(redis_url, prefix, "replay", "--limit", "2")
    second_code, second_out = run(redis_url, prefix, "replay", "--limit", "2")
    _, listed = run(redis_url, prefix, "ls", "--json")
    _, shown = run(redis_url, prefix, "show", "key-0")

    queued = [
        json.loads(base64.b64decode(json.loads(raw)["body"]))[0][0]["key"]
        for raw in redis_client.lrange(f"{prefix}-replayq", 0, -1)
    ]
    assert (first_code, second_code) == (0, 0)
    assert "replayed 2 dead letter(s), skipped 0" in first_out
    assert "replayed 1 dead letter(s), skipped 2 already in replay" in second_out
    assert sorted(queued) == ["key-0", "key-1", "key-2"]
    assert [x.replays for x in letters.iter()] == [1, 1, 1]
    assert all(x["in_replay_until"] is not None for x in json.loads(listed))
    assert json.loads(shown)["in_replay_until"] > 0
    redis_client.delete(f"{prefix}-replayq")


def test_purge_needs_yes(redis_url: str, prefix: str, letters: DeadLetterQueue) -> None:
    refused, out = run(redis_url, prefix, "purge")
    assert refused == 1
    assert "--yes" in out
    assert len(letters) == 3
    ok, _ = run(redis_url, prefix, "purge", "--yes")
    assert ok == 0
    assert len(letters) == 0


def test_expire_applies_retention_and_reports(
    redis_url: str, prefix: str, letters: DeadLetterQueue
) -> None:
    """Retention is explicit: old records go, the count is said, young ones stay."""
    letters.add(DeadLetter(key="ancient", task="t", reason="r", first_failed_at=1.0))

    refused, _ = run(redis_url, prefix, "expire", "--older-than-days", "30")
    code, out = run(redis_url, prefix, "expire", "--older-than-days", "30", "--yes")

    assert refused == 1
    assert code == 0
    assert "expired 1" in out
    assert letters.get("ancient") is None
    assert len(letters) == 3
    assert letters.stats()["expired_total"] == 1


#: Three VERMAS keys that agree on far more than 16 characters, and a 64-character B/L key.
LONG_KEYS = (
    "vermas:HLCU:2026-12-01:MSCU1234565:0001",
    "vermas:HLCU:2026-12-01:MSCU1234565:0002",
    "vermas:HLCU:2026-12-01:TGHU9876543:0001",
    "bl:" + "HLCUHAM" + "0123456789" * 5 + "ABCD",
)


@pytest.fixture
def long_keys(redis_client: redis.Redis, prefix: str) -> DeadLetterQueue:
    dlq = DeadLetterQueue(redis_client, prefix=prefix)
    for key in LONG_KEYS:
        dlq.add(DeadLetter(key=key, task="edi.customs.declare", reason="HTTP 422"))
    return dlq


def test_ls_table_shows_every_key_whole(
    redis_url: str, prefix: str, long_keys: DeadLetterQueue
) -> None:
    """Keys that share a long start stay distinct, and each can be copied from the table."""
    code, out = run(redis_url, prefix, "ls")

    assert code == 0
    assert len(LONG_KEYS[3]) == 64
    for key in LONG_KEYS:
        (row,) = [line for line in out.splitlines() if line.split()[:1] == [key]]
        assert "HTTP 422" in row


def test_show_takes_a_unique_start_of_a_key_and_refuses_an_ambiguous_one(
    redis_url: str, prefix: str, long_keys: DeadLetterQueue
) -> None:
    """`show` finds a record by a unique prefix; an ambiguous one lists the candidates."""
    code, out = run(redis_url, prefix, "show", "vermas:HLCU:2026-12-01:TGHU")
    ambiguous_code, ambiguous = run(redis_url, prefix, "show", "vermas:HLCU:2026-12-01:MSCU")

    assert code == 0
    assert json.loads(out)["key"] == LONG_KEYS[2]
    assert ambiguous_code == 1
    assert "2 dead letters have a key starting with" in ambiguous
    assert LONG_KEYS[0] in ambiguous
    assert LONG_KEYS[1] in ambiguous


def test_the_prefix_comes_from_the_environment_too(
    redis_url: str, prefix: str, letters: DeadLetterQueue
) -> None:
    """TIDEGATE_PREFIX addresses the fleet as it does for every other command."""
    result = CliRunner().invoke(
        cli,
        ["dlq", "ls", "--json"],
        env={"TIDEGATE_REDIS_URL": redis_url, "TIDEGATE_PREFIX": prefix},
    )

    assert result.exit_code == 0, result.output
    assert [x["key"] for x in json.loads(result.stdout)] == ["key-0", "key-1", "key-2"]


@pytest.mark.parametrize("rate", ["nan", "inf", "-inf", "1e308", "0"])
def test_replay_rate_out_of_range_is_a_usage_error(
    redis_url: str, prefix: str, letters: DeadLetterQueue, rate: str
) -> None:
    """`dlq replay --rate nan|inf` is refused by the option, before anything is replayed."""
    result = CliRunner().invoke(
        cli,
        ["dlq", "replay", "--rate", rate, "--prefix", prefix],
        env={"TIDEGATE_REDIS_URL": redis_url},
    )

    assert result.exit_code == 2
    assert "--rate" in result.output
    assert [x.replays for x in letters.iter()] == [0, 0, 0]


def test_a_letter_holding_a_raw_body_is_refused_not_republished(
    redis_url: str, redis_client: redis.Redis, prefix: str
) -> None:
    """A message Celery could not decode (or a pickle) was dead-lettered with its raw
    body: it is no task to republish, so replay says why and sends nothing."""
    dlq = DeadLetterQueue(redis_client, prefix=prefix)
    dlq.add(
        DeadLetter(
            key="raw-1",
            task="",
            reason="undecodable message body",
            exception="DecodeError",
            payload={
                "body": base64.b64encode(b"\x80\x04not json").decode(),
                "body_encoding": "base64",
                "queue": f"{prefix}-replayq",
            },
        )
    )
    code, out = run(redis_url, prefix, "replay", "--limit", "1")
    assert code == 1
    assert "holds a raw message body (base64), not a task" in out
    assert redis_client.llen(f"{prefix}-replayq") == 0
    assert dlq.get("raw-1") is not None
