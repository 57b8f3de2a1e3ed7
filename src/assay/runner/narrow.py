"""Running a narrow-task suite: one chat completion per case and repeat, rows streamed to disk.

The raw rows are the run's state. A case/repeat is done when it has a row without ``error``;
resuming re-reads the rows (dropping a line torn by a crash) and asks only for what is missing,
so a ``kill -9`` loses at most the answers in flight and never duplicates a finished row.
Cases are pulled lazily by a fixed pool of workers, so memory stays flat however large the suite.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.grading.labels import parse_answer
from assay.models.client import ChatClient, Completion, TransportError, redact_url
from assay.records.layout import RAW_PREDICTIONS, run_stamp
from assay.records.manifest import tool_identity, utc_now
from assay.runner.engine import (
    NullProgress,
    Progress,
    RunConflict,
    RunResult,
    done_keys,
    drive,
    open_run_dir,
    pending,
)
from assay.suites.cases import Case, NarrowSuite
from assay.suites.prompts import format_retry, narrow_messages

MANIFEST_SCHEMA = "assay.narrow.manifest/1"


@dataclass(frozen=True)
class Endpoint:
    base_url: str
    model: str
    api_key: str = field(repr=False)  # never recorded anywhere
    api_key_env: str | None = None
    builtin: bool = False


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
    """What must be identical for rows written by two sessions to belong to one run."""
    return {
        "cases_sha256": suite.cases_sha256,
        "prompt_sha256": suite.prompt_sha256,
        "labels": list(suite.labels),
        "output_field": suite.config.output_field,
        "split": params.split,
        "model": endpoint.model,
        "temperature": params.temperature,
        "repeats": params.repeats,
        "max_tokens": params.max_tokens,
    }


def build_manifest(run_id: str, suite: NarrowSuite, endpoint: Endpoint,
                   params: NarrowParams) -> dict[str, Any]:
    return {
        "schema": MANIFEST_SCHEMA,
        "kind": "narrow",
        "run_id": run_id,
        "assay": tool_identity(),
        "suite": {
            "name": suite.name,
            "path": str(suite.root.resolve()),
            "cases_file": str(suite.cases_path.relative_to(suite.root)),
            "split": params.split,
            "n_cases": len(suite.cases),
            "cases_sha256": suite.cases_sha256,
            "prompt_sha256": suite.prompt_sha256,
            "train_sha256": suite.train_sha256,
            "labels": list(suite.labels),
            "labels_source": suite.labels_source,
            "output_field": suite.config.output_field,
        },
        "model": {
            "requested": endpoint.model,
            "builtin": endpoint.builtin,
            "base_url": "(built-in, local)" if endpoint.builtin else redact_url(endpoint.base_url),
            "api_key_env": endpoint.api_key_env,
            "served_models": [],
            "system_fingerprints": [],
        },
        "parameters": {
            "temperature": params.temperature,
            "repeats": params.repeats,
            "max_tokens": params.max_tokens,
            "format_retries": 1,
        },
        "limits": limits_of(params),
        "comparable": comparable_settings(suite, endpoint, params),
        "started_at": utc_now(),
        "ended_at": None,
        "warnings": [],
        "sessions": [],
    }


def _sum_usage(answers: list[Completion]) -> dict[str, Any] | None:
    """Token usage over every answer of a case; ``None`` when no answer reported any, and an
    ``incomplete`` flag when only some did: a missing figure is unknown, not zero."""
    have = [a.usage for a in answers if a.usage]
    if not have:
        return None
    total: dict[str, Any] = {}
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        vals = [u.get(key) for u in have]
        nums = [v for v in vals if isinstance(v, int | float)]
        total[key] = sum(nums) if len(nums) == len(vals) else None
    if len(have) < len(answers) or any(v is None for v in total.values()):
        total["incomplete"] = True
    return total


async def answer_case(client: ChatClient, suite: NarrowSuite, case: Case, repeat: int,
                      params: NarrowParams) -> dict[str, Any]:
    """One case, one repeat: an answer, at most one format retry, and the row that records it."""
    row: dict[str, Any] = {"id": case.id, "repeat": repeat, "expected": case.expected}
    labels = suite.labels
    field_name = suite.config.output_field
    messages = narrow_messages(suite, case)
    answers: list[Completion] = []
    tries: list[dict[str, Any]] = []
    error: str | None = None
    parsed = None
    first_reason: str | None = None
    try:
        first = await client.complete(messages, temperature=params.temperature,
                                      max_tokens=params.max_tokens)
        answers.append(first)
        tries += [t.to_record() for t in first.tries]
        parsed = parse_answer(first.content, output_field=field_name, labels=labels,
                              refusal=first.refusal)
        if not parsed.valid:
            first_reason = parsed.reason
            retry = format_retry(messages, first.content, field_name, labels)
            second = await client.complete(retry, temperature=params.temperature,
                                           max_tokens=params.max_tokens)
            answers.append(second)
            tries += [t.to_record() for t in second.tries]
            parsed = parse_answer(second.content, output_field=field_name, labels=labels,
                                  refusal=second.refusal)
    except TransportError as exc:
        tries += [t.to_record() for t in exc.tries]
        error = str(exc)
        row["fatal"] = exc.fatal or None
    last = answers[-1] if answers else None
    row.update({
        "raw": last.content if last else None,
        "raws": [a.content for a in answers],
        "label": parsed.label if (parsed and error is None) else "",
        "correct": (parsed.label == case.expected) if (parsed and error is None) else None,
        "attempts": len(answers),
        "invalid_reason": parsed.reason if (parsed and error is None) else None,
        "first_invalid_reason": first_reason,
        "latency_ms": round(sum(a.latency_ms for a in answers), 1) if error is None else None,
        "usage": _sum_usage(answers),
        "served_model": last.served_model if last else None,
        "system_fingerprint": last.system_fingerprint if last else None,
        "finish_reason": last.finish_reason if last else None,
        "error": error,
        "tries": tries,
    })
    if row.get("fatal") is None:
        row.pop("fatal", None)
    return row


def limits_of(params: NarrowParams) -> dict[str, Any]:
    return {"concurrency": params.concurrency, "request_timeout_s": params.timeout_s,
            "transport_max_tries": params.max_tries}


async def run_narrow(suite: NarrowSuite, endpoint: Endpoint, params: NarrowParams,
                     run_dir: Path, progress: Progress | None = None) -> RunResult:
    """Run (or resume) a suite into ``run_dir``; the caller has validated everything."""
    progress = progress or NullProgress()
    manifest = open_run_dir(
        run_dir, "narrow", comparable_settings(suite, endpoint, params),
        lambda: build_manifest(run_dir.name, suite, endpoint, params), limits_of(params))
    rows_path = run_dir / RAW_PREDICTIONS
    wanted = {(c.id, r) for c in suite.cases for r in range(params.repeats)}
    done = done_keys(rows_path, lambda r: (r["id"], int(r["repeat"]))) & wanted
    client = ChatClient(endpoint.base_url, endpoint.api_key, endpoint.model,
                        timeout_s=params.timeout_s, max_tries=params.max_tries)

    async def work(item: tuple[Case, int]) -> dict[str, Any]:
        return await answer_case(client, suite, item[0], item[1], params)

    try:
        return await drive(pending(suite.cases, params.repeats, done), work, rows_path=rows_path,
                           manifest=manifest, progress=progress, total=len(wanted),
                           already_done=len(done), concurrency=params.concurrency)
    finally:
        await client.aclose()


__all__ = ["RAW_PREDICTIONS", "Endpoint", "NarrowParams", "RunConflict", "RunResult",
           "run_narrow"]
