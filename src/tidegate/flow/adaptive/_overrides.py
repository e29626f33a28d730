"""An operator's live changes to a running fleet's adaptive policy, validated as a whole.

The configured policy comes from code or the environment; an operator freezing the
controller during an incident, or narrowing its box, writes overrides to the store
instead, which every worker reads each tick. They arrive as strings (a Redis hash),
so they are parsed and the merged policy is built through the policy's own
validation: an override that would make nonsense is refused before it is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from tidegate.errors import ConfigurationError
from tidegate.flow.adaptive._policy import AdaptivePolicy, ConcurrencyPolicy, RatePolicy

__all__ = ["OVERRIDABLE", "apply_overrides"]

#: What an operator may change on a running fleet, and the part of the policy it is in.
OVERRIDABLE: dict[str, str] = {
    "mode": "",
    "min_rate": "rate",
    "max_rate": "rate",
    "suspension_prone": "rate",
    "min_concurrency": "concurrency",
    "max_concurrency": "concurrency",
}
_TRUE, _FALSE = frozenset({"1", "true", "yes", "on"}), frozenset({"0", "false", "no", "off"})


def _parse(name: str, raw: object) -> object:
    text = str(raw).strip().lower() if not isinstance(raw, bool) else str(raw).lower()
    if name == "mode":
        return text
    if name == "suspension_prone":
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ConfigurationError(f"suspension_prone must be true or false, got {raw!r}")
    try:
        if name.endswith("_concurrency"):
            return int(text)
        return float(text)
    except ValueError:
        raise ConfigurationError(f"{name} must be a number, got {raw!r}") from None


def apply_overrides(policy: AdaptivePolicy, overrides: Mapping[str, object]) -> AdaptivePolicy:
    """The policy with an operator's live overrides applied, validated as a whole.

    Args:
        policy: the configured policy (code or environment).
        overrides: ``{field: value}`` for fields in :data:`OVERRIDABLE`; values may be
            strings as stored in Redis (``"frozen"``, ``"2.5"``, ``"true"``).

    Raises:
        ConfigurationError: an unknown field, an unreadable value, or a combination
            that is not a valid policy (``min_rate`` above ``max_rate``…).

    Example::

        >>> base = AdaptivePolicy(rate=RatePolicy(min_rate=1, max_rate=20))
        >>> apply_overrides(base, {"mode": "frozen", "max_rate": "8"}).rate.max_rate
        8.0
    """
    unknown = sorted(set(overrides) - set(OVERRIDABLE))
    if unknown:
        raise ConfigurationError(f"cannot override {unknown}; allowed: {sorted(OVERRIDABLE)}")
    parts: dict[str, dict[str, object]] = {"": {}, "rate": {}, "concurrency": {}}
    for name, raw in overrides.items():
        parts[OVERRIDABLE[name]][name] = _parse(name, raw)
    rate, concurrency = policy.rate, policy.concurrency
    if parts["rate"]:
        rate = replace(rate or RatePolicy(), **parts["rate"])  # type: ignore[arg-type]
    if parts["concurrency"]:
        concurrency = replace(
            concurrency or ConcurrencyPolicy(),
            **parts["concurrency"],  # type: ignore[arg-type]
        )
    mode = parts[""].get("mode", policy.mode)
    return AdaptivePolicy(mode=mode, rate=rate, concurrency=concurrency)  # type: ignore[arg-type]
