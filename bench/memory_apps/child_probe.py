"""The vessel app, with tracemalloc in every pool child: snapshots at fixed task counts.

Started by ``bench/child_heap.py`` as ``celery -A memory_apps.child_probe worker``.
Each child starts tracemalloc when it is forked and dumps a snapshot (and its RSS)
after its ``CHILD_HEAP_AT`` th tasks (default ``100,900``), into ``CHILD_HEAP_DIR``:
two snapshots of one child's life under ``max_tasks_per_child`` = 1,000, whose
difference is what the child keeps per task it has run.
"""

from __future__ import annotations

import gc
import json
import os
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

import psutil
from celery import signals

from tidegate.harness.vessel_app import app

__all__ = ["app"]

_DIR = Path(os.environ.get("CHILD_HEAP_DIR") or Path(tempfile.gettempdir()) / "child-heap")
_AT = {int(n) for n in os.environ.get("CHILD_HEAP_AT", "100,900").split(",")}
_FRAMES = int(os.environ.get("CHILD_HEAP_FRAMES", "12"))
_TRACE = os.environ.get("CHILD_HEAP_TRACE", "1") == "1"
_PUBLISH_AT = {int(n) for n in os.environ.get("CHILD_HEAP_PUBLISH_AT", "").split(",") if n}
#: Start tracing at this publish instead of at the fork (a large dispatch's carving
#: under tracemalloc outlasts the soft time limit; its publishing loop does not).
_TRACE_FROM_PUBLISH = int(os.environ.get("CHILD_HEAP_TRACE_FROM_PUBLISH", "0"))
_count = 0
_published = 0


@signals.worker_process_init.connect
def _start(**_: Any) -> None:
    if _TRACE and not _TRACE_FROM_PUBLISH:
        tracemalloc.start(_FRAMES)


@signals.task_postrun.connect
def _look(**_: Any) -> None:
    global _count  # noqa: PLW0603 - one counter per child process
    _count += 1
    if _count in _AT:
        _dump(f"{_count}")


@signals.before_task_publish.connect
def _publishing(**_: Any) -> None:
    global _published  # noqa: PLW0603 - one counter per child process
    _published += 1
    if _TRACE and _published == _TRACE_FROM_PUBLISH:
        tracemalloc.start(_FRAMES)
    if _published in _PUBLISH_AT:
        _dump(f"p{_published}")


def _dump(label: str) -> None:
    gc.collect()
    pid = os.getpid()
    _DIR.mkdir(parents=True, exist_ok=True)
    if tracemalloc.is_tracing():
        tracemalloc.take_snapshot().dump(str(_DIR / f"{pid}-{label}.snap"))
    traced, peak = tracemalloc.get_traced_memory()
    info = {
        "pid": pid,
        "tasks": _count,
        "published": _published,
        "rss_mb": psutil.Process().memory_info().rss / 2**20,
        "hwm_mb": _hwm_kb() / 1024,
        "traced_mb": traced / 2**20,
        "traced_peak_mb": peak / 2**20,
    }
    info["mappings_kb"] = _mappings()
    info["mallinfo"] = _mallinfo()
    (_DIR / f"{pid}-{label}.json").write_text(json.dumps(info))


def _hwm_kb() -> int:
    """The process's peak RSS so far (``VmHWM``), in KiB."""
    for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def _mappings() -> dict[str, int]:
    """Resident KiB per kind of mapping: ``[heap]`` (glibc's brk heap), anonymous
    mappings (pymalloc arenas, glibc's mmap'd chunks and thread arenas), each file."""
    rss: dict[str, int] = {}
    name = ""
    for line in Path(f"/proc/{os.getpid()}/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and not head[0].endswith(":"):
            name = head[5] if len(head) > 5 else "[anon]"
        elif head and head[0] == "Rss:":
            rss[name] = rss.get(name, 0) + int(head[1])
    return rss


def _mallinfo() -> dict[str, int]:
    """glibc's own accounting (``mallinfo2``): bytes taken from the system vs in use."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (f, ctypes.c_size_t)
            for f in (
                "arena",
                "ordblks",
                "smblks",
                "hblks",
                "hblkhd",
                "usmblks",
                "fsmblks",
                "uordblks",
                "fordblks",
                "keepcost",
            )
        ]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    m = libc.mallinfo2()
    return {f: int(getattr(m, f)) for f, _ in MallInfo2._fields_}
