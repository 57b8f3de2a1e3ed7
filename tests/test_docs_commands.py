"""Every ``assay`` command the documentation shows is checked against the command-line app, and
those that can run here run, as a user would type them.

The commands are read out of the shell blocks of README.md and of every page of docs/guide/
(tests/support/doc_commands.py says exactly what is read; a new guide page is picked up without
editing this file). Each one meets one of three fates:

- **validated** (every command): its words must name a command of the app (``assay exp
  compare``), every ``--option`` must be one of that command's, an option that takes a value
  must have one (a number where it takes a number, unless the page shows a placeholder), and
  the count of positional arguments must fit the command's. Optional parts shown in brackets
  (``[--json]``) are checked as if given.
- **run** (``test_the_commands_of_a_page_run``): the commands of each page, in page order, in a
  temporary folder holding a copy of ``examples/``, each through ``python -m assay`` in a
  subprocess, so a later command reads what an earlier one wrote (``assay compare runs/baseline
  runs/oracle`` after the two runs). Each must exit as the docs promise (0, or the verdict and
  drift codes ``exp verdict`` and ``history --fail-on-drift`` document) with no traceback. The
  test prints what it ran and what it did not, with the reason (``pytest -s`` shows it). Three
  kinds of command run with a difference, said here:

  - the example agent's experiment (``RUN_HERE_LINES``): the page installs the OpenAI client
    beside the agent with pip first; here the same distributions are copied from this
    virtualenv (``support/vendor.py``: no network, no second download). Its one trial must
    be accepted through the gateway, with its model calls in the ledger.

  - ``assay run`` with a model that is not built in asks the endpoint in ``MODEL_BASE_URL``.
    Here that is a stand-in: ``assay serve builtin/oracle`` for the suite the command names
    (its reference answers, over HTTP from a process of its own), with ``MODEL_NAME`` and
    ``MODEL_API_KEY`` set; the page's own ``export`` lines are not run. The command, its
    requests, its run directory and what later commands read from it are real; the answers are
    the oracle's, not a model's.
  - ``assay serve`` serves until stopped: it is started as written but on a free port
    (``--port 0``: the port the page shows may be taken on a shared machine), asked for
    ``/v1/models`` and a chat answer, then stopped with Ctrl-C (SIGINT), which must exit 0.

- **not run here**, with the reason ``why_not_run`` gives, which is one of: the line is a form
  rather than a command (placeholders such as ``RUN_DIR``, ``[--flag]``, ``a|b``); it names a file
  the repository does not hold and no earlier command of the page made (the reader's own
  ``exp.yaml``); it is not in ``RUN_HERE``, the commands known to take seconds with no network (a
  command a new page brings, such as building an environment, is validated until someone times it
  and adds it); it installs the five agent CLIs (``agents check``) or needs a Ray cluster; or
  another test runs it, named in ``RUN_ELSEWHERE`` (the rehearsal with the real Qwen Code CLI, the
  task checks with their twenty-four mutants), because running it again here would add minutes for
  nothing new. The named tests must exist (``test_run_elsewhere_names_real_tests``).

Every command runs at ``COLUMNS=80`` with stdout and stderr pipes, as in a CI log. Those that
only read what earlier ones wrote (``READS_ONLY``: report, compare, history, trial show, the
``exp`` readers, task lint) run a second time at ``COLUMNS=1000``, and every token of their
80-column output must be one the wide output prints (``support/split_tokens.py``): a run name,
path, number or digest folded across lines leaves pieces that fail it
(``test_the_split_check_finds_a_folded_cell`` shows the check failing on a folded table). The
second runs cost about 6 CPU-seconds on this machine. Commands that write (``run``, ``trial
run``) are not run twice; their tables are the report's, which ``report`` prints.

The pages' ``python`` blocks run as well, each as a script in a copy of ``examples/``
(``test_the_python_the_docs_show_runs``).

``make demo``, ``make test`` and ``make rehearsal`` are not ``assay`` commands and are not read:
``make demo`` is the README's first command with an install in front, ``make rehearsal`` is the
rehearsal of ``RUN_ELSEWHERE``, and ``make test`` is this suite.

Cost: the README's page runs 13 commands (two trials and a coding run in the sandbox among
them): about 30 s when its commands were timed one by one on a quiet moment of this 2-core
machine, 95 s under a load average of 12; the whole file took 172 s at that load.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from support.ctrl_c import interruptible
from support.doc_commands import (
    REPO,
    DocCommand,
    all_commands,
    code_blocks,
    commands_in,
    doc_pages,
)
from support.split_tokens import split_tokens

from assay.cli.reference import root_command
from assay.sandbox import bwrap_available

#: commands another test runs (as written, or as named in the reason), by their leading words
RUN_ELSEWHERE: dict[tuple[str, ...], str] = {
    ("exp", "run", "examples/experiments/rehearsal.yaml"):
        "tests/test_examples.py::test_the_rehearsal_experiment_runs_with_a_real_agent",
    ("exp", "verdict", "runs/rehearsal"):  # there with --json, to read the figures
        "tests/test_examples.py::test_the_rehearsal_experiment_runs_with_a_real_agent",
    ("task", "check", "examples/agent-tasks", "--mutants"):  # there with --reruns 1 --workers 6

        "tests/test_examples_check.py::test_examples_pass_task_check",
    # a real build takes minutes: the image tests build, list, remove and open their own
    ("env", "build"): "tests/test_env_build.py::test_env_build_ls_rm_cli",
    ("env", "ls"): "tests/test_env_build.py::test_env_build_ls_rm_cli",
    ("env", "shell"):
        "tests/test_env_run.py::test_env_shell_runs_piped_commands_in_the_tasks_image",
    ("task", "check", "tasks/harbor", "--mutants"):  # there through the API, as the CLI does
        "tests/test_harbor_import.py::"
        "test_the_example_harbor_task_converts_and_its_oracle_and_mutants_check_out",
}
#: commands known to be cheap and self-contained given their inputs (seconds, no network, no
#: install): only these run here. A command of a new group is validated, and says how to opt in.
RUN_HERE: set[tuple[str, ...]] = {
    ("run",), ("compare",), ("report",), ("history",), ("serve",), ("regrade",),
    ("suite", "check"), ("task", "lint"), ("task", "import-harbor"), ("trial", "run"),
    ("trial", "show"), ("exp", "plan"), ("exp", "status"), ("exp", "verdict"),
    ("exp", "compare"), ("exp", "report"),
}
#: command lines (their leading words) that run here though their command is not in RUN_HERE:
#: the example agent's experiment, two trials in seconds (its OpenAI client is put beside it
#: first, as the page's pip line would: ``support/vendor.py``)
RUN_HERE_LINES: set[tuple[str, ...]] = {
    ("exp", "run", "examples/agents/experiment.yaml"),
}
#: commands that only read what earlier ones wrote: run again at a width nothing wraps at, as
#: the reference no token of their 80-column output may be a piece of
READS_ONLY: set[tuple[str, ...]] = {
    ("compare",), ("report",), ("history",), ("trial", "show"), ("exp", "plan"),
    ("exp", "status"), ("exp", "verdict"), ("exp", "compare"), ("task", "lint"),
}
#: the terminal width the documented commands run at (stdout and stderr are pipes)
DOC_COLUMNS = "80"
#: exit codes a command may end with besides 0, where the docs say it (the README's table)
OTHER_EXITS: dict[tuple[str, ...], set[int]] = {("exp", "verdict"): {1, 4}}
#: options that name a file the command reads (the others name what it writes, or no file)
INPUT_OPTIONS = {"--experiment", "--judge", "--script", "--suite", "--preference", "--task",
                 "--import"}
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*(\.\.\.)?|.*[\[\]…].*|\S+\|\S+")
COMMANDS = all_commands()


@dataclass
class Parsed:
    """A documented command matched against the app."""

    path: tuple[str, ...]
    cmd: Any
    positionals: list[str]
    options: dict[str, str | None]


def _numeric(param: Any, cmd: Any) -> str | None:
    shown = param.display_type(typer.Context(cmd)).strip("<>").removesuffix(" range")
    return shown if shown in ("int", "float") else None


def parse(doc: DocCommand) -> Parsed:
    """Resolve the command's words against the app; every mismatch is an AssertionError that
    names the page and line."""
    node, path = root_command(), []
    words = [w.strip("[]") for w in doc.words]
    words = [w.rstrip("…") for w in words if w.strip("[]").rstrip("…") not in ("", "...")]
    while hasattr(node, "commands"):
        assert words and words[0] in node.commands, (
            f"{doc}: {' '.join(('assay', *path))} has no command "
            f"{words[0] if words else '(none)'!r} (it has: {', '.join(sorted(node.commands))})")
        path.append(words.pop(0))
        node = node.commands[path[-1]]
    flags = {flag: p for p in node.params if p.param_type_name == "option"
             for flag in (*p.opts, *p.secondary_opts)}
    positionals: list[str] = []
    options: dict[str, str | None] = {}
    while words:
        word = words.pop(0)
        if not word.startswith("-") or re.fullmatch(r"-\d+(\.\d+)?", word):
            positionals.append(word)
            continue
        name, eq, value = word.partition("=")
        assert name in flags, f"{doc}: assay {' '.join(path)} has no option {name}"
        param = flags[name]
        if getattr(param, "is_flag", False):
            assert not eq, f"{doc}: {name} is a flag and takes no value"
            options[name] = None
            continue
        if not eq:
            assert words and not words[0].startswith("--"), f"{doc}: {name} needs a value"
            value = words.pop(0)
        kind = _numeric(param, node)
        if kind and not PLACEHOLDER.fullmatch(value):
            try:
                (int if kind == "int" else float)(value)
            except ValueError:
                raise AssertionError(f"{doc}: {name} takes a number, not {value!r}") from None
        options[name] = value
    arguments = [p for p in node.params if p.param_type_name == "argument"]
    least = sum(1 for p in arguments if p.required)
    most = None if any(p.nargs == -1 for p in arguments) else sum(p.nargs for p in arguments)
    assert len(positionals) >= least, f"{doc}: needs {least} argument(s), shows {positionals}"
    assert most is None or len(positionals) <= most, (
        f"{doc}: takes at most {most} argument(s), shows {positionals}")
    return Parsed(tuple(path), node, positionals, options)


def _path_arguments(parsed: Parsed) -> list[str]:
    """The positional values that name files (by the argument's type), in order."""
    arguments = [p for p in parsed.cmd.params if p.param_type_name == "argument"]
    kinds: list[str] = []
    for p in arguments:
        shown = p.display_type(typer.Context(parsed.cmd)).strip("<>")
        kinds += [shown] * (len(parsed.positionals) if p.nargs == -1 else p.nargs)
    return [v for v, k in zip(parsed.positionals, kinds, strict=False) if "ath" in k]


def elsewhere(doc: DocCommand) -> str | None:
    for words, test in RUN_ELSEWHERE.items():
        if doc.words[:len(words)] == words:
            return test
    return None


def why_not_run(doc: DocCommand, parsed: Parsed, cwd: Path) -> str | None:
    """None when the command runs here, else why not (see the module docstring)."""
    if (test := elsewhere(doc)) is not None:
        return f"run by {test}"
    shown = [w for w in doc.words if PLACEHOLDER.fullmatch(w)]
    if shown:
        return f"a form, not a command line: {' '.join(shown)}"
    if parsed.path == ("agents", "check"):
        return ("installs and runs the five agent CLIs, minutes and about 2 GB the first time "
                "(tests/test_agents_check.py runs it for one)")
    if parsed.options.get("--executor") == "ray":
        return "needs a Ray cluster (tests/test_ray_executor.py starts one)"
    inputs = [v for k, v in parsed.options.items() if k in INPUT_OPTIONS and v is not None]
    missing = [p for p in [*_path_arguments(parsed), *inputs] if not (cwd / p).exists()]
    if missing:
        return (f"names {', '.join(missing)}, which the repository does not hold and no "
                "earlier command of the page made")
    if parsed.path not in RUN_HERE and not any(doc.words[:len(w)] == w
                                                for w in RUN_HERE_LINES):
        return ("not known to be cheap and self-contained: time it, then add "
                f"{parsed.path} to RUN_HERE (or name the test that runs it in RUN_ELSEWHERE)")
    return None


@pytest.mark.parametrize("doc", COMMANDS, ids=str)
def test_every_documented_command_matches_the_app(doc: DocCommand) -> None:
    parsed = parse(doc)
    assert parsed.path, doc


def test_the_docs_show_commands_and_the_pages_are_read() -> None:
    """The extraction itself: it finds the README's quick starts and reads every guide page
    (a broken reader would make every other test here pass on nothing)."""
    pages = {doc.page for doc in COMMANDS}
    assert "README.md" in pages and len(doc_pages()) >= 10
    readme = [" ".join(d.words) for d in commands_in(REPO / "README.md")]
    assert "run examples/triage --model builtin/baseline --out runs/baseline" in readme
    assert "exp verdict runs/rehearsal" in readme
    assert any(d.page == "docs/guide/verdicts.md" and "[--method" in d.words for d in COMMANDS)


def test_a_wrong_command_or_option_is_caught() -> None:
    """The validation can fail: a misspelt command, an unknown flag, a missing value, a word
    where a number goes and a surplus argument are each refused."""
    bad = [("exp", "verdcit", "runs/x"), ("run", "examples/triage", "--modle", "m"),
           ("run", "examples/triage", "--model"), ("run", "examples/triage", "-j", "four"),
           ("compare", "a", "b", "c")]
    for words in bad:
        with pytest.raises(AssertionError):
            parse(DocCommand("x.md", 1, "", words))


def test_run_elsewhere_names_real_tests() -> None:
    for test in RUN_ELSEWHERE.values():
        file, _, name = test.partition("::")
        assert re.search(rf"^def {name}\(", (REPO / file).read_text(), re.M), test
    shown = {tuple(d.words[:len(w)]) for d in COMMANDS for w in RUN_ELSEWHERE}
    assert all(w in shown for w in RUN_ELSEWHERE), "an entry no page shows any more"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODEL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"),
                                                      env.get("PYTHONPATH")]))
    env.pop("GITHUB_STEP_SUMMARY", None)
    return env


