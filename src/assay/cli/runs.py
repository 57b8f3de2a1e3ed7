"""Commands over model runs: run, report, compare, serve, suite check."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Annotated, Any

import typer

from assay.cli.app import (
    _raise_interrupt,
    _require_sandbox,
    _resolve_endpoint,
    _suite_kind,
    app,
    err,
    fail,
    out,
)
from assay.cli.progress import TerminalProgress
from assay.errors import (
    EXIT_INFRA,
    EXIT_INTERRUPTED,
    EXIT_OK,
)
from assay.suites.errors import SuiteError


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
        from assay.runner.coding import CodingParams, run_coding  # the sandbox stack: coding only

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


def _write_report(run_dir: Path, grade_revision: str | None = None) -> dict[str, Any]:
    """Rebuild report.json, report.md and report.html from the records; print the tables.
    Coding runs use ``grade_revision``, else their newest grade revision."""
    from assay.records.manifest import read_manifest
    from assay.report.files import write_reports
    from assay.report.html import write_html

    if read_manifest(run_dir).get("kind") == "coding":
        from rich.markdown import Markdown

        from assay.report.coding import NOT_ISOLATED, build_coding_report, coding_markdown

        rep = build_coding_report(run_dir, grade_revision)
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
def report(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR")],
    grade_revision: Annotated[str | None, typer.Option(
        help="Coding runs: the grade revision to report (default: the newest).")] = None,
) -> None:
    """Rebuild report.json, report.md and report.html from a run directory's rows alone."""
    if not (run_dir / "manifest.json").is_file():
        raise fail(f"{run_dir}: no manifest.json: not an assay run directory")
    _write_report(run_dir, grade_revision)


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
