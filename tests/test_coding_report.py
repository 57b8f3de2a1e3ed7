"""The coding report's Markdown, drawn from a report dict alone (no run directory): the edge
cases a real run reaches only now and then: nothing measured yet, rows still missing, a run
without the sandbox, rubric answers graded and not. The figures themselves are tested on real
runs in test_coding_run.py and test_html_report.py."""

from __future__ import annotations

from typing import Any

from assay.records.report import (
    CodingReport,
    RubricAnswer,
    RubricRound,
    RubricSummary,
    SuiteFigure,
    TaskFigures,
)
from assay.report.coding_markdown import NOT_ISOLATED, coding_headline, coding_markdown


def _fig(mean: float, lo: float, hi: float) -> SuiteFigure:
    return SuiteFigure(mean=mean, ci95=[lo, hi], tasks=2)


def _task(tid: str, kind: str, samples: int, passes: int, failures: list[str], *,
          infra_errors: int = 0, rubric_answers: int = 0) -> TaskFigures:
    return TaskFigures(id=tid, type=kind, samples=samples, passes=passes,
                       pass_rate=passes / samples if samples else None,
                       mixed=0 < passes < samples, failures=failures,
                       infra_errors=infra_errors, rubric_answers=rubric_answers)


def report(**over: Any) -> dict[str, Any]:
    """A coding report built through its model, then changed by ``over`` and checked again,
    so every report the Markdown is tested on is one a run could write."""
    rep = CodingReport(
        schema_=CodingReport.schema_id(), run_id="r1", suite="tiny", model="m",
        not_isolated=False, samples_per_task=2, expected_rows=6, missing_rows=0,
        auto_graded_tasks=2, pass_at_1=_fig(0.75, 0.5, 1.0), pass_all=_fig(0.5, 0.0, 1.0),
        pass_all_k=2, pass_at_k={"1": _fig(0.75, 0.5, 1.0), "2": _fig(1.0, 1.0, 1.0)},
        pass_hat_k={}, mixed_tasks=["py-add"], failure_reasons={"wrong_answer": 1},
        infra_errors=1, grade_revision="v1", ungraded=0,
        tasks=[_task("py-add", "unit", 2, 1, ["#1: wrong_answer"]),
               _task("py-sub", "unit", 2, 2, [], infra_errors=1),
               _task("sql-01", "rubric", 0, 0, [], rubric_answers=1).model_copy(
                   update={"rubric_graded": 1, "rubric_passes": 1, "rubric_mean_score": 2.0})],
        rubric=RubricSummary(answers=1, graded=1, ungraded=0, mean_score=2.0, scale="0-3",
                             passed=1, round="20260101T000000.000Z-ann",
                             rounds=[RubricRound(name="20260101T000000.000Z-ann", grader="ann",
                                                 source="csv", started_at=None, grades=1,
                                                 counted=1)],
                             grades=[RubricAnswer(id="sql-01", sample=0, score=2, passed=True,
                                                  round="20260101T000000.000Z-ann",
                                                  grader="ann", graded_at=None,
                                                  note="ok | fine")]),
        served_models={"m-0613": 5}, warnings=[], started_at=None, ended_at=None)
    return CodingReport.checked({**rep.to_json(), **over}, "hand-built report")


