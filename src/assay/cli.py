"""The ``assay`` command line: parse, call, print. Logic lives in the modules it calls.

Exit codes: 0 done; 2 bad input (nothing was run, no run directory left behind); 3 the run
finished but some cases ended in infra errors (resume with the same ``--out``); 130 interrupted.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from assay.suites.errors import SuiteError

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_INFRA = 3
EXIT_INTERRUPTED = 130

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Evidence-first evals of models and coding agents on your own tasks.")
# Piped output (CI logs, `| tee`) gets 120 columns instead of rich's 80, so report tables stay
# one line a row; a terminal or an explicit COLUMNS decides for itself.
_LOG_WIDTH = None if sys.stdout.isatty() or "COLUMNS" in os.environ else 120
out = Console(width=_LOG_WIDTH)
err = Console(stderr=True, width=_LOG_WIDTH)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    err.print(f"[bold red]assay:[/] {message}", highlight=False)
    return typer.Exit(code)


class TerminalProgress:
    """A rich progress bar on a terminal; a quiet line every few seconds when not a TTY (CI
    logs), so long runs show life without flooding the log."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live = console.is_terminal
        self.total = 0
        self.done = 0
        self.invalid = 0
        self.failed = 0
        self.errors = 0
        self._last_line = 0.0
        self._bar: Any = None
        self._task: Any = None

    def start(self, total: int, done: int) -> None:
        self.total, self.done = total, done
        self._last_line = time.monotonic()
        if done:
            self.console.print(f"resuming: {done} of {total} already answered", highlight=False)
        if self.live:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(TextColumn("[bold]asking"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[note]}"), TimeElapsedColumn(),
                                 TimeRemainingColumn(), console=self.console, transient=True)
            self._bar.start()
            self._task = self._bar.add_task("run", total=total, completed=done, note="")

    def advance(self, row: dict[str, Any]) -> None:
        self.done += 1
        self.invalid += bool(row.get("invalid_reason"))
        self.failed += row.get("passed") is False
        self.errors += bool(row.get("error"))
        if "passed" in row:  # a coding sample
            note = f"failed {self.failed} · errors {self.errors}"
        else:
            note = f"invalid {self.invalid} · errors {self.errors}"
        if self._bar is not None:
            self._bar.update(self._task, advance=1, note=note)
        elif time.monotonic() - self._last_line >= 5 or self.done == self.total:
            self._last_line = time.monotonic()
            self.console.print(f"assay: {self.done}/{self.total} answered ({note})",
                               highlight=False)

    def warn(self, message: str) -> None:
        self.console.print(f"[yellow]warning:[/] {message}", highlight=False)

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _resolve_endpoint(model: str | None, base_url: str | None, api_key_env: str | None,
                      is_builtin_ok: bool = True) -> tuple[str, str | None, str, str | None]:
    """(model, base_url, api_key, key source) from flags first, then the MODEL_* variables."""
    model = model or os.environ.get("MODEL_NAME")
    if not model:
        raise fail("no model: pass --model or set MODEL_NAME (or use --model builtin/baseline)")
    from assay.models.builtin import BUILTIN_PREFIX

    if model.startswith(BUILTIN_PREFIX) and is_builtin_ok:
        return model, None, "", None
    base_url = base_url or os.environ.get("MODEL_BASE_URL")
    if not base_url:
        raise fail("no endpoint: pass --base-url or set MODEL_BASE_URL "
                   "(e.g. http://localhost:8000/v1 for vLLM, http://localhost:11434/v1 for Ollama)")
    key_source = api_key_env or "MODEL_API_KEY"
    key = os.environ.get(key_source)
    if api_key_env and key is None:
        raise fail(f"--api-key-env {api_key_env}: that environment variable is not set")
    if key is None:
        err.print("[dim]no MODEL_API_KEY set: sending a placeholder key (fine for local "
                  "servers)[/]")
        key_source = None
    return model, base_url, key or "", key_source


def _suite_kind(path: Path) -> tuple[str, Path]:
    """A ``.jsonl`` file (or a folder holding ``tasks.jsonl``) is a coding suite; a folder with
    ``data/cases.jsonl`` is a narrow-task suite."""
    if path.is_file():
        return "coding", path
    if (path / "tasks.jsonl").is_file() and not (path / "data" / "cases.jsonl").exists():
        return "coding", path / "tasks.jsonl"
    return "narrow", path


