"""The adaptive part of ``tidegate gate set`` and ``gate show``: live overrides, learned state.

``gate set NAME --adaptive on|off|freeze --min-rate … --max-rate … --min-concurrency …
--max-concurrency … --suspension-prone/--no-suspension-prone`` writes the operator's
overrides into Redis, where every worker's controller reads them at its next tick
(they win over the workers' ``TIDEGATE_<NAME>_*``). The CLI checks what it can without
the workers' configuration — each value, and the box the overrides draw together; a
worker whose own settings make the result invalid logs ``adaptive_overrides_invalid``
and keeps its configured policy.

``gate show NAME`` reads what the fleet learned: rate, ceiling, concurrency, the
controller's holder, the overrides and the bounded change history.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import redis

from tidegate.errors import ConfigurationError
from tidegate.flow.adaptive import RedisAdaptiveStore
from tidegate.flow.adaptive._env import parse_mode
from tidegate.keys import Keyspace

__all__ = ["ADAPTIVE_FLAGS", "adaptive_report", "write_adaptive"]

#: The override fields and the ``gate set`` flag that changes each.
ADAPTIVE_FLAGS = {
    "mode": "--adaptive",
    "min_rate": "--min-rate",
    "max_rate": "--max-rate",
    "min_concurrency": "--min-concurrency",
    "max_concurrency": "--max-concurrency",
    "suspension_prone": "--suspension-prone",
}
#: Change history entries ``gate show`` prints (the store keeps more).
SHOWN_HISTORY = 10


def _check_box(merged: Mapping[str, str]) -> None:
    for low, high in (("min_rate", "max_rate"), ("min_concurrency", "max_concurrency")):
        if low in merged and high in merged and float(merged[low]) > float(merged[high]):
            raise ConfigurationError(
                f"{low} ({merged[low]}) must be <= {high} ({merged[high]}) (live overrides)"
            )


def write_adaptive(
    client: redis.Redis, name: str, prefix: str, values: Mapping[str, Any], *, check: bool = False
) -> dict[str, str]:
    """Validate and write the adaptive overrides in ``values`` (``None`` entries are
    not given); returns every override now in force (``check``: only validate, and
    return what would be).

    Raises:
        ConfigurationError: an unknown mode, a value out of range, or a box whose
            minimum is above its maximum (nothing is written).
    """
    given = {field: value for field, value in values.items() if value is not None}
    if not given:
        return read_overrides(client, name, prefix)
    stored: dict[str, str] = {}
    for field, value in given.items():
        if field == "mode":
            stored[field] = parse_mode(str(value))
        elif field == "suspension_prone":
            stored[field] = "true" if value else "false"
        elif field.endswith("concurrency"):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"{field} must be a whole number >= 1, got {value!r}")
            stored[field] = str(value)
        else:
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigurationError(f"{field} must be a finite number > 0, got {value!r}")
            stored[field] = repr(float(value))
    store = RedisAdaptiveStore(client)
    keys = Keyspace(prefix).adaptive(name)
    merged = {**store.read_overrides(keys), **stored}
    _check_box(merged)
    if not check:
        store.write_overrides(keys, stored)
    return merged


def read_overrides(client: redis.Redis, name: str, prefix: str) -> dict[str, str]:
    """The adaptive overrides in force for ``name``."""
    store = RedisAdaptiveStore(client)
    return store.read_overrides(Keyspace(prefix).adaptive(name))


def adaptive_report(client: redis.Redis, name: str, prefix: str) -> dict[str, Any]:
    """What the fleet's controller of ``name`` learned and who runs it (plain data)."""
    store = RedisAdaptiveStore(client)
    keys = Keyspace(prefix).adaptive(name)
    record = store.load(keys)
    rate, concurrency = record.rate, record.concurrency
    return {
        "overrides": store.read_overrides(keys),
        "controller": store.leader(keys),
        "learned_rate": None if rate is None else round(rate.rate, 6),
        "ceiling": None if rate is None or rate.ceiling is None else round(rate.ceiling, 6),
        "learned_concurrency": None if concurrency is None else concurrency.concurrency,
        "history": store.history(keys, SHOWN_HISTORY),
    }
