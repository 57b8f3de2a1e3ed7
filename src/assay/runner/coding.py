"""Running a coding suite: several samples per task, each answer graded in the sandbox.

One row per task and sample goes to ``samples.jsonl`` as soon as it is graded. Model calls run
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

from assay.grading.diff import grade_diff
from assay.grading.extract import extract_code
from assay.grading.unit import Isolation, Verdict, run_unit
from assay.models.client import ChatClient, TransportError
from assay.records.io import atomic_write_text
from assay.records.layout import SAMPLES, SUITE_SNAPSHOT
from assay.records.manifest import tool_identity, utc_now
from assay.runner.engine import (
    NullProgress,
    Progress,
    RunResult,
    done_keys,
    drive,
    open_run_dir,
    pending,
)
from assay.runner.narrow import Endpoint
from assay.sandbox import Limits
from assay.suites.coding import CodingSuite, CodingTask
from assay.suites.prompts import INSTRUCTIONS, user_prompt
from assay.suites.prompts import coding_messages as messages_for

MANIFEST_SCHEMA = "assay.coding.manifest/1"


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

    def limits(self) -> Limits:
        # CPU time is capped at the wall limit: a busy loop cannot outlive its budget even if
        # the watchdog is starved.
        return Limits(wall_seconds=self.exec_timeout_s, memory_mib=self.memory_mib,
                      pids=self.pids, cpu_seconds=max(1, int(self.exec_timeout_s + 0.999)))


def grade_answer(task: CodingTask, answer: str | None, params: CodingParams,
                 record_dir: Path | None = None) -> tuple[str, Verdict]:
    """The code extracted from an answer and its verdict; shared by runs and `suite check`."""
    if task.type == "diff":
        code = extract_code(answer, "diff")
        return code, grade_diff(task, code, limits=params.limits(), isolation=params.isolation)
    code = extract_code(answer, task.language)
    if task.type == "rubric":
        return code, Verdict(None, "needs_human_grade", {})
    return code, run_unit(task, code, limits=params.limits(), isolation=params.isolation,
                          record_dir=record_dir)


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
                        "note": "requested; what each execution actually got is in its row "
                                "(exec.limits_applied)"}}


def build_manifest(run_id: str, suite: CodingSuite, endpoint: Endpoint,
                   params: CodingParams) -> dict[str, Any]:
    from assay.models.client import redact_url

    counts: dict[str, int] = {}
    for t in suite.tasks:
        counts[t.type] = counts.get(t.type, 0) + 1
    return {
        "schema": MANIFEST_SCHEMA,
        "kind": "coding",
        "run_id": run_id,
        "assay": tool_identity(),
        "suite": {"name": suite.name, "path": str(suite.path.resolve()),
                  "tasks_sha256": suite.sha256, "n_tasks": len(suite.tasks),
                  "types": counts, "task_ids": [t.id for t in suite.tasks]},
        "model": {"requested": endpoint.model, "builtin": endpoint.builtin,
                  "base_url": redact_url(endpoint.base_url), "api_key_env": endpoint.api_key_env,
                  "served_models": [], "system_fingerprints": []},
        "parameters": {"samples": params.samples, "temperature": params.temperature,
                       "max_tokens": params.max_tokens, "instructions": INSTRUCTIONS},
        "isolation": params.isolation,
        "not_isolated": params.isolation == "none",
        "limits": limits_of(params),
        "comparable": comparable_settings(suite, endpoint, params),
        "started_at": utc_now(),
        "ended_at": None,
        "warnings": [],
        "sessions": [],
    }


async def sample_task(client: ChatClient, task: CodingTask, sample: int, params: CodingParams,
                      exec_slots: asyncio.Semaphore, run_dir: Path) -> dict[str, Any]:
    row: dict[str, Any] = {"id": task.id, "sample": sample, "type": task.type,
                           "language": task.language}
    try:
        completion = await client.complete(messages_for(task), temperature=params.temperature,
                                           max_tokens=params.max_tokens)
    except TransportError as exc:
        row.update({"raw": None, "code": None, "passed": None, "reason": "infra_error",
                    "latency_ms": None, "usage": None, "served_model": None,
                    "error": str(exc), "tries": [t.to_record() for t in exc.tries]})
        if exc.fatal:
            row["fatal"] = True
        return row
    record_dir = run_dir / "exec" / task.id / str(sample)
    async with exec_slots:
        code, verdict = await asyncio.to_thread(grade_answer, task, completion.content, params,
                                                record_dir)
    row.update({
        "raw": completion.content,
        "code": code,
        "passed": verdict.passed,
        "reason": verdict.reason,
        "latency_ms": round(completion.latency_ms, 1),
        "usage": completion.usage,
        "served_model": completion.served_model,
        "system_fingerprint": completion.system_fingerprint,
        "finish_reason": completion.finish_reason,
        "error": verdict.infra_error,
        "exec": verdict.detail or None,
        "tries": [t.to_record() for t in completion.tries],
    })
    return row


async def run_coding(suite: CodingSuite, endpoint: Endpoint, params: CodingParams,
                     run_dir: Path, progress: Progress | None = None) -> RunResult:
    progress = progress or NullProgress()
    manifest = open_run_dir(
        run_dir, "coding", comparable_settings(suite, endpoint, params),
        lambda: build_manifest(run_dir.name, suite, endpoint, params), limits_of(params))
    snapshot = run_dir / SUITE_SNAPSHOT
    if not snapshot.exists():
        atomic_write_text(snapshot, suite.path.read_text(encoding="utf-8"))
    rows_path = run_dir / SAMPLES
    wanted = {(t.id, s) for t in suite.tasks for s in range(params.samples)}
    done = done_keys(rows_path, lambda r: (r["id"], int(r["sample"]))) & wanted
    client = ChatClient(endpoint.base_url, endpoint.api_key, endpoint.model,
                        timeout_s=params.timeout_s, max_tries=params.max_tries)
    exec_slots = asyncio.Semaphore(params.exec_concurrency)

    async def work(item: tuple[CodingTask, int]) -> dict[str, Any]:
        return await sample_task(client, item[0], item[1], params, exec_slots, run_dir)

    try:
        return await drive(pending(suite.tasks, params.samples, done), work, rows_path=rows_path,
                           manifest=manifest, progress=progress, total=len(wanted),
                           already_done=len(done), concurrency=params.concurrency)
    finally:
        await client.aclose()


__all__ = ["INSTRUCTIONS", "SAMPLES", "SUITE_SNAPSHOT", "messages_for", "user_prompt"]
