"""Narrow runs as Inspect eval logs, read back by Inspect's own log reader
(``inspect_ai.log.read_eval_log``, the ``assay[inspect]`` extra; ``make setup-test`` installs
it). Real parts: the triage example run by the CLI with the built-in baseline (two repeats:
150 samples, about 2 CPU-seconds), and a four-case suite against a real local server that
answers one case with an invalid label and one with 503s (an infra error). Nothing is mocked.
Opening the log in ``inspect view`` is not done here: the reader the viewer loads the file with
is what is checked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import SECRET, read_rows, run_cli, write_suite
from support.scripted_server import Answer, ScriptedServer, Status, by_input, echo_label


@pytest.fixture(scope="module", autouse=True)
def log_api() -> Any:
    """Inspect's log reader; every test here skips without it. Imported when the first test
    runs, not at collection: the import costs 1.3 s of CPU, paid by every make test worker
    that collects this file (eight of them) where only one runs it."""
    return pytest.importorskip("inspect_ai.log",
                               reason="Inspect (assay[inspect]) reads the log back here")


REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def triage(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("triage") / "run"
    res = run_cli(["run", str(REPO / "examples" / "triage"), "--model", "builtin/baseline",
                   "--repeats", "2", "--out", str(run)])
    assert res.code == 0, res.stderr
    return run


@pytest.mark.parametrize("suffix", [".eval", ".json"])
def test_the_triage_log_reads_back_with_the_same_accuracy_and_scores(
        triage: Path, tmp_path: Path, suffix: str, log_api: Any) -> None:
    target = tmp_path / f"triage{suffix}"
    res = run_cli(["report", str(triage), "--inspect-log", str(target)])
    assert res.code == 0, res.stderr
    rep = json.loads((triage / "report.json").read_text())
    assert f"Inspect log: {target} (150 samples, accuracy {rep['accuracy']:.4f})" in res.stdout
    log = log_api.read_eval_log(str(target))
    assert log.status == "success" and log.eval.task == "triage"
    assert log.eval.model == "builtin/baseline" and log.eval.config.epochs == 2
    [score] = log.results.scores
    assert score.metrics["accuracy"].value == rep["accuracy"]
    assert [score.metrics["ci95_low"].value, score.metrics["ci95_high"].value] == \
        rep["accuracy_ci95"]
    rows = {(r["id"], r["repeat"]): r for r in read_rows(triage)}
    assert len(log.samples) == len(rows) == 150
    for s in log.samples:
        row = rows[(s.id, s.epoch - 1)]
        assert s.scores["assay"].value == ("C" if row["correct"] else "I")
        assert s.scores["assay"].answer == row["label"]
        assert s.target == row["expected"] and s.output.completion == row["raw"]
        assert s.input.startswith("Title: ")
    # the same accuracy from the samples as Inspect holds them
    values = [s.scores["assay"].value for s in log.samples]
    assert values.count("C") / len(values) == rep["accuracy"]


def test_invalid_and_infra_errors_are_kept_as_metadata(tmp_path: Path,
                                                        server: ScriptedServer,
                                                        endpoint_env: dict[str, str],
                                                        log_api: Any) -> None:
    cases = [("c1", "Title: crash\nBody: segfault", "bug"),
             ("c2", "Title: dark mode\nBody: please", "feature"),
             ("c3", "Title: how?\nBody: docs", "question"),
             ("c4", "Title: wrong total\nBody: off by one", "bug")]
    truth = {text: label for _, text, label in cases}
    server.handler = by_input({cases[1][1]: Answer("no idea"), cases[3][1]: Status(503)},
                              default=echo_label(labels_by_input=truth))
    run = tmp_path / "run"
    res = run_cli(["run", str(write_suite(tmp_path / "suite", cases)), "--out", str(run),
                   "--max-tries", "1"])
    assert res.code == 3, res.stderr  # the infra error leaves the run to resume
    target = tmp_path / "small.eval"
    res = run_cli(["report", str(run), "--inspect-log", str(target)])
    assert res.code == 0, res.stderr
    log = log_api.read_eval_log(str(target))
    by_id = {s.id: s for s in log.samples}
    assert by_id["c1"].metadata["assay_status"] == "correct"
    assert by_id["c2"].metadata["assay_status"] == "invalid"
    assert by_id["c2"].scores["assay"].value == "I"
    assert by_id["c2"].scores["assay"].explanation == by_id["c2"].metadata["invalid_reason"]
    assert by_id["c4"].metadata["assay_status"] == "infra_error"
    assert by_id["c4"].scores is None and "503" in by_id["c4"].error.message
    rep = json.loads((run / "report.json").read_text())
    assert log.results.scores[0].metrics["accuracy"].value == rep["accuracy"] == 2 / 3
    assert log.results.completed_samples == 3 and log.results.total_samples == 4
    assert SECRET not in target.read_bytes().decode("latin-1")


def test_without_inspect_the_error_names_the_extra(triage: Path, tmp_path: Path) -> None:
    """Inspect hidden from the interpreter (``sys.modules`` entry None: its import fails as
    when it is not installed)."""
    code = ("import sys; sys.modules['inspect_ai'] = None; sys.argv = ['assay', 'report', "
            f"{str(triage)!r}, '--inspect-log', {str(tmp_path / 'x.eval')!r}]; "
            "from assay.cli import main; main()")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    assert "pip install 'assay[inspect]'" in " ".join(done.stderr.split())
    assert not (tmp_path / "x.eval").exists()


def test_a_coding_run_as_an_inspect_log(tmp_path: Path, server: ScriptedServer,
                                        endpoint_env: dict[str, str], log_api: Any) -> None:
    """Two samples of a unit task (one passes, one fails in the sandbox) and a rubric task
    (graded by people: an unscored sample); the headline is the run's pass@1."""
    tasks = tmp_path / "suite" / "tasks.jsonl"
    tasks.parent.mkdir(parents=True)
    tasks.write_text("".join(json.dumps(o) + "\n" for o in [
        {"id": "py-add", "type": "unit", "prompt": "Write add(a, b) in Python.",
         "tests": "assert add(2, 3) == 5\n"},
        {"id": "sql", "type": "rubric", "prompt": "Index orders by date.",
         "rubric": "3: an index"}]))
    good = Answer("```python\ndef add(a, b):\n    return a + b\n```\n")
    bad = Answer("```python\ndef add(a, b):\n    return a - b\n```\n")
    answers = iter([good, bad])
    server.handler = lambda req, n: next(answers) if "add(a, b)" in (req.case_input or "") \
        else Answer("```sql\nCREATE INDEX o ON orders (d);\n```\n")
    run = tmp_path / "run"
    res = run_cli(["run", str(tasks), "--samples", "2", "--out", str(run)])
    assert res.code == 0, res.stderr
    target = tmp_path / "coding.json"
    res = run_cli(["report", str(run), "--inspect-log", str(target)])
    assert res.code == 0, res.stderr
    log = log_api.read_eval_log(str(target))
    rep = json.loads((run / "report.json").read_text())
    assert log.results.scores[0].metrics["pass_at_1"].value == rep["pass_at_1"]["mean"] == 0.5
    unit = sorted((s for s in log.samples if s.id == "py-add"), key=lambda s: s.epoch)
    assert sorted(s.scores["assay"].value for s in unit) == ["C", "I"]
    assert all(s.input.startswith("Write add(a, b) in Python.") for s in unit)
    rubric = [s for s in log.samples if s.id == "sql"]
    assert len(rubric) == 2 and all(s.scores is None for s in rubric)
    assert {s.metadata["assay_status"] for s in rubric} == {"rubric"}
