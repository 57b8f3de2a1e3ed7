"""The one run loop (runner/engine.py) driven by a spec of its own, against a real local HTTP
server: narrow and coding runs are two such specs, and anything else that asks a model per
unit of work can be a third."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from support.scripted_server import Answer, ScriptedServer, Status

from assay.errors import RunConflict
from assay.models.client import ChatClient, TransportError
from assay.records.base import Record
from assay.runner.engine import Endpoint, RunSpec, Transport, model_manifest, run_model


@dataclass(frozen=True)
class Word:
    id: str


class EchoRow(Record):
    schema_name: ClassVar[str] = "test.echo.row"

    id: str
    """The word."""
    n: int
    """The pass."""
    answer: str | None = None
    """What came back."""
    error: str | None = None
    """Set when nothing came back."""


def _spec(endpoint: Endpoint, run_dir: Path, words: list[str], passes: int,
          seen: list[dict[str, Any]], temperature: float = 0.0) -> RunSpec[Word]:
    comparable = {"words": words, "temperature": temperature}

    async def ask(client: ChatClient, word: Word, n: int) -> dict[str, Any]:
        try:
            c = await client.complete([{"role": "user", "content": word.id}],
                                      temperature=temperature)
        except TransportError as exc:
            return EchoRow(id=word.id, n=n, error=str(exc)).model_dump()
        return EchoRow(id=word.id, n=n, answer=c.content).model_dump()

    async def after(row: dict[str, Any]) -> dict[str, Any]:
        seen.append(row)
        return row

    return RunSpec(
        kind="echo", rows_file="rows.jsonl", row_model=EchoRow, units=[Word(w) for w in words],
        passes=passes, pass_field="n", comparable=comparable,
        manifest=lambda: model_manifest(
            schema="test.echo.manifest/1", kind="echo", run_id=run_dir.name, endpoint=endpoint,
            suite={"words": words}, parameters={"passes": passes}, limits={},
            comparable=comparable, record_schemas={"rows.jsonl": EchoRow.schema_id()}),
        limits={}, transport=Transport(concurrency=2, timeout_s=5, max_tries=1), ask=ask,
        after=after)


def test_a_spec_of_its_own_runs_resumes_and_refuses_a_changed_run(tmp_path: Path) -> None:
    words = ["alpha", "beta", "gamma"]
    run = tmp_path / "run"
    with ScriptedServer() as server:
        server.handler = lambda req, n: (Status(503) if req.case_input == "beta"
                                         else Answer(f"echo {req.case_input}"))
        endpoint = Endpoint(server.base_url, "m", "sk-engine-secret-42")
        seen: list[dict[str, Any]] = []
        res = asyncio.run(run_model(_spec(endpoint, run, words, 2, seen), endpoint, run))
        assert res.status == "infra_errors" and res.rows_written == 6 and res.infra_errors == 2
        assert len(seen) == 6  # ``after`` saw every row once it was on disk
        rows = [json.loads(line) for line in (run / "rows.jsonl").read_text().splitlines()]
        assert sorted((r["id"], r["n"], r["answer"]) for r in rows if not r["error"]) == [
            ("alpha", 0, "echo alpha"), ("alpha", 1, "echo alpha"),
            ("gamma", 0, "echo gamma"), ("gamma", 1, "echo gamma")]
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest["kind"] == "echo" and manifest["model"]["base_url"] == server.base_url
        assert "sk-engine-secret-42" not in json.dumps(manifest)

        # resume: only the two infra-error units are asked again
        server.handler = lambda req, n: Answer(f"echo {req.case_input}")
        before = len(server.chat_requests())
        seen.clear()
        res = asyncio.run(run_model(_spec(endpoint, run, words, 2, seen), endpoint, run))
        assert res.status == "complete" and res.rows_written == 2
        assert [r.case_input for r in server.chat_requests()[before:]] == ["beta", "beta"]
        sessions = json.loads((run / "manifest.json").read_text())["sessions"]
        assert [s["status"] for s in sessions] == ["infra_errors", "complete"]

        with pytest.raises(RunConflict, match="temperature"):
            asyncio.run(run_model(_spec(endpoint, run, words, 2, [], temperature=0.5),
                                  endpoint, run))
