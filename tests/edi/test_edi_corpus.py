"""An optional corpus of real samples: each file gives the right counts, or a typed error.

The corpus is read in place from the folder ``TIDEGATE_EDIFACT_CORPUS`` names (never
copied here: some files are GPL or unlicensed); these tests skip, saying so, when it is
unset. Every behaviour they touch is also tested on the project's own fixtures.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tidegate.edi import EventType, Intake, inspect_path, read_chunks

pytestmark = pytest.mark.corpus

#: file -> (interchanges, messages, consignments, B/L units, dead-letter units,
#: containers (total, valid, invalid), finding codes). Values checked by hand against
#: the files and SOURCES.md.
EXPECTED: dict[str, tuple[Any, ...]] = {
    "BAPLIE_edifabric_1.edi": (1, {"BAPLIE": 1}, 0, 0, 0, (1, 1, 0), {"unt_count_mismatch"}),
    "BAPLIE_phpedifact_1.edi": (1, {"BAPLIE": 1}, 0, 0, 0, (3, 3, 0), set()),
    "COARRI_phpedifact_1.edi": (1, {"COARRI": 2}, 0, 0, 0, (21, 21, 0), set()),
    "COARRI_readbaplie_2.edi": (1, {"COARRI": 1}, 0, 0, 0, (74, 74, 0), set()),
    "CODECO_portico_1.edi": (
        0,
        {"CODECO": 1},
        0,
        0,
        0,
        (1, 1, 0),
        {"unt_count_mismatch", "event_unknown", "locode_shape"},
    ),
    "CODECO_portico_2.edi": (
        0,
        {"CODECO": 1},
        0,
        0,
        0,
        (1, 1, 0),
        {"unt_count_mismatch", "event_unknown", "locode_shape"},
    ),
    "CODECO_portico_3.edi": (
        0,
        {"CODECO": 1},
        0,
        0,
        0,
        (1, 1, 0),
        {"unt_count_mismatch", "event_unknown"},
    ),
    "CUSCAR_edinet_1.edi": (
        1,
        {"": 1},
        2,
        0,
        0,
        (0, 0, 0),
        {"empty_message_type", "unt_count_mismatch"},
    ),
    "IFCSUM_edi20_1.edi": (
        1,
        {"IFCSUM": 1},
        36,
        36,
        36,
        (0, 0, 0),
        {"bl_missing", "outside_repertoire"},
    ),
    "IFCSUM_portico_1.edi": (0, {"IFCSUM": 1}, 5, 5, 5, (0, 0, 0), {"bl_missing"}),
    "IFCSUM_portico_2.edi": (0, {"IFCSUM": 1}, 1, 1, 1, (0, 0, 0), {"bl_missing"}),
    "IFTSTA_apimeister_1.edi": (
        1,
        {"IFTSTA": 1},
        1,
        0,
        0,
        (1, 0, 1),
        {"container_check_digit", "interchange_reference_mismatch"},
    ),
    "PAORES_phpedifact_1.edi": (
        1,
        {"PAORES": 1},
        0,
        0,
        0,
        (0, 0, 0),
        {"unknown_message_type", "unt_count_mismatch"},
    ),
    "VERMAS_phpedigen_1.edi": (1, {"VERMAS": 1}, 0, 0, 0, (1, 0, 1), {"container_check_digit"}),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_counts_and_findings(corpus_dir: Path, name: str) -> None:
    """Each sample: the right counts and exactly the expected kinds of finding."""
    path = corpus_dir / name
    if not path.exists():
        pytest.skip(f"{name} not in this corpus")
    interchanges, messages, consignments, units, dead, containers, codes = EXPECTED[name]
    report = inspect_path(path)
    assert report["error"] is None
    assert report["interchanges"] == interchanges
    assert report["messages"] == messages
    assert report["consignments"] == consignments
    assert (report["bl_units"], report["dead_letter_units"]) == (units, dead)
    total, valid, invalid = containers
    assert report["containers"] == {"total": total, "valid": valid, "invalid": invalid}
    assert {finding["code"] for finding in report["findings"]} == codes


def test_every_corpus_file_is_read_or_refused_with_a_typed_error(corpus_dir: Path) -> None:
    """Files added to the corpus later must not crash the intake either."""
    for path in sorted(corpus_dir.glob("*.edi")):
        report = inspect_path(path)
        assert report["error"] is None or isinstance(report["error"]["code"], str)


def intake_of(corpus_dir: Path, name: str) -> Intake:
    path = corpus_dir / name
    if not path.exists():
        pytest.skip(f"{name} not in this corpus")
    return Intake(read_chunks(path))


def test_release_characters_torture_file(corpus_dir: Path) -> None:
    """The UNA sample with ``?'``, ``??``, ``???'`` and ``?:`` in every combination."""
    (result,) = intake_of(corpus_dir, "PAORES_phpedifact_1.edi")
    texts = [s.get(1) for s in result.message.segments if s.tag == "IFT"]
    assert "NO MORE ' FLIGHTS 3" in texts
    assert "NO MORE ?' FLIGHTS 3" in texts
    assert "FIELD 1?+FIELD 2" in texts
    assert "NO MORE FLIGHTS 2?" in texts


def test_latin1_under_unob_is_decoded(corpus_dir: Path) -> None:
    """The German consolidation declares UNOB but carries an ISO-8859-1 byte."""
    (result,) = intake_of(corpus_dir, "IFCSUM_edi20_1.edi")
    assert len(result.units) == 36
    assert any("\u00d6" in unit.raw for unit in result.units)
    assert any("ANDY'S" in unit.raw.replace("?'", "'") for unit in result.units)


def test_vermas_sample(corpus_dir: Path) -> None:
    """The generator sample's VGM, method, party and (bad) container."""
    (result,) = intake_of(corpus_dir, "VERMAS_phpedigen_1.edi")
    (vgm,) = result.extraction.vgm
    assert (vgm.weight, vgm.unit, vgm.method) == (Decimal(1212), "KGM", "SM1")
    assert (vgm.responsible_party, vgm.responsible_person) == ("MY COMPANY", "JOHN DOE")
    assert vgm.booking == "4001234567"
    assert vgm.container is not None
    assert not vgm.container.valid


def test_coarri_discharge_and_load_messages(corpus_dir: Path) -> None:
    """Two messages in one interchange: a discharge report and a loading report."""
    discharge, load = intake_of(corpus_dir, "COARRI_phpedifact_1.edi")
    assert {e.event for e in discharge.extraction.events} == {EventType.DISCHARGE}
    assert {e.event for e in load.extraction.events} == {EventType.LOAD}
    assert len(discharge.extraction.events) + len(load.extraction.events) == 21


def test_decimal_comma_vgm_in_coarri(corpus_dir: Path) -> None:
    """The single-line COARRI with decimal commas and no UNA: 74 containers discharged."""
    (result,) = intake_of(corpus_dir, "COARRI_readbaplie_2.edi")
    events = result.extraction.events
    assert len(events) == 74
    assert {e.event for e in events} == {EventType.DISCHARGE}
    assert events[0].bl_number == "NICPEV11478"
