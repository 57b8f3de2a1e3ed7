"""Coding runs end to end: the real CLI, a real scripted OpenAI-compatible server on 127.0.0.1,
real bubblewrap sandboxes running real python3 and node, real files.

Hostile candidate code goes through the whole run: each attack must be contained, recorded with
the right reason, and leave the other tasks graded normally.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SECRET, assert_no_secret, run_cli
from support.scripted_server import (
    Answer,
    Handler,
    RecordedRequest,
    Reply,
    ScriptedServer,
    Status,
    by_input,
)

from assay.records.coding import GradeRow, SampleRow, graded_samples
from assay.runner.coding import INSTRUCTIONS, user_prompt
from assay.sandbox import bwrap_available
from assay.stats import clustered_wilson, paired_diff_interval
from assay.suites.coding import load_coding_suite

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_TASKS = REPO / "examples" / "coding" / "tasks.jsonl"
SAMPLE_FIELDS = {"id", "sample", "type", "raw", "code", "passed", "reason", "latency_ms",
                 "usage", "served_model"}

ADD_TESTS = "assert add(2, 3) == 5\nassert add(-1, 1) == 0\n"
GOOD_PY = "def add(a, b):\n    return a + b\n"
BAD_PY = "def add(a, b):\n    return a - b\n"
JS_TESTS = "const assert = require('assert');\nassert.strictEqual(add(2, 3), 5);\n"
GOOD_JS = "const assert = require('assert');\nfunction add(a, b) { return a + b; }\n"
CALC = ("def add(a, b):\n    total = a - b\n    return total\n\n\n"
        "def mul(a, b):\n    return a * b\n")
GOLDEN = ("--- a/calc.py\n+++ b/calc.py\n@@ -1,5 +1,5 @@\n def add(a, b):\n"
          "-    total = a - b\n+    total = a + b\n     return total\n \n \n")
SAME_RESULT = ("--- a/calc.py\n+++ b/calc.py\n@@ -1,3 +1,3 @@\n def add(a, b):\n"
               "-    total = a - b\n+    total = a + b\n     return total\n")


def unit(tid: str, prompt: str, tests: str = ADD_TESTS, **extra: Any) -> dict[str, Any]:
    return {"id": tid, "type": "unit", "prompt": prompt, "tests": tests, **extra}


def write_tasks(path: Path, objs: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(o) + "\n" for o in objs), encoding="utf-8")
    return path


def fenced(code: str, tag: str = "python") -> Answer:
    return Answer(f"Here is the code:\n```{tag}\n{code}```\n")


def by_task(tasks: Path, script: dict[str, Reply | list[Reply]],
            default: Reply | Handler | None = None) -> Handler:
    """by_input keyed by task id: a coding run's first user message is user_prompt(task)."""
    prompts = {t.id: user_prompt(t) for t in load_coding_suite(tasks).tasks}
    return by_input({prompts[tid]: reply for tid, reply in script.items()}, default=default)


def task_of(tasks: Path) -> Callable[[RecordedRequest], str | None]:
    ids = {user_prompt(t): t.id for t in load_coding_suite(tasks).tasks}
    return lambda req: ids.get(req.case_input or "")


def sample_rows(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()
            if line.strip()]


def graded(run: Path, revision: str | None = None) -> dict[tuple[str, int], dict[str, Any]]:
    """Every standing answer joined with its grade (``passed``, ``reason``, ``exec``): the view
    the report reads."""
    return graded_samples(run, json.loads((run / "manifest.json").read_text()), revision)[1]


def final(run: Path, revision: str | None = None) -> dict[tuple[str, int], dict[str, Any]]:
    return {k: r for k, r in graded(run, revision).items() if not r.get("error")}


def report(run: Path) -> dict[str, Any]:
    return json.loads((run / "report.json").read_text())


def squash(text: str) -> str:
    return "".join(text.split())


def assert_interval(iv: dict[str, Any], mean: float) -> None:
    lo, hi = iv["ci95"]
    assert iv["mean"] == pytest.approx(mean)
    assert lo <= iv["mean"] <= hi and 0.0 <= lo and hi <= 1.0


