"""The failed samples of a coding run, listed in report.json, report.md and report.html: a real
run in the real sandbox against the scripted HTTP server, where chosen tasks fail an assertion,
time out, write hostile text, send a diff that does not apply, pass only sometimes or get no
answer, and the list is checked task by task against what was scripted; hostile output stays
text in every view (the Markdown rendered by a real CommonMark parser)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import markdown_it
import pytest
from conftest import SECRET, run_cli
from support.scripted_server import ScriptedServer, Status
from test_coding_run import BAD_PY, GOOD_PY, SAME_RESULT, by_task, fenced, unit, write_tasks
from test_html_report import assert_self_contained, parse
from test_wrong_cases import HOSTILE, parse_fragment

from assay.records.report import read_report
from assay.sandbox import bwrap_available

CALC = "def add(a, b):\n    total = a - b\n    return total\n\n\ndef mul(a, b):\n    return a * b\n"
# Candidate code that writes the hostile text to stderr (its backticks spelled \x60, so the
# answer's own code fence stays whole) and carries markup in a comment.
HOSTILE_PY = ("# </code><script>alert(3)</script> | pipe\nimport sys\n"
              f"sys.stderr.write({HOSTILE!r})\nsys.exit(3)\n"
              ).replace("`", "\\x60")
CODING_ORDER = ["py-bad", "py-slow", "py-hostile", "py-fix", "py-flaky", "py-infra"]


@pytest.fixture(scope="module")
def coding_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Two samples of each task in the real sandbox: py-ok always passes (not listed), py-bad
    always fails its first assertion, py-slow always times out, py-hostile exits 3 after
    writing hostile text, py-fix's diff never applies, py-flaky passes once in two, py-infra
    never gets an answer (HTTP 503)."""
    if not bwrap_available():
        pytest.skip("bubblewrap cannot run here")
    root = tmp_path_factory.mktemp("coding-wrong")
    tasks = write_tasks(root / "tasks.jsonl", [
        unit("py-ok", "Write add(a, b)."), unit("py-bad", "Write add(a, b), again."),
        unit("py-slow", "Write add(a, b), slowly."), unit("py-hostile", "Write add(a, b)!"),
        {"id": "py-fix", "type": "diff", "prompt": "Fix add in calc.py.",
         "files": {"calc.py": CALC}, "golden": SAME_RESULT},
        unit("py-flaky", "Write add(a, b), maybe."), unit("py-infra", "Write add(a, b)?")])
    handler = by_task(tasks, {
        "py-ok": fenced(GOOD_PY), "py-bad": fenced(BAD_PY),
        "py-slow": fenced("import time\ntime.sleep(60)\n"), "py-hostile": fenced(HOSTILE_PY),
        "py-fix": fenced(SAME_RESULT.replace("a - b", "a / b"), "diff"),
        "py-flaky": [fenced(GOOD_PY), fenced(BAD_PY)], "py-infra": Status(503)})
    run = root / "run"
    with ScriptedServer(handler) as server:
        env = {"MODEL_BASE_URL": server.base_url, "MODEL_NAME": "test-model",
               "MODEL_API_KEY": SECRET}
        res = run_cli(["run", str(tasks), "--samples", "2", "-j", "1", "--max-tries", "1",
                       "--exec-timeout", "2", "--out", str(run)], env=env)
    assert res.code == 3, res.stderr  # py-infra's infra errors
    yield run


