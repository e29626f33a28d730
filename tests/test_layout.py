"""The product stands apart from its harness (issue 12, item 6).

``tidegate.harness`` (demonstration scenarios, worker fleets, chaos) may use the
product; the product must never need the harness. Only the ``tidegate demo`` commands
reach into it, lazily, from the CLI. ``ops/`` keeps only what an operator runs.
"""

from __future__ import annotations

import ast
import gc
from pathlib import Path

import pytest

import tidegate

PACKAGE = Path(tidegate.__file__).parent
#: The CLI modules of ``tidegate demo``: the only product modules that start the harness.
DEMO_COMMANDS = {"cli/demo.py", "cli/_demo_runs.py", "cli/demo_adaptive.py", "cli/_demo_rq.py"}
#: What ``ops/`` is for; a new module there is a decision, not an accident.
OPS_MODULES = {
    "__init__.py",
    "monitor.py",
    "metrics.py",
    "adaptive_metrics.py",
    "event_counters.py",
}
#: Above this many lines a module in ops/ or harness/ says at its top why it is one module.
LONG = 400


def _parse(source: str) -> ast.Module:
    """``ast.parse`` with the garbage collector held off. Under ``pytest -n 2``, with
    ``tests/flow`` run earlier in the same worker, parsing ``amqp_drain.py`` failed
    every time with ``SystemError: AST constructor recursion depth mismatch`` (CPython
    3.11.7), in a fresh thread too, and never with the collector held off: most likely
    a collection during the build re-enters the AST builder, whose recursion count is
    interpreter-wide state."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source)
    finally:
        if enabled:
            gc.enable()


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (lazy imports in functions too)."""
    found: set[str] = set()
    for node in ast.walk(_parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _product_modules() -> list[Path]:
    return sorted(
        p
        for p in PACKAGE.rglob("*.py")
        if p.relative_to(PACKAGE).parts[0] != "harness"
        and p.relative_to(PACKAGE).as_posix() not in DEMO_COMMANDS
    )


def test_the_scan_sees_the_whole_product() -> None:
    """A scan that found nothing would pass anything."""
    names = {p.relative_to(PACKAGE).as_posix() for p in _product_modules()}
    assert {"ops/monitor.py", "flow/gate.py", "cli/monitor.py"} <= names
    assert not names & DEMO_COMMANDS


@pytest.mark.parametrize(
    "path", _product_modules(), ids=lambda p: p.relative_to(PACKAGE).as_posix()
)
def test_product_code_never_imports_the_harness(path: Path) -> None:
    harness = sorted(m for m in _imports(path) if m.split(".")[:2] == ["tidegate", "harness"])
    assert harness == [], f"{path.relative_to(PACKAGE)} imports the harness: {harness}"


def test_the_demo_commands_reach_the_harness_only_lazily() -> None:
    """``tidegate --help`` and every other command must not import Celery, RQ or the
    scenarios; the demo commands import them inside the function that runs them."""
    for name in DEMO_COMMANDS:
        tree = _parse((PACKAGE / name).read_text(encoding="utf-8"))
        top = [
            n.module
            for n in tree.body
            if isinstance(n, ast.ImportFrom)
            and n.module
            and n.module.startswith("tidegate.harness")
        ]
        assert top == [], f"{name} imports the harness at module level: {top}"


def test_ops_holds_only_the_operational_modules() -> None:
    assert {p.name for p in (PACKAGE / "ops").glob("*.py")} <= OPS_MODULES


def test_each_harness_package_states_its_rule() -> None:
    for package in ("harness", "harness/scenarios", "harness/chaos", "ops"):
        doc = ast.get_docstring(_parse((PACKAGE / package / "__init__.py").read_text()))
        assert doc is not None
        assert "The rule of this package" in doc, package


def test_a_long_module_says_why_at_its_top() -> None:
    """No module in the package above ~400 lines without a reason written at its top."""
    unexplained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        doc = ast.get_docstring(_parse(text)) or ""
        if text.count("\n") > LONG and "Why one module" not in doc:
            unexplained.append(f"{path.relative_to(PACKAGE)} ({text.count(chr(10))} lines)")
    assert unexplained == []
