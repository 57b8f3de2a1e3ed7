"""The library API on its own: `assay.run` and friends against a real scripted HTTP server, the
real built-in model server, real sandboxes and real run directories; no CLI in between."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import SECRET, assert_no_secret, read_rows, write_suite
from support.bundles import make_bundle
from support.scripted_server import Answer, ScriptedServer, Status, echo_label

import assay
from assay.errors import (
    InfraError,
    InputError,
    NeverOverwrite,
    NotComparable,
    RunConflict,
    SuiteError,
)
from assay.sandbox import bwrap_available

REPO = Path(__file__).resolve().parents[1]
CASES = [
    ("c1", "Title: crash on start\nBody: segfault", "bug"),
    ("c2", "Title: add dark mode\nBody: please", "feature"),
    ("c3", "Title: how to configure?\nBody: docs unclear", "question"),
    ("c4", "Title: wrong total\nBody: off by one", "bug"),
]
TRUTH = {text: label for _, text, label in CASES}
TUNED = "temperature: 0.7\nrepeats: 2\nmax_tokens: 33"
needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here")


@pytest.fixture
def no_endpoint_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller's environment must not leak into what a test asserts about resolution."""
    for name in ("MODEL_BASE_URL", "MODEL_API_KEY", "MODEL_NAME"):
        monkeypatch.delenv(name, raising=False)


def manifest_of(run: Path) -> dict[str, Any]:
    return json.loads((run / "manifest.json").read_text())


def test_suite_yaml_defaults_reach_the_server_and_the_manifest(
        tmp_path: Path, server: ScriptedServer, no_endpoint_env: None) -> None:
    server.handler = echo_label(labels_by_input=TRUTH)
    suite = write_suite(tmp_path / "suite", CASES, extra_yaml=TUNED)
    run = tmp_path / "run"
    result = assay.run(suite, "test-model", out=run, base_url=server.base_url, api_key=SECRET)
    chats = server.chat_requests()
    assert len(chats) == 8  # 4 cases x repeats 2
    for req in chats:
        assert req.body["temperature"] == 0.7 and req.body["max_tokens"] == 33
        assert req.body["model"] == "test-model"
        assert req.headers["authorization"] == f"Bearer {SECRET}"
    m = manifest_of(run)
    assert m["parameters"]["temperature"] == 0.7
    assert m["parameters"]["repeats"] == 2 and m["parameters"]["max_tokens"] == 33
    assert m["comparable"]["repeats"] == 2 and m["comparable"]["split"] is None
    assert m["limits"]["concurrency"] == 16 and m["limits"]["transport_max_tries"] == 5
    assert m["model"]["base_url"] == server.base_url and m["model"]["api_key_env"] is None
    # the result: the run directory, this session's status and rows, the report after it
    assert result.run_dir == run and result.kind == "narrow"
    assert result.status == "complete" and result.message is None
    assert result.rows_written == 8 and len(read_rows(run)) == 8
    assert result.infra_errors == 0 and result.missing_rows == 0 and result.complete
    assert result.report["n"] == 8 and result.report["accuracy"] == 1.0
    # the same report files `assay run` leaves
    assert json.loads((run / "report.json").read_text()) == result.report
    assert (run / "report.md").read_text().startswith("# assay report")
    assert "<svg" in (run / "report.html").read_text()
    assert_no_secret(run)


def test_overrides_win_over_suite_yaml(tmp_path: Path, server: ScriptedServer,
                                       no_endpoint_env: None) -> None:
    server.handler = echo_label(labels_by_input=TRUTH)
    suite = write_suite(tmp_path / "suite", CASES, extra_yaml=TUNED)
    run = tmp_path / "run"
    result = assay.run(suite, "test-model", out=run, base_url=server.base_url,
                       temperature=0.1, repeats=1, max_tokens=5, concurrency=2)
    chats = server.chat_requests()
    assert len(chats) == 4
    assert {(r.body["temperature"], r.body["max_tokens"]) for r in chats} == {(0.1, 5)}
    m = manifest_of(run)
    assert (m["parameters"]["temperature"], m["parameters"]["repeats"],
            m["parameters"]["max_tokens"]) == (0.1, 1, 5)
    assert m["limits"]["concurrency"] == 2
    assert result.report["expected_rows"] == 4
    # None means "not given": the suite's value stands
    plan = assay.prepare(suite, "test-model", base_url=server.base_url, temperature=None)
    assert plan.params.temperature == 0.7 and plan.params.repeats == 2