def test_coding_report_json_lists_the_failed_samples(coding_run: Path) -> None:
    rep = json.loads((coding_run / "report.json").read_text())
    assert read_report(coding_run).to_json() == rep
    tasks = {t["id"]: t for t in rep["failed_tasks"]}
    assert [t["id"] for t in rep["failed_tasks"]] == CODING_ORDER  # py-ok passed: not listed
    assert [t["pattern"] for t in rep["failed_tasks"]] == ["always_fails"] * 4 + [
        "flaky", "infra_only"]
    assert {tid: (t["passes"], t["samples"], t["infra_errors"], len(t["failed"]))
            for tid, t in tasks.items()} == {
        "py-bad": (0, 2, 0, 2), "py-slow": (0, 2, 0, 2), "py-hostile": (0, 2, 0, 2),
        "py-fix": (0, 2, 0, 2), "py-flaky": (1, 2, 0, 1), "py-infra": (0, 0, 2, 2)}
    for s in tasks["py-bad"]["failed"]:
        # the program is the code (2 lines), a blank line, then the tests: line 4 fails
        assert s["verdict"] == "failed" and s["reason"] == "nonzero_exit"
        assert s["failing_tests"] == ["line 4: assert add(2, 3) == 5"]
        assert s["explanation"] == "exit code 1: AssertionError" and s["exit_code"] == 1
        assert s["code"] == {"text": BAD_PY, "chars": len(BAD_PY), "cut": False}
        assert s["raw"]["text"] == f"Here is the code:\n```python\n{BAD_PY}```\n"
        assert "AssertionError" in s["stderr_tail"]["text"]
    for s in tasks["py-slow"]["failed"]:
        assert s["reason"] == "timeout" and s["timed_out"] is True
        assert s["explanation"].startswith("timed out after ") and s["exit_code"] is None
    for s in tasks["py-hostile"]["failed"]:
        assert s["exit_code"] == 3 and s["stderr_tail"]["text"] == HOSTILE
        assert s["explanation"] == "exit code 3: " + HOSTILE.splitlines()[-1]
        assert s["code"]["text"] == HOSTILE_PY
    for s in tasks["py-fix"]["failed"]:
        assert s["reason"] == "does_not_apply" and s["detail"]
        assert s["explanation"] == f"the diff does not apply: {s['detail']}"
    (flaky,) = tasks["py-flaky"]["failed"]
    assert flaky["code"]["text"] == BAD_PY and flaky["failing_tests"] == [
        "line 4: assert add(2, 3) == 5"]
    for s in tasks["py-infra"]["failed"]:
        assert s["verdict"] == "infra_error" and s["explanation"].startswith("endpoint error: ")
        assert s["code"]["text"] is None and s["raw"]["text"] is None
    hist = rep["latency_ms"]["histogram"]
    assert hist["n"] == sum(hist["counts"]) == 12  # 7 tasks x 2 samples, less py-infra's two
    assert rep["latency_ms"]["p50"] is not None


def test_coding_md_and_html_list_them_as_text(coding_run: Path) -> None:
    md = (coding_run / "report.md").read_text()
    section = md[md.index("## Failed samples"):]
    headings = [line for line in section.splitlines() if line.startswith("### ")]
    assert [h.split("`")[1] for h in headings] == CODING_ORDER
    assert headings[0] == "### 1. `py-bad` (unit): fails every time, 0 of 2 passed"
    assert "failing: `line 4: assert add(2, 3) == 5`" in section
    rendered = markdown_it.MarkdownIt("commonmark").enable("table").render(md)
    froot = parse_fragment(rendered)
    assert not [n for n in froot.walk() if n.tag in ("script", "img")]
    codes = [n.text_raw() for n in froot.walk() if n.tag == "code"]
    assert codes.count(HOSTILE + "\n") == 2  # py-hostile's two stderr tails, whole
    assert codes.count(HOSTILE_PY) == 2  # and its code graded
    html = (coding_run / "report.html").read_text()
    root = parse(html)
    assert_self_contained(html, root)
    section_html = next(n for n in root.find_all("section")
                        if n.attrs.get("id") == "failed-samples")
    articles = section_html.find_all("article", "case")
    assert [a.attrs["data-task"] for a in articles] == CODING_ORDER
    hostile = articles[2]
    pres = [p.text_raw() for p in hostile.find_all("pre")]
    assert pres == [HOSTILE_PY, HOSTILE] * 2  # code graded, then stderr, per sample
    assert "<script>alert" not in html and "&lt;script&gt;alert(3)&lt;/script&gt;" in html
    links = {tr.find("code").text(): tr.find("a", "details").attrs["href"]
             for tr in root.find("table", "tasks").find_all("tr")[1:] if tr.find_all("a")}
    assert links == {t: "#" + (a.attrs["id"] or "") for t, a in zip(CODING_ORDER, articles,
                                                                     strict=True)}
    bad = articles[0]
    assert [li.text() for li in bad.find_all("ul", "failing")[0].find_all("li")] == [
        "line 4: assert add(2, 3) == 5"]
    svg = root.find("svg", "latency")
    assert sum(int(b.attrs["data-count"] or 0) for b in svg.find_all("rect", "bin")) == 12
    assert "latency p50 / p95 / max" in root.text()
    # the terminal gets the table, not the candidate's code or output
    res = run_cli(["report", str(coding_run)])
    assert res.code == 0 and "py-hostile" in res.stdout and "fails every time" in res.stdout
    assert "sys.stderr" not in res.stdout and "onerror" not in res.stdout


