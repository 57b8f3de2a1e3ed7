"""The experiment's ``pairwise:`` check: ``assay exp run`` judges two arms after the trials.

A real experiment (real sandboxes, the real verifier, the two self-naming shell arms of
``support/pairwise_judge.py``) against the scripted judge server: the judge's endpoint first
unset, then unreachable (the trials are done and reported, the section says why it is missing,
exit 3), then served (a resume runs no trial again and judges every pair in both orders), then
a session cut short after three orders (a resume asks for the fourth only).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from support.bundles import make_bundle
from support.judge_server import JudgeServer
from support.pairwise_judge import (
    ARM_A,
    ARM_B,
    KEY,
    NAMES,
    candidate_ids,
    prefer,
    prefer_first,
    write_judge,
    yaml_quoted,
)

from assay.errors import SuiteError
from assay.sandbox import bwrap_available
from assay.suites.experiment import load_experiment

needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")
URL_ENV = "PWC_JUDGE_URL"
#: The settings of an experiment file without the newer optional blocks: an old run's
#: identity has exactly these, so a file without ``pairwise:`` must too
OLD_SETTINGS = {"name", "tasks", "select", "repetitions", "seed", "concurrency", "arms",
                "limits", "prices", "retries", "bar", "weights"}


def _experiment(root: Path, *, tasks: int = 2, arms: str | None = None,
                tail: str = "") -> Path:
    for i in range(tasks):
        make_bundle(root / "tasks" / f"t{i}", task_id=f"t{i}")
        # the model proxy: an arm with a model on a task without network is refused
        y = root / "tasks" / f"t{i}" / "task.yaml"
        y.write_text(y.read_text().replace("network_policy: none",
                                           "network_policy: model-proxy-only"))
    arms = arms or f"""  zebrafix:
    agent: {yaml_quoted(ARM_A)}
    model: {{name: walrus-9, base_url_env: PW_UNUSED_URL, api_key_env: PW_UNUSED_KEY}}
  quokkaarm:
    agent: {yaml_quoted(ARM_B)}
"""
    exp = root / "experiment.yaml"
    exp.write_text(f"name: pw-experiment\ntasks: [tasks]\nrepetitions: 1\nseed: 1\n"
                   f"concurrency: 2\narms:\n{arms}{tail}")
    return exp


PAIRWISE_TAIL = """bar:
  hoped_improvement: 0.1
  max_regression: 0.5
  baseline: zebrafix
  candidate: quokkaarm
pairwise:
  judge: judges/j/judge.yaml
  show: [diff, trajectory]
  seed: 3
