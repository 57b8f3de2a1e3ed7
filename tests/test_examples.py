"""The examples run as a user would run them: a subprocess, from another directory."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli

REPO = Path(__file__).resolve().parents[1]


def test_library_example_runs_compares_and_prints_the_verdict(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    done = subprocess.run([sys.executable, str(REPO / "examples" / "library.py"), str(runs)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    base = json.loads((runs / "baseline" / "report.json").read_text())
    oracle = json.loads((runs / "oracle" / "report.json").read_text())
    assert base["n"] == oracle["n"] == 75 and oracle["accuracy"] == 1.0
    assert lines[0].startswith(f"builtin/baseline: accuracy {base['accuracy']:.1%} ")
    assert lines[0].endswith("over 75 answers, complete")
    assert lines[1].startswith("builtin/oracle: accuracy 100.0% ")
    diff = oracle["accuracy"] - base["accuracy"]
    assert lines[2].startswith(f"oracle - baseline: {diff:+.1%} (95% paired CI ")
    assert lines[3] == "verdict: oracle is better"
    assert lines[4] == f"runs in {runs}"
    for run in ("baseline", "oracle"):
        assert {"manifest.json", "raw_predictions.jsonl", "report.md", "report.html"} <= {
            p.name for p in (runs / run).iterdir()}
    assert done.stderr == ""  # the library is silent unless given a progress display


@pytest.mark.slow  # scheduled first under xdist (conftest.py): a minute or more
# a real CLI held to its tasks' wall budgets, eight times: in the quiet pass (tests/README.md),
# where the machine has room for it, instead of among eight workers that keep both cores busy
@pytest.mark.quiet
def test_the_rehearsal_experiment_runs_with_a_real_agent(tmp_path: Path) -> None:
    """``make rehearsal``'s experiment end to end: the real Qwen Code CLI (installed through
    scripts/agents/qwen.sh, as ``make rehearsal`` does) on the four dev bundles against
    builtin/replay. The baseline's script fixes 2 tasks, the candidate's
    all 4: d = 1, 1, 0, 0, Δ = +50 pts. wilson_mover: the baseline's rates 1 1 0 0, n_eff 4 ×
    (z / t_3)² = 1.5171692, Wilson [.0766581, .9233419]; the candidate at 4 of 4, exact bound
    .025^(1/4) = .3976354; r = 0 (an arm at 1): lo = .5 - sqrt(.6023646² + .4233419²) =
    -.2362483, hi = .5 + (.5 - .0766581) = .9233419: [-23.6, +92.3] pts, inside ±100 and
    below -10: inconclusive (exit 4). No holdout task is looked at."""
    import os

    from support.agent_cli import SCRIPTS, install_cli

    from assay.sandbox import bwrap_available

    if not bwrap_available():
        pytest.skip("bubblewrap cannot run here")
    if not os.environ.get("ASSAY_QWEN_BIN"):
        install_cli(SCRIPTS / "qwen.sh", "Qwen Code")  # once; skips saying why if it cannot
    exp = Path(__file__).resolve().parents[1] / "examples" / "experiments" / "rehearsal.yaml"
    out = tmp_path / "run"
    res = run_cli(["exp", "run", str(exp), "--out", str(out)])
    assert res.code == 0, res.stderr
    # the README sends a reader to report.html: so does the command
    assert f"report: {out / 'report.html'}" in res.stderr
    res = run_cli(["exp", "verdict", str(out), "--json"])
    assert res.code == 4, res.stdout + res.stderr
    v = json.loads(res.stdout)
    assert v["verdict"]["decision"] == "inconclusive" and v["comparison"]["delta"] == 0.5
    assert v["comparison"]["ci"] == pytest.approx([-0.2362483, 0.9233419], abs=1e-6)
    assert v["verdict"]["tasks_to_settle"] is not None
    rep = json.loads((out / "report.json").read_text())
    assert rep["arms"]["baseline"]["accepted"] == 2 and rep["arms"]["candidate"]["accepted"] == 4
    assert rep["arms"]["candidate"]["cost_complete"] is True and rep["holdout"] is None
    assert not (exp.parent.parent / "agent-tasks" / ".assay").exists()
    # what the README quotes of this run is what the commands print
    readme = " ".join((exp.parents[2] / "README.md").read_text().split())
    quoted = re.search(r"the candidate fixes (\w+) tasks of (\w+) and the baseline (\w+), "
                       r"Δ = \+(\d+) points", readme)
    assert quoted, "the README's rehearsal sentence is gone"
    words = {"two": 2, "four": 4}
    assert [words[quoted.group(i)] for i in (1, 2, 3)] == [
        rep["arms"]["candidate"]["accepted"], v["comparison"]["n_tasks"],
        rep["arms"]["baseline"]["accepted"]]
    assert int(quoted.group(4)) == round(100 * v["comparison"]["delta"])
    text = run_cli(["exp", "verdict", str(out)])
    said = " ".join(text.stdout.split())
    assert "would be needed to detect the hoped improvement of +20.0 pts" in said, said
    assert "would be needed to detect the hoped improvement of +20 points" in readme
    _every_trial_is_a_valid_atif_trajectory(out, tmp_path / "atif")


def _every_trial_is_a_valid_atif_trajectory(out: Path, export: Path) -> None:
    """Each of the rehearsal's real Qwen Code trials has ``trajectory.atif.json`` beside its
    record, valid by the maintained ``atif`` package's models, every tool call answered by an
    observation naming it, and the token totals equal to the gateway ledger's; ``exp export``
    writes the same documents."""
    atif = pytest.importorskip("atif", reason="the atif package (assay[dev]) validates ATIF")
    from assay.records.ledger import ledger_totals

    attempts = sorted(p.parent for p in out.glob("trials/*/*/*/a*/trial.json"))
    assert len(attempts) == 8
    matched = lined = 0
    for adir in attempts:
        data = json.loads((adir / "trajectory.atif.json").read_text())
        doc = atif.Trajectory.model_validate(data)
        assert doc.schema_version == "ATIF-v1.8" and doc.agent.name == "qwen-code"
        assert data["extra"]["assay"]["steps_source"] == "the agent's stream"
        for step in doc.steps:
            calls = {tc.tool_call_id for tc in step.tool_calls or []}
            answered = {r.source_call_id for r in (step.observation.results
                                                   if step.observation else [])}
            assert answered == calls, (adir, step.step_id)
            matched += len(calls)
        led = ledger_totals(adir / "model_calls.jsonl")
        fm = doc.final_metrics
        assert (fm.total_prompt_tokens, fm.total_completion_tokens) == (
            led["input"], led["output"]), adir
        assert fm.total_cost_usd == pytest.approx(led["cost_usd"])
        # per step: each stream step's own call, when the stream's turns and the ledger's
        # answered calls line up one to one; else unknown on every step (never a guess)
        per_step = [s.metrics for s in doc.steps if s.source == "agent"]
        if all(m is not None for m in per_step):
            assert sum(m.prompt_tokens for m in per_step) == led["input"]
        else:
            assert all(m is None for m in per_step)
        lined += all(m is not None for m in per_step)
    assert matched > 0 and lined > 0
    res = run_cli(["exp", "export", str(out), "--format", "atif", str(export)])
    assert res.code == 0, res.stderr
    assert len(list(export.rglob("*.atif.json"))) == 8
