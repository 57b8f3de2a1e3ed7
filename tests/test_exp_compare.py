"""``exp compare``, ``exp plan`` and ``exp verdict`` through the real CLI, with figures worked
out by hand (in the comments), on an outcomes file and on real experiment runs (real sandboxes,
real verifier, the oracle / nop / a shell-command agent).

The outcomes file of ``HAND``: tasks t1..t4 in families F1 (t1, t2) and F2 (t3, t4), two
repetitions per arm, and t5 run by A only (B's trials never graded):

    task  A      p_A   B      p_B   d
    t1    1 1    1     1 1    1     0
    t2    0 1    .5    1 1    1     +.5
    t3    0 0    0     1 0    .5    +.5
    t4    1 0    .5    0 0    0     -.5    (B rep 0 tampered with the test runner)

Δ = (0 + .5 + .5 - .5) / 4 = .125. By task (G = 4): deviations -.125 .375 .375 -.625, squares
sum .6875, cluster-robust SE² = 4/3 · .6875 / 16 = .0572917 (the plain cluster t: SE =
.2393570, interval [-.6367392, .8867392]). The moderated variance adds the prior of two trials
a task and arm at ½: ¼/2 + ¼/2 = .25 a task, V_prior = 4 · .25 / 16 = .0625; SE² = (2 · .0625
+ 3 · .0572917) / 5 = .059375, SE = .2436699; the moderated t is .125 ± t(3, .975) = 3.1824463
× SE = [-.6504662, .9004662]. The default (wilson_mover): arm A's rates 1 .5 0 .5, p .5, V0 =
.5 / 16, n_eff = .25 / V0 = 8, × (z / t_3)² = .3792923 -> 3.0343383, Wilson [.1262712,
.8737288]; B's 1 1 .5 0, p .625, n_eff 5.4545455 -> 2.0688670, Wilson [.1450896, .9424211];
r = (m_A² + m_B² - t_3² SE²) / (2 m_A m_B) = -1.016, clipped to -1: the half-widths add, lo =
.125 - ((.625 - .1450896) + (.8737288 - .5)) = -.7286392, hi = .125 + (.9424211 - .625) + (.5
- .1262712) = .8161499. By family (G = 2): D_F1 = .25, D_F2 = 0, CR1 SE² = 2/1 · (.25² +
.25²) / 16 = .015625; moderated SE² = (2 · .0625 + .015625) / 3 = .046875, SE = .2165064;
t(1, .975) = 12.7062047, the arms' spreads measured on two clusters: [-.8620557, .9136930].
New failures: t4 (A passed once, B never), family F2. Cost counts every trial,
t5's too: A 9 × $0.10 = $0.90 over 5 accepted = $0.18, a lower bound (one row incomplete); B
9 × $0.20 = $1.80 (the ungraded t5 was paid for) over 5 accepted = $0.36, complete. B's
runtimes 10..70 s and one timeout at 600 s: p50 (4th of 8) 40 s, p90 (8th) and max fall on the
timeout: censored.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import run_cli
from support.bundles import make_bundle

from assay.sandbox import bwrap_available

needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")

A = {"t1": (1, 1), "t2": (0, 1), "t3": (0, 0), "t4": (1, 0)}
B = {"t1": (1, 1), "t2": (1, 1), "t3": (1, 0), "t4": (0, 0)}
FAMILY = {"t1": "F1", "t2": "F1", "t3": "F2", "t4": "F2", "t5": "F2"}


def _hand_rows() -> list[dict]:
    rows = []
    b_seconds = iter([10, 20, 30, 40, 50, 60, 70, 600])
    for task in ("t1", "t2", "t3", "t4"):
        for rep in range(2):
            rows.append({"task": task, "arm": "A", "rep": rep, "passed": bool(A[task][rep]),
                         "family": FAMILY[task], "repo": "r1" if task < "t3" else "r2",
                         "cost_usd": 0.10, "seconds": 5.0,
                         **({"cost_complete": False} if (task, rep) == ("t2", 0) else {})})
            secs = next(b_seconds)
            row = {"task": task, "arm": "B", "rep": rep, "passed": bool(B[task][rep]),
                   "family": FAMILY[task], "repo": "r1" if task < "t3" else "r2",
                   "cost_usd": 0.20, "seconds": secs, "timed_out": secs == 600}
            if (task, rep) == ("t4", 0):
                row["failure_code"] = "test_runner_tampered"
            rows.append(row)
    rows += [{"task": "t5", "arm": "A", "rep": 0, "passed": True, "family": "F2", "repo": "r2",
              "cost_usd": 0.10},
             {"task": "t5", "arm": "B", "rep": 0, "passed": None, "family": "F2", "repo": "r2",
              "failure_code": "infra_error", "cost_usd": 0.20}]
    return rows


@pytest.fixture
def hand(tmp_path: Path) -> Path:
    path = tmp_path / "outcomes.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _hand_rows()))
    return path


def _compare(*args: str) -> dict:
    res = run_cli(["exp", "compare", *args, "--json"])
    assert res.code == 0, res.stderr
    return json.loads(res.stdout)


def test_compare_outcomes_file_by_task(hand: Path) -> None:
    c = _compare(str(hand), "--a", "A", "--b", "B")
    assert c["delta"] == pytest.approx(0.125)
    assert c["method"] == "wilson_mover" and c["n_clusters"] == 4 and c["n_tasks"] == 4
    assert c["ci"] == pytest.approx([-0.7286392, 0.8161499], abs=1e-6)
    assert c["se"] == pytest.approx(0.2436699, abs=1e-6) and c["df"] == 3
    mod = _compare(str(hand), "--a", "A", "--b", "B", "--method", "moderated_t")
    assert mod["ci"] == pytest.approx([-0.6504662, 0.9004662], abs=1e-6)
    plain = _compare(str(hand), "--a", "A", "--b", "B", "--method", "cluster_t")
    assert plain["ci"] == pytest.approx([-0.6367392, 0.8867392], abs=1e-6)
    assert plain["se"] == pytest.approx(0.2393570, abs=1e-6)
    per = {r["task"]: r for r in c["per_task"]}
    assert per["t2"]["p_a"] == 0.5 and per["t2"]["p_b"] == 1.0 and per["t4"]["diff"] == -0.5
    assert c["new_failures"] == {"t4": ["t4"]}  # clustered by task: the task is its cluster
    assert c["left_out"] == [{"task": "t5", "cluster": "t5", "missing_arms": ["B"]}]
    assert c["coverage"] == {"compared": 4, "planned": 5, "fraction": 0.8}
    assert c["mcnemar"] is None  # two repetitions: McNemar is for one
    assert c["integrity"] == {"A": 0, "B": 1}
    assert c["cost"]["A"] == {"total_usd": 0.9, "complete": False, "accepted": 5,
                              "per_completed_usd": 0.18, "status": "lower_bound"}
    assert c["cost"]["B"] == {"total_usd": 1.8, "complete": True, "accepted": 5,
                              "per_completed_usd": 0.36, "status": "ok"}
    lat = c["latency"]["B"]
    assert lat["attempts"] == 8 and lat["timeouts"] == 1  # t5's B row has no runtime
    assert lat["timeout_rate"] == pytest.approx(1 / 8)
    assert lat["all"]["p50"] == 40.0 and lat["all"]["p90"] is None
    assert lat["all"]["censored"] == ["p90", "max"]
    assert lat["accepted"]["max"] == 50.0  # accepted B trials ran 10, 20, 30, 40, 50 s
    assert any("only 4 task(s)" in n for n in c["notes"])
    # per-arm rates on the compared tasks: A (1 + .5 + 0 + .5) / 4, B (1 + 1 + .5 + 0) / 4
    assert c["pass_rate"]["A"]["pass_rate"] == 0.5 and c["pass_rate"]["B"]["pass_rate"] == 0.625
    assert c["pass_rate"]["B"]["pass_rate"] - c["pass_rate"]["A"]["pass_rate"] == c["delta"]


def test_compare_clusters_by_family_and_by_any_field(hand: Path) -> None:
    c = _compare(str(hand), "--a", "A", "--b", "B", "--cluster", "family")
    assert c["n_clusters"] == 2 and c["cluster_by"] == "family"
    assert c["ci"] == pytest.approx([-0.8620557, 0.9136930], abs=1e-6)
    assert c["se"] == pytest.approx(0.2165064, abs=1e-6)
    assert c["new_failures"] == {"F2": ["t4"]}
    r = _compare(str(hand), "--a", "A", "--b", "B", "--cluster", "repo")
    assert r["n_clusters"] == 2 and r["ci"] == pytest.approx(c["ci"])  # same grouping


def test_compare_bootstrap_is_seeded(hand: Path) -> None:
    one = _compare(str(hand), "--a", "A", "--b", "B", "--method", "bootstrap_studentized",
                   "--seed", "3")
    two = _compare(str(hand), "--a", "A", "--b", "B", "--method", "bootstrap_studentized",
                   "--seed", "3")
    assert one["ci"] == two["ci"] and one["method"] == "bootstrap_studentized"
    assert one["seed"] == 3 and one["n_boot"] == 4000


def test_mcnemar_with_one_repetition(tmp_path: Path) -> None:
    # 6 tasks: A passes t0..t3, B passes t2..t5 -> b = 2 (only A), c = 2 (only B), p = 1.
    rows = [{"task": f"t{i}", "arm": arm, "rep": 0,
             "passed": (i < 4) if arm == "A" else (i >= 2)} for i in range(6) for arm in "AB"]
    path = tmp_path / "o.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    c = _compare(str(path), "--a", "A", "--b", "B")
    assert c["mcnemar"] == {"b": 2, "c": 2, "p_value": 1.0} and c["delta"] == 0.0
    assert c["cost"]["A"]["status"] == "unknown" and c["cost"]["A"]["per_completed_usd"] is None
    assert c["latency"]["A"]["attempts"] == 0 and c["latency"]["A"]["timeout_rate"] is None


def test_subgroup_warns_about_selection_bias(tmp_path: Path) -> None:
    rows = [{"task": f"t{i}", "arm": arm, "rep": 0, "passed": i % 2 == 0,
             "triggered": i < 3} for i in range(6) for arm in "AB"]
    path = tmp_path / "o.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    full = _compare(str(path), "--a", "A", "--b", "B")
    assert full["triggered"]["A"] == {"triggered": 3, "not_triggered": 3, "unknown": 0}
    sub = _compare(str(path), "--a", "A", "--b", "B", "--subgroup", "triggered")
    assert sub["n_tasks"] == 3 and sub["subgroup"] == "triggered"
    assert any("selection bias" in n for n in sub["notes"])
    assert not any("selection bias" in n for n in full["notes"])


def test_a_comparison_never_blends_splits(tmp_path: Path) -> None:
    """Another harness's outcomes with dev and holdout rows in one file: refused, naming the
    splits; one split's rows compare."""
    rows = [{"task": f"t{i}", "arm": arm, "rep": 0, "passed": arm == "B" or i == 0,
             "split": "holdout" if i >= 3 else "dev"} for i in range(5) for arm in "AB"]
    path = tmp_path / "o.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = run_cli(["exp", "compare", str(path), "--a", "A", "--b", "B"])
    err = " ".join(res.stderr.split())
    assert res.code == 2 and "span several splits: dev (3 task(s)), holdout (2 task(s))" in err
    assert "never blends splits" in err
    path.write_text("".join(json.dumps(r) + "\n" for r in rows if r["split"] == "dev"))
    c = _compare(str(path), "--a", "A", "--b", "B")
    assert c["n_tasks"] == 3 and c["delta"] == pytest.approx(2 / 3)


