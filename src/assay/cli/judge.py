"""``assay judge ...``: check a judge, calibrate it against human grades, judge some files.

Exit codes: 0 done; 2 bad input (a judge file, a grades file, a calibration that exists with
other figures); 3 the judge's endpoint gave no usable answer (the judgements made so far are
kept; the same command resumes after them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from assay.cli.app import app, err, out
from assay.errors import AssayError, InputError

judge_app = typer.Typer(no_args_is_help=True, help="Model judges: a pinned model and rubric, "
                        "calibrated against human grades.")
app.add_typer(judge_app, name="judge")

JudgeArg = Annotated[Path, typer.Argument(metavar="JUDGE", help="judge.yaml (or its "
                                          "directory).")]


def _failed(exc: AssayError) -> typer.Exit:
    """Every problem on its own line, unwrapped, so a file:line stays one clickable string."""
    err.print(f"[bold red]assay:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
    return typer.Exit(exc.exit_code)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


@judge_app.command("check")
def judge_check(
    judge: JudgeArg,
    as_json: Annotated[bool, typer.Option("--json", help="The pin and calibration as JSON.")]
    = False,
    calibration_dir: Annotated[Path | None, typer.Option(
        "--calibration", metavar="DIR", help="Where `judge calibrate --out DIR` wrote the "
        "calibration (default: beside judge.yaml).")] = None,
) -> None:
    """Load and check a judge; print its pin and whether it is calibrated."""
    from assay.api.judge import calibration_for, calibration_label, load_judge

    try:
        loaded = load_judge(judge)
        calibration = calibration_for(loaded, calibration_dir)
    except AssayError as exc:
        raise _failed(exc) from None
    if as_json:
        typer.echo(json.dumps({"pin": loaded.pin(), "criteria": [c.id for c in loaded.criteria],
                               "calibration": calibration}, indent=2))
        return
    pin = loaded.pin()
    out.print(f"judge {pin['revision']}: model {pin['model']}, rubric {pin['rubric']} "
              f"({len(loaded.criteria)} criteria), template {pin['template']}, temperature "
              f"{pin['temperature']}, max_tokens {pin['max_tokens']}", highlight=False)
    label = calibration_label(calibration)
    if calibration is None:
        looked = calibration_dir if calibration_dir is not None else loaded.path.parent
        label += (f" (no calibration-{loaded.revision}.json in {looked}; one written with "
                  "`judge calibrate --out DIR` is read with --calibration DIR)")
    out.print(f"calibration: {escape(label)}", highlight=False, soft_wrap=True)


@judge_app.command("calibrate")
def judge_calibrate(
    judge: JudgeArg,
    human_grades: Annotated[Path, typer.Argument(metavar="HUMAN_GRADES", help="A labelled "
                                                 "JSONL file, or a coding run graded with "
                                                 "`assay grade`.")],
    out_dir: Annotated[Path | None, typer.Option("--out", help="Where calibration-<revision>"
                                                 ".json and its judgements go (default: "
                                                 "beside judge.yaml).")] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Judge requests in flight.")] = 4,
) -> None:
    """Run the judge on every human-graded item; report agreement per criterion (exact,
    Cohen's kappa with an interval, confusion) into calibration-<revision>.json."""
    from rich.table import Table

    from assay.api.judge import calibrate

    try:
        result = calibrate(judge, human_grades, out=out_dir, concurrency=concurrency)
    except AssayError as exc:
        raise _failed(exc) from None
    rec = result.record
    table = Table(title=f"judge {rec['judge_revision']} against {rec['human']['kind']} "
                  f"({rec['items']} items, {rec['invalid']} invalid)", title_justify="left")
    for col in ("criterion", "graded", "pairs", "invalid", "exact", "kappa", "interval",
                "weighted"):
        table.add_column(col)
    for cid, a in rec["criteria"].items():
        ci = a["kappa_ci"]
        table.add_row(cid, str(a["graded"]), str(a["n"]), str(a["invalid"]), _pct(a["exact"]),
                      _num(a["kappa"]), f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "n/a",
                      _num(a["weighted_kappa"]))
    out.print(table)
    for why, n in sorted(result.why_invalid.items(), key=lambda kv: -kv[1]):
        err.print(f"invalid ({n}): {escape(why)}", highlight=False, soft_wrap=True)
    if rec["ungraded"]:
        err.print(f"no human grades for: {', '.join(rec['ungraded'])} (uncalibrated there)",
                  highlight=False)
    if rec["unmapped"]:
        err.print(f"not a criterion of this judge, ignored: {', '.join(rec['unmapped'])}",
                  highlight=False)
    what = "unchanged" if result.unchanged else "written"
    out.print(f"{result.path} {what}; {result.judged} new judgements in "
              f"{result.path.parent / rec['judgements']}", highlight=False, soft_wrap=True)


@judge_app.command("run")
def judge_run(
    judge: JudgeArg,
    files: Annotated[list[Path], typer.Argument(metavar="FILE...", help="The material: files "
                                                "to judge, cited by the path as given.")],
    context: Annotated[str | None, typer.Option(help="The task the files answer (quoted "
                                                "too).")] = None,
    out_file: Annotated[Path | None, typer.Option("--out", help="Append the judgement to this "
                                                  "judgements.jsonl.")] = None,
) -> None:
    """Judge some files once and print the judgement as JSON (with the judge's calibration,
    or "uncalibrated")."""
    from assay.api.judge import (
        Material,
        append_judgement,
        calibration_for,
        calibration_label,
        judge_one,
        load_judge,
    )

    try:
        loaded = load_judge(judge)
        texts = {}
        for f in files:
            try:
                texts[f.as_posix()] = f.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise InputError(f"{f}: cannot be read as text ({exc})") from None
        material = Material(kind="artifact", files=texts, context=context)
        result = judge_one(loaded, material, subject={"files": list(texts)})
        calibration = calibration_label(calibration_for(loaded))
    except AssayError as exc:
        raise _failed(exc) from None
    if out_file is not None:
        append_judgement(out_file, result)
    typer.echo(json.dumps({**result.to_json(), "calibration": calibration}, indent=2,
                          ensure_ascii=False))
