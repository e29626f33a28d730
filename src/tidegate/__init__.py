"""tidegate: flow control between an elastic worker fleet and slow downstreams."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
