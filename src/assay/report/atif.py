"""One agent trial as an ATIF trajectory (``records/atif.py``): what trajectory validators,
converters and SFT/RL pipelines of the agent ecosystem read, built from the attempt directory
alone.

Where each part comes from:

- the steps: an ATIF document the agent wrote itself (``agent/trajectory.atif.json``, kept and
  validated by the runner) is taken whole; otherwise the steps the trial view reads
  (``trial_view.steps_of``: the adapter's parsed stream, else the gateway transcript, else the
  bare ledger), after one ``user`` step holding the task's instruction;
- tool calls keep the ids of the stream or the API answer, and each tool result becomes an
  observation naming the call it answers (by id; by position when neither side has one);
- per-step figures come from the ledger row of the step's model call; the final figures from
  the whole ledger (``ledger_totals``), so they equal it. Prompt tokens include cached ones as
  ATIF defines them: for the ``anthropic`` protocol the ledger's input, cache reads and cache
  writes are added. A figure that is unknown or only a lower bound (a call without usage, a
  model without a price, a torn row, no ledger at all) is left out and ``extra`` says why and
  holds the lower bound: never a zero;
- assay's identifiers (trial, task, arm, repetition, attempt, verdict, failure code, image
  digest, where the steps came from) go into the document's ``extra.assay``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from assay.records.atif import (
    ATIF_FILE,
    ATIF_VERSION,
    AtifAgent,
    AtifFinalMetrics,
    AtifMetrics,
    AtifObservation,
    AtifObservationResult,
    AtifStep,
    AtifToolCall,
    AtifTrajectory,
    read_atif,
)
from assay.records.io import atomic_write_json, read_json_file
from assay.records.ledger import TORN_ROW_NOTE, ledger_totals
from assay.report.trial_view import Step, ledger_rows, newest_grade, resolve_attempt, steps_of

#: Steps written at most (a runaway agent's thousands of turns stay bounded).
MAX_ATIF_STEPS = 5000
#: The instruction is kept whole up to this many characters.
MAX_INSTRUCTION = 200_000
#: An agent's own trajectory, kept by the runner beside its streams.
AGENT_ATIF = Path("agent") / ATIF_FILE

NO_LEDGER = ("no gateway ledger (model_calls.jsonl): the trial had no model through assay's "
             "gateway, so its model use is not known")


def build_trajectory(path: Path) -> AtifTrajectory:
    """The ATIF document of one attempt (``path``: an attempt folder, or its trial folder for
    the last attempt)."""
    adir = resolve_attempt(path)
    trial = read_json_file(adir / "trial.json")
    rows = ledger_rows(adir)
    calls = [r for r in rows if r.get("endpoint") != "models"]
    own = _agent_document(adir, trial)
    assay_extra = _assay_ids(adir, trial, own is not None)
    protocol = next((str(r["protocol"]) for r in calls if r.get("protocol")), "chat")
    if own is not None:
        # its steps are the agent's; the totals are the gateway's, which it cannot rewrite
        if own.final_metrics is not None:
            assay_extra["agent_final_metrics"] = own.final_metrics.model_dump(
                mode="json", exclude_none=True)
        extra = {**(own.extra or {}), "assay": assay_extra}
        return own.model_copy(update={"extra": extra,
                                      "final_metrics": _final(adir, len(own.steps), protocol)})
    steps, source, note = steps_of(adir, rows, MAX_ATIF_STEPS)
    assay_extra["steps_source"] = source
    if note:
        assay_extra["steps_note"] = note
    out: list[AtifStep] = [AtifStep(step_id=1, source="user",
                                    message=_instruction(trial, assay_extra))]
    for s in steps:
        out.append(_agent_step(len(out) + 1, s, protocol))
    model = next((str(r["model_upstream"]) for r in calls if r.get("model_upstream")), None)
    return AtifTrajectory(
        schema_version=ATIF_VERSION,
        session_id=f"{trial.get('trial_id')}/a{trial.get('attempt')}",
        agent=_agent(trial, model), steps=out,
        final_metrics=_final(adir, len(out), protocol),
        extra={"assay": assay_extra})


def write_trajectory(path: Path) -> Path:
    """``trajectory.atif.json`` beside the attempt's ``trial.json``, written atomically."""
    adir = resolve_attempt(path)
    doc = build_trajectory(adir)
    target = adir / ATIF_FILE
    atomic_write_json(target, doc.as_json())
    return target


