"""The demonstration and fault-injection harness — not part of what an operator deploys.

The rule of this package: **product code never imports it.** Everything here starts
things (an embedded Redis, private RabbitMQ nodes, real Celery and RQ worker fleets,
the simulated downstreams) or breaks them on purpose, in order to show and measure
what the product does; the product (``flow/``, ``load/``, ``delivery/``, ``intake/``,
``integrations/``, ``console/``, ``ops/`` …) must run without it. Only the ``tidegate
demo`` commands (``cli/demo*.py``, importing lazily), the tests and ``bench/`` use it;
``tests/test_layout.py`` holds the line.

- ``scenarios/`` — one module per demonstration scenario (vessel burst on Celery or RQ,
  bulk, overload, gate, adaptive, console);
- ``chaos/`` — the fault scenarios: one module per fault kind, plus the shared
  configuration, runner and verdict;
- the parts the scenarios share: the burst itself (``burst``), the demo's HTTP senders
  (``front_door``), the worker apps and fleets (``vessel_app``, ``rq_vessel_app``,
  ``overload_app``, ``celery_fleet``, ``rq_fleet``), the run's broker (``run_broker``,
  ``rabbit_node``, ``rabbit_cluster``), and the report: one reconciliation per key
  (``reconcile``), its terminal view (``report_view``) and the pictures (``plot``,
  ``adaptive_plot``); and how the tests wait on a condition (``polling``).
"""

from __future__ import annotations

__all__: list[str] = []
