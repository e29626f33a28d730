"""The shedding policy: what may wait, and the classes that never may."""

from __future__ import annotations

import pytest

from tidegate.edi.classify import CUSCAR, IFCSUM, IFTSTA, VERMAS, DocumentClass
from tidegate.errors import ConfigurationError
from tidegate.load.shedding import (
    ARCHIVE_REPLAY,
    BULK_BL_PDF,
    DEFAULT_SHEDDABLE,
    SheddingPolicy,
    document_class,
)
from tidegate.load.watermarks import LoadState


def shedding_state() -> LoadState:
    return LoadState("q", depth=5000, over_hwm_intervals=9, shedding=True)


def test_the_default_set_is_the_bulk_classes_and_what_the_edi_table_marks() -> None:
    """BULK_BL_PDF, ARCHIVE_REPLAY and IFTSTA; no critical class."""
    assert {"BULK_BL_PDF", "ARCHIVE_REPLAY", "IFTSTA"} == DEFAULT_SHEDDABLE
    assert document_class("BULK_BL_PDF") is BULK_BL_PDF
    assert not BULK_BL_PDF.critical
    assert not ARCHIVE_REPLAY.critical


@pytest.mark.parametrize("name", ["VERMAS", "CUSCAR", "IFCSUM"])
def test_configuring_a_compliance_critical_class_is_refused(name: str) -> None:
    """VERMAS and customs filings can never be configured sheddable."""
    with pytest.raises(ConfigurationError, match=f"never sheddable.*{name}"):
        SheddingPolicy(sheddable={"BULK_BL_PDF", name})
    with pytest.raises(ConfigurationError, match=name):
        SheddingPolicy.from_env({"TIDEGATE_SHEDDABLE_CLASSES": f"IFTSTA, {name}"})


def test_a_custom_class_routed_to_customs_is_protected_too() -> None:
    """Anything on the customs queue is a customs filing, whatever its flags say."""
    lodged = DocumentClass("CUSDEC", "edi.customs", sheddable=True, critical=False)
    with pytest.raises(ConfigurationError, match="CUSDEC"):
        SheddingPolicy.from_env({"TIDEGATE_SHEDDABLE_CLASSES": "CUSDEC"}, extra=[lodged])
    assert not SheddingPolicy().decide(lodged, shedding_state()).shed


def test_unknown_class_names_are_refused() -> None:
    """A typo in the sheddable set fails at start-up, not silently at the surge."""
    with pytest.raises(ConfigurationError, match="BULK_BL_PFD"):
        SheddingPolicy(sheddable={"BULK_BL_PFD"})
    with pytest.raises(ConfigurationError, match="unknown document class"):
        document_class("NOPE")


@pytest.mark.parametrize("cls", [VERMAS, CUSCAR, IFCSUM])
def test_protected_classes_are_never_shed_even_under_overload(cls: DocumentClass) -> None:
    """The decision itself re-checks: a critical document is queued whatever the load."""
    decision = SheddingPolicy().decide(cls, shedding_state())
    assert (decision.shed, decision.reason) == (False, "protected_class")


def test_sheddable_classes_are_shed_only_while_the_queue_is_shedding() -> None:
    """No state or no shedding latch: queued. Shedding latch: quarantined."""
    policy = SheddingPolicy()
    assert not policy.decide(BULK_BL_PDF, None).shed
    assert not policy.decide(BULK_BL_PDF, LoadState("q", depth=99_999)).shed
    assert policy.decide(BULK_BL_PDF, shedding_state()).shed
    assert policy.decide(IFTSTA, shedding_state()).reason == "sustained_overload"


def test_the_sheddable_set_is_configurable() -> None:
    """Narrowing the set keeps the others queued under overload."""
    policy = SheddingPolicy.from_env({"TIDEGATE_SHEDDABLE_CLASSES": "ARCHIVE_REPLAY"})
    assert policy.decide(ARCHIVE_REPLAY, shedding_state()).shed
    assert not policy.decide(BULK_BL_PDF, shedding_state()).shed
    assert policy.decide(BULK_BL_PDF, shedding_state()).reason == "not_sheddable"
