"""The fault scenarios of ``tidegate demo --chaos``: one module per fault kind.

The rule of this package: a fault kind's module holds the fault (what it breaks, when,
and what it expects to see afterwards) and nothing else; the configuration, the run
around the vessel burst, the per-key verdict and the report are shared by every kind
and live in their own modules here. A chaos configuration *contains* the vessel
scenario's configuration rather than copying its fields.
"""

from __future__ import annotations

__all__: list[str] = []
