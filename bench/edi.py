"""EDIFACT intake benchmark: tidegate split vs pydifact parse+split, in the same run.

Generates two IFCSUM files with :mod:`tidegate.edi.synthetic` (never corpus data): one
interchange of 5,000 consignments, and a ~50 MB file of such interchanges
concatenated. Each (tool, file) pair runs in its own subprocess so that peak memory is
that tool's alone: the child reports ``ru_maxrss`` of itself (``RUSAGE_SELF``) and the
RSS it had after imports, before reading the file.

* tidegate: ``read_chunks`` (64 KiB) -> ``EnvelopeReader`` -> ``split_ifcsum``: units
  with B/L, dead-letter reasons, containers checked, raw text and idempotency keys.
* pydifact 0.2.3: the file decoded into one string (it needs the whole text),
  ``Parser().parse`` -> the same CNI grouping with the B/L taken from ``RFF+BM``.
  It does less per unit than tidegate (no keys, no container checks, no raw text).

Speed is segments per second of wall time (best of ``--repeat`` runs) and of CPU
time; CPU time is the fairer figure on a shared machine. pydifact on the large file
can take minutes: it runs with ``--pydifact-timeout`` and is reported as skipped
(with the reason) when it does not finish, or with ``--skip-pydifact-large``.

Edge inputs (issue #13): each in its own subprocess too, through ``inspect_source`` as
``tidegate edi inspect`` reads a file (64 KiB chunks).

* escaped terminators: one FTX whose text is ``?'`` repeated, at 100 KB and at 1 MB.
  Linear time means the same time per byte at both sizes (ratio ~1); the reader was
  quadratic here before (262 KB took 3.3 s).
* invalid tags: 1,000,000 segments ``1'`` (2 MB) inside one message: peak RSS, and the
  number of findings in the report (capped per code, with a counted summary).

Usage::

    .venv/bin/python bench/edi.py [--out bench-edi.json] [--skip-pydifact-large]
    .venv/bin/python bench/edi.py --edges-only
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_CONSIGNMENTS = 5_000
DEFAULT_LARGE_MB = 50
TOOLS = ("tidegate", "pydifact")


def _rss_kib() -> int:
    """Current resident set size of this process, in KiB (Linux /proc)."""
    try:
        with open("/proc/self/statm") as handle:
            pages = int(handle.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") // 1024
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _work_tidegate(path: str) -> dict[str, Any]:
    from tidegate.edi import Intake, read_chunks

    intake = Intake(read_chunks(path))
    units = dead_letter = 0
    for result in intake:
        for unit in result.units:
            units += 1
            dead_letter += unit.dead_letter
        del result  # hold one message's units at a time, as a worker would
    return {"segments": intake.reader.segment_count, "units": units, "dead_letter": dead_letter}


def _work_pydifact(path: str) -> dict[str, Any]:
    import warnings

    warnings.simplefilter("ignore")
    from pydifact.parser import Parser

    text = Path(path).read_bytes().decode("latin-1")
    segments = units = dead_letter = 0
    group: list[Any] | None = None

    def close(group: list[Any] | None) -> int:
        """1 when the consignment has neither RFF+BM nor RFF+BN (tidegate's dead letter)."""
        if group is None:
            return 0
        for segment in group:
            if segment.tag == "RFF":
                element = segment.elements[0]
                if isinstance(element, list) and element[0] in ("BM", "BN") and element[1]:
                    return 0
        return 1

    for segment in Parser().parse(text):
        segments += 1
        if segment.tag == "CNI":
            dead_letter += close(group)
            units += 1
            group = [segment]
        elif segment.tag in ("UNT", "UNZ"):
            dead_letter += close(group)
            group = None
        elif group is not None:
            group.append(segment)
    return {"segments": segments, "units": units, "dead_letter": dead_letter}


def _child(tool: str, path: str) -> None:
    """Run one workload in this (fresh) process and print the measurements as JSON."""
    if tool == "tidegate":
        import tidegate.edi  # noqa: F401  (imports are not part of the measurement)
    else:
        import pydifact.parser  # noqa: F401
    baseline = _rss_kib()
    wall, cpu = time.perf_counter(), time.process_time()
    result = _work_tidegate(path) if tool == "tidegate" else _work_pydifact(path)
    result["wall_s"] = time.perf_counter() - wall
    result["cpu_s"] = time.process_time() - cpu
    result["baseline_rss_mib"] = baseline / 1024
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


EDGE_SIZES = {"escaped": (100_000, 1_000_000), "invalid_tags": (2_000_000,)}
_UNB = b"UNB+UNOA:3+SENDER+RECEIVER+240115:1200+IC1'UNH+1+IFTSTA:D:00B:UN'"


def _edge_input(kind: str, size: int) -> bytes:
    """``size`` bytes of the pathological part, inside one interchange and message."""
    if kind == "escaped":
        middle = b"FTX+AAA+++" + b"?'" * (size // 2) + b"'"
    else:
        middle = b"1'" * (size // 2)
    return _UNB + middle + b"UNT+3+1'UNZ+1+IC1'"


def _edge_child(kind: str, size: str, path: str) -> None:
    """Inspect one edge input in this (fresh) process; print the measurements as JSON."""
    from tidegate.edi import inspect_path

    baseline = _rss_kib()
    wall, cpu = time.perf_counter(), time.process_time()
    report = inspect_path(path)
    result = {
        "kind": kind,
        "bytes": Path(path).stat().st_size,
        "size": int(size),
        "wall_s": time.perf_counter() - wall,
        "cpu_s": time.process_time() - cpu,
        "segments": report["segments"],
        "findings": len(report["findings"]),
        "findings_total": sum(f.get("count", 1) for f in report["findings"]),
        "error": report["error"],
        "baseline_rss_mib": baseline / 1024,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    print(json.dumps(result))


def _run_edges(directory: Path, repeat: int, timeout: float) -> list[dict[str, Any]]:
    rows = []
    for kind, sizes in EDGE_SIZES.items():
        for size in sizes:
            path = directory / f"edge-{kind}-{size}.edi"
            path.write_bytes(_edge_input(kind, size))
            print(f"running edge input {path.name} ...", file=sys.stderr, flush=True)
            runs = []
            for _ in range(repeat if kind == "escaped" else 1):
                try:
                    done = subprocess.run(
                        [sys.executable, __file__, "--edge-child", kind, str(size), str(path)],
                        capture_output=True,
                        text=True,
                        timeout=timeout,
                        check=False,
                    )
                except subprocess.TimeoutExpired:
                    runs = [{"kind": kind, "size": size, "skipped": f"over {timeout:.0f}s"}]
                    break
                if done.returncode != 0:
                    tail = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
                    runs = [{"kind": kind, "size": size, "skipped": f"failed: {tail[0][:200]}"}]
                    break
                runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
            rows.append(min(runs, key=lambda run: run.get("cpu_s", math.inf)))
    return rows


def _edge_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| edge input | bytes | CPU s | µs CPU per KB | segments | findings listed (total) "
        "| peak RSS MiB | RSS after imports MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        if "skipped" in row:
            lines.append(f"| {row['kind']} | {row['size']:,} | skipped: {row['skipped']} |")
            continue
        per_kb = row["cpu_s"] / (row["bytes"] / 1000) * 1e6
        lines.append(
            f"| {row['kind']} | {row['bytes']:,} | {row['cpu_s']:.3f} | {per_kb:,.1f} "
            f"| {row['segments']:,} | {row['findings']:,} ({row['findings_total']:,}) "
            f"| {row['peak_rss_mib']:.1f} | {row['baseline_rss_mib']:.1f} |"
        )
    escaped = [r for r in rows if r["kind"] == "escaped" and "cpu_s" in r]
    if len(escaped) == 2:
        small, large = sorted(escaped, key=lambda r: r["bytes"])
        ratio = (large["cpu_s"] / large["bytes"]) / (small["cpu_s"] / small["bytes"])
        lines += [
            "",
            f"- escaped terminators: CPU time per byte at {large['bytes']:,} B / at "
            f"{small['bytes']:,} B = {ratio:.2f} (1 = linear; quadratic would be "
            f"~{large['bytes'] / small['bytes']:.0f})",
        ]
    return "\n".join(lines)


def _run(tool: str, path: Path, repeat: int, timeout: float) -> dict[str, Any]:
    runs = []
    for _ in range(repeat):
        try:
            done = subprocess.run(
                [sys.executable, __file__, "--child", tool, str(path)],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return {"skipped": f"did not finish within {timeout:.0f}s"}
        if done.returncode != 0:
            tail = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
            return {"skipped": f"failed: {tail[0][:200]}"}
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    best = min(runs, key=lambda run: run["wall_s"])
    best["cpu_s"] = min(run["cpu_s"] for run in runs)
    best["peak_rss_mib"] = max(run["peak_rss_mib"] for run in runs)
    best["runs"] = len(runs)
    best["segments_per_s"] = best["segments"] / best["wall_s"]
    best["segments_per_cpu_s"] = best["segments"] / best["cpu_s"]
    return best


def _generate(directory: Path, consignments: int, large_mb: float) -> dict[str, Path]:
    from tidegate.edi.synthetic import iter_synthetic_interchanges, synthetic_ifcsum

    small = directory / f"ifcsum-{consignments}.edi"
    small.write_bytes(synthetic_ifcsum(consignments, seed=1))
    files = {"small": small}
    if large_mb > 0:
        count = max(1, math.ceil(large_mb * 1024 * 1024 / small.stat().st_size))
        large = directory / f"ifcsum-{count}x{consignments}.edi"
        with large.open("wb") as handle:
            # No UNA between the interchanges: pydifact would silently drop everything
            # before a second UNA and look faster for it.
            for chunk in iter_synthetic_interchanges(consignments, interchanges=count, seed=2):
                handle.write(chunk)
        files["large"] = large
    return files


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| file | MB | segments | tool | units | dead-letter | wall s | segments/s (wall) "
        "| segments/s (CPU) | peak RSS MiB | RSS after imports MiB |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        result = row["result"]
        head = f"| {row['file']} | {row['mb']:.1f} | {row['segments']:,} | {row['tool']} |"
        if "skipped" in result:
            lines.append(f"{head} – | – | – | skipped: {result['skipped']} | – | – | – |")
            continue
        lines.append(
            f"{head} {result['units']:,} | {result['dead_letter']:,} | {result['wall_s']:.2f} "
            f"| {result['segments_per_s']:,.0f} | {result['segments_per_cpu_s']:,.0f} "
            f"| {result['peak_rss_mib']:.1f} | {result['baseline_rss_mib']:.1f} |"
        )
    return "\n".join(lines)


def _ratios(rows: list[dict[str, Any]]) -> list[str]:
    by_file: dict[str, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_file.setdefault(row["file"], {})[row["tool"]] = row["result"]
    lines = []
    for name, results in by_file.items():
        ours, theirs = results.get("tidegate", {}), results.get("pydifact", {})
        if "segments_per_s" in ours and "segments_per_s" in theirs:
            lines.append(
                f"- {name}: tidegate is {ours['segments_per_s'] / theirs['segments_per_s']:.1f}x "
                f"pydifact by wall time, "
                f"{ours['segments_per_cpu_s'] / theirs['segments_per_cpu_s']:.1f}x by CPU time; "
                f"peak RSS {ours['peak_rss_mib']:.0f} vs {theirs['peak_rss_mib']:.0f} MiB"
            )
            if ours["units"] != theirs["units"]:
                lines.append(f"  - unit counts differ: {ours['units']} vs {theirs['units']}")
        elif "skipped" in theirs:
            lines.append(f"- {name}: pydifact skipped ({theirs['skipped']})")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--consignments", type=int, default=DEFAULT_CONSIGNMENTS)
    parser.add_argument("--large-mb", type=float, default=DEFAULT_LARGE_MB, help="0 to skip")
    parser.add_argument("--repeat", type=int, default=5, help="runs per tool on the small file")
    parser.add_argument("--repeat-large", type=int, default=1)
    parser.add_argument("--skip-pydifact-large", action="store_true")
    parser.add_argument("--pydifact-timeout", type=float, default=240.0)
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    parser.add_argument("--edges-only", action="store_true", help="only the edge inputs")
    parser.add_argument("--edge-timeout", type=float, default=300.0)
    parser.add_argument("--child", nargs=2, metavar=("TOOL", "FILE"), help=argparse.SUPPRESS)
    parser.add_argument("--edge-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(*args.child)
        return
    if args.edge_child:
        _edge_child(*args.edge_child)
        return

    with tempfile.TemporaryDirectory(prefix="tidegate-bench-edi-") as tmp:
        edges = _run_edges(Path(tmp), 3, args.edge_timeout)
        if args.edges_only:
            print(_edge_table(edges))
            if args.out:
                args.out.write_text(json.dumps({"edges": edges}, indent=2) + "\n")
            return
        files = _generate(Path(tmp), args.consignments, args.large_mb)
        rows = []
        for label, path in files.items():
            repeat = args.repeat if label == "small" else args.repeat_large
            results = {}
            for tool in TOOLS:
                if tool == "pydifact" and label == "large" and args.skip_pydifact_large:
                    results[tool] = {"skipped": "--skip-pydifact-large"}
                    continue
                print(f"running {tool} on {path.name} ...", file=sys.stderr, flush=True)
                timeout = args.pydifact_timeout if tool == "pydifact" else 600.0
                results[tool] = _run(tool, path, repeat, timeout)
            segments = results["tidegate"].get("segments", 0)
            for tool, result in results.items():
                rows.append(
                    {
                        "file": path.name,
                        "mb": path.stat().st_size / 1024 / 1024,
                        "segments": segments,
                        "tool": tool,
                        "result": result,
                    }
                )
    report = "\n".join([_table(rows), "", *_ratios(rows), "", _edge_table(edges)])
    print(report)
    if args.out:
        payload = {
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
            "consignments": args.consignments,
            "rows": rows,
            "edges": edges,
        }
        args.out.write_text(json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    main()
