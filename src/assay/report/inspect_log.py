"""A narrow or coding run as an Inspect eval log, the file ``inspect view`` and Inspect's log
readers open, so a team that moved its evals over from Inspect keeps its viewer.

Written through Inspect's own log API (``inspect_ai.log.write_eval_log``) from the run's
records alone, never from a live run; ``inspect_ai`` is the optional extra ``assay[inspect]``,
imported only when a log is asked for (:func:`inspect_api` names the extra when it is missing).

What maps to what: the run is one eval (task = the suite, model = the model asked for, epochs =
repeats or samples); each case and repeat (coding: each task and sample) is one sample (id =
case or task id, epoch = repeat + 1), with the case's input (coding: the task prompt as sent),
the target (the expected answer; coding: the task type's check), the answer used as the output,
and one score ``assay`` (``C`` / ``I``) whose answer is what the scorer read. assay's
distinctions are kept as sample metadata (``assay_status``: ``correct``, ``incorrect``,
``invalid`` with its reason, ``infra_error``, ``ungraded``, ``rubric``); an infra error is an
unscored sample with Inspect's ``error`` set, as Inspect records a sample that failed. The eval's
headline metric is assay's own figure (narrow accuracy, coding pass@1) with its 95% interval.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from assay.errors import InputError
from assay.records.io import iter_rows

INSPECT_EXTRA = ("writing an Inspect log needs Inspect's log API: pip install 'assay[inspect]' "
                 "(the inspect-ai package)")
LOG_SUFFIXES = (".eval", ".json")
SCORER = "assay"


@dataclass
class LogSample:
    """One sample, in Inspect's terms, from one standing row of the run."""

    id: str
    epoch: int
    input: str
    target: str
    output: str
    model: str
    correct: bool | None
    answer: str | None
    explanation: str | None
    status: str
    error: str | None = None
    usage: dict[str, Any] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class LogRun:
    kind: str
    manifest: dict[str, Any]
    report: dict[str, Any]
    samples: list[LogSample]
    epochs: int
    metric: str
    value: float | None
    ci95: list[float] | None


def inspect_api() -> tuple[ModuleType, ModuleType, ModuleType]:
    """``inspect_ai.log``, ``inspect_ai.model`` and ``inspect_ai.scorer``, or an InputError
    naming the extra."""
    try:
        import inspect_ai.log as log
        import inspect_ai.model as model
        import inspect_ai.scorer as scorer
    except ImportError as exc:
        raise InputError(f"{INSPECT_EXTRA}: {exc}") from None
    return log, model, scorer


def write_inspect_log(run_dir: Path, target: Path,
                      grade_revision: str | None = None) -> dict[str, Any]:
    """Write ``target`` (``.eval``, Inspect's default, or ``.json``) for a narrow or coding run;
    returns what was written (samples, the headline metric)."""
    if target.suffix not in LOG_SUFFIXES:
        raise InputError(f"--inspect-log {target}: the file must end in .eval or .json (the "
                         "two formats Inspect reads)")
    log_mod, model_mod, scorer_mod = inspect_api()
    run = _read_run(run_dir, grade_revision)
    log = _eval_log(run, log_mod, model_mod, scorer_mod)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")  # a reader never sees half a log
    log_mod.write_eval_log(log, str(tmp), format=target.suffix[1:])
    tmp.replace(target)
    return {"file": str(target), "samples": len(run.samples), "metric": run.metric,
            "value": run.value, "epochs": run.epochs}


# ----------------------------------------------------------------------------- the records


def _read_run(run_dir: Path, grade_revision: str | None) -> LogRun:
    from assay.records.manifest import read_manifest

    kind = read_manifest(run_dir).get("kind")
    if kind == "coding":
        return _coding(run_dir, grade_revision)
    if grade_revision is not None:
        raise InputError(f"{run_dir}: --grade-revision is for coding runs; this is a narrow run")
    return _narrow(run_dir)


def _cases(path: Path) -> dict[str, dict[str, Any]]:
    if not path.is_file():
        return {}
    return {str(r.get("id")): r for r in iter_rows(path, on_torn=lambda _t: None)}


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                          sort_keys=True)


