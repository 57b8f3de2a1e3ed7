"""Typed reports: the report.json of a real narrow run (scripted HTTP server) and of a real
coding run (scripted server, real sandbox), and the JSON of ``assay compare --json``, validate
against the models in ``assay.records.report`` and round-trip through them unchanged; a report
that drifted (a field dropped, a wrong type, an extra key) is refused before it is written, and
one written by a newer assay is refused when read."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SECRET, run_cli, write_suite
from pydantic import BaseModel
from support.rows import narrow_row
from support.scripted_server import Answer, ScriptedServer, Status, by_input
from test_coding_run import BAD_PY, GOOD_PY, by_task, fenced, unit, write_tasks

from assay.errors import RecordError
from assay.records.base import REGISTRY
from assay.records.report import (
    CodingComparison,
    CodingReport,
    NarrowComparison,
    NarrowReport,
    ReportRecord,
    check_report,
    read_report,
)
from assay.report.files import write_reports
from assay.report.html import SCHEMAS
from assay.report.narrow import build_report
from assay.sandbox import bwrap_available

MODELS: list[type[ReportRecord]] = [NarrowReport, CodingReport, NarrowComparison,
                                    CodingComparison]

# c1 right every time; c2 answers differ across its two repeats; c3 needs the format retry
# once; c4 never gives a valid label (and no usage); c5 gets only HTTP 503 (an infra error).
CASES = [("c1", "case one", "bug"), ("c2", "case two", "feature"),
         ("c3", "case three", "question"), ("c4", "case four", "bug"),
         ("c5", "case five", "bug")]
SCRIPT = {
    "case one": Answer('{"label": "bug"}', system_fingerprint="fp-1"),
    "case two": [Answer('{"label": "feature"}'), Answer('{"label": "question"}')],
    "case three": [Answer("I would say question"), Answer('{"label": "question"}')],
    "case four": Answer("no idea", usage=None),
    "case five": Status(503),
}


def _env(server: ScriptedServer) -> dict[str, str]:
    return {"MODEL_BASE_URL": server.base_url, "MODEL_NAME": "test-model",
            "MODEL_API_KEY": SECRET}


@pytest.fixture(scope="module")
def narrow_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """A scripted-server run with repeats (every optional figure present) and a built-in
    oracle run of the same suite, to compare with."""
    root = tmp_path_factory.mktemp("narrow")
    suite = write_suite(root / "suite", CASES)
    run, oracle = root / "run", root / "oracle"
    with ScriptedServer(by_input(SCRIPT)) as server:
        res = run_cli(["run", str(suite), "--repeats", "2", "--max-tries", "1", "-j", "1",
                       "--out", str(run)], env=_env(server))
    assert res.code == 3, res.stderr  # c5's infra errors
    res = run_cli(["run", str(suite), "--model", "builtin/oracle", "--repeats", "2",
                   "--out", str(oracle)])
    assert res.code == 0, res.stderr
    yield run, oracle


@pytest.fixture(scope="module")
def coding_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """Two coding runs of one task file in the real sandbox: A solves py-add once in two, B
    always; both answer the rubric task (left for a human)."""
    if not bwrap_available():
        pytest.skip("bubblewrap cannot run here")
    root = tmp_path_factory.mktemp("coding")
    tasks = write_tasks(root / "tasks.jsonl", [
        unit("py-add", "Write add(a, b)."), unit("py-also", "Write add(a, b) again."),
        {"id": "sql-r", "type": "rubric", "prompt": "Index orders by date.",
         "rubric": "3: covering index"}])
    runs = root / "a", root / "b"
    for run, add in zip(runs, ([fenced(GOOD_PY), fenced(BAD_PY)], fenced(GOOD_PY)),
                        strict=True):
        handler = by_task(tasks, {"py-add": add, "py-also": fenced(GOOD_PY),
                                  "sql-r": fenced("CREATE INDEX i ON orders (d);\n", "sql")})
        with ScriptedServer(handler) as server:
            res = run_cli(["run", str(tasks), "--samples", "2", "-j", "1", "--out", str(run)],
                          env=_env(server))
        assert res.code == 0, res.stderr
    yield runs


def _report_json(run: Path) -> dict[str, Any]:
    return json.loads((run / "report.json").read_text())


# --------------------------------------------------------------------------- the models


def _documented(model: type[BaseModel], seen: set[type[BaseModel]]) -> Iterator[str]:
    """Every field of ``model`` and of every model nested in it that lacks a docstring."""
    if model in seen:
        return
    seen.add(model)
    for name, info in model.model_fields.items():
        if not info.description:
            yield f"{model.__name__}.{name}"
        stack: list[Any] = [info.annotation]
        while stack:
            tp = stack.pop()
            if isinstance(tp, type) and issubclass(tp, BaseModel):
                yield from _documented(tp, seen)
            stack.extend(getattr(tp, "__args__", ()))


def test_every_report_model_documents_every_field() -> None:
    names = {r.schema_name for r in REGISTRY}
    assert {"assay.narrow.report", "assay.coding.report", "assay.narrow.compare",
            "assay.coding.compare"} <= names
    seen: set[type[BaseModel]] = set()
    undocumented = [f for m in MODELS for f in _documented(m, seen)]
    assert undocumented == []
    # the walk reached the nested models, not just the top level
    assert {"Latency", "LabelFigures", "Agreement", "UsageTotals", "NarrowParameters",
            "SuiteFigure", "TaskFigures", "RubricSummary", "PairedTable", "IntervalInfo",
            "NarrowSide", "CodingSide", "TaskDelta"} <= {m.__name__ for m in seen}


def test_schema_ids_are_the_ones_reports_have_always_carried() -> None:
    assert [m.schema_id() for m in MODELS] == [
        "assay.narrow.report/1", "assay.coding.report/1", "assay.narrow.compare/2",
        "assay.coding.compare/2"]
    assert SCHEMAS == {"narrow": NarrowReport.schema_id(), "coding": CodingReport.schema_id()}


# --------------------------------------------------------------------------- narrow


def test_narrow_report_validates_and_round_trips(narrow_runs: tuple[Path, Path]) -> None:
    run, _ = narrow_runs
    data = _report_json(run)
    assert data["schema"] == "assay.narrow.report/1"
    assert NarrowReport.read(data, "report.json").to_json() == data
    assert list(NarrowReport.read(data, "report.json").to_json()) == list(data)  # key order
    rep = read_report(run)
    assert isinstance(rep, NarrowReport) and rep.to_json() == data
    # the run exercised the optional parts of the schema, not only their nulls
    assert rep.expected_rows == 10 and rep.n == 8 and rep.infra_errors == 2
    assert rep.infra_error_ids == ["c5"]
    assert rep.agreement is not None and rep.agreement.unstable_cases == ["c2"]
    # c4's two answers were invalid: left out of the agreement, and said
    assert rep.agreement.cases_with_all_repeats == 4 and rep.agreement.cases_compared == 3
    assert rep.agreement.rate == pytest.approx(2 / 3) and rep.agreement.invalid_answers == 2
    # c3 once and c4 twice needed the format retry; c4 stayed invalid both times
    assert rep.retried == 3 and rep.invalid_first_try == 3 and rep.invalid_remaining == 2
    assert rep.correct == 5 and rep.accuracy == 5 / 8 and rep.accuracy_ci95 is not None
    assert rep.usage.incomplete is True and rep.usage.rows_missing_usage == 2
    assert rep.usage.total_tokens is not None and rep.latency_ms.p50 is not None
    assert rep.system_fingerprints == ["fp-1"] and rep.parameters.repeats == 2
    assert set(rep.per_label) == {"bug", "feature", "question"}
    assert rep.confusion["bug"]["(invalid)"] == 2


def test_unknown_narrow_figures_stay_null_through_the_model(
        narrow_runs: tuple[Path, Path], tmp_path: Path) -> None:
    _, oracle = narrow_runs
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_bytes((oracle / "manifest.json").read_bytes())
    (run / "raw_predictions.jsonl").write_text(json.dumps(narrow_row(
        "c1", "bug", "", None, None, error="no usable answer after 1 tries (last: http_503)"))
        + "\n")
    assert run_cli(["report", str(run)]).code == 0
    data = _report_json(run)
    rep = read_report(run)
    assert isinstance(rep, NarrowReport) and rep.to_json() == data
    assert rep.accuracy is None and rep.accuracy_ci95 is None
    assert rep.latency_ms.p50 is rep.latency_ms.p95 is rep.latency_ms.max is None
    assert rep.usage.total_tokens is None and rep.agreement is not None
    assert rep.agreement.rate is None
    assert data["accuracy"] is None and data["usage"]["prompt_tokens"] is None


def test_narrow_comparison_validates_and_round_trips(narrow_runs: tuple[Path, Path],
                                                    tmp_path: Path) -> None:
    run, oracle = narrow_runs
    out = tmp_path / "c.json"
    res = run_cli(["compare", str(run), str(oracle), "--json", str(out)])
    assert res.code == 0, res.stderr
    data = json.loads(out.read_text())
    c = NarrowComparison.load(data, out)
    assert c.to_json() == data and list(c.to_json()) == list(data)
    # cases are the unit (their repeats are one rate): c1-c4 paired, c5 lost to infra errors
    assert c.paired == 4 and c.only_in_one_run == 1 and c.run_b.accuracy == 1.0
    assert c.to_json()["table"] == {"both_right": 2, "only_a": 0, "only_b": 2, "both_wrong": 0,
                                    "same_partial": 0}
    assert c.interval.clustered_by == "case id" and c.a_right_b_wrong == []
    assert c.repeats == {"a": 2, "b": 2} and c.answers == {"a": 8, "b": 8}
    # one repeat of c2 answered wrong, and c4 twice: B is right more often on both
    assert c.b_right_a_wrong == ["c2", "c4"]
    with pytest.raises(RecordError, match="field 'table.only_b'"):
        NarrowComparison.checked({**data, "table": {**data["table"], "only_b": "3"}}, out)


# --------------------------------------------------------------------------- coding


def test_coding_report_validates_and_round_trips(coding_runs: tuple[Path, Path]) -> None:
    run_a, run_b = coding_runs
    for run in (run_a, run_b):
        data = _report_json(run)
        assert data["schema"] == "assay.coding.report/1"
        assert CodingReport.read(data, "report.json").to_json() == data
        assert list(CodingReport.read(data, "report.json").to_json()) == list(data)
    rep = read_report(run_a)
    assert isinstance(rep, CodingReport) and rep.to_json() == _report_json(run_a)
    assert rep.not_isolated is False and rep.grade_revision == "v1"
    assert rep.pass_at_1 is not None and rep.pass_at_1.mean == 0.75 and rep.pass_at_1.tasks == 2
    assert sorted(rep.pass_at_k) == ["1", "2"] and rep.mixed_tasks == ["py-add"]
    tasks = {t.id: t for t in rep.tasks}
    assert (tasks["py-add"].passes, tasks["py-add"].samples) == (1, 2)
    assert tasks["sql-r"].pass_rate is None and tasks["sql-r"].rubric_answers == 2
    assert rep.rubric.answers == 2 and rep.rubric.mean_score is None  # nothing graded yet


def test_coding_comparison_validates_and_round_trips(coding_runs: tuple[Path, Path],
                                                    tmp_path: Path) -> None:
    run_a, run_b = coding_runs
    out = tmp_path / "c.json"
    res = run_cli(["compare", str(run_a), str(run_b), "--json", str(out)])
    assert res.code == 0, res.stderr
    data = json.loads(out.read_text())
    c = CodingComparison.load(data, out)
    assert c.to_json() == data and list(c.to_json()) == list(data)
    assert c.tasks == 2 and c.run_a.grade_revision == "v1" and c.interval.clustered_by == "task"
    assert [(t.id, t.a, t.b, t.delta) for t in c.per_task] == [
        ("py-add", "1/2", "2/2", 0.5), ("py-also", "2/2", "2/2", 0.0)]
    with pytest.raises(RecordError, match="field 'newly_passing'"):
        CodingComparison.checked({k: v for k, v in data.items() if k != "newly_passing"}, out)


# --------------------------------------------------------------------------- drift is caught


def _set(path: str, value: Any) -> Any:
    def change(data: dict[str, Any]) -> None:
        *outer, last = path.split(".")
        for key in outer:
            data = data[int(key)] if isinstance(data, list) else data[key]
        if value is _DROP:
            del data[last]
        else:
            data[last] = value
    return change


_DROP = object()

NARROW_DRIFT = [
    ("accuracy", _DROP, "accuracy"),
    ("n", "8", "n"),
    ("accuracy", True, "accuracy"),
    ("latency_ms.p50", "fast", "latency_ms.p50"),
    ("per_label.bug.support", 1.5, "per_label.bug.support"),
    ("accuracy_ci95", [0.25], "accuracy_ci95"),
    ("usage.incomplete", "yes", "usage.incomplete"),
    ("accuracy_pct", 50.0, "accuracy_pct"),
    ("agreement.unstable_cases", "c2", "agreement.unstable_cases"),
]


@pytest.mark.parametrize(("path", "value", "field"), NARROW_DRIFT)
def test_a_narrow_report_that_drifted_is_refused_before_it_is_written(
        narrow_runs: tuple[Path, Path], tmp_path: Path, path: str, value: Any,
        field: str) -> None:
    run, _ = narrow_runs
    good = _report_json(run)
    bad = copy.deepcopy(good)
    _set(path, value)(bad)
    with pytest.raises(RecordError, match=rf"field '{field}'"):
        NarrowReport.checked(bad, "built")
    with pytest.raises(RecordError, match=rf"field '{field}'"):
        write_reports(tmp_path, bad, "# markdown")
    assert not (tmp_path / "report.json").exists() and not (tmp_path / "report.md").exists()
    write_reports(tmp_path, good, "# markdown")  # the writer takes the report as built
    assert json.loads((tmp_path / "report.json").read_text()) == good


CODING_DRIFT = [
    ("grade_revision", _DROP, "grade_revision"),
    ("tasks.0.passes", "1", "tasks.0.passes"),
    ("tasks.0.mixed", 1, "tasks.0.mixed"),
    ("rubric.mean_score", "n/a", "rubric.mean_score"),
    ("pass_at_1.ci95", None, "pass_at_1.ci95"),
    ("pass_at_k.1", None, "pass_at_k.1"),
    ("not_isolated", None, "not_isolated"),
]


@pytest.mark.parametrize(("path", "value", "field"), CODING_DRIFT)
def test_a_coding_report_that_drifted_is_refused(coding_runs: tuple[Path, Path], path: str,
                                                 value: Any, field: str) -> None:
    good = _report_json(coding_runs[0])
    bad = copy.deepcopy(good)
    _set(path, value)(bad)
    with pytest.raises(RecordError, match=rf"field '{field}'"):
        check_report(bad, "built")
    assert check_report(good, "built") is good  # the dict itself, unchanged


def test_a_builder_that_drifts_fails_in_the_builder(
        narrow_runs: tuple[Path, Path], coding_runs: tuple[Path, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A figure helper that changes its shape (a key renamed, a count as text) stops the
    builder with a RecordError that names the field, instead of reaching report.json."""
    import assay.report.coding as coding
    import assay.report.narrow as narrow

    run, _ = narrow_runs
    build_report(run)
    monkeypatch.setattr(narrow, "agreement",
                        lambda answered, repeats: {"rate": 1.0, "consistent": 4})
    with pytest.raises(RecordError, match="field 'agreement"):
        build_report(run)
    run_a, _ = coding_runs
    coding.build_coding_report(run_a)
    real = coding.rubric_summary
    monkeypatch.setattr(coding, "rubric_summary",
                        lambda d, f, *r: {**real(d, f, *r),
                                          "graded": str(real(d, f, *r)["graded"])})
    with pytest.raises(RecordError, match="field 'rubric.graded'"):
        coding.build_coding_report(run_a)


