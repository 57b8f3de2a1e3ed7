"""Verdicts that survive the candidate's own code: each attack from the issue, through the real
sandbox and the real pytest, rejected with the right code; the same attack accepted when the
check is opted out of tamper evidence (so the defence, not luck, is what rejects it); the canary
machinery shown able to fail; the structured report's rules on hand-written reports."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from support.bundles import FIXED_SOURCE, make_bundle

from assay.agents.mutants import BY_NAME, MutantAgent
from assay.grading.verify.canaries import Canary, plant
from assay.grading.verify.integrity import check_integrity
from assay.grading.verify.tamper_scan import scan_source
from assay.grading.verify.test_report import check_verdict, parse_report
from assay.records.artifact import list_tree
from assay.records.trial import Grade
from assay.runner.trial import run_trial
from assay.sandbox import bwrap_available
from assay.suites.bundle import load_bundle

needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")


def _edit_yaml(bundle: Path, old: str, new: str) -> None:
    p = bundle / "task.yaml"
    text = p.read_text()
    assert old in text
    p.write_text(text.replace(old, new))


def _opt_out(bundle: Path) -> None:
    p = bundle / "task.yaml"
    text = p.read_text()
    out = [line.replace("}", ", tamper_evident: false}") if line.strip().startswith(
        ("behavior:", "regression:")) else line for line in text.splitlines()]
    p.write_text("\n".join(out) + "\n")


def _mutant(bundle_dir: Path, name: str, out: Path) -> Grade:
    res = run_trial(load_bundle(bundle_dir), MutantAgent(BY_NAME[name]), out)
    assert res.grade is not None, res.record
    return res.grade


@needs_bwrap
@pytest.mark.parametrize("name", ["fake_summary_exit", "noop_test_calls", "flip_failed_reports"])
def test_in_process_attacks_are_caught_and_work_without_the_defence(
        name: str, tmp_path: Path) -> None:
    guarded = make_bundle(tmp_path / "guarded")
    g = _mutant(guarded, name, tmp_path / "t1")
    assert g.accepted is False
    assert g.failure_code == "test_runner_tampered", g.details.integrity
    assert g.checks["integrity"] == "fail"
    evidence = next(p for p in g.details.integrity.problems
                    if p["code"] == "test_runner_tampered")["evidence"]
    if name == "fake_summary_exit":
        assert any("exited 0" in e for e in evidence), evidence
    else:
        # the grade names the canary that gave it away
        assert any("canary test_" in e and "must fail but was reported passed" in e
                   for e in evidence), evidence
    # the scan lists what the candidate reached for, with file and line, as evidence only
    whats = {(s["file"], s["what"]) for s in g.details.suspicious}
    assert any(f == "src/calc/__init__.py" for f, _ in whats), whats

    open_ = make_bundle(tmp_path / "open")
    _opt_out(open_)
    g2 = _mutant(open_, name, tmp_path / "t2")
    assert set(g2.details.not_tamper_evident) == {"behavior", "regression"}
    if name in ("noop_test_calls", "flip_failed_reports"):
        # without the defence the attack is accepted: this is what the canaries stop
        assert g2.accepted is True, g2.failure_code
    else:
        # the printed summary alone cannot be trusted: only the old summary rule saw through
        # os._exit(0) when no real summary is printed; what matters is the guarded verdict
        assert g2.failure_code != "test_runner_tampered"


@needs_bwrap
def test_shadow_bytecode_is_left_out_and_never_run_even_when_allowed(tmp_path: Path) -> None:
    b = make_bundle(tmp_path / "b")
    g = _mutant(b, "shadow_bytecode", tmp_path / "t1")
    # __pycache__ is a regenerable cache: left out of the artifact and listed as excluded, so
    # the verifier's tree holds the untouched source only and nothing changed
    assert g.failure_code == "no_change"
    excluded = json.loads((tmp_path / "t1" / "artifact.json").read_text())["excluded"]
    rows = {r["path"]: r for r in excluded["paths"]}
    # (and the workspace's own repository: initial_state.git)
    assert set(rows) == {"src/calc/__pycache__", ".git"}, rows
    assert rows["src/calc/__pycache__"]["files"] == 1 and rows["src/calc/__pycache__"]["bytes"]

    allowed = make_bundle(tmp_path / "allowed")
    _edit_yaml(allowed, '  allowed_paths: ["src/**"]',
               '  allowed_paths: ["src/**"]\n  allowed_binaries: ["**/__pycache__/**"]\n'
               '  ignored_paths: [.pytest_cache]')
    g2 = _mutant(allowed, "shadow_bytecode", tmp_path / "t2")
    # the task narrowed the caches and allowed the file through integrity, but the verifier
    # never reads workspace bytecode: the untouched (buggy) source runs and fails honestly
    assert g2.checks["integrity"] == "pass"
    assert g2.failure_code == "behavior_failed"
    assert any(r.startswith("src/calc/__pycache__") for r in
               g2.details.behavior["bytecode_removed"])


@needs_bwrap
def test_canaries_fail_when_the_runner_is_honest_and_the_fix_is_accepted(tmp_path: Path) -> None:
    b = make_bundle(tmp_path / "b")
    cmd = "command:sed -i 's/return a - b/return a + b/' src/calc/__init__.py"
    res = run_trial(load_bundle(b), _parse(cmd), tmp_path / "t")
    g = res.grade
    assert g is not None and g.accepted is True, g and g.failure_code
    beh = g.details.behavior
    te = beh["tamper_evident"]
    assert te["applied"] is True and te["verdict"] == "pass"
    outcomes = {c["must"]: c["outcome"] for c in te["canaries"] if c["kind"] == "random"}
    assert outcomes == {"pass": "passed", "fail": "failed"}
    # one derived copy per hidden test (each with its assertion changed), all failed beside
    # their passing originals; the seed of the draw is recorded
    derived = [c for c in te["canaries"] if c["kind"] == "derived"]
    assert te["canary_counts"] == {"random": 2, "derived": 3}
    assert sorted(c["origin"] for c in derived) == ["test_add_negative", "test_add_small",
                                                    "test_add_zero"]
    assert all((c["outcome"], c["origin_outcome"]) == ("failed", "passed") for c in derived)
    assert isinstance(te["derived_seed"], int) and te["derived_pool"]["kept"] >= 3
    assert te["expected_ids"] == 3 and "solve.patch" in te["expected_ids_source"]
    assert beh["exit_code"] == 1  # the must-fail canaries fail; the report decides, not the exit
    assert beh["counts"]["passed"] == 3 and beh["counts"]["failed"] == 0
    assert beh["stdout_counts"]["passed"] == 4 and beh["stdout_counts"]["failed"] == 4
    assert g.details.suspicious == []
    assert g.details.not_tamper_evident == {}


def _parse(spec: str) -> Any:
    from assay.agents import parse_agent

    return parse_agent(spec)


@needs_bwrap
def test_a_hidden_test_that_needs_the_fix_to_import_still_gets_its_ids(tmp_path: Path) -> None:
    """The hidden test imports a name only the fix adds: on the pristine tree it cannot even be
    collected, so its ids come from the pristine tree plus the reference solution."""
    hidden = "from calc import add, sub\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n"
    patch = (
        "--- a/src/calc/__init__.py\n+++ b/src/calc/__init__.py\n"
        "@@ -8,3 +8,7 @@ def add(a, b):\n \n def mul(a, b):\n     return a * b\n+\n+\n"
        "+def sub(a, b):\n+    return a - b\n")
    b = make_bundle(tmp_path / "b", hidden_tests=hidden, solve_patch=patch)
    good = ("command:printf '\\n\\ndef sub(a, b):\\n    return a - b\\n' >> "
            "src/calc/__init__.py")
    g = run_trial(load_bundle(b), _parse(good), tmp_path / "t1").grade
    assert g is not None and g.accepted is True, g and g.details.behavior
    assert g.details.behavior["tamper_evident"]["expected_ids"] == 1


def test_judge_rules_on_hand_written_reports() -> None:
    start = json.dumps({"event": "start", "schema": "assay.pytest_report/1"})
    finish = json.dumps({"event": "finish", "exitstatus": 1})

    def test(nodeid: str, outcome: str, when: str = "call") -> str:
        return json.dumps({"event": "test", "nodeid": nodeid, "when": when, "outcome": outcome})

    canaries = [Canary("test_ok_x", "tests/t.py", "pass"), Canary("test_no_y", "tests/t.py",
                                                                   "fail")]
    honest = "\n".join([start, test("t.py::test_a", "passed"), test("t.py::test_ok_x", "passed"),
                        test("t.py::test_no_y", "failed"), finish])
    v = check_verdict(honest, exit_code=1, canaries=canaries, expected_ids=["t.py::test_a"],
              summary={"runner": "pytest", "passed": 2, "failed": 1})
    assert v["status"] == "pass" and v["counts"]["passed"] == 1

    flipped = honest.replace('"t.py::test_no_y", "when": "call", "outcome": "failed"',
                              '"t.py::test_no_y", "when": "call", "outcome": "passed"')
    v = check_verdict(flipped, exit_code=0, canaries=canaries, expected_ids=["t.py::test_a"],
              summary=None)
    assert v["status"] == "tampered" and "test_no_y must fail" in v["tampered"][0]

    no_canary = "\n".join([start, test("t.py::test_a", "passed"), finish])
    v = check_verdict(no_canary, exit_code=0, canaries=canaries, expected_ids=None, summary=None)
    assert v["status"] == "tampered" and sum("missing" in t for t in v["tampered"]) == 2

    assert check_verdict(None, exit_code=0, canaries=canaries, expected_ids=None,
                         summary=None)["status"] == "tampered"
    assert check_verdict(None, exit_code=2, canaries=canaries, expected_ids=None,
                         summary=None)["status"] == "fail"
    unfinished = "\n".join([start, test("t.py::test_a", "passed")])
    assert check_verdict(unfinished, exit_code=0, canaries=[], expected_ids=None,
                         summary=None)["status"] == "tampered"

    torn = honest + "\n7 passed in 0.02s"
    v = check_verdict(torn, exit_code=1, canaries=canaries, expected_ids=None, summary=None)
    assert v["status"] == "tampered" and "did not write" in v["tampered"][0]

    v = check_verdict(honest, exit_code=1, canaries=canaries, expected_ids=["t.py::test_a"],
              summary={"runner": "pytest", "passed": 9, "failed": 0})
    assert v["status"] == "tampered" and "printed summary" in v["tampered"][0]

    v = check_verdict(honest, exit_code=1, canaries=canaries,
              expected_ids=["t.py::test_a", "t.py::test_gone"], summary=None)
    assert v["status"] == "fail" and v["failure"] == "tests_missing"
    assert v["missing_ids"] == ["t.py::test_gone"]

    errs = "\n".join([start, test("t.py::test_a", "failed", "setup"), test("t.py::test_ok_x",
                      "passed"), test("t.py::test_no_y", "failed"), finish])
    v = check_verdict(errs, exit_code=1, canaries=canaries, expected_ids=None, summary=None)
    assert v["status"] == "fail" and v["counts"]["errors"] == 1
    rep = parse_report(errs)
    assert rep is not None and rep.outcome("t.py::test_a") == "error"


def test_canaries_are_planted_among_the_tests_and_collected(tmp_path: Path) -> None:
    f = tmp_path / "test_x.py"
    f.write_text("import os\n\n\ndef test_a():\n    assert 1\n\n\n@staticmethod\ndef helper():"
                 "\n    pass\n")
    planted = plant(tmp_path, "tests", ["test_x.py"])
    assert [c.must for c in planted] == ["pass", "fail"]
    text = f.read_text()
    compile(text, "test_x.py", "exec")
    for c in planted:
        assert f"def {c.name}():" in text and c.name.startswith("test_")
    res = subprocess.run(["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", str(f)],
                         capture_output=True, text=True, cwd=tmp_path, check=False,
                         env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert "1 failed, 2 passed" in res.stdout, res.stdout


def test_pyproject_dependency_edit_is_not_test_tooling(tmp_path: Path) -> None:
    base = "[project]\nname = 'x'\ndependencies = []\n\n[tool.pytest.ini_options]\naddopts = '-q'\n"
    before, deps, runner = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for d, text in ((before, base), (deps, base.replace("[]", "['requests']")),
                    (runner, base.replace("'-q'", "'-q --collect-only'"))):
        d.mkdir()
        (d / "pyproject.toml").write_text(text)
    pristine = list_tree(before)
    ok = check_integrity(pristine, list_tree(deps), protected=[], allowed=None)
    assert ok.passed, ok.problems
    bad = check_integrity(pristine, list_tree(runner), protected=[], allowed=None)
    assert bad.failure_code == "test_tooling_changed"


def test_compiled_code_is_refused_where_python_could_import_it(tmp_path: Path) -> None:
    """Issue 32: an extension module or bytecode, whatever its content, is refused; machine
    code under a name the import system never looks for (a compiled program) is part of the
    deliverable."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    elf = b"\x7fELF\x02\x01\x01" + bytes(64)
    (b / "notes.txt").write_bytes(elf)
    (b / "bin").mkdir()
    (b / "bin" / "prog").write_bytes(elf)
    res = check_integrity(list_tree(a), list_tree(b), protected=[], allowed=None)
    assert res.passed, res.problems
    (b / "fast.cpython-311-x86_64-linux-gnu.so").write_bytes(elf)
    (b / "mod.pyc").write_bytes(b"not even bytecode")
    res = check_integrity(list_tree(a), list_tree(b), protected=[], allowed=None)
    assert res.failure_code == "compiled_code_added"
    assert {(p["path"], p["kind"]) for p in res.problems} == {
        ("fast.cpython-311-x86_64-linux-gnu.so", "elf"), ("mod.pyc", ".pyc")}
    allowed = check_integrity(list_tree(a), list_tree(b), protected=[], allowed=None,
                              allowed_binaries=["*.so", "*.pyc"])
    assert allowed.passed


