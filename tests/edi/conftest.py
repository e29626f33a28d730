"""Fixtures for the EDIFACT intake tests: an optional corpus of real samples.

The project's own fixtures (``tests/edi/fixtures``) are what every EDIFACT behaviour is
tested on. A corpus of real interchanges — which may not be redistributed, so it is
never copied here — adds breadth when ``TIDEGATE_EDIFACT_CORPUS`` names its folder
(``.ci/run`` sets it when the CI machine has one).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: The environment variable naming the optional corpus folder.
CORPUS_ENV = "TIDEGATE_EDIFACT_CORPUS"


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    """The corpus folder named by ``TIDEGATE_EDIFACT_CORPUS``; skips, saying so, when unset."""
    named = os.environ.get(CORPUS_ENV)
    if not named:
        pytest.skip(f"no EDIFACT corpus: set {CORPUS_ENV} to a folder of real samples")
    corpus = Path(named)
    if not corpus.is_dir():
        pytest.fail(f"{CORPUS_ENV}={named} is not a folder")
    return corpus
