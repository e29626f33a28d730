"""How a replay of the quarantine from the page queues documents: the normal intake.

The same path as ``tidegate quarantine replay`` and the monitor's automatic replay —
:meth:`~tidegate.load.admission.Admission.replay` — so a queue still under sustained
overload keeps its documents (they go back in line) unless the operator forces it,
and two replays never queue one document twice. Celery only: documents shed by an RQ
intake are put back in line, and the page says how many.
"""

from __future__ import annotations

from collections.abc import Callable

import redis

from tidegate.console.actions import ReplayQuarantine
from tidegate.load.admission import ReplayReport
from tidegate.settings import Settings

__all__ = ["celery_quarantine_replayer"]


def celery_quarantine_replayer(
    client: redis.Redis, broker_url: str, *, prefix: str, settings: Settings | None = None
) -> tuple[ReplayQuarantine, Callable[[], None]]:
    """``(replay, close)`` over one Celery producer for ``broker_url``.

    ``settings`` (the process's, built once by its CLI) give the watermarks' defaults
    and the shedding policy; the built-in values when omitted.

    The producer is configured like the workers (on RabbitMQ, the quorum queues'
    arguments and publisher confirms), and each replay's queue is declared with them.
    """
    from celery import Celery

    from tidegate.integrations.celery.depth import probe_from_url
    from tidegate.integrations.celery.preset import CeleryPreset, configure
    from tidegate.integrations.celery.sender import CelerySender
    from tidegate.load.admission import Admission
    from tidegate.load.quarantine import Quarantine
    from tidegate.load.watermarks import LoadBoard, WatermarkStore

    settings = settings if settings is not None else Settings.load({})
    probe = probe_from_url(broker_url)
    apps: list[Celery] = []

    def replay(queue: str, limit: int, force: bool) -> ReplayReport:
        app = configure(Celery(broker=broker_url), CeleryPreset(queues=(queue,), routes={}))
        apps.append(app)
        try:
            admission = Admission(
                CelerySender(app),
                {queue: ""},
                probe=probe,
                quarantine=Quarantine(client, prefix=prefix),
                settings=settings,
                watermarks=WatermarkStore(client, prefix=prefix, defaults=settings.watermarks),
                board=LoadBoard(client, prefix=prefix),
            )
            return admission.replay(queue, limit, force=force)
        finally:
            apps.remove(app)
            app.close()

    def close() -> None:
        for app in list(apps):
            app.close()
        closer = getattr(probe, "close", None)
        if callable(closer):
            closer()

    return replay, close