# --------------------------------------------------------------------------- schema versions


@pytest.mark.parametrize("model", [NarrowReport, CodingReport])
def test_a_report_of_a_newer_schema_is_refused(model: type[ReportRecord], tmp_path: Path,
                                               narrow_runs: tuple[Path, Path]) -> None:
    data = _report_json(narrow_runs[0])
    data["schema"] = f"{model.schema_name}/{model.schema_version + 1}"
    (tmp_path / "report.json").write_text(json.dumps(data))
    with pytest.raises(RecordError, match="newer than this assay reads"):
        read_report(tmp_path)
    with pytest.raises(RecordError, match="newer than this assay reads"):
        model.load(data, "report.json")
    with pytest.raises(RecordError, match="expected"):  # a writer writes exactly its version
        model.checked(data, "built")


@pytest.mark.parametrize("model", [NarrowComparison, CodingComparison])
def test_a_comparison_of_a_newer_schema_is_refused(model: type[ReportRecord]) -> None:
    data = {"schema": f"{model.schema_name}/{model.schema_version + 1}"}
    with pytest.raises(RecordError, match="newer than this assay reads"):
        model.load(data, "c.json")


def test_foreign_and_stale_reports_are_refused_clearly(narrow_runs: tuple[Path, Path],
                                                       tmp_path: Path) -> None:
    data = _report_json(narrow_runs[0])
    (tmp_path / "report.json").write_text(json.dumps({**data, "schema": "assay.narrow.manifest/1"}))
    with pytest.raises(RecordError, match="not an assay report"):
        read_report(tmp_path / "report.json")
    with pytest.raises(RecordError, match="not an assay report"):
        check_report({**data, "schema": "assay.narrow.manifest/1"}, "built")
    # a report missing a key (as an older build might write) is refused, naming the field, and
    # says how to get a good one: reports are rebuilt from the records, not repaired
    stale = {k: v for k, v in data.items() if k != "torn_tail_bytes"}
    (tmp_path / "report.json").write_text(json.dumps(stale))
    with pytest.raises(RecordError, match=r"field 'torn_tail_bytes'.*assay report"):
        read_report(tmp_path)
