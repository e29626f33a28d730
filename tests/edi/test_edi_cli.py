"""``tidegate edi inspect`` and ``tidegate edi split``, through click's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from tidegate.cli import cli

FIXTURES = Path(__file__).parent / "fixtures"

REPORT_KEYS = {
    "file",
    "interchanges",
    "messages",
    "consignments",
    "bl_units",
    "containers",
    "findings",
    "error",
}


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["edi", *args])
    return result.exit_code, result.output


def test_inspect_json_shape() -> None:
    """One object per file with the documented keys, counts and findings."""
    code, output = run(
        "inspect",
        "--json",
        str(FIXTURES / "two_interchanges_second_una.edi"),
        str(FIXTURES / "tab_indented_cuscar.edi"),
    )
    assert code == 0
    first, second = json.loads(output)
    assert set(first) >= REPORT_KEYS
    assert first["interchanges"] == 2
    assert first["messages"] == {"IFCSUM": 1, "COARRI": 1}
    assert (first["consignments"], first["bl_units"]) == (2, 2)
    assert first["containers"] == {"total": 3, "valid": 3, "invalid": 0}
    assert first["error"] is None
    (finding,) = second["findings"]
    assert set(finding) == {"severity", "code", "message", "segment_index", "offset", "count"}
    assert finding["count"] == 1
    assert (finding["severity"], finding["code"]) == ("warning", "unt_count_mismatch")


def _manifest_without_bls(consignments: int) -> bytes:
    """An IFCSUM whose consignments all lack RFF+BM/BN: one identical finding each."""
    groups = "".join(
        f"CNI+{n}+SAME'EQD+CN+MSCU1234566+45G1:102:5'" for n in range(1, consignments + 1)
    )
    body = f"UNH+M1+IFCSUM:D:96A:UN'BGM+785+MF1+9'{groups}"
    count = body.count("'") + 1
    return f"UNB+UNOC:3+FWD:ZZZ+CAR:ZZZ+240115:1200+IF1'{body}UNT+{count}+M1'UNZ+1+IF1'".encode()


def test_inspect_exit_codes_and_errors(tmp_path: Path) -> None:
    """Warnings exit 0; an error finding exits 3; a file that is not EDIFACT or unreadable
    exits 1, whatever the other files hold."""
    empty_type = tmp_path / "no_type.edi"
    empty_type.write_bytes(b"UNH+1+:D:95B:UN'BGM+85'UNT+3+1'")
    warnings_code, _ = run("inspect", "--json", str(FIXTURES / "tab_indented_cuscar.edi"))
    code, output = run("inspect", "--json", str(FIXTURES / "truncated_ifcsum.edi"), str(empty_type))
    human_code, _ = run("inspect", str(FIXTURES / "truncated_ifcsum.edi"))
    assert warnings_code == 0
    assert (code, human_code) == (3, 3)
    truncated, no_type = json.loads(output)
    assert truncated["error"] is None
    assert "truncated_message" in {f["code"] for f in truncated["findings"]}
    assert no_type["messages"] == {"": 1}
    code, output = run(
        "inspect",
        "--json",
        str(FIXTURES / "not_edifact.txt"),
        str(tmp_path / "missing.edi"),
        str(FIXTURES / "bom_crlf_bayplan.edi"),
        str(FIXTURES / "truncated_ifcsum.edi"),
    )
    assert code == 1
    not_edifact, missing, fine, _ = json.loads(output)
    assert not_edifact["error"]["code"] == "not_edifact"
    assert missing["error"]["code"] == "unreadable"
    assert fine["error"] is None


def test_inspect_groups_identical_findings(tmp_path: Path) -> None:
    """36 consignments without a B/L are one row with a count of 36, in the table and in
    ``finding_groups``; ``findings`` still has each one with its place."""
    manifest = tmp_path / "no_bls.edi"
    manifest.write_bytes(_manifest_without_bls(36))

    code, output = run("inspect", str(manifest))
    json_code, raw = run("inspect", "--json", str(manifest))

    rows = [line.split() for line in output.splitlines() if "bl_missing" in line]
    (report,) = json.loads(raw)
    (group,) = [g for g in report["finding_groups"] if g["code"] == "bl_missing"]
    assert (code, json_code) == (3, 3)
    assert len(rows) == 1
    assert rows[0][:3] == ["error", "bl_missing", "36"]
    assert group["count"] == 36
    assert group["segment_index"] == min(
        f["segment_index"] for f in report["findings"] if f["code"] == "bl_missing"
    )
    assert sum(f["code"] == "bl_missing" for f in report["findings"]) == 36


def test_inspect_human_table() -> None:
    """The default output is a table per file, findings listed."""
    code, output = run("inspect", str(FIXTURES / "ifcsum_bl_sources.edi"))
    assert code == 3
    assert "ifcsum_bl_sources.edi" in output
    assert "B/L units" in output
    assert "bl_ambiguous" in output
    assert "2 dead-letter" in output


def test_split_json_without_and_with_raw() -> None:
    """Units as JSON; raw text only with --raw."""
    path = str(FIXTURES / "ifcsum_bl_sources.edi")
    code, output = run("split", "--json", path)
    assert code == 0
    units = json.loads(output)
    assert [u["bl_number"] for u in units] == ["HLCUBL0001", "BOOK0002", None, None]
    assert all("raw" not in unit for unit in units)
    code, output = run("split", "--json", "--raw", path)
    assert code == 0
    assert json.loads(output)[0]["raw"].startswith("CNI+1+SAME'")


def test_split_human_and_errors() -> None:
    """A table of units; a file that cannot be read is a clean error, exit 1."""
    code, output = run("split", str(FIXTURES / "truncated_ifcsum.edi"))
    assert code == 0
    assert "BL000001" in output
    assert "UNT" in output
    code, output = run("split", str(FIXTURES / "bom_crlf_bayplan.edi"))
    assert (code, "no IFCSUM consignment" in output) == (0, True)
    code, output = run("split", "--json", str(FIXTURES / "not_edifact.txt"))
    assert code == 1
    assert "not start with UNA, UNB or UNH" in output


def test_split_table_shows_whole_keys() -> None:
    """Each unit's idempotency key is printed whole, so it can be pasted into `dlq show`."""
    path = str(FIXTURES / "ifcsum_bl_sources.edi")
    _, raw = run("split", "--json", path)
    code, output = run("split", path)

    keys = [unit["idempotency_key"] for unit in json.loads(raw)]
    assert code == 0
    assert len(set(keys)) == len(keys) == 4
    for key in keys:
        assert key in output.split()