def _agent_document(adir: Path, trial: dict[str, Any]) -> AtifTrajectory | None:
    """The agent's own trajectory when the runner kept it and found it valid."""
    execution = trial.get("execution") or {}
    if (execution.get("agent_atif") or {}).get("status") != "valid":
        return None
    doc, _why = read_atif(adir / AGENT_ATIF)
    return doc


def _assay_ids(adir: Path, trial: dict[str, Any], own: bool) -> dict[str, Any]:
    grade, revision = newest_grade(adir)
    task = trial.get("task") or {}
    parts = str(trial.get("trial_id") or "").rsplit("/", 2)
    arm = parts[1] if len(parts) == 3 else trial.get("agent")
    image = trial.get("environment_image") or {}
    ids: dict[str, Any] = {
        "trial_id": trial.get("trial_id"), "task": task.get("id"),
        "task_revision": task.get("revision"), "arm": arm, "repetition": trial.get("rep"),
        "attempt": trial.get("attempt"), "agent": trial.get("agent"),
        "status": trial.get("status"),
        "verdict": None if grade is None else ("accepted" if grade.get("accepted")
                                               else "rejected"),
        "failure_code": (grade or {}).get("failure_code") or trial.get("failure_code"),
        "grade_revision": revision, "image_digest": image.get("digest"),
        "execution_status": (trial.get("execution") or {}).get("status"),
    }
    if own:
        ids["steps_source"] = "the agent's own ATIF trajectory (agent/trajectory.atif.json)"
    return ids


def _instruction(trial: dict[str, Any], extra: dict[str, Any]) -> str:
    from assay.errors import AssayError
    from assay.suites.bundle import load_bundle

    path = (trial.get("task") or {}).get("path")
    try:
        bundle = load_bundle(Path(str(path)))
        with bundle.instruction_path.open(encoding="utf-8") as fh:
            text = fh.read(MAX_INSTRUCTION + 1)
    except (AssayError, OSError, UnicodeDecodeError, TypeError) as exc:
        extra["instruction_note"] = f"the task's instruction cannot be read: {exc}"
        return ""
    if len(text) > MAX_INSTRUCTION:
        extra["instruction_note"] = f"the instruction is cut at {MAX_INSTRUCTION} characters"
        text = text[:MAX_INSTRUCTION]
    return text


def _agent(trial: dict[str, Any], model: str | None) -> AtifAgent:
    ident = trial.get("agent_identity") or {}
    spec = str(trial.get("agent") or "unknown")
    name = spec.split(":", 1)[0]  # qwen, claude, command, oracle, ...: the agent as named
    version = ident.get("cli_version") or ident.get("version")
    return AtifAgent(name=name, version=str(version) if version else "unknown",
                     model_name=model,
                     extra={"spec": spec, **({"identity": ident} if ident else {})})


def _prompt_tokens(row: dict[str, Any], protocol: str) -> int | None:
    """ATIF's prompt tokens include cached ones; anthropic reports them apart."""
    value = row.get("input_tokens")
    if value is None or protocol != "anthropic":
        return value if isinstance(value, int) else None
    return int(value) + int(row.get("cached_input_tokens") or 0) + int(
        row.get("cache_write_input_tokens") or 0)


def _metrics(row: dict[str, Any] | None, protocol: str) -> tuple[AtifMetrics | None,
                                                                 dict[str, Any]]:
    if row is None:
        return None, {"metrics_note": "no ledger row lines up with this step: its tokens and "
                                      "cost are not known"}
    note: dict[str, Any] = {"ledger_seq": row.get("seq"), "latency_ms": row.get("latency_ms"),
                            "status": row.get("status")}
    if row.get("error"):
        note["error"] = row["error"]
    extra: dict[str, Any] = {}
    if row.get("reasoning_tokens") is not None:
        extra["reasoning_tokens"] = row["reasoning_tokens"]
    if row.get("cache_write_input_tokens") is not None:
        extra["cache_write_input_tokens"] = row["cache_write_input_tokens"]
    if row.get("usage_missing"):
        extra["usage_note"] = "the upstream reported no usage for this call: tokens unknown"
    if row.get("cost_usd") is None:
        extra["cost_note"] = ("no cost: usage missing or the model has no price in the "
                              "experiment's price table")
    cached = row.get("cached_input_tokens")
    return AtifMetrics(
        prompt_tokens=None if row.get("usage_missing") else _prompt_tokens(row, protocol),
        completion_tokens=None if row.get("usage_missing") else row.get("output_tokens"),
        cached_tokens=None if row.get("usage_missing") else cached,
        cost_usd=row.get("cost_usd"), extra=extra or None), note


