"""Commands over model runs: run, report, compare, serve, suite check.

Parse, call :mod:`assay.api`, print. The defaults shown by ``--help`` are the library's own
(:mod:`assay.api.options`), so ``assay run`` and ``assay.run`` make the same run.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from assay import api
from assay.api.options import CODING_DEFAULTS, SHARED_DEFAULTS, Endpoint
from assay.api.runs import suite_kind
from assay.cli.app import (
    _raise_interrupt,
    _require_sandbox,
    app,
    err,
    fail,
    out,
)
from assay.cli.progress import TerminalProgress
from assay.errors import (
    EXIT_BELOW_BAR,
    EXIT_CHECK_FAILED,
    EXIT_INFRA,
    EXIT_INTERRUPTED,
    EXIT_OK,
    InputError,
    RunConflict,
    SuiteError,
    TransportError,
)


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
        help="Narrow: default from suite.yaml, else 0. Coding: default "
        f"{CODING_DEFAULTS['temperature']}.")] = None,
    repeats: Annotated[int | None, typer.Option(min=1, help="Narrow: ask every case N times.")]
    = None,
    samples: Annotated[int, typer.Option(min=1, help="Coding: answers per task.")]
    = CODING_DEFAULTS["samples"],
    concurrency: Annotated[int, typer.Option("-j", "--concurrency", min=1, help="Requests in "
                                             "flight at once.")]
    = SHARED_DEFAULTS["concurrency"],
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Longest answer, in tokens, "
                                                   "asked of the endpoint (default: the "
                                                   "suite's, else none).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds per request.")]
    = SHARED_DEFAULTS["timeout"],
    max_tries: Annotated[int, typer.Option(min=1, help="Transport tries per request.")]
    = SHARED_DEFAULTS["max_tries"],
    split: Annotated[str | None, typer.Option(help="Narrow: a split named in suite.yaml.")]
    = None,
    tier: Annotated[str | None, typer.Option(help="Narrow: run only this tier's cases "
                                             "(tiers: in suite.yaml), e.g. smoke.")] = None,
    sandbox: Annotated[str, typer.Option(help="Coding: bwrap, or none (NOT ISOLATED, only "
                                         "when asked for).")] = CODING_DEFAULTS["sandbox"],
    exec_timeout: Annotated[float, typer.Option(help="Coding: seconds per execution.")]
    = CODING_DEFAULTS["exec_timeout"],
    memory_mib: Annotated[int, typer.Option(help="Coding: memory limit per execution.")]
    = CODING_DEFAULTS["memory_mib"],
    pids: Annotated[int, typer.Option(help="Coding: process limit per execution.")]
    = CODING_DEFAULTS["pids"],
    out_dir: Annotated[Path | None, typer.Option("--out", help="Run directory; reuse it to "
                                                 "resume.")] = None,
    out_root: Annotated[Path | None, typer.Option(
        "--out-root", metavar="DIR", help="Make a new run directory under DIR named by suite, "
        "model and UTC time (never an existing one): for cron and CI; `assay history DIR` "
        "finds them.")] = None,
    junit: Annotated[Path | None, typer.Option("--junit", metavar="FILE", help="Also write "
                                               "JUnit XML: a test case per case or task.")]
    = None,
    fail_under: Annotated[float | None, typer.Option(
        "--fail-under", min=0, max=1, help="Exit 1 when narrow accuracy / coding pass@1 is "
        "below this.")] = None,
    fail_under_ci: Annotated[bool, typer.Option(
        "--fail-under-ci", help="With --fail-under: use the 95% interval's lower bound.")]
    = False,
) -> None:
    """Evaluate a model on a suite; resume by passing the same --out again. Exit 0 done,
    1 below --fail-under, 2 bad input, 3 infra errors (resume), 130 interrupted."""
    flags = {"temperature": temperature, "repeats": repeats, "samples": samples,
             "concurrency": concurrency, "max_tokens": max_tokens, "timeout": timeout,
             "max_tries": max_tries, "split": split, "sandbox": sandbox,
             "exec_timeout": exec_timeout, "memory_mib": memory_mib, "pids": pids}
    try:
        kind, _ = suite_kind(suite_path)
    except SuiteError as exc:
        raise fail(str(exc)) from None
    # One set of flags serves both kinds of suite; each takes its own and ignores the rest.
    options = {k: v for k, v in flags.items() if k in api.RUN_OPTIONS[kind]}
    try:
        suite = api.load_suite(suite_path, split=split if "split" in options else None,
                               tier=tier)
    except SuiteError as exc:
        raise fail(f"invalid suite:\n{exc}") from None
    except InputError as exc:
        raise fail(str(exc)) from None
    model_name, endpoint = _endpoint(model, base_url, api_key_env)
    url, key_source = endpoint.base_url, endpoint.api_key_env
    if kind == "coding":
        _require_sandbox(sandbox)
    claimed = None
    try:
        if out_root is not None:
            claimed = _claim(out_root, out_dir, suite.name, model_name)
        plan = api.prepare(suite, model_name, out=claimed or out_dir, endpoint=endpoint,
                           **options)
    except InputError as exc:
        if claimed is not None:
            from assay.api.records import release_unused

            release_unused(claimed)
        raise fail(str(exc)) from None
    for note in plan.notes:
        err.print(note, highlight=False)
    run_dir = plan.run_dir
    resume = resume_command(suite_path, run_dir, model_name, url, key_source, flags)
    try:
        result = _execute(plan, resume)
    except TransportError as exc:  # nothing answers at the endpoint: nothing asked or written
        if claimed is not None:
            from assay.api.records import release_unused

            release_unused(claimed)
        raise fail(f"{escape(str(exc))}\nno case was asked and nothing was written",
                   EXIT_INFRA) from None
    del plan, suite  # the report is built from disk; do not hold the suite meanwhile
    if result.status == "aborted":  # the cause first, before any table
        err.print(f"[bold red]assay:[/] run stopped early: {escape(result.message or '')}",
                  highlight=False, soft_wrap=True)
    if _answered(result.report):
        _print_report(result.report)
    else:  # a report of zeros would read as a measurement
        err.print("no answer was recorded, so there is no report", highlight=False)
    err.print(f"run directory: {run_dir}", highlight=False, soft_wrap=True)
    checked = _ci_outputs(run_dir, result.report, junit, fail_under, fail_under_ci)
    if result.status == "aborted" or result.infra_errors or result.missing_rows:
        left = _left_to_do(result)
        err.print(f"[yellow]{left};[/] resume with: {escape(resume)}", highlight=False,
                  soft_wrap=True)
        raise typer.Exit(EXIT_INFRA)
    _gate_exit(checked)


def _answered(rep: dict[str, Any]) -> int:
    """Units of work with an answer in the report: neither unasked nor an infra error."""
    return int(rep["expected_rows"]) - int(rep["missing_rows"]) - int(rep["infra_errors"])


def _left_to_do(result: api.RunResult) -> str:
    """What a resume would ask again, counted as the report counts it."""
    parts = []
    if result.infra_errors:
        parts.append(f"{result.infra_errors} ended in infra errors")
    if result.missing_rows:
        parts.append(f"{result.missing_rows} not asked yet")
    return " and ".join(parts) or "the run stopped early"


def _endpoint(model: str | None, base_url: str | None,
              api_key_env: str | None) -> tuple[str, Endpoint]:
    """The model (``--model``, else ``MODEL_NAME``) and its endpoint, resolved by the
    library's one rule with the options spelt as flags."""
    import os

    from assay.api.models import BUILTIN_PREFIX
    from assay.api.options import cli_option, resolve_endpoint

    model = model or os.environ.get("MODEL_NAME")
    if not model:
        raise fail("no model: pass --model or set MODEL_NAME (or use --model builtin/baseline)")
    try:
        return model, resolve_endpoint(model, {"base_url": base_url, "api_key_env": api_key_env},
                                       builtin=model.startswith(BUILTIN_PREFIX),
                                       spell=cli_option)
    except InputError as exc:
        raise fail(escape(str(exc))) from None