def _joined(tid: str, sample: int, passed: bool | None, reason: str, **over: object) -> dict:
    """A joined answer-and-grade row as ``graded_samples`` gives it to the report."""
    return {"id": tid, "sample": sample, "type": "unit", "raw": "```python\nx\n```",
            "code": "x", "latency_ms": 5.0, "error": None, "passed": passed, "reason": reason,
            "exec": None, **over}


def test_every_kind_of_failure_is_explained_by_hand() -> None:
    """The reasons a real run rarely reaches, from hand-written rows: a grader (sandbox) error,
    a diff whose files differ, the memory limit, a program ended before its tests, pytest's and
    TAP's failing test names; passing and rubric tasks are not listed."""
    from assay.report.coding_cases import error_line, failed_tasks

    pytest_out = "FAILED tests/test_a.py::test_one - assert 1 == 2\nFAILED tests/test_a.py::two\n"
    tap_out = "ok 1 - adds\nnot ok 2 - subtracts\n"
    rows = [
        _joined("ok", 0, True, "ok"),
        _joined("rub", 0, None, "needs_human_grade", type="rubric"),
        _joined("sbx", 0, None, "sandbox_error", error="bubblewrap did not start the command"),
        _joined("dif", 0, False, "different_result", type="diff",
                exec={"differs": ["a.py", "b.py"]}),
        _joined("mem", 0, False, "memory_limit",
                exec={"exit_code": None, "timed_out": False, "wall_seconds": 0.5,
                      "detail": "killed at 256 MiB", "stdout_tail": "", "stderr_tail": ""}),
        _joined("early", 0, False, "tests_not_finished",
                exec={"exit_code": 0, "stdout_tail": "", "stderr_tail": ""}),
        _joined("pyt", 0, False, "nonzero_exit",
                exec={"exit_code": 1, "stdout_tail": pytest_out, "stderr_tail": ""}),
        _joined("tap", 0, False, "nonzero_exit",
                exec={"exit_code": 1, "stdout_tail": tap_out, "stderr_tail": "Node.js v20\n"}),
    ]
    finals = {(r["id"], r["sample"]): r for r in rows}
    ids = [r["id"] for r in rows]
    tasks = {t["id"]: t for t in failed_tasks(finals, ids)}
    # always failing first (file order among equals), the grader error alone last
    assert list(tasks) == ["dif", "mem", "early", "pyt", "tap", "sbx"]
    (s,) = tasks["sbx"]["failed"]
    assert (tasks["sbx"]["pattern"], s["verdict"]) == ("infra_only", "grader_error")
    assert s["explanation"] == "grader error (sandbox_error): bubblewrap did not start the command"
    assert s["exit_code"] is None and s["stderr_tail"]["text"] is None  # unknown, not 0 / ""
    (s,) = tasks["dif"]["failed"]
    assert s["explanation"] == ("the diff applies, but these files differ from the golden "
                                "result: a.py, b.py")
    assert s["detail"] == "files differ: a.py, b.py"
    (s,) = tasks["mem"]["failed"]
    assert s["explanation"] == "hit the memory limit: killed at 256 MiB"
    (s,) = tasks["early"]["failed"]
    assert s["explanation"] == "exited 0 before the last test ran (the program was ended early)"
    (s,) = tasks["pyt"]["failed"]
    assert s["failing_tests"] == ["tests/test_a.py::test_one", "tests/test_a.py::two"]
    assert s["explanation"] == "exit code 1"  # no stderr: nothing more to say
    (s,) = tasks["tap"]["failed"]
    assert s["failing_tests"] == ["subtracts"] and s["explanation"] == "exit code 1"
    node = ("node:assert:399\n    throw err;\n    ^\n\nAssertionError [ERR_ASSERTION]: 5 == 4\n"
            "    at Object.<anonymous> (/work/main.js:5:8)\n\nNode.js v20.11.0\n")
    assert error_line(node) == "AssertionError [ERR_ASSERTION]: 5 == 4"
    assert error_line("one\ntwo\n") == "two" and error_line("") is None
