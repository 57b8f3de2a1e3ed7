"""Small coding suites below the run: tasks.jsonl validation, code extraction, the unit and diff
graders against the real sandbox (bubblewrap, python3, node, git apply), and `assay suite check`.

Nothing is mocked: graders run real interpreters in real bubblewrap sandboxes on real files.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli

from assay.grading.answers.diff import grade_diff, normalize_diff
from assay.grading.answers.extract import extract_code
from assay.grading.answers.unit import program_text, run_unit
from assay.runner.coding import CodingParams, grade_answer
from assay.sandbox import bwrap_available
from assay.suites.coding import CodingTask, infer_language, load_coding_suite
from assay.suites.errors import SuiteError

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_TASKS = REPO / "examples" / "coding" / "tasks.jsonl"

needs_sandbox = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")
LIMITS = CodingParams(exec_timeout_s=15, memory_mib=512, pids=64).limits()

PY_UNIT = {"id": "py-add", "type": "unit", "prompt": "Write add(a, b).",
           "tests": "assert add(2, 3) == 5\nassert add(-1, 1) == 0\n",
           "solution": "def add(a, b):\n    return a + b\n"}
JS_TESTS = "const assert = require('assert');\nassert.strictEqual(add(2, 3), 5);\n"
JS_UNIT = {"id": "js-add", "type": "unit", "prompt": "Write add(a, b).", "tests": JS_TESTS,
           "solution": "function add(a, b) { return a + b; }\n"}
CALC = ("def add(a, b):\n    total = a - b\n    return total\n\n\n"
        "def mul(a, b):\n    return a * b\n")
# what `diff -u` writes (three lines of context, the last two of them blank lines)
GOLDEN = ("--- a/calc.py\n+++ b/calc.py\n@@ -1,5 +1,5 @@\n def add(a, b):\n"
          "-    total = a - b\n+    total = a + b\n     return total\n \n \n")
# `diff -U1`: other text, same resulting file
SAME_RESULT = ("--- a/calc.py\n+++ b/calc.py\n@@ -1,3 +1,3 @@\n def add(a, b):\n"
               "-    total = a - b\n+    total = a + b\n     return total\n")
# `diff -U2`: its last line is the context line of a blank line, a single space
SAME_RESULT_U2 = ("--- a/calc.py\n+++ b/calc.py\n@@ -1,4 +1,4 @@\n def add(a, b):\n"
                  "-    total = a - b\n+    total = a + b\n     return total\n \n")
LENIENT = "applied when read by its lines (--recount --unidiff-zero)"
PY_DIFF = {"id": "py-fix", "type": "diff", "prompt": "Fix add in calc.py.",
           "files": {"calc.py": CALC}, "golden": GOLDEN, "solution": GOLDEN}
SQL_RUBRIC = {"id": "sql-review", "type": "rubric", "prompt": "Review this query.",
              "rubric": "3: spots the missing index; 0: nothing useful."}


def squash(text: str) -> str:
    """Output without whitespace: rich wraps long lines wherever the console width says."""
    return "".join(text.split())


def write_tasks(path: Path, lines: list[dict[str, Any] | str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


def problems_of(path: Path) -> list[str]:
    with pytest.raises(SuiteError) as info:
        load_coding_suite(path)
    return [str(p) for p in info.value.problems]


def task(obj: dict[str, Any]) -> CodingTask:
    """A validated task, through the real loader."""
    with tempfile.TemporaryDirectory() as tmp:
        [t] = load_coding_suite(write_tasks(Path(tmp) / "tasks.jsonl", [obj])).tasks
    return t


# --------------------------------------------------------------------------- loading


def test_valid_suite_languages_and_fingerprint(tmp_path: Path) -> None:
    path = write_tasks(tmp_path / "team" / "tasks.jsonl", [
        PY_UNIT,
        JS_UNIT,
        "",  # blank lines are tolerated and do not shift line numbers
        PY_DIFF,
        {**PY_UNIT, "id": "PY-upper"},
        {**PY_UNIT, "id": "task-7", "language": "javascript"},
        {**JS_UNIT, "id": "js-but-python", "language": "python"},  # explicit language wins
        SQL_RUBRIC,
        {**SQL_RUBRIC, "id": "py-style", "system": "You review Python style."},
    ])
    suite = load_coding_suite(path)
    by_id = suite.by_id()
    assert [t.id for t in suite.tasks] == ["py-add", "js-add", "py-fix", "PY-upper", "task-7",
                                           "js-but-python", "sql-review", "py-style"]
    assert {i: t.language for i, t in by_id.items()} == {
        "py-add": "python", "js-add": "javascript", "py-fix": "python", "PY-upper": "python",
        "task-7": "javascript", "js-but-python": "python", "sql-review": None,
        "py-style": "python"}
    assert [t.line for t in suite.tasks] == [1, 2, 4, 5, 6, 7, 8, 9]
    assert by_id["py-fix"].files == {"calc.py": CALC} and by_id["py-fix"].golden == GOLDEN
    assert by_id["sql-review"].rubric == SQL_RUBRIC["rubric"]
    assert by_id["py-style"].system == "You review Python style."
    assert by_id["py-add"].system is None and by_id["py-add"].solution == PY_UNIT["solution"]
    assert suite.name == "team"  # a file named tasks.jsonl takes its folder's name
    assert suite.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    other = write_tasks(tmp_path / "regressions.jsonl", [PY_UNIT])
    assert load_coding_suite(other).name == "regressions"


def test_infer_language() -> None:
    assert infer_language("py-1", None) == "python"
    assert infer_language("js-1", None) == "javascript"
    assert infer_language("sql-1", None) is None
    assert infer_language("js-1", "python") == "python"


def test_example_suite_loads() -> None:
    suite = load_coding_suite(EXAMPLE_TASKS)
    assert {t.type for t in suite.tasks} == {"unit", "diff", "rubric"}
    assert all(t.language is None for t in suite.tasks if t.id.startswith("sql-"))


@pytest.mark.parametrize("line, field, message", [
    ('{"id": "py-x", "type": "unit",', None, "invalid JSON"),
    ('["py-x", "unit"]', None, "expected a JSON object, got list"),
    ({k: v for k, v in PY_UNIT.items() if k != "id"}, "id", "missing"),
    ({**PY_UNIT, "id": "  "}, "id", "must be a non-empty string"),
    ({**PY_UNIT, "id": 7}, "id", "must be a non-empty string"),
    ({k: v for k, v in PY_UNIT.items() if k != "type"}, "type",
     "must be one of unit, diff, rubric, got None"),
    ({**PY_UNIT, "type": "quiz"}, "type", "must be one of unit, diff, rubric, got 'quiz'"),
    ({k: v for k, v in PY_UNIT.items() if k != "prompt"}, "prompt", "missing"),
    ({k: v for k, v in PY_UNIT.items() if k != "tests"}, "tests", "missing"),
    ({**PY_UNIT, "tests": "   "}, "tests", "must be a non-empty string"),
    ({**PY_UNIT, "tests": ["assert 1"]}, "tests", "must be a non-empty string"),
    ({k: v for k, v in PY_DIFF.items() if k != "files"}, "files",
     "must be a non-empty object of path -> file text"),
    ({**PY_DIFF, "files": {}}, "files", "must be a non-empty object of path -> file text"),
    ({**PY_DIFF, "files": {"calc.py": 3}}, "files", "every path and file text must be a string"),
    ({k: v for k, v in PY_DIFF.items() if k != "golden"}, "golden", "missing"),
    ({k: v for k, v in SQL_RUBRIC.items() if k != "rubric"}, "rubric", "missing"),
    ({k: v for k, v in SQL_RUBRIC.items() if k != "prompt"}, "prompt", "missing"),
    ({**PY_UNIT, "language": "rust"}, "language",
     "must be one of python, javascript, got 'rust'"),
    ({**PY_UNIT, "language": "Python"}, "language",
     "must be one of python, javascript, got 'Python'"),
    ({**PY_UNIT, "id": "task-1"}, "language", "missing: set \"language\""),
    ({**PY_DIFF, "id": "fix-1"}, "language", "missing: set \"language\""),
    ({**PY_DIFF, "files": {"../evil.py": "x"}}, "files", "paths must be relative"),
    ({**PY_DIFF, "files": {"/etc/passwd": "x"}}, "files", "paths must be relative"),
    ({**PY_DIFF, "files": {"pkg/../../evil.py": "x"}}, "files", "paths must be relative"),
    ({**PY_DIFF, "files": {"calc.py": CALC, "..": "x"}}, "files", "paths must be relative"),
    ({**PY_UNIT, "solution": 42}, "solution", "must be a string"),
    ({**PY_UNIT, "system": ["be nice"]}, "system", "must be a string"),
], ids=["bad-json", "not-object", "no-id", "blank-id", "int-id", "no-type", "unknown-type",
        "no-prompt", "unit-no-tests", "unit-blank-tests", "unit-list-tests", "diff-no-files",
        "diff-empty-files", "diff-non-string-file", "diff-no-golden", "rubric-no-rubric",
        "rubric-no-prompt", "bad-language", "capitalised-language", "unit-no-language",
        "diff-no-language", "files-parent", "files-absolute", "files-climbing", "files-dotdot",
        "solution-not-string", "system-not-string"])
def test_bad_line_names_file_line_and_field(tmp_path: Path, line: dict[str, Any] | str,
                                            field: str | None, message: str) -> None:
    path = write_tasks(tmp_path / "tasks.jsonl", [PY_UNIT, line, JS_UNIT])
    [problem] = problems_of(path)
    where = f"{path}:2: field '{field}': " if field else f"{path}:2: "
    assert problem.startswith(where + message), problem


def test_rubric_needs_no_language(tmp_path: Path) -> None:
    [t] = load_coding_suite(write_tasks(tmp_path / "tasks.jsonl", [
        {**SQL_RUBRIC, "id": "review-1"}])).tasks
    assert t.language is None and t.type == "rubric"


def test_duplicate_id_names_both_lines(tmp_path: Path) -> None:
    path = write_tasks(tmp_path / "tasks.jsonl", [PY_UNIT, JS_UNIT, {**PY_DIFF, "id": "py-add"}])
    assert problems_of(path) == [
        f"{path}:3: field 'id': duplicate id 'py-add' (first on line 1)"]


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    path = write_tasks(tmp_path / "tasks.jsonl", [
        "nope", PY_UNIT, {**PY_UNIT, "tests": None}, {**JS_UNIT, "type": "quiz"}, PY_UNIT,
        {**PY_DIFF, "id": "diff-1", "files": {"/abs": "x"}}])
    found = problems_of(path)
    assert [p.split(": ", 1)[0].rsplit(":", 1)[1] for p in found] == ["1", "3", "4", "5", "6",
                                                                      "6"]
    assert any("field 'files'" in p for p in found) and any("field 'language'" in p
                                                            for p in found)


def test_missing_or_empty_file(tmp_path: Path) -> None:
    assert "file not found" in problems_of(tmp_path / "nope.jsonl")[0]
    (tmp_path / "empty.jsonl").write_text("\n\n")
    assert "file is empty" in problems_of(tmp_path / "empty.jsonl")[0]


def test_cli_refuses_bad_tasks_file_with_exit_2(tmp_path: Path) -> None:
    path = write_tasks(tmp_path / "tasks.jsonl", [PY_UNIT, {**PY_UNIT, "id": "py-2",
                                                            "tests": None}, PY_UNIT])
    out = tmp_path / "run"
    res = run_cli(["run", str(path), "--model", "m", "--base-url", "http://127.0.0.1:9/v1",
                   "--out", str(out)])
    assert res.code == 2
    said = squash(res.stderr)
    assert squash(f"{path}:2: field 'tests': missing") in said
    assert squash(f"{path}:3: field 'id': duplicate id 'py-add' (first on line 1)") in said
    assert not out.exists()  # nothing was run, no run directory left behind
    res = run_cli(["suite", "check", str(path)])
    assert res.code == 2 and squash(f"{path}:2: field 'tests'") in squash(res.stderr)


def test_language_is_not_inferred_from_words_that_merely_start_with_js(tmp_path: Path) -> None:
    path = write_tasks(tmp_path / "tasks.jsonl", [{**PY_UNIT, "id": "json-roundtrip"}])
    [problem] = problems_of(path)
    assert "field 'language': missing" in problem


@pytest.mark.parametrize("files", [
    {"calc.py": CALC, "": "x"},
    {"calc.py": CALC, ".": "x"},
    {"calc.py": CALC, "calc.py/inner": "x"},
    {"calc.py": CALC, "a\u0000b": "x"},
], ids=["empty", "dot", "file-and-dir", "nul"])
def test_unusable_diff_file_paths_are_refused(tmp_path: Path, files: dict[str, str]) -> None:
    path = write_tasks(tmp_path / "tasks.jsonl", [{**PY_DIFF, "files": files}])
    [problem] = problems_of(path)
    assert f"{path}:1: field 'files'" in problem


# --------------------------------------------------------------------------- extraction


@pytest.mark.parametrize("language, answer, code", [
    ("python", "Here:\n```js\nconsole.log(1)\n```\nand\n```python\nprint(1)\n```\nDone.",
     "print(1)\n"),
    ("python", "```py\nx = 1\n```", "x = 1\n"),
    ("python", "```Python3 title=main.py\nx = 2\n```", "x = 2\n"),
    ("python", "```python\nfirst = 1\n```\n```python\nsecond = 2\n```", "first = 1\n"),
    ("python", "```\nuntagged = 1\n```\n```ruby\nputs 1\n```", "untagged = 1\n"),
    ("python", "```ruby\nputs 1\n```\n```\nuntagged = 1\n```", "puts 1\n"),
    ("python", "def f():\n    return 1", "def f():\n    return 1\n"),
    ("python", "  \n", ""),
    ("python", "", ""),
    ("python", None, ""),
    ("python", "<think>```python\nwrong = 1\n```</think>\n```python\nright = 1\n```",
     "right = 1\n"),
    ("javascript", "```python\nprint(1)\n```\n```javascript\nlet a = 1;\n```", "let a = 1;\n"),
    ("javascript", "```python\nprint(1)\n```\n```js\nlet b = 2;\n```", "let b = 2;\n"),
    ("javascript", "```python\nprint(1)\n```\n```node\nlet c = 3;\n```", "let c = 3;\n"),
    ("javascript", "```python\nprint(1)\n```", "print(1)\n"),
    ("diff", "```python\nx\n```\n```diff\n--- a/x\n+++ b/x\n```", "--- a/x\n+++ b/x\n"),
    (None, "```sql\nSELECT 1;\n```", "SELECT 1;\n"),
], ids=["python-after-js", "py-tag", "tag-with-info", "first-of-two", "no-match-first",
        "no-match-first-tagged", "no-fence", "blank", "empty", "none", "think-dropped",
        "javascript", "js", "node", "js-no-match", "diff", "no-language"])
def test_extract_code(language: str | None, answer: str | None, code: str) -> None:
    assert extract_code(answer, language) == code


def test_extract_code_with_crlf_line_endings() -> None:
    answer = "Here:\r\n```js\r\nlet a;\r\n```\r\n```python\r\nx = 1\r\n```\r\nThat is all.\r\n"
    assert extract_code(answer, "python").replace("\r\n", "\n") == "x = 1\n"


def test_program_text_wraps_javascript_tests_in_a_block() -> None:
    js = task(JS_UNIT)
    assert program_text(js, "function add(a, b) { return a + b; }", "M") == (
        "function add(a, b) { return a + b; }\n{\n" + JS_TESTS + "\n}\nconsole.log('M');\n")
    py = task(PY_UNIT)
    assert program_text(py, "def add(a, b): return a + b", "M") == (
        "def add(a, b): return a + b\n" + PY_UNIT["tests"] + "\nprint('M', flush=True)\n")


# --------------------------------------------------------------------------- unit grading


@needs_sandbox
@pytest.mark.parametrize("obj, code, passed, reason, stderr_has", [
    (PY_UNIT, PY_UNIT["solution"], True, "ok", None),
    (PY_UNIT, "def add(a, b):\n    return a - b\n", False, "nonzero_exit", "AssertionError"),
    (PY_UNIT, "def add(a, b)\n    return a + b\n", False, "nonzero_exit", "SyntaxError"),
    (PY_UNIT, "", False, "nonzero_exit", "NameError"),
    (JS_UNIT, JS_UNIT["solution"], True, "ok", None),
    # the candidate declares the same `const assert` the tests declare: still runs
    (JS_UNIT, "const assert = require('assert');\nfunction add(a, b) { return a + b; }\n",
     True, "ok", None),
    (JS_UNIT, "function add(a, b) { return a * b; }\n", False, "nonzero_exit",
     "AssertionError"),
    (JS_UNIT, "function add(a, b) { return a + b; \n", False, "nonzero_exit", "SyntaxError"),
], ids=["py-pass", "py-wrong", "py-syntax", "py-empty", "js-pass", "js-own-assert", "js-wrong",
        "js-syntax"])
def test_run_unit_in_the_sandbox(tmp_path: Path, obj: dict[str, Any], code: str, passed: bool,
                                 reason: str, stderr_has: str | None) -> None:
    verdict = run_unit(task(obj), code, limits=LIMITS, record_dir=tmp_path / "rec")
    assert (verdict.passed, verdict.reason, verdict.infra_error) == (passed, reason, None), \
        verdict.detail.get("stderr_tail")
    assert verdict.detail["isolation"] == "bwrap"
    assert verdict.detail["argv"][0] == ("python3" if obj["id"].startswith("py") else "node")
    if stderr_has:
        assert stderr_has in verdict.detail["stderr_tail"]
        assert stderr_has in (tmp_path / "rec" / "stderr.log").read_text()
    else:
        assert verdict.detail["exit_code"] == 0


@needs_sandbox
@pytest.mark.parametrize("obj, code", [
    (PY_UNIT, "import sys\nsys.exit(0)\n"),
    (PY_UNIT, "import atexit, os\natexit.register(lambda: os._exit(0))\n"
              "def add(a, b):\n    return 0\n"),
    (JS_UNIT, "process.exit(0);\n"),
    (JS_UNIT, "process.on('exit', () => { process.exitCode = 0; });\n"
              "function add(a, b) { return 0; }\n"),
], ids=["py-sys-exit", "py-atexit", "js-process-exit", "js-on-exit"])
def test_code_that_stops_the_tests_from_running_does_not_pass(obj: dict[str, Any],
                                                               code: str) -> None:
    verdict = run_unit(task(obj), code, limits=LIMITS)
    assert verdict.passed is False


# --------------------------------------------------------------------------- diff grading


def test_normalize_diff_drops_what_carries_no_meaning() -> None:
    noisy = ("\n\ndiff --git a/calc.py b/calc.py\r\nindex 83db48f..bf269f4 100644\r\n"
             "--- a/calc.py\t2024-01-01 00:00:00.000000000 +0000\r\n"
             "+++ b/calc.py\t2024-01-02 09:30:00.000000000 +0000\r\n"
             "@@ -1,5 +1,5 @@ def add(a, b):\r\n def add(a, b):   \r\n-    total = a - b\r\n"
             "+    total = a + b\t\r\n     return total\r\n \r\n \r\n\r\n\r\n")
    meaning = ["--- a/calc.py", "+++ b/calc.py", "@@ -1,5 +1,5 @@", " def add(a, b):",
               "-    total = a - b", "+    total = a + b", "     return total"]
    assert normalize_diff(noisy) == normalize_diff(GOLDEN) == meaning
    assert normalize_diff("@@ -3 +3 @@\n-a\n+b\n") == ["@@ -3,1 +3,1 @@", "-a", "+b"]
    assert normalize_diff("--- a/x\n+++ b/x\n-a\n") != normalize_diff("--- a/y\n+++ b/y\n-a\n")
    assert normalize_diff(SAME_RESULT) != normalize_diff(GOLDEN)


@needs_sandbox
@pytest.mark.parametrize("answer, passed, reason, detail", [
    ("diff --git a/calc.py b/calc.py\nindex 83db48f..bf269f4 100644\n"
     "--- a/calc.py\t2024-01-01 00:00:00.1 +0000\n+++ b/calc.py\t2024-01-02 00:00:00.2 +0000\n"
     "@@ -1,5 +1,5 @@ def add(a, b):\n def add(a, b):  \n-    total = a - b\n"
     "+    total = a + b\n     return total\n \n \n\n", True, "identical",
     {"match": "normalised text"}),
    (SAME_RESULT, True, "same_result", {"match": "identical files after applying"}),
    (SAME_RESULT_U2, True, "same_result", {"match": "identical files after applying"}),
    # `diff -U0`, and a hunk header whose counts a model got wrong: the lines say what to do,
    # and the verdict still rests on the resulting files being identical
    ("--- a/calc.py\n+++ b/calc.py\n@@ -2 +2 @@\n-    total = a - b\n+    total = a + b\n",
     True, "same_result", {"match": "identical files after applying", "applied": LENIENT}),
    (SAME_RESULT.replace("@@ -1,3 +1,3 @@", "@@ -1,4 +1,7 @@"), True, "same_result",
     {"match": "identical files after applying", "applied": LENIENT}),
    ("--- a/calc.py\n+++ b/calc.py\n@@ -2 +2 @@\n-    total = a * b\n+    total = a + b\n",
     False, "does_not_apply", "patch does not apply"),
    (SAME_RESULT.replace("a - b", "a / b"), False, "does_not_apply", "patch does not apply"),
    ("this is not a diff at all\n", False, "does_not_apply", "No valid patches"),
    (SAME_RESULT.replace("calc.py", "other.py"), False, "does_not_apply", "other.py"),
    (SAME_RESULT.replace("a + b", "b + a"), False, "different_result",
     {"differs": ["calc.py"]}),
    (SAME_RESULT + "--- /dev/null\n+++ b/extra.py\n@@ -0,0 +1 @@\n+x = 1\n", False,
     "different_result", {"differs": ["extra.py"]}),
    # a symlink to a host file: compared by its target, never followed
    (SAME_RESULT + "diff --git a/link b/link\nnew file mode 120000\n--- /dev/null\n+++ b/link\n"
     "@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n", False, "different_result",
     {"differs": ["link"]}),
    ("", False, "empty", {}),
    ("  \n\n", False, "empty", {}),
], ids=["identical", "same-result", "same-result-u2", "same-result-u0", "miscounted-hunk",
        "u0-wrong-line", "does-not-apply", "not-a-diff", "wrong-file",
        "different-result", "extra-file", "symlink", "empty", "blank"])
def test_grade_diff(answer: str, passed: bool, reason: str, detail: dict[str, Any] | str) -> None:
    verdict = grade_diff(task(PY_DIFF), answer, limits=LIMITS)
    assert (verdict.passed, verdict.reason, verdict.infra_error) == (passed, reason, None), \
        verdict.detail
    if isinstance(detail, str):
        assert detail in verdict.detail["detail"]
    else:
        assert verdict.detail == detail


@needs_sandbox
def test_unfenced_diff_keeps_its_trailing_blank_context_line() -> None:
    params = CodingParams(exec_timeout_s=15, memory_mib=512, pids=64)
    code, verdict = grade_answer(task(PY_DIFF), SAME_RESULT_U2, params)
    assert code == SAME_RESULT_U2
    assert (verdict.passed, verdict.reason) == (True, "same_result")


@needs_sandbox
def test_diff_that_climbs_out_of_the_task_directory_is_a_recorded_failure() -> None:
    name = f"assay-escape-{uuid.uuid4().hex}.txt"
    escapes = [f"--- /dev/null\n+++ b/../{name}\n@@ -0,0 +1 @@\n+pwned\n",
               f"--- /dev/null\n+++ b/../../../{name}\n@@ -0,0 +1 @@\n+pwned\n"]
    for answer in escapes:
        verdict = grade_diff(task(PY_DIFF), answer, limits=LIMITS)
        assert (verdict.passed, verdict.reason) == (False, "does_not_apply")
        assert "invalid path" in verdict.detail["detail"]
    for root in (Path(tempfile.gettempdir()), Path("/")):
        assert not (root / name).exists()


@needs_sandbox
def test_golden_that_does_not_apply_is_an_infra_error_not_a_verdict() -> None:
    broken = task({**PY_DIFF, "golden": GOLDEN.replace("a - b", "a // b")})
    verdict = grade_diff(broken, SAME_RESULT, limits=LIMITS)
    assert verdict.passed is None and verdict.reason == "golden_does_not_apply"
    assert "golden diff does not apply" in (verdict.infra_error or "")


# --------------------------------------------------------------------------- suite check


@needs_sandbox
def test_suite_check_passes_on_the_example_suite() -> None:
    res = run_cli(["suite", "check", str(EXAMPLE_TASKS)])
    assert res.code == 0, res.stdout
    n = len(load_coding_suite(EXAMPLE_TASKS).tasks)
    assert f"all {n} tasks sound" in res.stdout
    assert "BROKEN" not in res.stdout


@needs_sandbox
def test_suite_check_reports_broken_tasks_with_exit_1(tmp_path: Path) -> None:
    no_solution = {k: v for k, v in PY_UNIT.items() if k != "solution"}
    path = write_tasks(tmp_path / "tasks.jsonl", [
        PY_UNIT,  # line 1: sound
        {**PY_UNIT, "id": "py-wrong", "solution": "def add(a, b):\n    return a * b\n"},
        {**PY_UNIT, "id": "py-vacuous", "tests": "assert True\n"},  # an empty answer passes
        {**JS_UNIT, "id": "js-wrong", "solution": "function add(a, b) { return a - b; }\n"},
        {**PY_DIFF, "id": "py-diff-bad", "solution": SAME_RESULT.replace("a - b", "a / b")},
        {**no_solution, "id": "py-nosol"},
        JS_UNIT,  # line 7: sound
        {**PY_DIFF, "solution": SAME_RESULT},  # line 8: sound, through the applied files
        SQL_RUBRIC,  # line 9: human-graded, nothing to run
    ])
    res = run_cli(["suite", "check", str(path)])
    assert res.code == 1, res.stdout
    said = squash(res.stdout)
    for line in ["py-wrong (line 2): reference solution fails (nonzero_exit)",
                 "py-vacuous (line 3): an empty answer passes (ok)",
                 "js-wrong (line 4): reference solution fails (nonzero_exit)",
                 "py-diff-bad (line 5): reference solution fails (does_not_apply)",
                 "py-nosol (line 6): no reference solution",
                 "5 broken task(s)"]:
        assert squash(line) in said, line
    for sound in ("py-add (line", "js-add (line", "py-fix (line", "sql-review (line"):
        assert squash(sound) not in said
    assert said.count("BROKEN") == 5 and "human-graded" in said


@needs_sandbox
def test_suite_check_reports_a_golden_that_does_not_apply(tmp_path: Path) -> None:
    bad_golden = GOLDEN.replace("a - b", "a // b")
    path = write_tasks(tmp_path / "tasks.jsonl", [
        {**PY_DIFF, "golden": bad_golden, "solution": bad_golden}])
    res = run_cli(["suite", "check", str(path)])
    assert res.code == 1 and "BROKEN" in res.stdout


def test_sandbox_choice_is_checked(tmp_path: Path) -> None:
    path = write_tasks(tmp_path / "tasks.jsonl", [PY_UNIT])
    res = run_cli(["suite", "check", str(path), "--sandbox", "docker"])
    assert res.code == 2 and "--sandbox must be bwrap or none" in res.stderr