def test_bad_outcomes_are_refused_with_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "o.jsonl"
    path.write_text('{"task": "t1", "arm": "A", "rep": 0, "passed": true}\n'
                    '{"task": "t1", "arm": "A", "rep": 0, "passed": false}\n'
                    '{"task": "t2", "arm": "A", "passed": true}\n'
                    '{"task": "t3", "arm": "A", "rep": -1, "passed": true, "cost_usd": -2}\n'
                    '{"task": "t4", "arm"')
    res = run_cli(["exp", "compare", str(path), "--a", "A", "--b", "B"])
    assert res.code == 2
    err = " ".join(res.stderr.split())
    assert "o.jsonl:2: field 'rep'" in err and "already given on line 1" in err
    assert "o.jsonl:3: field 'rep'" in err
    assert "o.jsonl:4: field 'rep'" in err and "o.jsonl:4: field 'cost_usd'" in err
    assert "o.jsonl:5" in err and "cut off" in err
    assert "Traceback" not in res.stderr


def test_unknown_arm_and_cluster_field_are_named(hand: Path) -> None:
    res = run_cli(["exp", "compare", str(hand), "--a", "A", "--b", "C"])
    assert res.code == 2 and "'C' is not an arm" in res.stderr
    res = run_cli(["exp", "compare", str(hand), "--a", "A", "--b", "B", "--cluster", "owner"])
    assert res.code == 2 and "no 'owner'" in res.stderr


