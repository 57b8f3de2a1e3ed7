"""A narrow suite's reply contract, shown before it bites.

The suite a newcomer writes from the README: three labelled cases and the prompt "Answer with
the label only." A model that answers the right label in plain text is invalid on every case
(``no_object``), while ``builtin/oracle``, which answers in the contract, scores 100% and hides
it. Here, with a real OpenAI-compatible server (``ScriptedServer``) answering the plain label:

- the run ends with a hint naming the fix (the reply ``{"label": …}`` the scorer reads, or the
  text scorer), in the terminal and in report.md;
- ``assay suite check`` on that suite, with no model, says the prompt never shows the reply
  and exits 1; on the fixed prompt (and on ``examples/triage``) it exits 0;
- a suite whose expected value the scorer cannot score, or a label no case expects, is broken;
- the fixed prompt's run has no hint.

In-process CLI runs of three cases: well under a CPU-second each.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli, write_suite
from support.scripted_server import Answer, RecordedRequest, Reply, ScriptedServer

REPO = Path(__file__).resolve().parents[1]
CASES = [("c1", "App crashes when I click save", "bug"),
         ("c2", "Please add a dark mode", "feature"),
         ("c3", "How do I export my data?", "question")]
LABEL_ONLY = "Classify the issue as bug, feature or question. Answer with the label only."
FIXED = LABEL_ONLY.replace("Answer with the label only.",
                           'Respond with only a JSON object of the form '
                           '{"label": "<bug|feature|question>"}.')


def plain_label(request: RecordedRequest, attempt: int) -> Reply:
    """A capable model that follows the prompt it was given: the right label, as text."""
    expected = {text: label for _cid, text, label in CASES}
    return Answer(expected.get(request.case_input or "", "bug"))


def json_label(request: RecordedRequest, attempt: int) -> Reply:
    expected = {text: label for _cid, text, label in CASES}
    return Answer(json.dumps({"label": expected.get(request.case_input or "", "bug")}))


def _run(suite: Path, out: Path, handler: object) -> tuple[int, str, dict[str, object]]:
    with ScriptedServer(handler) as srv:  # type: ignore[arg-type]
        env = {"MODEL_BASE_URL": srv.base_url, "MODEL_API_KEY": "sk-contract",
               "MODEL_NAME": "plain-model"}
        res = run_cli(["run", str(suite), "--out", str(out)], env=env)
    return res.code, res.stdout, json.loads((out / "report.json").read_text())


def test_a_label_only_prompt_ends_with_the_fix(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "mine", CASES, prompt=LABEL_ONLY)
    code, stdout, rep = _run(suite, tmp_path / "run", plain_label)
    assert code == 0
    assert rep["invalid_reasons"] == {"no_object": 3} and rep["correct"] == 0
    hint = stdout[stdout.index("hint: "):]
    assert "3 of 3 invalid answers are no_object" in hint
    assert '{"label": "<bug|feature|question>"}' in hint  # the reply the scorer reads
    assert "normalized_text" in hint and "assay suite check" in hint
    md = (tmp_path / "run" / "report.md").read_text()
    assert "**Hint:** 3 of 3 invalid answers are no_object" in md

    fixed = write_suite(tmp_path / "fixed", CASES, prompt=FIXED)
    code, stdout, rep = _run(fixed, tmp_path / "run2", json_label)
    assert code == 0 and rep["correct"] == 3 and "hint:" not in stdout


def test_suite_check_reads_a_narrow_suite_without_a_model(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "mine", CASES, prompt=LABEL_ONLY)
    res = run_cli(["suite", "check", str(suite)])
    assert res.code == 1, res.stdout
    assert "BROKEN  prompt names the reply format: prompts/system.txt never shows" in res.stdout
    assert 'reply the scorer reads: {"label": "<bug|feature|question>"}' in res.stdout
    fixed = write_suite(tmp_path / "fixed", CASES, prompt=FIXED)
    res = run_cli(["suite", "check", str(fixed)])
    assert res.code == 0 and res.stdout.rstrip().endswith("the suite is sound"), res.stdout
    res = run_cli(["suite", "check", str(REPO / "examples" / "triage")])
    assert res.code == 0 and "75 of 75 cases" in res.stdout, res.stdout


def test_suite_check_finds_what_no_answer_could_score(tmp_path: Path) -> None:
    """A label no case expects, and a numeric suite whose expected value is no number."""
    suite = write_suite(tmp_path / "unused", CASES[:2], prompt=FIXED)
    res = run_cli(["suite", "check", str(suite)])
    assert res.code == 1
    assert "BROKEN  every label is expected by some case: no case expects question" in res.stdout
    text = write_suite(tmp_path / "text", [("t1", "Say hello", "hello")], labels=None,
                       prompt="Reply with the greeting only.",
                       extra_yaml="scorer: {type: normalized_text, reads: text}")
    res = run_cli(["suite", "check", str(text)])
    assert res.code == 0, res.stdout  # a text scorer reads the bare reply: any wording works
    assert "the scorer reads the bare reply text" in res.stdout
