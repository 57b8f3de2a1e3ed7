"""Commands over experiments (``assay exp ...``): many trials of several arms, resumable.

``exp status`` only ever reads ``state.sqlite`` (WAL lets it read while a runner writes, and a
crashed run's file reads the same), so it is safe to run at any moment, from anywhere. Its
output is written line by line rather than through rich: a run of 100,000 trials lists tens of
thousands of lines, and ``--json`` streams one trial at a time so memory stays flat.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer

from assay.api.options import MAX_CONCURRENCY, PLAN_TRIALS_DEFAULT_MAX
from assay.cli.app import app, fail
from assay.cli.exp_progress import LineProgress
from assay.errors import RecordError

exp_app = typer.Typer(no_args_is_help=True, help="Experiments: every task x arm x repetition, "
                      "resumable after a crash.")
app.add_typer(exp_app, name="exp")


@exp_app.command("status")
def exp_status(
    run_dir: Annotated[Path, typer.Argument(metavar="DIR", help="The experiment's --out "
                                            "directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object listing every "
                                          "trial.")] = False,
    show_all: Annotated[bool, typer.Option("--all", help="A line for every trial, done ones "
                                           "too.")] = False,
) -> None:
    """Counts by state and failure code, then a line per trial not yet done. Read-only: works
    while the run is in progress and after a crash."""
    from assay.api.experiment_run import open_state

    try:
        db = open_state(run_dir)
    except RecordError as exc:
        raise fail(str(exc)) from None
    with db:
        if as_json:
            _write_json(db, sys.stdout)
        else:
            _write_text(db, sys.stdout, show_all=show_all)


#: A trial's state in ``exp status`` when one of its attempt directories is gone: neither
#: pending nor done, whatever its row says (``StateDB.evidence_gaps``).
EVIDENCE_GAP = "evidence_gap"


def _counts_json(db: Any, gaps: list[Any]) -> dict[str, Any]:
    c = db.counts()
    return {"planned": c.planned, "trials": c.trials, "failure_codes": c.failures,
            "failure_codes_by_arm": db.failures_by_arm(), "attempts": c.attempts,
            "evidence_gaps": len(gaps)}


def _gap_note(gaps: list[Any]) -> str:
    shown = ", ".join(str(a.dir) for a in gaps[:10]) + (", ..." if len(gaps) > 10 else "")
    dirs = "attempt directory is" if len(gaps) == 1 else "attempt directories are"
    return (f"evidence gaps: {len(gaps)} {dirs} gone ({shown}): their records, ledgers and "
            "grades are lost; restore them from a copy of the run directory")


def _write_json(db: Any, fh: TextIO) -> None:
    gaps = db.evidence_gaps()
    lost = {(a.trial, a.label) for a in gaps}
    head = {"experiment": db.meta.get("name"), "counts": _counts_json(db, gaps),
            "evidence_gaps": [str(a.dir) for a in gaps]}
    fh.write(json.dumps(head)[:-1] + ', "trials": [')
    dumps = json.JSONEncoder(separators=(", ", ": ")).encode
    sep = "\n"
    for t in db.trials():
        missing = [a.label for a in t.attempts if (t.key, a.label) in lost] if lost else []
        fh.write(sep + dumps({
            "task": t.key.task, "arm": t.key.arm, "rep": t.key.rep,
            "state": EVIDENCE_GAP if missing else t.state,
            "attempts": [{"attempt": a.label, "state": a.state, "reason": a.reason,
                          **({"evidence": "missing"} if a.label in missing else {})}
                         for a in t.attempts],
            "accepted": t.accepted, "failure_code": t.failure_code}))
        sep = ",\n"
    fh.write("\n]}\n")


def _line(counts: dict[str, int]) -> str:
    return " · ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])) \
        or "none"


def _write_text(db: Any, fh: TextIO, *, show_all: bool) -> None:
    c = db.counts()
    gaps = db.evidence_gaps()
    lost = {(a.trial, a.label) for a in gaps}
    name = db.meta.get("name") or "(unnamed)"
    left = c.planned - sum(c.trials.get(s, 0) for s in ("done", "infra_error"))
    hit = len({a.trial for a in gaps})
    fh.write(f"experiment {name}: {c.planned} trials planned, {left} not done"
             + (f", {hit} with evidence lost (not complete)" if hit else "") + "\n"
             f"trials:   {_line(c.trials)}\n"
             f"failures: {_line(c.failures)}\n"
             + "".join(f"  {arm}: {_line(codes)}\n"
                       for arm, codes in db.failures_by_arm().items())
             + f"attempts: {_line(c.attempts)}\n"
             + (_gap_note(gaps) + "\n" if gaps else ""))
    looks = db.looks()  # a sequential bar's: where the run stands (never the interim Δ)
    if looks:
        stop = next((lk for lk in looks if lk["decision"] in ("accept", "reject")), None)
        fh.write(f"looks:    {len(looks)} taken" + ("" if stop is None else
                 f"; look {stop['index'] + 1} decided {stop['decision']}: the trials of the "
                 f"tasks after its {stop['tasks']} are not run (exp run --run-to-end runs "
                 "them on purpose)") + "\n")
    # a trial with a lost attempt is listed even when its row says done
    rows = db.trials(unfinished_only=not show_all and not gaps)
    first = True
    for t in rows:
        missing = {a.label for a in t.attempts if (t.key, a.label) in lost} if lost else set()
        if not show_all and not missing and t.state in ("done", "infra_error"):
            continue
        if first:
            fh.write("\ntask\tarm\trep\tstate\tattempts\n")
            first = False
        attempts = ", ".join(f"{a.label} {a.state}" + (f" ({a.reason})" if a.reason else "")
                             + (" (directory gone)" if a.label in missing else "")
                             for a in t.attempts) or "-"
        extra = ""
        if missing:
            fh.write(f"{t.key.task}\t{t.key.arm}\t{t.key.rep}\t{EVIDENCE_GAP}\t{attempts}\n")
            continue
        if t.state == "done":
            extra = "\taccepted" if t.accepted else f"\t{t.failure_code or 'rejected'}"
        elif t.failure_code:
            extra = f"\t{t.failure_code}"
        fh.write(f"{t.key.task}\t{t.key.arm}\t{t.key.rep}\t{t.state}\t{attempts}{extra}\n")


def _exp_out_dir(experiment: Path, out_dir: Path | None, out_root: Path | None,
                 tier: str | None = None) -> Path:
    """``--out`` as given, or a new directory claimed under ``--out-root``
    (``records/run_dirs.py``): ``<experiment>-<arm models>-<UTC time>``."""
    if (out_dir is None) == (out_root is None):
        raise fail("give --out DIR (a run directory; the same one resumes) or --out-root DIR "
                   "(a new run directory under it), not both")
    if out_dir is not None:
        return out_dir
    from assay.api.experiment_run import claim_experiment_dir
    from assay.errors import InputError

    assert out_root is not None  # one of the two, checked just above
    try:
        return claim_experiment_dir(experiment, out_root, tier)
    except InputError as exc:
        raise fail(str(exc)) from None


@exp_app.command("run")
def exp_run(
    experiment: Annotated[Path, typer.Argument(metavar="EXPERIMENT.yaml")],
    out_dir: Annotated[Path | None, typer.Option("--out", help="The run directory; the same "
                                                 "command resumes it.")] = None,
    out_root: Annotated[Path | None, typer.Option(
        "--out-root", metavar="DIR", help="Instead of --out: a new run directory under DIR named "
        "by experiment, models and UTC time (never an existing one), for cron and CI.")]
    = None,
    jobs: Annotated[int | None, typer.Option("-j", "--jobs", min=1, max=MAX_CONCURRENCY,
                                             help="Trials at once (overrides concurrency).")]
    = None,
    tier: Annotated[str | None, typer.Option(
        "--tier", help="Run only this tier of the file's tiers: (its selection and "
        "repetitions), e.g. smoke for a per-PR gate.")] = None,
    grace: Annotated[float, typer.Option(help="Seconds between the watchdog's SIGTERM and its "
                                         "SIGKILL at an agent's wall budget.")] = 10.0,
    total_cost_usd: Annotated[float | None, typer.Option(
        "--total-cost-usd", min=0, help="Override the file's whole-run spending cap (to finish "
        "a run it stopped; recorded in the manifest's sessions).")] = None,
    holdout_reuse: Annotated[bool, typer.Option(
        "--holdout-reuse", help="Look at a holdout split past its allowance (max_looks in "
        ".assay/holdout.yaml beside the bundles); the set is then reported as reused.")]
    = False,
    executor: Annotated[str, typer.Option(
        "--executor", help="Where attempts run: local (this machine, the default) or ray "
        "(Ray tasks on a cluster; pip install 'assay\\[ray]'; docs/scaling.md).")] = "local",
    ray_address: Annotated[str | None, typer.Option(
        "--ray-address", help="With --executor ray: the cluster to join (auto, HOST:PORT or "
        "ray://HOST:PORT; default auto).")] = None,
    gateway_host: Annotated[str | None, typer.Option(
        "--gateway-host", help="The address the model gateway listens at (default 127.0.0.1; "
        "with --executor ray the driver's node address, which the workers must reach).")]
    = None,
    ray_transfer: Annotated[str | None, typer.Option(
        "--ray-transfer", help="With --executor ray: how the workers' files reach the run "
        "directory: shared_fs (written there over a shared file system, the default), "
        "object_store (shipped through Ray) or auto (shared_fs where a worker sees the run "
        "directory, else object_store).")] = None,
    verify_jobs: Annotated[int | None, typer.Option(
        "--verify-jobs", min=0, help="Local attempts verifying at once (default: the usable "
        "cores, at most -j). An attempt frees its -j slot once its artifact is frozen; 0: no "
        "gate, an attempt keeps its slot until it is graded.")]
    = None,
    allow_large_plan: Annotated[bool, typer.Option(
        "--allow-large-plan", help=f"Run a plan of more than {PLAN_TRIALS_DEFAULT_MAX:,} "
        "trials (tasks x arms x repetitions); without it such a plan is refused as a likely "
        "typo.")] = False,
    run_to_end: Annotated[bool, typer.Option(
        "--run-to-end", help="A run a sequential bar's look stopped: run its remaining trials "
        "on purpose (recorded; the verdict is then the fixed design's).")] = False,
    show_interim: Annotated[bool, typer.Option(
        "--show-interim", help="Show each look's Δ and interval as it is taken (recorded in "
        "the manifest: a person who saw them may be swayed).")] = False,
) -> None:
    """Run every trial of an experiment (resume: the same command), then its pairwise check if
    it has one. Exit 0 complete (or stopped by a sequential bar's look), 2 bad input (or an
    arm whose agent could not start in its first attempts, or an attempt directory gone:
    evidence lost), 3 finished with infra errors, stopped by the total budget or without its
    pairwise check, 130 interrupted."""
    import signal

    from rich.markup import escape

    from assay.api.experiment_run import ExperimentOptions, run_experiment
    from assay.cli.app import _raise_interrupt, _require_sandbox, err
    from assay.errors import EXIT_BAD_INPUT, EXIT_INFRA, EXIT_INTERRUPTED, InputError

    out_dir = _exp_out_dir(experiment, out_dir, out_root, tier)
    _require_sandbox("bwrap")
    progress = LineProgress(out_dir=out_dir)
    options = ExperimentOptions(jobs=jobs, grace_seconds=grace, total_cost_usd=total_cost_usd,
                                holdout_reuse=holdout_reuse, executor=executor,
                                ray_address=ray_address, gateway_host=gateway_host,
                                ray_transfer=ray_transfer, verify_jobs=verify_jobs,
                                allow_large_plan=allow_large_plan, tier=tier,
                                run_to_end=run_to_end, show_interim=show_interim)
    old = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        # the trials, the pairwise check (never raises for the judge's trouble; an interrupt
        # stops it like the trials, the same command resumes both) and the report
        result = run_experiment(experiment, out_dir, options, progress=progress)
    except InputError as exc:  # escaped: "pip install 'assay[ray]'" is not markup
        raise fail(escape(str(exc))) from None
    except KeyboardInterrupt:  # the display has said what it held (Progress.finish)
        err.print(f"interrupted; resume with: assay exp run {experiment} --out {out_dir}",
                  highlight=False)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    finally:
        signal.signal(signal.SIGTERM, old)
    counts = ", ".join(f"{k}: {v}" for k, v in sorted(result.counts.items()))
    spent = f"spent ${result.spent_usd:.4f}" + ("" if result.spent_complete else " (lower bound)")
    if result.unpriced_models:  # unknown, never $0.0000
        unpriced = ", ".join(f"no price for {m}" for m in result.unpriced_models)
        spent = (f"spent: {unpriced}" if not result.spent_usd
                 else f"{spent} on priced calls; {unpriced}")
    err.print(f"trials: {counts}; {spent}; report: {result.out_dir / 'report.html'} (the page "
              "to open; report.md beside it)", highlight=False)
    if result.pairwise_error is not None:
        # after the trials' own line: they are done and reported; the check is what is missing
        err.print(escape(f"pairwise check: not done: {result.pairwise_error}; the trials are "
                         f"recorded, resume with: assay exp run {experiment} --out {out_dir}"),
                  highlight=False)
    # a broken arm, or a damaged run directory: bad input, not bad luck
    if result.status in ("agent_start_failed", "evidence_gaps"):
        raise fail(escape(str(result.message)), EXIT_BAD_INPUT)
    if result.status == "budget_stopped":
        raise fail(str(result.message) + f"; resume with: assay exp run {experiment} --out "
                   f"{out_dir}", EXIT_INFRA)
    if result.status == "stopped_at_look" and result.pairwise_error is None:
        err.print(escape(str(result.message)), highlight=False)  # stopped by design: exit 0
        return
    if not result.complete:
        raise typer.Exit(EXIT_INFRA)


@exp_app.command("report")
def exp_report(
    run_dir: Annotated[Path, typer.Argument(metavar="SOURCE", help="An experiment run "
                                            "directory, or a Harbor job directory.")],
    out_dir: Annotated[Path | None, typer.Option("--out", help="Where to write the report "
                                                 "(default: the run directory; required for "
                                                 "a Harbor job, which is never written "
                                                 "into).")] = None,
    junit: Annotated[Path | None, typer.Option("--junit", metavar="FILE", help="Also write "
                                               "JUnit XML: one test case per task and arm.")]
    = None,
) -> None:
    """The verdict, the A/B comparison, per-arm counts and per-trial rows (report.json,
    report.md, report.html, outcomes.jsonl) from the records on disk; with GITHUB_STEP_SUMMARY
    set, the verdict and headline table are appended there."""
    from rich.markdown import Markdown

    from assay.api.experiments import experiment_report
    from assay.api.render import experiment_markdown
    from assay.cli.app import out
    from assay.errors import AssayError

    if not run_dir.is_dir():
        raise fail(f"{run_dir}: not a directory (give an experiment run directory or a Harbor "
                   "job directory; for an outcomes file use `assay exp compare`)")
    from assay.cli.check_progress import step_writer

    try:
        rep = experiment_report(run_dir, out=out_dir, progress=step_writer("exp report"))
    except (KeyError, AssayError) as exc:
        raise fail(f"{run_dir}: {exc}") from None
    _ci_outputs(rep, junit)
    out.print(Markdown(experiment_markdown(rep)))


def _ci_outputs(rep: dict[str, Any], junit: Path | None) -> None:
    """JUnit XML for CI systems, and the GitHub step summary when the variable is set."""
    from assay.api.ci import append_step_summary, write_experiment_junit

    if junit is not None:
        try:
            write_experiment_junit(junit, rep)
        except OSError as exc:
            raise fail(f"--junit {junit}: cannot be written: {exc}") from None
    try:
        append_step_summary(rep)
    except OSError as exc:
        raise fail(f"GITHUB_STEP_SUMMARY: cannot be appended to: {exc}") from None