def test_plan_mde_and_tasks_needed(hand: Path) -> None:
    res = run_cli(["exp", "plan", "--p-a", "0.5", "--tasks", "40", "--reps", "3", "--json"])
    assert res.code == 0, res.stderr
    p = json.loads(res.stdout)
    # Normal approximation as a sanity bound: per-task sd of a difference of two rates of
    # 3 Bernoulli(.5) ≈ sqrt(2 · .25 / 3) = .408; (1.96 + .84) · .408 / sqrt(40) ≈ .18.
    assert 0.12 < p["mde"] < 0.24 and p["n_tasks"] == 40 and p["reps"] == 3
    res = run_cli(["exp", "plan", "--p-a", "0.5", "--reps", "3", "--delta", str(p["mde"]),
                   "--json"])
    n = json.loads(res.stdout)["tasks_needed"]
    assert 30 <= n <= 50  # the MDE of 40 tasks needs about 40 tasks
    res = run_cli(["exp", "plan", str(hand), "--a", "A", "--json"])
    pilot = json.loads(res.stdout)
    assert pilot["pilot"] == {"source": str(hand), "arm": "A", "tasks": 5, "reps": 2}
    assert pilot["n_tasks"] == 5 and sorted(pilot["baseline_rates"]) == [0, .5, .5, 1, 1]
    assert run_cli(["exp", "plan"]).code == 2


