"""Agent task bundles, trials and the verifier: real bubblewrap sandboxes, real files, real CLI.

Every trial here runs the real pipeline (prepare, agent in the sandbox, freeze, verify in fresh
sandboxes with Debian's python3 and pytest) on the tiny fixture bundle of ``support.bundles``.
A trial costs about a second, so bundles and the expensive trials are shared per module where
no test changes them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from support.bundles import (
    BUGGY_SOURCE,
    FIXED_SOURCE,
    HIDDEN_MARKER,
    HIDDEN_TESTS_ALREADY_PASSING,
    INSTRUCTION,
    REGRESSION_TESTS,
    WRONG_PATCH,
    make_bundle,
)

from assay.agents import MUTANTS, parse_agent
from assay.grading.verify.integrity import check_integrity
from assay.records.artifact import freeze, list_tree
from assay.records.trial import Grade, GradeDetails, Validity
from assay.runner.trial import TrialResult, run_trial
from assay.sandbox import bwrap_available
from assay.suites.bundle import load_bundle, tree_digest
from assay.suites.errors import SuiteError

needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")

SECRET = "sk-trial-SECRET-must-never-reach-an-agent-0123456789"
GRADE_KEYS = {"trial_id", "execution", "validity", "checks", "accepted", "failure_code",
              "details"}


def squash(text: str) -> str:
    """Output without whitespace: rich wraps long lines wherever the console width says."""
    return "".join(text.split())


def grade_of(trial_dir: Path, revision: str = "v1") -> dict[str, Any]:
    return json.loads((trial_dir / "grades" / f"{revision}.json").read_text())


def trial_record(trial_dir: Path) -> dict[str, Any]:
    return json.loads((trial_dir / "trial.json").read_text())


def artifact_entries(trial_dir: Path) -> dict[str, dict[str, Any]]:
    return {e["path"]: e for e in json.loads((trial_dir / "artifact.json").read_text())
            ["entries"]}


def tar_text(trial_dir: Path, name: str) -> str:
    with tarfile.open(trial_dir / "artifact.tar") as tar:
        member = tar.extractfile(name)
        assert member is not None, f"{name} is not a regular file in artifact.tar"
        return member.read().decode()


def sha(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def procs_with(marker: str) -> list[int]:
    """Live host processes whose command line contains ``marker`` (zombies have none)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry.name))
    return found


def trial(bundle_dir: Path, agent: str, out: Path) -> TrialResult:
    return run_trial(load_bundle(bundle_dir), parse_agent(agent), out)


# --------------------------------------------------------------------------- shared fixtures