def _require_sandbox(sandbox: str) -> None:
    if sandbox not in ("bwrap", "none"):
        raise fail("--sandbox must be bwrap or none")
    if sandbox == "none":
        err.print("[bold red]NOT ISOLATED:[/] candidate code runs without the sandbox "
                  "(--sandbox none)")
        return
    from assay.sandbox import SandboxUnavailable, check_bwrap

    try:
        check_bwrap()
    except SandboxUnavailable as exc:
        raise fail(f"the sandbox cannot run here: {exc}\nInstall bubblewrap, or pass "
                   "--sandbox none to run candidate code NOT ISOLATED.") from None


@app.command()
def run(
    suite_path: Annotated[Path, typer.Argument(metavar="SUITE", help="Narrow suite directory, "
                                               "or a coding tasks.jsonl.")],
    model: Annotated[str | None, typer.Option(help="Model name; env MODEL_NAME. "
                                              "builtin/baseline or builtin/oracle run locally.")]
    = None,
    base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible base URL; env "
                                                 "MODEL_BASE_URL.")] = None,
    api_key_env: Annotated[str | None, typer.Option(help="Read the API key from this variable "
                                                    "instead of MODEL_API_KEY.")] = None,
    temperature: Annotated[float | None, typer.Option(
        help="Narrow: default from suite.yaml, else 0. Coding: default 0.2.")] = None,
    repeats: Annotated[int | None, typer.Option(min=1, help="Narrow: ask every case N times.")]
    = None,
    samples: Annotated[int, typer.Option(min=1, help="Coding: answers per task.")] = 3,
    concurrency: Annotated[int, typer.Option("-j", "--concurrency", min=1)] = 16,
    max_tokens: Annotated[int | None, typer.Option(min=1)] = None,
    timeout: Annotated[float, typer.Option(help="Seconds per request.")] = 120.0,
    max_tries: Annotated[int, typer.Option(min=1, help="Transport tries per request.")] = 5,
    split: Annotated[str | None, typer.Option(help="Narrow: a split named in suite.yaml.")]
    = None,
    sandbox: Annotated[str, typer.Option(help="Coding: bwrap, or none (NOT ISOLATED, only "
                                         "when asked for).")] = "bwrap",
    exec_timeout: Annotated[float, typer.Option(help="Coding: seconds per execution.")] = 30.0,
    memory_mib: Annotated[int, typer.Option(help="Coding: memory limit per execution.")] = 1024,
    pids: Annotated[int, typer.Option(help="Coding: process limit per execution.")] = 256,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Run directory; reuse it to "
                                                 "resume.")] = None,
) -> None:
    """Evaluate a model on a suite; resume by passing the same --out again."""
    from assay.models.builtin import BUILTIN_PREFIX, load_builtin
    from assay.runner.coding import CodingParams, run_coding
    from assay.runner.narrow import NarrowParams, default_run_dir, run_narrow
    from assay.suites.cases import load_suite
    from assay.suites.coding import load_coding_suite

    kind, path = _suite_kind(suite_path)
    try:
        suite: Any = load_coding_suite(path) if kind == "coding" else load_suite(path, split=split)
    except SuiteError as exc:
        raise fail(f"invalid suite:\n{exc}") from None
    model_name, url, key, key_source = _resolve_endpoint(model, base_url, api_key_env)
    builtin = None
    if model_name.startswith(BUILTIN_PREFIX):
        try:
            builtin = load_builtin(model_name, suite)
        except (SuiteError, ValueError) as exc:
            raise fail(str(exc)) from None
    params: Any
    runner: Any
    if kind == "coding":
        _require_sandbox(sandbox)
        params = CodingParams(
            samples=samples, temperature=0.2 if temperature is None else temperature,
            concurrency=concurrency, max_tokens=max_tokens, timeout_s=timeout,
            max_tries=max_tries, exec_timeout_s=exec_timeout, memory_mib=memory_mib, pids=pids,
            isolation=sandbox)  # type: ignore[arg-type]
        runner = run_coding
    else:
        params = NarrowParams(
            temperature=suite.config.temperature if temperature is None else temperature,
            repeats=suite.config.repeats if repeats is None else repeats,
            concurrency=concurrency, max_tokens=max_tokens or suite.config.max_tokens,
            timeout_s=timeout, max_tries=max_tries, split=split)
        runner = run_narrow
        if suite.labels_source == "cases":
            err.print(f"labels taken from the expected values in {suite.cases_path.name} "
                      f"(no labels in suite.yaml): {', '.join(suite.labels)}", highlight=False)
    run_dir = out_dir or default_run_dir(suite.name, model_name)
    result = _execute(runner, suite, params, run_dir, builtin, model_name, url, key, key_source,
                      suite_path)
    del suite, builtin  # the report is built from disk; do not hold the suite meanwhile
    rep = _write_report(run_dir)
    err.print(f"run directory: {run_dir}", highlight=False)
    if result.status == "aborted":
        raise fail(f"run stopped early: {result.message}", EXIT_INFRA)
    if rep["infra_errors"] or rep["missing_rows"]:
        err.print(f"[yellow]{rep['infra_errors']} ended in infra errors;[/] resume with: "
                  f"assay run {suite_path} --out {run_dir}", highlight=False)
        raise typer.Exit(EXIT_INFRA)


