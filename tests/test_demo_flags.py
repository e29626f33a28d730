"""`tidegate demo`'s flags, files and exit codes, without starting a worker fleet.

The scenario runners are replaced by fakes that record what they were asked for and
return a report shaped like the real one; everything around them — flag handling, log
directories, tables, files, exit codes — is the real CLI.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner, Result

from tidegate.cli import cli
from tidegate.harness import chaos
from tidegate.harness.scenarios import bulk as bulk_demo
from tidegate.harness.scenarios import gate as gate_demo
from tidegate.harness.scenarios import overload as overload_demo
from tidegate.harness.scenarios import vessel as vessel_demo

T0 = 1_000.0


def _downstream(accepted: int, limit: str, limit_per_s: float) -> dict[str, Any]:
    return {
        "accepted": accepted,
        "duplicates": 0,
        "responses_429": 0,
        "responses_503": 0,
        "limit": limit,
        "limit_per_s": limit_per_s,
        "max_accepted_1s": 10,
        "drain_s": 9.9,
        "ideal_s": 10.0,
        "utilisation": 1.01,
    }


def vessel_report(scenario: str = "vessel") -> dict[str, Any]:
    return {
        "scenario": scenario,
        "submitted": 300,
        "submit_s": 0.2,
        "delivered": 300,
        "dead_lettered": 0,
        "quarantined": 0,
        "refused_at_intake": 0,
        "pending": 0,
        "lost": 0,
        "duplicates": 0,
        "peak_worker_rss_mb": 561.5,
        "elapsed_s": 12.5,
        "samples_skipped": 0,
        "by_class": {"VERMAS": 75, "COARRI": 225},
        "downstreams": {
            "customs": _downstream(100, "10/s", 10.0),
            "tos": _downstream(200, "4 connections", 80.0),
        },
        "config": {"tos_connections": 4},
        "_timelines": {
            "customs": [T0 + i * 0.1 for i in range(100)],
            "tos": [T0 + i * 0.05 for i in range(200)],
            "t0": T0,
        },
    }


def samples() -> list[Any]:
    return [
        SimpleNamespace(
            t=i * 0.5,
            depth={"edi.customs": max(0, 100 - 5 * i), "edi.tos": max(0, 200 - 20 * i)},
            parked=0,
        )
        for i in range(25)
    ]


def live_sample() -> Any:
    """What the live view shows while a run drains (the real sample type, so the view
    cannot read a field a run does not record)."""
    from tidegate.harness.scenarios.vessel import Sample

    return Sample(
        t=3.0,
        depth={"edi.customs": 40, "edi.tos": 10},
        accepted={"customs": 60, "tos": 190},
        parked=0,
        dead_lettered=0,
        responses_429=0,
        responses_503=0,
        rss_mb=556.0,
        rss_by_process={
            "customs": {"main": 73.0, "child": 68.5},
            "tos": {"main": 74.0, "child": 68.7},
        },
    )


def chaos_report(kind: str, *, failed: str | None = None) -> dict[str, Any]:
    report = vessel_report(f"chaos:{kind}")
    checks = [
        {"name": "accounted", "ok": True, "observed": "300 = 300 delivered", "bound": None},
        {
            "name": "no_unplanned_dead_letter",
            "ok": failed != "no_unplanned_dead_letter",
            "observed": 0 if failed is None else 2,
            "bound": 0,
        },
        {"name": "tos_cap_held", "ok": True, "observed": {"max_concurrent": 4, "503": 0}},
    ]
    drain = {"customs": {"delay_s": 0.1}, "tos": {"delay_s": 0.0}}
    report["chaos"] = {"kind": kind, "name": kind, "checks": checks, "drain": drain}
    report["ok"] = failed is None
    return report


class Recorder:
    """Stands in for the scenario runners: records each call, writes a worker log."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def _log(self, log_dir: Path | None) -> None:
        if log_dir is not None:
            (log_dir / "worker-customs.log").write_text("{}\n", encoding="utf-8")

    def vessel(self, url: str, config: Any, **kwargs: Any) -> tuple[dict[str, Any], list[Any]]:
        self.calls.append({"run": "vessel", "config": config, **kwargs})
        self._log(kwargs.get("log_dir"))
        kwargs["on_sample"](live_sample(), 300)
        return vessel_report(), samples()

    def chaos(self, config: Any, **kwargs: Any) -> tuple[dict[str, Any], list[Any]]:
        self.calls.append({"run": "chaos", "config": config, **kwargs})
        self._log(kwargs.get("log_dir"))
        report = chaos_report(config.kind, failed=getattr(self, "chaos_fails", None))
        report["log_dir"] = str(kwargs.get("log_dir"))
        return report, samples()

    def bulk(self, url: str, config: Any, **kwargs: Any) -> tuple[dict[str, Any], list[Any]]:
        self.calls.append({"run": "bulk", "config": config, **kwargs})
        self._log(kwargs.get("log_dir"))
        report = {
            "scenario": "bulk",
            "submitted": 20,
            "delivered": 20,
            "dead_lettered": 1,
            "dead_lettered_after_replay": 0,
            "replayed": 1,
            "quarantined": 0,
            "lost": 0,
            "duplicates": 0,
            "batch": {"units": 20, "dead_lettered": 1},
            "aggregate_s": 1.5,
            "fan_out_s": 2.25,
            "bls_per_s": 8.9,
            "elapsed_s": 3.0,
            "peak_worker_rss_mb": {"bulk": 250.5, "tos": 240.0},
            "config": {"bls": 20},
        }
        return report, []

    def overload(self, url: str, config: Any, **kwargs: Any) -> tuple[dict[str, Any], list[Any]]:
        self.calls.append({"run": "overload", "config": config, **kwargs})
        self._log(kwargs.get("log_dir"))
        report = {
            "scenario": "overload",
            "submitted": 30,
            "delivered": 30,
            "dead_lettered": 0,
            "pending": 0,
            "lost": 0,
            "duplicates": 0,
            "shed_by_class": {"BULK_BL_PDF": 12},
            "replayed": 12,
            "vermas_quarantined": 0,
            "ordering": {"vermas_last_delivered_s": 2.5, "bulk_last_delivered_s": 4.0},
            "peak_worker_rss_mb": 300.25,
            "elapsed_s": 4.5,
            "downstreams": {"customs": {"responses_429": 0, "limit_per_s": 10.0}},
        }
        return report, []

    def gate(self, url: str, **kwargs: Any) -> Any:
        self.calls.append({"run": "gate", **kwargs})
        result = {
            "scenario": "gate",
            "processes": 4,
            "rate": 20.0,
            "burst": 5,
            "admitted": 120,
            "elapsed_s": 5.7,
            "ceiling": 119.0,
            "over_ceiling": 1,
            "max_in_any_1s": 25,
            "allowed_in_any_1s": 25.0,
            "per_process": [30, 30, 30, 30],
        }
        return SimpleNamespace(as_dict=lambda: result)