def test_markdown_shows_the_figures_and_every_task():
    md = coding_markdown(report())
    assert md.startswith("# assay coding report: tiny × m\n")
    assert "| pass@1 (mean over samples, 95% CI by task) | 75.0% [50.0%, 100.0%] |" in md
    assert "| pass^2 (every sample passes) | 50.0% [0.0%, 100.0%] |" in md
    assert "| pass@2 (unbiased) | 100.0% [100.0%, 100.0%] |" in md
    assert "pass@1 (unbiased)" not in md  # pass@1 has its own row
    assert "| tasks with mixed outcomes | 1 (py-add) |" in md
    assert ("| rubric answers graded | 1 of 1, 0 ungraded; 1 scored ≥ 2, mean 2.00 / 3; "
            "round 20260101T000000.000Z-ann (latest) |") in md
    assert "| served model | m-0613 (5) |" in md
    assert "| py-add | unit | 1 of 2 (mixed) | #1: wrong_answer |" in md
    (sub,) = [line for line in md.splitlines() if line.startswith("| py-sub |")]
    assert sub.startswith("| py-sub | unit | 2 of 2 |") and sub.endswith("1 infra errors |")
    assert "| sql-01 | rubric | 1 of 1 graded pass (score ≥ 2), mean 2.00 / 3 |  |" in md
    assert "| sql-01 | 0 | 2 | 20260101T000000.000Z-ann | `ann` | `ok \\| fine` |" in md
    assert NOT_ISOLATED not in md and "not yet answered" not in md


def test_unknown_figures_say_so_and_never_print_as_zero():
    rep = report(pass_at_1=None, pass_all=None, pass_at_k={}, mixed_tasks=[],
                 failure_reasons={}, served_models={}, missing_rows=4,
                 rubric={"answers": 3, "graded": 0, "ungraded": 3, "mean_score": None,
                         "scale": "0-3"})
    rows = dict(coding_headline(rep))
    assert rows["pass@1 (mean over samples, 95% CI by task)"] == "n/a"
    assert rows["pass^2 (every sample passes)"] == "n/a"
    assert rows["served model"] == "n/a" and rows["failure reasons"] == "none"
    assert rows["rubric answers graded"] == "0 of 3, 3 ungraded; no grading round yet"
    assert rows["tasks with mixed outcomes"] == "0"
    assert coding_headline(rep)[0] == (
        "not yet answered", "4 (resume: run again with --out set to this run directory)")


def test_a_run_without_the_sandbox_and_its_warnings_head_the_page():
    md = coding_markdown(report(not_isolated=True, warnings=["served model changed"]))
    lines = md.splitlines()
    assert lines[2] == f"> **{NOT_ISOLATED}**"
    assert lines[4] == "> **Warning:** served model changed"
    assert lines[5] == "| figure | value |"


def test_a_report_from_before_the_failure_list_says_na_not_none():
    """Reports written before ``failed_tasks`` and ``latency_ms`` existed read with both null,
    and every view says n/a for them, never "no failures" or 0 ms."""
    from assay.report.html import render_html

    old = {k: v for k, v in report().items() if k not in ("failed_tasks", "latency_ms")}
    rep = CodingReport.load(old, "old report.json")
    assert rep.failed_tasks is None and rep.latency_ms is None
    md = coding_markdown(old)
    assert "n/a: this report was written before failed samples were listed" in md
    assert dict(coding_headline(old))["latency p50 / p95 / max (ms)"] == "n/a / n/a / n/a"
    html = render_html(old, "coding")
    assert "this report was written before failed samples were listed" in html
    assert 'class="latency"' not in html and "n/a: no latency measured." in html
    # and a report that lists none says so
    assert "None: every graded sample passed" in coding_markdown(report(failed_tasks=[]))


def test_no_failed_sample_does_not_claim_a_verdict_for_ungraded_answers() -> None:
    """Rubric answers waiting for a person have no verdict: the section says so instead of
    "every sample has a verdict"."""
    from assay.report.cases_markdown import coding_failures_markdown

    waiting = coding_failures_markdown({"failed_tasks": [], "ungraded": 0,
                                        "rubric": {"ungraded": 5}})
    assert waiting[-1] == ("None among the graded samples; 5 rubric answers wait for human "
                           "grading (assay grade).")
    done = coding_failures_markdown({"failed_tasks": [], "ungraded": 0,
                                     "rubric": {"ungraded": 0}})
    assert done[-1] == "None: every graded sample passed and every sample has a verdict."