def _agent_step(n: int, s: Step, protocol: str) -> AtifStep:
    calls = []
    for i, tc in enumerate(s.tool_calls):
        args = tc.value if isinstance(tc.value, dict) else (
            {} if tc.value in (None, "") else {"input": tc.value})
        calls.append(AtifToolCall(tool_call_id=tc.id or f"step{n}-call{i + 1}",
                                  function_name=tc.name, arguments=args))
    ids = {c.tool_call_id for c in calls}
    positional = len(s.results) == len(calls) and not any(s.result_ids)
    results = []
    for i, text in enumerate(s.results):
        rid = s.result_ids[i] if i < len(s.result_ids) else None
        if positional:
            rid = calls[i].tool_call_id
        known = rid in ids
        results.append(AtifObservationResult(
            source_call_id=rid if known else None, content=text,
            extra=None if known or rid is None else {"answers_call": rid}))
    metrics, note = _metrics(s.ledger_row, protocol)
    row = s.ledger_row or {}
    return AtifStep(step_id=n, source="agent", message=s.text,
                    timestamp=row.get("time"), model_name=row.get("model_served"),
                    reasoning_content=s.reasoning or None, tool_calls=calls or None,
                    observation=AtifObservation(results=results) if results else None,
                    metrics=metrics, extra=note)


def _reported(rows: list[dict[str, Any]], key: str) -> int | None:
    """The sum of a count every call reported; None when some call did not report it."""
    if any(not isinstance(r.get(key), int) for r in rows):
        return None
    return sum(int(r[key]) for r in rows)


def _final(adir: Path, n_steps: int, protocol: str) -> AtifFinalMetrics:
    path = adir / "model_calls.jsonl"
    if not path.is_file():
        return AtifFinalMetrics(total_steps=n_steps, extra={"usage_note": NO_LEDGER})
    t = ledger_totals(path)
    prompt = t["input"] + (t["cached_input"] + t["cache_write_input"]
                           if protocol == "anthropic" else 0)
    rows = [r for r in ledger_rows(adir) if r.get("forwarded") and not r.get("usage_missing")]
    # a count the upstream never reported is unknown, not a zero (the totals add them as 0)
    cached, reasoning, writes = (_reported(rows, k) for k in (
        "cached_input_tokens", "reasoning_tokens", "cache_write_input_tokens"))
    extra: dict[str, Any] = {"model_calls": t["calls"], "protocol": protocol,
                             **({"reasoning_tokens": reasoning} if reasoning is not None
                                else {}),
                             **({"cache_write_input_tokens": writes} if writes is not None
                                else {})}
    if cached is None:
        extra["cached_note"] = "the upstream did not report cached tokens on every call"
    tokens_known = t["usage_missing_calls"] == 0
    cost_known = t["unpriced_calls"] == 0 and tokens_known
    if not tokens_known:
        extra["usage_note"] = (f"{t['usage_missing_calls']} model call(s) without usage"
                               + (f"; {TORN_ROW_NOTE}" if t["torn_rows"] else "")
                               + ": the token totals are lower bounds")
        extra["lower_bounds"] = {"total_prompt_tokens": prompt,
                                 "total_completion_tokens": t["output"],
                                 "total_cached_tokens": t["cached_input"]}
    if not cost_known:
        extra["cost_note"] = (f"{t['unpriced_calls']} model call(s) without a price or usage: "
                              "the cost is a lower bound")
        extra.setdefault("lower_bounds", {})["total_cost_usd"] = t["cost_usd"]
    return AtifFinalMetrics(
        total_prompt_tokens=prompt if tokens_known else None,
        total_completion_tokens=t["output"] if tokens_known else None,
        total_cached_tokens=cached if tokens_known else None,
        total_cost_usd=t["cost_usd"] if cost_known else None,
        total_steps=n_steps, extra=extra)


def write_beside(attempt_dir: Path) -> str | None:
    """:func:`write_trajectory` for the runner once an attempt ended: None when written, else
    why not. It never raises: a trajectory is a view of the records, and the records stand
    without it (``assay trial export`` builds it again from the same files)."""
    if not (attempt_dir / "trial.json").is_file():
        return f"{attempt_dir}: no trial.json (the attempt never started)"
    try:
        write_trajectory(attempt_dir)
    except Exception as exc:  # noqa: BLE001 - a view of the records must not end the run
        return f"{attempt_dir / ATIF_FILE}: not written ({type(exc).__name__}: {exc})"
    return None