"""


def _run(exp: Path, out: Path, mp: pytest.MonkeyPatch) -> Any:
    # the arm names a model, so the manifest does; its agent never calls it
    mp.setenv("PW_UNUSED_URL", "http://127.0.0.1:9/v1")
    mp.setenv("PW_UNUSED_KEY", "unused")
    return run_cli(["exp", "run", str(exp), "--out", str(out)])


def _report(out: Path) -> dict[str, Any]:
    return json.loads((out / "report.json").read_text())


def _attempts(out: Path) -> list[Path]:
    return sorted(out.glob("trials/*/*/*/attempt-*")) or sorted(out.rglob("trial.json"))


def _task_judge(plan: Path):
    """t0: prefers BETA in both orders (B wins); t1: prefers whatever comes first (the verdict
    flips with the order: a tie, and one pair of two counted toward the position bias)."""
    beta, first = prefer("BETA"), prefer_first

    def reply(req: Any) -> dict:
        ids = set(candidate_ids(req))
        pairs = json.loads(plan.read_text())["pairs"]
        task = next(p["task"] for p in pairs if set(p["ids"].values()) == ids)
        return beta(req) if task == "t0" else first(req)
    return reply


@needs_bwrap
def test_exp_run_judges_two_arms_after_the_trials(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    exp = _experiment(tmp_path, tail=PAIRWISE_TAIL)
    write_judge(tmp_path / "judges" / "j", base_url_env=URL_ENV)
    out = tmp_path / "run"
    pw = out / "pairwise"

    # no endpoint: every trial still runs and is reported; the section says why it is missing
    monkeypatch.delenv(URL_ENV, raising=False)
    res = _run(exp, out, monkeypatch)
    assert res.code == 3, res.stdout + res.stderr
    said = " ".join(res.stderr.split())  # the console wraps long lines
    assert "pairwise check: not done" in said and f"{URL_ENV} is not set" in said
    rep = _report(out)
    assert all(a["graded"] == a["planned"] == 2 for a in rep["arms"].values())
    assert set(rep["judge_preference"]) == {"error"}
    assert f"{URL_ENV} is not set" in rep["judge_preference"]["error"]
    assert "Missing: the pairwise judging did not run" in (out / "report.md").read_text()
    assert not (pw / "pairwise.json").exists() and (pw / "pairwise_error.json").is_file()
    assert "Judge preference: InputError" in (out / "report.html").read_text()
    attempts = _attempts(out)
    assert len(attempts) == 4

    # an endpoint nobody answers at: the same, as transport trouble
    monkeypatch.setenv(URL_ENV, "http://127.0.0.1:9/v1")
    res = _run(exp, out, monkeypatch)
    assert res.code == 3 and "TransportError" in _report(out)["judge_preference"]["error"]

    # served: the resume runs no trial again and asks every pair in both orders
    plan = pw / "pairwise_plan.json"
    with JudgeServer({KEY: _task_judge(plan)}) as srv:
        monkeypatch.setenv(URL_ENV, srv.base_url)
        res = _run(exp, out, monkeypatch)
        bodies = [json.dumps(r.body, ensure_ascii=False).lower() for r in srv.requests]
    assert res.code == 0, res.stdout + res.stderr
    assert _attempts(out) == attempts
    assert len(bodies) == 4
    for body in bodies:  # no arm, model, experiment or run directory name reached the judge
        for name in (*NAMES, str(out.resolve())):
            assert name.lower() not in body, name
    summary = json.loads((pw / "pairwise.json").read_text())
    assert (summary["a"]["arm"], summary["b"]["arm"]) == ("zebrafix", "quokkaarm")  # the bar's
    assert summary["seed"] == 3 and summary["show"] == ["diff", "trajectory"]
    assert not (pw / "pairwise_error.json").exists()
    rep = _report(out)
    jp = rep["judge_preference"]
    # t0: +1 (B in both orders), t1: 0 (a tie: the verdict flipped) -> 0.5 over two tasks
    assert jp["preference"] == 0.5 and jp["pairs"] == 2 and jp["n_tasks"] == 2
    assert (jp["b_wins"], jp["a_wins"], jp["ties"], jp["flipped"]) == (1, 0, 1, 1)
    assert jp["position_bias"]["rate"] == 0.5 and jp["position_bias"]["pairs"] == 2
    assert jp["judge"]["calibration"] == "uncalibrated" and jp["judge"]["model"] == "judge-model"
    assert jp["judge"]["revision"] == summary["judge"]["revision"] and "error" not in jp
    assert {r["task"]: r["preference"] for r in jp["per_task"]} == {"t0": 1.0, "t1": 0.0}
    text = (out / "report.md").read_text()
    assert "## Judge preference" in text and "Position bias: 1 of 2" in text
    assert "A = zebrafix, B = quokkaarm." in text and (jp["a"], jp["b"]) == ("zebrafix",
                                                                            "quokkaarm")
    assert "uncalibrated" in text
    html = (out / "report.html").read_text()
    assert "Judge preference of B over A: +0.50" in html and "position bias 50%" in html
    # the block is part of the run's identity as written (the judge file's content is not)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["identity"]["settings"]["pairwise"] == {
        "judge": "judges/j/judge.yaml", "a": None, "b": None, "show": ["diff", "trajectory"],
        "seed": 3}

    # a session cut short after three orders: the resume asks for the fourth only
    rows = (pw / "pairwise_judgements.jsonl").read_text().splitlines(keepends=True)
    assert len(rows) == 4
    (pw / "pairwise_judgements.jsonl").write_text("".join(rows[:3]))
    with JudgeServer({KEY: _task_judge(plan)}) as srv:
        monkeypatch.setenv(URL_ENV, srv.base_url)
        res = _run(exp, out, monkeypatch)
        asked = len(srv.requests)
    assert res.code == 0 and asked == 1
    again = _report(out)["judge_preference"]
    assert {k: again[k] for k in ("preference", "ties", "flipped", "position_bias")} == {
        k: jp[k] for k in ("preference", "ties", "flipped", "position_bias")}

    # every order recorded: a re-run needs no endpoint and asks nothing
    monkeypatch.delenv(URL_ENV)
    res = _run(exp, out, monkeypatch)
    assert res.code == 0 and "error" not in _report(out)["judge_preference"], res.stderr

    # exp report and exp compare pick the directory up; compare only for the same two arms
    res = run_cli(["exp", "report", str(out)])
    assert res.code == 0 and "Judge preference" in res.stdout
    assert _report(out)["judge_preference"] == again
    cmp = run_cli(["exp", "compare", str(out), "--json"])
    assert cmp.code == 0, cmp.stderr
    assert json.loads(cmp.stdout)["judge_preference"] == again
    swapped = run_cli(["exp", "compare", str(out), "--a", "quokkaarm", "--b", "zebrafix",
                       "--json"])
    assert swapped.code == 0 and "judge_preference" not in json.loads(swapped.stdout)


@needs_bwrap
def test_a_run_without_the_block_is_unchanged(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    exp = _experiment(tmp_path, tasks=1, arms="  a: {agent: oracle}\n  b: {agent: nop}\n")
    assert set(load_experiment(exp).identity["settings"]) == OLD_SETTINGS
    out = tmp_path / "run"
    res = _run(exp, out, monkeypatch)
    assert res.code == 0, res.stdout + res.stderr
    assert not (out / "pairwise").exists()
    rep = _report(out)
    assert "judge_preference" not in rep and rep["comparison"] is not None
    assert set(json.loads((out / "manifest.json").read_text())["identity"]["settings"]) == (
        OLD_SETTINGS)
    res = _run(exp, out, monkeypatch)  # resumes: nothing left to run, same report
    assert res.code == 0 and "judge_preference" not in _report(out)


def _problems(exp: Path) -> list[Any]:
    with pytest.raises(SuiteError) as info:
        load_experiment(exp)
    return info.value.problems


def test_the_block_is_checked_at_load_with_file_line_and_field(tmp_path: Path) -> None:
    arms = "  a: {agent: oracle}\n  b: {agent: nop}\n"
    exp = _experiment(tmp_path, tasks=1, arms=arms,
                      tail="pairwise:\n  judge: judges/none.yaml\n  a: nosuch\n")
    got = {p.field: p for p in _problems(exp)}
    assert set(got) == {"pairwise.a", "pairwise.judge"}
    assert got["pairwise.a"].line == 11 and "no arm 'nosuch'" in got["pairwise.a"].message
    assert got["pairwise.judge"].line == 10 and "no such judge file" in str(got["pairwise.judge"])
    assert str(got["pairwise.a"]).startswith(f"{exp}:11: field 'pairwise.a'")

    # a judge that does not load; an arm against itself; a show part that does not exist
    (tmp_path / "judges").mkdir()
    (tmp_path / "judges" / "bad.yaml").write_text("model: m\nbase_url: http://x/v1\n"
                                                  "nonsense: 1\n")
    exp.write_text(exp.read_text().replace("judges/none.yaml", "judges/bad.yaml")
                   .replace("a: nosuch", "a: b"))
    got = {p.field: p for p in _problems(exp)}
    assert set(got) == {"pairwise.b", "pairwise.judge"}
    assert "does not load" in got["pairwise.judge"].message and "bad.yaml" in str(
        got["pairwise.judge"])
    assert "against itself" in got["pairwise.b"].message

    bad_show = _experiment(tmp_path / "s", tasks=1, arms=arms,
                           tail="pairwise:\n  judge: j.yaml\n  show: [diff, screenshots]\n")
    problems = _problems(bad_show)
    assert any(p.field and p.field.startswith("pairwise.show") and p.line == 11
               for p in problems), [str(p) for p in problems]

    # three arms, no bar naming two: the block must name them
    three = _experiment(tmp_path / "t", tasks=1, arms=arms + "  c: {agent: oracle}\n",
                        tail="pairwise: {judge: j.yaml}\n")
    write_judge(tmp_path / "t", "http://127.0.0.1:9/v1").rename(tmp_path / "t" / "j.yaml")
    (msg,) = [str(p) for p in _problems(three)]
    assert f"{three}:10: field 'pairwise'" in msg and "name the arms with a: and b:" in msg
    ok = three.read_text().replace("{judge: j.yaml}", "{judge: j.yaml, a: c, b: a}")
    three.write_text(ok)
    assert load_experiment(three).identity["settings"]["pairwise"]["b"] == "a"


@needs_bwrap
def test_from_python_run_experiment_runs_the_check(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import assay

    exp = _experiment(tmp_path, tasks=1, tail="pairwise:\n  judge: judges/j/judge.yaml\n"
                      "  a: quokkaarm\n  b: zebrafix\n  show: [diff]\n")
    out = tmp_path / "run"
    with JudgeServer({KEY: prefer("BETA")}) as srv:
        write_judge(tmp_path / "judges" / "j", srv.base_url)
        monkeypatch.setenv("PW_UNUSED_URL", "http://127.0.0.1:9/v1")
        monkeypatch.setenv("PW_UNUSED_KEY", "unused")
        result = assay.run_experiment(exp, out)
        asked = len(srv.requests)
    assert result.status == "complete" and asked == 2
    jp = _report(out)["judge_preference"]
    # A is quokkaarm here (BETA): the judge prefers A, so B's preference is -1
    assert jp["preference"] == -1.0 and jp["a_wins"] == 1 and jp["show"] == ["diff"]
    # exp compare's default pair (the file's order) is the other way round: not picked up
    assert "judge_preference" not in assay.compare_experiment(out)
    assert assay.compare_experiment(out, a="quokkaarm", b="zebrafix")["judge_preference"] == jp
