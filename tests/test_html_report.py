"""The single-file HTML report, drawn from real run directories (built-in oracle model, records
then replaced by hand-written rows whose figures are worked out by hand), read back with the
standard library's HTML parser: the figures a person looks for are there, unknown figures say
"n/a", text from the run is escaped, and nothing reaches outside the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli, write_suite
from support.htmldom import Node
from support.htmldom import parse as parse_dom
from support.rows import U1, U2
from support.rows import narrow_row as _row

from assay.records.coding import GradeRow
from assay.records.report import CodingReport, NarrowReport
from assay.report.coding import build_coding_report
from assay.report.html import render_html, write_html
from assay.report.narrow import build_report

XSS = "<img src=x onerror=alert(1)>"
XSS_ESCAPED = "&lt;img src=x onerror=alert(1)&gt;"


# --------------------------------------------------------------------------- the page


def parse(html: str) -> Node:
    """The page's root: balanced markup (``support/htmldom``), one html with head and body, one
    main and a title."""
    root = parse_dom(html)
    (doc,) = root.find_all("html")
    assert [c.tag for c in doc.children if isinstance(c, Node)] == ["head", "body"]
    assert len(root.find_all("main")) == 1 and len(root.find_all("title")) >= 1
    return root


def assert_self_contained(html: str, root: Node) -> None:
    low = html.lower()
    for needle in ("http://", "https://", "<script", "@import", "url(", "//fonts"):
        assert needle not in low, needle
    for node in root.walk():
        assert node.tag not in {"script", "link", "img", "iframe", "object", "embed", "image",
                                "use", "base", "form"}, node.tag
        for name, value in node.attrs.items():
            assert not name.startswith("on"), f"event handler attribute {name}"
            if name in ("src", "srcset", "action", "xlink:href", "data"):
                raise AssertionError(f"<{node.tag} {name}={value!r}>")
            if name == "href":
                assert (value or "").startswith("#"), f"non-local link {value!r}"


def tile(root: Node, key: str) -> Node:
    """The headline tile whose small caption is ``key``."""
    for t in root.find_all("div", "tile"):
        ks = t.find_all("div", "k")
        if ks and ks[0].text() == key:
            return t
    raise AssertionError(f"no tile {key!r}")


def confusion_cells(root: Node) -> dict[str, dict[str, int]]:
    table = root.find("table", "conf")
    cols = [th.text() for th in table.find("thead").find_all("th")][1:-1]  # corner, total
    out = {}
    for tr in table.find("tbody").find_all("tr"):
        head = tr.find("th")
        if "tot" in head.classes:
            continue
        cells = [td for td in tr.find_all("td") if "cell" in td.classes]
        out[head.text()] = {c: int(td.text()) for c, td in zip(cols, cells, strict=True)}
    return out


# --------------------------------------------------------------------------- narrow runs


HAND_ROWS = [  # the rows of test_narrow_report, with the infra error on a hostile case id
    _row("k1", "bug", "bug", 100, U1),
    _row("k2", "bug", "bug", 200, U1),
    _row("k3", "bug", "feature", 300, U1),
    _row("k4", "feature", "feature", 400, None),
    _row("k5", "feature", "", 500, U2, attempts=2, first="not_json", invalid="not_json"),
    _row("k6", "question", "question", 600, U1),
    _row("k7", "question", "bug", 700, U1),
    _row("k8", "question", "question", 800, U2, attempts=2, first="no_object"),
    _row(XSS, "bug", "", None, None, error="no usable answer after 5 tries (last: http_503)"),
]
CASES = [(r["id"], f"text {i}", r["expected"]) for i, r in enumerate(HAND_ROWS)]


@pytest.fixture(scope="module")
def narrow_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("narrow")
    suite = write_suite(root / "suite", CASES)
    run = root / "run"
    assert run_cli(["run", str(suite), "--model", "builtin/oracle", "--out", str(run)]).code == 0
    return run


def _with_rows(run: Path, rows: list[dict[str, Any]]) -> dict[str, Any]:
    (run / "raw_predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return build_report(run)


def test_narrow_figures(narrow_run: Path) -> None:
    rep = _with_rows(narrow_run, HAND_ROWS)
    html = render_html(rep, "narrow")
    root = parse(html)
    assert_self_contained(html, root)
    assert root.find("h1").text() == "suite × builtin/oracle"
    assert "run run" in root.find("p", "meta").text()
    # accuracy 5 of 8 with its Wilson interval, as text and as the whisker of the bar
    acc = tile(root, "accuracy")
    assert "62.5%" in acc.text() and "[30.6%, 86.3%]" in acc.text()
    assert "5 of 8 answers correct" in acc.text()
    svg = acc.find("svg")
    assert "[30.6%, 86.3%]" in (svg.attrs["aria-label"] or "")
    width = float(svg.find("rect").attrs["width"] or 0)
    xs = {(float(ln.attrs["x1"] or 0), float(ln.attrs["x2"] or 0)) for ln in svg.find_all("line")}
    lo, hi = rep["accuracy_ci95"]
    assert any(x1 == pytest.approx(lo * width, abs=0.1) and x2 == pytest.approx(hi * width, abs=0.1)
               for x1, x2 in xs), "no whisker from the lower to the upper bound"
    assert tile(root, "invalid after retry").find("div", "v").text() == "1"
    assert tile(root, "infra errors").find("div", "v").text() == "1"
    assert tile(root, "latency p50 / p95 / max").find("div", "v").text() == "400 / 800 / 800 ms"
    tokens = tile(root, "tokens (total)")
    assert tokens.find("div", "v").text() == "108"
    assert "incomplete: 1 answer without usage" in tokens.text()
    assert tile(root, "served model").text() == "served model m (8)"
    # the confusion matrix, cell by cell, with the diagonal green and the rest red
    assert confusion_cells(root) == rep["confusion"] == {
        "bug": {"bug": 2, "feature": 1, "question": 0, "(invalid)": 0},
        "feature": {"bug": 0, "feature": 1, "question": 0, "(invalid)": 1},
        "question": {"bug": 1, "feature": 0, "question": 2, "(invalid)": 0},
    }
    cells = root.find("table", "conf").find_all("td", "cell")
    assert {c.text() for c in cells if "hit" in c.classes} == {"2", "1"}
    assert all("rgba(26,127,55," in (c.attrs["style"] or "") for c in cells if "hit" in c.classes)
    assert all("rgba(207,34,46," in (c.attrs["style"] or "") for c in cells if "miss" in c.classes)
    assert all("style" not in c.attrs for c in cells if "zero" in c.classes)
    # per label: question has precision 100%, recall 66.7%, F1 80.0%, each with a bar
    rows = {tr.find("td").text(): tr for tr in root.find("table", "perlabel").find_all("tr")[1:]}
    q = rows["question"]
    assert [m.find("span", "num").text() for m in q.find_all("span", "metric")] == \
        ["100.0%", "66.7%", "80.0%"]
    assert len(q.find_all("svg")) == 3
    # the infra error is listed by its id, as text
    assert XSS in root.text() and XSS_ESCAPED in html and XSS not in html
    assert "onerror=alert(1)>" not in html.replace(XSS_ESCAPED, "")


def test_narrow_latency_distribution(narrow_run: Path) -> None:
    """The histogram of the hand rows' latencies (100, 200, ..., 800 ms): 15 bins of 50 ms from
    100, one answer in every other bin, with p50 / p90 / p99 drawn where they fall."""
    rep = _with_rows(narrow_run, HAND_ROWS)
    root = parse(render_html(rep, "narrow"))
    svg = root.find("svg", "latency")
    bins = svg.find_all("rect", "bin")
    assert [int(b.attrs["data-count"] or 0) for b in bins] == [1] * 8  # empty bins not drawn
    # the plot is 600 px wide from x = 44 and spans 15 x 50 = 750 ms: bin i starts at 44 + 40 i
    assert [float(b.attrs["x"] or 0) for b in bins] == [44 + 80 * i for i in range(8)]
    assert {b.find("title").text() for b in bins} >= {"100–150 ms: 1 answer",
                                                       "800–850 ms: 1 answer"}
    marks = {m.attrs["data-mark"]: float(m.attrs["x1"] or 0) for m in svg.find_all("line", "mark")}
    # p50 = 400 ms: 44 + 300 / 750 * 600 = 284; p90 = p99 = 800 ms: 44 + 700 / 750 * 600 = 604
    assert marks == {"p50": 284.0, "p90": 604.0, "p99": 604.0}
    assert "p50 400 ms" in svg.text() and "p99 800 ms" in svg.text()
    assert "8 answers, bins of 50 ms; p50 400 · p90 800 · p95 800 · p99 800 · max 800 ms." in \
        root.text()


def test_narrow_unknown_figures_are_na_never_zero(narrow_run: Path) -> None:
    """No usage anywhere and nothing answered: every unknown figure is n/a, not 0."""
    no_usage = [{**r, "usage": None} for r in HAND_ROWS]
    root = parse(render_html(_with_rows(narrow_run, no_usage), "narrow"))
    tokens = tile(root, "tokens (total)")
    assert tokens.find("div", "v").text() == "n/a"
    assert "prompt n/a · completion n/a" in tokens.text()
    assert "incomplete: 8 answers without usage" in tokens.text()

    errors = [_row(r["id"], r["expected"], "", None, None, error="http_503") for r in HAND_ROWS]
    rep = _with_rows(narrow_run, errors)
    assert rep["accuracy"] is None and rep["latency_ms"]["p50"] is None
    html = render_html(rep, "narrow")
    root = parse(html)
    acc = tile(root, "accuracy")
    assert acc.find("div", "v").text() == "n/a" and "interval n/a" in acc.text()
    assert acc.find_all("svg") == [] and "0.0%" not in html
    assert tile(root, "latency p50 / p95 / max").find("div", "v").text() == "n/a / n/a / n/a ms"
    assert not root.find_all("svg", "latency") and "n/a: no latency measured." in root.text()
    assert rep["latency_ms"]["histogram"] is None and rep["latency_ms"]["p99"] is None
    assert tile(root, "tokens (total)").find("div", "v").text() == "n/a"
    rows = {tr.find("td").text(): tr for tr in root.find("table", "perlabel").find_all("tr")[1:]}
    assert [m.text() for m in rows["bug"].find_all("span", "metric")] == ["n/a"] * 3


def test_narrow_repeats_warnings_and_escaping(tmp_path: Path) -> None:
    """Agreement and unstable cases show when the suite has repeats; warnings sit in a visible
    box; every string from the run is text."""
    suite = write_suite(tmp_path / "suite", CASES[:8], extra_yaml="repeats: 2")
    run = tmp_path / "run"
    assert run_cli(["run", str(suite), "--model", "builtin/oracle", "--out", str(run)]).code == 0
    rows = [{**r, "repeat": rep, "served_model": "<b>served</b>"}
            for rep in (0, 1) for r in HAND_ROWS[:8]]
    rows[1] = {**rows[1], "label": "feature", "correct": False}  # k2 disagrees with itself
    rows[6] = {**rows[6], "label": "question", "correct": True}  # so does k7
    rep = _with_rows(run, rows)
    assert rep["agreement"]["unstable_cases"] == ["k2", "k7"] and rep["missing_rows"] == 0
    rep["agreement"]["unstable_cases"].append(XSS)
    rep["warnings"] = ["labels inferred <script>alert(1)</script>", "second"]
    NarrowReport.checked(rep, "changed report")  # still a report a run could write
    html = render_html(rep, "narrow")
    root = parse(html)
    assert_self_contained(html, root)
    box = root.find("div", "box")
    assert [li.text() for li in box.find_all("li")] == rep["warnings"]
    agree = tile(root, "cases answered identically")
    # HAND_ROWS' k5 is invalid in both repeats: left out of the agreement, and said
    assert "71.4%" in agree.text() and "5 of 7 cases" in agree.text()
    assert "2 of 16 answers invalid" in agree.text()
    ids = [c.text() for c in root.find_all("ul", "ids")[0].find_all("code")]
    assert ids == ["k2", "k7", XSS]
    assert "&lt;b&gt;served&lt;/b&gt;" in html and "<b>served" not in html
    assert XSS not in html and "<script>alert" not in html


# --------------------------------------------------------------------------- coding runs


TASKS = [
    {"id": "add", "type": "unit", "language": "python", "prompt": "Write add(a, b).",
     "tests": "assert add(2, 3) == 5\n", "solution": "def add(a, b):\n    return a + b\n"},
    {"id": XSS, "type": "unit", "language": "python", "prompt": "Write mul(a, b).",
     "tests": "assert mul(2, 3) == 6\n", "solution": "def mul(a, b):\n    return a * b\n"},
    {"id": "review", "type": "rubric", "prompt": "Write an index for orders by date.",
     "rubric": "3: covering index", "solution": "CREATE INDEX o ON orders (created_at);"},
]


@pytest.fixture(scope="module")
def coding_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two samples per task, run NOT ISOLATED; then sample 1 of ``add`` is made to fail."""
    root = tmp_path_factory.mktemp("coding")
    tasks = root / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    run = root / "run"
    res = run_cli(["run", str(tasks), "--model", "builtin/oracle", "--samples", "2",
                   "--sandbox", "none", "--out", str(run)])
    assert res.code == 0, res.stderr
    grades = run / "grades" / "v1.jsonl"
    rows = [GradeRow.read(json.loads(line), grades).to_json()
            for line in grades.read_text().splitlines()]
    for row in rows:
        if row["id"] == "add" and row["sample"] == 1:
            row.update(passed=False, reason="tests_failed <exit 1>")
    grades.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rep = build_coding_report(run)
    write_html(run, rep, "coding")
    rep["_run"] = str(run)
    return rep


