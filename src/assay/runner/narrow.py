"""Running a narrow-task suite: one chat completion per case and repeat, rows streamed to disk.

The raw rows are the run's state. A case/repeat is done when it has a row without ``error``;
resuming re-reads the rows (dropping a line torn by a crash) and asks only for what is missing,
so a ``kill -9`` loses at most the answers in flight and never duplicates a finished row.
What is specific to narrow runs is here: the spec of a unit of work (a case at a repeat), the
ask-read-retry-score loop, and the manifest's suite part; the loop itself is
``engine.run_model``. Reading and scoring belong to the suite's scorer
(``grading/answers/scorers.py``); scoring is awaited, so a scorer may call a model of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.errors import GradingError
from assay.grading.answers.scorers import Scorer, manifest_record, scorer_for
from assay.models.client import ChatClient, Completion, TransportError
from assay.records.io import atomic_write_text
from assay.records.layout import CASES_SNAPSHOT, RAW_PREDICTIONS, run_stamp
from assay.records.narrow import ROW_SCHEMAS, NarrowManifest, NarrowRow
from assay.runner.engine import (
    Endpoint,
    RunConflict,
    RunResult,
    RunSpec,
    Transport,
    model_manifest,
    run_model,
)
from assay.runner.progress import NullProgress, Progress
from assay.suites.cases import Case, NarrowSuite
from assay.suites.prompts import narrow_messages, retry_with

MANIFEST_SCHEMA = NarrowManifest.schema_id()
#: answers asked again for their format, at most, per case
FORMAT_RETRIES = 1


@dataclass(frozen=True)
class NarrowParams:
    temperature: float = 0.0
    repeats: int = 1
    concurrency: int = 16
    max_tokens: int | None = None
    timeout_s: float = 120.0
    max_tries: int = 5
    split: str | None = None


def default_run_dir(suite_name: str, model: str, root: Path = Path("runs")) -> Path:
    """runs/<suite>-<model>-<UTC timestamp>, with the model name made path-safe."""
    safe_model = re.sub(r"[^A-Za-z0-9._-]+", "_", model).strip("_") or "model"
    return root / f"{suite_name}-{safe_model}-{run_stamp()}"


def comparable_settings(suite: NarrowSuite, endpoint: Endpoint,
                        params: NarrowParams) -> dict[str, Any]:
    """What must be identical for rows written by two sessions to belong to one run. The scorer
    is listed only when it is not ``label``, so runs from before scorers still resume."""
    out: dict[str, Any] = {
        "cases_sha256": suite.cases_sha256,
        "prompt_sha256": suite.prompt_sha256,
        "labels": list(suite.labels),
        "output_field": suite.config.output_field,
        "split": params.split,
        **({"tier": suite.tier} if suite.tier is not None else {}),
        "model": endpoint.model,
        "temperature": params.temperature,
        "repeats": params.repeats,
        "max_tokens": params.max_tokens,
    }
    if suite.scorer.type != "label":
        out["scorer"] = suite.scorer.to_record()
    return out


def limits_of(params: NarrowParams) -> dict[str, Any]:
    return {"concurrency": params.concurrency, "request_timeout_s": params.timeout_s,
            "transport_max_tries": params.max_tries}


def build_manifest(run_id: str, suite: NarrowSuite, endpoint: Endpoint,
                   params: NarrowParams) -> dict[str, Any]:
    data = model_manifest(
        schema=MANIFEST_SCHEMA, kind="narrow", run_id=run_id, endpoint=endpoint,
        suite={
            "name": suite.name,
            "path": str(suite.root.resolve()),
            "cases_file": str(suite.cases_path.relative_to(suite.root)),
            "split": params.split,
            **({"tier": suite.tier} if suite.tier is not None else {}),
            "n_cases": len(suite.cases),
            "cases_sha256": suite.cases_sha256,
            "prompt_sha256": suite.prompt_sha256,
            "train_sha256": suite.train_sha256,
            "labels": list(suite.labels),
            "labels_source": suite.labels_source,
            "output_field": suite.config.output_field,
            "scorer": manifest_record(suite),
        },
        parameters={"temperature": params.temperature, "repeats": params.repeats,
                    "max_tokens": params.max_tokens, "format_retries": FORMAT_RETRIES},
        limits=limits_of(params), comparable=comparable_settings(suite, endpoint, params),
        record_schemas=dict(ROW_SCHEMAS))
    return NarrowManifest.read(data, "new narrow manifest").to_json()


def _sum_usage(answers: list[Completion]) -> dict[str, Any] | None:
    """Token usage over every answer of a case; ``None`` when no answer reported any, and an
    ``incomplete`` flag when only some did: a missing figure is unknown, not zero."""
    have = [a.usage for a in answers if a.usage]
    if not have:
        return None
    if len(have) == 1 == len(answers):
        usage = have[0]
        if all(isinstance(usage.get(k), int | float)
               for k in ("prompt_tokens", "completion_tokens", "total_tokens")):
            return {k: usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
    total: dict[str, Any] = {}
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        vals = [u.get(key) for u in have]
        nums = [v for v in vals if isinstance(v, int | float)]
        total[key] = sum(nums) if len(nums) == len(vals) else None
    if len(have) < len(answers) or any(v is None for v in total.values()):
        total["incomplete"] = True
    return total


async def answer_case(client: ChatClient, suite: NarrowSuite, case: Case, repeat: int,
                      params: NarrowParams, scorer: Scorer | None = None) -> dict[str, Any]:
    """One case, one repeat: an answer, at most ``FORMAT_RETRIES`` format retries, the
    scorer's verdict, and the row that records it."""
    scorer = scorer or scorer_for(suite)
    messages = narrow_messages(suite, case)
    answers: list[Completion] = []
    tries: list[dict[str, Any]] = []
    error: str | None = None
    fatal: bool | None = None
    reading = None
    first_reason: str | None = None
    try:
        for attempt in range(1 + FORMAT_RETRIES):
            if attempt:
                messages = retry_with(messages, answers[-1].content, scorer.retry_instruction())
            answer = await client.complete(messages, temperature=params.temperature,
                                           max_tokens=params.max_tokens)
            answers.append(answer)
            tries += [t.to_record() for t in answer.tries]
            reading = scorer.read(answer.content, answer.refusal)
            if reading.valid:
                break
            if attempt == 0:
                first_reason = reading.reason
    except TransportError as exc:
        tries += [t.to_record() for t in exc.tries]
        error = str(exc)
        fatal = exc.fatal or None
    score = None
    if reading is not None and reading.valid and error is None:
        try:
            score = await scorer.score(reading.value, case, repeat)
        except TransportError as exc:  # the judge's endpoint: no verdict, asked again
            tries += [t.to_record() for t in exc.tries]
            error, fatal = f"judge: {exc}", exc.fatal or None
        except GradingError as exc:
            error = f"judge: {exc}"
    last = answers[-1] if answers else None
    ok = reading is not None and error is None
    is_label = suite.scorer.type == "label"
    value = reading.value if ok else None  # type: ignore[union-attr]
    return NarrowRow(
        id=case.id, repeat=repeat, expected=case.expected,
        raw=last.content if last else None,
        raws=[a.content for a in answers],
        label=(value or "") if is_label else "",
        correct=(score is not None and score.correct) if ok else None,
        answer=None if is_label else value,
        score_detail=score.detail if score else None,
        attempts=len(answers),
        invalid_reason=reading.reason if ok else None,  # type: ignore[union-attr]
        first_invalid_reason=first_reason,
        latency_ms=round(sum(a.latency_ms for a in answers), 1) if error is None else None,
        usage=_sum_usage(answers),
        served_model=last.served_model if last else None,
        system_fingerprint=last.system_fingerprint if last else None,
        finish_reason=last.finish_reason if last else None,
        error=error, tries=tries, fatal=fatal,
    ).to_row()


