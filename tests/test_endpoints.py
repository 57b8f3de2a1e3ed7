"""Built-in models and endpoints, the resume hint, a case file where a suite is expected, and
the narrow parser on real model-output shapes: through the CLI, with the scripted server."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import read_rows, run_cli, write_suite
from support.ctrl_c import interruptible
from support.scripted_server import Answer, ScriptedServer

from assay.grading.answers.labels import parse_answer

REPO = Path(__file__).resolve().parents[1]
TRIAGE = REPO / "examples" / "triage"
LABELS = ("bug", "feature", "question")

# shapes real models answer with: code before the answer, the answer after prose, several
# fences, a fence holding only code, the object in an untagged fence after a code one
SHAPES = [
    "```js\nfunction fix(a) { if (!a) {} return a.map(x => ({...x})) }\n```\n"
    'Answer: {"label": "bug"}',
    'Here is a snippet:\n```python\ndef f():\n    return {}\n```\nSo: {"label": "bug"}',
    "```js\nconsole.log({})\n```\n\n```json\n{\"label\": \"bug\"}\n```",
    "<think>the user reports a crash {maybe}</think>\n```\n{\"label\": \"bug\"}\n```\nDone.",
    'The stack trace shows a null deref.\n\n{"label": "bug"}\n\n```sh\nnpm test\n```',
]


@pytest.mark.parametrize("text", SHAPES)
def test_the_parser_looks_at_every_fence_and_the_text_around(text: str) -> None:
    parsed = parse_answer(text, output_field="label", labels=LABELS)
    assert parsed.valid and parsed.label == "bug", parsed


def test_the_parser_still_refuses_what_is_ambiguous_or_absent() -> None:
    two = '```json\n{"label": "bug"}\n```\n```json\n{"label": "feature"}\n```'
    assert parse_answer(two, output_field="label", labels=LABELS).reason == "multiple_objects"
    code_only = "```js\nconst a = 1\n```\nI think it is a bug."
    assert parse_answer(code_only, output_field="label", labels=LABELS).reason == "no_object"
    broken = "```json\n{label: bug}\n```"
    assert parse_answer(broken, output_field="label", labels=LABELS).reason == "not_json"


def test_a_run_reads_answers_shaped_like_real_model_output(tmp_path: Path) -> None:
    cases = [(f"c{i}", f"case {i}", "bug") for i in range(len(SHAPES))]
    suite = write_suite(tmp_path / "suite", cases)
    with ScriptedServer(lambda req, n: Answer(SHAPES[int(req.case_input.split()[1])])) as srv:
        res = run_cli(["run", str(suite), "--out", str(tmp_path / "run"), "--model", "m",
                       "--base-url", srv.base_url])
        retries = len(srv.chat_requests()) - len(SHAPES)
    assert res.code == 0, res.stderr
    rows = read_rows(tmp_path / "run")
    assert [r["correct"] for r in rows] == [True] * len(SHAPES)
    assert all(r["attempts"] == 1 for r in rows) and retries == 0  # no format retry needed


def test_a_case_file_where_a_suite_is_expected_gets_one_line(tmp_path: Path) -> None:
    res = run_cli(["run", str(TRIAGE / "data" / "cases.jsonl"), "--model", "builtin/baseline",
                   "--out", str(tmp_path / "run")])
    assert res.code == 2
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert " ".join(res.stderr.split()) == (
        f"assay: {TRIAGE / 'data' / 'cases.jsonl'}: a file of a narrow suite: pass the suite "
        f"directory ({TRIAGE})")
    assert len(lines) <= 2  # one message (a narrow terminal may wrap it), not one per case
    assert not (tmp_path / "run").exists()


def test_a_builtin_model_with_a_base_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    closed = "http://127.0.0.1:9/v1"  # the discard port: nothing listens
    res = run_cli(["run", str(TRIAGE), "--model", "builtin/baseline", "--base-url", closed,
                   "--out", str(tmp_path / "a")])
    assert res.code == 2
    assert (f"--base-url {closed} and --model builtin/baseline: a built-in model is served by "
            "assay itself, not at a URL") in " ".join(res.stderr.split())
    assert not (tmp_path / "a").exists()
    # from the environment (set for another tool, perhaps) it is announced, not obeyed
    monkeypatch.setenv("MODEL_BASE_URL", closed)
    res = run_cli(["run", str(TRIAGE), "--model", "builtin/oracle", "--out", str(tmp_path / "b")])
    assert res.code == 0, res.stderr
    assert (f"note: builtin/oracle is served by assay itself; MODEL_BASE_URL ({closed}) is not "
            "used") in " ".join(res.stderr.split())
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert closed not in json.dumps(manifest)


def test_the_resume_hint_after_ctrl_c_works_as_printed(tmp_path: Path) -> None:
    cases = [(f"c{i:03d}", f"case {i}", "bug") for i in range(120)]
    suite = write_suite(tmp_path / "suite", cases)
    with ScriptedServer(lambda req, k: Answer('{"label": "bug"}', delay=0.05)) as srv:
        env = {**os.environ, "MODEL_BASE_URL": srv.base_url, "MODEL_NAME": "m",
               "NO_COLOR": "1", "COLUMNS": "400"}
        # the model and endpoint come from the environment; --repeats is not a default
        cmd = [sys.executable, "-m", "assay", "run", str(suite), "--repeats", "2", "-j", "4"]
        proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(srv.chat_requests()) < 20:
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 130, stderr
        hint = stderr.split("resume with: ", 1)[1].strip().splitlines()[0]
        argv = shlex.split(hint)
        assert argv[:2] == ["assay", "run"] and "--out" in argv
        assert argv[argv.index("--model") + 1] == "m"
        assert argv[argv.index("--repeats") + 1] == "2"
        # a later shell without the variables: the command as printed resumes the run
        clean = {k: v for k, v in env.items() if not k.startswith("MODEL_")}
        done = subprocess.run([sys.executable, "-m", "assay", *argv[1:]], env=clean,
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    run = tmp_path / argv[argv.index("--out") + 1]
    keys = [(r["id"], r["repeat"]) for r in read_rows(run)]
    assert len(keys) == len(set(keys)) == 240
