"""ATIF, the Agent Trajectory Interchange Format (Harbor's RFC 0001), as assay writes and reads
it: ``trajectory.atif.json`` beside a trial record.

Why assay's own models rather than the ``atif`` package: the runner writes a trajectory after
every trial and reads one an agent wrote, so neither may depend on an optional package; the
tests validate what is written against the ``atif`` package itself (``tests/test_atif.py``),
which keeps these models honest. They follow the RFC's field names and rules for the version in
:data:`ATIF_VERSION` (objects closed to unknown keys, step ids 1, 2, 3, …, agent-only fields on
agent steps only, every observation's ``source_call_id`` naming a tool call of its step);
multimodal content parts are read but assay writes text only.

An unknown figure is left out (``None``), never a zero: the reason goes into ``extra``.
"""

from __future__ import annotations

import json
import os
import stat
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

#: The ATIF version written: the newest 1.x the ``atif`` package the tests validate with knows.
ATIF_VERSION = "ATIF-v1.8"
#: The file beside ``trial.json`` (and, written by an agent, under ``agent/``).
ATIF_FILE = "trajectory.atif.json"
#: The most bytes of an agent's own trajectory that are read.
MAX_ATIF_BYTES = 64 << 20


class _Closed(BaseModel):
    """ATIF's objects refuse keys the RFC does not name (custom data goes into ``extra``)."""

    model_config = ConfigDict(extra="forbid")


class AtifContentPart(_Closed):
    """One part of a multimodal message (v1.6+): text, or a reference to an image or audio."""

    type: Literal["text", "image", "audio"]
    text: str | None = None
    source: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _payload(self) -> AtifContentPart:
        if (self.type == "text") != (self.text is not None) or \
                (self.type == "text") == (self.source is not None):
            raise ValueError(f"a {self.type!r} part holds text only when it is text, and a "
                             "source only when it is not")
        return self


Content = str | list[AtifContentPart]


class AtifAgent(_Closed):
    """The agent system that produced the trajectory."""

    name: str
    version: str
    model_name: str | None = None
    tool_definitions: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None


class AtifToolCall(_Closed):
    """One tool call of an agent step; its result is the observation naming its id."""

    tool_call_id: str
    function_name: str
    arguments: dict[str, Any]
    extra: dict[str, Any] | None = None


class AtifObservationResult(_Closed):
    """One result: of the tool call ``source_call_id`` names, or of a non-tool event."""

    source_call_id: str | None = None
    content: Content | None = None
    subagent_trajectory_ref: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None


class AtifObservation(_Closed):
    results: list[AtifObservationResult]


class AtifMetrics(_Closed):
    """One step's model figures: prompt tokens include the cached ones."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    extra: dict[str, Any] | None = None


class AtifFinalMetrics(_Closed):
    """The whole trajectory's figures."""

    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_cost_usd: float | None = None
    total_steps: int | None = None
    extra: dict[str, Any] | None = None


_AGENT_ONLY = ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics")


class AtifStep(_Closed):
    """One turn: a system prompt, a user message, or one agent turn with its observation."""

    step_id: int = Field(ge=1)
    timestamp: str | None = None
    source: Literal["system", "user", "agent"]
    model_name: str | None = None
    reasoning_effort: str | float | None = None
    message: Content
    reasoning_content: str | None = None
    tool_calls: list[AtifToolCall] | None = None
    observation: AtifObservation | None = None
    metrics: AtifMetrics | None = None
    extra: dict[str, Any] | None = None
    llm_call_count: int | None = Field(default=None, ge=0)
    is_copied_context: bool | None = None

    @field_validator("timestamp")
    @classmethod
    def _iso(cls, v: str | None) -> str | None:
        if v is not None:
            datetime.fromisoformat(v.replace("Z", "+00:00"))  # ValueError names the value
        return v

    @model_validator(mode="after")
    def _rules(self) -> AtifStep:
        if self.source != "agent":
            for name in _AGENT_ONLY:
                if getattr(self, name) is not None:
                    raise ValueError(f"step {self.step_id}: {name} is for agent steps only")
        if self.source == "agent" and self.llm_call_count == 0 and (
                self.metrics is not None or self.reasoning_content is not None):
            raise ValueError(f"step {self.step_id}: no model call, yet metrics or reasoning")
        ids = {t.tool_call_id for t in self.tool_calls or []}
        for r in (self.observation.results if self.observation else []):
            if r.source_call_id is not None and r.source_call_id not in ids:
                raise ValueError(f"step {self.step_id}: observation for {r.source_call_id!r},"
                                 " which no tool call of the step has")
        return self


class AtifTrajectory(_Closed):
    """The document: the agent, its steps in order, final figures, and ``extra``."""

    schema_version: str
    session_id: str | None = None
    trajectory_id: str | None = None
    agent: AtifAgent
    steps: list[AtifStep]
    notes: str | None = None
    final_metrics: AtifFinalMetrics | None = None
    continued_trajectory_ref: str | None = None
    extra: dict[str, Any] | None = None
    subagent_trajectories: list[AtifTrajectory] | None = None

    @model_validator(mode="after")
    def _ordered(self) -> AtifTrajectory:
        if not self.schema_version.startswith("ATIF-v1."):
            raise ValueError(f"schema_version {self.schema_version!r}: assay reads ATIF 1.x")
        for i, step in enumerate(self.steps, start=1):
            if step.step_id != i:
                raise ValueError(f"steps[{i - 1}].step_id is {step.step_id}, expected {i}")
        seen: set[str] = set()
        for i, sub in enumerate(self.subagent_trajectories or []):
            if sub.trajectory_id is None or sub.trajectory_id in seen:
                raise ValueError(f"subagent_trajectories[{i}]: a trajectory_id of its own "
                                 "is required")
            seen.add(sub.trajectory_id)
        return self

    def as_json(self) -> dict[str, Any]:
        """The document as written: unset and unknown fields left out, never null."""
        return self.model_dump(mode="json", exclude_none=True)


def read_atif(path: Path) -> tuple[AtifTrajectory | None, str | None]:
    """An ATIF document from a file, validated: ``(document, None)``, or ``(None, why)`` naming
    the file and the field. Never raises for what the file holds (an agent wrote it: data, not
    instructions); a link, a non-regular file or one over :data:`MAX_ATIF_BYTES` is refused."""
    try:
        st = path.lstat()
    except OSError as exc:
        return None, f"{path}: cannot be read ({exc.strerror or exc})"
    if not stat.S_ISREG(st.st_mode):
        return None, f"{path}: not a regular file"
    if st.st_size > MAX_ATIF_BYTES:
        return None, f"{path}: {st.st_size} bytes, over the {MAX_ATIF_BYTES} read"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read(MAX_ATIF_BYTES + 1)
    except OSError as exc:
        return None, f"{path}: cannot be read ({exc.strerror or exc})"
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # not UTF-8 JSON, or nested past the recursion limit
        data = None
    if not isinstance(data, dict):
        return None, f"{path}: not a JSON object"
    try:
        return AtifTrajectory.model_validate(data), None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "(document)"
        return None, (f"{path}: not a valid ATIF trajectory: {where}: {first.get('msg')}"
                      + (f" ({exc.error_count() - 1} more problems)"
                         if exc.error_count() > 1 else ""))
