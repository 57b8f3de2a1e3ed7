"""``assay judge calibrate`` against a real scripted judge server: figures worked out by hand,
invalid judgements counted apart, one calibration file per revision never written over, the
"uncalibrated" label, human grades from a labelled file and from a rubric-graded run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import SECRET, run_cli
from support.judge_server import JudgeServer, verdict
from support.scripted_server import Status

from assay.errors import GradingError, SuiteError
from assay.grading.judge.calibration import calibration_for, calibration_label
from assay.grading.judge.human import load_human_grades
from assay.grading.rubric.pool import sha256
from assay.grading.rubric.revisions import grade_row
from assay.records.judgement import iter_judgements
from assay.suites.judge_spec import load_judge

RUBRIC = """\
- id: ok
  question: Does the answer do what was asked?
  scale: [yes, no]
- id: quality
  question: How good is it?
  scale: [0, 3]
- id: tone
  question: Is it polite?
  scale: [polite, rude]
"""

# (human ok, judge ok, human quality or None, judge quality) per item; ITEM8's judge cites an
# invented file twice: invalid.
ITEMS = [("yes", "yes", 3, 3), ("yes", "yes", 2, 2), ("yes", "yes", 1, 2), ("yes", "no", 0, 0),
         ("no", "no", None, 1), ("no", "no", None, 1), ("no", "yes", None, 1),
         ("no", None, None, 0)]


def write_judge(root: Path, base_url: str, rubric: str = RUBRIC) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "rubric.yaml").write_text(rubric)
    (root / "judge.yaml").write_text(f"model: judge-model\nbase_url: {base_url}\n"
                                     "rubric: rubric.yaml\napi_key_env: JUDGE_TEST_KEY\n")
    return root / "judge.yaml"


def script() -> dict:
    out = {}
    for n, (_, ok, _, quality) in enumerate(ITEMS, 1):
        if ok is None:
            out[f"ITEM{n}"] = verdict({"ok": "no", "quality": 0, "tone": "polite"},
                                      ["made_up.py:3"])
        else:
            out[f"ITEM{n}"] = verdict({"ok": ok, "quality": quality, "tone": "polite"},
                                      ["answer.txt:1"])
    return out


def write_grades(path: Path, items: list = ITEMS) -> Path:
    lines = []
    for n, (ok, _, quality, _) in enumerate(items, 1):
        grades: dict = {"ok": ok}
        if quality is not None:
            grades["quality"] = quality
        if n == 1:
            grades["style"] = 2  # not a criterion of this judge: reported, not an error
        lines.append(json.dumps({"id": f"i{n}", "answer": f"ITEM{n}\nsome answer",
                                 "context": "Say something useful.", "grades": grades}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_calibration_figures_by_hand_and_the_uncalibrated_label(tmp_path: Path) -> None:
    env = {"JUDGE_TEST_KEY": SECRET}
    with JudgeServer(script()) as server:
        judge_yaml = write_judge(tmp_path / "judge", server.base_url)
        grades = write_grades(tmp_path / "grades.jsonl")
        before = run_cli(["judge", "check", str(judge_yaml)])
        assert before.code == 0 and "calibration: uncalibrated" in before.stdout
        result = run_cli(["judge", "calibrate", str(judge_yaml), str(grades)], env=env)
        assert result.code == 0, result.stderr
        asked = len(server.chat_requests())
        assert all(r.headers["authorization"] == f"Bearer {SECRET}"
                   for r in server.chat_requests())
    assert asked == 8 + 1  # ITEM8 was retried once
    judge = load_judge(judge_yaml)
    path = tmp_path / "judge" / f"calibration-{judge.revision}.json"
    cal = json.loads(path.read_text())
    assert cal["schema"] == "assay.judge.calibration/1" and cal["pin"] == judge.pin()
    assert cal["items"] == 8 and cal["invalid"] == 1
    assert cal["served_models"] == ["scripted-model"] and cal["pin"]["model"] == "judge-model"
    assert cal["ungraded"] == ["tone"] and cal["unmapped"] == ["grades.style"]
    ok = cal["criteria"]["ok"]
    # 7 valid pairs (human, judge): (y,y) x3, (y,n) x1, (n,n) x2, (n,y) x1; ITEM8 invalid.
    # p_o = 5/7; human yes 4 / no 3, judge yes 4 / no 3: p_e = (16 + 9)/49 = 25/49
    # kappa = (35 - 25) / (49 - 25) = 10/24
    assert (ok["graded"], ok["n"], ok["invalid"]) == (8, 7, 1)
    assert ok["exact"] == pytest.approx(5 / 7) and ok["kappa"] == pytest.approx(10 / 24)
    assert ok["confusion"] == {"yes": {"yes": 3, "no": 1}, "no": {"yes": 1, "no": 2}}
    assert ok["weighted_kappa"] is None and ok["method"] == "bootstrap (2000, seed 0)"
    lo, hi = ok["kappa_ci"]
    assert -1 <= lo < 10 / 24 < hi <= 1
    quality = cal["criteria"]["quality"]
    # 4 pairs (human, judge): (3,3) (2,2) (1,2) (0,0). p_o = 3/4; human 1 each of 0..3, judge
    # 0:1 2:2 3:1: p_e = (1 + 0 + 2 + 1)/16 = 1/4; kappa = (3/4 - 1/4)/(3/4) = 2/3.
    # Linear weights 1 - |i-j|/3: p_o_w = (3 + 2/3)/4 = 11/12; p_e_w = (5/3 + 7/3 + 3 + 7/3)/16
    # = 7/12; weighted kappa = (11/12 - 7/12)/(5/12) = 0.8
    assert (quality["graded"], quality["n"], quality["invalid"]) == (4, 4, 0)
    assert quality["kappa"] == pytest.approx(2 / 3)
    assert quality["weighted_kappa"] == pytest.approx(0.8)
    assert quality["scale"] == [0, 1, 2, 3]
    assert quality["confusion"]["1"] == {"0": 0, "1": 0, "2": 1, "3": 0}
    log = tmp_path / "judge" / cal["judgements"]
    rows = list(iter_judgements(log))
    assert sorted(r.subject["item"] for r in rows) == [f"i{n}" for n in range(1, 9)]
    invalid = next(r for r in rows if r.subject["item"] == "i8")
    assert invalid.status == "invalid" and invalid.tries == 2 and invalid.scores is None
    assert SECRET not in log.read_text() and SECRET not in path.read_text()
    found = calibration_for(judge)
    assert found is not None and found["criteria"]["ok"]["n"] == 7
    label = calibration_label(found)
    assert label.startswith("ok: exact 71%, kappa 0.42 [") and "1 invalid" in label
    assert calibration_label(None) == "uncalibrated"
    check = run_cli(["judge", "check", str(judge_yaml)])
    assert "calibration: ok: exact 71%, kappa 0.42" in check.stdout
    assert "ok" in result.stdout and "0.42" in result.stdout and "0.80" in result.stdout
    assert "no human grades for: tone" in result.stderr


def test_a_rerun_reuses_judgements_and_a_different_calibration_is_refused(
        tmp_path: Path) -> None:
    with JudgeServer(script()) as server:
        judge_yaml = write_judge(tmp_path / "judge", server.base_url)
        grades = write_grades(tmp_path / "grades.jsonl")
        assert run_cli(["judge", "calibrate", str(judge_yaml), str(grades)]).code == 0
        judge = load_judge(judge_yaml)
        path = tmp_path / "judge" / f"calibration-{judge.revision}.json"
        first = path.read_text()
        asked = len(server.chat_requests())
        again = run_cli(["judge", "calibrate", str(judge_yaml), str(grades)])
        assert again.code == 0 and "unchanged; 0 new judgements" in again.stdout
        assert len(server.chat_requests()) == asked  # nothing asked twice
        # "N invalid" says why: ITEM8's judge cites a file the material does not hold
        assert ("invalid (1): criterion 'ok': citation 'made_up.py:3': no file 'made_up.py' "
                "in the material") in again.stderr
        # the same grades file named by another path (absolute; relative from another
        # folder): the same figures, left alone, never "exists with other figures"
        for spelling in (str(grades.resolve()), os.path.relpath(grades, tmp_path / "judge")):
            cwd = os.getcwd()
            os.chdir(tmp_path / "judge")
            try:
                same = run_cli(["judge", "calibrate", str(judge_yaml.resolve()), spelling])
            finally:
                os.chdir(cwd)
            assert same.code == 0 and "unchanged" in same.stdout, same.stderr
        assert path.read_text() == first
        # Other human grades for the same revision: refused before any request, file kept.
        other = list(ITEMS)
        other[0] = ("no", "yes", 3, 3)
        refused = run_cli(["judge", "calibrate", str(judge_yaml),
                           str(write_grades(tmp_path / "other.jsonl", other))])
        assert refused.code == 2 and "never overwritten" in refused.stderr
        assert path.read_text() == first and len(server.chat_requests()) == asked
        elsewhere = run_cli(["judge", "calibrate", str(judge_yaml),
                             str(tmp_path / "other.jsonl"), "--out", str(tmp_path / "cal2")])
        assert elsewhere.code == 0
        assert (tmp_path / "cal2" / path.name).is_file()
        # judge check finds a calibration written with --out when told where
        there = run_cli(["judge", "check", str(judge_yaml), "--calibration",
                         str(tmp_path / "cal2")])
        assert there.code == 0 and "calibration: ok: exact" in there.stdout, there.stdout
        moved = run_cli(["judge", "check", str(judge_yaml), "--calibration",
                         str(tmp_path / "nowhere")])
        assert "uncalibrated (no calibration-" in moved.stdout and "--calibration DIR" in \
            moved.stdout
        # A changed rubric is a new judge: uncalibrated, the old calibration untouched.
        (tmp_path / "judge" / "rubric.yaml").write_text(RUBRIC.replace("How good", "How fine"))
        changed = load_judge(judge_yaml)
        assert changed.revision != judge.revision and calibration_for(changed) is None
        assert path.read_text() == first


def test_cli_exit_codes_for_bad_input_and_a_failing_endpoint(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "judge.yaml").write_text("model: m\nrubric: missing.yaml\n")
    result = run_cli(["judge", "check", str(bad / "judge.yaml")])
    assert result.code == 2 and "judge.yaml:2: field 'rubric'" in result.stderr
    with JudgeServer({"ITEM": Status(503, {"Retry-After": "0"})}) as server:
        judge_yaml = write_judge(tmp_path / "judge", server.base_url)
        grades = tmp_path / "g.jsonl"
        grades.write_text('{"id": "a", "answer": "x", "grades": {"ok": "maybe"}}\n'
                          '{"id": "a", "grades": {"ok": "yes"}}\nnot json\n')
        result = run_cli(["judge", "calibrate", str(judge_yaml), str(grades)])
        assert result.code == 2
        assert f"{grades}:1: field 'grades.ok': \"maybe\" is not in the scale" in result.stderr
        assert f"{grades}:2: field 'id': id 'a' appears twice" in result.stderr
        assert f"{grades}:2: field 'answer': give one of 'answer' or 'material'" in \
            result.stderr
        assert f"{grades}:3: invalid JSON" in result.stderr
        (tmp_path / "g2.jsonl").write_text(
            '{"id": "a", "answer": "ITEM", "grades": {"ok": "yes"}}\n')
        down = run_cli(["judge", "calibrate", str(judge_yaml), str(tmp_path / "g2.jsonl")])
        assert down.code == 3 and "503" in down.stderr
    nowhere = tmp_path / "nowhere"
    nowhere.mkdir()
    (nowhere / "rubric.yaml").write_text(RUBRIC)
    (nowhere / "judge.yaml").write_text("model: m\nrubric: rubric.yaml\nbase_url_env: "
                                        "JUDGE_URL_UNSET_HERE\n")
    result = run_cli(["judge", "calibrate", str(nowhere / "judge.yaml"),
                      str(tmp_path / "g2.jsonl")])
    assert result.code == 2 and "JUDGE_URL_UNSET_HERE is not set" in result.stderr


def test_material_items_with_files_and_events(tmp_path: Path) -> None:
    judge = load_judge(write_judge(tmp_path / "j", "http://127.0.0.1:9/v1"))
    path = tmp_path / "g.jsonl"
    path.write_text(json.dumps({"id": "t1", "material": {
        "kind": "trajectory", "files": {"fix.py": "a\nb\n"}, "events": ["ran", "done"],
        "context": "Fix it."}, "grades": {"ok": "YES", "quality": 2}}) + "\n")
    human = load_human_grades(path, judge)
    item = human.items[0]
    assert item.grades == {"ok": "yes", "quality": 2}  # labels match ignoring case
    assert item.material.events == ("ran", "done") and item.material.kind == "trajectory"
    path.write_text(json.dumps({"id": "t1", "material": {"kind": "essay", "files": {}},
                                "grades": {"ok": "yes"}}) + "\n")
    with pytest.raises(SuiteError, match="'material.kind' is one of"):
        load_human_grades(path, judge)


def make_graded_run(root: Path) -> Path:
    """A coding run as `assay run` leaves it, with rubric grades as `assay grade` writes."""
    run = root / "run-coding"
    (run / "suite").mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({
        "kind": "coding", "run_id": "rid-42", "model": {"requested": "sekrit-model-7",
                                                        "served_models": []}}))
    tasks = [{"id": "q1", "type": "rubric", "prompt": "Rank orders.", "rubric": "window fn"},
             {"id": "q2", "type": "rubric", "prompt": "Dedupe.", "rubric": ""}]
    (run / "suite" / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    codes = {("q1", 0): "SELECT rank() -- by sekrit-model-7", ("q2", 0): "SELECT DISTINCT",
             ("q2", 1): "ungraded"}
    (run / "samples.jsonl").write_text("".join(
        json.dumps({"id": t, "sample": s, "type": "rubric", "code": c, "raw": c,
                    "error": None}) + "\n" for (t, s), c in codes.items()))
    grades = run / "grades" / "rubric"
    grades.mkdir(parents=True)
    rows = [grade_row(task_id=t, sample=s, answer_id="x", score=score, note="", grader="ann",
                      revision="r1", seed=1, source="test", answer_sha256=sha256(codes[(t, s)]))
            for (t, s), score in {("q1", 0): 3, ("q2", 0): 1}.items()]
    (grades / "r1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_rubric_grades_from_a_graded_run_map_to_the_rubric_criterion(tmp_path: Path) -> None:
    run = make_graded_run(tmp_path)
    one = "- id: rubric\n  question: How well does it meet the rubric?\n  scale: [0, 3]\n"
    with JudgeServer({"rank()": verdict({"rubric": 3}, ["answer.txt:1"]),
                      "DISTINCT": verdict({"rubric": 2}, ["answer.txt:1"])}) as server:
        judge_yaml = write_judge(tmp_path / "j", server.base_url, rubric=one)
        result = run_cli(["judge", "calibrate", str(judge_yaml), str(run)])
        assert result.code == 0, result.stderr
        sent = [r.case_input for r in server.chat_requests()]
    assert len(sent) == 2 and all("sekrit-model-7" not in s for s in sent)
    assert any("[redacted]" in s and "Grading notes for this task:\n| window fn" in s
               for s in sent)
    cal = calibration_for(load_judge(judge_yaml))
    assert cal["human"]["kind"] == "rubric_run" and cal["items"] == 2
    assert cal["criteria"]["rubric"]["confusion"]["1"]["2"] == 1
    assert cal["criteria"]["rubric"]["exact"] == pytest.approx(0.5)
    # Several criteria and none named "rubric": nothing to map the one score to.
    judge = load_judge(write_judge(tmp_path / "k", server.base_url))
    with pytest.raises(GradingError, match="needs a criterion 'rubric' or only one"):
        load_human_grades(run, judge)
    labels = "- id: rubric\n  question: q\n  scale: [good, bad]\n"
    with pytest.raises(GradingError, match="rubric grades are 0-3"):
        load_human_grades(run, load_judge(write_judge(tmp_path / "l", "http://x/v1", labels)))


def test_judge_run_judges_files_and_says_uncalibrated(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("fix.py").write_text("ITEM1\nx = 1\n")
    reply = verdict({"ok": "yes", "quality": 2, "tone": "polite"}, ["fix.py:1-2"])
    with JudgeServer({"ITEM1": reply}) as server:
        judge_yaml = write_judge(tmp_path / "judge", server.base_url)
        result = run_cli(["judge", "run", str(judge_yaml), "fix.py", "--context", "Fix it.",
                          "--out", "j.jsonl"])
        sent = server.chat_requests()[0].case_input
    assert result.code == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["status"] == "valid" and shown["scores"]["quality"] == 2
    assert shown["calibration"] == "uncalibrated"
    assert "[file fix.py (2 lines)]" in sent and "| Fix it." in sent
    assert [j.scores for j in iter_judgements(tmp_path / "j.jsonl")] == [shown["scores"]]
    missing = run_cli(["judge", "run", str(judge_yaml), "nope.py"])
    assert missing.code == 2 and "nope.py: cannot be read" in missing.stderr
