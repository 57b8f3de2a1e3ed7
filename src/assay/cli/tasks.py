"""Commands over agent task bundles and trials: task lint, task check, trial run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from assay.cli.app import (
    _require_sandbox,
    app,
    fail,
    out,
)
from assay.errors import (
    EXIT_CHECK_FAILED,
    EXIT_INFRA,
    EXIT_UNSUPPORTED,
    AssayError,
    InputError,
    NeverOverwrite,
    SuiteError,
)

#: ``task check``: every task is ok or could not be checked here (an unsupported environment);
#: the same code as ``exp verdict``'s inconclusive, for the same reason: no verdict either way.

task_app = typer.Typer(no_args_is_help=True, help="Agent task bundles: lint and check.")
app.add_typer(task_app, name="task")
if TYPE_CHECKING:
    from assay.api.records import Grade

trial_app = typer.Typer(no_args_is_help=True,
                        help="Run one agent trial on one task, or open one (show).")
app.add_typer(trial_app, name="trial")


def _experiment_bundles(experiment: Path | None, tier: str | None) -> list[Any]:
    """The bundles an experiment (or one of its tiers, ``suites/tiers.py``) selects."""
    from assay.api.tasks import experiment_bundles

    assert experiment is not None
    try:
        return experiment_bundles(experiment, tier)
    except InputError as exc:
        raise fail(str(exc)) from None


def _load_bundles(dirs: list[Path]) -> list[Any]:
    from assay.api.tasks import find_bundles, load_bundle

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
                                               "fixture_digest into task.yaml, and pin a "
                                               "registry image named by a tag to the "
                                               "digest it resolves to now.")] = False,
) -> None:
    """Validate bundles and their starting-tree digests (exit 1 on a missing or wrong digest,
    or a registry image named by a tag: unpinned); warn when one task seems to sit in two
    splits under different names."""

    from rich.table import Table

    from assay.api.tasks import (
        check_starting_tree,
        pin_image,
        pin_starting_tree,
        split_overlaps,
        unpinned_image,
    )

    bundles = _load_bundles(dirs)
    table = Table(title="task lint", title_justify="left")
    for col in ("task", "rev", "split", "family", "digest"):
        table.add_column(col)
    bad = 0
    digests: dict[str, str] = {}
    notes: list[str] = []
    for b in bundles:
        check = check_starting_tree(b)
        digest, pinned = check.digest, check.pinned
        digests[b.id] = digest
        if check.state == "ok":
            state = "[green]ok[/]"
        elif write_digest:
            pin_starting_tree(b, digest)
            state = f"[yellow]written[/] {digest[:19]}…"
        else:
            bad += 1
            state = ("[red]missing[/]" if pinned is None else "[red]MISMATCH[/]") + \
                f" (computed {digest[:19]}…; --write-digest to pin it)"
        tag = unpinned_image(b)
        if tag is not None and write_digest:
            try:
                pinned = pin_image(b)
            except AssayError as exc:
                from rich.markup import escape

                raise fail(escape(str(exc)), exc.exit_code) from None
            notes.append(f"{b.id}: image {tag} pinned as {pinned}")
        elif tag is not None:
            bad += 1
            state += " [red]unpinned image[/]"
            notes.append(f"{b.id}: unpinned image {tag} (a tag can move; --write-digest pins "
                         "the digest it names now)")
        table.add_row(b.id, str(b.spec.revision), b.spec.split, b.spec.family or "", state)
    out.print(table)
    for note in notes:
        out.print(note, markup=False, highlight=False, soft_wrap=True)
    for warning in split_overlaps(bundles, digests):
        out.print(f"warning: {warning}", markup=False, highlight=False, soft_wrap=True)
    if bad:
        raise typer.Exit(EXIT_CHECK_FAILED)


@task_app.command("check")
def task_check(
    dirs: Annotated[list[Path] | None, typer.Argument(metavar="DIR...")] = None,
    reruns: Annotated[int, typer.Option(min=1, help="Oracle runs per task.")] = 3,
    mutants: Annotated[bool, typer.Option("--mutants", help="Also run the built-in bad "
                                          "agents: every one must be rejected.")] = False,
    only_mutants: Annotated[list[str] | None, typer.Option(
        "--mutant", metavar="NAME", help="Only this built-in bad agent (repeatable; implies "
        "--mutants): to chase one a task lets through.")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Where the trials go.")] = None,
    workers: Annotated[int, typer.Option(min=1, help="Trials at once.")] = 2,
    experiment: Annotated[Path | None, typer.Option(
        "--experiment", metavar="EXPERIMENT.yaml", help="Check the bundles this experiment "
        "selects (instead of DIR...).")] = None,
    tier: Annotated[str | None, typer.Option(
        "--tier", help="With --experiment: the bundles of this tier only (the per-PR gate: "
        "task check --mutants --experiment FILE --tier smoke).")] = None,
    approximate_base: Annotated[bool, typer.Option(
        "--approximate-base", help="A Dockerfile image whose FROM cannot be pulled is built "
        "on the Debian release that stands for it (as environment.approximate_base: true), "
        "not unsupported.")] = False,
) -> None:
    """nop must fail, oracle must pass every time, mutants must all be rejected. Exit 1 when a
    task is broken, flaky or a grader defect; else 4 when a task's environment is unsupported
    here (nothing could be checked for it); 0 when every task is ok."""
    from rich.markup import escape
    from rich.table import Table

    from assay.api import check_tasks
    from assay.api.records import run_stamp

    if (experiment is None) == (not dirs):
        raise fail("give bundle folders (DIR...) or --experiment FILE, one of the two")
    if tier is not None and experiment is None:
        raise fail("--tier: name the experiment whose tier to check (--experiment FILE)")
    _require_sandbox("bwrap")
    bundles = _load_bundles(dirs) if dirs else _experiment_bundles(experiment, tier)
    if approximate_base:
        for bundle in bundles:
            bundle.spec.initial_state.environment.approximate_base = True
    from assay.cli.check_progress import legend, line_writer

    root = out_dir or Path("runs") / f"task-check-{run_stamp()}"
    n = len(bundles)
    out.print(f"task check: {n} bundle{'' if n == 1 else 's'}, {workers} trial"
              f"{'' if workers == 1 else 's'} at once; a line per finished trial on stderr",
              highlight=False)
    reports = check_tasks(bundles, root, reruns=reruns, mutants=mutants, workers=workers,
                          only_mutants=only_mutants, progress=line_writer())
    table = Table(title=f"task check ({root})", title_justify="left")
    table.add_column("task", no_wrap=True)
    for col in ("digest", "nop", "oracle", "mutants rejected", "status"):
        table.add_column(col)
    for r in reports:
        rejected = sum(1 for v in r.mutants.values() if v.startswith("rejected"))
        na = sum(1 for v in r.mutants.values() if v.startswith("n/a"))
        mut = (f"{rejected}/{len(r.mutants) - na}" + (f" ({na} n/a)" if na else "")
               if r.mutants else "n/a")
        style = {"ok": "green", "flaky": "yellow", "unsupported": "yellow"}.get(r.status,
                                                                                "bold red")
        table.add_row(r.task_id, r.digest, r.nop or "", f"{r.oracle_accepted}/{r.oracle_runs}",
                      mut, f"[{style}]{r.status}[/]")
    out.print(table)
    for line in legend(reruns, bool(mutants or only_mutants)):
        out.print(line, highlight=False)
    for r in reports:
        if r.image is not None:
            subs = "; ".join(r.image["substitutions"])
            label = r.image["source_label"]
            out.print(f"{r.task_id}: ran in image {r.image['digest']} ({r.image['source_kind']}"
                      + (f", {escape(label)}" if label else "") + ")"
                      + (f"; substituted: {escape(subs)}" if subs else ""), highlight=False)
        for name, verdict in r.mutants.items():
            if verdict == "ACCEPTED":
                out.print(f"[bold red]GRADER DEFECT:[/] {r.task_id}: mutant {name} was "
                          "ACCEPTED", highlight=False)
        for p in r.problems:
            out.print(f"[red]{r.task_id}:[/] {escape(p)}", highlight=False)
    if any(r.status not in ("ok", "unsupported") for r in reports):
        raise typer.Exit(EXIT_CHECK_FAILED)
    if any(r.status == "unsupported" for r in reports):
        raise typer.Exit(EXIT_UNSUPPORTED)


@task_app.command("import-harbor")
def task_import_harbor(
    task_dirs: Annotated[list[Path], typer.Argument(metavar="HARBOR_TASK_DIR...",
                                                    help="Harbor task folders (task.toml, "
                                                    "instruction.md, environment/, tests/, "
                                                    "solution/).")],
    out_dir: Annotated[Path, typer.Option("--out", help="Where the bundles go, one folder "
                                          "per task; an existing one is never replaced.")],
    reward_threshold: Annotated[float, typer.Option(help="The least reward test.sh must "
                                                    "write for the check to pass.")] = 1.0,
    reward_key: Annotated[str | None, typer.Option(help="For tests that write a multi-metric "
                                                   "reward.json (no 'reward' key): the key "
                                                   "whose value is the reward.")] = None,
    reward_aggregate: Annotated[str | None, typer.Option(help="Instead of --reward-key: mean, "
                                                         "min or all (1 when every metric "
                                                         "reaches the threshold).")] = None,
    approximate_base: Annotated[bool, typer.Option(
        "--approximate-base", help="Mark each bundle built from a Dockerfile "
        "environment.approximate_base: true: where its FROM image cannot be pulled, it builds "
        "on the Debian release that stands for it.")] = False,
) -> None:
    """Convert Harbor tasks into assay bundles (instruction, starting tree, hidden tests,
    reference solution, budgets, resources, a reward-file check). A prebuilt docker_image is
    pulled; a Dockerfile is carried over and built on its real base. A task whose environment
    cannot be reproduced here is converted and marked unsupported, with the reason. Exit 2 and
    nothing written when any folder is invalid or a bundle exists."""
    from rich.markup import escape
    from rich.table import Table

    from assay.api import import_harbor

    try:
        done = import_harbor(task_dirs, out_dir, reward_threshold=reward_threshold,
                             reward_key=reward_key, reward_aggregate=reward_aggregate,
                             approximate_base=approximate_base)
    except InputError as exc:  # SuiteError, NeverOverwrite, a bad threshold
        raise fail(f"nothing imported:\n{exc}") from None
    table = Table(title=f"task import-harbor ({out_dir})", title_justify="left")
    for col in ("task", "bundle", "environment", "image"):
        table.add_column(col, overflow="fold")
    for d in done:
        env = "[green]supported[/]" if d.status == "supported" else "[yellow]unsupported[/]"
        table.add_row(d.task_id, str(d.bundle), env, escape(d.image_text))
    out.print(table)
    for d in done:
        for why in d.reasons:
            out.print(f"[yellow]{escape(d.task_id)}:[/] unsupported environment: "
                      f"{escape(why)}", highlight=False)
    out.print(f"{len(done)} imported; what each import carried over, approximated or left out "
              "is in <bundle>/harbor-import.json", highlight=False)


@trial_app.command("run")
def trial_run(
    task_dir: Annotated[Path, typer.Argument(metavar="TASK_DIR")],
    agent: Annotated[str, typer.Option(help="oracle, nop, command:<shell command>, "
                                       "mutant:<name>, or an agent CLI (mcode, codex, "
                                       "claude-code, qwen-code, mini-swe-agent)[:<path>]")],
    out_dir: Annotated[Path, typer.Option("--out", help="The trial directory.")],
    model: Annotated[str | None, typer.Option(help="The model the agent talks to, through "
                                              "assay's gateway (e.g. builtin/replay); OUT is "
                                              "then a one-trial experiment directory.")]
    = None,
    protocol: Annotated[str, typer.Option(help="With --model: chat, responses or "
                                          "anthropic.")] = "chat",
    script: Annotated[Path | None, typer.Option(help="With --model builtin/replay: its "
                                                "script.")] = None,
    base_url_env: Annotated[str | None, typer.Option(help="With a real --model: the variable "
                                                     "holding its base URL.")] = None,
    api_key_env: Annotated[str | None, typer.Option(help="With a real --model: the variable "
                                                    "holding its key.")] = None,
) -> None:
    """Prepare, run the agent in the sandbox, freeze, verify; print the grade. Exit 0 whatever
    the verdict; 3 when the trial could not be run or graded."""
    from assay.api import run_trial
    from assay.api.tasks import parse_agent

    bundles = _load_bundles([task_dir])
    if len(bundles) > 1:
        raise fail(f"{task_dir} holds {len(bundles)} task bundles; a trial runs one. Name one "
                   "of: " + ", ".join(str(b.root) for b in bundles))
    [bundle] = bundles
    if model is not None:
        _trial_with_model(bundle, agent, out_dir, model=model, protocol=protocol,
                          script=script, base_url_env=base_url_env, api_key_env=api_key_env)
        return
    try:
        the_agent = parse_agent(agent)
    except ValueError as exc:
        raise fail(str(exc)) from None
    _require_sandbox("bwrap")
    try:
        result = run_trial(bundle, the_agent, out_dir)
    except NeverOverwrite as exc:
        raise fail(str(exc)) from None
    if result.grade is None:
        raise fail(f"trial not run: {result.record.error}", EXIT_INFRA)
    _print_grade(result.grade)
    if result.grade.validity.status != "valid":
        raise typer.Exit(EXIT_INFRA)


def _trial_with_model(bundle: Any, agent: str, out_dir: Path, **model: Any) -> None:
    """A trial whose agent needs a model: a one-arm, one-task experiment
    (``api.tasks.run_model_trial``)."""
    from assay.api.tasks import run_model_trial
    from assay.errors import AssayError

    _require_sandbox("bwrap")
    try:
        done = run_model_trial(bundle, agent, out_dir, **model)
    except AssayError as exc:
        raise fail(str(exc)) from None
    if done.grade is None:
        raise fail(f"trial not run: {done.error or 'no attempt was graded'}", EXIT_INFRA)
    _print_grade(done.grade)
    out.print(f"  record: {done.attempt_dir}", highlight=False)
    if done.grade.validity.status != "valid":
        raise typer.Exit(EXIT_INFRA)


def _print_grade(grade: Grade) -> None:
    verdict = "[bold green]ACCEPTED[/]" if grade.accepted else "[bold red]REJECTED[/]"
    out.print(f"{grade.trial_id}: {verdict}"
              + (f" ({grade.failure_code})" if grade.failure_code else ""),
              highlight=False)
    checks = ", ".join(f"{k} {v}" for k, v in grade.checks.items())
    out.print(f"  checks: {checks}; execution {grade.execution.get('status')}; validity "
              f"{grade.validity.status}", highlight=False)