# --------------------------------------------------------------------------- real runs

BAR = """bar:
  hoped_improvement: 0.2
  max_regression: 0.05
  integrity_violations: 0
  max_new_failures: 0
  baseline: base
  candidate: cand
"""
# fixes the bug only in the tasks it is told to, as an agent that solves some tasks would
FIX_SOME = ("command:sh -c 'case \\\"$ASSAY_TASK_ID\\\" in {ids}) sed -i "
            "s/a\\\\ -\\\\ b/a\\\\ +\\\\ b/ src/calc/__init__.py;; esac'")


def _exp(root: Path, base: str, cand: str, *, n_tasks: int = 3, bar: str = BAR) -> Path:
    for i in range(n_tasks):
        make_bundle(root / "tasks" / f"t{i}", task_id=f"t{i}")
    exp = root / "experiment.yaml"
    exp.write_text(f"""name: ab
tasks: [tasks]
repetitions: 1
seed: 1
concurrency: 2
arms:
  base:
    agent: "{base}"
  cand:
    agent: "{cand}"
{bar}""")
    return exp


def _run(exp: Path, out: Path) -> None:
    res = run_cli(["exp", "run", str(exp), "--out", str(out)])
    assert res.code == 0, res.stderr


@needs_bwrap
def test_verdict_accept_and_reject_on_real_runs(tmp_path: Path) -> None:
    exp = _exp(tmp_path / "acc", "nop", "oracle")
    _run(exp, tmp_path / "acc" / "run")
    res = run_cli(["exp", "verdict", str(tmp_path / "acc" / "run"), "--json"])
    assert res.code == 0, res.stdout + res.stderr
    v = json.loads(res.stdout)
    assert v["verdict"]["decision"] == "accept" and v["comparison"]["delta"] == 1.0
    assert v["verdict"]["note"] == "no violation observed in this batch is not proof there " \
                                   "are none"
    assert v["bar"]["sha256"] and v["comparison"]["a"] == "base"
    manifest = json.loads((tmp_path / "acc" / "run" / "manifest.json").read_text())
    assert manifest["bar_sha256"] == v["bar"]["sha256"]
    rep = json.loads((tmp_path / "acc" / "run" / "report.json").read_text())
    assert rep["verdict"]["decision"] == "accept" and rep["schema"].endswith("/2")
    assert rep["comparison"]["per_task"][0]["links"]["b"][0].startswith("trials/")
    outcomes = (tmp_path / "acc" / "run" / "outcomes.jsonl").read_text().splitlines()
    assert len(outcomes) == 6
    # the run's outcomes file gives the same comparison as the run directory
    again = _compare(str(tmp_path / "acc" / "run" / "outcomes.jsonl"), "--a", "base",
                     "--b", "cand")
    assert again["delta"] == 1.0 and again["ci"] == rep["comparison"]["ci"]

    # CI outputs: JUnit (one case per task and arm) and the GitHub step summary
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    res = run_cli(["exp", "report", str(tmp_path / "acc" / "run"), "--junit",
                   str(tmp_path / "junit.xml")], env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert res.code == 0, res.stderr
    import xml.etree.ElementTree as ET

    cases = ET.parse(tmp_path / "junit.xml").getroot().iter("testcase")
    got = {(c.get("classname"), c.get("name")): c.find("failure") is not None for c in cases}
    assert got == {(arm, f"t{i}"): arm == "base" for arm in ("base", "cand") for i in range(3)}
    text = summary.read_text()
    assert text.startswith("earlier step\n") and "ACCEPT" in text.upper()
    html = (tmp_path / "acc" / "run" / "report.html").read_text()
    assert "<script" not in html and "accept" in html.lower()

    exp = _exp(tmp_path / "rej", "oracle", "nop")
    _run(exp, tmp_path / "rej" / "run")
    res = run_cli(["exp", "verdict", str(tmp_path / "rej" / "run")])
    assert res.code == 1
    text = " ".join(res.stdout.split())
    assert "REJECT" in text and "new_failures failed" in text and "ruled out" in text


@needs_bwrap
def test_verdict_inconclusive_names_the_tasks_that_would_settle_it(tmp_path: Path) -> None:
    # cand fixes t0 and t1, not t2: d = 1, 1, 0; Δ = 2/3. wilson_mover: base 0 of 3 sits at 0,
    # n_eff = 3 tasks, Wilson [0, .5614970] widened to the exact 1 - .025^(1/3) = .7075982 at
    # the bound; cand 2 of 3, n_eff = (2/9) / (6/81) = 3 times
    # (z / t_2)² = .2075 -> .62, floored at 1: Wilson [.0941860, .9746638]; r = 0 (an arm at a
    # bound): lo = 2/3 - sqrt((2/3 - .0941860)² + .7075982²) = -.2435143, hi = .9746638
    # -> the lower bound is below -0.05: inconclusive.
    exp = _exp(tmp_path, "nop", FIX_SOME.format(ids="t0|t1"))
    _run(exp, tmp_path / "run")
    res = run_cli(["exp", "verdict", str(tmp_path / "run"), "--json"])
    assert res.code == 4, res.stdout + res.stderr
    v = json.loads(res.stdout)
    assert v["comparison"]["delta"] == pytest.approx(2 / 3)
    assert v["comparison"]["ci"] == pytest.approx([-0.2435143, 0.9746638], abs=1e-6)
    assert v["verdict"]["decision"] == "inconclusive"
    assert v["verdict"]["tasks_to_settle"] is not None and v["verdict"]["tasks_to_settle"] > 3
    assert any("no_regression not shown" in r for r in v["verdict"]["reasons"])


@needs_bwrap
def test_changed_or_added_bar_on_resume_is_refused(tmp_path: Path) -> None:
    exp = _exp(tmp_path, "nop", "oracle", n_tasks=2)
    out = tmp_path / "run"
    _run(exp, out)
    exp.write_text(exp.read_text().replace("hoped_improvement: 0.2", "hoped_improvement: 0.1"))
    res = run_cli(["exp", "run", str(exp), "--out", str(out)])
    assert res.code == 2
    err = " ".join(res.stderr.split())
    assert "settings.bar.hoped_improvement: 0.2 -> 0.1" in err and "bar is fixed" in err

    plain = _exp(tmp_path / "nobar", "nop", "oracle", n_tasks=2, bar="")
    _run(plain, tmp_path / "nobar" / "run")
    res = run_cli(["exp", "verdict", str(tmp_path / "nobar" / "run")])
    assert res.code == 2 and "no bar" in res.stderr
    plain.write_text(plain.read_text() + BAR)
    res = run_cli(["exp", "run", str(plain), "--out", str(tmp_path / "nobar" / "run")])
    assert res.code == 2
    assert "settings.bar" in res.stderr and "added or changed" in " ".join(res.stderr.split())


@needs_bwrap
def test_verdict_refuses_a_bar_edited_in_the_manifest(tmp_path: Path) -> None:
    exp = _exp(tmp_path, "nop", "oracle", n_tasks=2)
    out = tmp_path / "run"
    _run(exp, out)
    m = json.loads((out / "manifest.json").read_text())
    m["identity"]["settings"]["bar"]["max_regression"] = 0.9
    (out / "manifest.json").write_text(json.dumps(m))
    res = run_cli(["exp", "verdict", str(out)])
    assert res.code == 2 and "bar" in res.stderr
    m.pop("bar_sha256")  # even without the hash, the state database froze the bar
    (out / "manifest.json").write_text(json.dumps(m))
    res = run_cli(["exp", "verdict", str(out)])
    assert res.code == 2 and "state.sqlite" in " ".join(res.stderr.split())
    assert os.path.exists(out / "state.sqlite")


# prints a compaction event in t0 only, as an agent whose mechanism fires on some tasks
COMPACTS = ("command:sh -c 'case \\\"$ASSAY_TASK_ID\\\" in t0) echo "
            "\\\"{\\\\\\\"type\\\\\\\": \\\\\\\"compaction\\\\\\\"}\\\";; esac'")


@needs_bwrap
def test_trials_that_never_trigger_the_mechanism_stay_and_are_marked(tmp_path: Path) -> None:
    exp = _exp(tmp_path, "nop", COMPACTS, n_tasks=2, bar="")
    exp.write_text(exp.read_text().replace("  cand:\n", "  cand:\n    trigger_event: compaction\n"))
    _run(exp, tmp_path / "run")
    rep = json.loads((tmp_path / "run" / "report.json").read_text())
    marks = {(t["task"], t["arm"]): t["triggered"] for t in rep["trials"]}
    assert marks == {("t0", "base"): None, ("t1", "base"): None,
                     ("t0", "cand"): True, ("t1", "cand"): False}
    c = rep["comparison"]
    assert c["n_tasks"] == 2  # the end-to-end comparison keeps the untriggered trial
    assert c["triggered"]["cand"] == {"triggered": 1, "not_triggered": 1, "unknown": 0}
    # base cannot tell whether it fired: its trials cannot be filtered by the same rule, and
    # keeping them all would make the "subgroup" the full comparison on one side: refused
    for flag in ("triggered", "not_triggered"):
        res = run_cli(["exp", "compare", str(tmp_path / "run"), "--subgroup", flag])
        err = " ".join(res.stderr.split())
        assert res.code == 2 and "arm 'base' does not record whether the mechanism fired" in err
        assert "selection bias" in err and "trigger_event on both arms" in err
    res = run_cli(["exp", "compare", str(tmp_path / "run"), "--a", "base", "--b", "base2"])
    assert res.code == 2


# An agent whose mechanism fires on the tasks it is told to (a compaction event in its stream)
# and that fixes the bug on the tasks it is told to; it lives in each task's starting tree.
FIRE_AND_FIX = """import json, os, subprocess, sys
task = os.environ["ASSAY_TASK_ID"]
fire, fix = (set(a.split("=", 1)[1].split(",")) for a in sys.argv[1:3])
if task in fire:
    print(json.dumps({"type": "compaction"}))
if task in fix:
    subprocess.run(["sed", "-i", "s/return a - b/return a + b/", "src/calc/__init__.py"])
"""


@needs_bwrap
def test_subgroup_filters_both_arms_by_the_same_rule(tmp_path: Path) -> None:
    """Both arms say whether they fired. base fires on t0, t1 and fixes t0; cand fires on t0,
    t1, t2 and fixes everything. Full: d = 0, 1, 1, 1, Δ = .75. Triggered in both arms: t0,
    t1 (d = 0, 1; base's rate there .5, not its full .25). Not triggered in both: t3 only
    (base did not fire on t2, t3; cand on t3)."""
    from assay.suites.bundle import set_fixture_digest, tree_digest

    exp = _exp(tmp_path, "command:python3 agent.py fire=t0,t1 fix=t0",
               "command:python3 agent.py fire=t0,t1,t2 fix=t0,t1,t2,t3", n_tasks=4, bar="")
    for i in range(4):
        bundle = tmp_path / "tasks" / f"t{i}"
        (bundle / "repo" / "agent.py").write_text(FIRE_AND_FIX)
        set_fixture_digest(bundle, tree_digest(bundle / "repo"))
    text = exp.read_text()
    for arm in ("base", "cand"):
        text = text.replace(f"  {arm}:\n", f"  {arm}:\n    trigger_event: compaction\n")
    exp.write_text(text)
    _run(exp, tmp_path / "run")
    full = _compare(str(tmp_path / "run"))
    assert full["delta"] == pytest.approx(0.75) and full["n_tasks"] == 4
    assert full["triggered"]["base"] == {"triggered": 2, "not_triggered": 2, "unknown": 0}
    sub = _compare(str(tmp_path / "run"), "--subgroup", "triggered")
    assert [r["task"] for r in sub["per_task"]] == ["t0", "t1"]
    assert sub["delta"] == pytest.approx(0.5) and sub["pass_rate"]["base"]["pass_rate"] == 0.5
    assert sub["triggered"]["base"] == {"triggered": 2, "not_triggered": 0, "unknown": 0}
    assert any("selection bias" in n and "same rule" in n for n in sub["notes"])
    sub = _compare(str(tmp_path / "run"), "--subgroup", "not_triggered")
    assert [r["task"] for r in sub["per_task"]] == ["t3"] and sub["delta"] == 1.0
    assert sub["triggered"]["cand"] == {"triggered": 0, "not_triggered": 1, "unknown": 0}
    res = run_cli(["exp", "compare", str(tmp_path / "run"), "--subgroup", "not_triggered"])
    assert res.code == 0 and "selection bias" in " ".join(res.stdout.split())


def test_library_calls_match_the_cli(hand: Path) -> None:
    import assay
    from assay.errors import InputError

    lib = assay.compare_experiment(hand, a="A", b="B", cluster="family")
    assert lib == _compare(str(hand), "--a", "A", "--b", "B", "--cluster", "family")
    plan = assay.plan_experiment(p_a=[0.2, 0.8], tasks=30, reps=2)
    assert plan["n_tasks"] == 30 and plan["mde"] is not None and plan["n_baseline_rates"] == 2
    with pytest.raises(InputError):
        assay.plan_experiment()
    with pytest.raises(InputError, match="outcomes file has no bar"):
        assay.verdict(hand)


@needs_bwrap
def test_four_tasks_both_oracle_is_not_accepted_on_a_zero_width_interval(tmp_path: Path) -> None:
    # Both arms pass all four tasks: every per-task difference is 0. The plain cluster t had
    # zero width ([+0, +0]) and ACCEPTed "no regression beyond 5 points" on four tasks. Four
    # of four in each arm: the exact bound .025^(1/4) = .3976354 (Wilson's .5101 overstates
    # four tasks), an arm at 1 has no spread (r = 0), so the half-widths add as if
    # independent: ±.6023646. The lower bound is below -5 points.
    bar = "bar:\n  hoped_improvement: 0\n  max_regression: 0.05\n"
    exp = _exp(tmp_path, "oracle", "oracle", n_tasks=4, bar=bar)
    _run(exp, tmp_path / "run")
    res = run_cli(["exp", "verdict", str(tmp_path / "run"), "--json"])
    v = json.loads(res.stdout)
    assert res.code == 4 and v["verdict"]["decision"] == "inconclusive", res.stdout
    c = v["comparison"]
    assert c["delta"] == 0.0 and c["method"] == "wilson_mover"
    assert c["ci"] == pytest.approx([-0.6023646, 0.6023646], abs=1e-6)
    assert any("no_regression not shown" in r for r in v["verdict"]["reasons"])
    # the per-arm rates are 4 of 4 with Wilson's interval, not [100%, 100%]
    full = _compare(str(tmp_path / "run"))
    assert full["ci"] == c["ci"]  # compare shows the interval the verdict decided on
    for arm in ("base", "cand"):
        rate = full["pass_rate"][arm]
        assert rate["pass_rate"] == 1.0 and rate["ci"] == pytest.approx([0.3976354, 1.0])
    text = run_cli(["exp", "verdict", str(tmp_path / "run")])
    assert text.code == 4 and "ACCEPT" not in text.stdout