def _claim(out_root: Path, out_dir: Path | None, suite: str, model: str) -> Path:
    """A new run directory under ``--out-root`` (``records/run_dirs.py``)."""
    from assay.api.records import claim_run_dir

    if out_dir is not None:
        raise InputError("--out and --out-root: give one (--out resumes a run, --out-root "
                         "always starts a new one)")
    return claim_run_dir(out_root, suite, model)


def _ci_outputs(run_dir: Path, rep: dict[str, Any], junit: Path | None,
                fail_under: float | None, use_ci: bool) -> Any:
    """JUnit XML, the GitHub step summary (when GITHUB_STEP_SUMMARY is set) and the gate."""
    from assay.api.ci import append_run_step_summary, gate, write_run_junit

    if use_ci and fail_under is None:
        raise fail("--fail-under-ci needs --fail-under X")
    checked = None if fail_under is None else gate(rep, fail_under, use_ci=use_ci)
    try:
        if junit is not None:
            write_run_junit(junit, run_dir, rep)
        append_run_step_summary(rep, checked)
    except OSError as exc:
        raise fail(f"CI output cannot be written: {exc}") from None
    return checked


def _gate_exit(checked: Any) -> None:
    if checked is None:
        return
    if checked.passed:
        err.print(checked.message, highlight=False)
        return
    raise fail(checked.message, EXIT_BELOW_BAR)