# --------------------------------------------------------------------------- end to end


def test_run_end_to_end(tmp_path: Path, server: ScriptedServer,
                        endpoint_env: dict[str, str]) -> None:
    tasks = write_tasks(tmp_path / "suite" / "tasks.jsonl", [
        unit("py-add", "Write add(a, b) in Python."),
        unit("js-add", "Write add(a, b) in JavaScript.", JS_TESTS),
        {"id": "py-fix", "type": "diff", "prompt": "Fix add in calc.py.",
         "files": {"calc.py": CALC}, "golden": GOLDEN},
        {"id": "sql-review", "type": "rubric", "prompt": "Write an index for orders by date.",
         "rubric": "3: covering index", "system": "You are a careful DBA."},
    ])
    prose_then_blocks = Answer("Sure. In JS it would be:\n```js\nconst add = (a, b) => a + b;\n"
                               f"```\nbut you asked for Python:\n```python\n{GOOD_PY}```\n")
    server.handler = by_task(tasks, {
        "py-add": [prose_then_blocks, fenced(BAD_PY)],  # one sample passes, one fails
        "js-add": fenced(GOOD_JS, "javascript"),  # declares its own `const assert`
        "py-fix": [fenced(SAME_RESULT, "diff"),  # one sample applies, one does not
                   fenced(SAME_RESULT.replace("a - b", "a / b"), "diff")],
        "sql-review": fenced("CREATE INDEX orders_by_date ON orders (created_at);\n", "sql"),
    })
    run = tmp_path / "run"
    res = run_cli(["run", str(tasks), "--samples", "2", "--out", str(run)])
    assert res.code == 0, res.stderr

    rows = sample_rows(run)
    assert sorted((r["id"], r["sample"]) for r in rows) == sorted(
        (t, s) for t in ("py-add", "js-add", "py-fix", "sql-review") for s in (0, 1))
    for r in graded(run).values():
        assert SAMPLE_FIELDS <= set(r), r
    v1 = graded(run)
    for r in rows:
        assert SAMPLE_FIELDS <= set(r), r
        # the row carries the run's own verdict, a copy of its grade in revision v1
        key = (r["id"], r["sample"])
        assert (r["passed"], r["reason"]) == (v1[key]["passed"], v1[key]["reason"])
        assert r["served_model"] == "scripted-model" and r["error"] is None
        assert r["latency_ms"] > 0 and r["usage"]["total_tokens"] > 0
    got = final(run)
    py = sorted((got[("py-add", s)] for s in (0, 1)), key=lambda r: not r["passed"])
    assert [(r["passed"], r["reason"]) for r in py] == [(True, "ok"), (False, "nonzero_exit")]
    assert py[0]["code"] == GOOD_PY and py[0]["raw"] == prose_then_blocks.content
    assert py[1]["code"] == BAD_PY and "AssertionError" in py[1]["exec"]["stderr_tail"]
    fix = sorted((got[("py-fix", s)] for s in (0, 1)), key=lambda r: not r["passed"])
    assert [(r["passed"], r["reason"]) for r in fix] == [(True, "same_result"),
                                                         (False, "does_not_apply")]
    assert fix[0]["code"] == SAME_RESULT and "patch does not apply" in fix[1]["exec"]["detail"]
    for s in (0, 1):
        assert (got[("js-add", s)]["passed"], got[("js-add", s)]["reason"]) == (True, "ok")
        assert got[("js-add", s)]["code"] == GOOD_JS
        rubric = got[("sql-review", s)]
        assert rubric["passed"] is None and rubric["reason"] == "needs_human_grade"
        assert rubric["code"].startswith("CREATE INDEX") and "```sql" in rubric["raw"]
        assert (run / "exec" / "py-add" / str(s) / "stderr.log").is_file()

    # what was sent: the prompt plus one fixed instruction, temperature 0.2, system only if set
    suite = load_coding_suite(tasks).by_id()
    reqs = server.chat_requests()
    assert len(reqs) == 8
    for req in reqs:
        tid = task_of(tasks)(req)
        assert tid is not None
        assert req.body["temperature"] == 0.2
        assert req.body["model"] == "test-model"
        t = suite[tid]
        assert req.case_input == user_prompt(t)
        assert req.case_input.startswith(t.prompt) and req.case_input.endswith(
            INSTRUCTIONS[t.type])
        if tid == "sql-review":
            assert req.messages == [{"role": "system", "content": "You are a careful DBA."},
                                    {"role": "user", "content": user_prompt(t)}]
        else:
            assert [m["role"] for m in req.messages] == ["user"]
    diff_prompt = user_prompt(suite["py-fix"])
    assert f"File `calc.py`:\n```\n{CALC}```" in diff_prompt
    assert "unified diff" in diff_prompt
    assert user_prompt(suite["py-add"]) == ("Write add(a, b) in Python.\n\n"
                                            + INSTRUCTIONS["unit"])

    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["kind"] == "coding"
    assert manifest["suite"]["tasks_sha256"] == hashlib.sha256(tasks.read_bytes()).hexdigest()
    assert manifest["suite"]["task_ids"] == ["py-add", "js-add", "py-fix", "sql-review"]
    assert manifest["isolation"] == "bwrap" and manifest["not_isolated"] is False
    assert manifest["parameters"]["samples"] == 2
    assert manifest["parameters"]["temperature"] == 0.2
    assert manifest["model"]["base_url"] == server.base_url
    assert manifest["sessions"][-1]["status"] == "complete"
    assert (run / "suite" / "tasks.jsonl").read_bytes() == tasks.read_bytes()

    rep = report(run)
    assert rep["auto_graded_tasks"] == 3  # the rubric task is never auto-graded
    assert_interval(rep["pass_at_1"], (0.5 + 1 + 0.5) / 3)
    assert rep["mixed_tasks"] == ["py-add", "py-fix"]
    assert rep["failure_reasons"] == {"nonzero_exit": 1, "does_not_apply": 1}
    assert rep["rubric"]["answers"] == 2 and rep["rubric"]["graded"] == 0
    assert not rep["not_isolated"]
    md = (run / "report.md").read_text()
    assert "NOT ISOLATED" not in md and "| py-add | unit | 1 of 2 (mixed) |" in md
    assert_no_secret(run)


