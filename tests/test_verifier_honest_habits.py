"""Issue 32: integrity decided by what can run. What real agents and developers leave behind, done
by a ``command:`` agent that also applies the real fix, is accepted; canaries belong to the
verifier and are never charged to a test the agent wrote; every display of a check leads with
the task's real tests and puts the canaries on one line apart (issue 34, point 1).

Real parts: the fixture bundle (``support/bundles.py``), the real sandbox, the real pytest and
the real verifier. The pure parts (the verdict's split, the summary's words) are tested on
hand-written reports first. No full form: every scenario here runs in full.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
from support.bundles import make_bundle

from assay.agents import parse_agent
from assay.grading.verify.canaries import Canary
from assay.grading.verify.integrity import check_integrity
from assay.grading.verify.shadowing import shadow_names, top_level_module
from assay.grading.verify.test_report import check_verdict
from assay.records.artifact import MAX_CONFIG_BYTES, list_tree
from assay.records.trial import Grade
from assay.report.check_summary import canaries_line, grade_check_lines, summarize
from assay.report.trial_view import load_trial_view
from assay.runner.trial import run_trial
from assay.runner.workspace_git import DATE, make_repository
from assay.sandbox import bwrap_available
from assay.suites.bundle import load_bundle
from assay.suites.experiment import task_fingerprint

needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")

FIX = "sed -i 's/return a - b/return a + b/' src/calc/__init__.py"


def _report(*events: dict[str, Any]) -> str:
    lines = [{"event": "start", "schema": "assay.pytest_report/1"}, *events,
             {"event": "finish", "exitstatus": 1}]
    return "\n".join(json.dumps(e) for e in lines) + "\n"


def _test(nodeid: str, outcome: str, message: str | None = None) -> dict[str, Any]:
    ev: dict[str, Any] = {"event": "test", "nodeid": nodeid, "when": "call",
                          "outcome": outcome}
    if message is not None:
        ev["message"] = message
    return ev


# ------------------------------------------------------------------ the verdict's split (pure)

def test_a_planted_canary_is_never_a_real_test_and_the_first_real_failure_is_the_evidence(
        ) -> None:
    judged = [Canary("test_keeps_order_ab12", "tests/test_fix.py", "fail"),
              Canary("test_keeps_empty_cd34", "tests/test_fix.py", "pass")]
    # planted in a file the trusted run never collected: not judged, yet still no real test
    stray = Canary("test_large_mixed_ef56", "work/tests/test_mine.py", "fail")
    text = _report(
        _test("test_fix.py::test_keeps_order_ab12", "failed", "assert 51234 == 51300"),
        _test("test_fix.py::test_add_small", "failed", "assert -1 == 5"),
        _test("test_fix.py::test_keeps_empty_cd34", "passed"),
        _test("tests/test_mine.py::test_large_mixed_ef56", "failed", "assert 1 == 2"),
        _test("test_fix.py::test_add_zero", "passed"))
    out = check_verdict(text, exit_code=1, canaries=judged, expected_ids=None, summary=None,
                        planted=[*judged, stray])
    assert out["failed_ids"] == ["test_fix.py::test_add_small"]
    assert out["passed_ids"] == ["test_fix.py::test_add_zero"]
    assert out["first_failure"] == {"id": "test_fix.py::test_add_small",
                                    "message": "assert -1 == 5"}
    assert out["counts"]["failed"] == 1 and out["counts"]["passed"] == 1
    assert out["canary_summary"] == {"planted": 2, "must_fail": 1, "failed_as_they_must": 1,
                                     "must_pass": 1, "passed_as_they_must": 1, "moot": 0}
    assert out["status"] == "fail" and out["tampered"] == []


def test_the_summary_leads_with_the_real_tests_and_counts_the_canaries_apart() -> None:
    record = {"counts": {"passed": 11, "failed": 1, "errors": 0, "skipped": 0},
              "tamper_evident": {
                  "applied": True, "failed_ids": ["/assay/tests/test_fix.py::test_add_small"],
                  "first_failure": {"id": "/assay/tests/test_fix.py::test_add_small",
                                    "message": "assert -1 == 5"},
                  "canary_summary": {"planted": 12, "must_fail": 12, "failed_as_they_must": 12,
                                     "must_pass": 0, "passed_as_they_must": 0}}}
    s = summarize(record)
    assert s.tests == "task tests: 11 passed, 1 failed (failed: tests/test_fix.py::test_add_small)"
    assert s.failure == "first failure: tests/test_fix.py::test_add_small: assert -1 == 5"
    assert s.canaries == "12 canaries planted, all failed as they must"
    record["tamper_evident"]["canary_summary"]["failed_as_they_must"] = 10
    assert canaries_line(record) == "12 canaries planted: 10 of 12 failed as they must"
    record["tamper_evident"]["canary_summary"].update(must_fail=10, moot=2)
    assert canaries_line(record) == ("12 canaries planted, all failed as they must (2 copies "
                                     "of tests that failed anyway prove nothing here)")
    # a check that was not tamper-evident: the printed counts, said so, and no canary line
    plain = summarize({"counts": {"passed": 3, "failed": 0}, "tamper_evident": {
        "applied": False}})
    assert plain.canaries is None and plain.tests is not None
    assert "not tamper-evident" in plain.tests


# ------------------------------------------------------------------ real trials

def _trial(bundle_dir: Path, agent: str, out: Path) -> Grade:
    res = run_trial(load_bundle(bundle_dir), parse_agent(agent), out)
    assert res.grade is not None, res.record
    return res.grade


@needs_bwrap
def test_a_test_added_under_the_protected_folder_is_rejected_for_that_alone(
        tmp_path: Path) -> None:
    """The agent fixes the bug and adds a regression test of its own under the protected
    ``tests/`` (a good habit the task's rule forbids): rejected as ``protected_file_changed``,
    and no canary is planted in its file or counted among the check's failures."""
    bundle = make_bundle(tmp_path / "b", allowed=False)
    spec = bundle / "task.yaml"  # and a plain folder, not a repository (initial_state.git)
    spec.write_text(spec.read_text().replace("  network_policy: none",
                                             "  network_policy: none\n  git: false"))
    mine = ("from calc import add\\n\\n\\ndef test_add_mine():\\n    assert add(4, 4) == 8\\n")
    agent = (f"command:{FIX} && printf '{mine}' > tests/test_mine.py"
             " && cat \"$ASSAY_INSTRUCTION_FILE\" > told.md && test ! -e .git")
    grade = _trial(bundle, agent, tmp_path / "t")
    assert grade.failure_code == "protected_file_changed", grade.failure_code
    assert grade.checks["behavior"] == "pass" and grade.checks["regression"] == "pass"
    reg = grade.details.regression or {}
    tamper = reg["tamper_evident"]
    assert tamper["failed_ids"] == []
    assert any(i.endswith("tests/test_mine.py::test_add_mine") for i in tamper["passed_ids"])
    assert not any(c["file"] == "work/tests/test_mine.py" for c in tamper["canaries"])
    # pytest's own output: the task's canaries fail in the task's file, none in the agent's
    assert "FAILED tests/test_calc.py::" in reg["stdout_tail"]
    assert "FAILED tests/test_mine.py" not in reg["stdout_tail"], reg["stdout_tail"]
    assert tamper["canary_summary"]["planted"] >= 2
    lines = grade_check_lines(json.loads(grade.model_dump_json()))
    assert lines["regression"][0].startswith("task tests: 3 passed"), lines
    assert "as they must" in lines["regression"][-1]
    # trial show / the trial page: the cause in words, the checks' real tests first
    view = load_trial_view(next((tmp_path / "t").rglob("trial.json")).parent)
    integ = next(c for c in view.checks if c.name == "integrity")
    assert "protected file (the task's own tests) was changed: tests/test_mine.py" in \
        integ.output_tail
    reg_view = next(c for c in view.checks if c.name == "regression")
    assert reg_view.summary[0].startswith("task tests: 3 passed")
    assert "canar" in reg_view.summary[-1]
    # the agent was told the rules, and what it was told is recorded with the trial
    adir = next((tmp_path / "t").rglob("trial.json")).parent
    told = (adir / "instruction.md").read_text()
    assert told.startswith("# Fix `calc.add`") and "Protected paths: `tests/**`" in told
    assert "Hidden tests" in told and "Allowed paths" not in told  # the bundle sets none
    frozen = json.loads((adir / "artifact.json").read_text())["entries"]
    seen = next(e for e in frozen if e["path"] == "told.md")
    assert seen["sha256"] == hashlib.sha256(told.encode()).hexdigest()
    assert view.instruction == told
    assert "workspace_git" not in json.loads((adir / "trial.json").read_text())


def test_the_rules_section_names_the_paths_and_a_task_can_opt_out(tmp_path: Path) -> None:
    bundle = load_bundle(make_bundle(tmp_path / "b"))
    text = bundle.agent_instruction()
    assert text.startswith(bundle.instruction_path.read_text().rstrip("\n"))
    assert "Protected paths: `tests/**`" in text and "Allowed paths: `src/**`" in text
    told = task_fingerprint(bundle)["instruction_sha256"]
    spec = (tmp_path / "b" / "task.yaml")
    spec.write_text(spec.read_text().replace("  protected_paths:", "  tell_agent: false\n"
                                             "  protected_paths:"))
    quiet = load_bundle(tmp_path / "b")
    assert quiet.agent_instruction() == quiet.instruction_path.read_text()
    assert task_fingerprint(quiet)["instruction_sha256"] != told


HABITS = " && ".join([
    # a virtual environment in the workspace (its interpreter links leave the workspace),
    # used to run the tests
    "python3 -m venv --without-pip --system-site-packages .venv",
    "PYTHONPATH=src .venv/bin/python -m pytest -q -p no:cacheprovider tests",
    # what `pip install -e .` leaves (setuptools' metadata folder; written by hand: the
    # sandbox has no network to install from)
    "mkdir -p src/calc.egg-info",
    "printf 'Metadata-Version: 2.1\\nName: calc\\nVersion: 0.1\\n' > src/calc.egg-info/PKG-INFO",
    "printf 'calc\\n' > src/calc.egg-info/top_level.txt",
    # build and node debris, coverage data, editor and OS files
    "mkdir -p build/lib/calc dist node_modules/left-pad htmlcov",
    "cp src/calc/__init__.py build/lib/calc/__init__.py",
    "printf 'x' > dist/calc-0.1.tar.gz",
    "printf 'module.exports = 1\\n' > node_modules/left-pad/index.js",
    "ln -s /usr/bin/env node_modules/.bin-env",
    "printf 'cov' > .coverage && printf '<html>' > htmlcov/index.html",
    "printf 'swap' > src/calc/.__init__.py.swp && printf 'ds' > .DS_Store",
    # git, as agents review and submit their work: the workspace is a repository
    "git status --short > /dev/null && git log --oneline > git-log.txt",
    # a reproduction script and a regression test of its own at the root
    "printf 'from calc import add\\nprint(add(2, 3))\\n' > test.py",
    "printf 'from calc import add\\n\\ndef test_mine():\\n    assert add(1, 1) == 2\\n' "
    "> test_mine.py",
    # the fix, with a note beside it: the line grows, so the bytecode the test run above
    # cached is stale by its size too (the same-size FIX, made within the second that cache
    # was written, left CPython trusting it: the run printed -1, once in three runs)
    "sed -i 's/return a - b/return a + b  # was a - b/' src/calc/__init__.py",
    # and runs its code to see the fix work (more bytecode caches beside the source)
    "PYTHONPATH=src .venv/bin/python test.py > run.txt",
    "git diff --stat > /dev/null && git add -A && git commit -q -m fix",
    "git diff --cached HEAD~1 --stat > /dev/null",
])


@needs_bwrap
def test_a_venv_metadata_and_build_debris_beside_the_real_fix_are_accepted(
        tmp_path: Path) -> None:
    """The habits of real developers, in one trial: each is inert, left out of the artifact
    and listed under ``excluded`` with the rule that matched, never held against the agent
    (before: ``link_outside_workspace`` for the venv's interpreter link,
    ``test_tooling_changed`` for the metadata folder)."""
    bundle = make_bundle(tmp_path / "b", allowed=False)
    grade = _trial(bundle, f"command:{HABITS}", tmp_path / "t")
    assert grade.accepted, (grade.failure_code, grade.details.integrity)
    adir = next((tmp_path / "t").rglob("artifact.json")).parent
    excluded = json.loads((adir / "artifact.json").read_text())["excluded"]
    rules = {r["path"]: r["rule"] for r in excluded["paths"]}
    assert rules[".venv"] == "a folder holding pyvenv.cfg"
    assert rules["src/calc.egg-info"] == "*.egg-info"
    assert rules["build"] == "build/**" and rules["dist"] == "dist/**"
    assert rules["node_modules"] == "node_modules" and rules["htmlcov"] == "htmlcov"
    assert {".coverage", ".DS_Store", "src/calc/.__init__.py.swp"} <= set(rules)
    assert excluded["files"] >= 10 and excluded["bytes"] > 0
    entries = {e["path"] for e in json.loads((adir / "artifact.json").read_text())["entries"]}
    assert not any(p.startswith((".venv", "build", "node_modules")) for p in entries)
    assert "src/calc/__init__.py" in entries
    assert {"test.py", "test_mine.py"} <= entries  # the deliverable keeps them
    # the repository: one commit of the starting tree, never part of the deliverable
    assert rules[".git"] == ".git/**" and not any(p.startswith(".git/") for p in entries)
    record = json.loads((adir / "trial.json").read_text())
    assert record["workspace_git"]["commit"] and record["workspace_git"]["date"] == DATE
    with tarfile.open(adir / "artifact.tar") as tar:
        member = tar.extractfile("git-log.txt")
        assert member is not None
        log = member.read().decode()
        ran = tar.extractfile("run.txt")  # the agent ran its code on the fix, in the venv
        assert ran is not None and ran.read() == b"5\n"
    assert log.split() == [record["workspace_git"]["commit"][:7], "starting", "tree"], log


def test_the_starting_commit_is_the_same_for_the_same_tree(tmp_path: Path) -> None:
    commits = []
    for n in ("a", "b"):
        tree = tmp_path / n
        (tree / "src").mkdir(parents=True)
        (tree / "src" / "m.py").write_text("x = 1\n")
        (tree / ".gitignore").write_text("*.log\n")
        (tree / "keep.log").write_text("kept all the same\n")
        (tmp_path / f"home-{n}").mkdir()
        rec = make_repository(tree, tmp_path / f"home-{n}")
        commits.append(rec["commit"])
        listed = subprocess.run(["git", "-C", str(tree), "ls-files"], capture_output=True,
                                text=True, check=True).stdout.split()
        assert listed == [".gitignore", "keep.log", "src/m.py"]  # the whole starting tree
        count = subprocess.run(["git", "-C", str(tree), "rev-list", "--count", "HEAD"],
                               capture_output=True, text=True, check=True).stdout.strip()
        assert count == "1"
    assert commits[0] == commits[1] and len(commits[0]) == 40


# ------------------------------------------------------------------ what integrity must refuse

def test_a_top_level_module_is_one_outside_a_package() -> None:
    paths = {"src", "src/json.py", "src/calc", "src/calc/__init__.py", "src/calc/json.py",
             "src/typing", "src/typing/__init__.py", "src/ns", "data.json", "test.py"}
    kinds = {p: ("dir" if "." not in p.rsplit("/", 1)[-1] else "file") for p in paths}
    got = {p: top_level_module(p, kinds[p], paths) for p in sorted(paths)}
    assert got["src/json.py"] == "json" and got["src/typing"] == "typing"
    assert got["src/calc/json.py"] is None  # calc.json, inside a package
    assert got["src/ns"] is None and got["data.json"] is None
    names = shadow_names(None)
    assert {"json", "typing", "fnmatch", "iniconfig", "pytest"} <= names
    assert "test" not in names  # a reproduction script called test.py is a habit


def test_a_config_file_too_large_to_read_is_refused_with_its_size(tmp_path: Path) -> None:
    before, after = tmp_path / "a", tmp_path / "b"
    before.mkdir()
    after.mkdir()
    (before / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    big = "[project]\nname = 'x'\n" + "# pad\n" * (MAX_CONFIG_BYTES // 6 + 1)
    (after / "pyproject.toml").write_text(big + "[tool.pytest.ini_options]\naddopts = '-p x'\n")
    res = check_integrity(list_tree(before), list_tree(after), protected=[], allowed=None)
    assert res.failure_code == "test_tooling_changed"
    (problem,) = res.problems
    assert problem["size"] > MAX_CONFIG_BYTES and "refused, never skipped" in problem["why"]
    # the same settings in a file small enough to read: refused for what they are
    (after / "pyproject.toml").write_text("[tool.pytest.ini_options]\naddopts = '-p x'\n")
    res = check_integrity(list_tree(before), list_tree(after), protected=[], allowed=None)
    assert res.failure_code == "test_tooling_changed" and "why" not in res.problems[0]


@needs_bwrap
def test_a_standard_library_shadow_beside_the_real_fix_is_refused_and_named(
        tmp_path: Path) -> None:
    """``src/fnmatch.py`` (pytest imports fnmatch) beside the real fix: before, every check
    passed and the trial was accepted; now ``stdlib_shadowed``, and the module was never
    imported (the guard resolves the standard library first)."""
    bundle = make_bundle(tmp_path / "b")
    shadow = ("import os\nos.write(2, b\"candidate fnmatch imported\\n\")\n"
              "from posixpath import *\n")
    agent = f"command:{FIX} && printf '{shadow}' > src/fnmatch.py"
    grade = _trial(bundle, agent, tmp_path / "t")
    assert grade.failure_code == "stdlib_shadowed", grade.failure_code
    for name in ("behavior", "regression"):
        rec = getattr(grade.details, name) or {}
        assert "candidate fnmatch imported" not in rec["stderr_tail"], rec["stderr_tail"]
        assert grade.checks[name] == "pass"
    view = load_trial_view(next((tmp_path / "t").rglob("trial.json")).parent)
    integ = next(c for c in view.checks if c.name == "integrity")
    assert "stdlib_shadowed: a module of the deliverable is named like a standard-library" \
        in integ.output_tail and "src/fnmatch.py" in integ.output_tail
