"""Issue 19's verifier half, through the real sandbox and the real pytest: derived canaries that a
canary-aware no-op cannot tell from the real tests, pytest's own modules resolved before the
deliverable's, a hang of the candidate's code graded as its failure (``candidate_timeout``), and
bytecode that never stands in for a source. Each attack is rejected with its code; the genuine
fix is still accepted. The pure parts (making, validating and drawing copies) are tested on
text first."""

from __future__ import annotations

import ast
import random
import re
from pathlib import Path
from typing import Any

import pytest
from support.bundles import make_bundle

from assay.agents import parse_agent
from assay.agents.mutants import BY_NAME, MutantAgent
from assay.grading.verify import check_run
from assay.grading.verify.canary_derive import NAME_SLOT, Mutation, derive, draw, top_level_tests
from assay.grading.verify.test_report import check_verdict
from assay.records.trial import Grade
from assay.runner.trial import run_trial
from assay.sandbox import bwrap_available
from assay.suites.bundle import load_bundle

needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")

FIX = "command:sed -i 's/return a - b/return a + b/' src/calc/__init__.py"

SAMPLE = '''\
import pytest

from calc import add

CASES = [(1, 2, 3), (2, 2, 4)]


def test_small():
    # a comment the copy keeps
    assert add(2, 3) == 5


@pytest.mark.parametrize("a, b, total", CASES)
def test_cases(a, b, total):
    assert add(a, b) == total


def test_truthy():
    assert add(1, 1)


def test_rejects():
    with pytest.raises(TypeError):
        add(None, 1)


def helper():
    return 1
'''


def _grade(bundle_dir: Path, agent: Any, out: Path) -> Grade:
    res = run_trial(load_bundle(bundle_dir), agent, out)
    assert res.grade is not None, res.record
    return res.grade


# ------------------------------------------------------------------ making copies (pure)

def test_copies_keep_the_text_and_change_one_assertion() -> None:
    made = derive(SAMPLE, seed=7)
    assert {m.origin for m in made} == {"test_small", "test_cases", "test_truthy",
                                        "test_rejects"}
    kinds = {(m.origin, m.kind) for m in made}
    assert ("test_small", "operator") in kinds or ("test_small", "value") in kinds
    assert ("test_truthy", "truth") in kinds and ("test_rejects", "exception") in kinds
    for m in made:
        body = m.source.replace(NAME_SLOT, "test_x")
        fn = top_level_tests(ast.parse(body))[0]
        original = next(f for f in top_level_tests(ast.parse(SAMPLE)) if f.name == m.origin)
        # same statements but one, and the formatting (the comment) kept
        assert ast.dump(fn) != ast.dump(original).replace(f"'{m.origin}'", "'test_x'")
        if m.origin == "test_small":
            assert "# a comment the copy keeps" in body
        if m.kind == "exception":
            # an unrelated built-in: a candidate cannot pass both
            assert "raises(TypeError)" not in body and re.search(r"raises\(\w+Error\)", body)


def test_a_draw_is_one_copy_per_test_placed_on_both_sides_and_new_each_time() -> None:
    pool = [Mutation(m.origin, m.kind, m.source, ("",)) for m in derive(SAMPLE, seed=7)]
    texts, names = set(), set()
    for seed in range(12):
        new, chosen = draw(SAMPLE, pool, random.Random(seed))
        compile(new, "test_sample.py", "exec")
        tree = ast.parse(new)
        order = [f.name for f in top_level_tests(tree)]
        assert sorted(m.origin for _, m in chosen) == sorted(
            {m.origin for m in pool})  # one copy per original, no more
        before = [order.index(n) < order.index(m.origin) for n, m in chosen]
        assert any(before) and not all(before)  # no rule by position sorts them
        for name, _m in chosen:
            assert name.startswith("test_") and name not in SAMPLE
            # drawn from the file's own words
            assert set(name.split("_")[1:]) <= {"small", "cases", "truthy", "rejects", "value",
                                                "input", "case", "result", "basic", "simple",
                                                "mixed", "other"}
        texts.add(new)
        names |= {n for n, _ in chosen}
    assert len(texts) == 12 and len(names) > 8


