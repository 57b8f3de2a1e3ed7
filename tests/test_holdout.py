"""The holdout ledger with real ``exp run`` sessions (real sandboxes, the oracle and nop agents,
the real verifier), the allowance and its policy file, a torn ledger line, and ``task lint``'s
warnings for one task in two splits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_cli
from support.bundles import make_bundle

from assay.errors import HoldoutExhausted, InputError, SuiteError
from assay.records.holdout import append_look, ledger_path, locked, read_looks
from assay.report.holdout import holdout_summary
from assay.runner.holdout import holdout_gate, record_shown
from assay.sandbox import bwrap_available
from assay.suites.bundle import set_fixture_digest, tree_digest
from assay.suites.experiment import load_experiment

needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")
REPO_SRC = Path(__file__).resolve().parents[1] / "src"


def _holdout_tasks(root: Path, ids: tuple[str, ...] = ("calc-001",)) -> Path:
    """A folder of holdout bundles (the ledger goes in ``<folder>/.assay/``)."""
    folder = root / "tasks"
    for tid in ids:
        make_bundle(folder / tid, task_id=tid, split="holdout")
    return folder


def _experiment(root: Path, name: str, candidate_params: dict[str, int] | None = None,
                split: str = "holdout", bar: bool = False) -> Path:
    path = root / f"{name}.yaml"
    params = f"\n    params: {json.dumps(candidate_params)}" if candidate_params else ""
    path.write_text(f"""name: {name}
tasks: [tasks]
select: {{split: {split}}}
arms:
  base:
    agent: nop
  cand:
    agent: oracle{params}
