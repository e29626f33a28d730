"""JSON, and nothing else, for RQ jobs.

RQ stores a job's function, arguments and meta with pickle unless told otherwise, and
a worker unpickles whatever sits in the queue: anyone who can write to Redis can run
code on the fleet. tidegate's RQ queues and workers use :class:`JsonSerializer`
instead (the same bytes as RQ's own ``JSONSerializer``, so either can enqueue), whose
``loads`` refuses anything that is not JSON with :class:`ContentRefused` — it never
hands the bytes to pickle, so a planted job is reported, never run.
"""

from __future__ import annotations

import json
from typing import Any

import redis
from rq.exceptions import DeserializationError
from rq.job import Job
from rq.queue import Queue

from tidegate.errors import MalformedUnit

__all__ = ["ContentRefused", "JsonSerializer", "json_queue", "refusal"]

#: Every pickle since protocol 2 opens with the PROTO opcode; RQ writes protocol 5.
_PICKLE_PROTO = b"\x80"


class ContentRefused(MalformedUnit):
    """An RQ job whose stored data is not JSON: refused unread, dead-lettered, never run.

    Attributes:
        content: ``"pickle"``, ``"not JSON"`` or ``"unreadable"`` (JSON, but not an RQ job);
            never the bytes themselves.
    """

    def __init__(self, key: str, content: str) -> None:
        self.content = content
        super().__init__(key, f"job data is {content}; tidegate's RQ workers take JSON only")


def _content_of(data: bytes) -> str:
    """What undecodable job data looks like, for the report (never the bytes)."""
    if data[:1] == _PICKLE_PROTO:
        return "pickle"
    try:
        json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return "not JSON"
    return "unreadable"


class JsonSerializer:
    """RQ's serializer protocol (``dumps``/``loads``), JSON only."""

    @staticmethod
    def dumps(obj: Any) -> bytes:
        return json.dumps(obj).encode("utf-8")

    @staticmethod
    def loads(data: bytes) -> Any:
        """Decode JSON; anything else raises :class:`ContentRefused`, never unpickled."""
        try:
            return json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ContentRefused("", _content_of(data)) from None


def json_queue(name: str, connection: redis.Redis) -> Queue:
    """RQ queue ``name`` writing and reading jobs as JSON: the only kind tidegate makes."""
    return Queue(name, connection=connection, serializer=JsonSerializer)


def refusal(job: Job) -> ContentRefused | None:
    """Why ``job`` must not run (its data is not JSON), or ``None`` if it is readable.

    RQ decodes a job's data lazily, on first use of ``func_name``/``args``: asking
    here, before anything else touches the job, decides it up front. Under a worker
    still on RQ's pickle default this would unpickle: only ask with a JSON job.
    """
    try:
        job.func_name  # noqa: B018 - the property decodes the job's data
    except DeserializationError:
        return ContentRefused(job.id, _content_of(job.data))
    return None
