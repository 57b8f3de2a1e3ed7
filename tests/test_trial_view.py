"""A trial opened, end to end with real parts: the pinned Qwen Code CLI (``scripts/agents/qwen.sh``)
in the bubblewrap sandbox, through the real gateway, against a scripted upstream that holds the
real key; ``exp run`` through the CLI. One run (module fixture) of two arms that disagree on one
task: ``fix`` looks, fixes and is accepted; ``note`` looks, writes a note outside the allowed
paths and is rejected.

Checked: the gateway transcript of a real agent is content-addressed (the store holds each
distinct message once: fewer entries than the histories sent, and exactly the distinct ones),
rebuilds what the upstream received, and holds no secret (the real key, the scoped token);
``transcripts: false`` keeps no bodies and the ledger says ``off``; ``assay trial show`` prints
the instruction, the diff, each check, the steps with tokens, the ledger and the timings, from
the agent's stream and, with the stream gone, from the gateway transcript.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SECRET, run_cli
from support import agent_cli
from support.scripted_server import Answer, RecordedRequest, ScriptedServer

from assay.records.io import iter_rows
from assay.records.transcript import BLOBS_FILE, CALLS_FILE, TranscriptBlob, load_transcript
from assay.sandbox import bwrap_available

# real agent CLIs held to wall budgets: run after the other tests, two at a time (Makefile)
pytestmark = pytest.mark.quiet

qwen_bin = agent_cli.install_fixture(agent_cli.SCRIPTS / "qwen.sh", "qwen-code")

FIX_CMD = ("python3 -c \"import pathlib; p = pathlib.Path('src/calc/__init__.py'); "
           "p.write_text(p.read_text().replace('a - b', 'a + b'))\"")
NOTE_CMD = "echo remember to fix add > NOTES.txt"
# Without bytecode and the cache: on this main a tests/__pycache__ left by the agent is graded
# protected_file_changed (the verifier's business, not this module's).
TEST_CMD = "PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=src python3 -m pytest -q -p no:cacheprovider tests"


def _tool(n: int, command: str, text: str = "") -> Answer:
    return Answer(text, model="scripted", tool_calls=[{
        "id": f"call_{n}", "type": "function",
        "function": {"name": "run_shell_command", "arguments": json.dumps({"command": command})}}],
        finish_reason="tool_calls")


def _upstream(req: RecordedRequest, n: int) -> Answer:
    """Each arm's model by its pinned name; the step is the number of tool results so far."""
    body = req.body or {}
    done = sum(1 for m in body.get("messages", []) if m.get("role") == "tool")
    if done == 0:
        return _tool(0, "ls src/calc")
    if done == 1:
        if body.get("model") == "qw-fix":
            return _tool(1, FIX_CMD, "I will fix add.")
        return _tool(1, NOTE_CMD, "I will leave a note.")
    if done == 2 and body.get("model") == "qw-fix":  # an honest agent runs the tests
        return _tool(2, TEST_CMD, "Running the tests.")
    return Answer("Fixed add()." if body.get("model") == "qw-fix" else "Left a note.",
                  model="scripted")


ARMS = (("note", "qw-note"), ("fix", "qw-fix"))


def _experiment(root: Path, qwen: Path, extra: str = "", task_extra: str = "",
                arms: tuple[tuple[str, str], ...] = ARMS) -> Path:
    bundle = agent_cli.proxy_bundle(root / "tasks" / "calc")
    if task_extra:
        with (bundle / "task.yaml").open("a") as fh:
            fh.write(task_extra)
    exp = root / "experiment.yaml"
    listed = "".join(f"  {arm}:\n    agent: \"qwen:{qwen}\"\n    model: {{name: {model}, "
                     "base_url_env: TV_UPSTREAM, api_key_env: TV_KEY}\n"
                     for arm, model in arms)
    bar = ("bar: {hoped_improvement: 0.1, max_regression: 0.05, baseline: note, "
           "candidate: fix}\n") if arms == ARMS else ""
    exp.write_text(f"name: trialview\ntasks: [tasks]\nseed: 3\nconcurrency: 2\narms:\n{listed}"
                   f"{bar}{extra}")
    return exp