def _narrow(run_dir: Path) -> LogRun:
    from assay.records.narrow import iter_narrow_rows, read_narrow_manifest
    from assay.report.narrow import build_report

    manifest = read_narrow_manifest(run_dir)
    report = build_report(run_dir)
    cases = _cases(run_dir / "suite" / "cases.jsonl")
    by_key: dict[tuple[str, int], dict[str, Any]] = {}
    for row in iter_narrow_rows(run_dir, manifest):  # the last row of a key stands
        by_key[(row["id"], row["repeat"])] = row
    model = manifest["model"]["requested"]
    samples = []
    for (case_id, repeat), r in sorted(by_key.items()):
        if r.get("error"):
            status = "infra_error"
        elif r.get("invalid_reason"):
            status = "invalid"
        else:
            status = "correct" if r.get("correct") else "incorrect"
        answer = r.get("label") or (None if r.get("answer") is None else _text(r["answer"]))
        meta = {k: r[k] for k in ("label", "invalid_reason", "first_invalid_reason",
                                  "attempts", "latency_ms", "served_model", "finish_reason",
                                  "score_detail") if r.get(k) is not None}
        samples.append(LogSample(
            id=case_id, epoch=repeat + 1, input=_text((cases.get(case_id) or {}).get("input")),
            target=_text(r.get("expected")), output=r.get("raw") or "", model=model,
            correct=None if status == "infra_error" else bool(r.get("correct")),
            answer=answer, explanation=r.get("invalid_reason"), status=status,
            error=r.get("error"), usage=r.get("usage"), metadata=meta))
    return LogRun("narrow", manifest, report, samples, manifest["parameters"]["repeats"],
                  "accuracy", report.get("accuracy"), report.get("accuracy_ci95"))


def _coding(run_dir: Path, grade_revision: str | None) -> LogRun:
    from assay.records.coding import CodingManifest, graded_samples
    from assay.records.manifest import read_run_manifest
    from assay.report.coding import build_coding_report

    manifest = read_run_manifest(run_dir, CodingManifest)
    report = build_coding_report(run_dir, grade_revision)
    revision, finals = graded_samples(run_dir, manifest, report.get("grade_revision")
                                      or grade_revision)
    prompts = _coding_prompts(run_dir)
    model = manifest["model"]["requested"]
    samples = []
    for (task_id, n), r in sorted(finals.items()):
        if r.get("error"):
            status = "infra_error"
        elif r.get("type") == "rubric":
            status = "rubric"
        elif r.get("passed") is None:
            status = "ungraded"
        else:
            status = "correct" if r["passed"] else "incorrect"
        correct = r["passed"] if status in ("correct", "incorrect") else None
        meta = {"type": r.get("type"), "reason": r.get("reason"), "grade_revision": revision,
                **{k: r[k] for k in ("latency_ms", "served_model", "finish_reason")
                   if r.get(k) is not None}}
        samples.append(LogSample(
            id=task_id, epoch=n + 1, input=prompts.get(task_id, ""),
            target=f"{r.get('type')} check: the task's tests pass" if r.get("type") != "rubric"
            else "rubric: graded by people", output=r.get("raw") or "", model=model,
            correct=correct, answer=r.get("code"), explanation=r.get("reason"), status=status,
            error=r.get("error"), usage=r.get("usage"), metadata=meta))
    fig = report.get("pass_at_1") or {}
    return LogRun("coding", manifest, report, samples, manifest["parameters"]["samples"],
                  "pass_at_1", fig.get("mean"), fig.get("ci95"))


def _coding_prompts(run_dir: Path) -> dict[str, str]:
    """Each task's prompt as it was sent (from the run's copy of its tasks file)."""
    from assay.errors import AssayError
    from assay.suites.coding import load_coding_suite
    from assay.suites.prompts import user_prompt

    try:
        suite = load_coding_suite(run_dir / "suite" / "tasks.jsonl")
    except (AssayError, OSError):
        return {}
    return {t.id: user_prompt(t) for t in suite.tasks}


# ----------------------------------------------------------------------------- the log


def _usage(model_mod: ModuleType, usage: dict[str, Any] | None) -> Any:
    """Inspect's ModelUsage from an OpenAI-shaped usage; None when unknown or incomplete."""
    if not isinstance(usage, dict) or usage.get("incomplete") or \
            not isinstance(usage.get("prompt_tokens"), int) or \
            not isinstance(usage.get("completion_tokens"), int):
        return None
    i, o = usage["prompt_tokens"], usage["completion_tokens"]
    return model_mod.ModelUsage(input_tokens=i, output_tokens=o,
                                total_tokens=usage.get("total_tokens") or i + o)


