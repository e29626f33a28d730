"""A chaos run's configuration holds the vessel scenario's instead of copying its fields.

``ChaosConfig`` used to re-declare eleven :class:`VesselConfig` fields with defaults of
its own (20/s and burst 4 where the vessel scenario says 10/s and 3). The presets'
values are pinned in ``data/presets-before-vessel-config.json``, written from the code
before the change, so moving the fields changes no run and no report field.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from tidegate.errors import ConfigurationError
from tidegate.harness.chaos import KINDS, WORKER_APP, ChaosConfig, benchmark_runs, preset
from tidegate.harness.scenarios.vessel import VesselConfig

BEFORE = json.loads(
    (Path(__file__).parent / "data" / "presets-before-vessel-config.json").read_text()
)


def _plain(value: Any) -> Any:
    """As JSON has it (tuples become lists), to compare with the pinned file."""
    return json.loads(json.dumps(value))


def test_chaos_config_contains_a_vessel_config_and_copies_none_of_its_fields() -> None:
    """No field is declared twice, so no default can drift between the two."""
    config = ChaosConfig("poison")

    assert isinstance(config.vessel, VesselConfig)
    assert config.vessel == VesselConfig()
    chaos_fields = {f.name for f in dataclasses.fields(ChaosConfig)}
    vessel_fields = {f.name for f in dataclasses.fields(VesselConfig)}
    assert not chaos_fields & vessel_fields


@pytest.mark.parametrize("size", ["full", "test"])
@pytest.mark.parametrize("kind", KINDS)
def test_each_preset_runs_the_burst_and_reports_the_knobs_it_always_did(
    kind: str, size: str
) -> None:
    config = preset(kind, size)  # type: ignore[arg-type]
    before = BEFORE[f"{kind}/{size}"]

    run = dataclasses.asdict(config.vessel_run)
    assert run.pop("app") == WORKER_APP
    # Knobs added after the pin, at values that keep every preset's run as it was: a
    # preset calls the TOS with a lease per call (a run under the relay is tuned).
    assert run.pop("tos_relay_depth") is None
    assert _plain(run) == before["vessel"]
    assert _plain(config.knobs()) == before["knobs"]
    assert list(config.knobs()) == list(before["knobs"])  # the report's key order too


def test_the_benchmark_runs_are_unchanged() -> None:
    assert _plain([c.knobs() for c in benchmark_runs()]) == BEFORE["benchmark_runs"]


def test_tuned_maps_each_flag_onto_the_config_that_owns_it() -> None:
    """The CLI's flags and the presets' shapes go through this one mapping."""
    config = preset("poison").tuned(customs_rate=7.0, workers=3, fault_s=12.0, label="x")

    assert (config.vessel.customs_rate, config.vessel.workers) == (7.0, 3)
    assert (config.fault_s, config.label) == (12.0, "x")
    assert config.vessel.interchanges == preset("poison").vessel.interchanges
    with pytest.raises(ConfigurationError, match="meteor"):
        config.tuned(meteor=1)


def test_the_vessel_run_always_uses_the_chaos_workers_app() -> None:
    """A vessel config naming another app still runs on the chaos timing's app."""
    config = ChaosConfig("poison", vessel=VesselConfig(app="tidegate.harness.vessel_app"))

    assert config.vessel_run.app == WORKER_APP
    with pytest.raises(ConfigurationError, match="max_wait_s"):
        ChaosConfig("poison", vessel=VesselConfig(max_wait_s=30.0))
