"""One agent trial, opened: everything ``assay trial show`` prints and a trial page draws, read
from the attempt directory alone (and the task bundle it names, for the starting tree).

- the instruction (the bundle's instruction file);
- the change the agent delivered: the frozen artifact (``artifact.json`` / ``artifact.tar``)
  against the bundle's starting tree, rebuilt the verifier's way (``judge_material``); text
  files as a unified diff, binary files listed, and changed paths the verifier did not carry
  over (caches, bytecode, links it refuses) listed as excluded;
- each check of the newest grade (``grades/<revision>.json``): its command, outcome and the tail
  of its output;
- the steps: from the ATIF trajectory a ``command:`` agent wrote itself when it is valid
  (``agents/atif_file.py``), from the agent's own stream where the adapter parsed one (Qwen
  Code and Claude Code ``stream-json``, mini-swe-agent's ``trajectory.json``), else from the
  gateway transcript (``records/transcript.py``); each step is one model turn (its text and
  tool calls) and the tool results the agent sent back, with that call's tokens and latency
  from the ledger;
- the ledger totals and the stage timings of ``trial.json``.

Every text shown is capped (``MAX_TEXT``) and says so when cut; unknown figures stay None.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.records.io import iter_rows, read_json_file
from assay.records.ledger import ledger_totals
from assay.records.transcript import load_transcript
from assay.report.check_summary import integrity_lines, summarize
from assay.report.conditions import attempt_refusals

MAX_TEXT = 4000
MAX_DIFF = 200_000
MAX_STEPS = 400
#: changed paths listed one by one (a tree of caches can have thousands); the rest are counted
MAX_LISTED = 300
TAIL_LINES = 25


def cap(text: str, limit: int = MAX_TEXT) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[… cut at {limit} of {len(text)} characters]"


@dataclass
class ToolCall:
    name: str
    arguments: str
    #: the call's id in the agent's stream or the API's answer (what its result names)
    id: str | None = None
    #: the arguments as the agent sent them, parsed (an ATIF export needs the object)
    value: Any = None


@dataclass
class Step:
    """One model turn and what came back from the tools it asked for."""

    n: int
    text: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    results: list[str] = field(default_factory=list)
    #: the tool call each result answers (its id), None where the result names none
    result_ids: list[str | None] = field(default_factory=list)
    input_tokens: int | None = None
    output_tokens: int | None = None
    latency_ms: float | None = None
    status: int | None = None
    error: str | None = None
    #: the ledger row of this step's model call (its ``seq`` and whole figures), when known
    ledger_row: dict[str, Any] | None = None

    def add_result(self, text: str, call_id: Any = None) -> None:
        self.results.append(text)
        self.result_ids.append(call_id if isinstance(call_id, str) else None)

    def signature(self) -> tuple[Any, ...]:
        """What the agent did at this step, for telling where two trials part ways."""
        return (tuple((t.name, t.arguments) for t in self.tool_calls),
                self.text.strip() if not self.tool_calls else "")


@dataclass
class FileChange:
    path: str
    how: str  # added | modified | deleted
    diff: str | None = None  # unified diff of a text file
    note: str | None = None  # binary, excluded, unreadable


@dataclass
class Check:
    name: str
    outcome: str
    required: bool
    command: str | None
    reason: str | None
    exit_code: int | None
    output_tail: str
    #: the task's real tests, the first real failure, the canaries on one line
    #: (``check_summary.py``): what a display leads with, before the raw output
    summary: tuple[str, ...] = ()


@dataclass
class TrialView:
    attempt_dir: Path
    trial: dict[str, Any]
    instruction: str | None
    changes: list[FileChange]
    change_note: str | None
    grade: dict[str, Any] | None
    grade_revision: str | None
    checks: list[Check]
    steps: list[Step]
    steps_source: str
    steps_note: str | None
    ledger: dict[str, Any] | None
    transcript_state: str
    timings: list[tuple[str, float | None, str]]
    #: what the gateway refused of this attempt, and its 429s (None: nothing)
    refusals: str | None = None

    @property
    def title(self) -> str:
        return str(self.trial.get("trial_id", self.attempt_dir.name))

    @property
    def outcome(self) -> str:
        if self.grade is None:
            return str(self.trial.get("status") or "not graded")
        if self.grade.get("accepted"):
            return "accepted"
        return f"rejected: {self.grade.get('failure_code') or 'unknown'}"


def resolve_attempt(path: Path) -> Path:
    """The attempt directory for ``path``: itself when it holds ``trial.json``, else the last
    attempt (``aN`` with the highest N) of the trial directory it names."""
    if (path / "trial.json").is_file():
        return path
    attempts = sorted((p for p in path.glob("a*") if p.name[1:].isdigit()
                       and (p / "trial.json").is_file()), key=lambda p: int(p.name[1:]))
    if not attempts:
        raise FileNotFoundError(f"{path}: no trial.json here nor in an attempt folder (aN/)")
    return attempts[-1]


def load_trial_view(path: Path) -> TrialView:
    adir = resolve_attempt(path)
    trial = read_json_file(adir / "trial.json")
    bundle, bundle_note = _bundle(trial)
    instruction = None
    # what the agent was told, as recorded with the trial (the task's instruction and the
    # generated rules); a trial recorded before that: the bundle's instruction file
    for source in (adir / "instruction.md",
                   None if bundle is None else bundle.instruction_path):
        if source is None or not source.is_file():
            continue
        try:
            instruction = cap(source.read_text(encoding="utf-8"), 20_000)
            break
        except (OSError, UnicodeDecodeError):
            instruction = None
    changes, change_note = _changes(bundle, adir, trial, bundle_note)
    grade, revision = _grade(adir)
    checks = _checks(grade)
    ledger_path = adir / "model_calls.jsonl"
    rows = ledger_rows(adir)
    steps, source, note = _steps(adir, rows)
    ledger = ledger_totals(ledger_path) if ledger_path.is_file() else None
    if (adir / "transcript.jsonl").is_file():
        tstate = "kept"
    elif any(r.get("transcript") == "off" for r in rows):
        tstate = "off (transcripts: false in the experiment or the task)"
    else:
        tstate = "none (no model call went through the gateway)" if not rows else "not kept"
    timings = [(str(s.get("name")), s.get("seconds"), str(s.get("status")))
               for s in trial.get("stages") or [] if isinstance(s, dict)]
    refusals = attempt_refusals(adir)
    claim = ((trial.get("execution") or {}).get("network_applied") or {}).get(
        "forwarder_refused_claim")
    if isinstance(claim, int) and claim > 0:
        refusals = "; ".join(filter(None, [refusals, (
            f"the forwarder in its sandbox closed {claim} connection(s) past the attempt's "
            "limit (its claim)")]))
    return TrialView(adir, trial, instruction, changes, change_note, grade, revision, checks,
                     steps, source, note, ledger, tstate, timings, refusals)


def _bundle(trial: dict[str, Any]) -> tuple[Any, str | None]:
    from assay.errors import AssayError
    from assay.suites.bundle import load_bundle

    path = (trial.get("task") or {}).get("path")
    if not path:
        return None, "the trial names no task bundle"
    try:
        return load_bundle(Path(path)), None
    except (AssayError, OSError) as exc:
        return None, f"the task bundle {path} cannot be read ({exc})"


def _changes(bundle: Any, adir: Path, trial: dict[str, Any],
             bundle_note: str | None) -> tuple[list[FileChange], str | None]:
    """The delivered change against the starting tree, as the verifier rebuilt it."""
    from assay.errors import AssayError
    from assay.grading.verify.judge_material import _read, rebuilt_tree, tree_changes
    from assay.records.artifact import ARTIFACT_JSON, list_tree

    if not (adir / ARTIFACT_JSON).is_file():
        return [], "no frozen artifact (the attempt ended before the freeze)"
    frozen = {e["path"]: e for e in read_json_file(adir / ARTIFACT_JSON).get("entries", [])
              if isinstance(e, dict) and e.get("type") != "dir"}
    if bundle is None:
        return [FileChange(p, "present", note="starting tree unavailable") for p in
                sorted(frozen)][:200], bundle_note
    import difflib

    with tempfile.TemporaryDirectory(prefix="assay-trial-show-") as tmp:
        try:
            cand = rebuilt_tree(bundle, adir, Path(tmp),
                                expect_digest=(trial.get("task") or {}).get("fixture_digest"))
        except (AssayError, OSError, KeyError) as exc:
            return [], f"the change cannot be rebuilt: {exc}"
        pristine = Path(tmp) / "pristine"
        before = {e["path"]: e for e in list_tree(pristine) if e["type"] != "dir"}
        added, modified, deleted = tree_changes(pristine, cand)
        carried = set(added) | set(modified) | set(deleted)
        out: list[FileChange] = []
        total = 0
        for rel in sorted(carried):
            how = "added" if rel in added else "deleted" if rel in deleted else "modified"
            old = _read(pristine, rel) if how != "added" else ""
            new = _read(cand, rel) if how != "deleted" else ""
            if old is None or new is None:
                out.append(FileChange(rel, how, note="binary or not UTF-8: not shown"))
                continue
            text = "".join(difflib.unified_diff(
                old.splitlines(keepends=True), new.splitlines(keepends=True),
                "/dev/null" if how == "added" else f"a/{rel}",
                "/dev/null" if how == "deleted" else f"b/{rel}"))
            if total + len(text) > MAX_DIFF:
                out.append(FileChange(rel, how, note=f"diff not shown: over {MAX_DIFF} "
                                                     "characters of diff in all"))
                continue
            total += len(text)
            out.append(FileChange(rel, how, diff=text))
        # changed in the artifact, but not carried into the tree the verifier graded
        for rel in sorted(set(frozen) | set(before)):
            if rel in carried:
                continue
            a, b = frozen.get(rel), before.get(rel)
            same = a is not None and b is not None and (a["type"], a.get("sha256"),
                                                        a.get("target")) == (
                b["type"], b.get("sha256"), b.get("target"))
            if not same:
                how = "added" if b is None else "deleted" if a is None else "modified"
                out.append(FileChange(rel, how, note="excluded: not carried to the verifier"))
    if len(out) > MAX_LISTED:
        return out[:MAX_LISTED], f"{len(out) - MAX_LISTED} more changed paths not listed"
    return out, None


def _grade(adir: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The newest grade (by the time it was written), never a mix of two."""
    gdir = adir / "grades"
    if not gdir.is_dir():
        return None, None
    best: tuple[str, str, dict[str, Any]] | None = None
    for p in gdir.glob("*.json"):
        try:
            g = read_json_file(p)
        except Exception:  # noqa: BLE001 - an unreadable grade is skipped, the others shown
            continue
        started = str((g.get("details") or {}).get("started_at") or "")
        if best is None or (started, p.stem) > (best[0], best[1]):
            best = (started, p.stem, g)
    return (best[2], best[1]) if best else (None, None)