def test_judge_reads_a_copy_and_its_original_together() -> None:
    import json

    from assay.grading.verify.canaries import Canary

    start = json.dumps({"event": "start", "schema": "assay.pytest_report/1"})
    finish = json.dumps({"event": "finish", "exitstatus": 1})

    def t(name: str, outcome: str) -> str:
        return json.dumps({"event": "test", "nodeid": f"test_f.py::{name}", "when": "call",
                           "outcome": outcome})

    c = Canary("test_b", "tests/test_f.py", "fail", kind="derived", origin="test_a",
               change="value", items=("",))
    honest = "\n".join([start, t("test_a", "passed"), t("test_b", "failed"), finish])
    v = check_verdict(honest, exit_code=1, canaries=[c], expected_ids=["test_f.py::test_a"],
              summary=None)
    assert v["status"] == "pass" and v["canary_counts"] == {"random": 0, "derived": 1}
    both = honest.replace('"test_f.py::test_b", "when": "call", "outcome": "failed"',
                          '"test_f.py::test_b", "when": "call", "outcome": "passed"')
    v = check_verdict(both, exit_code=0, canaries=[c], expected_ids=None, summary=None)
    assert v["status"] == "tampered" and "derived canary test_b" in v["tampered"][0]
    # a wrong answer that happens to satisfy the copy is a failed test, not tampering
    wrong = "\n".join([start, t("test_a", "failed"), t("test_b", "passed"), finish])
    v = check_verdict(wrong, exit_code=1, canaries=[c], expected_ids=None, summary=None)
    assert v["status"] == "fail" and v["tampered"] == []


def test_the_guard_and_the_host_agree_on_the_runner_modules() -> None:
    tree = ast.parse(Path(check_run.__file__).with_name("pytest_boot.py").read_text())
    found = next(n.value for n in tree.body if isinstance(n, ast.Assign)
                 and getattr(n.targets[0], "id", "") == "RUNNER_MODULES")
    assert set(ast.literal_eval(found.args[0])) == set(check_run.RUNNER_MODULES)


# ------------------------------------------------------------------ attacks, real sandbox

@needs_bwrap
def test_canary_aware_noops_are_rejected_and_the_fix_is_accepted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSAY_CACHE_DIR", str(tmp_path / "cache"))
    b = make_bundle(tmp_path / "b")
    good = _grade(b, parse_agent(FIX), tmp_path / "good")
    assert good.accepted is True, good.failure_code
    te = good.details.behavior["tamper_evident"]
    assert te["canary_counts"]["derived"] == 3 and te["derived_pool"]["dropped"] >= 0

    # the attack: random-shape canaries left to fail, everything else a no-op; each
    # derived copy is a no-op too and "passes" beside its passing original
    g = _grade(b, MutantAgent(BY_NAME["shape_aware_noop"]), tmp_path / "shape")
    assert g.failure_code == "test_runner_tampered"
    evidence = next(p for p in g.details.integrity.problems
                    if p["code"] == "test_runner_tampered")["evidence"]
    assert any("derived canary" in e for e in evidence), evidence

    # written against the derived canaries: pairs that differ only in what they assert are
    # found, and the later one of each is taken for the copy. At least one copy sits before its
    # original, so that original runs for real and fails (or a copy passes beside it)
    g = _grade(b, MutantAgent(BY_NAME["twin_aware_noop"]), tmp_path / "twin")
    assert g.accepted is False
    assert g.failure_code in ("behavior_failed", "test_runner_tampered"), g.failure_code
    beh = g.details.behavior["tamper_evident"]
    random_fail = [c for c in beh["canaries"] if c["kind"] == "random" and c["must"] == "fail"]
    assert random_fail and random_fail[0]["outcome"] == "failed"  # those alone were fooled
    assert beh["failed_ids"] or any("derived canary" in t for t in beh["tampered"])

    # the same attack is accepted when no derived canary is planted: they are what stop it
    from assay.grading.verify import verifier

    monkeypatch.setattr(verifier, "derived_plan", lambda trusted, seed: None)
    g = _grade(b, MutantAgent(BY_NAME["shape_aware_noop"]), tmp_path / "undefended")
    assert g.accepted is True
    assert g.details.behavior["tamper_evident"]["canary_counts"]["derived"] == 0


