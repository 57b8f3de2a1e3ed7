"""``builtin/replay`` scripts: the turns a rehearsal model answers with, per task, checked before
anything runs.

A script is a list of turns, each a message, one or more tool calls (a function name and JSON
arguments), or both; and a ``final`` message, answered once the turns run out. Where it lives
(``model: {name: builtin/replay, script: PATH}`` in an arm, relative to the experiment file):

- a **folder** with one script per task: ``PATH/<task id>.yaml`` (or ``.yml``, ``.jsonl``);
- a **YAML file** with ``turns:`` (every task answers the same), or ``tasks: {<task id>:
  {turns: [...], final: ...}}``;
- a **JSONL file**: one turn per line, the same for every task; a line ``{"final": "..."}``
  sets the final message.

A turn is ``{message: TEXT}``, ``{tool_call: {name: bash, arguments: {command: "..."}}}``,
``{tool_calls: [...]}``, or a message with tool calls. Every problem names file, line and field;
a task of the experiment without a script is a problem too, found before the first trial.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from assay.suites.errors import Problem, SuiteError
from assay.suites.limits import REPLAY_FILE_MAX_BYTES
from assay.suites.textfile import read_text
from assay.suites.yamlfile import key_lines, line_of, load_mapping

REPLAY_MODEL = "builtin/replay"
DEFAULT_FINAL = "The scripted turns are over: nothing more to do."
_SUFFIXES = (".yaml", ".yml", ".jsonl")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class ToolCall(_Strict):
    """One function call the model makes."""

    name: str = Field(min_length=1)
    """The tool's function name, as the agent declared it (e.g. ``bash``)."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """Its JSON arguments."""
    id: str | None = Field(default=None, min_length=1)
    """The call's id; default ``call_<turn>_<n>``."""


class Turn(_Strict):
    """One answer of the model."""

    message: str | None = None
    """Text of the answer."""
    tool_call: ToolCall | None = None
    """One tool call (shorthand for a one-item ``tool_calls``)."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    """Tool calls, in order."""

    @model_validator(mode="after")
    def _one_of(self) -> Turn:
        if self.tool_call is not None:
            if self.tool_calls:
                raise ValueError("give tool_call or tool_calls, not both")
            self.tool_calls = [self.tool_call]
            self.tool_call = None
        if self.message is None and not self.tool_calls:
            raise ValueError("a turn needs a message, a tool_call or tool_calls")
        return self


class Script(_Strict):
    """One task's script."""

    turns: list[Turn] = Field(min_length=1)
    """The answers, in order: the n-th answer of a conversation is turn n."""
    final: str = DEFAULT_FINAL
    """What the model says once the turns run out."""


@dataclass(frozen=True)
class ReplayBook:
    """The scripts of one arm, by task id, and the digest of every file read for them (part of
    the arm's identity: a changed script is a changed experiment)."""

    scripts: dict[str, Script]
    sha256: str
    source: Path


def load_replay(path: Path, task_ids: Iterable[str]) -> ReplayBook:
    """The script of every task in ``task_ids`` from ``path``, or a ``SuiteError`` naming
    every problem found (file, line, field)."""
    path = Path(path)
    ids = sorted(task_ids)
    digest = hashlib.sha256()
    problems: list[Problem] = []
    scripts: dict[str, Script] = {}
    if path.is_dir():
        for tid in ids:
            found = [path / f"{tid}{s}" for s in _SUFFIXES if (path / f"{tid}{s}").is_file()]
            if not found:
                problems.append(Problem(path, None, None, f"no script for task {tid!r}: add "
                                        f"{tid}.yaml or {tid}.jsonl"))
                continue
            if len(found) > 1:
                problems.append(Problem(path, None, None, f"task {tid!r} has two scripts: "
                                        f"{', '.join(p.name for p in found)}"))
                continue
            script = _read_one(found[0], digest, problems)
            if script is not None:
                scripts[tid] = script
    elif path.is_file():
        if path.suffix == ".jsonl":
            script = _read_one(path, digest, problems)
            scripts = {tid: script for tid in ids} if script is not None else {}
        elif path.suffix in (".yaml", ".yml"):
            scripts = _read_yaml_book(path, ids, digest, problems)
        else:
            problems.append(Problem(path, None, None, "a replay script is a .yaml, .yml or "
                                    ".jsonl file, or a folder of them"))
    else:
        problems.append(Problem(path, None, None, "replay script not found"))
    if problems:
        raise SuiteError(problems)
    return ReplayBook(scripts, digest.hexdigest(), path)


