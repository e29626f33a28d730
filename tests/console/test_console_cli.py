"""``tidegate console``: it refuses to start open by mistake, and makes stored secrets."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from click.testing import CliRunner

from tidegate.cli import cli
from tidegate.console import Users
from tidegate.console.access import Role


def test_serve_needs_a_users_file_or_an_explicit_anonymous_read() -> None:
    """No users file and no --allow-anonymous-read: a usage error, nothing served."""
    result = CliRunner().invoke(cli, ["console", "serve", "--redis-url", "redis://127.0.0.1:1"])
    assert result.exit_code == 2
    assert "--users-file" in result.output


def test_serve_refuses_a_malformed_users_file(tmp_path: Path) -> None:
    """A user with a plain-text password stops the start, and the password is not echoed."""
    users = tmp_path / "users.json"
    users.write_text(
        json.dumps({"users": [{"name": "ana", "role": "operator", "secret": "hunter22"}]})
    )
    result = CliRunner().invoke(
        cli,
        ["console", "serve", "--users-file", str(users), "--redis-url", "redis://127.0.0.1:1"],
    )
    assert result.exit_code == 1
    assert "pbkdf2_sha256" in result.output
    assert "hunter22" not in result.output


def test_hash_secret_makes_an_entry_that_signs_in(tmp_path: Path) -> None:
    """The printed hash, put in a users file, signs its user in with that secret only."""
    result = CliRunner().invoke(
        cli, ["console", "hash-secret"], input="quay-wall-token-1\nquay-wall-token-1\n"
    )
    assert result.exit_code == 0
    stored = result.output.strip().splitlines()[-1]
    assert stored.startswith("pbkdf2_sha256$")
    assert "quay-wall-token-1" not in stored
    users = Users([("wall", Role.VIEWER, stored)])
    good = "Basic " + base64.b64encode(b"wall:quay-wall-token-1").decode()
    assert users.authenticate(good).name == "wall"