def _tail(text: str | None) -> str:
    lines = (text or "").rstrip("\n").splitlines()
    return cap("\n".join(lines[-TAIL_LINES:]))


def _checks(grade: dict[str, Any] | None) -> list[Check]:
    if grade is None:
        return []
    details = grade.get("details") or {}
    required = set(grade.get("required") or [])
    out = []
    for name, outcome in (grade.get("checks") or {}).items():
        d = found if isinstance(found := details.get(name), dict) else {}
        if name == "integrity" and d:
            tail = "\n".join(integrity_lines(d)) or "no problem found"
            out.append(Check(name, str(outcome), name in required, None,
                             d.get("failure_code"), None, cap(tail)))
            continue
        text = _tail(d.get("stdout_tail"))
        err = _tail(d.get("stderr_tail"))
        if err:
            text = f"{text}\n[stderr]\n{err}" if text else f"[stderr]\n{err}"
        summary = summarize(d).lines()
        if text and (d.get("tamper_evident") or {}).get("applied"):
            text = ("[output: pytest's own, the planted canaries' deliberate failures "
                    "included]\n" + text)
        out.append(Check(name, str(outcome), name in required, d.get("command"),
                         d.get("reason"), d.get("exit_code"), text, tuple(summary)))
    return out


# ----------------------------------------------------------------------------- steps