def resume_command(suite_path: Path, run_dir: Path, model: str, base_url: str | None,
                   key_source: str | None, flags: dict[str, Any]) -> str:
    """The command that resumes this run as printed: the same suite, every run option the user
    set (a resume with another parameter is refused), and the model and endpoint spelled out
    even when they came from the environment, which a later shell may not have."""
    import inspect
    import shlex

    from assay.api.models import redact_url

    parts = ["assay", "run", str(suite_path), "--model", model]
    if base_url:
        parts += ["--base-url", redact_url(base_url)]
    if key_source and key_source != "MODEL_API_KEY":
        parts += ["--api-key-env", key_source]
    defaults = inspect.signature(run).parameters
    for name, value in flags.items():
        if value is None or value == defaults[name].default:
            continue
        parts += ["--" + name.replace("_", "-"), str(value)]
    return shlex.join([*parts, "--out", str(run_dir)])


def _execute(plan: api.RunPlan, resume: str) -> api.RunResult:
    """Run to completion, or to Ctrl-C / SIGTERM (exit 130, rows kept, resumable)."""
    progress = TerminalProgress(err)
    old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return api.execute(plan, progress)
    except RunConflict as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        progress.finish()
        err.print(f"[yellow]interrupted.[/] Answers so far are kept; resume with: {escape(resume)}",
                  highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    finally:
        signal.signal(signal.SIGTERM, old_term)


def _is_coding(document: dict[str, Any]) -> bool:
    """A report or comparison says its kind in its schema id."""
    return str(document.get("schema", "")).startswith("assay.coding.")


def _print_report(rep: dict[str, Any]) -> None:
    """The report's tables on stdout (the files are written by the library)."""
    if _is_coding(rep):
        from rich.markdown import Markdown

        from assay.api.render import NOT_ISOLATED, coding_markdown

        if rep["not_isolated"]:
            out.print(f"[bold red]{NOT_ISOLATED}[/]")
        out.print(Markdown(coding_markdown(rep, details=False)))
        return
    from assay.api.render import print_narrow_report

    print_narrow_report(rep, out)


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR")],
    grade_revision: Annotated[str | None, typer.Option(
        help="Coding runs: the grade revision to report (default: the newest).")] = None,
    rubric_round: Annotated[str | None, typer.Option(
        "--rubric-round", metavar="ROUND", help="Coding runs: report the human rubric grades "
        "as of this grading round (a name under RUN_DIR/grades/rubric/; default: the latest).")]
    = None,
    junit: Annotated[Path | None, typer.Option("--junit", metavar="FILE", help="Also write "
                                               "JUnit XML: a test case per case or task.")]
    = None,
    fail_under: Annotated[float | None, typer.Option(
        "--fail-under", min=0, max=1, help="Exit 1 when narrow accuracy / coding pass@1 is "
        "below this.")] = None,
    fail_under_ci: Annotated[bool, typer.Option(
        "--fail-under-ci", help="With --fail-under: use the 95% interval's lower bound.")]
    = False,
    inspect_log: Annotated[Path | None, typer.Option(
        "--inspect-log", metavar="FILE", help="Also write the run as an Inspect eval log "
        "(FILE.eval or FILE.json; `inspect view` opens it): needs assay[inspect].")] = None,
) -> None:
    """Rebuild report.json, report.md and report.html from a run directory's rows alone."""
    try:
        rep = api.rebuild_report(run_dir, grade_revision=grade_revision,
                                 rubric_round=rubric_round)
    except InputError as exc:
        raise fail(str(exc)) from None
    _print_report(rep)
    if inspect_log is not None:
        from rich.markup import escape

        from assay.api.exports import write_inspect_log

        try:
            done = write_inspect_log(run_dir, inspect_log, grade_revision)
        except InputError as exc:
            raise fail(escape(str(exc))) from None  # "assay[inspect]" is not markup
        value = "n/a" if done["value"] is None else f"{done['value']:.4f}"
        out.print(f"Inspect log: {inspect_log} ({done['samples']} samples, "
                  f"{done['metric']} {value})", highlight=False)
    _gate_exit(_ci_outputs(run_dir, rep, junit, fail_under, fail_under_ci))