def test_tamper_scan_lists_findings_with_lines() -> None:
    src = "import os\nimport _pytest.python\n\ndef f():\n    os._exit(0)\n# os._exit(1)\n"
    found = scan_source("src/pkg/mod.py", src)
    assert [(f["line"], f["what"]) for f in found] == [(2, "test runner internals"),
                                                       (5, "hard process exit")]
    # pytest's own names inside a test file are ordinary there
    assert scan_source("tests/test_mod.py", "import _pytest\n") == []
    assert FIXED_SOURCE and scan_source("src/calc/__init__.py", FIXED_SOURCE) == []


def test_write_digest_adds_the_missing_line_keeping_comments(tmp_path: Path) -> None:
    b = make_bundle(tmp_path / "b", pin_digest=False)
    p = b / "task.yaml"
    text = p.read_text().replace("  fixture_digest: null\n", "")
    p.write_text(text)
    res = run_cli(["task", "lint", str(b), "--write-digest"])
    assert res.code == 0, res.stderr
    new = p.read_text()
    assert "Traceback" not in res.stderr
    lines = new.splitlines()
    i = lines.index("  repository_commit: null")
    assert lines[i + 1].startswith("  fixture_digest: sha256:")
    assert [ln for ln in lines if "fixture_digest" not in ln] == text.splitlines()
    assert run_cli(["task", "lint", str(b)]).code == 0


