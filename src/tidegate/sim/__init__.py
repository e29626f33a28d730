"""Simulated downstreams: real HTTP servers on loopback that behave like the port's.

* :class:`CustomsSim` — the customs single window: advertises a per-minute quota,
  enforces a per-second token bucket (429 + ``Retry-After``), suspends repeat offenders;
  its rate can follow a capacity schedule (a maintenance dip) it never announces.
* :class:`TosSim` — the terminal operating system: at most K requests in flight, 503
  beyond; optionally slower with every call beyond its capacity.
* :class:`DatabaseSim` — the shared database: latency grows with concurrent writers.

Each records every accepted write with its ``Idempotency-Key`` (duplicates and losses
are counted, not guessed), serves its counters at ``GET /stats``, misbehaves on demand
(:meth:`SimServer.set_fault`, :meth:`SimServer.set_outage`) and runs either in a
background thread::

    with CustomsSim(rate=5, burst=2) as sim:
        httpx.post(sim.endpoint, json={...}, headers={"Idempotency-Key": "k1"})
        sim.stats()["accepted"]

or as its own process: ``python -m tidegate.sim customs --port 0 --rate 5 --burst 2``
prints ``{"url": ...}`` as its first stdout line, and :class:`SimProcess` starts one
and reads it from the parent.
"""

from __future__ import annotations

from tidegate.sim._base import (
    BAD_RETRY_AFTER,
    CONTROL_PATHS,
    DEFAULT_HOST,
    FAULT_MODES,
    HUGE_RETRY_AFTER_S,
    OUTAGE_MODES,
    Clock,
    DocumentCheck,
    FaultMode,
    OutageMode,
    SimServer,
    Verdict,
)
from tidegate.sim._customs import (
    CapacitySchedule,
    CustomsSim,
    QuotaHeaders,
    RetryAfterFormat,
    TokenBucket,
)
from tidegate.sim._database import DatabaseSim
from tidegate.sim._process import SimProcess, SimProcessError
from tidegate.sim._stats import bucket_counts, busy_share, max_in_window
from tidegate.sim._tos import TosSim

__all__ = [
    "BAD_RETRY_AFTER",
    "CONTROL_PATHS",
    "DEFAULT_HOST",
    "FAULT_MODES",
    "HUGE_RETRY_AFTER_S",
    "OUTAGE_MODES",
    "CapacitySchedule",
    "Clock",
    "CustomsSim",
    "DatabaseSim",
    "DocumentCheck",
    "FaultMode",
    "OutageMode",
    "QuotaHeaders",
    "RetryAfterFormat",
    "SimProcess",
    "SimProcessError",
    "SimServer",
    "TokenBucket",
    "TosSim",
    "Verdict",
    "bucket_counts",
    "busy_share",
    "max_in_window",
]
