"""What a worker and a relay lane say to each other through Redis: JSON only.

A worker ``RPUSH``-es a :class:`RelayedRequest` onto the downstream's request list and
``BLPOP``-s its answer key; a lane ``BLPOP``-s the request, sends it, and ``RPUSH``-es a
:class:`RelayedAnswer` there. Bodies travel as base64, so a request is carried byte for
byte whatever its content type.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["RelayFailure", "RelayedAnswer", "RelayedRequest"]


class RelayFailure(StrEnum):
    """Why a lane has no answer to give: whether the request can have reached the
    downstream decides whether it may be resent at once or must be looked up first."""

    #: The lane took the request and never wrote a byte of it (no connection).
    NOT_SENT = "not_sent"
    #: Written, then the connection failed before its answer was read.
    LOST = "lost"


@dataclass(frozen=True, slots=True)
class RelayedRequest:
    """One HTTP request, as a worker hands it to the relay."""

    id: str
    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes

    def encode(self) -> str:
        return json.dumps(
            {
                "id": self.id,
                "method": self.method,
                "target": self.target,
                "headers": self.headers,
                "body": base64.b64encode(self.body).decode("ascii"),
            },
            separators=(",", ":"),
        )

    @classmethod
    def decode(cls, raw: bytes | str) -> RelayedRequest:
        """Raises ``ValueError`` (``KeyError``, ``TypeError`` included) on a malformed one."""
        value: dict[str, Any] = json.loads(raw)
        return cls(
            str(value["id"]),
            str(value["method"]),
            str(value["target"]),
            [(str(k), str(v)) for k, v in value["headers"]],
            base64.b64decode(value["body"], validate=True),
        )


@dataclass(frozen=True, slots=True)
class RelayedAnswer:
    """The downstream's answer, or the lane's :class:`RelayFailure` when there is none."""

    status: int = 0
    headers: list[tuple[str, str]] | None = None
    body: bytes = b""
    failure: RelayFailure | None = None
    detail: str = ""

    def encode(self) -> str:
        if self.failure is not None:
            return json.dumps({"failure": self.failure.value, "detail": self.detail})
        return json.dumps(
            {
                "status": self.status,
                "headers": self.headers or [],
                "body": base64.b64encode(self.body).decode("ascii"),
            },
            separators=(",", ":"),
        )

    @classmethod
    def decode(cls, raw: bytes | str) -> RelayedAnswer:
        """Raises ``ValueError`` (``KeyError``, ``TypeError`` included) on a malformed one."""
        value: dict[str, Any] = json.loads(raw)
        if "failure" in value:
            return cls(failure=RelayFailure(value["failure"]), detail=str(value.get("detail", "")))
        return cls(
            int(value["status"]),
            [(str(k), str(v)) for k, v in value["headers"]],
            base64.b64decode(value["body"], validate=True),
        )
