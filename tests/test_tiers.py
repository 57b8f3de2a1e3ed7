"""CI tiers end to end: ``tiers:`` in suite.yaml and experiment.yaml, ``--tier`` on ``assay run``
and ``exp run``, ``exp plan --tier``.

A narrow suite of ten cases whose smoke tier names three of them: ``run --tier smoke`` asks the
model about exactly those (the scripted server counts the requests), the run's digest, snapshot
and manifest are the tier's, and ``history`` keeps the smoke runs apart from the full ones. An
unknown tier is refused with the tiers that exist (exit 2, nothing run). An experiment of three
task bundles (the oracle against nop, in the bubblewrap sandbox) whose smoke tier selects one
task and one repetition runs two trials, not twelve; ``exp plan --tier all`` sizes each tier
with the power simulation and says what it cannot see.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SYSTEM_PROMPT, run_cli, write_suite
from support.bundles import make_bundle
from support.scripted_server import ScriptedServer, echo_label

from assay.sandbox import bwrap_available

CASES = [(f"c{i:02d}", f"Issue number {i}: the app crashes", "bug") for i in range(10)]
SMOKE = ["c07", "c02", "c04"]
TIERS = f"tiers:\n  smoke: {{select: {{ids: [{', '.join(SMOKE)}]}}}}\n  full: {{}}"


def test_narrow_tier_runs_only_its_cases(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "tiny", CASES, prompt=SYSTEM_PROMPT, extra_yaml=TIERS)
    runs = tmp_path / "runs"
    with ScriptedServer(echo_label(fallback="bug")) as srv:
        env = {"MODEL_BASE_URL": srv.base_url, "MODEL_API_KEY": "sk-tier-test"}
        res = run_cli(["run", str(suite), "--model", "m", "--tier", "smoke",
                       "--out-root", str(runs)], env=env)
        assert res.code == 0, res.stderr
        asked = sorted(r.case_input for r in srv.chat_requests())
        assert asked == sorted(f"Issue number {int(c[1:])}: the app crashes" for c in SMOKE)
        res = run_cli(["run", str(suite), "--model", "m", "--out-root", str(runs)], env=env)
        assert res.code == 0, res.stderr
        assert len(srv.chat_requests()) == 3 + 10
        res = run_cli(["run", str(suite), "--model", "m", "--tier", "nightly",
                       "--out-root", str(runs)], env=env)
    assert res.code == 2 and "unknown tier 'nightly' (full, smoke)" in " ".join(res.stderr.split())
    made = sorted(runs.iterdir())
    assert len(made) == 2  # the refused run left no directory behind
    smoke = next(p for p in made
                 if json.loads((p / "manifest.json").read_text())["suite"].get("tier"))
    man = json.loads((smoke / "manifest.json").read_text())
    assert man["suite"]["tier"] == "smoke" and man["suite"]["n_cases"] == 3
    snapshot = (smoke / "suite" / "cases.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in snapshot] == ["c02", "c04", "c07"]  # file order
    import hashlib

    assert man["suite"]["cases_sha256"] == hashlib.sha256(
        (smoke / "suite" / "cases.jsonl").read_bytes()).hexdigest()
    res = run_cli(["history", str(runs), "--json"])
    h = json.loads(res.stdout)
    assert sorted(g["suite"] for g in h["groups"]) == ["tiny", "tiny [tier smoke]"]


needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")


def _experiment(root: Path) -> Path:
    for i in (1, 2, 3):
        make_bundle(root / "tasks" / f"calc-{i}", task_id=f"calc-00{i}")
    exp = root / "experiment.yaml"
    exp.write_text("""name: calc-tiers
tasks: [tasks]
repetitions: 2
seed: 3
concurrency: 2
arms:
  fixed:
    agent: oracle
  idle:
    agent: nop
tiers:
  smoke: {select: {ids: [calc-002]}, repetitions: 1}
  full: {}