def _execute(runner: Any, suite: Any, params: Any, run_dir: Path, builtin: Any, model_name: str,
             url: str | None, key: str, key_source: str | None, suite_path: Path) -> Any:
    """Run to completion, or to Ctrl-C / SIGTERM (exit 130, rows kept, resumable)."""
    from assay.models.server import BackgroundServer
    from assay.runner.engine import RunConflict
    from assay.runner.narrow import Endpoint

    progress = TerminalProgress(err)
    old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        if builtin is not None:
            with BackgroundServer(builtin) as server:
                endpoint = Endpoint(server.base_url, model_name, "", None, builtin=True)
                return asyncio.run(runner(suite, endpoint, params, run_dir, progress))
        assert url is not None
        endpoint = Endpoint(url, model_name, key, key_source)
        return asyncio.run(runner(suite, endpoint, params, run_dir, progress))
    except RunConflict as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        progress.finish()
        err.print(f"[yellow]interrupted.[/] Answers so far are kept; resume with: "
                  f"assay run {suite_path} --out {run_dir}", highlight=False)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    finally:
        signal.signal(signal.SIGTERM, old_term)


def _write_report(run_dir: Path) -> dict[str, Any]:
    """Rebuild report.json, report.md and report.html from the records; print the tables."""
    from assay.records.manifest import read_manifest
    from assay.report.files import write_reports
    from assay.report.html import write_html

    if read_manifest(run_dir).get("kind") == "coding":
        from rich.markdown import Markdown

        from assay.report.coding import NOT_ISOLATED, build_coding_report, coding_markdown

        rep = build_coding_report(run_dir)
        md = coding_markdown(rep)
        write_reports(run_dir, rep, md)
        write_html(run_dir, rep, "coding")
        if rep["not_isolated"]:
            out.print(f"[bold red]{NOT_ISOLATED}[/]")
        out.print(Markdown(md))
        return rep
    from assay.report.narrow import build_report
    from assay.report.render_narrow import print_report, to_markdown

    rep = build_report(run_dir)
    write_reports(run_dir, rep, to_markdown(rep))
    write_html(run_dir, rep, "narrow")
    print_report(rep, out)
    return rep


@app.command()
def report(run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR")]) -> None:
    """Rebuild report.json, report.md and report.html from a run directory's rows alone."""
    if not (run_dir / "manifest.json").is_file():
        raise fail(f"{run_dir}: no manifest.json: not an assay run directory")
    _write_report(run_dir)


@app.command()
def compare(
    run_a: Annotated[Path, typer.Argument(metavar="RUN_A")],
    run_b: Annotated[Path, typer.Argument(metavar="RUN_B")],
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the comparison "
                                                  "as JSON here.")] = None,
) -> None:
    """Paired comparison of two runs of the same suite (B − A)."""
    from rich.markdown import Markdown

    from assay.records.io import atomic_write_json
    from assay.records.manifest import read_manifest
    from assay.report.compare_coding import compare_coding_markdown, compare_coding_runs
    from assay.report.compare_narrow import NotComparable, compare_markdown, compare_runs

    kinds = set()
    for d in (run_a, run_b):
        if not (d / "manifest.json").is_file():
            raise fail(f"{d}: no manifest.json: not an assay run directory")
        kinds.add(read_manifest(d).get("kind"))
    if len(kinds) != 1:
        raise fail("cannot compare a narrow-task run with a coding run")
    try:
        if kinds == {"coding"}:
            result = compare_coding_runs(run_a, run_b, seed=seed)
            text = compare_coding_markdown(result)
        else:
            result = compare_runs(run_a, run_b, seed=seed)
            text = compare_markdown(result)
    except NotComparable as exc:
        raise fail(str(exc)) from None
    if json_out:
        atomic_write_json(json_out, result)
    out.print(Markdown(text))