def test_infra_errors_exit_3_and_resume_asks_only_for_missing_samples(
        tmp_path: Path, server: ScriptedServer, endpoint_env: dict[str, str]) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", [
        unit("py-add", "Write add(a, b) in Python."),
        unit("js-add", "Write add(a, b) in JavaScript.", JS_TESTS)])
    good = {"py-add": fenced(GOOD_PY), "js-add": fenced(GOOD_JS, "js")}
    server.handler = by_task(tasks, {"py-add": good["py-add"], "js-add": Status(503)})
    run = tmp_path / "run"
    args = ["run", str(tasks), "--samples", "2", "--max-tries", "1", "--out", str(run)]
    res = run_cli(args)
    assert res.code == 3, res.stderr
    assert "resume" in res.stderr and str(run) in squash(res.stderr)
    assert len([r for r in sample_rows(run) if r["id"] == "js-add"]) == 2
    bad = [r for r in graded(run).values() if r["id"] == "js-add"]
    assert len(bad) == 2
    for r in bad:
        assert r["reason"] == "infra_error" and r["error"] and r["passed"] is None
        assert len(r["tries"]) == 1 and r["tries"][0]["status"] == 503
    rep = report(run)
    assert rep["infra_errors"] == 2 and rep["auto_graded_tasks"] == 1
    assert_interval(rep["pass_at_1"], 1.0)

    # the endpoint recovers: only the two missing samples are asked again
    server.handler = by_task(tasks, good)
    before = len(server.chat_requests())
    res = run_cli(args)
    assert res.code == 0, res.stderr
    asked = server.chat_requests()[before:]
    assert [task_of(tasks)(r) for r in asked] == ["js-add", "js-add"]
    rows = sample_rows(run)
    assert len(rows) == 6  # the infra-error rows stay as history
    assert all(r["passed"] for r in final(run).values()) and len(final(run)) == 4
    rep = report(run)
    assert rep["infra_errors"] == 0 and rep["missing_rows"] == 0
    assert_interval(rep["pass_at_1"], 1.0)
    manifest = json.loads((run / "manifest.json").read_text())
    assert [s["status"] for s in manifest["sessions"]] == ["infra_errors", "complete"]

    # nothing left to ask; a changed setting is refused rather than mixed into the rows
    before = len(server.chat_requests())
    assert run_cli(args).code == 0 and len(server.chat_requests()) == before
    res = run_cli(args + ["--temperature", "0.7"])
    assert res.code == 2 and "different settings" in res.stderr
    assert len(sample_rows(run)) == 6