def test_bad_overrides_are_refused_before_anything_is_written(
        tmp_path: Path, server: ScriptedServer, no_endpoint_env: None) -> None:
    suite = write_suite(tmp_path / "suite", CASES)
    run = tmp_path / "run"
    with pytest.raises(InputError, match="temprature") as caught:
        assay.run(suite, "test-model", out=run, base_url=server.base_url, temprature=0.7,
                  colour="red")
    assert "colour" in str(caught.value)
    with pytest.raises(InputError, match="samples"):  # a coding option on a narrow suite
        assay.run(suite, "test-model", out=run, base_url=server.base_url, samples=2)
    with pytest.raises(InputError, match="repeats=0"):
        assay.run(suite, "test-model", out=run, base_url=server.base_url, repeats=0)
    with pytest.raises(SuiteError, match="unknown split 'nope'"):
        assay.run(suite, "test-model", out=run, base_url=server.base_url, split="nope")
    assert not run.exists() and server.chat_requests() == []


def test_endpoint_from_the_environment_and_its_errors(
        tmp_path: Path, server: ScriptedServer, monkeypatch: pytest.MonkeyPatch,
        no_endpoint_env: None) -> None:
    server.handler = echo_label(labels_by_input=TRUTH)
    suite = write_suite(tmp_path / "suite", CASES)
    with pytest.raises(InputError, match="MODEL_BASE_URL"):
        assay.prepare(suite, "test-model")
    monkeypatch.setenv("MODEL_BASE_URL", server.base_url)
    with pytest.raises(InputError, match="MY_KEY"):
        assay.prepare(suite, "test-model", api_key_env="MY_KEY")
    monkeypatch.setenv("MY_KEY", SECRET)
    run = tmp_path / "run"
    assay.run(suite, "test-model", out=run, api_key_env="MY_KEY")
    assert {r.headers["authorization"] for r in server.chat_requests()} == {f"Bearer {SECRET}"}
    assert manifest_of(run)["model"]["api_key_env"] == "MY_KEY"
    assert_no_secret(run)
    with pytest.raises(InputError, match="base_url"):  # a built-in model has no endpoint
        assay.prepare(suite, "builtin/oracle", base_url=server.base_url)


def test_prepare_writes_nothing_and_says_where_labels_came_from(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "suite", CASES, labels=None)
    plan = assay.prepare(suite, "builtin/oracle", out=tmp_path / "run")
    assert not (tmp_path / "run").exists()
    assert plan.kind == "narrow" and plan.base_url is None and plan.builtin is not None
    assert plan.notes == ("labels taken from the expected values in cases.jsonl (no labels in "
                          "suite.yaml): bug, feature, question",)
    default = assay.prepare(suite, "builtin/oracle")
    assert default.run_dir.parent == Path("runs")
    assert default.run_dir.name.startswith("suite-builtin_oracle-")


