"""The intake's size limit: a document too large for the broker is refused before it.

Every worker that fetches a message holds it in memory, and a Redis broker holds the
whole backlog in RAM: one 50 MB interchange pasted into a queue of thousands is an
outage, not a document. The limit is checked on the compact JSON the broker would
carry, and a refusal is a typed error (:class:`~tidegate.errors.PayloadTooLarge`) the
producer answers to its sender — the document is not lost, it was never taken.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tidegate.errors import ConfigurationError, PayloadTooLarge
from tidegate.logging import get_logger

__all__ = ["DEFAULT_MAX_PAYLOAD_BYTES", "check_payload_size"]

log = get_logger("tidegate.intake")

#: 256 KiB: an IFCSUM of a few hundred B/Ls; larger ones are split before the broker.
DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024


def check_payload_size(payload: Mapping[str, Any], *, limit_bytes: int) -> int:
    """Return ``payload``'s size (compact JSON, bytes) or raise :class:`PayloadTooLarge`.

    The refusal is logged once as ``intake_refused`` (key, sizes; never the payload).
    """
    if isinstance(limit_bytes, bool) or not isinstance(limit_bytes, int) or limit_bytes < 1:
        raise ConfigurationError(f"limit_bytes must be an int >= 1, got {limit_bytes!r}")
    size = len(json.dumps(dict(payload), separators=(",", ":")).encode())
    if size > limit_bytes:
        key = str(payload.get("key", "?"))
        log.warning(
            "intake_refused",
            key=key,
            reason="payload_too_large",
            size_bytes=size,
            limit_bytes=limit_bytes,
        )
        raise PayloadTooLarge(key, size, limit_bytes)
    return size