def run_pair(root: Path, qwen: Path, extra: str = "", task_extra: str = "",
             arms: tuple[tuple[str, str], ...] = ARMS) -> tuple[Path, list[RecordedRequest]]:
    with ScriptedServer(_upstream) as srv, pytest.MonkeyPatch.context() as mp:
        mp.setenv("TV_UPSTREAM", srv.base_url)
        mp.setenv("TV_KEY", SECRET)
        out = root / "run"
        res = run_cli(["exp", "run", str(_experiment(root, qwen, extra, task_extra, arms)),
                       "--out", str(out)])
        assert res.code == 0, res.stdout + res.stderr
        return out, srv.chat_requests()


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, qwen_bin: Path) -> Iterator[
        tuple[Path, list[RecordedRequest]]]:
    if not bwrap_available():
        pytest.skip("bubblewrap cannot run here")
    yield run_pair(tmp_path_factory.mktemp("pair"), qwen_bin)


def _trial(out: Path, arm: str) -> tuple[Path, dict[str, Any]]:
    return agent_cli.trial_of(out, arm)


def test_a_real_agents_transcript_is_content_addressed_and_secret_free(pair: Any) -> None:
    out, sent = pair
    for arm, accepted in (("fix", True), ("note", False)):
        adir, trial = _trial(out, arm)
        assert trial["grade"]["accepted"] is accepted, trial["grade"]
        rows = agent_cli.ledger(adir)
        calls = [r for r in rows if r.endpoint == "chat.completions"]
        assert len(calls) == (4 if accepted else 3) and {r.transcript for r in calls} == {"kept"}
        mine = [r.body for r in sent if (r.body or {}).get("model") == f"qw-{arm}"]
        assert len(mine) == len(calls)
        histories = sum(len(b["messages"]) for b in mine)
        blobs = [TranscriptBlob.read(r, adir) for r in iter_rows(adir / BLOBS_FILE)]
        messages = [b for b in blobs if b.kind == "message"]
        distinct = {json.dumps(m, sort_keys=True) for b in mine for m in b["messages"]}
        # each distinct message once; far fewer entries than the histories resent
        assert len(messages) == len(distinct) < histories, (len(messages), histories)
        assert len(list(iter_rows(adir / CALLS_FILE))) == len(calls)
        # the store is smaller than one copy of every request the agent sent
        assert (adir / BLOBS_FILE).stat().st_size < sum(len(json.dumps(b)) for b in mine)
        transcript = load_transcript(adir)
        assert transcript is not None
        for call, body in zip(transcript.calls, mine, strict=True):
            assert call.messages == body["messages"]  # rebuilt whole (nothing to redact here)
            assert call.request is not None and call.request["tools"] == body["tools"]
        last = transcript.calls[-1].row.response["choices"][0]["message"]["content"]
        assert last == ("Fixed add()." if accepted else "Left a note.")
    agent_cli.assert_no_secret(out)
    for path in out.rglob("*"):  # nor any scoped token (the gateway's "sk-assay-" prefix)
        if path.is_file():
            assert b"sk-assay-" not in path.read_bytes(), path


