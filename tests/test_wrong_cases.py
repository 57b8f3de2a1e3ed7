"""The wrong answers of a narrow run, listed in report.json, report.md and report.html: a real
run against the scripted HTTP server where chosen cases are answered wrongly, invalidly,
flakily or not at all, and the list is checked case by case against what was scripted (the
coding counterpart is test_coding_failures.py). Hostile model output (backtick runs, pipes,
``</code>``, ``<script>``) must stay text in every view: the Markdown is rendered by a real
CommonMark parser with tables, the HTML parsed back into a tree."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import markdown_it
import pytest
from conftest import SECRET, run_cli, write_suite
from support.scripted_server import Answer, ScriptedServer, Status, by_input
from test_html_report import Node, assert_self_contained, parse

from assay.records.narrow import NarrowRow
from assay.records.report import NarrowReport, read_report
from assay.report.html import render_html
from assay.report.latency import bin_width, histogram
from assay.report.markdown_text import longest_backtick_run, md_block, md_cell, md_code
from assay.report.narrow import build_report
from assay.report.narrow_cases import _id_of, _standing_lines
from assay.report.render_narrow import to_markdown

# A model answer built to break out of every container a report puts it in.
HOSTILE = ("Sure ``` `` ` | pipe </code></pre> a|b\n<script>alert('x')</script>\n"
           "```` end <img src=x onerror=alert(1)>")
HOSTILE_INPUT = "case three ``` | </code> <script>alert(2)</script>"
ODD_ID = "c7 `x`|<i>y</i>"

# c1 right every time (not listed); c2 the same wrong label twice; c3 never valid (hostile text,
# the format retry sent each time); c7 wrong twice with different labels; c4 right once, wrong
# once; c5 right, but once only after the format retry; c6 only HTTP 503 (infra errors).
CASES = [("c1", "case one", "bug"), ("c2", "case two", "feature"),
         ("c3", HOSTILE_INPUT, "bug"), ("c4", "case four", "question"),
         ("c5", "case five", "feature"), ("c6", "case six", "bug"),
         (ODD_ID, "case seven", "bug")]
SCRIPT = {
    "case one": Answer('{"label": "bug"}'),
    "case two": Answer('{"label": "question"}'),
    HOSTILE_INPUT: Answer(HOSTILE),
    "case four": [Answer('{"label": "question"}'), Answer('{"label": "bug"}')],
    "case five": [Answer("I think feature"), Answer('{"label": "feature"}')],
    "case six": Status(503),
    "case seven": [Answer('{"label": "feature"}'), Answer('{"label": "question"}')],
}
# c6 had no answer: its infra errors are counted apart (infra_error_ids), never listed
ORDER = ["c2", "c3", ODD_ID, "c4", "c5"]
PATTERNS = ["consistent_wrong", "consistent_invalid", "always_wrong", "flaky", "format_retry"]


@pytest.fixture(scope="module")
def narrow_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("wrong")
    suite = write_suite(root / "suite", CASES)
    run = root / "run"
    with ScriptedServer(by_input(SCRIPT)) as server:
        env = {"MODEL_BASE_URL": server.base_url, "MODEL_NAME": "test-model",
               "MODEL_API_KEY": SECRET}
        res = run_cli(["run", str(suite), "--repeats", "2", "--max-tries", "1", "-j", "1",
                       "--out", str(run)], env=env)
    assert res.code == 3, res.stderr  # c6's infra errors
    yield run


def _cases(run: Path) -> dict[str, dict[str, Any]]:
    rep = json.loads((run / "report.json").read_text())
    return {c["id"]: c for c in rep["wrong_cases"]}


def test_report_json_lists_exactly_the_cases_gone_wrong(narrow_run: Path) -> None:
    rep = json.loads((narrow_run / "report.json").read_text())
    assert read_report(narrow_run).to_json() == rep  # typed, round-trips
    assert [c["id"] for c in rep["wrong_cases"]] == ORDER  # c1 was right: not listed
    assert [c["pattern"] for c in rep["wrong_cases"]] == PATTERNS
    assert rep["inputs_source"] == "suite/cases.jsonl"
    cases = _cases(narrow_run)
    counts = {cid: (c["right"], c["wrong"], c["invalid"], c["infra_errors"], c["repeats"])
              for cid, c in cases.items()}
    assert counts == {"c2": (0, 2, 0, 0, 2), "c3": (0, 0, 2, 0, 2), ODD_ID: (0, 2, 0, 0, 2),
                      "c4": (1, 1, 0, 0, 2), "c5": (2, 0, 0, 0, 2)}
    assert rep["infra_error_ids"] == ["c6"] and rep["infra_errors"] == 2
    # the inputs and expected labels, whole, from the run's own copy of its cases
    assert {cid: (c["input"]["text"], c["expected"]) for cid, c in cases.items()} == {
        cid: (text, exp) for cid, text, exp in CASES if cid in cases}
    assert cases["c3"]["input"] == {"text": HOSTILE_INPUT, "chars": len(HOSTILE_INPUT),
                                    "cut": False}
    # c2: the same wrong label, its raw text, and the reason
    for a in cases["c2"]["answers"]:
        assert a["verdict"] == "wrong" and a["parsed"] == "question"
        assert a["answers"] == [{"text": '{"label": "question"}', "chars": 21, "cut": False}]
        assert a["reason"] == "wrong label: answered 'question', expected 'feature'"
        assert a["format_retry"] is False and a["latency_ms"] is not None
    # c3: invalid both times, the hostile text kept verbatim, both answers of the retry
    for a in cases["c3"]["answers"]:
        assert a["verdict"] == "invalid" and a["parsed"] is None and a["format_retry"] is True
        assert [t["text"] for t in a["answers"]] == [HOSTILE, HOSTILE]
        assert a["invalid_reason"] == a["first_invalid_reason"] == "no_object"
        assert a["reason"] == ("invalid: no_object, also after the format retry (first "
                               "answer: no_object)")
    assert [a["parsed"] for a in cases[ODD_ID]["answers"]] in (["feature", "question"],
                                                               ["question", "feature"])
    assert sorted(a["verdict"] for a in cases["c4"]["answers"]) == ["right", "wrong"]
    # c5: one repeat needed the format retry (two raw answers), the other did not
    by_retry = sorted(cases["c5"]["answers"], key=lambda a: a["format_retry"])
    assert [a["format_retry"] for a in by_retry] == [False, True]
    assert [t["text"] for t in by_retry[1]["answers"]] == ["I think feature",
                                                           '{"label": "feature"}']
    assert by_retry[1]["reason"] == "right after the format retry (first answer: no_object)"


def test_report_md_lists_them_and_hostile_text_stays_text(narrow_run: Path) -> None:
    md = (narrow_run / "report.md").read_text()
    section = md[md.index("## Wrong and invalid answers"):]
    headings = [line for line in section.splitlines() if line.startswith("### ")]
    assert [h.split(" ", 2)[1] for h in headings] == [f"{i}." for i in range(1, 6)]
    assert headings[0] == "### 1. `c2`: the same wrong label every time"
    assert headings[2].startswith(f"### 3. {md_code(ODD_ID)}:")
    html = markdown_it.MarkdownIt("commonmark").enable("table").render(md)
    root = parse_fragment(html)
    # nothing the model wrote became markup: no script, no img, and its text is in <code>
    assert not [n for n in root.walk() if n.tag in ("script", "img")]
    codes = [n.text_raw() for n in root.walk() if n.tag == "code"]
    assert sum(1 for c in codes if c == HOSTILE + "\n") == 4  # 2 repeats x 2 answers
    assert HOSTILE_INPUT + "\n" in codes
    # the overview table: one row per listed case, six cells each, ids intact despite the pipe
    table = [n for n in root.walk() if n.tag == "table"][-1]  # the section's only table
    rows = [tr for tr in table.walk() if tr.tag == "tr"][1:]
    assert len(rows) == 5 and all(len([c for c in tr.children if isinstance(c, Node)]) == 6
                                  for tr in rows)
    assert [tr.find("code").text_raw() for tr in rows] == ORDER
    assert "1 of 2" in rows[3].text()  # c4 right once


def test_report_html_lists_them_and_hostile_text_stays_text(narrow_run: Path) -> None:
    html = (narrow_run / "report.html").read_text()
    root = parse(html)
    assert_self_contained(html, root)
    section = next(n for n in root.find_all("section") if n.attrs.get("id") == "wrong-answers")
    articles = section.find_all("article", "case")
    assert [a.attrs["data-case"] for a in articles] == ORDER
    assert [a.attrs["data-pattern"] for a in articles] == PATTERNS
    c3 = articles[1]
    pres = [p.text_raw() for p in c3.find_all("pre")]
    assert pres == [HOSTILE_INPUT] + [HOSTILE] * 4  # the input, then 2 repeats x 2 answers
    assert [td.text() for td in c3.find_all("td", "reason")] == [
        "invalid: no_object, also after the format retry (first answer: no_object) "
        f"finish: stop · {a} ms" for a in _latencies(narrow_run, "c3")]
    assert "<script>alert" not in html and "&lt;script&gt;alert(&#39;x&#39;)" in html
    assert "</code></pre> a|b" not in html and "&lt;/code&gt;&lt;/pre&gt; a|b" in html
    overview = section.find("table", "wrong")
    assert [tr.attrs["data-case"] for tr in overview.find("tbody").find_all("tr")] == ORDER


def _latencies(run: Path, cid: str) -> list[str]:
    rows = sorted((json.loads(line) for line in
                   (run / "raw_predictions.jsonl").read_text().splitlines()),
                  key=lambda r: r["repeat"])
    return [f"{r['latency_ms']:,.0f}" for r in rows if r["id"] == cid and not r.get("error")]


def test_latency_svg_has_one_count_per_answer(narrow_run: Path) -> None:
    rep = json.loads((narrow_run / "report.json").read_text())
    hist = rep["latency_ms"]["histogram"]
    assert hist["n"] == sum(hist["counts"]) == 12  # 7 cases x 2 repeats, less c6's two
    root = parse((narrow_run / "report.html").read_text())
    svg = root.find("svg", "latency")
    bins = svg.find_all("rect", "bin")
    assert sum(int(b.attrs["data-count"] or 0) for b in bins) == 12
    assert svg.attrs["data-calls"] == "12"
    assert [m.attrs["data-mark"] for m in svg.find_all("line", "mark")] == ["p50", "p90", "p99"]
    # the existing figures are still there
    assert "latency p50 / p95 / max" in root.text()


def test_the_terminal_shows_the_list_without_the_texts(narrow_run: Path) -> None:
    res = run_cli(["report", str(narrow_run)])
    assert res.code == 0, res.stderr
    table = res.stdout[res.stdout.index("wrong and invalid answers (5 cases"):]
    assert [line.split()[1] for line in table.splitlines()
            if line.startswith("│ c")] == ["c2", "c3", "c7", "c4", "c5"]
    assert ODD_ID in table  # as text: rich did not read [..] or <..> in it
    assert "question, question" in table and "onerror" not in res.stdout


def test_an_old_report_reads_and_draws_with_the_lists_unknown(narrow_run: Path) -> None:
    """A report.json written before the lists existed still validates, and every view says
    n/a for them rather than "no wrong answers"."""
    rep = json.loads((narrow_run / "report.json").read_text())
    old = {k: v for k, v in rep.items() if k not in ("wrong_cases", "inputs_source")}
    old["latency_ms"] = {k: rep["latency_ms"][k] for k in ("p50", "p95", "max")}
    loaded = NarrowReport.load(old, "old report.json")
    assert loaded.wrong_cases is None and loaded.latency_ms.histogram is None
    md = to_markdown(old)
    assert "n/a: this report was written before wrong answers were listed" in md
    root = parse(render_html(old, "narrow"))
    section = next(n for n in root.find_all("section") if n.attrs.get("id") == "wrong-answers")
    assert section.find("p", "na").text().startswith("n/a")
    assert not root.find_all("svg", "latency")


def test_inputs_unknown_without_a_matching_copy(narrow_run: Path, tmp_path: Path) -> None:
    """A run without suite/cases.jsonl (older runs), or with one that is not the file the
    manifest hashed, lists its cases with the input unknown, never a guess."""
    run = tmp_path / "run"
    run.mkdir()
    for name in ("manifest.json", "raw_predictions.jsonl"):
        (run / name).write_bytes((narrow_run / name).read_bytes())
    rep = build_report(run)
    assert rep["inputs_source"] is None
    assert [c["id"] for c in rep["wrong_cases"]] == ORDER
    assert all(c["input"] == {"text": None, "chars": None, "cut": False}
               for c in rep["wrong_cases"])
    assert "Inputs from n/a (this run holds no copy of its cases)" in to_markdown(rep)
    (run / "suite").mkdir()
    (run / "suite" / "cases.jsonl").write_text('{"id": "c2", "input": "changed", '
                                               '"expected": "feature"}\n')
    rep = build_report(run)
    assert rep["inputs_source"] is None and rep["wrong_cases"][0]["input"]["text"] is None


def test_long_texts_are_cut_and_say_so_and_a_clean_run_lists_none(tmp_path: Path) -> None:
    """Hand-written rows on a built-in run: a 5,000-character answer is kept to 2,000 in
    report.json (with its length) and shown to 600 in the views, each saying so; an input is
    kept whole. A run with every answer right first time lists nothing, and says so."""
    long_input = "word " * 300  # 1,500 chars
    suite = write_suite(tmp_path / "suite", [("a", long_input, "bug"), ("b", "short", "bug")])
    run = tmp_path / "run"
    assert run_cli(["run", str(suite), "--model", "builtin/oracle", "--out", str(run)]).code == 0
    rep = json.loads((run / "report.json").read_text())
    assert rep["wrong_cases"] == [] and rep["inputs_source"] == "suite/cases.jsonl"
    assert "None: every answer was right the first time." in (run / "report.md").read_text()
    assert "None: every answer was right the first time." in (run / "report.html").read_text()
    long_answer = "|`" * 2500  # 5,000 chars of pipes and backticks
    rows = [NarrowRow(id="a", repeat=0, expected="bug", raw=long_answer, raws=[long_answer],
                      label="", correct=False, attempts=1, invalid_reason="no_object",
                      latency_ms=10.0, finish_reason="length").to_row(),
            NarrowRow(id="b", repeat=0, expected="bug", raw='{"label": "bug"}',
                      raws=['{"label": "bug"}'], label="bug", correct=True, attempts=1,
                      latency_ms=20.0).to_row()]
    (run / "raw_predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert run_cli(["report", str(run)]).code == 0
    rep = json.loads((run / "report.json").read_text())
    (case,) = rep["wrong_cases"]
    assert case["id"] == "a" and case["pattern"] == "consistent_invalid"
    assert case["input"] == {"text": long_input, "chars": 1500, "cut": False}
    (answer,) = case["answers"][0]["answers"]
    assert answer == {"text": long_answer[:2000], "chars": 5000, "cut": True}
    assert case["answers"][0]["reason"] == ("invalid: no_object; the answer was cut off at "
                                            "max_tokens")
    md = (run / "report.md").read_text()
    assert "Input (first 600 of 1,500 chars):" in md
    assert "Repeat 0, answer 1 of 1 (first 600 of 5,000 chars):" in md
    rendered = markdown_it.MarkdownIt("commonmark").enable("table").render(md)
    codes = [n.text_raw() for n in parse_fragment(rendered).walk() if n.tag == "code"]
    assert long_answer[:600] + "\n" in codes
    root = parse((run / "report.html").read_text())
    (article,) = root.find_all("article", "case")
    assert [p.text_raw() for p in article.find_all("pre")] == [long_input[:600],
                                                              long_answer[:600]]
    assert "first 600 of 5,000 chars" in article.text()
    # 10 and 20 ms: span 10 / 30 bins = 0.33 -> round width 0.5; (20 - 10) / 0.5 + 1 = 21 bins
    hist = rep["latency_ms"]["histogram"]
    assert hist == {"start_ms": 10.0, "bin_ms": 0.5, "counts": [1] + [0] * 19 + [1], "n": 2}


def test_the_second_pass_reads_any_key_order_and_skips_a_torn_tail(narrow_run: Path,
                                                                    tmp_path: Path) -> None:
    """The answer texts are read in a second pass that skips other cases by their id alone: a
    row written with its keys in another order is still found, and a torn last line of a
    listed case is skipped, as the figures' pass skips it."""
    run = tmp_path / "run"
    (run / "suite").mkdir(parents=True)
    for name in ("manifest.json", "suite/cases.jsonl"):
        (run / name).write_bytes((narrow_run / name).read_bytes())
    rows = [json.loads(line) for line in (narrow_run / "raw_predictions.jsonl").read_text()
            .splitlines()]
    lines = [json.dumps(dict(reversed(r.items())) if r["id"] == "c2" else r) for r in rows]
    torn = '{"id": "c2", "repeat": 1, "expected": "feature", "raw": "torn'
    (run / "raw_predictions.jsonl").write_text("\n".join(lines) + "\n" + torn)
    rep = build_report(run)
    assert rep["torn_tail_bytes"] == len(torn)
    assert rep["wrong_cases"] == json.loads((narrow_run / "report.json").read_text())[
        "wrong_cases"]