@app.command()
def serve(
    model: Annotated[str, typer.Argument(help="builtin/baseline or builtin/oracle")],
    suite_path: Annotated[Path, typer.Option("--suite", help="Suite the model is built from.")],
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: any free port).")] = 8000,
    host: Annotated[str, typer.Option(help="Bind address.")] = "127.0.0.1",
) -> None:
    """Serve a built-in model over /v1/chat/completions and /v1/models."""
    from assay.models.builtin import load_builtin
    from assay.models.server import serve_forever
    from assay.suites.cases import load_suite
    from assay.suites.coding import load_coding_suite

    kind, path = _suite_kind(suite_path)
    try:
        suite: Any = load_coding_suite(path) if kind == "coding" else load_suite(path)
        built = load_builtin(model, suite)
    except (SuiteError, ValueError) as exc:
        raise fail(str(exc)) from None
    def ready(bound: int) -> None:
        err.print(f"serving {model} on http://{host}:{bound}/v1 (Ctrl-C to stop)",
                  highlight=False)

    try:
        serve_forever(built, host, port, ready)
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_OK) from None


suite_app = typer.Typer(no_args_is_help=True, help="Check suites before blaming a model.")
app.add_typer(suite_app, name="suite")


@suite_app.command("check")
def suite_check(
    tasks: Annotated[Path, typer.Argument(metavar="TASKS", help="A coding tasks.jsonl.")],
    sandbox: Annotated[str, typer.Option(help="bwrap, or none (NOT ISOLATED).")] = "bwrap",
    exec_timeout: Annotated[float, typer.Option(help="Seconds per execution.")] = 30.0,
) -> None:
    """Every task's solution must pass and an empty answer must fail, through the same sandbox
    and grader as a model's answer. Exit 1 when any task is broken."""
    from rich.table import Table

    from assay.grading.suite_check import check_suite
    from assay.runner.coding import CodingParams
    from assay.suites.coding import load_coding_suite

    kind, path = _suite_kind(tasks)
    if kind != "coding":
        raise fail(f"{tasks}: not a coding tasks file")
    try:
        suite = load_coding_suite(path)
    except SuiteError as exc:
        raise fail(f"invalid suite:\n{exc}") from None
    _require_sandbox(sandbox)
    params = CodingParams(exec_timeout_s=exec_timeout, isolation=sandbox)  # type: ignore[arg-type]
    checks = check_suite(suite, params)
    table = Table(title=f"suite check: {path}", title_justify="left")
    for col in ("task", "type", "solution", "empty answer", "status"):
        table.add_column(col)
    for c in checks:
        sol = "n/a" if c.solution is None else ("pass" if c.solution.passed else
                                                f"FAIL ({c.solution.reason})")
        emp = "n/a" if c.empty is None else ("fails" if c.empty.passed is False else
                                              f"PASSES ({c.empty.reason})")
        status = {"ok": "[green]ok[/]", "broken": "[bold red]BROKEN[/]"}.get(c.status, c.status)
        table.add_row(c.task.id, c.task.type, sol, emp, status)
    out.print(table)
    broken = [c for c in checks if c.status == "broken"]
    for c in broken:
        out.print(f"[bold red]{c.task.id}[/] (line {c.task.line}): " + "; ".join(c.problems),
                  highlight=False)
    if broken:
        out.print(f"[bold red]{len(broken)} broken task(s)[/]: fix them before blaming a model.")
        raise typer.Exit(1)
    out.print(f"all {len(checks)} tasks sound")