def test_coding_report(coding_report: dict[str, Any]) -> None:
    rep = {k: v for k, v in coding_report.items() if k != "_run"}
    assert rep["not_isolated"] is True and rep["mixed_tasks"] == ["add"]
    html = render_html(rep, "coding")
    assert (Path(coding_report["_run"]) / "report.html").read_text() == html
    root = parse(html)
    assert_self_contained(html, root)
    body = root.find("body")
    first = next(c for c in body.children if isinstance(c, Node))
    assert "banner" in first.classes and first.text().startswith("NOT ISOLATED")
    # suite figures: pass@1 = mean(1/2, 2/2) = 75%; pass^2 = mean(0, 1) = 50%; with bars
    figs = {tr.find("b").text(): tr for tr in root.find("table", "ivs").find_all("tr")
            if tr.find_all("b")}
    assert set(figs) == {"pass@1", "pass@2", "pass^2"}
    assert figs["pass@1"].find("td", "v").text() == "75.0%"
    assert figs["pass^2"].find("td", "v").text() == "50.0%"
    lo, hi = rep["pass_at_1"]["ci95"]
    assert f"[{100 * lo:.1f}%, {100 * hi:.1f}%]" in figs["pass@1"].text()
    assert all(len(tr.find_all("svg")) == 1 for tr in figs.values())
    # per task: k of n as squares, the mixed task highlighted, failures listed and escaped
    rows = {tr.find("code").text(): tr for tr in root.find("table", "tasks").find_all("tr")[1:]}
    assert list(rows) == ["add", XSS, "review"]
    add = rows["add"]
    assert "mixed" in add.classes and "1 of 2" in add.text()
    fills = [r.attrs["fill"] for r in add.find("svg").find_all("rect")]
    assert fills == ["#1a7f37", "#cf222e"]
    assert [li.text() for li in add.find_all("li")] == ["#1: tests_failed <exit 1>"]
    assert "tests_failed &lt;exit 1&gt;" in html
    assert "mixed" not in rows[XSS].classes and "2 of 2" in rows[XSS].text()
    assert "2 answers for grading" in rows["review"].text() and not rows["review"].find_all("svg")
    box = root.find("div", "box")
    assert "1 task with mixed outcomes" in box.text()
    assert box.find("a").attrs["href"] == "#" + (add.attrs["id"] or "")
    # rubric: nothing graded yet, so the mean is n/a, not 0
    rubric = tile(root, "graded")
    assert rubric.find("div", "v").text() == "0 of 2"
    assert tile(root, "mean score (0-3)").find("div", "v").text() == "n/a"
    assert XSS not in html and XSS_ESCAPED in html


def test_coding_without_banner_and_unknown_figures(coding_report: dict[str, Any]) -> None:
    rep = {k: v for k, v in coding_report.items() if k != "_run"}
    rep = CodingReport.checked(  # a report a run could write, with its unknowns unknown
        {**rep, "not_isolated": False, "pass_at_1": None, "pass_all": None, "pass_at_k": {},
         "pass_hat_k": {}, "rubric": {**rep["rubric"], "graded": 2, "ungraded": 0,
                                      "mean_score": 2.5}}, "changed report")
    html = render_html(rep, "coding")
    root = parse(html)
    assert "NOT ISOLATED" not in html and not root.find_all(cls="banner")
    figs = {tr.find("b").text(): tr for tr in root.find("table", "ivs").find_all("tr")
            if tr.find_all("b")}
    assert figs["pass@1"].find("td", "v").text() == "n/a" and not figs["pass@1"].find_all("svg")
    assert tile(root, "mean score (0-3)").find("div", "v").text() == "2.50 / 3"


def test_kind_is_checked(coding_report: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="narrow"):
        render_html(coding_report, "narrow")
    with pytest.raises(ValueError, match="kind must be"):
        render_html(coding_report, "agent")  # type: ignore[arg-type]