def _text(path: Path, digest: Any, problems: list[Problem]) -> str | None:
    """The file's text, bounded like every input (``suites/limits.py``), or None with the
    problem recorded."""
    try:
        raw, text = read_text(path, limit=REPLAY_FILE_MAX_BYTES, what="the replay script")
    except SuiteError as exc:
        problems += exc.problems
        return None
    digest.update(path.name.encode() + b"\0" + raw + b"\0")
    return text


def _read_one(path: Path, digest: Any, problems: list[Problem]) -> Script | None:
    text = _text(path, digest, problems)
    if text is None:
        return None
    if path.suffix == ".jsonl":
        return _read_jsonl(path, text, problems)
    try:
        data = load_mapping(path, text)
    except SuiteError as exc:
        problems += exc.problems
        return None
    return _validate(path, text, data, (), problems)


def _read_yaml_book(path: Path, ids: list[str], digest: Any,
                    problems: list[Problem]) -> dict[str, Script]:
    text = _text(path, digest, problems)
    if text is None:
        return {}
    try:
        data = load_mapping(path, text)
    except SuiteError as exc:
        problems += exc.problems
        return {}
    if "tasks" not in data:
        script = _validate(path, text, data, (), problems)
        return {tid: script for tid in ids} if script is not None else {}
    extra = sorted(set(data) - {"tasks"})
    lines = key_lines(text, items=True)
    if extra:
        problems.append(Problem(path, line_of(lines, (extra[0],)), extra[0],
                                "a file with tasks: holds nothing else"))
    tasks = data["tasks"]
    if not isinstance(tasks, dict):
        problems.append(Problem(path, line_of(lines, ("tasks",)), "tasks",
                                "expected a mapping of task id to script"))
        return {}
    out: dict[str, Script] = {}
    for tid in ids:
        if tid not in tasks:
            problems.append(Problem(path, line_of(lines, ("tasks",)), "tasks",
                                    f"no script for task {tid!r}"))
            continue
        script = _validate(path, text, tasks[tid], ("tasks", str(tid)), problems)
        if script is not None:
            out[tid] = script
    return out


def _validate(path: Path, text: str, data: Any, prefix: tuple[str, ...],
              problems: list[Problem]) -> Script | None:
    try:
        return Script.model_validate(data)
    except ValidationError as exc:
        lines = key_lines(text, items=True)
        for e in exc.errors():
            loc = (*prefix, *(str(x) for x in e["loc"]))
            problems.append(Problem(path, line_of(lines, loc), ".".join(loc) or None,
                                    e["msg"]))
        return None


def _read_jsonl(path: Path, text: str, problems: list[Problem]) -> Script | None:
    turns: list[Turn] = []
    final = DEFAULT_FINAL
    before = len(problems)
    index = 0  # the turn a line is, valid or not, so a field names the script's own turn
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            index += 1  # meant as a turn: the turns after it keep their numbers
            problems.append(Problem(path, lineno, None, f"not JSON: {exc}"))
            continue
        if isinstance(obj, dict) and set(obj) == {"final"}:
            if not isinstance(obj["final"], str):
                problems.append(Problem(path, lineno, "final", "must be a string"))
            else:
                final = obj["final"]
            continue
        index += 1
        try:
            turns.append(Turn.model_validate(obj))
        except ValidationError as exc:
            for e in exc.errors():
                field = ".".join(str(x) for x in e["loc"]) or None
                problems.append(Problem(path, lineno, f"turns.{index - 1}" + (
                    f".{field}" if field else ""), e["msg"]))
    if len(problems) > before:
        return None
    if not turns:
        problems.append(Problem(path, None, "turns", "a script needs at least one turn"))
        return None
    return Script(turns=turns, final=final)