def asks_an_endpoint(parsed: Parsed) -> bool:
    """``assay run`` with a model that is not built in: it needs MODEL_BASE_URL."""
    return parsed.path == ("run",) and not (parsed.options.get("--model") or "").startswith(
        "builtin/")


@contextlib.contextmanager
def served(words: list[str], cwd: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``assay serve`` with these words, on a free port whatever they say: its base URL and
    process while the block runs, killed after it if still alive."""
    if "--port" in words:
        words[words.index("--port") + 1] = "0"
    else:
        words += ["--port", "0"]
    proc = subprocess.Popen([sys.executable, "-m", "assay", *words], cwd=cwd, env=_env(),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # "serving MODEL on http://HOST:PORT/v1 (Ctrl-C to stop)"
        match = re.search(r"on (http://\S+/v1)", line)
        assert match, f"assay {' '.join(words)}: no 'serving ... on URL' line, got {line!r}"
        yield match.group(1), proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def stand_in(parsed: Parsed, cwd: Path) -> Iterator[dict[str, str]]:
    """The environment a command runs in; for one that asks an endpoint, the endpoint too:
    ``assay serve builtin/oracle`` for the suite the command names (its reference answers,
    over HTTP from its own process), standing in for the reader's vLLM or hosted API. Every
    case is answered right, so a documented ``--fail-under`` gate passes as the page implies."""
    env = _env()
    if not asks_an_endpoint(parsed):
        yield env
        return
    with served(["serve", "builtin/oracle", "--suite", parsed.positionals[0]], cwd) as (url, _):
        yield {**env, "MODEL_BASE_URL": url, "MODEL_NAME": "stand-in-model",
               "MODEL_API_KEY": "sk-docs-stand-in"}


def serve_and_ask(doc: DocCommand, cwd: Path) -> None:
    """Start ``assay serve`` as the page shows it, on a free port; it must answer, then stop
    on Ctrl-C with exit 0."""
    words = list(doc.words)
    with served(words, cwd) as (base, proc):
        model = words[1]
        listed = httpx.get(f"{base}/models", timeout=30).json()
        assert [m["id"] for m in listed["data"]] == [model], listed
        answer = httpx.post(f"{base}/chat/completions", timeout=30, json={
            "model": model, "messages": [{"role": "user", "content": "Title: crash on start"}]})
        assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0, f"{doc}: Ctrl-C ended it with {proc.returncode}"


@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap cannot run here (the coding and "
                    "trial commands need the sandbox)")
@pytest.mark.parametrize("page", [p for p in doc_pages() if commands_in(p)],
                         ids=lambda p: p.relative_to(REPO).as_posix())
def test_the_commands_of_a_page_run(page: Path, tmp_path: Path) -> None:
    docs = commands_in(page)
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    if any("examples/agents/experiment.yaml" in doc.words for doc in docs):
        from support.vendor import vendor_openai

        vendor_openai(tmp_path / "examples" / "agents" / "vendor")
    ran, skipped = [], []
    for doc in docs:
        parsed = parse(doc)
        reason = why_not_run(doc, parsed, tmp_path)
        if reason:
            skipped.append(f"  {doc}\n      not run: {reason}")
            continue
        started = time.monotonic()
        if parsed.path == ("serve",):
            serve_and_ask(doc, tmp_path)
            ran.append(f"  {doc}  (on --port 0, {time.monotonic() - started:.1f} s)")
            continue
        with stand_in(parsed, tmp_path) as env:
            proc = subprocess.run([sys.executable, "-m", "assay", *doc.words], cwd=tmp_path,
                                  env={**env, "COLUMNS": DOC_COLUMNS}, capture_output=True,
                                  text=True, timeout=600, stdin=subprocess.DEVNULL)
        allowed = {0} | OTHER_EXITS.get(parsed.path, set())
        if parsed.path == ("history",) and "--fail-on-drift" in parsed.options:
            allowed.add(5)
        assert proc.returncode in allowed, (
            f"{doc}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        assert "Traceback" not in proc.stderr, f"{doc}\n{proc.stderr[-3000:]}"
        if parsed.path in READS_ONLY:
            assert_nothing_split(doc, proc, tmp_path)
        ran.append(f"  {doc}  ({time.monotonic() - started:.1f} s)")
        if doc.words[:3] == ("exp", "run", "examples/agents/experiment.yaml"):
            # the example agent really fixed the task through the gateway: accepted, with the
            # model calls it made in its ledger
            out = tmp_path / parsed.options["--out"]
            rows = [json.loads(line) for line in (out / "outcomes.jsonl").read_text().splitlines()]
            assert [(r["arm"], r["passed"]) for r in rows] == [("mine", True)], rows
            ledger = out / next(r["link"] for r in rows if r["arm"] == "mine") / \
                "model_calls.jsonl"
            assert len(ledger.read_text().splitlines()) >= 2
    print(f"\n{page.name}: ran {len(ran)}\n" + "\n".join(ran)
          + f"\nnot run: {len(skipped)}\n" + "\n".join(skipped))
    if page.name == "README.md":  # the quick starts are meant to run: keep them so
        assert len(ran) >= 12, "\n".join(skipped)


def assert_nothing_split(doc: DocCommand, narrow: subprocess.CompletedProcess[str],
                         cwd: Path) -> None:
    """The command's output at 80 columns split no token across lines: run again with room
    for any line (stdout a pipe both times), every token of the narrow output must be one the
    wide output prints (support/split_tokens.py)."""
    wide = subprocess.run([sys.executable, "-m", "assay", *doc.words], cwd=cwd,
                          env={**_env(), "COLUMNS": "1000"}, capture_output=True, text=True,
                          timeout=600, stdin=subprocess.DEVNULL)
    for name in ("stdout", "stderr"):
        pieces = split_tokens(getattr(narrow, name), getattr(wide, name))
        assert not pieces, (f"{doc}: at {DOC_COLUMNS} columns its {name} split "
                            f"{pieces[:10]}\n{getattr(narrow, name)[-3000:]}")


def test_the_split_check_finds_a_folded_cell() -> None:
    """The check can fail: a table whose column is narrower than a run name, as `history`
    drew one, folds the name; at a width with room it does not."""
    from rich.console import Console
    from rich.table import Table

    def draw(width: int) -> str:
        console = Console(width=width, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
        table = Table()
        for col in ("started (UTC)", "run", "headline", "served", "fingerprints"):
            table.add_column(col, overflow="fold")
        table.add_row("2026-12-06T09:53:35.707Z", "triage-builtin_baseline-20261206T095335Z",
                      "82.7% [72.6, 89.6] n=75", "builtin/baseline", "suite:45fefde")
        console.print(table)
        console.file.close()
        return console.export_text()

    pieces = split_tokens(draw(60), draw(1000))
    assert "triage-" not in pieces and any(p.startswith("triag") for p in pieces), pieces
    assert split_tokens(draw(1000), draw(1000)) == []


PYTHON_BLOCKS = [(page, line, code) for page in doc_pages()
                 for line, code in code_blocks(page, "python")]


def test_the_docs_show_python() -> None:
    assert any(page.name == "python-api.md" for page, _, _ in PYTHON_BLOCKS)


@pytest.mark.parametrize(("page", "line", "code"), PYTHON_BLOCKS,
                         ids=[f"{p.relative_to(REPO).as_posix()}:{n}" for p, n, _ in
                              PYTHON_BLOCKS])
def test_the_python_the_docs_show_runs(page: Path, line: int, code: str,
                                       tmp_path: Path) -> None:
    """Each ``python`` block runs as a script, in a folder holding a copy of ``examples/``: the
    library calls it shows exist and return what it reads from them."""
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    where = f"{page.relative_to(REPO)}:{line}"
    assert proc.returncode == 0, f"{where}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert proc.stdout.strip(), f"{where}: printed nothing"


def test_what_runs_here_is_decided_by_the_rules() -> None:
    """The classification itself, on commands a page could show: a concrete command of
    ``RUN_HERE`` runs; a form, a missing input and a command nobody has timed do not."""
    def reason(*words: str) -> str | None:
        doc = DocCommand("x.md", 1, "", words)
        return why_not_run(doc, parse(doc), REPO)

    assert reason("task", "lint", "examples/agent-tasks") is None
    assert reason("run", "examples/triage", "--tier", "smoke") is None  # against the stand-in
    assert "a form" in (reason("report", "RUN_DIR") or "")
    assert "does not hold" in (reason("exp", "run", "mine.yaml", "--out", "runs/x") or "")
    assert "RUN_HERE" in (reason("task", "check", "examples/agent-tasks") or "")
    assert "run by tests/" in (reason("task", "check", "examples/agent-tasks", "--mutants") or "")
