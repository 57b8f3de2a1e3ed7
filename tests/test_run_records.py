"""Typed, versioned records of model runs: what the runner writes validates against the models,
and a record written by a newer assay is refused with a clear RecordError, never misread."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import read_rows, run_cli, write_suite
from support.rows import U1, narrow_row

from assay.errors import RecordError
from assay.records.base import REGISTRY
from assay.records.coding import CodingManifest, GradeMeta, GradeRow, SampleRow, read_meta
from assay.records.layout import run_stamp
from assay.records.narrow import NarrowManifest, NarrowRow
from assay.report.compare_narrow import compare_runs
from assay.report.narrow import build_report

CASES = [("c1", "Title: crash\nBody: segfault", "bug"), ("c2", "Title: dark mode", "feature")]


@pytest.fixture
def narrow_run(tmp_path: Path) -> Path:
    suite = write_suite(tmp_path / "suite", CASES)
    run = tmp_path / "run"
    assert run_cli(["run", str(suite), "--model", "builtin/oracle", "--out", str(run)]).code == 0
    return run


def _edit_manifest(run: Path, **changes: object) -> None:
    data = json.loads((run / "manifest.json").read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    (run / "manifest.json").write_text(json.dumps(data))


def test_every_record_documents_every_field() -> None:
    names = {r.schema_name for r in REGISTRY}
    assert {"assay.narrow.row", "assay.narrow.manifest", "assay.coding.sample",
            "assay.coding.grade", "assay.coding.grades", "assay.coding.manifest"} <= names
    for record in REGISTRY:
        for name, info in record.model_fields.items():
            assert info.description, f"{record.__name__}.{name} has no docstring"


def test_narrow_rows_and_manifest_validate(narrow_run: Path) -> None:
    manifest = json.loads((narrow_run / "manifest.json").read_text())
    assert manifest["schema"] == NarrowManifest.schema_id() == "assay.narrow.manifest/1"
    assert manifest["record_schemas"] == {"raw_predictions.jsonl": "assay.narrow.row/1"}
    NarrowManifest.read(manifest, "manifest.json")
    rows = read_rows(narrow_run)
    assert len(rows) == 2
    for row in rows:
        assert NarrowRow.read(row, "row").to_row() == row
        assert "fatal" not in row  # written only when it stopped the run


def test_newer_manifest_schema_is_refused(narrow_run: Path) -> None:
    build_report(narrow_run)
    _edit_manifest(narrow_run, schema="assay.narrow.manifest/2")
    with pytest.raises(RecordError, match="newer than this assay reads"):
        build_report(narrow_run)
    with pytest.raises(RecordError, match="newer"):
        compare_runs(narrow_run, narrow_run)
    # through the real command line: a one-line message and exit 2, no traceback
    res = subprocess.run([sys.executable, "-m", "assay", "report", str(narrow_run)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert "assay.narrow.manifest/2" in res.stderr and "Traceback" not in res.stderr


def test_newer_row_schema_is_refused_by_report_and_resume(narrow_run: Path,
                                                         tmp_path: Path) -> None:
    _edit_manifest(narrow_run, record_schemas={"raw_predictions.jsonl": "assay.narrow.row/9"})
    with pytest.raises(RecordError, match="assay.narrow.row/9"):
        build_report(narrow_run)
    res = subprocess.run([sys.executable, "-m", "assay", "run", str(tmp_path / "suite"),
                          "--model", "builtin/oracle", "--out", str(narrow_run)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert "assay.narrow.row/9" in res.stderr


def test_run_from_before_record_schemas_reads_as_version_1(narrow_run: Path) -> None:
    rep = build_report(narrow_run)
    _edit_manifest(narrow_run, record_schemas=None)
    assert build_report(narrow_run)["accuracy"] == rep["accuracy"] == 1.0


def test_a_row_that_does_not_fit_is_refused(narrow_run: Path) -> None:
    path = narrow_run / "raw_predictions.jsonl"
    row = narrow_row("c1", "bug", "bug", 10, U1)
    row["repeat"] = "first"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(RecordError, match="raw_predictions.jsonl: field 'repeat'"):
        build_report(narrow_run)
    row = narrow_row("c1", "bug", "bug", 10, U1)
    row["confidence"] = 0.9  # an unknown field is not silently dropped
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(RecordError, match="confidence"):
        build_report(narrow_run)


def test_coding_records_versions(tmp_path: Path) -> None:
    assert SampleRow.schema_id() == "assay.coding.sample/3"
    assert CodingManifest.schema_id() == "assay.coding.manifest/2"
    # a schema-1 sample row (grade inside) still validates
    SampleRow.read({"id": "t", "sample": 0, "type": "unit", "raw": "x", "code": "x",
                    "passed": True, "reason": "ok", "latency_ms": 1.0, "usage": None,
                    "served_model": "m", "error": None, "exec": {}}, "old row")
    with pytest.raises(RecordError, match="newer"):
        CodingManifest.check_schema_id("assay.coding.manifest/3", "m.json")
    with pytest.raises(RecordError, match="not 'assay.coding.manifest'"):
        CodingManifest.check_schema_id("assay.narrow.manifest/1", "m.json")
    meta = GradeMeta(revision="v1", source="run", created_at="2026-01-01T00:00:00Z",
                     assay={}, graders={}, sandbox={}, tasks_sha256="0" * 64,
                     row_schema=GradeRow.schema_id())
    (tmp_path / "grades").mkdir()
    path = tmp_path / "grades" / "v1.meta.json"
    path.write_text(json.dumps(meta.to_json()))
    assert read_meta(tmp_path, "v1") == meta
    path.write_text(json.dumps({**meta.to_json(), "schema": "assay.coding.grades/2"}))
    with pytest.raises(RecordError, match="newer"):
        read_meta(tmp_path, "v1")
    path.write_text(json.dumps({**meta.to_json(), "row_schema": "assay.coding.grade/2"}))
    with pytest.raises(RecordError, match="assay.coding.grade/2"):
        read_meta(tmp_path, "v1")
    with pytest.raises(RecordError, match="no grade revision 'v9'"):
        read_meta(tmp_path, "v9")


def test_run_stamp_is_utc_and_path_safe() -> None:
    import datetime as dt

    when = dt.datetime(2026, 12, 1, 10, 40, 52, 999000,
                       tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert run_stamp(when) == "20261201T094052Z"
    assert len(run_stamp()) == 16 and run_stamp().endswith("Z")