# --------------------------------------------------------------------------- hostile code


@pytest.fixture
def host_dir() -> Iterator[Path]:
    """A host directory outside /tmp: the sandbox has a private /tmp, so a file under /tmp
    would be out of reach for the wrong reason."""
    base = "/var/tmp" if os.access("/var/tmp", os.W_OK) else None
    d = Path(tempfile.mkdtemp(prefix="assay-host-", dir=base))
    yield d
    shutil.rmtree(d, ignore_errors=True)


class Listener:
    """A TCP server on 127.0.0.1 that records every connection it accepts."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    self.accepted.append(conn.recv(1024))
                except OSError:
                    self.accepted.append(b"")

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.sock.close()


def test_hostile_code_is_contained_and_recorded(tmp_path: Path, server: ScriptedServer,
                                                endpoint_env: dict[str, str], host_dir: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # a host home with an SSH key, and API keys in the host environment
    home = host_dir / "home"
    (home / ".ssh").mkdir(parents=True)
    key_marker = f"assay-private-key-{uuid.uuid4().hex}"
    (home / ".ssh" / "id_ed25519").write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n"
                                              f"{key_marker}\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    host_file = host_dir / "precious.txt"
    host_file.write_text("original\n")
    stray = f"assay-stray-{uuid.uuid4().hex}"
    listener = Listener()

    spy = f"""import glob, os
found = {{}}
for d in (os.path.expanduser("~/.ssh"), "/root/.ssh", {str(home / ".ssh")!r}):
    for p in glob.glob(d + "/*"):
        try:
            found[p] = open(p).read()
        except OSError as exc:
            found[p] = repr(exc)
for p in glob.glob("/proc/[0-9]*/environ"):
    try:
        found[p] = open(p, "rb").read().decode(errors="replace")
    except OSError:
        pass
print("ENV", dict(os.environ))
print("FOUND", found)
{GOOD_PY}"""
    spy_tests = ADD_TESTS + ("assert not [k for k in os.environ if 'KEY' in k or "
                             "k.startswith('MODEL_')], sorted(os.environ)\n"
                             "assert not [p for p in found if '.ssh' in p], sorted(found)\n")
    net = f"""import socket
for port in ({listener.port}, {server.port}):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).sendall(b"from the sandbox")
    except OSError as exc:
        print("blocked", port, repr(exc))
    else:
        print("CONNECTED", port)
        raise SystemExit(0)
raise SystemExit(1)
"""
    write = f"""targets = [{str(host_file)!r}, {str(host_dir / "created")!r}, "../{stray}",
           "/{stray}"]
errors = []
for t in targets:
    try:
        with open(t, "w") as fh:
            fh.write("pwned")
    except OSError as exc:
        errors.append(repr(exc))