@contextlib.contextmanager
def _no_redis() -> Iterator[str]:
    yield "redis://127.0.0.1:1/0"


@pytest.fixture
def runners(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Recorder:
    """Fake runners, no Redis, and a temporary directory of this test's own."""
    recorder = Recorder()
    monkeypatch.setattr(vessel_demo, "run_vessel_demo", recorder.vessel)
    monkeypatch.setattr(chaos, "run_chaos", recorder.chaos)
    monkeypatch.setattr(bulk_demo, "run_bulk_demo", recorder.bulk)
    monkeypatch.setattr(overload_demo, "run_overload_demo", recorder.overload)
    monkeypatch.setattr(gate_demo, "run_gate_demo", recorder.gate)
    monkeypatch.setattr("tidegate.cli._demo_runs.redis_url", _no_redis)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return recorder


def demo(*args: str) -> Result:
    return CliRunner().invoke(cli, ["demo", *args])


def scratch_dirs() -> list[str]:
    return sorted(p.name for p in Path(tempfile.gettempdir()).iterdir())


# -- every flag is honoured or refused ---------------------------------------------------


@pytest.mark.parametrize("scenario", ["bulk", "overload", "gate"])
def test_plot_is_refused_where_no_plot_is_drawn(runners: Recorder, scenario: str) -> None:
    """--plot used to be ignored by every scenario but the vessel one: now it is refused
    with a message naming the flag, and nothing runs."""
    result = demo("--scenario", scenario, "--plot", "x.png")

    assert result.exit_code == 2, result.output
    assert f"--plot does not apply to --scenario {scenario}" in result.output
    assert runners.calls == []


@pytest.mark.parametrize(
    ("args", "refused"),
    [
        (["--scenario", "gate", "--workers", "3", "--seed", "1"], "--workers, --seed do not"),
        (["--scenario", "bulk", "--interchanges", "5"], "--interchanges does not"),
        (["--scenario", "bulk", "--customs-rate", "5"], "--customs-rate does not"),
        (["--bls", "10"], "--bls does not apply to --scenario vessel"),
        (["--chaos", "poison", "--vermas", "3"], "--vermas does not apply to --chaos poison"),
        (["--scenario", "gate", "--keep-logs"], "--keep-logs does not"),
    ],
)
def test_a_flag_the_run_would_ignore_is_refused(
    runners: Recorder, args: list[str], refused: str
) -> None:
    """Each run names what it takes; anything else given is a usage error, not a no-op."""
    result = demo(*args)

    assert result.exit_code == 2, result.output
    assert refused in result.output
    assert "it takes" in result.output
    assert runners.calls == []


def test_chaos_honours_rate_burst_workers_seed_and_size(runners: Recorder) -> None:
    """Under --chaos these flags were dropped for the preset's values."""
    result = demo(
        "--chaos",
        "poison",
        "--customs-rate",
        "7",
        "--customs-burst",
        "2",
        "--workers",
        "3",
        "--seed",
        "11",
        "--interchanges",
        "50",
    )

    assert result.exit_code == 0, result.output
    config = runners.calls[0]["config"]
    assert (config.vessel.customs_rate, config.vessel.customs_burst) == (7.0, 2)
    assert (config.vessel.workers, config.vessel.seed, config.vessel.interchanges) == (3, 11, 50)


def test_chaos_keeps_the_presets_values_for_flags_not_given(runners: Recorder) -> None:
    """A default of the vessel demo (10/s, 2 workers) must not overwrite the preset."""
    result = demo("--chaos", "poison")

    assert result.exit_code == 0, result.output
    assert runners.calls[0]["config"] == chaos.preset("poison")


def test_overload_and_bulk_receive_their_flags(runners: Recorder) -> None:
    """The flags a scenario accepts reach its configuration."""
    overload = demo("--scenario", "overload", "--workers", "3", "--seed", "5", "--vermas", "4")
    bulk = demo("--scenario", "bulk", "--bls", "20", "--workers", "1", "--seed", "9")

    assert overload.exit_code == 0, overload.output
    assert bulk.exit_code == 0, bulk.output
    o_config, b_config = runners.calls[0]["config"], runners.calls[1]["config"]
    assert (o_config.customs_workers, o_config.seed, o_config.vermas) == (3, 5, 4)
    assert (b_config.bls, b_config.workers, b_config.seed) == (20, 1, 9)


def test_vessel_writes_the_plot_and_the_report_it_names(runners: Recorder, tmp_path: Path) -> None:
    """--plot and --json write where they say, print both paths, and the JSON carries
    no raw timelines."""
    report_path, plot_path = tmp_path / "r.json", tmp_path / "p.png"

    result = demo("--json", str(report_path), "--plot", str(plot_path))

    assert result.exit_code == 0, result.output
    assert f"report: {report_path}" in result.output
    assert f"plot: {plot_path}" in result.output
    assert plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "_timelines" not in json.loads(report_path.read_text())


@pytest.mark.parametrize(
    "args",
    [[], ["--scenario", "bulk"], ["--scenario", "overload"], ["--scenario", "gate"]],
    ids=["vessel", "bulk", "overload", "gate"],
)
def test_every_scenario_prints_its_report_path(
    runners: Recorder, tmp_path: Path, args: list[str]
) -> None:
    """Overload and gate wrote the JSON silently."""
    path = tmp_path / "report.json"

    result = demo(*args, "--json", str(path))

    assert result.exit_code == 0, result.output
    assert f"report: {path}" in result.output
    assert json.loads(path.read_text())["scenario"] == (args[1] if args else "vessel")


@pytest.mark.parametrize(
    "args",
    [[], ["--scenario", "bulk"], ["--scenario", "overload"], ["--scenario", "gate"]],
    ids=["vessel", "bulk", "overload", "gate"],
)
def test_end_tables_use_the_json_names_and_align_the_figures(
    runners: Recorder, tmp_path: Path, args: list[str]
) -> None:
    """No Python dict or list in the output; each row of the outcome table is named by
    the JSON path of its value and the values end in one column."""
    path = tmp_path / "report.json"

    result = demo(*args, "--json", str(path))

    assert result.exit_code == 0, result.output
    assert "{" not in result.output
    assert "[" not in result.output
    report = json.loads(path.read_text())
    lines = result.output.splitlines()
    title = f"{report['scenario']}: outcome"
    start = next(i for i, line in enumerate(lines) if line.strip() == title) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith(" "):  # the next title, or a "report:" line
            break
        rows.append(line)
    assert len(rows) >= 8
    assert len({len(line.rstrip()) for line in rows}) == 1, rows
    for row in rows:
        value: Any = report
        for part in row.split()[0].split("."):
            value = value[part]


# -- chaos verdict -----------------------------------------------------------------------


def test_a_failed_chaos_check_exits_non_zero(runners: Recorder, tmp_path: Path) -> None:
    """`demo --chaos` exited 0 when its checks failed; the report is still written."""
    runners.chaos_fails = "no_unplanned_dead_letter"  # type: ignore[attr-defined]
    path = tmp_path / "chaos.json"

    result = demo("--chaos", "kill-workers", "--json", str(path))

    assert result.exit_code == 1, result.output
    assert "FAILED" in result.output
    assert "1 check(s) failed: no_unplanned_dead_letter" in result.output
    assert json.loads(path.read_text())["ok"] is False


def test_a_chaos_run_whose_checks_held_exits_zero(runners: Recorder) -> None:
    result = demo("--chaos", "kill-workers")

    assert result.exit_code == 0, result.output
    assert "FAILED" not in result.output


def test_chaos_plot_is_drawn(runners: Recorder, tmp_path: Path) -> None:
    """--plot under --chaos used to be ignored."""
    path = tmp_path / "chaos.png"

    result = demo("--chaos", "slow-downstream", "--plot", str(path))

    assert result.exit_code == 0, result.output
    assert path.read_bytes()[:4] == b"\x89PNG"


# -- tidy runs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [[], ["--scenario", "bulk"], ["--scenario", "overload"], ["--chaos", "poison"]],
    ids=["vessel", "bulk", "overload", "chaos"],
)
def test_a_run_leaves_no_tidegate_folder(runners: Recorder, args: list[str]) -> None:
    """Logs went to tidegate-* folders that were never removed."""
    result = demo(*args)

    assert result.exit_code == 0, result.output
    assert scratch_dirs() == []
    assert "logs:" not in result.output