@needs_bwrap
def test_trial_run_refuses_a_folder_of_several_bundles(tmp_path: Path) -> None:
    make_bundle(tmp_path / "tasks" / "a", task_id="a-1")
    make_bundle(tmp_path / "tasks" / "b", task_id="b-1")
    res = run_cli(["trial", "run", str(tmp_path / "tasks"), "--agent", "nop", "--out",
                   str(tmp_path / "t")])
    assert res.code == 2
    assert "holds 2 task bundles" in res.stderr and "a-1" not in res.stdout
    assert not (tmp_path / "t").exists()


# --------------------------------------------------------------------- node's test runner

JS_BUGGY = "function add(a, b) {\n  return a - b;\n}\n\nmodule.exports = { add };\n"
JS_HIDDEN = ("const test = require('node:test');\nconst assert = require('node:assert');\n"
             "const { add } = require(process.cwd() + '/src/calc.js');\n\n"
             "test('adds small numbers', () => { assert.strictEqual(add(2, 3), 5); });\n"
             "test('adds negatives', () => { assert.strictEqual(add(-1, -1), -2); });\n")
JS_REGRESSION = ("const test = require('node:test');\nconst assert = require('node:assert');\n"
                 "const { add } = require('../src/calc.js');\n\n"
                 "test('add is a function', () => { assert.strictEqual(typeof add, "
                 "'function'); });\n")
