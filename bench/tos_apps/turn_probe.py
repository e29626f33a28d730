"""The vessel app, with every step of a TOS unit's turn time-stamped (bench only).

Started by ``bench/tos_turn.py`` as ``celery -A tos_apps.turn_probe worker``. Each pool
child appends one JSON line per TOS task to ``TOS_TURN_DIR/turn-<pid>.jsonl``: the
Celery prerun/postrun instants and, for each lifecycle step and each gate backend call
inside it, ``[name, start, end]`` in wall-clock seconds (``time.time()``, the clock the
TOS sim's service timeline is converted to), so a turn can be laid beside the sim's own
record. Nothing of the payload is written, only step names and instants.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from celery import signals

from tidegate.delivery import driver
from tidegate.flow import permit
from tidegate.flow.backends import redis as redis_backend
from tidegate.harness.vessel_app import app

__all__ = ["app"]

_DIR = Path(os.environ.get("TOS_TURN_DIR") or Path(tempfile.gettempdir()) / "tos-turn")
_marks: list[list[Any]] = []
_task: dict[str, Any] = {}


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.time()
        try:
            return fn(*args, **kwargs)
        finally:
            _marks.append([name, start, time.time()])

    return wrapper


_do = driver._Run._do


def _step(self: Any, step: Any) -> Any:
    start = time.time()
    try:
        return _do(self, step)
    finally:
        _marks.append([type(step).__name__, start, time.time()])


driver._Run._do = _step  # type: ignore[method-assign]
_Backend = redis_backend.RedisBackend
_Backend.acquire = _timed("b.acquire", _Backend.acquire)  # type: ignore[method-assign]
_Backend.wait_released = _timed("b.wait_released", _Backend.wait_released)  # type: ignore[method-assign]
_Backend.release = _timed("b.release", _Backend.release)  # type: ignore[method-assign]
httpx.Client.post = _timed("http.post", httpx.Client.post)  # type: ignore[method-assign]
permit.Permit.start_renewing = _timed("renewer_start", permit.Permit.start_renewing)  # type: ignore[method-assign]


@signals.task_prerun.connect
def _prerun(task: Any = None, **_: Any) -> None:
    _marks.clear()
    _task.clear()
    _task.update(task=getattr(task, "name", ""), prerun=time.time())


@signals.task_postrun.connect
def _postrun(**_: Any) -> None:
    if _task.get("task") != "edi.tos.push":
        return
    _DIR.mkdir(parents=True, exist_ok=True)
    line = {**_task, "postrun": time.time(), "pid": os.getpid(), "marks": list(_marks)}
    with (_DIR / f"turn-{os.getpid()}.jsonl").open("a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")
