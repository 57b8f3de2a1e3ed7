"""Running a coding suite: several samples per task; answers recorded, then graded from the
record.

One answer row per task and sample goes to ``samples.jsonl`` as soon as it arrives; the answer
is then graded from that row into the run's grade revision (``grades/v1.jsonl``), so a fixed
grader can later grade the very same answers again (``assay regrade``). Model calls run
``concurrency`` at a time; sandboxed executions run at most ``exec_concurrency`` at a time,
because they compete for the CPU and their time limits should measure the candidate, not the
queue.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.grading.answers.revisions import Revision, grade_remaining
from assay.grading.answers.table import ExecSettings, extract, grade_answer
from assay.grading.answers.unit import Isolation
from assay.models.client import ChatClient, TransportError
from assay.records.coding import ROW_SCHEMAS, CodingManifest, SampleRow
from assay.records.io import atomic_write_text
from assay.records.layout import RUN_GRADE_REVISION, SAMPLES, SUITE_SNAPSHOT
from assay.records.manifest import read_manifest
from assay.runner.engine import (
    Endpoint,
    RunResult,
    RunSpec,
    Transport,
    model_manifest,
    run_model,
)
from assay.runner.progress import NullProgress, Progress
from assay.sandbox import Limits
from assay.suites.coding import CodingSuite, CodingTask
from assay.suites.prompts import INSTRUCTIONS, user_prompt
from assay.suites.prompts import coding_messages as messages_for

MANIFEST_SCHEMA = CodingManifest.schema_id()


@dataclass(frozen=True)
class CodingParams:
    samples: int = 3
    temperature: float = 0.2
    concurrency: int = 8
    exec_concurrency: int = max(1, os.cpu_count() or 1)
    max_tokens: int | None = None
    timeout_s: float = 120.0
    max_tries: int = 5
    exec_timeout_s: float = 30.0
    memory_mib: int = 1024
    pids: int = 256
    isolation: Isolation = "bwrap"

    def exec_settings(self) -> ExecSettings:
        return ExecSettings(isolation=self.isolation, exec_timeout_s=self.exec_timeout_s,
                            memory_mib=self.memory_mib, pids=self.pids,
                            exec_concurrency=self.exec_concurrency)

    def limits(self) -> Limits:
        return self.exec_settings().limits()


def comparable_settings(suite: CodingSuite, endpoint: Endpoint,
                        params: CodingParams) -> dict[str, Any]:
    return {"tasks_sha256": suite.sha256, "model": endpoint.model,
            "temperature": params.temperature, "samples": params.samples,
            "max_tokens": params.max_tokens, "isolation": params.isolation,
            "exec_timeout_s": params.exec_timeout_s, "memory_mib": params.memory_mib,
            "pids": params.pids}


def limits_of(params: CodingParams) -> dict[str, Any]:
    return {"concurrency": params.concurrency, "exec_concurrency": params.exec_concurrency,
            "request_timeout_s": params.timeout_s, "transport_max_tries": params.max_tries,
            "sandbox": {"isolation": params.isolation, "wall_seconds": params.exec_timeout_s,
                        "memory_mib": params.memory_mib, "pids": params.pids,
                        "note": "requested; what each execution actually got is in its grade "
                                "(exec.limits_applied)"}}


def build_manifest(run_id: str, suite: CodingSuite, endpoint: Endpoint,
                   params: CodingParams) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for t in suite.tasks:
        counts[t.type] = counts.get(t.type, 0) + 1
    data = model_manifest(
        schema=MANIFEST_SCHEMA, kind="coding", run_id=run_id, endpoint=endpoint,
        suite={"name": suite.name, "path": str(suite.path.resolve()),
               "tasks_sha256": suite.sha256, "n_tasks": len(suite.tasks),
               "types": counts, "task_ids": [t.id for t in suite.tasks]},
        parameters={"samples": params.samples, "temperature": params.temperature,
                    "max_tokens": params.max_tokens, "instructions": INSTRUCTIONS},
        limits=limits_of(params), comparable=comparable_settings(suite, endpoint, params),
        record_schemas=dict(ROW_SCHEMAS),
        isolation=params.isolation, not_isolated=params.isolation == "none")
    return CodingManifest.read(data, "new coding manifest").to_json()


async def answer_task(client: ChatClient, task: CodingTask, sample: int,
                      params: CodingParams) -> dict[str, Any]:
    """One sample of one task: the answer and the code extracted from it, no verdict."""
    try:
        completion = await client.complete(messages_for(task), temperature=params.temperature,
                                           max_tokens=params.max_tokens)
    except TransportError as exc:
        return SampleRow(id=task.id, sample=sample, type=task.type, language=task.language,
                         error=str(exc), tries=[t.to_record() for t in exc.tries],
                         fatal=exc.fatal or None).to_row()
    return SampleRow(
        id=task.id, sample=sample, type=task.type, language=task.language,
        raw=completion.content, code=extract(task, completion.content),
        latency_ms=round(completion.latency_ms, 1), usage=completion.usage,
        served_model=completion.served_model, system_fingerprint=completion.system_fingerprint,
        finish_reason=completion.finish_reason,
        tries=[t.to_record() for t in completion.tries]).to_row()


async def run_coding(suite: CodingSuite, endpoint: Endpoint, params: CodingParams,
                     run_dir: Path, progress: Progress[dict[str, Any]] | None = None) -> RunResult:
    """Run (or resume) a coding suite into ``run_dir``: each answer is graded into revision
    ``v1`` as it arrives and written with that verdict; a last sweep grades what an earlier
    session left ungraded."""
    tasks = {t.id: t for t in suite.tasks}
    exec_slots = asyncio.Semaphore(params.exec_concurrency)
    revision: Revision | None = None

    def prepare(run_dir: Path) -> None:
        nonlocal revision
        snapshot = run_dir / SUITE_SNAPSHOT
        if not snapshot.exists():
            atomic_write_text(snapshot, suite.path.read_text(encoding="utf-8"))
        revision = Revision(run_dir, RUN_GRADE_REVISION, source="run",
                            settings=params.exec_settings(), tasks_sha256=suite.sha256,
                            create_only=False)

    async def ask(client: ChatClient, task: CodingTask, sample: int) -> dict[str, Any]:
        """The answer, graded into ``v1`` before its row is written, so the row carries the
        run's own verdict as ``samples.jsonl`` always has (a crash between the two leaves a
        grade whose answer is asked again; the newer grade then stands)."""
        row = await answer_task(client, task, sample, params)
        if row.get("error"):
            return {**row, "passed": None, "reason": "infra_error", "exec": None}
        assert revision is not None
        async with exec_slots:
            g = await asyncio.to_thread(revision.grade, task, row)
        return {**row, "passed": g["passed"], "reason": g["reason"], "exec": g["exec"]}

    spec: RunSpec[CodingTask] = RunSpec(
        kind="coding", rows_file=SAMPLES, row_model=SampleRow, units=suite.tasks,
        passes=params.samples, pass_field="sample",
        comparable=comparable_settings(suite, endpoint, params),
        manifest=lambda: build_manifest(run_dir.name, suite, endpoint, params),
        limits=limits_of(params),
        transport=Transport(params.concurrency, params.timeout_s, params.max_tries),
        ask=ask, prepare=prepare)
    try:
        result = await run_model(spec, endpoint, run_dir, progress or NullProgress())
        if result.status != "aborted":
            assert revision is not None
            swept = await grade_remaining(revision, run_dir, read_manifest(run_dir), tasks)
            result.infra_errors += swept.grader_errors
            if swept.grader_errors and result.status == "complete":
                result.status = "infra_errors"
        return result
    finally:
        if revision is not None:
            revision.close()


__all__ = ["INSTRUCTIONS", "SAMPLES", "SUITE_SNAPSHOT", "CodingParams", "grade_answer",
           "messages_for", "run_coding", "user_prompt"]