def test_trial_show_prints_the_whole_trial(pair: Any) -> None:
    out, _ = pair
    adir, _ = _trial(out, "fix")
    res = run_cli(["trial", "show", str(adir.parent)], env={"COLUMNS": "400"})
    assert res.code == 0, res.stderr
    text = res.stdout
    for needle in ("trial calc-001/fix/0", "accepted", "Fix `calc.add`",  # the instruction
                   "--- a/src/calc/__init__.py", "+    return a + b", "-    return a - b",
                   "pass behavior", "$ PYTHONPATH=src python3 -m pytest",
                   "steps (from the agent's stream)", "step 1", "step 4", TEST_CMD,
                   "tool run_shell_command", "ls src/calc", "result:", "Fixed add().",
                   "model calls", "transcript", "kept", "stage agent", "stage verify"):
        # read unwrapped: the console wraps long lines at its width, anywhere
        assert "".join(needle.split()) in "".join(text.split()), (needle, text)
    # a tool call reads as the command it runs (report/tool_calls.py, as on the pages): no
    # JSON object with escaped quotes, and the result does not repeat the command
    flat = "".join(text.split())
    assert "".join(("$ " + FIX_CMD).split()) in flat, text
    assert '{"command"' not in text and '\\"' not in text
    assert "result: Command: ls src/calc" not in text
    # tokens of each step come from the ledger (the scripted server's counts)
    rows = [r for r in agent_cli.ledger(adir) if r.assistant_step]
    assert f"in {rows[0].input_tokens} · out {rows[0].output_tokens} tokens" in text

    adir, _ = _trial(out, "note")
    text = run_cli(["trial", "show", str(adir)], env={"COLUMNS": "160"}).stdout
    assert "rejected: change_outside_allowed_paths" in text
    assert "added NOTES.txt" in text and "+remember to fix add" in text
    # the cause in words, and each check's real tests before the canaries' one line
    flat = "".join(text.split())
    assert "".join("change_outside_allowed_paths: a file outside the task's allowed paths was "
                   "changed: NOTES.txt".split()) in flat, text
    assert "tasktests:0passed,3failed" in flat and "canariesplanted" in flat, text
    assert "firstfailure:test_fix.py::test_add_" in flat, text
    assert flat.index("tasktests:") < flat.index("canariesplanted") < flat.index("[output:")


def test_without_the_agents_stream_the_steps_come_from_the_gateway(pair: Any,
                                                                   tmp_path: Path) -> None:
    out, _ = pair
    adir, _ = _trial(out, "fix")
    copy = tmp_path / "a1"
    shutil.copytree(adir, copy)
    (copy / "agent" / "stdout.log").unlink()
    res = run_cli(["trial", "show", str(copy)], env={"COLUMNS": "160"})
    assert res.code == 0, res.stderr
    text = res.stdout
    assert "steps (from the gateway transcript)" in text
    assert "step 4" in text and "Fixed add()." in text and "I will fix add." in text
    assert FIX_CMD.split("'")[1] in text  # the tool call's arguments
    assert "$ ls src/calc" in text and "result:" in text  # the call, what the agent sent back
    assert "result: Command: ls src/calc" not in text  # (less its echo of the command)


def test_trial_show_refuses_a_folder_without_a_trial(tmp_path: Path) -> None:
    res = run_cli(["trial", "show", str(tmp_path)])
    assert res.code == 2 and "no trial.json" in res.stderr
    res = run_cli(["trial", "show", str(tmp_path / "missing")])
    assert res.code == 2 and "not a directory" in res.stderr


@agent_cli.needs_bwrap
@pytest.mark.parametrize("where", ["experiment", "task"])
def test_transcripts_false_keeps_no_bodies_and_the_ledger_says_so(
        tmp_path: Path, qwen_bin: Path, where: str) -> None:
    """``transcripts: false`` in experiment.yaml, or in the task's task.yaml. One arm (``fix``,
    the one that calls its model most: look, fix, run the tests, answer): the setting is the
    run's or the task's, not an arm's, and each Qwen Code run costs about five CPU-seconds."""
    off = "transcripts: false\n"
    out, sent = run_pair(tmp_path, qwen_bin, *((off, "") if where == "experiment" else
                                                ("", off)), arms=(("fix", "qw-fix"),))
    adir, _ = _trial(out, "fix")
    rows = [r for r in agent_cli.ledger(adir) if r.endpoint == "chat.completions"]
    assert len(rows) == len(sent) >= 3  # every call the agent made, and it made them all
    assert {r.transcript for r in rows} == {"off"}
    assert not (adir / CALLS_FILE).exists() and not (adir / BLOBS_FILE).exists()
    text = run_cli(["trial", "show", str(adir)], env={"COLUMNS": "160"}).stdout
    assert "off (transcripts: false in the experiment or the task)" in text
    assert "steps (from the agent's stream)" in text  # the agent's own record still shows


# --------------------------------------------------------------- the pages, in Chromium