@pytest.mark.parametrize(
    "args",
    [[], ["--scenario", "bulk"], ["--scenario", "overload"], ["--chaos", "poison"]],
    ids=["vessel", "bulk", "overload", "chaos"],
)
def test_keep_logs_keeps_them_and_says_where(runners: Recorder, args: list[str]) -> None:
    result = demo(*args, "--keep-logs")

    assert result.exit_code == 0, result.output
    kept = scratch_dirs()
    assert len(kept) == 1
    assert kept[0].startswith("tidegate-")
    folder = Path(tempfile.gettempdir()) / kept[0]
    assert f"logs: {folder}" in result.output
    assert (folder / "worker-customs.log").is_file()


def test_the_vessel_demo_relays_the_tos_unless_told_not_to(runners: Recorder) -> None:
    """By default the TOS calls go through the relay, two on each connection; 0 sends
    them from the workers, a lease per call; the pool is sized for either."""
    relayed = demo()
    direct = demo("--tos-relay-depth", "0")

    assert relayed.exit_code == 0, relayed.output
    assert direct.exit_code == 0, direct.output
    config_relayed, config_direct = runners.calls[0]["config"], runners.calls[1]["config"]
    assert config_relayed.tos_relay_depth == 2
    assert config_direct.tos_relay_depth is None
    assert "each kept by a relay lane with 2 requests on it" in relayed.output
    assert vessel_demo.tos_pool(config_relayed).workers == 11
    assert vessel_demo.tos_pool(config_direct).workers == 7


@pytest.mark.parametrize(
    "args",
    [
        ["--chaos", "poison", "--tos-relay-depth", "2"],
        ["--scenario", "adaptive", "--tos-relay-depth", "2"],
        ["--engine", "rq", "--tos-relay-depth", "2"],
    ],
)
def test_the_relay_depth_is_refused_where_no_run_reads_it(
    runners: Recorder, args: list[str]
) -> None:
    result = demo(*args)

    assert result.exit_code == 2, result.output
    assert "--tos-relay-depth" in result.output
    assert runners.calls == []
