"""A downstream's adaptive policy from the environment (``TIDEGATE_<NAME>_ADAPTIVE*``).

The workers read it once per process; an operator changes it live with
``tidegate gate set NAME --adaptive …`` (overrides in Redis, which win). Nothing set
means no controller: the gate keeps its static ``TIDEGATE_<NAME>_RATE``.

====================================  ==============================================
``TIDEGATE_<NAME>_ADAPTIVE``          ``on`` | ``off`` | ``frozen`` (``freeze``)
``TIDEGATE_<NAME>_MIN_RATE`` /        the rate box, calls per second
``_MAX_RATE`` / ``_START_RATE``
``TIDEGATE_<NAME>_SUSPENSION_PRONE``  ``true`` | ``false``: keep a ceiling under 429s
``TIDEGATE_<NAME>_MIN_CONCURRENCY`` / a concurrency box: setting either turns the
``_MAX_CONCURRENCY``                  latency-gradient controller on
====================================  ==============================================
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from tidegate.errors import ConfigurationError
from tidegate.flow.adaptive._policy import AdaptivePolicy, ConcurrencyPolicy, Mode, RatePolicy

__all__ = ["adaptive_policy_from_env", "parse_mode"]

_TRUE, _FALSE = frozenset({"1", "true", "yes", "on"}), frozenset({"0", "false", "no", "off"})


def parse_mode(raw: str) -> Mode:
    """``on``, ``off``, ``frozen`` (or ``freeze``), case-insensitive."""
    text = raw.strip().lower()
    if text == "freeze":
        return "frozen"
    if text in ("on", "off", "frozen"):
        return text  # type: ignore[return-value]
    raise ConfigurationError(f"adaptive mode must be on, off or freeze, got {raw!r}")


def _number(env: Mapping[str, str], key: str) -> float | None:
    raw = env.get(key, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(f"{key} must be a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise ConfigurationError(f"{key} must be finite, got {raw!r}")
    return value


def _whole(env: Mapping[str, str], key: str) -> int | None:
    value = _number(env, key)
    if value is None:
        return None
    if not value.is_integer():
        raise ConfigurationError(f"{key} must be a whole number, got {value!r}")
    return int(value)


def adaptive_policy_from_env(
    name: str, env: Mapping[str, str] | None = None
) -> AdaptivePolicy | None:
    """The adaptive policy of downstream ``name``, or ``None`` when it has none.

    Raises:
        ConfigurationError: a value that is not a number, a mode that does not exist,
            or a box that is not one (``MIN_RATE`` above ``MAX_RATE``…).
    """
    source = os.environ if env is None else env
    stem = f"TIDEGATE_{name.upper().replace('-', '_').replace('.', '_')}_"
    raw_mode = source.get(stem + "ADAPTIVE", "").strip()
    if not raw_mode:
        return None
    mode = parse_mode(raw_mode)
    rate: dict[str, Any] = {}
    for field in ("min_rate", "max_rate", "start_rate"):
        value = _number(source, stem + field.upper())
        if value is not None:
            rate[field] = value
    prone = source.get(stem + "SUSPENSION_PRONE", "").strip().lower()
    if prone:
        if prone not in _TRUE | _FALSE:
            raise ConfigurationError(f"{stem}SUSPENSION_PRONE must be true or false, got {prone!r}")
        rate["suspension_prone"] = prone in _TRUE
    concurrency: dict[str, Any] = {}
    for field in ("min_concurrency", "max_concurrency"):
        whole = _whole(source, stem + field.upper())
        if whole is not None:
            concurrency[field] = whole
    return AdaptivePolicy(
        mode=mode,
        rate=RatePolicy(**rate),
        concurrency=ConcurrencyPolicy(**concurrency) if concurrency else None,
    )