def test_builtin_models_compare_and_rebuild_report(tmp_path: Path) -> None:
    triage = REPO / "examples" / "triage"
    a = assay.run(triage, "builtin/baseline", out=tmp_path / "a")
    b = assay.run(str(triage), "builtin/oracle", out=tmp_path / "b")
    assert a.status == b.status == "complete"
    assert b.report["accuracy"] == 1.0 and a.report["accuracy"] < 1.0
    assert manifest_of(tmp_path / "a")["model"]["builtin"] is True
    c = assay.compare(tmp_path / "a", tmp_path / "b", seed=3)
    assert c["schema"] == "assay.narrow.compare/2"
    assert c["interval"] == {"method": "wilson_mover", "clustered_by": "case id"}
    assert c["paired"] == a.report["n"] == 75
    assert c["accuracy_diff_b_minus_a"] == pytest.approx(1.0 - a.report["accuracy"])
    # the report is rebuilt from the rows alone
    for name in ("report.json", "report.md", "report.html"):
        (tmp_path / "a" / name).unlink()
    rebuilt = assay.rebuild_report(tmp_path / "a")
    assert rebuilt == a.report
    assert all((tmp_path / "a" / n).is_file() for n in ("report.json", "report.md",
                                                          "report.html"))
    # the name for it: assay.report(run_dir), callable even though assay.report is
    # also the package every report module lives in (and is bound to that name by now)
    importlib.import_module("assay.report.narrow")

    (tmp_path / "a" / "report.json").unlink()
    assert assay.report(tmp_path / "a") == a.report
    assert (tmp_path / "a" / "report.json").is_file()
    # resuming a finished run asks nothing and writes no row
    again = assay.run(triage, "builtin/baseline", out=tmp_path / "a")
    assert again.rows_written == 0 and again.status == "complete"


def test_errors_are_raised_as_their_class(tmp_path: Path, server: ScriptedServer,
                                          no_endpoint_env: None) -> None:
    suite = write_suite(tmp_path / "suite", CASES)
    broken = tmp_path / "broken"
    (broken / "data").mkdir(parents=True)
    (broken / "data" / "cases.jsonl").write_text('{"id": "x"}\n')
    with pytest.raises(SuiteError):
        assay.run(broken, "builtin/oracle", out=tmp_path / "never")
    with pytest.raises(SuiteError, match="train.jsonl"):  # baseline needs training examples
        assay.prepare(suite, "builtin/baseline")
    with pytest.raises(InputError, match="unknown built-in"):
        assay.prepare(suite, "builtin/nope")
    with pytest.raises(InputError, match="no manifest.json"):
        assay.rebuild_report(tmp_path)
    with pytest.raises(InputError, match="no manifest.json"):
        assay.compare(tmp_path, tmp_path)
    # resuming with other settings is a RunConflict; the first run's rows are untouched
    server.handler = echo_label(labels_by_input=TRUTH)
    run = tmp_path / "run"
    assay.run(suite, "test-model", out=run, base_url=server.base_url)
    with pytest.raises(RunConflict, match="temperature"):
        assay.run(suite, "test-model", out=run, base_url=server.base_url, temperature=0.5)
    assert len(read_rows(run)) == 4
    # another suite's run cannot be paired
    other = write_suite(tmp_path / "other", CASES[:3])
    assay.run(other, "builtin/oracle", out=tmp_path / "other-run")
    with pytest.raises(NotComparable, match="not of the same suite"):
        assay.compare(run, tmp_path / "other-run")
    # a refused key aborts the run: a status, not an exception, with the reason kept
    server.handler = lambda req, n: Status(401, body='{"error": {"message": "bad key"}}')
    stopped = assay.run(suite, "test-model", out=tmp_path / "stopped", base_url=server.base_url)
    assert stopped.status == "aborted" and "401" in (stopped.message or "")
    assert not stopped.complete and stopped.infra_errors >= 1
    assert (tmp_path / "stopped" / "report.json").is_file()
    assert issubclass(RunConflict, InputError) and not issubclass(RunConflict, InfraError)


