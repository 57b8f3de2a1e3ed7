"""A Harbor job directory as a source of ``exp compare`` and ``exp report``: job folders written
here in Harbor's documented layout (``jobs/<job>/config.json``, ``result.json`` and per trial
``<trial>/result.json`` holding a ``TrialResult``), since Harbor itself runs trials in Docker,
which this machine has no engine for. The figures are worked out by hand in the comments.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli


def _trial(job: Path, name: str, task: str, agent: str, model: str | None,
           reward: float | None, *, start: str, cost: float | None = None,
           exception: str | None = None, agent_secs: float = 30.0) -> None:
    d = job / name
    d.mkdir(parents=True)
    (d / "agent").mkdir()
    result = {
        "id": "00000000-0000-0000-0000-000000000000", "task_name": task, "trial_name": name,
        "trial_uri": f"file://{d}", "task_id": {"path": f"tasks/{task}"},
        "task_checksum": "abc", "config": {},
        "agent_info": {"name": agent, "version": "1.0",
                       "model_info": None if model is None else {"name": model,
                                                                 "provider": "p"}},
        "agent_result": None if cost is None else {"n_input_tokens": 1000,
                                                   "n_cache_tokens": 100,
                                                   "n_output_tokens": 50, "cost_usd": cost},
        "verifier_result": None if reward is None else {"rewards": {"reward": reward}},
        "exception_info": None if exception is None else {
            "exception_type": exception, "exception_message": "boom",
            "exception_traceback": "...", "occurred_at": start},
        "started_at": start, "finished_at": start,
        "agent_execution": {"started_at": start,
                            "finished_at": start.replace(":00+", f":{int(agent_secs):02d}+")},
    }
    (d / "result.json").write_text(json.dumps(result))


@pytest.fixture
def job(tmp_path: Path) -> Path:
    # Two arms (claude-code/sonnet, codex/gpt) on tasks a, b, c, two attempts each, except c's
    # second codex attempt raised before verifying. Rewards (1 = pass):
    #   task  claude  codex      p_A  p_B  d
    #   a     1 1     1 0        1    .5   -.5
    #   b     0 0     1 1        0    1    +1
    #   c     1 0     1 (exc)    .5   1    +.5
    # Δ = (-.5 + 1 + .5) / 3 = 1/3; coverage 3/3 (c has a graded codex trial).
    j = tmp_path / "jobs" / "2026-12-01__10-00-00"
    j.mkdir(parents=True)
    (j / "config.json").write_text(json.dumps({"job_name": j.name}))
    (j / "result.json").write_text(json.dumps({"stats": {}}))
    rows = [("a", 1, 1, 1, 0), ("b", 0, 0, 1, 1), ("c", 1, 0, 1, None)]
    for task, c1, c2, x1, x2 in rows:
        for i, (agent, model, rew) in enumerate([("claude-code", "sonnet", c1),
                                                 ("claude-code", "sonnet", c2),
                                                 ("codex", "gpt", x1), ("codex", "gpt", x2)]):
            start = f"2026-12-01T10:0{i}:00+00:00"
            exc = "DaytonaError" if rew is None else None
            _trial(j, f"{task}__{agent}__{i}", task, agent, model,
                   None if rew is None else float(rew), start=start, exception=exc,
                   cost=0.5 if agent == "codex" else None)
    (j / "not-a-trial").mkdir()
    return j


def test_harbor_job_compares_like_a_run(job: Path) -> None:
    res = run_cli(["exp", "compare", str(job), "--a", "claude-code/sonnet", "--b", "codex/gpt",
                   "--json"])
    assert res.code == 0, res.stderr
    c = json.loads(res.stdout)
    assert c["delta"] == pytest.approx(1 / 3) and c["n_tasks"] == 3
    per = {r["task"]: r for r in c["per_task"]}
    assert (per["c"]["n_b"], per["c"]["passed_b"]) == (1, 1)  # the exception is not a trial
    assert c["new_failures"] == {}  # a: codex passed once, so not newly broken
    # codex: 6 attempts × $0.50 = $3.00 (the failed and the raised ones too) / 4 accepted
    assert c["cost"]["codex/gpt"]["per_completed_usd"] == pytest.approx(0.75)
    assert c["cost"]["claude-code/sonnet"]["status"] == "unknown"  # Harbor recorded no cost
    assert c["latency"]["codex/gpt"]["all"]["p50"] == 30.0
    assert any("reward ≥ 1" in n for n in c["notes"])
    # a lower threshold turns nothing here into a pass (rewards are 0 or 1)
    res = run_cli(["exp", "compare", str(job), "--a", "claude-code/sonnet", "--b", "codex/gpt",
                   "--reward-threshold", "0.5", "--json"])
    assert json.loads(res.stdout)["delta"] == pytest.approx(1 / 3)


def test_harbor_job_report_goes_elsewhere(job: Path, tmp_path: Path) -> None:
    before = sorted(p.name for p in job.iterdir())
    res = run_cli(["exp", "report", str(job)])
    assert res.code == 2 and "--out" in res.stderr
    res = run_cli(["exp", "report", str(job), "--out", str(tmp_path / "rep")])
    assert res.code == 0, res.stderr
    rep = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert rep["comparison"]["a"] == "claude-code/sonnet" and rep["verdict"] is None
    assert rep["arms"]["codex/gpt"]["infra_error_attempts"] == 1
    assert sorted(p.name for p in job.iterdir()) == before  # Harbor's folder untouched
    lines = (tmp_path / "rep" / "outcomes.jsonl").read_text().splitlines()
    assert len(lines) == 12 and json.loads(lines[0])["link"].startswith("a__")


def test_harbor_several_unnamed_rewards_are_refused(job: Path) -> None:
    path = job / "a__codex__2" / "result.json"
    data = json.loads(path.read_text())
    data["verifier_result"] = {"rewards": {"tests": 1, "style": 0}}
    path.write_text(json.dumps(data))
    res = run_cli(["exp", "compare", str(job), "--a", "claude-code/sonnet", "--b", "codex/gpt"])
    assert res.code == 2 and "several rewards" in " ".join(res.stderr.split())  # unwrapped