PAGE_PROBE = """(() => {
  const q = s => document.querySelectorAll(s).length;
  const t = s => { const e = document.querySelector(s);
                   return e ? e.textContent.replace(/\\s+/g, ' ').trim() : null; };
  return {url: location.href, title: document.title, h1: t('h1'), scripts: q('script'),
          outcome: t('#outcome'), steps: q('#steps .step'), diffAdd: q('pre.diff .add'),
          diffDel: q('pre.diff .del'), checks: q('#checks .check'), diverge: t('#divergence'),
          divergeRows: q('tr.step-row.diverge'), marked: t('tr.diverge td.n'),
          stepRows: q('tr.step-row'), compareLinks: q('a.compare'),
          pageLinks: q('table.tasks a.trial-page'),
          scrollWidth: document.documentElement.scrollWidth,
          body: document.body.textContent.replace(/\\s+/g, ' ')};
})()"""
WIDTH = 1200


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from support.cdp import Browser, chromium

    exe = chromium()
    if exe is None:
        pytest.skip("Debian's chromium is not installed (make test installs it: "
                    "scripts/bootstrap.sh)")
    b = Browser(exe, tmp_path_factory.mktemp("chromium") / "profile")
    try:
        yield b
    finally:
        b.close()


def _clean(res: Any, shot: Path, pages: int = 1) -> dict[str, Any]:
    """No error, no script, nothing fetched but the page(s) themselves; a real screenshot."""
    from test_browser_reports import png_facts

    shot.write_bytes(res.png)
    assert res.errors == [], res.errors
    assert res.refused == [] and len(res.requests) == pages, res.requests
    assert all(r.startswith("file://") for r in res.requests)
    p = res.probe
    assert p["scripts"] == 0 and p["scrollWidth"] <= WIDTH
    facts = png_facts(res.png)
    assert facts["width"] == WIDTH and facts["distinct_rows"] > 100, facts
    return p


def test_the_trial_page_in_a_browser(pair: Any, browser: Any, tmp_path: Path) -> None:
    out, _ = pair
    page = out / "pages" / "trials" / "calc-001" / "fix" / "0" / "a1.html"
    p = _clean(browser.load(page, PAGE_PROBE, width=WIDTH), tmp_path / "trial-page.png")
    assert p["h1"] == "calc-001/fix/0" and p["outcome"] == "accepted"
    assert p["steps"] == 4 and p["checks"] == 3
    assert p["diffAdd"] == 1 and p["diffDel"] == 1  # the fix: one line out, one line in
    for needle in ("Fix `calc.add`", "return a + b", "run_shell_command", "Fixed add().",
                   "model calls", "stage verify", "from the agent's stream"):
        assert needle in p["body"], needle


def test_the_side_by_side_page_marks_where_the_arms_part(pair: Any, browser: Any,
                                                         tmp_path: Path) -> None:
    out, _ = pair
    page = out / "pages" / "compare" / "calc-001.html"
    p = _clean(browser.load(page, PAGE_PROBE, width=WIDTH), tmp_path / "side-by-side.png")
    # both looked first (step 1 the same), then one fixed and one wrote a note: step 2
    assert p["stepRows"] == 4 and p["divergeRows"] == 1
    assert p["diverge"] == "The trials first differ at step 2."
    assert p["marked"].startswith("2") and "diverges" in p["marked"]
    assert "rejected: change_outside_allowed_paths" in p["body"] and "accepted" in p["body"]
    assert "echo remember to fix add > NOTES.txt" in p["body"]


