"""Who may look and who may act: a user file with two roles, viewer and operator.

The file is JSON an administrator edits; secrets are stored only as PBKDF2 hashes
(``tidegate console hash-secret`` makes one), so a leaked file does not leak a
password::

    {"users": [
        {"name": "ana", "role": "operator", "secret": "pbkdf2_sha256$600000$<salt>$<hash>"},
        {"name": "quay-wall", "role": "viewer", "secret": "pbkdf2_sha256$…"}
    ]}

A user signs in with HTTP Basic (``name`` and password, what a browser asks for), or
a script or a wall display sends ``Authorization: Bearer <name>:<token>``. The page
polls every second or two, and PBKDF2 is slow on purpose, so a verified credential is
remembered by its SHA-256 for the life of the process — the slow hash is paid once
per credential, not once per poll.

Reading without credentials is off unless the console is started with
``--allow-anonymous-read``; even then nobody acts without signing in as an operator.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from tidegate.console.errors import Forbidden, Unauthenticated
from tidegate.errors import ConfigurationError

__all__ = ["ANONYMOUS_VIEWER", "DEFAULT_ITERATIONS", "Role", "User", "Users", "hash_secret"]

#: PBKDF2-SHA256 iterations for a new secret (OWASP's 2023 figure).
DEFAULT_ITERATIONS = 600_000
_SCHEME = "pbkdf2_sha256"


class Role(Enum):
    """What a user may do: look (viewer), or look and act (operator)."""

    VIEWER = "viewer"
    OPERATOR = "operator"


@dataclass(frozen=True, slots=True)
class User:
    """One signed-in user; ``name`` goes into the audit event, never the secret."""

    name: str
    role: Role

    def require_operator(self) -> None:
        """Raise :class:`Forbidden` unless this user may act."""
        if self.role is not Role.OPERATOR:
            raise Forbidden(f"user {self.name!r} is a viewer; actions need an operator")


#: Who reads a console started with ``--allow-anonymous-read`` without signing in.
ANONYMOUS_VIEWER = User("anonymous", Role.VIEWER)


def hash_secret(
    secret: str, *, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> str:
    """The stored form of a password or token: ``pbkdf2_sha256$<iterations>$<salt>$<hash>``."""
    if not secret:
        raise ConfigurationError("a secret must not be empty")
    salt = salt if salt is not None else os.urandom(16)
    digest = hashlib.pbkdf2_hmac("sha256", secret.encode("utf-8"), salt, iterations)
    return f"{_SCHEME}${iterations}${salt.hex()}${digest.hex()}"


def _verify(secret: str, stored: str) -> bool:
    scheme, iterations, salt, digest = stored.split("$")
    computed = hashlib.pbkdf2_hmac(
        "sha256", secret.encode("utf-8"), bytes.fromhex(salt), int(iterations)
    )
    return scheme == _SCHEME and hmac.compare_digest(computed.hex(), digest)


def _check_stored(name: str, stored: str) -> None:
    parts = stored.split("$")
    ok = len(parts) == 4 and parts[0] == _SCHEME and parts[1].isdigit() and int(parts[1]) > 0
    try:
        ok = ok and bool(bytes.fromhex(parts[2])) and len(bytes.fromhex(parts[3])) == 32
    except ValueError:
        ok = False
    if not ok:
        raise ConfigurationError(
            f"user {name!r}: secret must be {_SCHEME}$<iterations>$<salt hex>$<hash hex>"
            " (make one with `tidegate console hash-secret`)"
        )


def _credentials(authorization: str) -> tuple[str, str]:
    """``(name, secret)`` from a Basic or ``Bearer name:token`` header."""
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise Unauthenticated("malformed Basic credentials") from exc
    elif scheme.lower() == "bearer":
        decoded = value.strip()
    else:
        raise Unauthenticated("credentials must be HTTP Basic or Bearer <name>:<token>")
    name, sep, secret = decoded.partition(":")
    if not sep or not name or not secret:
        raise Unauthenticated("credentials must name a user and a secret")
    return name, secret


class Users:
    """The user file, checked on load, and the sign-in check.

    Args:
        entries: ``(name, role, stored secret)`` triples.
        allow_anonymous_read: requests without credentials read as
            :data:`ANONYMOUS_VIEWER` instead of being refused.

    Raises:
        ConfigurationError: a duplicate name, an unknown role or a malformed secret.
    """

    def __init__(
        self, entries: Iterable[tuple[str, Role, str]], *, allow_anonymous_read: bool = False
    ) -> None:
        self._stored: dict[str, tuple[Role, str]] = {}
        for name, role, stored in entries:
            if not name or ":" in name:
                raise ConfigurationError(f"user name {name!r} must be non-empty, without ':'")
            if name in self._stored:
                raise ConfigurationError(f"user {name!r} is listed twice")
            _check_stored(name, stored)
            self._stored[name] = (role, stored)
        self.allow_anonymous_read = allow_anonymous_read
        iterations = max(
            (int(stored.split("$")[1]) for _, stored in self._stored.values()), default=1
        )
        self._decoy = hash_secret("decoy", iterations=iterations)
        self._verified: dict[str, User] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._stored)

    @classmethod
    def from_file(cls, path: str | Path, *, allow_anonymous_read: bool = False) -> Users:
        """Read the JSON user file (see the module docstring).

        Raises:
            ConfigurationError: unreadable, not JSON, or not the documented shape; the
                message names the file and the entry, never a secret.
        """
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"user file {str(path)!r}: {exc}") from exc
        users = data.get("users") if isinstance(data, dict) else None
        if not isinstance(users, list):
            raise ConfigurationError(f"user file {str(path)!r}: needs a 'users' list")
        entries = []
        roles = {role.value: role for role in Role}
        for index, item in enumerate(users):
            ok = isinstance(item, dict) and all(
                isinstance(item.get(field), str) for field in ("name", "role", "secret")
            )
            if not ok or item["role"] not in roles:
                raise ConfigurationError(
                    f"user file {str(path)!r}: user #{index} needs 'name', 'secret' and a "
                    f"'role' of {sorted(roles)}"
                )
            entries.append((item["name"], roles[item["role"]], item["secret"]))
        return cls(entries, allow_anonymous_read=allow_anonymous_read)

    def authenticate(self, authorization: str | None) -> User:
        """The user presenting ``authorization`` (or the anonymous viewer, if allowed).

        Raises:
            Unauthenticated: no credentials (and anonymous reading is off), or unknown.
        """
        if not authorization:
            if self.allow_anonymous_read:
                return ANONYMOUS_VIEWER
            raise Unauthenticated("sign in to use the console")
        name, secret = _credentials(authorization)
        remembered = hashlib.sha256(f"{name}:{secret}".encode()).hexdigest()
        with self._lock:
            known = self._verified.get(remembered)
        if known is not None:
            return known
        entry = self._stored.get(name)
        # An unknown name costs the same PBKDF2 as a known one: timing does not tell
        # which user names exist.
        if not _verify(secret, entry[1] if entry is not None else self._decoy) or entry is None:
            raise Unauthenticated("unknown user or wrong secret")
        user = User(name, entry[0])
        with self._lock:
            self._verified[remembered] = user
        return user
