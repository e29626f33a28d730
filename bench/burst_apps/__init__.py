"""Celery apps of the baselines of ``bench/burst.py`` (no tidegate gate in them).

* :mod:`burst_apps.celery_defaults` — Celery as most fleets run it: prefetch 4, early
  acks, a per-task ``rate_limit`` set to the downstream's limit, ``self.retry(countdown=…)``
  on 429/503.
* :mod:`burst_apps.seed_design` — the seed design: prefetch 1 + acks_late, a
  read-modify-write Redis token bucket shared by every worker, ``self.retry(countdown=…)``
  when throttled and on 429/503.

Workers load them with ``celery -A burst_apps.<module> worker`` and ``bench/`` on
``PYTHONPATH``; everything else comes from the environment (see :mod:`burst_apps._common`).
"""

from __future__ import annotations