def test_the_id_fast_path_reads_the_runners_rows_and_agrees_with_a_whole_parse(
        narrow_run: Path, tmp_path: Path) -> None:
    """The second pass skips other cases' rows on their id alone (``_id_of``). It must apply
    to the rows the runner really writes (compact JSON, ``{"id":"c1",...``: the fast path
    once looked for ``{"id": `` and never applied), and find exactly what parsing every line
    finds, also for lines where reading the id alone would be wrong: a second ``id`` key
    spelled with an escape (a whole parse keeps the last), an ``id`` value elsewhere, a
    nested ``id``, another key order, a spaced form, a torn tail, a line that is not JSON."""
    written = (narrow_run / "raw_predictions.jsonl").read_bytes().splitlines(keepends=True)
    rows = [json.loads(line) for line in written]
    assert all(line.startswith(b'{"id":"') for line in written)
    assert [_id_of(line) for line in written] == [r["id"] for r in rows]  # the fast path

    c1, c2 = (next(r for r in rows if r["id"] == cid) for cid in ("c1", "c2"))
    tricky = [
        json.dumps(dict(reversed(c2.items()))),
        json.dumps({**c2, "repeat": 1}),
        # reads as c1 from its start, but a whole parse says c2 (the later key wins)
        json.dumps(c1, separators=(",", ":"))[:-1] + ',"\\u0069d":"c2"}',
        json.dumps({**c1, "label": "id"}, separators=(",", ":")),
        json.dumps({**c1, "usage": {"id": "c2"}}, separators=(",", ":")),
        '{"id":"c1", not json at all',
    ]
    # (the last one's id is read, but whichever way it is skipped: c1 is not listed here, and
    # a listed id would send it to the whole parse, which refuses it)
    assert [_id_of(t.encode()) for t in tricky] == [None, "c2", None, None, None, "c1"]
    path = tmp_path / "raw_predictions.jsonl"
    path.write_bytes(b"".join(written) + "\n".join(tricky).encode() + b"\n"
                     + b'{"id":"c2","repeat":0,"raw":"tor')
    ids = {r["id"] for r in rows} - {"c1", "c5"}
    fast = _standing_lines(path, ids)
    assert fast == _standing_lines(path, ids, id_of=lambda _line: None)
    # c2's repeat 0 is the duplicate-key line (the last row of that key), its repeat 1 the
    # spaced one; the cases not asked for (c1, c5) and the torn tail are in neither
    at = [len(b"".join(written)) + sum(len(t) + 1 for t in tricky[:i]) for i in range(3)]
    assert fast["c2"] == [at[2], at[1]]
    assert set(fast) == ids