@app.command()
def grade(
    run_dirs: Annotated[list[Path], typer.Argument(metavar="RUN_DIR...")],
    grader: Annotated[str | None, typer.Option(help="Your name, recorded with every grade.")]
    = None,
    seed: Annotated[int | None, typer.Option(help="Shuffle seed (recorded).")] = None,
    regrade: Annotated[bool, typer.Option(help="Show answers that already have a grade.")]
    = False,
    export: Annotated[Path | None, typer.Option("--export", help="Write a blind CSV.")] = None,
    import_: Annotated[Path | None, typer.Option("--import", help="Read grades from a CSV.")]
    = None,
) -> None:
    """Blind human grading of rubric answers, one at a time or through a CSV."""
    from assay.grading.rubric import GradingError, export_csv, import_csv, interactive_session

    who = grader or os.environ.get("USER") or "grader"
    try:
        if export and import_:
            raise GradingError("use --export or --import, not both")
        if export:
            summary = export_csv(run_dirs, export, seed=seed, regrade=regrade)
        elif import_:
            summary = import_csv(run_dirs, import_, grader=who)
        else:
            summary = interactive_session(run_dirs, grader=who, seed=seed, regrade=regrade,
                                          console=out)
    except GradingError as exc:
        raise fail(str(exc)) from None
    out.print(", ".join(f"{k}: {v}" for k, v in summary.items()), highlight=False)


task_app = typer.Typer(no_args_is_help=True, help="Agent task bundles: lint and check.")
app.add_typer(task_app, name="task")
trial_app = typer.Typer(no_args_is_help=True, help="Run one agent trial on one task.")
app.add_typer(trial_app, name="trial")


def _load_bundles(dirs: list[Path]) -> list[Any]:
    from assay.suites.bundle import find_bundles, load_bundle

    roots = find_bundles(dirs)
    if not roots:
        raise fail("no task bundle (a folder with task.yaml) in " + ", ".join(map(str, dirs)))
    problems: list[str] = []
    bundles = []
    for r in roots:
        try:
            bundles.append(load_bundle(r))
        except SuiteError as exc:
            problems.append(str(exc))
    if problems:
        raise fail("invalid task bundle:\n" + "\n".join(problems))
    ids = [b.id for b in bundles]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise fail(f"task ids used twice: {', '.join(dupes)}")
    return bundles


@task_app.command("lint")
def task_lint(
    dirs: Annotated[list[Path], typer.Argument(metavar="DIR...", help="Bundles, or folders "
                                               "of bundles.")],
    write_digest: Annotated[bool, typer.Option("--write-digest", help="Write the computed "
                                               "fixture_digest into task.yaml.")] = False,
) -> None:
    """Validate bundles and their starting-tree digests (exit 1 on a missing or wrong digest)."""
    import tempfile

    from rich.table import Table

    from assay.suites.bundle import set_fixture_digest, tree_digest

    bundles = _load_bundles(dirs)
    table = Table(title="task lint", title_justify="left")
    for col in ("task", "rev", "split", "family", "digest"):
        table.add_column(col)
    bad = 0
    for b in bundles:
        with tempfile.TemporaryDirectory() as tmp:
            b.export_starting_tree(Path(tmp) / "t")
            digest = tree_digest(Path(tmp) / "t")
        pinned = b.spec.initial_state.fixture_digest
        if pinned == digest:
            state = "[green]ok[/]"
        elif write_digest:
            set_fixture_digest(b.root, digest)
            state = f"[yellow]written[/] {digest[:19]}…"
        else:
            bad += 1
            state = ("[red]missing[/]" if pinned is None else "[red]MISMATCH[/]") + \
                f" (computed {digest[:19]}…; --write-digest to pin it)"
        table.add_row(b.id, str(b.spec.revision), b.spec.split, b.spec.family or "", state)
    out.print(table)
    if bad:
        raise typer.Exit(1)


@task_app.command("check")
def task_check(
    dirs: Annotated[list[Path], typer.Argument(metavar="DIR...")],
    reruns: Annotated[int, typer.Option(min=1, help="Oracle runs per task.")] = 3,
    mutants: Annotated[bool, typer.Option("--mutants", help="Also run the built-in bad "
                                          "agents: every one must be rejected.")] = False,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Where the trials go.")] = None,
    workers: Annotated[int, typer.Option(min=1, help="Trials at once.")] = 2,
) -> None:
    """nop must fail, oracle must pass every time, mutants must all be rejected."""
    from rich.table import Table

    from assay.records.io import atomic_write_json
    from assay.records.manifest import utc_now
    from assay.runner.task_check import check_tasks

    _require_sandbox("bwrap")
    bundles = _load_bundles(dirs)
    stamp = utc_now().replace(":", "").replace("-", "").replace(".", "")[:15]
    root = out_dir or Path("runs") / f"task-check-{stamp}Z"
    reports = check_tasks(bundles, root, reruns=reruns, mutants=mutants, workers=workers)
    table = Table(title=f"task check ({root})", title_justify="left")
    table.add_column("task", no_wrap=True)
    for col in ("digest", "nop", "oracle", "mutants rejected", "status"):
        table.add_column(col)
    for r in reports:
        rejected = sum(1 for v in r.mutants.values() if v.startswith("rejected"))
        mut = f"{rejected}/{len(r.mutants)}" if r.mutants else "n/a"
        style = {"ok": "green", "flaky": "yellow"}.get(r.status, "bold red")
        table.add_row(r.task_id, r.digest, r.nop or "", f"{r.oracle_accepted}/{r.oracle_runs}",
                      mut, f"[{style}]{r.status}[/]")
    out.print(table)
    for r in reports:
        for name, verdict in r.mutants.items():
            if verdict == "ACCEPTED":
                out.print(f"[bold red]GRADER DEFECT:[/] {r.task_id}: mutant {name} was "
                          "ACCEPTED", highlight=False)
        for p in r.problems:
            out.print(f"[red]{r.task_id}:[/] {p}", highlight=False)
    atomic_write_json(root / "task-check.json", [r.to_record() for r in reports])
    if any(r.status != "ok" for r in reports):
        raise typer.Exit(1)


