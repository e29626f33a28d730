"""Under ``CI=true`` a browser that cannot start fails the browser tests; locally they skip.

Each case runs one browser test in a child pytest with ``TIDEGATE_CHROMIUM`` pointing
at a path with no browser, so the outcome is the fixture's own decision.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ONE_BROWSER_TEST = "tests/console/test_console_browser.py::test_a_viewer_cannot_act"


def _run(ci: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CI": ci, "TIDEGATE_CHROMIUM": str(tmp_path / "no-chromium")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", ONE_BROWSER_TEST],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_missing_browser_fails_under_ci(tmp_path: Path) -> None:
    """CI=true: the test errors (pytest exit 1) and names the missing browser."""
    done = _run("true", tmp_path)
    assert done.returncode == 1, done.stdout[-2000:]
    assert "no-chromium is missing" in done.stdout


def test_missing_browser_skips_locally(tmp_path: Path) -> None:
    """Without CI the same test is reported skipped, with the reason — never passed."""
    done = _run("", tmp_path)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "1 skipped" in done.stdout
    assert "passed" not in done.stdout