""" + ("bar: {hoped_improvement: 0.2, max_regression: 0.05}\n" if bar else ""))
    return path


def _norm(text: str) -> str:
    return " ".join(text.split())


def _report(run: Path) -> dict:
    return json.loads((run / "report.json").read_text())


@needs_bwrap
def test_holdout_ledger_across_three_runs(tmp_path: Path) -> None:
    folder = _holdout_tasks(tmp_path)
    ledger = ledger_path(folder)
    exp1 = _experiment(tmp_path, "first")
    run1, run2, run3 = (tmp_path / f"run{i}" for i in (1, 2, 3))

    # run 1: the first look, written down before the first trial; its verdicts were shown
    res = run_cli(["exp", "run", str(exp1), "--out", str(run1)])
    assert res.code == 0, res.stderr
    assert "look 1 (allowance 1)" in _norm(res.stderr)
    rows = read_looks(ledger)
    assert [r.event for r in rows] == ["run", "shown"]
    first = rows[0]
    assert first.run_dir == str(run1.resolve()) and first.experiment == "first"
    assert first.tasks == ["calc-001"] and first.shown is False and first.host
    assert set(first.arms) == {"base", "cand"}
    assert first.arms["cand"].identity["agent"] == "oracle"
    manifest = json.loads((run1 / "manifest.json").read_text())
    assert first.experiment_identity_sha256 == manifest["identity_sha256"]
    assert first.arms["cand"].identity == manifest["identity"]["arms"]["cand"]
    assert manifest["sessions"][-1]["holdout_reuse"] is False
    assert rows[1].command == "exp run" and rows[1].shown is True
    h = _report(run1)["holdout"]
    assert h == {"tasks": 1, "looks": 1, "max_looks": 1, "reused": False,
                 "ledger": str(ledger),
                 "by": [{"when": first.when, "who": f"{first.user}@{first.host}",
                         "experiment": "first",
                         "arms": {n: a.sha256 for n, a in sorted(first.arms.items())}}]}
    assert "holdout: 1 task looked at 1 time" in (run1 / "report.md").read_text()

    # resuming run 1 is the same look: another session row, no new look, not refused
    res = run_cli(["exp", "run", str(exp1), "--out", str(run1)])
    assert res.code == 0, res.stderr
    assert "resuming look 1" in _norm(res.stderr)
    assert [r.event for r in read_looks(ledger)].count("run") == 2
    assert _report(run1)["holdout"]["looks"] == 1

    # run 2, a different candidate: refused through the real entry point, naming look 1
    exp2 = _experiment(tmp_path, "second", {"version": 2}, bar=True)
    env = {**os.environ, "PYTHONPATH": str(REPO_SRC)}
    proc = subprocess.run([sys.executable, "-m", "assay", "exp", "run", str(exp2), "--out",
                           str(run2)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    msg = _norm(proc.stderr)
    assert "would be look 2" in msg and "look 1" in msg and "experiment first" in msg
    assert str(run1.resolve()) in msg and "--holdout-reuse" in msg
    assert not run2.exists(), "a refused look must leave nothing behind"
    assert len(read_looks(ledger)) == 3

    # ... and with --holdout-reuse it goes on, warns, and its report calls the set reused
    res = run_cli(["exp", "run", str(exp2), "--out", str(run2), "--holdout-reuse"])
    assert res.code == 0, res.stderr
    err = _norm(res.stderr)
    assert "warning: holdout: a different candidate" in err and "arm cand" in err
    assert "warning: holdout: past the allowance of 1" in err
    h2 = _report(run2)["holdout"]
    assert h2["looks"] == 2 and h2["reused"] is True and h2["max_looks"] == 1
    assert [b["experiment"] for b in h2["by"]] == ["first", "second"]
    assert h2["by"][0]["arms"]["cand"] != h2["by"][1]["arms"]["cand"]
    assert h2["by"][0]["arms"]["base"] == h2["by"][1]["arms"]["base"]
    assert "**reused**" in (run2 / "report.md").read_text()
    m2 = json.loads((run2 / "manifest.json").read_text())
    assert m2["sessions"][-1]["holdout_reuse"] is True
    assert read_looks(ledger)[-2].holdout_reuse is True
    # every verdict, comparison and report resting on it says so on its first line
    first = "HOLDOUT REUSED: this rests on a holdout looked at 2 times (allowance 1)"
    assert (run2 / "report.md").read_text().splitlines()[0] == f"**{first}" + (
        "; earlier results on it may have steered which candidate is measured here, so it is "
        "not an unbiased estimate**")
    html = (run2 / "report.html").read_text()
    assert first in html and html.index(first) < html.index("<header>")
    res = run_cli(["exp", "compare", str(run2)])
    assert res.code == 0 and res.stdout.splitlines()[0].startswith(first), res.stderr
    res = run_cli(["exp", "report", str(run2)])  # rendered Markdown: it may wrap
    assert res.code == 0 and first in _norm(" ".join(res.stdout.strip().splitlines()[:3]))
    res = run_cli(["exp", "verdict", str(run2)])
    assert res.code in (0, 1, 4), res.stderr
    assert res.stdout.splitlines()[0].startswith(first)
    res = run_cli(["exp", "verdict", str(run2), "--json"])
    assert json.loads(res.stdout)["holdout_reused"].startswith(first)
    v = run_cli(["exp", "compare", str(run2), "--json"])
    assert json.loads(v.stdout)["holdout"]["reused"] is True

    # run 1's report, rebuilt from disk, now counts the second look too; showing it is recorded
    res = run_cli(["exp", "report", str(run1)])
    assert res.code == 0, res.stderr
    assert _report(run1)["holdout"]["looks"] == 2 and _report(run1)["holdout"]["reused"]
    last = read_looks(ledger)[-1]
    assert (last.event, last.command, last.run_dir) == ("shown", "exp report",
                                                        str(run1.resolve()))

    # run 3 is counted as well: refused naming both earlier looks, then taken with the flag
    exp3 = _experiment(tmp_path, "third", {"version": 3})
    res = run_cli(["exp", "run", str(exp3), "--out", str(run3)])
    assert res.code == 2
    msg = _norm(res.stderr)
    assert "would be look 3" in msg and "experiment first" in msg and "experiment second" in msg
    res = run_cli(["exp", "run", str(exp3), "--out", str(run3), "--holdout-reuse"])
    assert res.code == 0, res.stderr
    h3 = _report(run3)["holdout"]
    assert h3["looks"] == 3 and h3["reused"] is True
    assert [b["experiment"] for b in h3["by"]] == ["first", "second", "third"]


def test_a_torn_last_ledger_line_is_tolerated(tmp_path: Path) -> None:
    folder = _holdout_tasks(tmp_path)
    exp = load_experiment(_experiment(tmp_path, "first"))
    notes: list[str] = []
    gate = holdout_gate(exp, tmp_path / "run1", note=notes.append)
    assert gate is not None
    entry = gate.record()
    ledger = ledger_path(folder)
    complete = ledger.read_bytes()
    with open(ledger, "ab") as fh:  # a write cut short by a crash
        fh.write(b'{"schema":"assay.holdout.look/1","when":"2026-')
    assert len(read_looks(ledger)) == 1, "the torn line is skipped, not an error"
    # the summary reads past it...
    (tmp_path / "run1" / "manifest.json").parent.mkdir()
    (tmp_path / "run1" / "manifest.json").write_text(json.dumps({
        "name": "first", "identity": exp.identity, "created_at": "2026-12-01T00:00:00.000Z",
        "holdout": entry}))
    summary = holdout_summary(tmp_path / "run1")
    assert summary is not None and summary["looks"] == 1
    # ...and the next append cuts it off, so the new row is a line of its own
    assert record_shown(tmp_path / "run1", command="test")
    data = ledger.read_bytes()
    assert data.startswith(complete)
    assert all(json.loads(line) for line in data.splitlines())
    assert [r.event for r in read_looks(ledger)] == ["run", "shown"]
    # a resumed session says so, and the note names the torn line it found
    with open(ledger, "ab") as fh:
        fh.write(b'{"torn')
    holdout_gate(exp, tmp_path / "run1", note=notes.append).record()  # type: ignore[union-attr]
    assert any("torn line" in n for n in notes) and any("resuming look 1" in n for n in notes)
    assert len(read_looks(ledger)) == 3


def test_the_allowance_comes_from_the_policy_file_beside_the_ledger(tmp_path: Path) -> None:
    folder = _holdout_tasks(tmp_path)
    exp = load_experiment(_experiment(tmp_path, "first"))
    holdout_gate(exp, tmp_path / "r1").record()  # type: ignore[union-attr]
    with pytest.raises(HoldoutExhausted, match="would be look 2") as info:
        holdout_gate(exp, tmp_path / "r2")
    assert isinstance(info.value, InputError)
    (folder / ".assay" / "holdout.yaml").write_text("max_looks: 2\n")
    notes: list[str] = []
    holdout_gate(exp, tmp_path / "r2", note=notes.append).record()  # type: ignore[union-attr]
    assert any("look 2 (allowance 2)" in n for n in notes)
    assert not any("warning" in n for n in notes), "the same candidate, within the allowance"
    with pytest.raises(HoldoutExhausted, match="allowance is 2"):
        holdout_gate(exp, tmp_path / "r3")
    (folder / ".assay" / "holdout.yaml").write_text("max_looks: 0\n")
    with pytest.raises(SuiteError, match="max_looks"):
        holdout_gate(exp, tmp_path / "r3")


RACER = """
import sys
from pathlib import Path
from assay.errors import HoldoutExhausted
from assay.runner.holdout import holdout_gate
from assay.suites.experiment import load_experiment
gate = holdout_gate(load_experiment(Path(sys.argv[1])), Path(sys.argv[2]))
print("preflight passed", flush=True)
try:
    gate.record()