JS_PATCH = ("--- a/src/calc.js\n+++ b/src/calc.js\n@@ -1,3 +1,3 @@\n function add(a, b) {\n"
            "-  return a - b;\n+  return a + b;\n }\n")
JS_TASK = """id: jscalc-001
revision: 1
instruction: instruction.md
initial_state:
  repository: repo
  network_policy: none
  environment: {requires: [node]}
resources: {cpu_cores: 1, memory_limit_mib: 1024, pids: 128}
budget: {agent_wall_seconds: 60, verifier_wall_seconds: 60}
acceptance:
  verifier_revision: v1
  required: [behavior, regression, integrity]
  behavior: {command: "node --test $ASSAY_TESTS/fix.test.js"}
  regression: {command: "node --test test/"}
  protected_paths: ["test/**"]
  allowed_paths: ["src/**"]
"""


def _js_bundle(root: Path) -> Path:
    (root / "repo" / "src").mkdir(parents=True)
    (root / "repo" / "test").mkdir()
    (root / "tests").mkdir()
    (root / "solution").mkdir()
    (root / "repo" / "src" / "calc.js").write_text(JS_BUGGY)
    (root / "repo" / "test" / "calc.test.js").write_text(JS_REGRESSION)
    (root / "tests" / "fix.test.js").write_text(JS_HIDDEN)
    (root / "solution" / "solve.patch").write_text(JS_PATCH)
    (root / "instruction.md").write_text("Make add(a, b) return the sum.\n")
    (root / "task.yaml").write_text(JS_TASK)
    return root


needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")


@needs_bwrap
@needs_node
def test_node_checks_are_tamper_evident(tmp_path: Path) -> None:
    b = _js_bundle(tmp_path / "js")
    fix = "command:sed -i 's/return a - b/return a + b/' src/calc.js"
    g = run_trial(load_bundle(b), _parse(fix), tmp_path / "good").grade
    assert g is not None and g.accepted is True, g and g.details.behavior
    te = g.details.behavior["tamper_evident"]
    assert te["applied"] and te["runner"] == "node" and te["expected_ids"] == 2
    assert {c["must"]: c["outcome"] for c in te["canaries"]} == {"pass": "passed",
                                                                   "fail": "failed"}
    assert g.details.regression["tamper_evident"]["expected_ids"] == 1

    # the candidate's module turns every assertion into a no-op: the must-fail canary passes
    attack = ("command:printf \"require('node:assert').strictEqual = () => {};\\n\" > /tmp/h; "
              "cat src/calc.js >> /tmp/h; cp /tmp/h src/calc.js")
    g = run_trial(load_bundle(b), _parse(attack), tmp_path / "attack").grade
    assert g is not None and g.failure_code == "test_runner_tampered", g.details
    _opt_out(b)
    g = run_trial(load_bundle(b), _parse(attack), tmp_path / "open").grade
    assert g is not None and g.accepted is True  # what the canaries stop