def ledger_rows(adir: Path) -> list[dict[str, Any]]:
    """The attempt's ledger rows (a torn last row left out: the totals count it)."""
    path = adir / "model_calls.jsonl"
    return [r for r in iter_rows(path, on_torn=lambda _t: None)] if path.is_file() else []


def steps_of(adir: Path, rows: list[dict[str, Any]],
             limit: int = MAX_STEPS) -> tuple[list[Step], str, str | None]:
    """An attempt's steps, their source and a note: the agent's stream, else the gateway
    transcript, else the bare ledger (the trial view and the ATIF export read the same)."""
    return _steps(adir, rows, limit)


def newest_grade(adir: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The newest grade of an attempt and its revision (None, None before a grade)."""
    return _grade(adir)


def _steps(adir: Path, rows: list[dict[str, Any]],
           limit: int = MAX_STEPS) -> tuple[list[Step], str, str | None]:
    calls = [r for r in rows if r.get("endpoint") not in ("models",)]
    for read, source in ((_atif_steps, "the agent's own ATIF trajectory"),
                         (_stream_steps, "the agent's stream")):
        steps = read(adir)
        if steps:
            _attach_ledger(steps, calls)
            return steps[:limit], source, _more(steps, limit)
    steps = _transcript_steps(adir, calls)
    if steps:
        return steps[:limit], "the gateway transcript", _more(steps, limit)
    if calls:
        steps = [_ledger_only(i + 1, r) for i, r in enumerate(calls)]
        return steps[:limit], "the ledger (no bodies kept)", _more(steps, limit)
    return [], "none", "no step was recorded: no stream the adapter parsed, no model call"


def _more(steps: list[Step], limit: int = MAX_STEPS) -> str | None:
    return f"{len(steps) - limit} later steps not shown" if len(steps) > limit else None


def _ledger_only(n: int, row: dict[str, Any]) -> Step:
    return Step(n, input_tokens=row.get("input_tokens"), output_tokens=row.get("output_tokens"),
                latency_ms=row.get("latency_ms"), status=row.get("status"),
                error=row.get("error"), ledger_row=row)


def _attach_ledger(steps: list[Step], calls: list[dict[str, Any]]) -> None:
    """Tokens and latency of each stream step from the ledger row of the same model call (the
    k-th completed assistant response); left unknown when the counts do not line up."""
    answered = [r for r in calls if r.get("assistant_step")]
    if len(answered) != len(steps):
        return
    for step, row in zip(steps, answered, strict=True):
        step.input_tokens = row.get("input_tokens")
        step.output_tokens = row.get("output_tokens")
        step.latency_ms = row.get("latency_ms")
        step.status = row.get("status")
        step.ledger_row = row


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for c in content:
            if isinstance(c, dict):
                if isinstance(c.get("text"), str):
                    parts.append(c["text"])
                elif isinstance(c.get("content"), (str, list)):
                    parts.append(_text_of(c["content"]))
                elif isinstance(c.get("output"), str):
                    parts.append(c["output"])
            elif isinstance(c, str):
                parts.append(c)
        return "\n".join(parts)
    return "" if content is None else json.dumps(content, ensure_ascii=False)


def _args(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                          sort_keys=True)


def _call(name: Any, value: Any, call_id: Any) -> ToolCall:
    """A tool call as shown (its arguments capped) and as sent (parsed, for an export)."""
    parsed = value
    if isinstance(value, str):
        try:
            parsed = json.loads(value) if len(value) <= 1 << 20 else value
        except ValueError:
            parsed = value
    return ToolCall(str(name), cap(_args(value), 2000),
                    call_id if isinstance(call_id, str) else None, parsed)


def _atif_steps(adir: Path) -> list[Step]:
    """Steps from the ATIF trajectory the agent wrote itself (``agents/atif_file.py``), when it
    is valid: each agent step with its tool calls and their observations."""
    from assay.records.atif import ATIF_FILE, read_atif

    path = adir / "agent" / ATIF_FILE
    if not path.is_file():
        return []
    doc, _why = read_atif(path)
    if doc is None:
        return []
    steps: list[Step] = []
    for a in doc.steps:
        if a.source != "agent":
            continue
        s = Step(len(steps) + 1, text=cap(_text_of(_plain(a.message))),
                 reasoning=cap(a.reasoning_content or ""))
        for tc in a.tool_calls or []:
            s.tool_calls.append(_call(tc.function_name, tc.arguments, tc.tool_call_id))
        for r in (a.observation.results if a.observation else []):
            s.add_result(cap(_text_of(_plain(r.content))), r.source_call_id)
        steps.append(s)
    return steps


def _plain(content: Any) -> Any:
    """ATIF content as the chat shapes ``_text_of`` reads: text, or a list of parts."""
    if isinstance(content, list):
        return [p.model_dump(exclude_none=True) if hasattr(p, "model_dump") else p
                for p in content]
    return content


def _stream_steps(adir: Path) -> list[Step]:
    """Steps from a ``stream-json`` stdout (Qwen Code, Claude
    Code: ``assistant`` and ``user`` events holding content blocks) or mini-swe-agent's
    ``trajectory.json``."""
    traj = adir / "agent" / "trajectory.json"
    if traj.is_file():
        try:
            messages = json.loads(traj.read_bytes()[: 64 << 20]).get("messages")
        except (ValueError, AttributeError):
            messages = None
        if isinstance(messages, list):
            return _chat_steps([m for m in messages if isinstance(m, dict)])
    stdout = adir / "agent" / "stdout.log"
    if not stdout.is_file():
        return []
    steps: list[Step] = []
    cur: Step | None = None
    with stdout.open("rb") as fh:
        for raw in fh:
            if len(raw) > 8 << 20 or not raw.lstrip().startswith(b"{"):
                continue
            try:
                ev = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(ev, dict) or not isinstance(ev.get("message"), dict) \
                    or ev.get("parent_tool_use_id"):
                continue
            content = ev["message"].get("content")
            blocks = content if isinstance(content, list) else [
                {"type": "text", "text": content}] if isinstance(content, str) else []
            if ev.get("type") == "assistant":
                if cur is None or cur.results:
                    cur = Step(len(steps) + 1)
                    steps.append(cur)
                for b in blocks:
                    if not isinstance(b, dict):
                        continue
                    if b.get("type") == "text" and isinstance(b.get("text"), str):
                        cur.text = (cur.text + "\n" + b["text"]).strip()
                    elif b.get("type") == "thinking" and isinstance(b.get("thinking"), str):
                        cur.reasoning += b["thinking"]
                    elif b.get("type") == "tool_use":
                        cur.tool_calls.append(_call(b.get("name"), b.get("input"),
                                                    b.get("id")))
            elif ev.get("type") == "user" and cur is not None:
                for b in blocks:
                    if isinstance(b, dict) and b.get("type") == "tool_result":
                        mark = " (error)" if b.get("is_error") else ""
                        cur.add_result(cap(_text_of(b.get("content")) + mark),
                                       b.get("tool_use_id"))
    # a model turn split over several events (text, then the tool call) is one step
    merged: list[Step] = []
    for s in steps:
        if merged and not merged[-1].results and not merged[-1].tool_calls and \
                not s.text and s.tool_calls:
            merged[-1].tool_calls, merged[-1].results = s.tool_calls, s.results
            merged[-1].result_ids = s.result_ids
        else:
            merged.append(s)
    for i, s in enumerate(merged):
        s.n = i + 1
    return merged


def _chat_steps(messages: list[dict[str, Any]]) -> list[Step]:
    """Steps from a chat history: each assistant message opens a step; tool messages (or a
    user message after it, as mini-swe-agent sends its observations) are its results."""
    steps: list[Step] = []
    for m in messages:
        role = m.get("role")
        if role == "assistant":
            s = Step(len(steps) + 1, text=cap(_text_of(m.get("content"))))
            for tc in m.get("tool_calls") or []:
                fn = tc.get("function") if isinstance(tc, dict) else None
                if isinstance(fn, dict):
                    s.tool_calls.append(_call(fn.get("name"), fn.get("arguments"),
                                              tc.get("id")))
            steps.append(s)
        elif role in ("tool", "user") and steps:
            steps[-1].add_result(cap(_text_of(m.get("content"))), m.get("tool_call_id"))
    return steps


def _transcript_steps(adir: Path, calls: list[dict[str, Any]]) -> list[Step]:
    """One step per model call of the gateway transcript: the model's answer, and the results
    the agent sent back in its next call (the history items that follow the answer)."""
    transcript = load_transcript(adir)
    if transcript is None:
        return []
    by_seq = {r.get("seq"): r for r in calls}
    steps: list[Step] = []
    bodies = transcript.calls
    for i, call in enumerate(bodies):
        row = by_seq.get(call.row.seq, {})
        s = Step(len(steps) + 1, input_tokens=row.get("input_tokens"),
                 output_tokens=row.get("output_tokens"), latency_ms=row.get("latency_ms"),
                 status=call.row.status, error=row.get("error") or call.row.response_note,
                 ledger_row=row or None)
        _answer_into(s, call.row.response, call.row.protocol)
        if i + 1 < len(bodies):
            later = bodies[i + 1].messages[len(call.messages):]
            for m in later:
                if not isinstance(m, dict):
                    continue
                kind = m.get("type")
                if m.get("role") == "tool" or kind == "function_call_output":
                    s.add_result(cap(_text_of(m.get("content") or m.get("output"))),
                                 m.get("tool_call_id") or m.get("call_id"))
                elif m.get("role") == "user" and isinstance(m.get("content"), list):
                    for b in m["content"]:
                        if isinstance(b, dict) and b.get("type") == "tool_result":
                            s.add_result(cap(_text_of(b.get("content"))),
                                         b.get("tool_use_id"))
        steps.append(s)
    return steps


def _answer_into(step: Step, response: Any, protocol: str) -> None:
    if not isinstance(response, dict):
        return
    if protocol == "chat":
        choices = response.get("choices")
        msg = choices[0].get("message") if isinstance(choices, list) and choices \
            and isinstance(choices[0], dict) else None
        if isinstance(msg, dict):
            step.text = cap(_text_of(msg.get("content")))
            step.reasoning = cap(str(msg.get("reasoning_content") or msg.get("reasoning")
                                     or ""))
            for tc in msg.get("tool_calls") or []:
                fn = tc.get("function") if isinstance(tc, dict) else None
                if isinstance(fn, dict):
                    step.tool_calls.append(_call(fn.get("name"), fn.get("arguments"),
                                                 tc.get("id")))
    elif protocol == "anthropic":
        for b in response.get("content") or []:
            if not isinstance(b, dict):
                continue
            if b.get("type") == "text":
                step.text = (step.text + "\n" + str(b.get("text") or "")).strip()
            elif b.get("type") == "thinking":
                step.reasoning += str(b.get("thinking") or "")
            elif b.get("type") == "tool_use":
                step.tool_calls.append(_call(b.get("name"), b.get("input"), b.get("id")))
    else:
        for item in response.get("output") or []:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "message":
                step.text = (step.text + "\n" + _text_of(item.get("content"))).strip()
            elif item.get("type") == "function_call":
                step.tool_calls.append(_call(item.get("name"), item.get("arguments"),
                                             item.get("call_id")))
        if not step.text and isinstance(response.get("output_text"), str):
            step.text = response["output_text"]
        step.text = cap(step.text)


def first_divergence(a: list[Step], b: list[Step]) -> int | None:
    """The 1-based step where two trials first did something different; None when one's steps
    are the start of the other's and both are as long (they never diverged)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x.signature() != y.signature():
            return i + 1
    if len(a) != len(b):
        return min(len(a), len(b)) + 1
    return None
