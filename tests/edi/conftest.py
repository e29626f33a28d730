"""Fixtures for the EDIFACT intake tests: the shared corpus, when it is there."""

from __future__ import annotations

from pathlib import Path

import pytest

#: The shared corpus lives beside the clone (``../shared/edifact-corpus``), as in CI.
REPO_ROOT = Path(__file__).resolve().parents[2]
CORPUS = (REPO_ROOT / ".." / "shared" / "edifact-corpus").resolve()


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    """The shared corpus directory; skips when it is absent."""
    if not CORPUS.is_dir():
        pytest.skip(
            f"shared EDIFACT corpus not found at {CORPUS} (expected ../shared beside the repo)"
        )
    return CORPUS