def test_tap_parsing_on_a_hand_written_report() -> None:
    from assay.grading.verify.test_report import parse_tap

    tap = """TAP version 13
# Subtest: math
    # Subtest: adds
    ok 1 - adds
      ---
      duration_ms: 0.5
      ...
    # Subtest: subtracts
    not ok 2 - subtracts
      ---
      error: 'boom'
      ...
    ok 3 - later # SKIP not today
    1..3
ok 1 - math
  ---
  duration_ms: 2
  type: 'suite'
  ...
# Subtest: top
ok 2 - top
1..2
# tests 4
# pass 2
"""
    rep = parse_tap(tap)
    assert rep is not None and rep.finished == 1 and rep.foreign_lines == []
    assert {i: rep.outcome(i) for i in rep.phases} == {
        "math > adds": "passed", "math > subtracts": "failed", "math > later": "skipped",
        "top": "passed"}
    unfinished = parse_tap(tap.split("# tests")[0])
    assert unfinished is not None and unfinished.finished == 0
    assert parse_tap("") is None
    assert parse_tap("7 passed\n") is not None and parse_tap("7 passed\n").foreign_lines == [1]


@needs_bwrap
def test_a_trusted_collection_that_times_out_gives_no_grade(tmp_path: Path) -> None:
    """When the expected tests cannot be learned (the trusted run timed out), the check is a
    grader error, never judged by the weaker rule."""
    slow = "sleep 5; PYTHONPATH=src python3 -m pytest -q -p no:cacheprovider $ASSAY_TESTS"
    b = make_bundle(tmp_path / "b", behavior_cmd=slow, verifier_seconds=1.5)
    fix = "command:sed -i 's/return a - b/return a + b/' src/calc/__init__.py"
    g = run_trial(load_bundle(b), _parse(fix), tmp_path / "t").grade
    assert g is not None and g.accepted is False
    assert g.validity.status == "invalid" and g.failure_code == "verifier_error"
    assert "trusted tree ended in timeout" in g.details.behavior["tamper_evident"]["why"]



@needs_bwrap
def test_a_command_without_a_report_runs_on_the_trusted_tree_once_per_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A check that is not a runner assay reads (a plain script here) runs in full on the
    trusted tree to learn that; a process asks once per bundle and command, not once per
    trial. A command that failed there is asked again; neither reaches the disk cache."""
    from assay.grading.verify.expected_tests import cache_dir, expected_tests
    from assay.suites.bundle import check_starting_tree

    monkeypatch.setenv("ASSAY_CACHE_DIR", str(tmp_path / "cache"))
    bundle = load_bundle(make_bundle(tmp_path / "b"))
    pristine = tmp_path / "pristine"
    bundle.export_starting_tree(pristine)
    digest = check_starting_tree(bundle, pristine).digest
    script = "python3 -c 'print(42)'"
    first = expected_tests(bundle, script, pristine, digest)
    again = expected_tests(bundle, script, pristine, digest)
    assert (first["report"], first["cache"]) == (False, "miss")
    assert (again["report"], again["cache"]) == (False, "hit (this process)")
    failing = [expected_tests(bundle, "false", pristine, digest)["cache"] for _ in range(2)]
    assert failing == ["miss", "miss"]
    assert cache_dir().is_relative_to(tmp_path / "cache")
    assert list((tmp_path / "cache").rglob("*.json")) == []  # nothing of either on disk