def test_long_lists_are_capped_in_the_views_and_whole_in_the_json(narrow_run: Path) -> None:
    rep = json.loads((narrow_run / "report.json").read_text())
    first = rep["wrong_cases"][0]
    rep["wrong_cases"] = [{**first, "id": f"w{i:03d}"} for i in range(250)]
    NarrowReport.checked(rep, "a report with 250 wrong cases")
    md = to_markdown(rep)
    assert sum(1 for line in md.splitlines() if line.startswith("| ") and "`w" in line) == 200
    assert "… and 50 more cases in report.json." in md
    assert sum(1 for line in md.splitlines() if line.startswith("### ")) == 50
    assert "… and 200 more cases in detail in report.json." in md
    root = parse(render_html(rep, "narrow"))
    section = next(n for n in root.find_all("section") if n.attrs.get("id") == "wrong-answers")
    assert len(section.find("table", "wrong").find("tbody").find_all("tr")) == 200
    assert len(section.find_all("article", "case")) == 50
    assert "… and 50 more cases (all 250 in report.json)." in section.text()


# --------------------------------------------------------------------------- the histogram


def test_histogram_bins_by_hand() -> None:
    assert histogram([]) is None
    assert histogram([7.0]) == {"start_ms": 7.0, "bin_ms": 1.0, "counts": [1], "n": 1}
    assert histogram([0.0, 0.0]) == {"start_ms": 0.0, "bin_ms": 1.0, "counts": [2], "n": 2}
    # span 290 / 30 = 9.7 -> width 10; from 10: (300 - 10) / 10 + 1 = 30 bins; 20 opens bin 1,
    # and the slowest value counts in the last bin
    h = histogram([10.0, 20.0, 25.0, 300.0])
    assert h is not None and (h["start_ms"], h["bin_ms"], len(h["counts"])) == (10.0, 10.0, 30)
    assert h["counts"][:3] == [1, 2, 0] and h["counts"][-1] == 1 and sum(h["counts"]) == 4
    # span 0.2 / 30 -> width 0.01 (decimal edges: 0.3 lands in the bin 0.3 opens)
    h = histogram([0.1, 0.25, 0.3])
    assert h is not None and (h["start_ms"], h["bin_ms"], len(h["counts"])) == (0.1, 0.01, 21)
    assert [i for i, c in enumerate(h["counts"]) if c] == [0, 15, 20]
    assert bin_width(0) == 1.0 and bin_width(29) == 1.0 and bin_width(31) == 2.0
    # 60,000 / 30 = 2,000 exactly, but the slowest value would open a 31st bin: 5,000
    assert bin_width(59_999) == 2000.0 and bin_width(60_000) == 5000.0


