"""A report's long lists kept on disk (report/spilled.py): the listed cases of a narrow run read
as a list, are checked item by item, and report.json comes out byte for byte as
``json.dumps`` writes the same report held in memory (the memory side is measured by
bench/narrow_throughput.py, not here)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from test_wrong_cases import HOSTILE, narrow_run  # noqa: F401 (a fixture)

from assay.errors import RecordError
from assay.records.report import NarrowReport
from assay.report.files import write_reports
from assay.report.narrow import build_report
from assay.report.spilled import SpilledList, json_chunks


def _spilled(items: list[dict[str, Any]], order: list[int]) -> SpilledList:
    out = SpilledList()
    for item in items:
        out.add(item)
    out.order(order)
    return out


def test_a_spilled_list_reads_as_the_list_in_its_order() -> None:
    items = [{"id": f"c{i}", "text": HOSTILE, "n": i, "x": 0.1 * i, "nested": {"a": [1, {}]}}
             for i in range(5)]
    spilled = _spilled(items, [3, 0, 4, 1, 2])
    want = [items[i] for i in (3, 0, 4, 1, 2)]
    assert len(spilled) == 5 and list(spilled) == want and spilled == want
    assert spilled[0] == items[3] and spilled[-1] == items[2] and spilled[1:3] == want[1:3]
    assert spilled != want[:4] and spilled != [*want[:4], items[0]]
    assert copy.deepcopy({"cases": spilled}) == {"cases": want}  # a plain list, mutable
    with pytest.raises(IndexError):
        spilled[5]
    with pytest.raises(ValueError):
        _spilled(items, [0, 0, 1, 2, 3])  # an order must name every item once


@pytest.mark.parametrize("ascii_only", [False, True])
def test_chunks_are_the_bytes_json_dumps_writes(ascii_only: bool) -> None:
    items = [{"id": "é ✓ \u2028", "answers": [{"text": HOSTILE}, {}], "empty": []},
             {"id": "b", "answers": [], "score": None, "f": 1e-7}]
    report = {"schema": "x/1", "first": [1, 2], "cases": _spilled(items, [1, 0]),
              "empty": SpilledList(), "after": {"k": {"deep": [None, True]}}, "n": 3}
    report["empty"].order([])
    plain = {**report, "cases": [items[1], items[0]], "empty": []}
    want = json.dumps(plain, indent=2, ensure_ascii=ascii_only, allow_nan=False) + "\n"
    assert "".join(json_chunks(report, ensure_ascii=ascii_only)) == want


def test_report_json_of_a_run_is_what_dumps_writes_and_bad_items_are_refused(
        narrow_run: Path, tmp_path: Path) -> None:  # noqa: F811 (the fixture)
    rep = build_report(narrow_run)
    assert isinstance(rep["wrong_cases"], SpilledList) and len(rep["wrong_cases"]) >= 5
    write_reports(tmp_path, rep, "")
    plain = {**rep, "wrong_cases": list(rep["wrong_cases"])}
    assert (tmp_path / "report.json").read_text(encoding="utf-8") == json.dumps(
        plain, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    cases = list(rep["wrong_cases"])
    cases[2] = {**cases[2], "right": "3"}  # a count as a string: strict, refused
    bad = {**rep, "wrong_cases": _spilled(cases, list(range(len(cases))))}
    with pytest.raises(RecordError, match=r"field 'wrong_cases\.2\.right'"):
        NarrowReport.checked(bad, "the report")
