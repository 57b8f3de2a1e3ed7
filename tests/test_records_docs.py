"""The records reference page is generated from the models and must be current; every field of
every record says what it means; trial records and grades refuse a newer schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay.errors import RecordError
from assay.records.docs import _load_all, _nested, render
from assay.records.trial import read_grade, read_trial

DOC = Path(__file__).resolve().parents[1] / "docs" / "records.md"


def test_records_page_is_current() -> None:
    assert DOC.read_text(encoding="utf-8") == render(), (
        "docs/records.md is stale: run .venv/bin/python -m assay.records.docs > docs/records.md")


def test_every_field_of_every_record_is_documented() -> None:
    missing = []
    classes = _load_all()
    assert {"assay.trial", "assay.trial.grade", "assay.narrow.row",
            "assay.coding.sample"} <= {c.schema_name for c in classes}
    todo = list(classes)
    seen: set[type] = set()
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        for name, info in cls.model_fields.items():
            if not (info.description or "").strip():
                missing.append(f"{cls.__name__}.{name}")
            todo += _nested(info.annotation)
    assert not missing, missing


def test_trial_records_and_grades_refuse_a_newer_schema(tmp_path: Path) -> None:
    (tmp_path / "grades").mkdir()
    (tmp_path / "trial.json").write_text(json.dumps({"schema": "assay.trial/2"}))
    with pytest.raises(RecordError, match="newer"):
        read_trial(tmp_path)
    (tmp_path / "grades" / "v1.json").write_text(json.dumps({"schema": "assay.trial.grade/9"}))
    with pytest.raises(RecordError, match="newer"):
        read_grade(tmp_path, "v1")
    (tmp_path / "grades" / "v2.json").write_text(json.dumps({"schema": "assay.trial.grade/1",
                                                             "trial_id": "t"}))
    with pytest.raises(RecordError, match="field"):
        read_grade(tmp_path, "v2")