@needs_bwrap
def test_each_verification_draws_its_own_canaries(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from assay.grading.verify.verifier import verify

    monkeypatch.setenv("ASSAY_CACHE_DIR", str(tmp_path / "cache"))
    b = make_bundle(tmp_path / "b")
    first = _grade(b, parse_agent(FIX), tmp_path / "t")
    again = verify(load_bundle(b), tmp_path / "t", revision="v1.r2", trial_id="t",
                   execution={"status": "succeeded"})
    one, two = (g.details.behavior["tamper_evident"] for g in (first, again))
    assert one["derived_seed"] != two["derived_seed"]
    assert {c["name"] for c in one["canaries"]} != {c["name"] for c in two["canaries"]}
    assert again.accepted is True


@needs_bwrap
def test_a_package_named_like_a_pytest_dependency_is_shadowed_and_reported(
        tmp_path: Path) -> None:
    b = make_bundle(tmp_path / "b")
    g = _grade(b, MutantAgent(BY_NAME["runner_dep_shadow"]), tmp_path / "attack")
    # refused by integrity (issue 32), and never imported: the tests ran against the unfixed
    # code without the candidate's iniconfig
    assert g.failure_code == "stdlib_shadowed"
    assert "src/iniconfig" in g.details.runner_modules_shadowed
    assert g.checks["behavior"] == "fail"
    for n in ("behavior", "regression"):
        assert "candidate iniconfig imported" not in getattr(g.details, n)["stderr_tail"]
    # (a src/_pytest/ or sitecustomize.py is refused earlier, by integrity: test tooling)
    beside_fix = (FIX + "; mkdir -p src/iniconfig src/pluggy; echo 'x = 1' > src/iniconfig/"
                  "__init__.py; echo 'raise SystemExit(3)' > src/pluggy/__init__.py")
    g = _grade(b, parse_agent(beside_fix), tmp_path / "fix")
    assert g.failure_code == "stdlib_shadowed" and g.checks["behavior"] == "pass"
    assert {p["path"] for p in g.details.integrity.problems} == {"src/iniconfig", "src/pluggy"}
    assert set(g.details.runner_modules_shadowed) == {"src/iniconfig", "src/pluggy"}


HANG_SECONDS = 8.0

FIXTURE_TESTS = '''\
import pytest

from calc import add


@pytest.fixture
def zero():
    return add(0, 0)


def test_add_small(zero):
    assert add(2, 3) + zero == 5


def test_add_negative():
    assert add(-1, -1) == -2
'''
FIXTURE_PATCH_LINES = ("diff --git a/src/calc/__init__.py b/src/calc/__init__.py\n"
                       "--- a/src/calc/__init__.py\n+++ b/src/calc/__init__.py\n"
                       "@@ -2,7 +2,7 @@\n \n \n def add(a, b):\n-    return a - b\n"
                       "+    return a + b\n \n \n def mul(a, b):\n")


def _candidate(body: str) -> str:
    """A command agent that writes ``calc/__init__.py`` with ``body`` for ``add``."""
    src = ('import time\\n\\n\\ndef add(a, b):\\n' + body +
           '\\n\\n\\ndef mul(a, b):\\n    return a * b\\n')
    return f"command:printf '{src}' > src/calc/__init__.py"


@needs_bwrap
@pytest.mark.parametrize("where", ["import", "test", "fixture"])
def test_a_hanging_candidate_fails_with_candidate_timeout(where: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setenv("ASSAY_CACHE_DIR", str(tmp_path / "cache"))
    if where == "fixture":
        b = make_bundle(tmp_path / "b", verifier_seconds=HANG_SECONDS,
                        hidden_tests=FIXTURE_TESTS, solve_patch=FIXTURE_PATCH_LINES)
        # hangs only for the fixture's add(0, 0); every test's own call would pass
        agent = parse_agent(_candidate("    while (a, b) == (0, 0):\\n        time.sleep(1)"
                                       "\\n    return a + b"))
    elif where == "test":
        b = make_bundle(tmp_path / "b", verifier_seconds=HANG_SECONDS)
        agent = parse_agent(_candidate("    while True:\\n        time.sleep(1)"))
    else:
        b = make_bundle(tmp_path / "b", verifier_seconds=HANG_SECONDS)
        agent = MutantAgent(BY_NAME["hang_at_import"])
    g = _grade(b, agent, tmp_path / "t")
    assert g.validity.status == "valid", g.validity  # graded, not a grader error
    assert g.accepted is False and g.failure_code == "candidate_timeout"
    beh = g.details.behavior
    assert beh["status"] == "fail" and beh["failure"] == "candidate_timeout"
    assert beh["reason"] == "timeout" and beh["timeout"]["owner"] == "candidate"
    assert beh["timeout"]["trusted_run"]["wall_seconds"] < HANG_SECONDS / 2
    assert beh["tamper_evident"]["tampered"] == []  # a run cut short is not tampering
    if where == "import":
        assert g.details.regression["failure"] == "candidate_timeout"
    else:
        assert g.checks["regression"] == "pass"


@needs_bwrap
def test_bytecode_never_stands_in_for_a_deleted_source(tmp_path: Path) -> None:
    b = make_bundle(tmp_path / "b")
    g = _grade(b, MutantAgent(BY_NAME["sourceless_bytecode"]), tmp_path / "t1")
    assert g.failure_code == "compiled_code_added"
    assert any(p["code"] == "compiled_code_added" and p["path"] == "src/calc/__init__.pyc"
               for p in g.details.integrity.problems)

    # even where the task lets .pyc files through, the verifier never loads one: the package
    # has no source left, so the tests cannot even import it
    allowed = make_bundle(tmp_path / "allowed")
    p = allowed / "task.yaml"
    p.write_text(p.read_text().replace('  allowed_paths: ["src/**"]', '  allowed_paths: '
                                       '["src/**"]\n  allowed_binaries: ["**/*.pyc"]'))
    g = _grade(allowed, MutantAgent(BY_NAME["sourceless_bytecode"]), tmp_path / "t2")
    assert g.checks["integrity"] == "pass" and g.accepted is False
    assert g.failure_code == "behavior_failed"
    assert "src/calc/__init__.pyc" in g.details.behavior["bytecode_removed"]
    beh = g.details.behavior
    assert beh["counts"]["passed"] == 0 and beh["counts"]["errors"] >= 1


@needs_bwrap
def test_a_candidate_timeout_counts_as_a_failure_and_is_not_verified_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the experiment runner: the hanging arm's trial is graded (in the denominator, as a
    failure), the run completes, and a resume leaves it alone (no second grade)."""
    import json
    import sqlite3

    from conftest import run_cli

    from assay.suites.bundle import set_fixture_digest, tree_digest

    monkeypatch.setenv("ASSAY_CACHE_DIR", str(tmp_path / "cache"))
    bundle = make_bundle(tmp_path / "tasks" / "calc", verifier_seconds=HANG_SECONDS)
    set_fixture_digest(bundle, tree_digest(bundle / "repo"))
    hang = _candidate("    while True:\\n        time.sleep(1)")
    exp = tmp_path / "experiment.yaml"
    exp.write_text(f"""name: hang-ab
tasks: [tasks]
repetitions: 1
seed: 3
concurrency: 2
arms:
  hangs:
    agent: {json.dumps(hang)}
  fixes:
    agent: {json.dumps(FIX)}
""")
    out = tmp_path / "run"
    res = run_cli(["exp", "run", str(exp), "--out", str(out)])
    assert res.code == 0, res.stderr
    rep = json.loads((out / "report.json").read_text())
    assert rep["arms"]["hangs"]["graded"] == 1 and rep["arms"]["hangs"]["accepted"] == 0
    assert rep["arms"]["hangs"]["failure_codes"] == {"candidate_timeout": 1}
    assert rep["arms"]["fixes"]["accepted"] == 1
    assert run_cli(["exp", "run", str(exp), "--out", str(out)]).code == 0
    grades = sorted(p.name for p in out.glob("trials/calc-001/hangs/0/a1/grades/*.json"))
    assert grades == ["v1.json"]  # never verified again
    with sqlite3.connect(out / "state.sqlite") as c:
        states = dict(c.execute("SELECT t.arm, a.state FROM attempts a JOIN trials t "
                                "ON t.id = a.trial"))
    assert states == {"hangs": "done", "fixes": "done"}


RUNTIME_PYC_INIT = '''\
import importlib.util
import marshal
import os
import struct

# Bytecode for helper.py, written while the check runs, with a header that matches the source:
# Python's own import would run it instead of the (unfixed) source beside it.
_src = os.path.join(os.path.dirname(__file__), "helper.py")
_st = os.stat(_src)
_code = compile("def add(a, b):\\n    return a + b\\n", _src, "exec")
_pyc = importlib.util.cache_from_source(_src)
os.makedirs(os.path.dirname(_pyc), exist_ok=True)
with open(_pyc, "wb") as _fh:
    _fh.write(importlib.util.MAGIC_NUMBER + struct.pack(
        "<III", 0, int(_st.st_mtime) & 0xFFFFFFFF, _st.st_size & 0xFFFFFFFF)
        + marshal.dumps(_code))

from calc.helper import add  # noqa: E402


def mul(a, b):
    return a * b
'''


@needs_bwrap
def test_bytecode_written_while_the_check_runs_is_never_loaded(tmp_path: Path) -> None:
    import base64
    import os
    import shutil
    import subprocess
    import sys

    files = {"src/calc/__init__.py": RUNTIME_PYC_INIT,
             "src/calc/helper.py": "def add(a, b):\n    return a - b\n"}
    script = "".join(f"open({k!r}, 'w').write({v!r})\n" for k, v in files.items())
    agent = parse_agent("command:python3 -c \"import base64; exec(base64.b64decode('"
                        + base64.b64encode(script.encode()).decode() + "'))\"")
    b = make_bundle(tmp_path / "b")
    g = _grade(b, agent, tmp_path / "t")
    assert g.checks["integrity"] == "pass"
    assert g.failure_code == "behavior_failed"  # the source's add ran: a - b
    beh = g.details.behavior
    assert beh["counts"]["failed"] == 3 and beh["counts"]["errors"] == 0, beh["stdout_tail"]
    # the same tree, imported twice by a plain interpreter: the second import runs the bytecode
    # the first one wrote, and the unfixed source "works"
    plain = tmp_path / "plain"
    shutil.copytree(b / "repo", plain)
    for rel, text in files.items():
        (plain / rel).write_text(text)
    env = {**os.environ, "PYTHONPATH": "src", "PYTHONDONTWRITEBYTECODE": "1"}
    probe = [sys.executable, "-c", "import calc; print(calc.add(2, 3))"]
    subprocess.run(probe, cwd=plain, env=env, capture_output=True, check=True)
    out = subprocess.run(probe, cwd=plain, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "5"


def test_the_verifiers_parses_are_safe_in_several_threads() -> None:
    """CPython 3.11 before 3.11.8 raises "SystemError: AST constructor recursion depth mismatch"
    when two threads run ``ast.parse`` at once, which the runner's parallel verifications did
    (seen in a Ray run: the derived canaries' draw failed and the attempt with it). Every parse
    of the verifier goes through one lock; many threads parsing deep sources at once all
    succeed."""
    import threading

    from assay.grading.verify.canaries import parse_python

    source = "def f(x):\n" + "".join(f"    {'  ' * i}if x > {i}:\n" for i in range(40)) + \
        "    " + "  " * 40 + "return x\n"
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(30):
                parse_python(source)
        except BaseException as exc:  # noqa: BLE001 - the test reports whatever it was
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