@app.command()
def compare(
    run_a: Annotated[Path, typer.Argument(metavar="RUN_A")],
    run_b: Annotated[Path, typer.Argument(metavar="RUN_B")],
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the comparison "
                                                  "as JSON here.")] = None,
    rubric_round: Annotated[str | None, typer.Option(
        "--rubric-round", metavar="ROUND", help="Coding runs: compare the human rubric grades "
        "as of this grading round (default: each run's latest).")] = None,
) -> None:
    """Paired comparison of two runs of the same suite (B − A)."""
    from rich.markdown import Markdown

    from assay.api.records import write_json
    from assay.api.render import compare_coding_markdown, compare_markdown

    try:
        result = api.compare(run_a, run_b, seed=seed, rubric_round=rubric_round)
    except InputError as exc:
        raise fail(str(exc)) from None
    text = compare_coding_markdown(result) if _is_coding(result) else compare_markdown(result)
    if json_out:
        write_json(json_out, result)
    out.print(Markdown(text))


@app.command()
def serve(
    model: Annotated[str, typer.Argument(help="builtin/baseline or builtin/oracle")],
    suite_path: Annotated[Path, typer.Option("--suite", help="Suite the model is built from.")],
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: any free port).")] = 8000,
    host: Annotated[str, typer.Option(help="Bind address.")] = "127.0.0.1",
) -> None:
    """Serve a built-in model over /v1/chat/completions and /v1/models."""
    from assay.api.models import serve_builtin

    def ready(bound: int) -> None:
        err.print(f"serving {model} on http://{host}:{bound}/v1 (Ctrl-C to stop)",
                  highlight=False)

    try:
        serve_builtin(model, suite_path, host, port, ready)
    except (SuiteError, ValueError) as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_OK) from None


suite_app = typer.Typer(no_args_is_help=True, help="Check suites before blaming a model.")
app.add_typer(suite_app, name="suite")


@suite_app.command("check")
def suite_check(
    tasks: Annotated[Path, typer.Argument(metavar="SUITE", help="A narrow suite directory, or "
                                          "a coding tasks.jsonl.")],
    sandbox: Annotated[str, typer.Option(help="Coding: bwrap, or none (NOT ISOLATED).")]
    = CODING_DEFAULTS["sandbox"],
    exec_timeout: Annotated[float, typer.Option(help="Coding: seconds per execution.")]
    = CODING_DEFAULTS["exec_timeout"],
) -> None:
    """Check a suite without a model. Exit 1 when anything is broken.

    A narrow suite: the prompt names the reply the scorer reads, every expected value given
    back in that reply reads and scores right, an empty reply is invalid, every label is
    expected. A coding suite: every task's solution passes and an empty answer fails, through
    the same sandbox and grader as a model's answer."""
    from rich.table import Table

    try:
        kind, path = suite_kind(tasks)
        suite = api.load_suite(path)
    except SuiteError as exc:
        raise fail(f"invalid suite:\n{exc}") from None
    if kind == "narrow":
        _narrow_check(suite)
        return
    _require_sandbox(sandbox)
    checks = api.check_suite(suite, sandbox=sandbox, exec_timeout=exec_timeout)
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
        raise typer.Exit(EXIT_CHECK_FAILED)
    out.print(f"all {len(checks)} tasks sound")


def _narrow_check(suite: Any) -> None:
    """The narrow suite's findings, one a line (a finding never wraps inside a name)."""
    check = api.check_narrow_suite(suite)
    out.print(f"suite check: {escape(str(suite.root))} ({len(suite.cases)} cases, scorer "
              f"{suite.scorer.type})", highlight=False)
    out.print(f"reply the scorer reads: {escape(check.shape)}; e.g. {escape(check.example)}",
              highlight=False)
    for f in check.findings:
        mark = "[green]ok[/]     " if f.ok else "[bold red]BROKEN[/] "
        out.print(f"{mark} {escape(f.name)}: {escape(f.detail)}", highlight=False)
    if not check.sound:
        out.print("[bold red]the suite is broken[/]: fix it before blaming a model.")
        raise typer.Exit(EXIT_CHECK_FAILED)
    out.print("the suite is sound")