except HoldoutExhausted as exc:
    print("refused:", exc, flush=True)
    sys.exit(2)
print("recorded", flush=True)
"""


def test_two_runs_racing_for_the_last_look_cannot_both_take_it(tmp_path: Path) -> None:
    folder = _holdout_tasks(tmp_path)
    path = _experiment(tmp_path, "first")
    ledger = ledger_path(folder)
    mine = holdout_gate(load_experiment(path), tmp_path / "run-a")
    assert mine is not None
    env = {**os.environ, "PYTHONPATH": str(REPO_SRC)}
    with locked([ledger]):
        # the other run passes its preflight (the ledger is still empty) and waits on the lock
        other = subprocess.Popen([sys.executable, "-c", RACER, str(path), str(tmp_path / "run-b")],
                                 stdout=subprocess.PIPE, text=True, env=env)
        try:
            assert other.stdout is not None
            assert other.stdout.readline().strip() == "preflight passed"
            time.sleep(0.5)
            assert other.poll() is None, "the second run did not wait for the ledger's lock"
            append_look(ledger, mine.run_row())
        except BaseException:
            other.kill()
            raise
    rest = other.communicate(timeout=60)[0]
    assert other.returncode == 2 and "would be look 2" in rest, rest
    assert [r.run_dir for r in read_looks(ledger)] == [str((tmp_path / "run-a").resolve())]


def test_a_run_without_holdout_tasks_keeps_no_ledger(tmp_path: Path) -> None:
    make_bundle(tmp_path / "tasks" / "calc-001")  # split: dev
    exp = load_experiment(_experiment(tmp_path, "dev-only", split="dev"))
    assert holdout_gate(exp, tmp_path / "run") is None
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "manifest.json").write_text(json.dumps({"name": "dev-only"}))
    assert holdout_summary(tmp_path / "run") is None
    assert record_shown(tmp_path / "run") is False
    outcomes = tmp_path / "outcomes.jsonl"  # exp compare also takes a file of outcomes
    outcomes.write_text('{"task": "t", "arm": "a", "rep": 0, "passed": true}\n')
    assert record_shown(outcomes) is False
    assert not (tmp_path / "tasks" / ".assay").exists()


def test_holdout_folders_each_keep_a_ledger(tmp_path: Path) -> None:
    make_bundle(tmp_path / "a" / "t-a", task_id="t-a", split="holdout")
    make_bundle(tmp_path / "b" / "t-b", task_id="t-b", split="holdout")
    path = tmp_path / "exp.yaml"
    path.write_text("name: two\ntasks: [a, b]\nselect: {split: holdout}\narms:\n"
                    "  base: {agent: nop}\n")
    exp = load_experiment(path)
    entry = holdout_gate(exp, tmp_path / "run").record()  # type: ignore[union-attr]
    assert entry["tasks"] == ["t-a", "t-b"]
    for folder in ("a", "b"):
        [row] = read_looks(ledger_path(tmp_path / folder))
        assert row.tasks == ["t-a", "t-b"]
    # the same run in two ledgers is one look
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "manifest.json").write_text(json.dumps({
        "name": "two", "identity": exp.identity, "holdout": entry}))
    summary = holdout_summary(tmp_path / "run")
    assert summary is not None and summary["looks"] == 1 and summary["tasks"] == 2
    assert summary["ledger"] == f"{ledger_path(tmp_path / 'a')}, {ledger_path(tmp_path / 'b')}"


# ------------------------------------------------------------------ task lint across splits


def _lint_bundle(folder: Path, tid: str, split: str, *, extra_file: str | None = None,
                 instruction: str | None = None, family: str = "arith",
                 no_cross: bool = False) -> Path:
    b = make_bundle(folder / tid, task_id=tid, split=split)
    if extra_file is not None:
        (b / "repo" / "NOTES.txt").write_text(extra_file)
        set_fixture_digest(b, tree_digest(b / "repo"))
    if instruction is not None:
        (b / "instruction.md").write_text(instruction)
    y = b / "task.yaml"
    text = y.read_text().replace("family: arith", f"family: {family}")
    if no_cross:
        text += "family_must_not_cross_splits: true\n"
    y.write_text(text)
    return b


def _lint(folder: Path) -> tuple[int, list[str]]:
    res = run_cli(["task", "lint", str(folder)])
    return res.code, [line for line in res.stdout.splitlines() if line.startswith("warning:")]


def test_lint_warns_on_the_same_starting_tree_in_two_splits(tmp_path: Path) -> None:
    a = _lint_bundle(tmp_path, "dev-a", "dev", instruction="Fix add.", family="f1")
    b = _lint_bundle(tmp_path, "hold-b", "holdout", instruction="Fix mul.", family="f2")
    code, warnings = _lint(tmp_path)
    assert code == 0
    assert len(warnings) == 1 and "same starting tree" in warnings[0]
    assert str(a) in warnings[0] and str(b) in warnings[0]


def test_lint_warns_on_the_same_instruction_in_two_splits(tmp_path: Path) -> None:
    a = _lint_bundle(tmp_path, "dev-a", "dev", extra_file="one", family="f1",
                     instruction="Fix   the\n\tadd function.\n")
    b = _lint_bundle(tmp_path, "val-b", "validation", extra_file="two", family="f2",
                     instruction="  Fix the add\nfunction.")
    code, warnings = _lint(tmp_path)
    assert code == 0
    assert len(warnings) == 1 and "same instruction" in warnings[0]
    assert str(a) in warnings[0] and str(b) in warnings[0]


def test_lint_warns_on_a_family_across_dev_and_holdout_only_when_told(tmp_path: Path) -> None:
    a = _lint_bundle(tmp_path, "dev-a", "dev", extra_file="one", instruction="Fix add.")
    b = _lint_bundle(tmp_path, "hold-b", "holdout", extra_file="two", instruction="Fix mul.")
    assert _lint(tmp_path) == (0, []), "families may cross unless a bundle says they must not"
    y = b / "task.yaml"
    y.write_text(y.read_text() + "family_must_not_cross_splits: true\n")
    code, warnings = _lint(tmp_path)
    assert code == 0
    assert len(warnings) == 1 and "family 'arith' crosses dev and holdout" in warnings[0]
    assert str(a) in warnings[0] and str(b) in warnings[0]


def test_lint_is_quiet_for_distinct_tasks(tmp_path: Path) -> None:
    _lint_bundle(tmp_path, "dev-a", "dev", extra_file="one", instruction="Fix add.",
                 family="f1", no_cross=True)
    _lint_bundle(tmp_path, "hold-b", "holdout", extra_file="two", instruction="Fix mul.",
                 family="f2", no_cross=True)
    # the same tree and instruction within one split is not a split leak
    _lint_bundle(tmp_path, "dev-c", "dev", extra_file="one", instruction="Fix add.", family="f1")
    code, warnings = _lint(tmp_path)
    assert (code, warnings) == (0, [])