# --------------------------------------------------------------------------- Markdown text


@pytest.mark.parametrize("text", ["plain", "a ` b", "``x``", "`", "a | b", "ends with `",
                                  " spaced ", "x\ny\r\nz", "a\\|b", "</code><script>x</script>"])
def test_md_code_and_cell_cannot_be_broken_out_of(text: str) -> None:
    md = markdown_it.MarkdownIt("commonmark").enable("table")
    flat = text.replace("\r\n", "\n").replace("\n", " ⏎ ")
    inline = md.render(f"before {md_code(text)} after")
    root = parse_fragment(inline)
    (code,) = [n for n in root.walk() if n.tag == "code"]
    assert code.text_raw() == flat  # exactly the text, spaces and backticks included
    table = md.render(f"| a | b |\n|---|---|\n| {md_cell(text)} | after |\n")
    cells = [n for n in parse_fragment(table).walk() if n.tag == "td"]
    assert len(cells) == 2 and cells[1].text_raw() == "after"
    assert "<script>" not in inline and "<script>" not in table
    block = md.render("\n".join(md_block(text + "\n```\n````")) + "\nafter\n")
    (pre,) = [n for n in parse_fragment(block).walk() if n.tag == "pre"]
    assert pre.text_raw().startswith(text.replace("\r\n", "\n").split("\n")[0])
    assert pre.text_raw().endswith("```\n````\n") and "<p>after</p>" in block