def test_the_trial_and_side_by_side_pages_read_at_800_and_1400_px(pair: Any, browser: Any,
                                                                    tmp_path: Path) -> None:
    """At a small and a wide window: nothing past the window's edge outside a scroll box, no
    chip broken over lines; the side-by-side page's two columns start where their headers do
    in every row. Tool arguments read as the commands they are (no JSON escapes), a result
    does not repeat its command, the two final diffs sit side by side and each arm's failed
    tests are named. Screenshots: ``trial-<width>.png``, ``side-by-side-<width>.png``."""
    from support.layout_probe import LAYOUT_PROBE, WIDTHS, assert_reads

    out, _ = pair
    trial = out / "pages" / "trials" / "calc-001" / "note" / "0" / "a1.html"
    compare = out / "pages" / "compare" / "calc-001.html"
    for width in WIDTHS:
        res = browser.load(trial, LAYOUT_PROBE, width=width)
        (tmp_path / f"trial-{width}.png").write_bytes(res.png)
        assert res.errors == []
        assert_reads(res.probe, f"trial page at {width} px")
        res = browser.load(compare, LAYOUT_PROBE, width=width)
        (tmp_path / f"side-by-side-{width}.png").write_bytes(res.png)
        assert res.errors == []
        p = res.probe
        assert_reads(p, f"side-by-side page at {width} px")
        header, *rows = p["columns"]
        assert len(header) == 3 and len(rows) >= 7, p["columns"]
        assert all(r == header for r in rows), ("columns not under their headers", p["columns"])
        left, right = p["headTops"]
        assert len(left) == 3 and left[:2] == right[:2], ("headers not level", p["headTops"])
        body = p["body"]
        # each command as typed: the JSON form (escaped quotes, a literal \n) never shows
        assert "$ " + FIX_CMD in body and "$ " + NOTE_CMD in body
        assert '\\"' not in body and "\\n" not in body
        assert body.count(NOTE_CMD) == 1, "a result repeats the command it ran"
        # the final change of each arm, side by side; the failed tests named per arm
        assert "final change" in body and "added NOTES.txt" in body
        assert "modified src/calc/__init__.py" in body
        assert "behavior: none failed" in body  # the fix arm
        assert "behavior: 3 failed" in body or "behavior: 2 failed" in body \
            or "behavior: 1 failed" in body, body


def test_a_click_from_the_per_task_table_opens_the_trial_page(pair: Any, browser: Any,
                                                               tmp_path: Path) -> None:
    """From the report's verdict page, the per-task table's link of the rejected trial, then
    (second load) the task's side-by-side link: each a real mouse click followed to the page."""
    out, _ = pair
    report = out / "report.html"
    first = browser.load(report, PAGE_PROBE, width=WIDTH)
    assert first.probe["pageLinks"] == 2 and first.probe["compareLinks"] == 1
    res = browser.load(report, PAGE_PROBE, width=WIDTH, allow_under=out,
                       click='table.tasks a.trial-page[href*="/note/"]')
    p = _clean(res, tmp_path / "clicked-trial.png", pages=2)
    assert p["url"].endswith("/pages/trials/calc-001/note/0/a1.html"), p["url"]
    assert p["h1"] == "calc-001/note/0"
    assert p["outcome"] == "rejected: change_outside_allowed_paths"
    assert "added NOTES.txt" in p["body"]
    res = browser.load(report, PAGE_PROBE, width=WIDTH, allow_under=out,
                       click="table.tasks a.compare")
    p = _clean(res, tmp_path / "clicked-compare.png", pages=2)
    assert p["url"].endswith("/pages/compare/calc-001.html") and p["divergeRows"] == 1


def test_a_second_report_redraws_only_the_pages_whose_trial_changed(pair: Any,
                                                                    tmp_path: Path) -> None:
    import os

    out, _ = pair
    run = tmp_path / "run"
    shutil.copytree(out, run, ignore=shutil.ignore_patterns("*.sock", "state.lock"))
    fix = run / "pages" / "trials" / "calc-001" / "fix" / "0" / "a1.html"
    note = run / "pages" / "trials" / "calc-001" / "note" / "0" / "a1.html"
    before = {p: p.stat().st_mtime_ns for p in (fix, note)}
    assert run_cli(["exp", "report", str(run)]).code == 0
    assert {p: p.stat().st_mtime_ns for p in (fix, note)} == before  # current: not redrawn
    grade = next((run / "trials" / "calc-001" / "note" / "0" / "a1" / "grades").glob("*.json"))
    later = before[note] + 1_000_000  # a grade written after the page, as a regrade would
    os.utime(grade, ns=(later, later))
    assert run_cli(["exp", "report", str(run)]).code == 0
    assert fix.stat().st_mtime_ns == before[fix] and note.stat().st_mtime_ns != before[note]
    assert "rejected: change_outside_allowed_paths" in note.read_text()
