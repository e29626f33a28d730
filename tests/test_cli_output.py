"""Human output that is not a terminal: never wrapped, never coloured, never boxed.

CI clones into a folder of its own choosing, and scripts read what the commands print;
neither may depend on an 80-column terminal that is not there.
"""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path

from click.testing import CliRunner

from tidegate.cli import cli
from tidegate.cli._output import console, is_terminal

FIXTURES = Path(__file__).parent / "edi" / "fixtures"
#: Box-drawing characters (U+2500..U+257F) and ANSI escape sequences: decoration.
DECORATION = re.compile(r"[\u2500-\u257f]|\x1b\[")


def _long_copy(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / ("a-long-folder-name-like-a-ci-runner-might-use-" * 4)
    folder.mkdir()
    target = folder / name
    shutil.copy(FIXTURES / name, target)
    assert len(str(target)) > 150
    return target


def test_split_rows_stay_on_one_line_at_any_path_length(tmp_path: Path) -> None:
    """Each B/L unit is one line holding all its fields, however long the file's path."""
    path = _long_copy(tmp_path, "truncated_ifcsum.edi")
    result = CliRunner().invoke(cli, ["edi", "split", str(path)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert f"{path}: 2 B/L units" in result.output.splitlines()
    row = next(line for line in result.output.splitlines() if "BL000002" in line)
    assert "the message ends before its UNT: this consignment may be incomplete" in row
    assert not DECORATION.search(result.output)


def test_inspect_is_plain_when_piped(tmp_path: Path) -> None:
    """The inspect report has no box and no colour, and the file name is one line."""
    path = _long_copy(tmp_path, "truncated_ifcsum.edi")
    result = CliRunner().invoke(cli, ["edi", "inspect", str(path)], env={"COLUMNS": "80"})
    assert str(path) in result.output.splitlines()
    assert not DECORATION.search(result.output)


def test_the_console_is_plain_off_a_terminal() -> None:
    """A StringIO is not a terminal: a 300-character line comes back as one line."""
    stream = io.StringIO()
    assert not is_terminal(stream)
    out = console(stream)
    out.print("x" * 300, style="bold red")
    assert stream.getvalue() == "x" * 300 + "\n"