print(errors)
raise SystemExit(1 if len(errors) == len(targets) else 0)
"""
    fork_bomb = ("import os\nwhile True:\n    try:\n        os.fork()\n"
                 "    except OSError:\n        pass\n")
    memory_hog = "chunks = []\nwhile True:\n    chunks.append(bytearray(64 * 1024 * 1024))\n"
    sleeper = ("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
               "while True:\n    time.sleep(1)\n")
    liar = "print('all tests passed')\nraise SystemExit(1)\n"

    tasks = write_tasks(tmp_path / "tasks.jsonl", [
        unit("py-spy", "Write add(a, b).", spy_tests),
        unit("py-net", "Write add(a, b), version 2."),
        unit("py-write", "Write add(a, b), version 3."),
        unit("py-fork", "Write add(a, b), version 4."),
        unit("py-mem", "Write add(a, b), version 5."),
        unit("py-sleep", "Write add(a, b), version 6."),
        unit("py-liar", "Write add(a, b), version 7."),
        unit("py-add", "Write add(a, b), version 8."),
        unit("js-add", "Write add(a, b) in JavaScript.", JS_TESTS),
    ])
    server.handler = by_task(tasks, {
        "py-spy": fenced(spy), "py-net": fenced(net), "py-write": fenced(write),
        "py-fork": fenced(fork_bomb), "py-mem": fenced(memory_hog), "py-sleep": fenced(sleeper),
        "py-liar": fenced(liar), "py-add": fenced(GOOD_PY), "js-add": fenced(GOOD_JS, "js")})
    run = tmp_path / "run"
    try:
        # 4 s: the good answers must finish in time even beside a fork bomb on a loaded machine
        res = run_cli(["run", str(tasks), "--samples", "1", "--exec-timeout", "4",
                       "--memory-mib", "256", "--pids", "16", "--out", str(run)])
    finally:
        listener.close()
    assert res.code == 0, res.stderr

    got = {tid: row for (tid, _), row in final(run).items()}
    outcome = {tid: (row["passed"], row["reason"]) for tid, row in got.items()}
    assert outcome == {
        "py-spy": (True, "ok"),  # ran, and found neither keys nor the host's ~/.ssh
        "py-net": (False, "nonzero_exit"),
        "py-write": (False, "nonzero_exit"),
        "py-fork": (False, "process_limit"),
        "py-mem": (False, "memory_limit"),
        "py-sleep": (False, "timeout"),
        "py-liar": (False, "nonzero_exit"),
        "py-add": (True, "ok"),
        "js-add": (True, "ok"),
    }, {tid: row["exec"].get("stderr_tail", "")[-300:] for tid, row in got.items()}

    # secrets: the candidate printed its whole environment, and nothing leaked into the run
    spy_out = (run / "exec" / "py-spy" / "0" / "stdout.log").read_text()
    assert spy_out.startswith("ENV {") and "FOUND" in spy_out
    assert "MODEL_API_KEY" not in spy_out and "id_ed25519" not in spy_out
    assert_no_secret(run)
    for p in run.rglob("*"):
        if p.is_file():
            assert key_marker.encode() not in p.read_bytes(), p
    # network: both the test's listener and the model endpoint were out of reach
    assert listener.accepted == []
    assert got["py-net"]["exec"]["stdout_tail"].count("blocked") == 2
    assert "CONNECTED" not in got["py-net"]["exec"]["stdout_tail"]
    # writes outside the work directory: every one refused, nothing changed on the host
    assert host_file.read_text() == "original\n"
    assert sorted(p.name for p in host_dir.iterdir()) == ["home", "precious.txt"]
    assert not (Path(tempfile.gettempdir()) / stray).exists() and not (Path("/") / stray).exists()
    # limits: recorded with the kernel's evidence, within the time budget
    assert got["py-fork"]["exec"]["limits_applied"]["pids"]["value"] == 16
    assert got["py-mem"]["exec"]["limits_applied"]["memory_mib"]["value"] == 256
    sleep_exec = got["py-sleep"]["exec"]
    assert sleep_exec["timed_out"] is True and sleep_exec["wall_seconds"] < 4 + 1 + 3
    assert "all tests passed" in got["py-liar"]["exec"]["stdout_tail"]
    rep = report(run)
    assert rep["failure_reasons"] == {"nonzero_exit": 3, "process_limit": 1, "memory_limit": 1,
                                      "timeout": 1}
    assert rep["infra_errors"] == 0
    assert_interval(rep["pass_at_1"], 3 / 9)


# --------------------------------------------------------------------------- report figures


def test_report_figures_on_a_hand_computed_example(tmp_path: Path, server: ScriptedServer,
                                                   endpoint_env: dict[str, str]) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", [
        unit("py-a", "Task A."), unit("py-b", "Task B."), unit("py-c", "Task C."),
        {"id": "sql-r", "type": "rubric", "prompt": "Task R.", "rubric": "3: good"}])
    server.handler = lambda req, n: fenced(GOOD_PY)
    run = tmp_path / "run"
    assert run_cli(["run", str(tasks), "--samples", "3", "--out", str(run)]).code == 0

    def row(tid: str, sample: int, passed: bool | None, reason: str,
            error: str | None = None) -> tuple[dict[str, Any], dict[str, Any] | None]:
        kind = "rubric" if tid == "sql-r" else "unit"
        answer = SampleRow(id=tid, sample=sample, type=kind,
                           language=None if tid == "sql-r" else "python", raw="x", code="x",
                           latency_ms=5.0, usage=None, served_model="scripted-model",
                           error=error).to_row()
        grade = None if error else GradeRow(id=tid, sample=sample, type=kind, passed=passed,
                                            reason=reason, graded_at="2026-01-01T00:00:00Z")
        return answer, None if grade is None else grade.to_json()

    # A: 3 of 3. B: 1 of 3 (fails: nonzero_exit, timeout). C: 0 of 3. R: rubric, 3 answers.
    # A's sample 2 first ended in an infra error, then was answered on resume.
    hand = [row("py-a", 0, True, "ok"), row("py-a", 1, True, "ok"),
            row("py-a", 2, None, "infra_error", error="HTTP 503"),
            row("py-b", 0, True, "ok"), row("py-b", 1, False, "nonzero_exit"),
            row("py-b", 2, False, "timeout"),
            row("py-c", 0, False, "nonzero_exit"), row("py-c", 1, False, "nonzero_exit"),
            row("py-c", 2, False, "nonzero_exit"),
            row("py-a", 2, True, "ok"),
            *(row("sql-r", s, None, "needs_human_grade") for s in range(3))]
    (run / "samples.jsonl").write_text("".join(json.dumps(a) + "\n" for a, _ in hand))
    (run / "grades" / "v1.jsonl").write_text("".join(json.dumps(g) + "\n" for _, g in hand
                                                     if g is not None))
    res = run_cli(["report", str(run)])
    assert res.code == 0, res.stderr
    rep = report(run)

    assert rep["auto_graded_tasks"] == 3 and rep["samples_per_task"] == 3
    assert rep["infra_errors"] == 0 and rep["missing_rows"] == 0
    # pass@1 = mean over tasks of the per-task pass rate = (1 + 1/3 + 0) / 3
    assert_interval(rep["pass_at_1"], 4 / 9)
    assert rep["pass_at_1"]["ci95"][0] < rep["pass_at_1"]["ci95"][1]
    assert rep["pass_at_1"]["tasks"] == 3
    # pass^3: share of tasks whose samples all pass = 1/3
    assert rep["pass_all_k"] == 3
    assert_interval(rep["pass_all"], 1 / 3)
    # unbiased pass@k = 1 - C(n-c, k) / C(n, k), per task, then the mean
    #   k=2: A 1, B 1 - C(2,2)/C(3,2) = 2/3, C 0 -> 5/9;  k=3: A 1, B 1, C 0 -> 2/3
    assert sorted(rep["pass_at_k"]) == ["1", "2", "3"]
    assert_interval(rep["pass_at_k"]["1"], 4 / 9)
    assert_interval(rep["pass_at_k"]["2"], 5 / 9)
    assert_interval(rep["pass_at_k"]["3"], 2 / 3)
    # pass^k = C(c, k) / C(n, k): k=2: A 1, B 0, C 0 -> 1/3
    assert_interval(rep["pass_hat_k"]["2"], 1 / 3)
    assert_interval(rep["pass_hat_k"]["3"], 1 / 3)
    assert rep["mixed_tasks"] == ["py-b"]
    assert rep["failure_reasons"] == {"nonzero_exit": 4, "timeout": 1}
    by_id = {t["id"]: t for t in rep["tasks"]}
    assert [(t["id"], t["passes"], t["samples"]) for t in rep["tasks"]] == [
        ("py-a", 3, 3), ("py-b", 1, 3), ("py-c", 0, 3), ("sql-r", 0, 0)]
    assert by_id["py-b"]["failures"] == ["#1: nonzero_exit", "#2: timeout"]
    assert by_id["py-b"]["pass_rate"] == pytest.approx(1 / 3) and by_id["py-b"]["mixed"]
    assert by_id["py-a"]["failures"] == [] and not by_id["py-a"]["mixed"]
    assert by_id["sql-r"]["pass_rate"] is None and by_id["sql-r"]["rubric_answers"] == 3
    assert rep["rubric"]["answers"] == 3 and rep["rubric"]["ungraded"] == 3
    # the interval is the task-clustered Wilson of exactly these per-task rates: spread
    # measured, n_eff = (20/81) / (42/729) = 4.29 tasks, times (z / t_2)² = .2075 for three
    # clusters of three samples -> .89, floored at one task: Wilson on n = 1, wide
    mean, lo, hi, n_eff = clustered_wilson([1.0, 1 / 3, 0.0], [3, 3, 3])
    assert n_eff == 1.0 and lo < 0.1 and hi > 0.85
    assert rep["pass_at_1"]["ci95"] == pytest.approx([lo, hi]) and mean == pytest.approx(4 / 9)

    md = (run / "report.md").read_text()
    assert "| py-b | unit | 1 of 3 (mixed) | #1: nonzero_exit; #2: timeout |" in md
    assert "| py-a | unit | 3 of 3 |" in md
    assert "| sql-r | rubric | 3 answers for human grading |" in md
    assert "44.4%" in md and "failure reasons | nonzero_exit: 4, timeout: 1" in md


# --------------------------------------------------------------------------- compare


def test_compare_two_coding_runs(tmp_path: Path, server: ScriptedServer,
                                 endpoint_env: dict[str, str]) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", [
        unit("py-c1", "Task one."), unit("py-c2", "Task two."), unit("py-c3", "Task three.")])
    which = task_of(tasks)
    good, bad = fenced(GOOD_PY), fenced(BAD_PY)

    # A: c1 2/2, c2 2/2, c3 0/2
    server.handler = lambda req, n: bad if which(req) == "py-c3" else good
    run_a, run_b = tmp_path / "a", tmp_path / "b"
    assert run_cli(["run", str(tasks), "--samples", "2", "--out", str(run_a)]).code == 0

    # B: c1 1/2, c2 0/2 (newly failing), c3 2/2 (newly passing)
    def handler_b(req: RecordedRequest, n: int) -> Reply:
        tid = which(req)
        if tid == "py-c1":
            return good if n % 2 == 0 else bad
        return bad if tid == "py-c2" else good

    server.handler = handler_b
    assert run_cli(["run", str(tasks), "--samples", "2", "--out", str(run_b)]).code == 0

    out1, out2 = tmp_path / "c1.json", tmp_path / "c2.json"
    res = run_cli(["compare", str(run_a), str(run_b), "--seed", "7", "--json", str(out1)])
    assert res.code == 0, res.stderr
    c = json.loads(out1.read_text())
    assert c["tasks"] == 3
    assert c["run_a"]["grade_revision"] == c["run_b"]["grade_revision"] == "v1"
    assert c["pass_at_1_a"] == pytest.approx(2 / 3)
    assert c["pass_at_1_b"] == pytest.approx(1.5 / 3)
    # by hand: per-task deltas -1/2, -1, +1 -> mean -1/6
    assert c["pass_at_1_diff_b_minus_a"] == pytest.approx(-1 / 6)
    assert [(t["id"], t["a"], t["b"]) for t in c["per_task"]] == [
        ("py-c1", "2/2", "1/2"), ("py-c2", "2/2", "0/2"), ("py-c3", "0/2", "2/2")]
    assert [t["delta"] for t in c["per_task"]] == pytest.approx([-0.5, -1.0, 1.0])
    assert c["newly_failing"] == ["py-c2"] and c["newly_passing"] == ["py-c3"]
    lo, hi = c["diff_ci95"]
    assert lo <= c["pass_at_1_diff_b_minus_a"] <= hi and lo < hi
    assert c["interval"] == {"method": "wilson_mover", "clustered_by": "task"}
    # the interval is the paired interval clustered by task (analytic: the seed changes nothing)
    diff, blo, bhi = paired_diff_interval([1.0, 1.0, 0.0], [0.5, 0.0, 1.0],
                                          ["py-c1", "py-c2", "py-c3"])
    assert (diff, blo, bhi) == pytest.approx((-1 / 6, lo, hi))
    assert run_cli(["compare", str(run_a), str(run_b), "--seed", "7", "--json",
                    str(out2)]).code == 0
    assert out2.read_text() == out1.read_text()
    said = squash(res.stdout)
    assert squash("difference B − A: -16.7 points") in said
    assert squash("newly failing in B (A solved it at least once, B never): py-c2") in said
    assert "py-c22/20/2-100" in said  # the per-task table row: task, A, B, change

    # runs of another task file are refused
    other = write_tasks(tmp_path / "other" / "tasks.jsonl", [unit("py-c1", "Task one.")])
    run_c = tmp_path / "c"
    assert run_cli(["run", str(other), "--samples", "1", "--out", str(run_c)]).code == 0
    res = run_cli(["compare", str(run_a), str(run_c)])
    assert res.code == 2 and "not of the same task file" in res.stderr


# --------------------------------------------------------------------------- no sandbox


def test_sandbox_none_only_when_asked_and_reported_not_isolated(
        tmp_path: Path, server: ScriptedServer, endpoint_env: dict[str, str]) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", [unit("py-add", "Write add(a, b).")])
    server.handler = lambda req, n: fenced(GOOD_PY)
    isolated, bare = tmp_path / "isolated", tmp_path / "bare"
    assert run_cli(["run", str(tasks), "--samples", "1", "--out", str(isolated)]).code == 0
    assert json.loads((isolated / "manifest.json").read_text())["isolation"] == "bwrap"
    assert final(isolated)[("py-add", 0)]["exec"]["isolation"] == "bwrap"

    res = run_cli(["run", str(tasks), "--samples", "1", "--sandbox", "none", "--out", str(bare)])
    assert res.code == 0, res.stderr
    assert "NOT ISOLATED" in res.stderr and "NOT ISOLATED" in res.stdout
    manifest = json.loads((bare / "manifest.json").read_text())
    assert manifest["isolation"] == "none" and manifest["not_isolated"] is True
    row = final(bare)[("py-add", 0)]
    assert row["passed"] is True and row["exec"]["isolation"] == "none"
    assert report(bare)["not_isolated"] is True
    assert "NOT ISOLATED" in (bare / "report.md").read_text()
    res = run_cli(["report", str(bare)])
    assert res.code == 0 and "NOT ISOLATED" in res.stdout

    res = run_cli(["compare", str(isolated), str(bare)])
    assert res.code == 0 and "NOT ISOLATED" in res.stdout
    res = run_cli(["run", str(tasks), "--sandbox", "nsjail", "--out", str(tmp_path / "x")])
    assert res.code == 2 and not (tmp_path / "x").exists()


# --------------------------------------------------------------------------- oracle


def test_builtin_oracle_passes_every_unit_and_diff_task(tmp_path: Path) -> None:
    run = tmp_path / "run"
    res = run_cli(["run", str(EXAMPLE_TASKS), "--model", "builtin/oracle", "--samples", "1",
                   "--out", str(run)])
    assert res.code == 0, res.stderr
    suite = load_coding_suite(EXAMPLE_TASKS)
    got = final(run)
    assert len(got) == len(suite.tasks)
    for t in suite.tasks:
        r = got[(t.id, 0)]
        if t.type == "rubric":
            assert r["passed"] is None and r["reason"] == "needs_human_grade"
        else:
            assert r["passed"] is True, (t.id, r["reason"], r.get("exec"))
    diff_reasons = {got[(t.id, 0)]["reason"] for t in suite.tasks if t.type == "diff"}
    assert diff_reasons == {"identical", "same_result"}
    rep = report(run)
    assert_interval(rep["pass_at_1"], 1.0)
    assert rep["auto_graded_tasks"] == sum(t.type != "rubric" for t in suite.tasks)
    assert rep["failure_reasons"] == {} and rep["infra_errors"] == 0