def test_longest_backtick_run() -> None:
    assert longest_backtick_run("a `` b ````` c `") == 5 and longest_backtick_run("") == 0


# --------------------------------------------------------------------------- helpers


def parse_fragment(html: str) -> Node:
    """An HTML fragment (rendered Markdown) as a tree whose text keeps its whitespace."""
    from html.parser import HTMLParser

    class P(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.root = Node("#root", {})
            self.stack = [self.root]

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            node = Node(tag, dict(attrs))
            self.stack[-1].children.append(node)
            if tag not in ("br", "hr", "img", "input", "meta", "link"):
                self.stack.append(node)

        def handle_endtag(self, tag: str) -> None:
            while len(self.stack) > 1:
                if self.stack.pop().tag == tag:
                    break

        def handle_data(self, data: str) -> None:
            self.stack[-1].children.append(data)

    p = P()
    p.feed(html)
    p.close()
    return p.root



def test_the_command_line_reports_a_torn_last_line(narrow_run: Path, tmp_path: Path) -> None:
    """``assay report`` over rows whose last line was cut short: the line is left out of the
    figures and said on stderr, file and line, as ``assay: warning:`` (never Python's warning
    format)."""
    import os
    import subprocess
    import sys

    run = tmp_path / "run"
    (run / "suite").mkdir(parents=True)
    for name in ("manifest.json", "suite/cases.jsonl", "raw_predictions.jsonl"):
        (run / name).write_bytes((narrow_run / name).read_bytes())
    lines = (run / "raw_predictions.jsonl").read_bytes().count(b"\n")
    torn = b'{"id": "c2", "repeat": 1, "raw": "tor'
    with open(run / "raw_predictions.jsonl", "ab") as fh:
        fh.write(torn)
    res = subprocess.run([sys.executable, "-m", "assay", "report", str(run)],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "NO_COLOR": "1", "COLUMNS": "400"})
    said = " ".join(res.stderr.split())
    assert f"assay: warning: {run / 'raw_predictions.jsonl'}:{lines + 1}: the last line" in said
    assert "cut short" in said and "TornRowWarning" not in res.stderr
    assert json.loads((run / "report.json").read_text())["torn_tail_bytes"] == len(torn)


def test_a_case_answered_once_is_not_wrong_every_time() -> None:
    """"the same wrong label every time" claims repeats; a case answered once says so."""
    from assay.report.narrow_cases import pattern_words

    once = {"right": 0, "wrong": 1, "invalid": 0, "infra_errors": 1}
    twice = {"right": 0, "wrong": 2, "invalid": 0}
    assert pattern_words("consistent_wrong", True, once) == "a wrong label (answered once)"
    assert pattern_words("consistent_wrong", True, twice) == "the same wrong label every time"
    assert pattern_words("consistent_invalid", False, {"invalid": 1}) == (
        "no valid answer (answered once)")