def narrow_spec(suite: NarrowSuite, endpoint: Endpoint, params: NarrowParams,
                run_dir: Path, scorer: Scorer | None = None) -> RunSpec[Case]:
    scorer = scorer or scorer_for(suite, run_dir)

    async def ask(client: ChatClient, case: Case, repeat: int) -> dict[str, Any]:
        return await answer_case(client, suite, case, repeat, params, scorer)

    def prepare(run_dir: Path) -> None:
        """Keep the exact cases file run (its sha256 is the manifest's, and a resume with other
        cases is refused), so the report shows the inputs of wrong answers from the run
        directory alone."""
        snapshot = run_dir / CASES_SNAPSHOT
        if not snapshot.exists():
            atomic_write_text(snapshot, suite.cases_text if suite.cases_text is not None
                              else suite.cases_path.read_text(encoding="utf-8"))

    return RunSpec(
        kind="narrow", rows_file=RAW_PREDICTIONS, row_model=NarrowRow, units=suite.cases,
        passes=params.repeats,
        pass_field="repeat", comparable=comparable_settings(suite, endpoint, params),
        manifest=lambda: build_manifest(run_dir.name, suite, endpoint, params),
        limits=limits_of(params),
        transport=Transport(params.concurrency, params.timeout_s, params.max_tries), ask=ask,
        prepare=prepare)


async def run_narrow(suite: NarrowSuite, endpoint: Endpoint, params: NarrowParams,
                     run_dir: Path, progress: Progress[dict[str, Any]] | None = None) -> RunResult:
    """Run (or resume) a suite into ``run_dir``; the caller has validated everything."""
    scorer = scorer_for(suite, run_dir)
    try:
        return await run_model(narrow_spec(suite, endpoint, params, run_dir, scorer), endpoint,
                               run_dir, progress or NullProgress())
    finally:
        await scorer.aclose()


__all__ = ["RAW_PREDICTIONS", "Endpoint", "NarrowParams", "RunConflict", "RunResult",
           "run_narrow"]
