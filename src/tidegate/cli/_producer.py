"""The producer side of the CLI's commands: the admission replays go through, and the
live watermarks, both on the command's one :class:`~tidegate.settings.Settings`.

Heavy imports (Celery, RQ) stay inside the functions: ``tidegate --help`` must not
pay for them.
"""

from __future__ import annotations

from typing import Any

from tidegate.cli._common import process_settings
from tidegate.settings import Settings

__all__ = ["build_replay_admission", "watermark_store"]


def build_replay_admission(
    client: Any,
    broker: str,
    queues: list[str],
    *,
    prefix: str,
    sender: str,
    settings: Settings | None = None,
) -> Any:
    """The intake replays go through: the broker's probe and sender, tidegate's Redis;
    ``settings`` default to :func:`process_settings` (read once here)."""
    from tidegate.integrations.celery.depth import probe_from_url
    from tidegate.integrations.celery.sender import CelerySender
    from tidegate.load.admission import Admission
    from tidegate.load.quarantine import Quarantine
    from tidegate.load.watermarks import LoadBoard

    settings = settings if settings is not None else process_settings()
    if sender == "rq":
        from tidegate._redis import client_from_url
        from tidegate.integrations.rq import RqDepthProbe, RqSender

        connection = client_from_url(broker)
        probe: Any = RqDepthProbe(connection)
        out: Any = RqSender(connection)
    else:
        from celery import Celery

        from tidegate.integrations.celery.preset import CeleryPreset, configure

        probe = probe_from_url(broker)
        # Configured like the workers: on RabbitMQ the queues are declared with the same
        # quorum arguments (else the broker refuses) and each publish waits for its confirm.
        preset = CeleryPreset(queues=tuple(dict.fromkeys(queues)), routes={}) if queues else None
        out = CelerySender(configure(Celery(broker=broker), preset))
    return Admission(
        out,
        dict.fromkeys(queues, ""),
        probe=probe,
        quarantine=Quarantine(client, prefix=prefix),
        settings=settings,
        watermarks=watermark_store(client, prefix, settings),
        board=LoadBoard(client, prefix=prefix),
    )


def watermark_store(client: Any, prefix: str, settings: Settings | None = None) -> Any:
    """The live watermarks over this process's defaults (``TIDEGATE_QUEUE_*``, read once)."""
    from tidegate.load.watermarks import WatermarkStore

    marks = (settings if settings is not None else process_settings()).watermarks
    return WatermarkStore(client, prefix=prefix, defaults=marks)
