"""``tidegate intake serve`` refuses to start on a configuration it cannot honour."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from tidegate.cli import cli


def _serve(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["intake", "serve", "--port", "8099", *args])
    return result.exit_code, result.output


def test_without_keys_or_anonymous_it_does_not_start() -> None:
    """No silent open door: the operator must choose."""
    code, output = _serve("--redis-url", "redis://127.0.0.1:1/0")
    assert code == 2
    assert "--keys-file" in output
    assert "--allow-anonymous" in output


def test_keys_and_anonymous_together_are_refused(tmp_path: Path) -> None:
    """One or the other, never both."""
    keys = tmp_path / "keys.json"
    keys.write_text('{"clients": []}')
    code, output = _serve("--keys-file", str(keys), "--allow-anonymous")
    assert code == 2
    assert "exclude each other" in output


def test_a_malformed_task_mapping_names_the_flag() -> None:
    """``--task`` takes QUEUE=TASK."""
    code, output = _serve("--allow-anonymous", "--task", "edi.customs")
    assert code == 2
    assert "QUEUE=TASK" in output


def test_a_malformed_keys_file_is_named_before_anything_starts(tmp_path: Path) -> None:
    """Exit 1 with the file and the entry at fault; no key is echoed."""
    keys = tmp_path / "keys.json"
    keys.write_text('{"clients": [{"name": "acme", "key_sha256": "abc", "senders": ["ACME"]}]}')
    code, output = _serve("--keys-file", str(keys))
    assert code == 1
    assert "'acme': key_sha256 must be 64 hex characters" in output