@trial_app.command("run")
def trial_run(
    task_dir: Annotated[Path, typer.Argument(metavar="TASK_DIR")],
    agent: Annotated[str, typer.Option(help="oracle, nop, command:<shell command> or "
                                       "mutant:<name>")],
    out_dir: Annotated[Path, typer.Option("--out", help="The trial directory.")],
) -> None:
    """Prepare, run the agent in the sandbox, freeze, verify; print the grade. Exit 0 whatever
    the verdict; 3 when the trial could not be run or graded."""
    from assay.agents import parse_agent
    from assay.runner.trial import run_trial

    [bundle] = _load_bundles([task_dir])[:1]
    try:
        the_agent = parse_agent(agent)
    except ValueError as exc:
        raise fail(str(exc)) from None
    _require_sandbox("bwrap")
    try:
        result = run_trial(bundle, the_agent, out_dir)
    except FileExistsError as exc:
        raise fail(str(exc)) from None
    if result.grade is None:
        raise fail(f"trial not run: {result.record.get('error')}", EXIT_INFRA)
    _print_grade(result.grade)
    if result.grade["validity"]["status"] != "valid":
        raise typer.Exit(EXIT_INFRA)


def _print_grade(grade: dict[str, Any]) -> None:
    verdict = "[bold green]ACCEPTED[/]" if grade["accepted"] else "[bold red]REJECTED[/]"
    out.print(f"{grade['trial_id']}: {verdict}"
              + (f" ({grade['failure_code']})" if grade["failure_code"] else ""),
              highlight=False)
    checks = ", ".join(f"{k} {v}" for k, v in grade["checks"].items())
    out.print(f"  checks: {checks}; execution {grade['execution'].get('status')}; validity "
              f"{grade['validity']['status']}", highlight=False)


@app.command()
def regrade(
    trial_dir: Annotated[Path, typer.Argument(metavar="TRIAL_DIR")],
    verifier_revision: Annotated[str, typer.Option(help="Name of the new grade revision.")],
    task_dir: Annotated[Path | None, typer.Option("--task", help="The bundle, if it moved.")]
    = None,
) -> None:
    """Grade the same frozen artifact again, into grades/<NEW>.json beside the old grades."""
    import re

    from assay.runner.trial import TrialRefused, read_trial
    from assay.runner.trial import regrade as do_regrade

    if not (trial_dir / "trial.json").is_file():
        raise fail(f"{trial_dir}: no trial.json: not a trial directory")
    if not re.fullmatch(r"[A-Za-z0-9._-]+", verifier_revision):
        raise fail("--verifier-revision: letters, digits, '.', '_' and '-' only")
    record = read_trial(trial_dir)
    [bundle] = _load_bundles([task_dir or Path(record["task"]["path"])])[:1]
    _require_sandbox("bwrap")
    try:
        grade = do_regrade(trial_dir, bundle, verifier_revision)
    except (FileExistsError, TrialRefused) as exc:
        raise fail(str(exc)) from None
    _print_grade(grade)
    if grade["validity"]["status"] != "valid":
        raise typer.Exit(EXIT_INFRA)


def main() -> None:
    try:
        app()
    except BrokenPipeError:  # e.g. `assay report X | head`
        sys.stderr.close()
        raise SystemExit(EXIT_OK) from None