""")
    return exp


@needs_bwrap
def test_experiment_tier_runs_only_its_selection(tmp_path: Path) -> None:
    exp = _experiment(tmp_path)
    runs = tmp_path / "runs"
    res = run_cli(["exp", "run", str(exp), "--tier", "smoke", "--out-root", str(runs)])
    assert res.code == 0, res.stderr
    (run,) = list(runs.iterdir())
    assert run.name.startswith("calc-tiers-smoke-")
    rep = json.loads((run / "report.json").read_text())
    man = json.loads((run / "manifest.json").read_text())
    assert sorted(man["identity"]["tasks"]) == ["calc-002"]
    assert man["identity"]["settings"]["tier"] == "smoke"
    assert man["identity"]["settings"]["repetitions"] == 1
    assert rep["arms"]["fixed"]["accepted"] == 1 and rep["arms"]["idle"]["accepted"] == 0
    # history reads the experiment too: one row per arm, its pass rate from the trials
    res = run_cli(["history", str(runs), "--json"])
    h = json.loads(res.stdout)
    arms = {g["who"]: g["series"][0]["runs"][0] for g in h["groups"]}
    assert {g["suite"] for g in h["groups"]} == {"calc-tiers [tier smoke]"}
    assert arms["fixed"]["headline"]["value"] == 1.0 and arms["idle"]["headline"]["value"] == 0.0
    assert arms["fixed"]["fingerprints"]["agent_files"] != arms["idle"]["fingerprints"][
        "agent_files"]
    res = run_cli(["exp", "run", str(exp), "--tier", "weekly", "--out-root", str(runs)])
    assert res.code == 2 and "unknown tier 'weekly' (full, smoke)" in " ".join(res.stderr.split())


def test_exp_plan_tier_says_what_each_tier_can_detect(tmp_path: Path) -> None:
    exp = _experiment(tmp_path)
    res = run_cli(["exp", "plan", "--experiment", str(exp), "--tier", "all", "--p-a", "0.5",
                   "--json"])
    assert res.code == 0, res.stderr
    tiers = {t["tier"]: t for t in json.loads(res.stdout)["tiers"]}
    assert set(tiers) == {"smoke", "full", "(whole file)"}
    smoke, full = tiers["smoke"], tiers["full"]
    assert (smoke["tasks"], smoke["reps"], smoke["of_tasks"]) == (1, 1, 3)
    assert smoke["mde"] is None and "2 task(s) outside the tier" in smoke["cannot"]
    assert (full["tasks"], full["reps"]) == (3, 2)
    # three tasks at p = 0.5: the simulation finds a size or says none, never a made-up one
    assert full["mde"] is None or 0 < full["mde"] <= 0.5
    assert "outside" not in full["cannot"]
    res = run_cli(["exp", "plan", "--experiment", str(exp), "--tier", "smoke", "--p-a", "0.5"])
    assert res.code == 0 and res.stdout.startswith("tier smoke: 1 of 3 tasks × 1 repetition")
    res = run_cli(["exp", "plan", "--tier", "smoke", "--p-a", "0.5"])
    assert res.code == 2 and "--experiment" in res.stderr


@needs_bwrap
def test_task_check_on_a_tier_checks_only_its_bundles(tmp_path: Path) -> None:
    """The per-PR gate's first half: the grader's self-checks on the smoke tier's bundles."""
    exp = _experiment(tmp_path)
    out = tmp_path / "check"
    # two mutants stand for all of them (what they check is the tier's selection, not the
    # mutants: tests/test_trials.py runs every one)
    res = run_cli(["task", "check", "--experiment", str(exp), "--tier", "smoke", "--mutant",
                   "no_change", "--mutant", "fake_output", "--reruns", "1", "--out", str(out)])
    assert res.code == 0, res.stderr + res.stdout
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["calc-002"]
    assert sorted(p.name for p in (out / "calc-002").glob("mutant-*")) == [
        "mutant-fake_output", "mutant-no_change"]
    res = run_cli(["task", "check", "--tier", "smoke"])
    assert res.code == 2 and "--experiment" in res.stderr
