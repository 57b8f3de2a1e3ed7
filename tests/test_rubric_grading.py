"""Blind rubric grading on real run directories written by hand: interactive sessions driven by
scripted input, grade revisions on disk, CSV export/import, and the real ``assay grade`` CLI
(in-process through ``run_cli``, and once as a subprocess reading a real stdin pipe)."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest
from conftest import run_cli
from rich.console import Console

import assay
from assay.cli.rubric_ui import interactive_session
from assay.grading.rubric import (
    GradingError,
    ShownAnswer,
    collect_answers,
    export_csv,
    grade_session,
    import_csv,
    latest_grades,
    shuffle_answers,
)

RUBRIC_TASKS = {
    "sql-01": ("Write a query that ranks [bold]orders[/bold] per customer.",
               "uses a window function; partitions by customer"),
    "sql-02": ("Deduplicate the events table.", "keeps the newest row of each event id"),
    "py-fmt": ("Format a number of bytes for humans.", "handles 0, KiB and MiB boundaries"),
    "js-ui": ("Debounce a callback.", "clears the pending timer on every call"),
}
SAMPLES = 2
HEADER = re.compile(r"answer (\d+) of (\d+) · task (\S+) · blind id ([0-9a-f]{8})")


def _lines(rows: Iterable[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def make_run(root: Path, *, letter: str, model: str) -> dict:
    """A coding run directory as `assay run` leaves it, with the awkward rows real runs have."""
    run_dir = root / f"run-{model}-20250101T0000"
    run_id = f"rid-{letter}-{model}-42"
    served = f"{model}-served-0613"
    (run_dir / "suite").mkdir(parents=True)
    manifest = {"kind": "coding", "run_id": run_id,
                "model": {"requested": model, "served_models": [served]},
                "suite": {"name": "sql-and-friends"}}
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    tasks = [{"id": tid, "type": "rubric", "prompt": p, "rubric": r}
             for tid, (p, r) in RUBRIC_TASKS.items()]
    tasks.insert(2, {"id": "py-add", "type": "unit", "prompt": "add", "tests": "assert 1"})
    (run_dir / "suite" / "tasks.jsonl").write_text(_lines(tasks))

    def good(tid: str, sample: int, code: str, raw: str | None = None) -> dict:
        language = {"py": "python", "js": "javascript"}.get(tid[:2])
        return {"id": tid, "sample": sample, "type": "rubric", "language": language,
                "raw": raw if raw is not None else f"```\n{code}\n```", "code": code,
                "passed": None, "reason": "needs_human_grade", "error": None,
                "served_model": served}

    def broken(tid: str, sample: int) -> dict:
        return {"id": tid, "sample": sample, "type": "rubric", "language": None, "raw": None,
                "code": None, "passed": None, "reason": "infra_error",
                "error": "connection reset", "served_model": None}

    texts: dict[tuple[str, int], str] = {}
    rows: list[dict] = []
    for tid in RUBRIC_TASKS:
        for s in range(SAMPLES):
            code = f"-- answer {letter} {tid} {s}\nSELECT {s} AS {tid.replace('-', '_')}"
            raw = None
            if (tid, s) == ("sql-01", 0):
                rows.append(broken(tid, s))  # superseded by the good row below
            if (tid, s) == ("js-ui", 0):  # nothing extracted: the raw text names the model
                raw = f"As {model} I think: answer {letter} js-ui 0 — by {served} ({run_id})"
                code = ""
            if (tid, s) == ("py-fmt", 1):
                code = f"=HYPERLINK(\"x\") # answer {letter} py-fmt 1"
            rows.append(good(tid, s, code, raw))
            texts[(tid, s)] = code or raw or ""
            if (tid, s) == ("sql-02", 1):
                rows.append(broken(tid, s))  # a later infra error does not replace the answer
    rows.append(broken("sql-02", 2))  # only an infra error: no answer to grade
    rows.insert(3, {"id": "py-add", "sample": 0, "type": "unit", "language": "python",
                    "raw": "x", "code": "def add(a, b): return a + b", "passed": True,
                    "reason": "passed", "error": None, "served_model": served})
    (run_dir / "samples.jsonl").write_text(_lines(rows))
    return {"dir": run_dir, "run_id": run_id, "model": model, "served": served,
            "texts": texts, "letter": letter}


@pytest.fixture
def runs(tmp_path: Path) -> tuple[dict, dict]:
    return (make_run(tmp_path, letter="a", model="secret-model-alpha"),
            make_run(tmp_path, letter="b", model="secret-model-beta"))


def secrets_of(*runs: dict) -> list[str]:
    out = []
    for r in runs:
        out += [r["model"], r["served"], r["run_id"], str(r["dir"]), r["dir"].name]
    return out


class Script:
    """Scripted keyboard: returns the replies in order, then ends input (EOF)."""

    def __init__(self, replies: Iterable[str | type[BaseException]]):
        self.replies = list(replies)
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if not self.replies:
            raise EOFError
        reply = self.replies.pop(0)
        if isinstance(reply, type):
            raise reply()
        return reply


def console() -> Console:
    return Console(file=io.StringIO(), width=120, color_system=None)


def screen(con: Console) -> str:
    return con.file.getvalue()  # type: ignore[attr-defined]


def headers(con: Console) -> list[tuple[str, str]]:
    return [(m.group(3), m.group(4)) for m in HEADER.finditer(screen(con))]


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def grade_files(run: dict) -> list[Path]:
    return sorted((run["dir"] / "grades" / "rubric").glob("*.jsonl"))


def grade_rows(run: dict) -> list[dict]:
    return [json.loads(line) for p in grade_files(run) for line in p.read_text().splitlines()]


def owner(row: dict, runs: tuple[dict, dict]) -> dict:
    """The run whose answer text the grade row was given for."""
    (match,) = [r for r in runs if sha(r["texts"][(row["id"], row["sample"])])
                == row["answer_sha256"]]
    return match


# --------------------------------------------------------------------------- collecting


def test_collect_answers_takes_the_final_rubric_row_of_each_sample(runs):
    a, b = runs
    answers = collect_answers([a["dir"], b["dir"]])
    assert len(answers) == 2 * len(RUBRIC_TASKS) * SAMPLES  # no unit row, no error-only key
    assert len({x.answer_id for x in answers}) == len(answers)
    assert all(re.fullmatch(r"[0-9a-f]{8}", x.answer_id) for x in answers)
    by_key = {(x.run_dir, x.task_id, x.sample): x for x in answers}
    for run in runs:
        for (tid, s), text in run["texts"].items():
            x = by_key[(run["dir"], tid, s)]
            assert x.text == text
            assert x.prompt == RUBRIC_TASKS[tid][0] and x.rubric == RUBRIC_TASKS[tid][1]
    assert by_key[(a["dir"], "py-fmt", 0)].language == "python"
    assert by_key[(a["dir"], "js-ui", 1)].language == "javascript"
    assert by_key[(a["dir"], "sql-01", 0)].language is None
    assert "py-add" not in {x.task_id for x in answers}


def test_a_directory_that_is_not_a_coding_run_is_refused(tmp_path, runs):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(GradingError, match="not an assay run directory"):
        collect_answers([runs[0]["dir"], empty])
    narrow = tmp_path / "narrow"
    narrow.mkdir()
    (narrow / "manifest.json").write_text(json.dumps({"kind": "narrow", "run_id": "n"}))
    with pytest.raises(GradingError, match="not a coding run"):
        interactive_session([narrow], grader="ann", console=console(), ask=Script([]))
    with pytest.raises(GradingError, match="no such run directory"):
        collect_answers([tmp_path / "missing"])


# --------------------------------------------------------------------------- interactive


def test_session_grades_blind_and_writes_a_revision_in_each_run(runs):
    a, b = runs
    con = console()
    ask = Script(["2", "", "7", "x", "3", "  good one ", "s", "1", "meh", "0", "", "q"])
    summary = interactive_session([a["dir"], b["dir"]], grader="ann", seed=11, console=con,
                                  ask=ask)
    assert summary["graded"] == 4 and summary["skipped"] == 1
    assert summary["remaining"] == 16 - 5 and summary["seed"] == 11
    assert summary["revision"].endswith("-ann")
    out = screen(con)
    for secret in secrets_of(a, b):
        assert secret not in out, f"{secret!r} shown to the grader"
    assert "'7' is not a score" in out and "'x' is not a score" in out
    shown = headers(con)
    assert len(shown) == 6 and shown[0][0] in RUBRIC_TASKS
    assert out.count("answer 1 of 16") == 1
    assert ask.prompts.count("score 0-3, s skip, q quit: ") == 8

    rows = grade_rows(a) + grade_rows(b)
    assert sorted(r["score"] for r in rows) == [0, 1, 2, 3]
    blind_graded = {bid for _, bid in shown[:2]} | {shown[3][1], shown[4][1]}
    assert {r["answer_id"] for r in rows} == blind_graded
    notes = {r["score"]: r["note"] for r in rows}
    assert notes[3] == "good one" and notes[2] == "" and notes[1] == "meh"
    for run in runs:
        files = grade_files(run)
        for r in grade_rows(run):
            assert owner(r, runs) is run  # each run holds only grades of its own answers
            assert {"id", "sample", "score", "note", "grader", "graded_at", "revision", "seed",
                    "answer_id"} <= set(r)
            assert r["grader"] == "ann" and r["seed"] == 11
            assert r["revision"] == summary["revision"]
        if files:
            assert [p.name for p in files] == [f"{summary['revision']}.jsonl"]
            meta = json.loads((files[0].parent / f"{summary['revision']}.meta.json").read_text())
            assert meta["seed"] == 11 and meta["grader"] == "ann"
            assert meta["source"] == "interactive"
    assert len(latest_grades(a["dir"])) + len(latest_grades(b["dir"])) == 4


def test_the_raw_answer_is_redacted_when_nothing_was_extracted(runs):
    a, b = runs
    con = console()
    n = 2 * len(RUBRIC_TASKS) * SAMPLES
    interactive_session([a["dir"], b["dir"]], grader="ann", seed=3, console=con,
                        ask=Script(["s"] * n))
    out = screen(con)
    assert out.count("answer ") >= n
    assert "As [redacted] I think: answer a js-ui 0" in out
    assert "As [redacted] I think: answer b js-ui 0" in out
    assert "ranks [bold]orders[/bold] per customer" in out  # task text is shown, not rendered
    for secret in secrets_of(a, b):
        assert secret not in out
    assert not (a["dir"] / "grades" / "rubric").exists()  # skips write nothing


class RecordingScreen:
    """A GraderScreen with no terminal: keeps what a front end would be handed."""

    def __init__(self) -> None:
        self.shown: list[ShownAnswer] = []
        self.messages: list[str] = []

    def show(self, answer: ShownAnswer) -> None:
        self.shown.append(answer)

    def tell(self, message: str) -> None:
        self.messages.append(message)

    def warn(self, message: str) -> None:
        self.messages.append(message)


def test_a_front_end_is_handed_only_redacted_answers(runs):
    a, b = runs
    screen = RecordingScreen()
    summary = grade_session([a["dir"], b["dir"]], grader="ann", seed=3, screen=screen,
                            ask=Script(["s"] * 15 + ["1", "fine"]))
    assert summary["graded"] == 1 and summary["skipped"] == 15 and not summary["stopped"]
    assert [(x.index, x.total) for x in screen.shown] == [(i, 16) for i in range(1, 17)]
    handed = " ".join(f"{x.task_id} {x.answer_id} {x.prompt} {x.rubric} {x.text}"
                      for x in screen.shown) + " ".join(screen.messages)
    for secret in secrets_of(a, b):
        assert secret.lower() not in handed.lower(), f"{secret!r} handed to the front end"
    assert handed.count("As [redacted] I think") == 2
    (row,) = grade_rows(a) + grade_rows(b)
    assert row["answer_id"] == screen.shown[-1].answer_id and row["note"] == "fine"


def test_same_seed_same_order_other_seed_other_order(runs):
    dirs = [r["dir"] for r in runs]

    def order(seed: int, dirs: list[Path]) -> list[tuple[Path, str, int]]:
        return [(x.run_dir, x.task_id, x.sample)
                for x in shuffle_answers(collect_answers(dirs), seed)]

    assert order(5, dirs) == order(5, dirs) == order(5, dirs[::-1])
    assert order(5, dirs) != order(6, dirs)
    first = order(5, dirs)
    assert {d for d, _, _ in first[:8]} == set(dirs)  # runs are interleaved, not in blocks

    def session_tasks(seed: int) -> list[str]:
        con = console()
        interactive_session(dirs, grader="ann", seed=seed, console=con, ask=Script(["s"] * 16))
        return [t for t, _ in headers(con)]

    assert session_tasks(5) == session_tasks(5) == [t for _, t, _ in first]
    assert session_tasks(5) != session_tasks(6)


def test_resume_skips_graded_answers_unless_regrade(runs):
    a, b = runs
    dirs = [a["dir"], b["dir"]]
    first = interactive_session(dirs, grader="ann", seed=1, console=console(),
                                ask=Script(["2", "", "3", "ok", "q"]))
    assert first["graded"] == 2 and first["remaining"] == 14
    graded = {(owner(r, runs)["dir"], r["id"], r["sample"]) for r in grade_rows(a) + grade_rows(b)}
    left = collect_answers(dirs)
    assert len(left) == 14
    assert not graded & {(x.run_dir, x.task_id, x.sample) for x in left}
    con = console()
    second = interactive_session(dirs, grader="ann", seed=1, console=con, ask=Script(["q"]))
    assert second["graded"] == 0 and second["remaining"] == 14 and second["revision"] is None
    assert "answer 1 of 14" in screen(con)
    assert len(collect_answers(dirs, regrade=True)) == 16


def test_a_second_session_is_a_new_revision_and_the_first_is_untouched(runs):
    a, b = runs
    dirs = [a["dir"], b["dir"]]
    s1 = interactive_session(dirs, grader="ann", seed=9, console=console(),
                             ask=Script(["1", "first look", "q"]))
    (row1,) = grade_rows(a) + grade_rows(b)
    run = owner(row1, runs)
    (file1,) = grade_files(run)
    before = file1.read_bytes()
    meta1 = (file1.parent / f"{s1['revision']}.meta.json").read_bytes()
    # Same seed, same answer set (regrade): the same answer comes first again.
    s2 = interactive_session(dirs, grader="bob", seed=9, regrade=True, console=console(),
                             ask=Script(["3", "second look", "q"]))
    assert s2["revision"] != s1["revision"] and s2["revision"].endswith("-bob")
    files = grade_files(run)
    assert len(files) == 2 and file1 in files
    assert file1.read_bytes() == before
    assert (file1.parent / f"{s1['revision']}.meta.json").read_bytes() == meta1
    key = (row1["id"], row1["sample"])
    latest = latest_grades(run["dir"])
    assert latest[key]["score"] == 3 and latest[key]["grader"] == "bob"
    assert latest[key]["answer_sha256"] == row1["answer_sha256"]
    # the same grader twice in a row gets a distinct revision name as well
    s3 = interactive_session(dirs, grader="bob", seed=9, regrade=True, console=console(),
                             ask=Script(["0", "", "q"]))
    assert s3["revision"] not in (s1["revision"], s2["revision"])
    assert latest_grades(run["dir"])[key]["score"] == 0
    assert len(grade_files(run)) == 3


def test_latest_grades_orders_by_time_then_revision(tmp_path):
    d = tmp_path / "grades" / "rubric"
    d.mkdir(parents=True)

    def row(score: int, at: str, rev: str, sample: int = 0) -> dict:
        return {"id": "t", "sample": sample, "score": score, "note": "", "grader": "g",
                "graded_at": at, "revision": rev, "seed": 1, "answer_id": "00000000"}

    (d / "20250102T000000.000Z-a.jsonl").write_text(_lines([
        row(1, "2025-01-02T00:00:00.000Z", "20250102T000000.000Z-a"),
        row(2, "2025-01-03T00:00:00.000Z", "20250102T000000.000Z-a", sample=1)]))
    (d / "20250101T000000.000Z-b.jsonl").write_text(_lines([
        row(3, "2025-01-05T00:00:00.000Z", "20250101T000000.000Z-b"),
        row(0, "2025-01-03T00:00:00.000Z", "20250101T000000.000Z-b", sample=1),
        {"id": "t", "sample": 2, "score": 9, "graded_at": "2025-01-09T00:00:00.000Z"}]))
    latest = latest_grades(tmp_path)
    assert latest[("t", 0)]["score"] == 3  # newer graded_at wins over a later revision name
    assert latest[("t", 1)]["score"] == 2  # same time: the later revision wins
    assert ("t", 2) not in latest  # not a 0-3 score: ignored
    assert latest_grades(tmp_path / "nowhere") == {}


def test_end_of_input_and_ctrl_c_stop_cleanly_and_keep_grades(runs):
    a, b = runs
    dirs = [a["dir"], b["dir"]]
    con = console()
    summary = interactive_session(dirs, grader="ann", seed=2, console=con, ask=Script(["2"]))
    assert summary["graded"] == 1 and summary["stopped"]  # EOF at the note: score kept
    assert [r["note"] for r in grade_rows(a) + grade_rows(b)] == [""]
    assert "stopped" in screen(con)
    summary = interactive_session(dirs, grader="ann", seed=2, console=console(),
                                  ask=Script(["1", "n"]))
    assert summary["graded"] == 1 and summary["remaining"] == 14
    summary = interactive_session(dirs, grader="ann", seed=2, console=console(),
                                  ask=Script(["s", "3", "fine", KeyboardInterrupt]))
    assert summary == {**summary, "graded": 1, "skipped": 1, "stopped": True}
    assert len(collect_answers(dirs)) == 13


# --------------------------------------------------------------------------- CSV


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8-sig", newline="") as fh:
        return list(csv.DictReader(fh))


def write_csv(path: Path, rows: list[dict[str, str]]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def mappings(run: dict, export_id: str) -> dict:
    return json.loads((run["dir"] / "grades" / "exports" / f"{export_id}.json").read_text())


def test_export_is_blind_and_keeps_the_mapping_in_the_runs(tmp_path, runs):
    a, b = runs
    out = tmp_path / "sheet.csv"
    summary = export_csv([a["dir"], b["dir"]], out, seed=4)
    assert summary["answers"] == 16
    text = out.read_text(encoding="utf-8-sig")
    for secret in secrets_of(a, b):
        assert secret not in text, f"{secret!r} leaked into the CSV"
    assert str(tmp_path) not in text
    rows = read_csv(out)
    assert list(rows[0]) == ["export_id", "answer_id", "task", "score", "note", "prompt",
                             "rubric", "answer"]
    assert len(rows) == 16 and {r["export_id"] for r in rows} == {summary["export_id"]}
    assert all(r["score"] == "" for r in rows)
    assert any(r["answer"].startswith("'=HYPERLINK") for r in rows)  # no formula injection
    ma, mb = mappings(a, summary["export_id"]), mappings(b, summary["export_id"])
    assert ma["seed"] == 4 and len(ma["answers"]) == len(mb["answers"]) == 8
    assert set(ma["answers"]) | set(mb["answers"]) == {r["answer_id"] for r in rows}
    for run, m in ((a, ma), (b, mb)):
        for target in m["answers"].values():
            assert target["answer_sha256"] == sha(run["texts"][(target["id"], target["sample"])])
    # the CSV is in the same shuffled order an interactive session with that seed would show
    con = console()
    interactive_session([a["dir"], b["dir"]], grader="x", seed=4, console=con,
                        ask=Script(["s"] * 16))
    assert [t for t, _ in headers(con)] == [r["task"] for r in rows]
    assert len(collect_answers([a["dir"], b["dir"]])) == 16  # exporting grades nothing
    with pytest.raises(GradingError, match="already exists"):
        export_csv([a["dir"], b["dir"]], out, seed=4)


def test_import_of_an_edited_csv_writes_grades_to_the_right_runs(tmp_path, runs):
    a, b = runs
    dirs = [a["dir"], b["dir"]]
    out = tmp_path / "sheet.csv"
    export_id = export_csv(dirs, out, seed=4)["export_id"]
    rows = read_csv(out)
    scores = {}
    for i, r in enumerate(rows[:10]):
        r["score"] = str(i % 4) if i != 9 else " 2.0 "  # a spreadsheet may write 2.0
        r["note"] = f"note {i}"
        scores[r["answer_id"]] = i % 4 if i != 9 else 2
    write_csv(out, rows)
    summary = import_csv(dirs, out, grader="carol")
    assert summary["graded"] == 10 and summary["blank"] == 6
    assert summary["revision"].endswith("-carol")
    for run in runs:
        m = mappings(run, export_id)["answers"]
        latest = latest_grades(run["dir"])
        mine = {aid for aid in m if aid in scores}
        assert {(m[aid]["id"], m[aid]["sample"]) for aid in mine} == set(latest)
        for aid in mine:
            row = latest[(m[aid]["id"], m[aid]["sample"])]
            assert row["score"] == scores[aid] and row["answer_id"] == aid
            assert row["grader"] == "carol" and row["seed"] == 4
            assert row["source"] == "csv" and row["export_id"] == export_id
        meta = json.loads((run["dir"] / "grades" / "rubric" /
                           f"{summary['revision']}.meta.json").read_text())
        assert meta["export_ids"] == [export_id] and meta["seed"] == 4
    assert len(collect_answers(dirs)) == 6
    # importing again is a further revision, never an overwrite
    again = import_csv(dirs, out, grader="carol")
    assert again["revision"] != summary["revision"]
    assert all(len(grade_files(run)) == 2 for run in runs)


def test_import_errors_name_the_csv_line_and_write_nothing(tmp_path, runs):
    a, b = runs
    dirs = [a["dir"], b["dir"]]
    out = tmp_path / "sheet.csv"
    export_csv(dirs, out, seed=8)
    orig = read_csv(out)
    rows = read_csv(out)
    rows[0]["score"] = "3"
    rows[1]["score"] = "5"
    rows[2]["score"] = "good"
    rows[3]["score"] = "1"
    rows[3]["answer_id"] = "deadbeef"
    rows[4]["score"] = "2"
    rows[4]["export_id"] = "19990101T000000Z-000000"
    write_csv(out, rows)
    text = out.read_text()

    def line_of(marker: str) -> int:  # records span several lines (multi-line answers)
        return text[:text.index(marker)].count("\n") + 1

    with pytest.raises(GradingError) as exc:
        import_csv(dirs, out, grader="dan")
    msg = str(exc.value)
    assert "nothing was imported" in msg and "4 bad line(s)" in msg
    assert f"sheet.csv:{line_of(rows[1]['answer_id'])} (spreadsheet row 3): score '5'" in msg
    assert f"sheet.csv:{line_of(rows[2]['answer_id'])} (spreadsheet row 4): score 'good'" in msg
    assert f"sheet.csv:{line_of('deadbeef')} (spreadsheet row 5): unknown answer id" in msg
    assert f"sheet.csv:{line_of('19990101T000000Z')} (spreadsheet row 6): unknown export" in msg
    assert line_of(rows[2]["answer_id"]) > 4  # line numbers, not record numbers
    for run in runs:
        assert not (run["dir"] / "grades" / "rubric").exists()
    # only one of the exported runs given: the other run's answers are unknown
    write_csv(out, [{**r, "score": "1"} for r in orig])
    with pytest.raises(GradingError, match=r"8 bad line(.|\n)*unknown answer id.*"
                       r"the export has 16 answers, the given run directories hold 8"):
        import_csv([a["dir"]], out, grader="dan")
    assert not (a["dir"] / "grades" / "rubric").exists()
    # a duplicated answer id is ambiguous
    write_csv(out, [{**orig[0], "score": "1"}, {**orig[0], "score": "2"}])
    with pytest.raises(GradingError, match="graded twice"):
        import_csv(dirs, out, grader="dan")
    # a header without the needed columns
    out.write_text("answer,score\nx,1\n")
    with pytest.raises(GradingError, match=r"sheet.csv:1: header lacks column\(s\) export_id"):
        import_csv(dirs, out, grader="dan")


# --------------------------------------------------------------------------- the real CLI


def test_cli_grade_session(runs, monkeypatch):
    a, b = runs
    args = ["grade", str(a["dir"]), str(b["dir"]), "--grader", "ann", "--seed", "7"]
    # The real keyboard under the CLI runner is an empty stdin: the sitting stops at once.
    res = run_cli(args)
    assert res.code == 0, res.stderr
    assert "answer 1 of 16" in res.stdout and "graded: 0" in res.stdout
    assert grade_rows(a) + grade_rows(b) == []
    ask = Script(["2", "", "3", "nice", "q"])
    monkeypatch.setattr("assay.cli.grading.ask_grader", ask)
    res = run_cli(args)
    assert res.code == 0, res.stderr
    assert ask.prompts[:2] == ["score 0-3, s skip, q quit: ", "note (optional): "]
    for secret in secrets_of(a, b):
        assert secret not in res.stdout and secret not in res.stderr
    rows = grade_rows(a) + grade_rows(b)
    assert sorted((r["score"], r["note"]) for r in rows) == [(2, ""), (3, "nice")]
    assert {r["seed"] for r in rows} == {7} and {r["grader"] for r in rows} == {"ann"}
    assert "answer 1 of 16" in res.stdout and "graded: 2" in res.stdout


def test_cli_grade_export_import_and_refusals(tmp_path, runs):
    a, b = runs
    dirs = [str(a["dir"]), str(b["dir"])]
    sheet = tmp_path / "sheet.csv"
    res = run_cli(["grade", *dirs, "--export", str(sheet), "--seed", "3"])
    assert res.code == 0, res.stderr
    assert "answers: 16" in res.stdout
    rows = read_csv(sheet)
    rows[0]["score"] = "1"
    write_csv(sheet, rows)
    res = run_cli(["grade", *dirs, "--import", str(sheet), "--grader", "eve"])
    assert res.code == 0, res.stderr
    assert "graded: 1" in res.stdout and "blank: 15" in res.stdout
    assert [r["grader"] for r in grade_rows(a) + grade_rows(b)] == ["eve"]
    res = run_cli(["grade", *dirs, "--export", str(tmp_path / "x.csv"), "--import", str(sheet)])
    assert res.code == 2 and "not both" in res.stderr
    res = run_cli(["grade", str(tmp_path)])
    assert res.code == 2 and "not an assay run directory" in res.stderr


def test_cli_grade_session_reads_a_real_stdin(runs):
    """A real process with its stdin piped, as a grader scripting it in a shell would. The
    child imports assay from this tree (PYTHONPATH), whatever the interpreter has installed."""
    a, b = runs
    src = str(Path(assay.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [src, *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, "-m", "assay", "grade", str(a["dir"]), str(b["dir"]),
                           "--grader", "ann", "--seed", "7"], env=env,
                          input="2\n\n3\nnice\nq\n", text=True, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for secret in secrets_of(a, b):
        assert secret not in proc.stdout and secret not in proc.stderr
    rows = grade_rows(a) + grade_rows(b)
    assert sorted((r["score"], r["note"]) for r in rows) == [(2, ""), (3, "nice")]
    assert {r["seed"] for r in rows} == {7} and {r["grader"] for r in rows} == {"ann"}
    assert "answer 1 of 16" in proc.stdout


def test_grading_never_draws_a_terminal():
    """The terminal is the CLI's (assay.cli.rubric_ui): no grading module imports rich, so the
    rules can be reused by a library caller or another front end."""
    import ast

    grading = Path(assay.__file__).parent / "grading"
    found = []
    for path in sorted(grading.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "rich"]
    assert list(grading.glob("rubric/*.py")) and found == []