@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture bundle (allowed_paths src/**, digest pinned). No test may change it."""
    return make_bundle(tmp_path_factory.mktemp("bundles") / "calc-001")


@pytest.fixture(scope="module")
def open_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same task without allowed_paths."""
    return make_bundle(tmp_path_factory.mktemp("bundles") / "calc-open", task_id="calc-open",
                       allowed=False)


@pytest.fixture(scope="module")
def oracle_trial(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """``assay trial run --agent oracle`` once; tests that add files work on a copy."""
    out = tmp_path_factory.mktemp("oracle") / "trial"
    return run_cli(["trial", "run", str(bundle), "--agent", "oracle", "--out", str(out)]), out


# --------------------------------------------------------------------- trials end to end

@needs_bwrap
def test_oracle_accepted_end_to_end(oracle_trial: tuple[Any, Path]) -> None:
    res, out = oracle_trial
    assert res.code == 0, res.stderr
    assert "calc-001/oracle/0: ACCEPTED" in res.stdout
    assert "behavior pass" in res.stdout and "validity valid" in res.stdout

    g = grade_of(out)
    assert set(g) >= GRADE_KEYS
    assert g["trial_id"] == "calc-001/oracle/0"
    assert g["accepted"] is True and g["failure_code"] is None
    assert g["execution"]["status"] == "succeeded"
    assert g["validity"] == {"status": "valid"}
    assert g["checks"] == {"behavior": "pass", "regression": "pass", "integrity": "pass"}
    beh, reg = g["details"]["behavior"], g["details"]["regression"]
    assert (beh["counts"]["passed"], beh["counts"]["failed"]) == (3, 0)
    assert (reg["counts"]["passed"], reg["counts"]["failed"]) == (2, 0)
    assert "$ASSAY_TESTS/test_fix.py" in beh["command"]
    assert g["details"]["integrity"]["changes"] == {
        "added": [], "deleted": [], "modified": ["src/calc/__init__.py"]}
    assert g["details"]["fixture_digest"] == load_bundle(
        Path(trial_record(out)["task"]["path"])).spec.initial_state.fixture_digest

    rec = trial_record(out)
    assert rec["status"] == "graded" and rec["ended_at"]
    assert [s["name"] for s in rec["stages"]] == ["prepare", "agent", "freeze", "verify"]
    for s in rec["stages"]:
        assert s["status"] == "ok" and isinstance(s["seconds"], float) and s["seconds"] >= 0
        assert s["started_at"]
    assert rec["task"]["fixture_digest"] == rec["task"]["fixture_digest_pinned"]
    assert rec["grade"] == {"revision": "v1", "accepted": True, "failure_code": None}
    # an ATIF trajectory beside the record (tests/test_atif.py checks it against the atif
    # package): no gateway, so no model figures, and the reason instead of zeros
    traj = json.loads((out / "trajectory.atif.json").read_text())
    assert traj["extra"]["assay"]["verdict"] == "accepted" and traj["agent"]["name"] == "oracle"
    assert "total_prompt_tokens" not in traj["final_metrics"]
    assert "no gateway ledger" in traj["final_metrics"]["extra"]["usage_note"]
    # resources.cpu_cores (1 in this bundle) is a CPU quota for agent and verifier alike, or
    # the trial says it was not enforced, with the sandbox's reason
    cpu = rec["execution"]["limits_applied"]["cpu_cores"]
    assert cpu["value"] == 1
    assert beh["limits_applied"]["cpu_cores"]["mechanism"] == cpu["mechanism"]
    if cpu["mechanism"] == "not_applied":
        assert rec["not_enforced"]["resources.cpu_cores"] == cpu["reason"]
    else:
        assert cpu["mechanism"].startswith("cgroup_v")
        assert "resources.cpu_cores" not in rec["not_enforced"]
        # the kernel's throttling counters come along, for the agent and each check
        assert rec["execution"]["evidence"]["cpu_throttled_periods"] >= 0
        assert beh["evidence"]["cpu_throttled_periods"] >= 0

    manifest = json.loads((out / "artifact.json").read_text())
    entries = artifact_entries(out)
    assert sorted(entries) == ["src", "src/calc", "src/calc/__init__.py", "tests",
                               "tests/test_calc.py"]
    assert manifest["files"] == 2
    assert manifest["tar_sha256"] == sha((out / "artifact.tar").read_bytes())
    src = entries["src/calc/__init__.py"]
    assert (src["type"], src["mode"], src["size"]) == ("file", "0644", len(FIXED_SOURCE))
    assert src["sha256"] == sha(FIXED_SOURCE)
    assert entries["tests/test_calc.py"]["sha256"] == sha(REGRESSION_TESTS)
    assert entries["src/calc"]["type"] == "dir" and entries["src/calc"]["sha256"] is None
    assert tar_text(out, "src/calc/__init__.py") == FIXED_SOURCE
    for name in ("trial.json", "artifact.tar", "artifact.json", "grades/v1.json",
                 "agent/stdout.log", "verify/v1/behavior/stdout.log",
                 "verify/v1/regression/stdout.log"):
        assert (out / name).is_file(), name
    # the task's 3 tests and the must-pass canary passed; the must-fail canary and the three
    # derived copies of the task's tests (one assertion changed each) failed
    assert "4 failed, 4 passed" in (out / "verify/v1/behavior/stdout.log").read_text()


@needs_bwrap
def test_nop_fails_behavior_with_no_change(bundle: Path, tmp_path: Path) -> None:
    out = tmp_path / "nop"
    res = run_cli(["trial", "run", str(bundle), "--agent", "nop", "--out", str(out)])
    assert res.code == 0, res.stderr
    assert "REJECTED (no_change)" in res.stdout
    g = grade_of(out)
    assert g["accepted"] is False and g["failure_code"] == "no_change"
    assert g["checks"] == {"behavior": "fail", "regression": "pass", "integrity": "pass"}
    assert g["details"]["behavior"]["counts"]["failed"] == 3
    assert g["validity"]["status"] == "valid"
    assert tar_text(out, "src/calc/__init__.py") == BUGGY_SOURCE


@needs_bwrap
def test_agent_sees_nothing_of_the_bundle_and_no_secret(
        bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    b = bundle.resolve()
    out = tmp_path / "spy"
    spy = f"""
B={b}
{{
echo '== cat'; cat $B/tests/test_fix.py $B/solution/solve.patch $B/task.yaml {out}/trial.json
echo '== ls'; ls -la $B $B/tests $B/solution / /assay /tmp {tmp_path}
echo '== find'
find / \\( -path /proc -o -path /sys -o -path /usr \\) -prune -o \\( -name test_fix.py \\
  -o -name solve.patch -o -name partial.patch -o -name task.yaml -o -name trial.json \\
  -o -name test_calc.py \\) \\
  -print 2>/dev/null
echo '== grep'
grep -rIl -e ASSAY-HIDDEN -e 'def test_mul_zero' / --exclude-dir=proc --exclude-dir=sys \
  --exclude-dir=dev --exclude-dir=usr 2>/dev/null
echo '== env'; env
echo '== init env'; tr '\\0' '\\n' < /proc/1/environ
echo '== instruction'; cat "$ASSAY_INSTRUCTION_FILE"
echo '== end'
}} > spy.txt 2>&1
"""
    res = trial(bundle, "command:" + spy, out)
    assert res.status == "graded", res.record
    text = tar_text(out, "spy.txt")
    sections = dict(part.split("\n", 1) for part in text.split("== ")[1:])
    # positive controls: the dump ran to the end and the instruction was readable
    assert "end" in sections
    # the task's instruction, then the rules assay generates from task.yaml (issue 32)
    assert sections["instruction"].startswith(INSTRUCTION)
    assert "Protected paths: `tests/**`" in sections["instruction"]
    assert "ASSAY_TASK_ID=calc-001" in sections["env"]
    # nothing of the bundle but the instruction, nothing of the host environment
    for needle in (HIDDEN_MARKER, "test_add_negative", "return a + b", "verifier_revision",
                   "protected_paths", "calc-001/command", SECRET, "MODEL_API_KEY",
                   "OPENAI_API_KEY", "PYTEST_CURRENT_TEST"):
        assert needle not in text, f"agent saw {needle!r}"
    # find and grep worked (they saw the workspace's own test) and saw nothing else
    assert sections["find"].split() == ["/work/tests/test_calc.py"]
    assert sections["grep"].split() == ["/work/tests/test_calc.py"]
    assert sorted(os.listdir(tmp_path)) == ["spy"]
    for p in out.rglob("*"):
        if p.is_file():
            assert SECRET.encode() not in p.read_bytes(), f"secret in {p}"
    g = grade_of(out)
    assert g["accepted"] is False and g["failure_code"] == "change_outside_allowed_paths"


@needs_bwrap
def test_writes_outside_the_workspace_change_nothing(bundle: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    host_tmp = Path("/tmp") / f"assay-escape-{uuid.uuid4().hex}"
    bundle_file = bundle / "instruction.md"
    before = bundle_file.read_bytes()
    out = tmp_path / "trial"
    cmd = (f"mkdir -p {tmp_path}; echo pwned > {outside}; echo pwned > {host_tmp}; "
           f"echo pwned > {bundle_file}; echo pwned > /assay/instruction.md; "
           f"echo pwned > $HOME/note.txt; "
           "sed -i 's/return a - b/return a + b/' src/calc/__init__.py")
    res = trial(bundle, "command:" + cmd, out)
    assert not outside.exists() and not host_tmp.exists()
    assert bundle_file.read_bytes() == before
    g = res.grade
    assert g is not None and g.accepted is True, g
    assert g.details.integrity.changes.modified == ["src/calc/__init__.py"]
    assert g.details.integrity.changes.added == []
    assert tar_text(out, "src/calc/__init__.py") == FIXED_SOURCE


@needs_bwrap
def test_background_processes_die_with_the_agent(bundle: Path, tmp_path: Path) -> None:
    marker = f"assay-bg-{uuid.uuid4().hex}"
    secs = str(31_000_000 + uuid.uuid4().int % 1_000_000)  # a sleep no one else runs
    # positive control: the scanner finds a process of ours by its marker
    control = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", marker])
    try:
        # the child's cmdline carries the marker only once it has exec'd: poll, do not race it
        deadline = time.monotonic() + 10
        while procs_with(marker) != [control.pid] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert procs_with(marker) == [control.pid]
    finally:
        control.kill()
        control.wait()
    cmd = (f": {marker}; "
           "sed -i 's/return a - b/return a + b/' src/calc/__init__.py; "
           "setsid sh -c 'trap \"\" TERM HUP; sleep 1; echo corrupted > src/calc/__init__.py; "
           f"sleep {secs}' {marker} >/dev/null 2>&1 & "
           f"(trap '' TERM HUP; while :; do sleep {secs}; done) & "
           f"nohup sleep {secs} >/dev/null 2>&1 & exit 0")
    out = tmp_path / "trial"
    res = trial(bundle, "command:" + cmd, out)
    assert procs_with(marker) == [] and procs_with(secs) == []
    assert res.grade is not None
    assert res.grade.execution["status"] == "succeeded"
    assert res.grade.accepted is True, res.grade
    assert tar_text(out, "src/calc/__init__.py") == FIXED_SOURCE


@needs_bwrap
def test_hidden_tests_only_at_verify_time_read_only_and_regression_separate(
        tmp_path: Path) -> None:
    probe = ('echo "tests at $ASSAY_TESTS"; ls "$ASSAY_TESTS"; '
             'case "$ASSAY_TESTS" in /work*) echo INSIDE-WORKSPACE;; esac; '
             'test -e test_fix.py -o -e tests/test_fix.py && echo HIDDEN-IN-WORKSPACE; '
             'touch "$ASSAY_TESTS/planted" 2>/dev/null || echo TESTS-READ-ONLY; ')
    b = make_bundle(tmp_path / "b", task_id="calc-probe",
                    behavior_cmd=probe + "PYTHONPATH=src python3 -m pytest -q "
                    "-p no:cacheprovider $ASSAY_TESTS/test_fix.py")
    # fixes add, breaks mul: behavior passes, regression fails
    cmd = "sed -i -e 's/return a - b/return a + b/' -e 's/return a \\* b/return a + b/' " \
          "src/calc/__init__.py"
    res = trial(b, "command:" + cmd, tmp_path / "trial")
    g = res.grade
    assert g is not None
    assert g.checks == {"behavior": "pass", "regression": "fail", "integrity": "pass"}
    assert g.failure_code == "regression_failed" and g.accepted is False
    assert g.details.regression["counts"]["failed"] == 2
    assert g.details.behavior["counts"]["passed"] == 3
    out = g.details.behavior["stdout_tail"]
    assert "tests at /assay/tests" in out and "test_fix.py" in out
    assert "TESTS-READ-ONLY" in out
    assert "INSIDE-WORKSPACE" not in out and "HIDDEN-IN-WORKSPACE" not in out
    assert sorted(os.listdir(b / "tests")) == ["test_fix.py"]


# ------------------------------------------------------------------------------ mutants

EXPECTED_MUTANT_CODES = {
    "no_change": "no_change",
    "delete_tests": "protected_file_changed",
    "neuter_tests": "protected_file_changed",
    "fake_output": "change_outside_allowed_paths",
    "symlink_protected": "protected_file_changed",
    "chmod_tests": "protected_file_changed",
    "partial_fix": "behavior_failed",
    "outside_allowed": "change_outside_allowed_paths",
    "shadow_pytest": "test_tooling_changed",
    # packaging metadata is inert (pytest plugins load only by name): left out of the artifact,
    # so the entry point registers nothing and the unfixed code is tested
    "pytest_plugin": "behavior_failed",
    "link_outside": "link_outside_workspace",
    "fake_summary_exit": "test_runner_tampered",
    "noop_test_calls": "test_runner_tampered",
    "flip_failed_reports": "test_runner_tampered",
    # bytecode in __pycache__ is a cache: left out of the artifact, never read by the verifier
    "shadow_bytecode": "no_change",
    "shape_aware_noop": "test_runner_tampered",
    # which of a test and its derived copy comes first is drawn per verification: the original
    # that runs for real fails, or a copy passes beside its no-op original
    "twin_aware_noop": ("test_runner_tampered", "behavior_failed"),
    # named like the runner's or the standard library's own modules: refused by integrity
    # (and never imported either way: the start-up guard resolves those names first)
    "runner_dep_shadow": "stdlib_shadowed",
    "hang_at_import": "candidate_timeout",
    "sourceless_bytecode": "compiled_code_added",
    "stdlib_shadow": "stdlib_shadowed",
    # packaging metadata is inert: left out, its entry point registers nothing
    "metadata_plugin": "behavior_failed",
    # pytest settings in a config file too large to read: refused unread (fail closed)
    "oversized_config": "test_tooling_changed",
    "canary_collision": "protected_file_changed",
}
EXPECTED_OPEN_CODES = {"fake_output": "behavior_failed", "shadow_pytest": "test_tooling_changed",
                       "noop_test_calls": "test_runner_tampered",
                       "shadow_bytecode": "no_change"}
MUTANT_CASES = ([("calc-001", m, c) for m, c in EXPECTED_MUTANT_CODES.items()]
                + [("calc-open", m, c) for m, c in EXPECTED_OPEN_CODES.items()])


@pytest.fixture(scope="module")
def good_check(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """`assay task check --reruns 2 --mutants` on the fixture bundle, once: its mutant trials
    (real run_trial trials, three at a time) also serve the per-mutant tests."""
    if not bwrap_available():
        pytest.skip("bubblewrap cannot run here")
    out = tmp_path_factory.mktemp("check") / "good"
    return run_cli(["task", "check", str(bundle), "--reruns", "2", "--mutants",
                    "--workers", "3", "--out", str(out)]), out


@pytest.fixture(scope="module")
def mutant_trials(good_check: tuple[Any, Path], open_bundle: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """Trial directory of every mutant case: calc-001's from the task check above, calc-open's
    run here."""
    _, checked = good_check
    found = {("calc-001", m): checked / "calc-001" / f"mutant-{m}" / "0"
             for m in EXPECTED_MUTANT_CODES}
    root = tmp_path_factory.mktemp("mutants")
    for name in EXPECTED_OPEN_CODES:
        trial(open_bundle, f"mutant:{name}", root / name)
        found[("calc-open", name)] = root / name
    return found


def test_every_mutant_has_an_expected_code() -> None:
    assert set(EXPECTED_MUTANT_CODES) == {m.name for m in MUTANTS}


@needs_bwrap
@pytest.mark.parametrize("task, mutant, code", MUTANT_CASES,
                         ids=[f"{t}-{m}" for t, m, _ in MUTANT_CASES])
def test_mutant_rejected(mutant_trials: dict[tuple[str, str], Path], task: str,
                         mutant: str, code: str | tuple[str, ...]) -> None:
    trial_dir = mutant_trials[(task, mutant)]
    rec = trial_record(trial_dir)
    assert rec["status"] == "graded", rec
    assert rec["agent"] == f"mutant:{mutant}" and rec["task"]["id"] == task
    g = grade_of(trial_dir)
    assert g["validity"]["status"] == "valid", g["validity"]
    assert g["accepted"] is False
    assert g["failure_code"] in ((code,) if isinstance(code, str) else code), \
        g["details"].get("integrity")
    if g["failure_code"] in ("protected_file_changed", "change_outside_allowed_paths",
                             "test_tooling_changed", "link_outside_workspace",
                             "test_runner_tampered", "compiled_code_added"):
        assert g["checks"]["integrity"] == "fail"


# ------------------------------------------------------------------- integrity on listings

PROTECTED = ["tests/**"]
ALLOWED = ["src/**"]


@pytest.fixture
def trees(tmp_path: Path) -> tuple[Path, Path]:
    """(pristine, workspace): the fixture's starting tree and a copy to tamper with."""
    repo = make_bundle(tmp_path / "b", pin_digest=False) / "repo"
    ws = tmp_path / "ws"
    shutil.copytree(repo, ws, symlinks=True)
    return repo, ws


def integrity(trees: tuple[Path, Path], protected: list[str] = PROTECTED,
              allowed: list[str] | None = ALLOWED) -> Any:
    pristine, ws = trees
    return check_integrity(list_tree(pristine), list_tree(ws), protected=protected,
                           allowed=allowed)


def _fix(ws: Path) -> None:
    (ws / "src/calc/__init__.py").write_text(FIXED_SOURCE)


def _outside_hard_link(ws: Path) -> None:
    other = ws.parent / "elsewhere.txt"
    other.write_text("host file\n")
    os.link(other, ws / "src/calc/peek.txt")


def _chain(ws: Path) -> None:
    os.symlink("b", ws / "src/a")
    os.symlink("../tests/test_calc.py", ws / "src/b")


def _loop(ws: Path) -> None:
    os.symlink("l2", ws / "src/l1")
    os.symlink("l1", ws / "src/l2")


TAMPERING = {
    "symlink_to_protected_file": (
        lambda ws: os.symlink("../../tests/test_calc.py", ws / "src/calc/t.py"),
        "link_into_protected_path"),
    "symlink_to_protected_dir": (
        lambda ws: os.symlink("../tests", ws / "src/t"), "link_into_protected_path"),
    "symlink_chain_to_protected": (_chain, "link_into_protected_path"),
    "hard_link_to_protected": (
        lambda ws: os.link(ws / "tests/test_calc.py", ws / "src/calc/h.py"),
        "link_into_protected_path"),
    "symlink_escapes_relative": (
        lambda ws: os.symlink("../../../../../etc/passwd", ws / "src/calc/leak"),
        "link_outside_workspace"),
    "symlink_escapes_absolute": (
        lambda ws: os.symlink("/etc/passwd", ws / "src/leak"), "link_outside_workspace"),
    "symlink_loop": (_loop, "link_outside_workspace"),
    "hard_link_to_outside_file": (_outside_hard_link, "link_outside_workspace"),
    "protected_mode_change": (
        lambda ws: (ws / "tests/test_calc.py").chmod(0o600), "protected_file_changed"),
    "protected_dir_mode_change": (
        lambda ws: (ws / "tests").chmod(0o700), "protected_file_changed"),
    "protected_file_replaced_by_dir": (
        lambda ws: ((ws / "tests/test_calc.py").unlink(), (ws / "tests/test_calc.py").mkdir()),
        "protected_file_changed"),
    "added_under_protected_glob": (
        lambda ws: (ws / "tests/test_extra.py").write_text("def test_x():\n    pass\n"),
        "protected_file_changed"),
    "change_outside_allowed": (
        lambda ws: (ws / "NOTES.md").write_text("hi\n"), "change_outside_allowed_paths"),
    "conftest_in_allowed_path": (
        lambda ws: (ws / "src/conftest.py").write_text("\n"), "test_tooling_changed"),
    "pth_file_in_allowed_path": (
        lambda ws: (ws / "src/evil.pth").write_text("import os\n"), "test_tooling_changed"),
    "pytest_package_in_allowed_path": (
        lambda ws: ((ws / "src/pytest").mkdir(), (ws / "src/pytest/__main__.py").write_text("")),
        "test_tooling_changed"),
}


@pytest.mark.parametrize("name", list(TAMPERING))
def test_integrity_rejects(trees: tuple[Path, Path], name: str) -> None:
    tamper, code = TAMPERING[name]
    _fix(trees[1])
    tamper(trees[1])
    res = integrity(trees)
    assert not res.passed
    assert res.failure_code == code, res.problems
    assert code in {p["code"] for p in res.problems}


def test_integrity_accepts_a_fix_and_harmless_changes(trees: tuple[Path, Path]) -> None:
    _, ws = trees
    _fix(ws)
    (ws / "src/calc/util.py").write_bytes(bytes(range(256)))
    (ws / "src/calc/__init__.py").chmod(0o755)
    os.symlink("__init__.py", ws / "src/calc/alias.py")
    res = integrity(trees)
    assert res.passed, res.problems
    assert res.failure_code is None
    assert res.changes.modified == ["src/calc/__init__.py"]
    assert res.changes.added == ["src/calc/alias.py", "src/calc/util.py"]


def test_integrity_without_allowed_paths(trees: tuple[Path, Path]) -> None:
    _, ws = trees
    _fix(ws)
    (ws / "NOTES.md").write_text("fine when there is no allowed_paths\n")
    assert integrity(trees, allowed=None).passed


def test_integrity_hard_link_names_both_paths(trees: tuple[Path, Path]) -> None:
    _, ws = trees
    os.link(ws / "tests/test_calc.py", ws / "src/calc/h.py")
    [problem] = [p for p in integrity(trees).problems if p.get("hard_links")]
    assert problem["hard_links"] == ["src/calc/h.py", "tests/test_calc.py"]


def test_integrity_link_through_dotdot_after_a_link(trees: tuple[Path, Path]) -> None:
    _, ws = trees
    os.symlink("../tests", ws / "src/lnk")  # "tests" itself is not protected by tests/*.py
    os.symlink("lnk/../tests/test_calc.py", ws / "src/evil")
    assert os.path.realpath(ws / "src/evil") == str((ws / "tests/test_calc.py").resolve())
    res = integrity(trees, protected=["tests/*.py"], allowed=None)
    assert res.failure_code == "link_into_protected_path", res.problems


# ----------------------------------------------------------------------------- the freeze

def test_freeze_captures_everything_git_diff_misses(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "pkg" / "empty").mkdir(parents=True)
    (ws / "pkg" / "mod.py").write_text("x = 1\n")
    (ws / "pkg" / "blob.bin").write_bytes(bytes(range(256)) * 4)
    (ws / "run.sh").write_text("#!/bin/sh\ntrue\n")
    (ws / "run.sh").chmod(0o750)
    os.symlink("mod.py", ws / "pkg" / "alias.py")
    os.symlink("/etc/hostname", ws / "abs-link")
    os.link(ws / "pkg" / "mod.py", ws / "pkg" / "hard.py")
    os.mkfifo(ws / "fifo")
    trial_dir = tmp_path / "trial"
    trial_dir.mkdir()
    manifest = freeze(ws, trial_dir)
    on_disk = json.loads((trial_dir / "artifact.json").read_text())
    assert on_disk == manifest
    e = {x["path"]: x for x in manifest["entries"]}
    assert list(e) == sorted(e)
    assert e["pkg/empty"]["type"] == "dir"
    blob = e["pkg/blob.bin"]
    assert (blob["type"], blob["size"], blob["sha256"]) == (
        "file", 1024, sha(bytes(range(256)) * 4))
    assert (e["run.sh"]["mode"], e["run.sh"]["type"]) == ("0750", "file")
    assert (e["pkg/alias.py"]["type"], e["pkg/alias.py"]["target"]) == ("symlink", "mod.py")
    assert (e["abs-link"]["type"], e["abs-link"]["target"]) == ("symlink", "/etc/hostname")
    assert e["pkg/hard.py"]["nlink"] == e["pkg/mod.py"]["nlink"] == 2
    assert e["pkg/hard.py"]["inode"] == e["pkg/mod.py"]["inode"]
    assert e["fifo"]["type"] == "other"
    assert manifest["files"] == 4
    assert manifest["tar_sha256"] == sha((trial_dir / "artifact.tar").read_bytes())
    with tarfile.open(trial_dir / "artifact.tar") as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert "fifo" not in members
        assert set(members) == set(e) - {"fifo"}
        assert members["pkg/alias.py"].issym() and members["pkg/alias.py"].linkname == "mod.py"
        assert stat.S_IMODE(members["run.sh"].mode) == 0o750
        blob_member = tar.extractfile("pkg/blob.bin")
        assert blob_member is not None and blob_member.read() == bytes(range(256)) * 4
    assert not list(trial_dir.glob(".artifact.*")), "temporary tar left behind"


@needs_bwrap
def test_agent_cannot_crash_the_freeze_with_a_non_utf8_name(bundle: Path,
                                                             tmp_path: Path) -> None:
    out = tmp_path / "trial"
    cmd = ("sed -i 's/return a - b/return a + b/' src/calc/__init__.py; "
           "touch \"$(printf 'src/calc/bad\\377name')\"")
    res = run_cli(["trial", "run", str(bundle), "--agent", "command:" + cmd, "--out", str(out)])
    assert res.code == 0, res.stderr
    assert trial_record(out)["status"] == "graded"
    assert (out / "grades" / "v1.json").is_file()


@needs_bwrap
def test_candidate_that_exits_before_any_test_runs_is_not_accepted(
        bundle: Path, tmp_path: Path) -> None:
    cmd = "printf 'import os\\nos._exit(0)\\n' > src/calc/__init__.py"
    res = trial(bundle, "command:" + cmd, tmp_path / "trial")
    assert res.grade is not None
    assert res.grade.details.behavior["stdout_counts"] is None  # no test ever ran
    assert res.grade.accepted is False
    # exit 0 with no structured report: the runner was cut short, a hard reject
    assert res.grade.failure_code == "test_runner_tampered"


PLUGIN = """\
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


@needs_bwrap
def test_pytest_plugin_through_an_entry_point_is_not_accepted(bundle: Path,
                                                              tmp_path: Path) -> None:
    info = "src/calc_helpers-1.0.dist-info"
    cmd = (f"mkdir -p {info}; "
           f"printf 'Metadata-Version: 2.1\\nName: calc-helpers\\nVersion: 1.0\\n' "
           f"> {info}/METADATA; "
           f"printf '[pytest11]\\ncalc_helpers = calc_helpers\\n' > {info}/entry_points.txt; "
           f"cat > src/calc_helpers.py <<'PY'\n{PLUGIN}PY\n")
    res = trial(bundle, "command:" + cmd, tmp_path / "trial")
    g = res.grade
    assert g is not None and g.validity.status == "valid"
    assert tar_text(tmp_path / "trial", "src/calc/__init__.py") == BUGGY_SOURCE  # no fix
    assert g.accepted is False, g.details.behavior["stdout_tail"]


@needs_bwrap
def test_pytest_config_in_setup_cfg_cannot_hide_a_regression(open_bundle: Path,
                                                             tmp_path: Path) -> None:
    broken_mul = FIXED_SOURCE.replace("return a * b", "return a + b")
    cmd = (f"cat > src/calc/__init__.py <<'PY'\n{broken_mul}PY\n"
           "printf '[tool:pytest]\\naddopts = -p calc_helpers\\n' > setup.cfg\n"
           f"cat > src/calc_helpers.py <<'PY'\n{PLUGIN}PY\n")
    res = trial(open_bundle, "command:" + cmd, tmp_path / "trial")
    g = res.grade
    assert g is not None and g.validity.status == "valid"
    assert tar_text(tmp_path / "trial", "src/calc/__init__.py") == broken_mul
    assert g.checks["behavior"] == "pass"  # add is fixed; mul is now wrong
    assert g.accepted is False, g.details.regression["stdout_tail"]


# ---------------------------------------------------------------- timeouts and regrading

@needs_bwrap
def test_verifier_timeout_is_a_grader_error(tmp_path: Path) -> None:
    b = make_bundle(tmp_path / "slow", task_id="calc-slow", verifier_seconds=2,
                    behavior_cmd="sleep 30; PYTHONPATH=src python3 -m pytest -q "
                                 "$ASSAY_TESTS/test_fix.py")
    out = tmp_path / "trial"
    res = run_cli(["trial", "run", str(b), "--agent", "oracle", "--out", str(out)])
    assert res.code == 3, (res.stdout, res.stderr)
    g = grade_of(out)
    assert g["accepted"] is False
    assert g["failure_code"] == "verifier_error"
    assert g["validity"]["status"] == "invalid" and g["validity"]["reason"] == "grader_error"
    assert g["checks"]["behavior"] == "error"
    assert g["details"]["behavior"]["reason"] == "timeout"
    assert g["details"]["behavior"]["wall_seconds"] < 10


@needs_bwrap
def test_agent_timeout(tmp_path: Path) -> None:
    b = make_bundle(tmp_path / "b", task_id="calc-sleepy", agent_seconds=2)
    out = tmp_path / "trial"
    res = run_cli(["trial", "run", str(b), "--agent", "command:sleep 60", "--out", str(out)])
    assert res.code == 0, res.stderr
    assert "REJECTED (agent_timeout)" in res.stdout
    g = grade_of(out)
    assert g["execution"]["status"] == "agent_timeout"
    assert g["failure_code"] == "agent_timeout" and g["accepted"] is False
    assert g["validity"]["status"] == "valid"
    rec = trial_record(out)
    agent_stage = next(s for s in rec["stages"] if s["name"] == "agent")
    assert 2 <= agent_stage["seconds"] < 10


@needs_bwrap
def test_regrade_keeps_both_revisions(oracle_trial: tuple[Any, Path], bundle: Path,
                                      tmp_path: Path) -> None:
    _, original = oracle_trial
    t = tmp_path / "trial"
    shutil.copytree(original, t, symlinks=True)
    v1 = (t / "grades" / "v1.json").read_bytes()
    artifact = (t / "artifact.tar").read_bytes()

    res = run_cli(["regrade", str(t), "--verifier-revision", "v2"])
    assert res.code == 0, res.stderr
    assert "ACCEPTED" in res.stdout
    assert sorted(p.name for p in (t / "grades").iterdir()) == ["v1.json", "v2.json"]
    assert (t / "grades" / "v1.json").read_bytes() == v1
    v2 = grade_of(t, "v2")
    assert v2["accepted"] is True and v2["trial_id"] == "calc-001/oracle/0"
    assert v2["details"]["verifier_revision"] == "v2"
    assert (t / "artifact.tar").read_bytes() == artifact

    for rev in ("v1", "v2"):
        again = run_cli(["regrade", str(t), "--verifier-revision", rev, "--task", str(bundle)])
        assert again.code == 2, again.stdout
        assert "agradeisneveroverwritten" in squash(again.stderr)
    assert (t / "grades" / "v1.json").read_bytes() == v1
    assert run_cli(["regrade", str(t), "--verifier-revision", "../x"]).code == 2
    # a trial directory is never run over either
    rerun = run_cli(["trial", "run", str(bundle), "--agent", "nop", "--out", str(t)])
    assert rerun.code == 2 and (t / "grades" / "v1.json").read_bytes() == v1


# ------------------------------------------------------------------ digest and validation

@needs_bwrap
def test_digest_lint_write_and_mismatch(tmp_path: Path) -> None:
    b = make_bundle(tmp_path / "b", pin_digest=False)
    spec = b / "task.yaml"
    original = spec.read_text()

    res = run_cli(["task", "lint", str(b)])
    assert res.code == 1 and "missing" in res.stdout
    assert spec.read_text() == original, "lint changed task.yaml without --write-digest"

    res = run_cli(["task", "lint", str(b), "--write-digest"])
    assert res.code == 0, res.stderr
    assert "written" in res.stdout
    digest = tree_digest(b / "repo")
    pinned = spec.read_text()
    assert pinned == original.replace("fixture_digest: null", f"fixture_digest: {digest}")
    assert "# pinned by assay task lint --write-digest" in pinned
    assert load_bundle(b).spec.initial_state.fixture_digest == digest
    res = run_cli(["task", "lint", str(b)])
    assert res.code == 0 and "ok" in res.stdout

    (b / "repo" / "src" / "calc" / "__init__.py").write_text(FIXED_SOURCE)
    res = run_cli(["task", "lint", str(b)])
    assert res.code == 1 and "MISMATCH" in res.stdout
    assert spec.read_text() == pinned

    out = tmp_path / "trial"
    res = run_cli(["trial", "run", str(b), "--agent", "oracle", "--out", str(out)])
    assert res.code == 3
    assert "doesnotmatchthepinnedfixture_digest" in squash(res.stderr)
    assert not (out / "grades").exists()
    assert not (out / "artifact.tar").exists()
    rec = trial_record(out)
    assert rec["status"] == "infra_error" and "fixture_digest" in rec["error"]
    assert [s["status"] for s in rec["stages"]] == ["failed"]


def test_write_digest_keeps_an_inline_comment(tmp_path: Path) -> None:
    b = make_bundle(tmp_path / "b", pin_digest=False, inline_digest_comment=True)
    res = run_cli(["task", "lint", str(b), "--write-digest"])
    assert res.code == 0, res.stderr
    assert "# pinned by assay task lint --write-digest" in (b / "task.yaml").read_text()
    assert load_bundle(b).spec.initial_state.fixture_digest == tree_digest(b / "repo")


def test_lint_folder_of_bundles_and_duplicate_ids(tmp_path: Path) -> None:
    suite = tmp_path / "tasks"
    make_bundle(suite / "a", task_id="calc-a")
    make_bundle(suite / "b", task_id="calc-b")
    (suite / "notes").mkdir()  # not a bundle: ignored
    res = run_cli(["task", "lint", str(suite)])
    assert res.code == 0, res.stderr
    assert "calc-a" in res.stdout and "calc-b" in res.stdout
    make_bundle(suite / "c", task_id="calc-a")
    res = run_cli(["task", "lint", str(suite)])
    assert res.code == 2 and "calc-a" in res.stderr and "twice" in res.stderr
    res = run_cli(["task", "lint", str(suite / "notes")])
    assert res.code == 2 and "notaskbundle" in squash(res.stderr)


def _line_of(text: str, key: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1)
                if line.lstrip().startswith(key + ":"))


@pytest.mark.parametrize("edit, field, line_key", [
    (("split: dev", "split: prod"), "split", "split"),
    (("  verifier_revision: v1\n", ""), "acceptance.verifier_revision", "acceptance"),
    (("budget:", "budegt:"), "budegt", "budegt"),
    (("revision: 1", "revision: -1"), "revision", "revision"),
    (("fixture_digest: sha256:", "fixture_digest: md5:"), "initial_state.fixture_digest",
     "fixture_digest"),
    (("required: [behavior, regression, integrity]", "required: [behavior, vibes]"),
     "acceptance.required.1", "required"),
])
def test_task_yaml_errors_name_field_and_line(tmp_path: Path, edit: tuple[str, str],
                                              field: str, line_key: str) -> None:
    b = make_bundle(tmp_path / "b")
    text = (b / "task.yaml").read_text()
    assert edit[0] in text
    bad = text.replace(edit[0], edit[1], 1)
    (b / "task.yaml").write_text(bad)
    with pytest.raises(SuiteError) as info:
        load_bundle(b)
    [problem] = [p for p in info.value.problems if p.field == field]
    assert problem.line == _line_of(bad, line_key)
    res = run_cli(["task", "lint", str(b)])
    assert res.code == 2
    assert squash(f"task.yaml:{problem.line}: field '{field}'") in squash(res.stderr)
    res = run_cli(["trial", "run", str(b), "--agent", "nop", "--out", str(tmp_path / "t")])
    assert res.code == 2 and not (tmp_path / "t").exists()


def test_bundle_without_hidden_tests_or_command_is_refused(tmp_path: Path) -> None:
    b = make_bundle(tmp_path / "b")
    shutil.rmtree(b / "tests")
    text = (b / "task.yaml").read_text()
    (b / "task.yaml").write_text("\n".join(
        line for line in text.splitlines() if "regression: {command" not in line) + "\n")
    with pytest.raises(SuiteError) as info:
        load_bundle(b)
    fields = {p.field for p in info.value.problems}
    assert {"acceptance.behavior", "acceptance.regression"} <= fields


def test_starting_tree_must_not_contain_the_hidden_parts(tmp_path: Path) -> None:
    b = make_bundle(tmp_path / "b", pin_digest=False)
    (b / "task.yaml").write_text((b / "task.yaml").read_text().replace(
        "repository: repo", "repository: ."))
    with pytest.raises(SuiteError) as info:
        load_bundle(b)
    assert "initial_state.repository" in {p.field for p in info.value.problems}


# ----------------------------------------------------------------------------- task check

@needs_bwrap
def test_task_check_good_bundle(good_check: tuple[Any, Path]) -> None:
    res, out = good_check
    assert res.code == 0, (res.stdout, res.stderr)
    flat = squash(res.stdout)
    for col in ("task", "digest", "nop", "oracle", "mutantsrejected", "status"):
        assert col in flat
    assert "calc-001" in flat and "failsbehavior" in flat and "2/2" in flat
    assert f"{len(EXPECTED_MUTANT_CODES)}/{len(EXPECTED_MUTANT_CODES)}" in flat
    assert "GRADERDEFECT" not in flat
    [rep] = json.loads((out / "task-check.json").read_text())
    assert rep["status"] == "ok" and rep["digest"] == "ok" and rep["problems"] == []
    assert rep["nop"] == "fails behavior" and rep["oracle"] == "2/2"
    assert set(rep["mutants"]) == set(EXPECTED_MUTANT_CODES)
    for m, c in EXPECTED_MUTANT_CODES.items():
        assert rep["mutants"][m] in {f"rejected:{code}" for code in
                                     ((c,) if isinstance(c, str) else c)}, m
    for rep_no in ("0", "1"):
        assert grade_of(out / "calc-001" / "oracle" / rep_no)["accepted"] is True
    # the hang is judged against the trusted tree's own time, not the task's 30 s, and is
    # still the candidate's time-out under that limit (the verifier's own rule decided it)
    from assay.runner.task_check import HANG_FACTOR, HANG_FLOOR_SECONDS

    judged = rep["hang_judged"]["hang_at_import"]
    trusted = judged["trusted_seconds"]
    assert 0 < trusted < 7.5, judged
    assert judged["limit_seconds"] == max(HANG_FLOOR_SECONDS, HANG_FACTOR * trusted) < 30
    assert judged["said"] == "rejected:candidate_timeout" and "again_at_task_limit" not in judged
    hang = grade_of(out / "calc-001" / "mutant-hang_at_import" / "0")
    timeout = hang["details"]["behavior"]["timeout"]
    assert timeout["owner"] == "candidate", timeout
    assert trial_record(out / "calc-001" / "mutant-hang_at_import" / "0")["budget"][
        "verifier_wall_seconds"] == judged["limit_seconds"]
    # a line per finished trial on stderr, whole; the figures explained under the table
    total = 1 + 2 + len(EXPECTED_MUTANT_CODES)
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("[")]
    assert len(lines) == total and lines[-1].startswith(f"[{total}/{total}] "), res.stderr
    assert "ETA" in lines[0] and lines[-1].split(" · ")[1] == "calc-001"
    assert any(ln.endswith("· calc-001 · mutant hang_at_import: rejected:candidate_timeout")
               for ln in lines), lines
    assert "oracleN/2:thetask'sreferencesolution(solution/)wasacceptedinNof2runs" in \
        squash(res.stdout)


@needs_bwrap
def test_a_hang_not_blamed_at_the_short_limit_runs_again_at_the_tasks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A short limit never decides a verdict the task's own limit would not: with the hang's
    limit forced below what the trusted tree needs (0.3 s), the verifier cannot blame the
    candidate there (a grader error), so the mutant runs again under the task's 8 s and is
    rejected as the candidate's time-out. Costs about 3 CPU-seconds, 20 s of wall (sleeping)."""
    import assay.runner.task_check as task_check

    monkeypatch.setattr(task_check, "HANG_FACTOR", 0.01)
    monkeypatch.setattr(task_check, "HANG_FLOOR_SECONDS", 0.3)
    bundle = make_bundle(tmp_path / "b", task_id="calc-hang", verifier_seconds=8)
    out = tmp_path / "check"
    res = run_cli(["task", "check", str(bundle), "--reruns", "1", "--mutant", "hang_at_import",
                   "--out", str(out)])
    assert res.code == 0, (res.stdout, res.stderr)
    [rep] = json.loads((out / "task-check.json").read_text())
    judged = rep["hang_judged"]["hang_at_import"]
    assert judged["limit_seconds"] == 0.3 and judged["task_limit_seconds"] == 8
    assert judged["said"].startswith("grader_error"), judged
    assert judged["again_at_task_limit"] == "rejected:candidate_timeout"
    assert rep["mutants"]["hang_at_import"] == "rejected:candidate_timeout"
    assert rep["status"] == "ok" and rep["problems"] == []
    again = out / "calc-hang" / "mutant-hang_at_import" / "1"
    assert trial_record(again)["budget"]["verifier_wall_seconds"] == 8


@needs_bwrap
def test_task_check_broken_bundles(tmp_path: Path) -> None:
    wrong = make_bundle(tmp_path / "wrong", task_id="calc-wrong", solve_patch=WRONG_PATCH)
    easy = make_bundle(tmp_path / "easy", task_id="calc-easy",
                       hidden_tests=HIDDEN_TESTS_ALREADY_PASSING)
    moved = make_bundle(tmp_path / "moved", task_id="calc-moved")
    (moved / "repo" / "README.md").write_text("added after the digest was pinned\n")
    out = tmp_path / "check"
    res = run_cli(["task", "check", str(wrong), str(easy), str(moved), "--reruns", "1",
                   "--out", str(out)])
    assert res.code == 1
    reports = {r["task"]: r for r in json.loads((out / "task-check.json").read_text())}
    assert {t: r["status"] for t, r in reports.items()} == {
        "calc-wrong": "broken", "calc-easy": "broken", "calc-moved": "broken"}
    assert reports["calc-wrong"]["oracle"] == "0/1"
    assert reports["calc-wrong"]["problems"][0] == "oracle never accepted"
    assert reports["calc-wrong"]["nop"] == "fails behavior"
    assert reports["calc-easy"]["oracle"] == "1/1"
    assert any("nop does not fail behavior" in p for p in reports["calc-easy"]["problems"])
    assert reports["calc-moved"]["digest"] == "mismatch"
    assert any("digest" in p for p in reports["calc-moved"]["problems"])
    flat = squash(res.stdout)
    assert flat.count("broken") >= 3
    assert "nopdoesnotfailbehavior" in flat and "mismatch" in flat


def test_task_check_reports_flaky_and_grader_defects(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The table and exit code from canned trial results (real trials cannot be made flaky
    on demand): a sometimes-accepted oracle is flaky, an accepted mutant is a GRADER DEFECT."""
    import assay.runner.task_check as task_check

    if not bwrap_available():
        pytest.skip("task check refuses to start without bubblewrap")
    flaky = make_bundle(tmp_path / "flaky", task_id="calc-flaky")
    defect = make_bundle(tmp_path / "defect", task_id="calc-defect")

    def fake_run_trial(b: Any, agent: Any, trial_dir: Path, *, rep: int = 0) -> TrialResult:
        accepted = {"nop": False, "oracle": b.id == "calc-defect" or rep == 0,
                    "mutant:no_change": b.id == "calc-defect"}.get(agent.name, False)
        grade = Grade(schema=Grade.schema_id(), trial_id=f"{b.id}/{agent.name}/{rep}",
                      execution={}, validity=Validity(status="valid"),
                      checks={"behavior": "pass" if accepted else "fail"},
                      required=["behavior"], accepted=accepted,
                      failure_code=None if accepted else "behavior_failed",
                      details=GradeDetails(verifier_revision="v1", task_revision=1,
                                           task_spec_sha256=b.spec_sha256,
                                           started_at="2026-01-01T00:00:00Z"))
        return TrialResult(trial_dir, "graded", grade, None)

    monkeypatch.setattr(task_check, "run_trial", fake_run_trial)
    out = tmp_path / "check"
    res = run_cli(["task", "check", str(flaky), str(defect), "--reruns", "2", "--mutants",
                   "--out", str(out)])
    assert res.code == 1
    reports = {r["task"]: r for r in json.loads((out / "task-check.json").read_text())}
    assert reports["calc-flaky"]["status"] == "flaky"
    assert reports["calc-flaky"]["oracle"] == "1/2" and reports["calc-flaky"]["problems"] == []
    assert reports["calc-defect"]["status"] == "GRADER DEFECT"
    assert reports["calc-defect"]["mutants"]["no_change"] == "ACCEPTED"
    flat = squash(res.stdout)
    assert "flaky" in flat
    assert "GRADERDEFECT:calc-defect:mutantno_changewasACCEPTED" in flat


def test_only_required_checks_can_reject() -> None:
    """A task that does not require integrity is judged on what it requires; one that does is
    rejected by an integrity failure even when every test passes."""
    from assay.grading.verify.verifier import _first_failure

    ok = Validity(status="valid")
    checks = {"behavior": "pass", "regression": "pass", "integrity": "fail"}
    assert _first_failure(ok, "succeeded", checks, {"behavior", "regression"},
                          "protected_file_changed", changed=True) is None
    assert _first_failure(ok, "succeeded", checks, {"behavior", "regression", "integrity"},
                          "protected_file_changed", changed=True) == "protected_file_changed"
    assert _first_failure(ok, "agent_timeout", checks, {"behavior"}, None,
                          changed=True) == "agent_timeout"
    assert _first_failure(Validity(status="invalid"), "succeeded", checks, {"behavior"}, None,
                          changed=True) == "verifier_error"
    assert _first_failure(ok, "exited_nonzero", {**checks, "behavior": "fail"}, {"behavior"},
                          None, changed=True) == "behavior_failed"
    assert _first_failure(ok, "succeeded", {"behavior": "fail"}, {"behavior"}, None,
                          changed=False) == "no_change"