def _samples(run: LogRun, model_mod: ModuleType, scorer_mod: ModuleType,
             log_mod: ModuleType) -> Iterator[Any]:
    for s in run.samples:
        usage = _usage(model_mod, s.usage)
        scores = None
        if s.correct is not None:
            scores = {SCORER: scorer_mod.Score(
                value=scorer_mod.CORRECT if s.correct else scorer_mod.INCORRECT,
                answer=s.answer, explanation=s.explanation,
                metadata={"assay_status": s.status})}
        yield log_mod.EvalSample(
            id=s.id, epoch=s.epoch, input=s.input, target=s.target,
            output=model_mod.ModelOutput.from_content(s.model, s.output),
            scores=scores, metadata={"assay_status": s.status, **s.metadata},
            model_usage={s.model: usage} if usage is not None else {},
            error=log_mod.EvalError(message=s.error, traceback="", traceback_ansi="")
            if s.error else None)


def _eval_log(run: LogRun, log_mod: ModuleType, model_mod: ModuleType,
              scorer_mod: ModuleType) -> Any:
    m = run.manifest
    suite = m["suite"]
    model = m["model"]["requested"]
    params = m["parameters"]
    samples = list(_samples(run, model_mod, scorer_mod, log_mod))
    scored = sum(1 for s in run.samples if s.correct is not None)
    metrics: dict[str, Any] = {}
    if run.value is not None:
        metrics[run.metric] = log_mod.EvalMetric(name=run.metric, value=run.value)
    if run.ci95:
        metrics["ci95_low"] = log_mod.EvalMetric(name="ci95_low", value=run.ci95[0])
        metrics["ci95_high"] = log_mod.EvalMetric(name="ci95_high", value=run.ci95[1])
    statuses: dict[str, int] = {}
    for s in run.samples:
        statuses[s.status] = statuses.get(s.status, 0) + 1
    results = log_mod.EvalResults(
        total_samples=len(run.samples), completed_samples=scored,
        scores=[log_mod.EvalScore(name=SCORER, scorer=SCORER, scored_samples=scored,
                                  unscored_samples=len(run.samples) - scored,
                                  metrics=metrics)],
        metadata={"assay_statuses": statuses,
                  "missing_rows": run.report.get("missing_rows")})
    total = _total_usage(model_mod, run.samples)
    ids = sorted({s.id for s in run.samples})
    spec = log_mod.EvalSpec(
        run_id=m["run_id"], created=m["started_at"], task=suite["name"],
        task_file=suite.get("path"),
        dataset=log_mod.EvalDataset(name=suite["name"],
                                    location=str(Path(suite["path"]) / suite["cases_file"])
                                    if run.kind == "narrow" else suite.get("path"),
                                    samples=len(ids), sample_ids=ids),
        model=model, model_base_url=m["model"].get("base_url"),
        model_generate_config=model_mod.GenerateConfig(
            temperature=params.get("temperature"), max_tokens=params.get("max_tokens")),
        config=log_mod.EvalConfig(epochs=run.epochs),
        metadata={"assay": {"kind": run.kind, "run_id": m["run_id"],
                            "suite": {k: v for k, v in suite.items()
                                      if k not in ("task_ids",)},
                            "served_models": m["model"].get("served_models"),
                            "assay": m.get("assay"), "warnings": m.get("warnings")}})
    complete = not run.report.get("missing_rows")
    return log_mod.EvalLog(
        version=2, status="success" if complete else "started", eval=spec,
        plan=log_mod.EvalPlan(name="assay"), results=results,
        stats=log_mod.EvalStats(started_at=m["started_at"],
                                completed_at=m.get("ended_at") or m["started_at"],
                                model_usage={model: total} if total is not None else {}),
        samples=samples)


def _total_usage(model_mod: ModuleType, samples: list[LogSample]) -> Any:
    """The run's tokens, only when every answered sample reported them (never a partial sum
    passed off as the whole)."""
    answered = [s for s in samples if s.status != "infra_error"]
    usages = [_usage(model_mod, s.usage) for s in answered]
    if not usages or any(u is None for u in usages):
        return None
    i = sum(u.input_tokens for u in usages)
    o = sum(u.output_tokens for u in usages)
    return model_mod.ModelUsage(input_tokens=i, output_tokens=o, total_tokens=i + o)