class Recorder:
    """A Progress that keeps what it was told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def start(self, total: int, done: int) -> None:
        self.calls.append(("start", (total, done)))

    def advance(self, row: dict[str, Any]) -> None:
        self.calls.append(("advance", row["id"]))

    def warn(self, message: str) -> None:
        self.calls.append(("warn", message))

    def finish(self) -> None:
        self.calls.append(("finish", None))


def test_progress_goes_where_asked_and_the_default_is_silent(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path / "suite", CASES)
    assay.run(suite, "builtin/oracle", out=tmp_path / "quiet")
    said = capfd.readouterr()
    assert said.out == "" and said.err == ""
    seen = Recorder()
    assay.run(suite, "builtin/oracle", out=tmp_path / "told", progress=seen)
    assert seen.calls[0] == ("start", (4, 0)) and seen.calls[-1] == ("finish", None)
    assert sorted(arg for kind, arg in seen.calls if kind == "advance") == ["c1", "c2", "c3",
                                                                            "c4"]


CODING_TASKS = [
    {"id": "py-add", "type": "unit", "prompt": "Write add(a, b) in Python.",
     "tests": "assert add(2, 3) == 5\n", "solution": "def add(a, b):\n    return a + b\n"},
    {"id": "py-mul", "type": "unit", "prompt": "Write mul(a, b) in Python.",
     "tests": "assert mul(2, 3) == 6\n", "solution": "def mul(a, b):\n    return a * b\n"},
]


def write_tasks(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(t) + "\n" for t in CODING_TASKS), encoding="utf-8")
    return path


@needs_bwrap
def test_a_coding_run_through_the_api(tmp_path: Path, server: ScriptedServer,
                                      no_endpoint_env: None) -> None:
    tasks = write_tasks(tmp_path / "suite" / "tasks.jsonl")
    oracle = assay.run(tasks.parent, "builtin/oracle", out=tmp_path / "oracle", samples=2)
    assert oracle.kind == "coding" and oracle.status == "complete" and oracle.complete
    assert oracle.report["schema"] == "assay.coding.report/1"
    assert oracle.report["pass_at_1"]["mean"] == 1.0 and oracle.rows_written == 4
    m = manifest_of(tmp_path / "oracle")
    assert m["parameters"]["samples"] == 2 and m["parameters"]["temperature"] == 0.2
    assert m["isolation"] == "bwrap" and m["limits"]["sandbox"]["wall_seconds"] == 30.0
    assert (tmp_path / "oracle" / "report.html").is_file()
    # a real endpoint answering nonsense: every sample fails, the defaults reach the server
    server.handler = lambda req, n: Answer("no code here")
    wrong = assay.run(tasks, "test-model", out=tmp_path / "wrong", base_url=server.base_url,
                      samples=1, exec_timeout=10)
    assert {r.body["temperature"] for r in server.chat_requests()} == {0.2}
    assert wrong.report["pass_at_1"]["mean"] == 0.0
    assert manifest_of(tmp_path / "wrong")["parameters"]["samples"] == 1
    c = assay.compare(tmp_path / "wrong", tmp_path / "oracle")
    assert c["schema"] == "assay.coding.compare/2" and c["pass_at_1_diff_b_minus_a"] == 1.0
    with pytest.raises(InputError, match="repeats"):  # a narrow option on a coding suite
        assay.prepare(tasks, "builtin/oracle", repeats=2)
    narrow = write_suite(tmp_path / "narrow", CASES)
    assay.run(narrow, "builtin/oracle", out=tmp_path / "narrow-run")
    with pytest.raises(NotComparable, match="narrow-task run with a coding run"):
        assay.compare(tmp_path / "narrow-run", tmp_path / "oracle")


@needs_bwrap
def test_check_suite_and_trials_through_the_api(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    checks = assay.check_suite(tasks)
    assert [(c.task.id, c.status) for c in checks] == [("py-add", "ok"), ("py-mul", "ok")]
    with pytest.raises(InputError, match="not a coding tasks file"):
        assay.check_suite(write_suite(tmp_path / "narrow", CASES))
    with pytest.raises(InputError, match="not a coding tasks file"):  # what load_suite gave
        assay.check_suite(assay.load_suite(tmp_path / "narrow"))
    bundle = make_bundle(tmp_path / "bundles" / "calc-001")
    with pytest.raises(InputError, match="unknown agent"):
        assay.run_trial(bundle, "wizard", tmp_path / "t0")
    result = assay.run_trial(bundle, "oracle", tmp_path / "t1")
    assert result.grade is not None and result.grade.accepted is True
    assert result.record.status == "graded" and result.record.grade is not None
    assert result.record.grade.revision == "v1"
    with pytest.raises(NeverOverwrite):
        assay.run_trial(bundle, "oracle", tmp_path / "t1")
    reports = assay.check_tasks([tmp_path / "bundles"], tmp_path / "check", reruns=1)
    assert [(r.task_id, r.status) for r in reports] == [("calc-001", "ok")]
    saved = json.loads((tmp_path / "check" / "task-check.json").read_text())
    assert saved == [r.to_record() for r in reports]
    with pytest.raises(InputError, match="no task bundle"):
        assay.check_tasks([tmp_path / "narrow"], tmp_path / "check2")


def test_import_assay_stays_cheap_and_report_is_not_shadowed() -> None:
    code = (
        "import sys\n"
        "import assay.records.base\n"
        "assert not [m for m in sys.modules if m.startswith(('assay.runner', 'assay.api'))], "
        "sorted(sys.modules)\n"
        "import assay\n"
        "assert 'assay.api' not in sys.modules\n"
        "assert 'run' in dir(assay)\n"
        "run = assay.run\n"
        "assert 'assay.api' in sys.modules and 'assay.runner.narrow' not in sys.modules\n"
        "import assay.report.narrow\n"
        "assert callable(assay.rebuild_report) and assay.run is run\n"
        "assert assay.report.__name__ == 'assay.report'\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        assay.nothing  # noqa: B018 - the attribute access is the test


def test_cli_and_library_make_the_same_run(tmp_path: Path) -> None:
    from conftest import run_cli

    suite = write_suite(tmp_path / "suite", CASES, extra_yaml=TUNED)
    res = run_cli(["run", str(suite), "--model", "builtin/oracle", "--out", str(tmp_path / "c")])
    assert res.code == 0, res.stderr
    lib = assay.run(suite, "builtin/oracle", out=tmp_path / "l")
    cli_m, lib_m = manifest_of(tmp_path / "c"), manifest_of(tmp_path / "l")
    for key in ("parameters", "comparable", "limits", "suite", "model"):
        assert cli_m[key] == lib_m[key], key
    cli_rep = json.loads((tmp_path / "c" / "report.json").read_text())
    drop = ("run_id", "started_at", "ended_at", "latency_ms")
    assert {k: v for k, v in cli_rep.items() if k not in drop} == {
        k: v for k, v in lib.report.items() if k not in drop}
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == sorted(
        p.name for p in (tmp_path / "l").iterdir())


def test_an_experiment_option_the_cli_does_not_have_is_refused(tmp_path: Path) -> None:
    """``run_experiment`` takes the flags of ``exp run`` as one ``ExperimentOptions`` or as
    keywords; a misspelt one (``job=4`` for ``jobs``) is refused before anything is written,
    not run at the file's concurrency unnoticed."""
    exp = tmp_path / "experiment.yaml"
    exp.write_text("name: x\ntasks: [tasks]\narms:\n  a:\n    agent: oracle\n")
    with pytest.raises(InputError, match=r"unknown experiment option\(s\): job "):
        assay.run_experiment(exp, tmp_path / "run", job=4)
    assert not (tmp_path / "run").exists()
    opts = assay.ExperimentOptions(jobs=2, tier="smoke")
    assert assay.ExperimentOptions.of(opts, jobs=4) == assay.ExperimentOptions(jobs=4,
                                                                              tier="smoke")


def test_every_name_of_the_api_is_found_where_it_says_it_lives() -> None:
    """``assay.api`` imports its names on first use from the module ``_WHERE`` gives: a name
    added to ``__all__`` but not there (or the other way round) would fail only when used."""
    import assay.api as api

    assert sorted(api._WHERE) == sorted(api.__all__)
    for name, module in api._WHERE.items():
        assert getattr(api, name) is getattr(importlib.import_module(module), name), name
