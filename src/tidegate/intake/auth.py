"""Who may post: API keys per client, each owning the UNB sender ids it may submit for.

Keys are kept as SHA-256 digests only (a leaked key file does not leak a key), in a
JSON file an operator edits::

    {"clients": [
        {"name": "acme-shipping", "key_sha256": "<hex>", "senders": ["ACMESHIP", "ACME2"]}
    ]}

``tidegate intake serve --allow-anonymous`` replaces the check with :data:`ANONYMOUS`,
which may send for any sender: for a closed network or a demonstration only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tidegate.errors import ConfigurationError
from tidegate.intake.errors import SenderNotPermitted, Unauthenticated

__all__ = ["ANONYMOUS", "ApiKeys", "Client", "hash_key"]

_BEARER = "bearer "


def hash_key(key: str) -> str:
    """The digest an API key is stored as."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Client:
    """One authenticated client.

    Args:
        name: for logs and answers (never the key).
        senders: the UNB sender ids it owns.
        any_sender: may send for every sender (the anonymous client only).
    """

    name: str
    senders: frozenset[str] = frozenset()
    any_sender: bool = False

    def check_sender(self, sender: str) -> None:
        """Raise :class:`SenderNotPermitted` unless this client owns ``sender``."""
        if not (self.any_sender or sender in self.senders):
            raise SenderNotPermitted(self.name, sender)


#: The client of an intake started with ``--allow-anonymous``.
ANONYMOUS = Client("anonymous", any_sender=True)


@dataclass(frozen=True, slots=True)
class _Entry:
    digest: str
    client: Client


class ApiKeys:
    """The known clients, looked up by the digest of the key they present.

    Args:
        entries: ``(key_sha256, client)`` pairs.

    Raises:
        ConfigurationError: a digest that is not 64 hex characters, or used twice.
    """

    def __init__(self, entries: Iterable[tuple[str, Client]]) -> None:
        self._entries: list[_Entry] = []
        seen: set[str] = set()
        for given, client in entries:
            digest = given.strip().lower()
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                raise ConfigurationError(
                    f"client {client.name!r}: key_sha256 must be 64 hex characters"
                )
            if digest in seen:
                raise ConfigurationError(f"client {client.name!r}: key_sha256 used twice")
            seen.add(digest)
            self._entries.append(_Entry(digest, client))

    def __len__(self) -> int:
        return len(self._entries)

    @classmethod
    def from_file(cls, path: str | Path) -> ApiKeys:
        """Read the JSON key file (see the module docstring).

        Raises:
            ConfigurationError: unreadable, not JSON, or not the documented shape;
                the message names the file and the entry, never a key.
        """
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"API key file {str(path)!r}: {exc}") from exc
        clients = data.get("clients") if isinstance(data, dict) else None
        if not isinstance(clients, list):
            raise ConfigurationError(f"API key file {str(path)!r}: needs a 'clients' list")
        entries = []
        for index, item in enumerate(clients):
            ok = (
                isinstance(item, dict)
                and isinstance(item.get("name"), str)
                and isinstance(item.get("key_sha256"), str)
                and isinstance(item.get("senders"), list)
                and all(isinstance(s, str) and s for s in item["senders"])
            )
            if not ok:
                raise ConfigurationError(
                    f"API key file {str(path)!r}: client #{index} needs 'name', "
                    "'key_sha256' and a list of 'senders'"
                )
            client = Client(item["name"], frozenset(item["senders"]))
            entries.append((item["key_sha256"], client))
        return cls(entries)

    def authenticate(self, authorization: str | None) -> Client:
        """The client presenting ``Authorization: Bearer <key>``.

        Raises:
            Unauthenticated: no header, another scheme, or an unknown key.
        """
        if not authorization or not authorization.lower().startswith(_BEARER):
            raise Unauthenticated("an API key is required: Authorization: Bearer <key>")
        digest = hash_key(authorization[len(_BEARER) :].strip())
        found = None
        for entry in self._entries:
            # Every entry is compared, in constant time, whatever matches first.
            if hmac.compare_digest(entry.digest, digest):
                found = entry.client
        if found is None:
            raise Unauthenticated("unknown API key")
        return found
