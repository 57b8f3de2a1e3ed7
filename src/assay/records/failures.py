"""Attempts that say nothing about the agent: it never started, or its model never answered.

Both used to be graded as the agent's work (``no_change``, ``agent_timeout``), so a broken arm
read as a losing arm. Here they get codes of their own, infrastructure-class failures of the
arm: kept with their evidence, shown, left out of pass rates and counted against coverage.

- :data:`AGENT_START_FAILED`: the sandbox ran the command but the agent program never got
  going: exit 126 or 127 (the shell's "cannot execute" and "not found"), an interpreter that
  could not open its script or module, or (for an arm with a model) an exit before its first
  model call that left the workspace untouched. ``stderr_tail`` keeps the evidence.
- :data:`MODEL_UNAVAILABLE`: the agent called its model, and the upstream failed every call
  (unreachable, 5xx, or a 4xx the agent cannot fix by changing its request: 401, 403, 404,
  408, 429). The ledger rows keep each status and the first bytes of the upstream's answer.

Pure functions over records, so the report and tests read the same rules.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Final

from assay.records.statuses import INFRA_CODES, InfraCode, TrialFailureCode

AGENT_START_FAILED: Final = "agent_start_failed"
MODEL_UNAVAILABLE: Final = "model_unavailable"
#: the codes an infrastructure-class attempt may carry, beside plain ``infra_error``
__all__ = ["AGENT_START_FAILED", "INFRA_CODES", "MODEL_UNAVAILABLE", "InfraCode"]
#: upstream answers an agent cannot fix by asking differently
_UNFIXABLE_4XX = frozenset({401, 403, 404, 408, 429})
_TAIL_BYTES = 2048
#: what interpreters and shells print when the program or its script is not there
_START_PATTERNS = re.compile(
    r"can't open file|No such file or directory|: not found|command not found|"
    r"Cannot find module|Permission denied|exec format error|cannot execute|"
    r"No module named", re.I)


def stderr_tail(record_dir: Path, limit: int = _TAIL_BYTES) -> str:
    """The last ``limit`` bytes of the agent's ``stderr.log`` (empty when there is none)."""
    path = record_dir / "stderr.log"
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(size - limit, 0))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def start_failure(execution: dict[str, Any], tail: str, *, model_calls: int | None,
                  unchanged: bool) -> str | None:
    """Why the agent never started, or None. ``model_calls`` is None for an arm without a
    model; ``unchanged`` says the workspace is still the starting tree."""
    if execution.get("status") != "exited_nonzero":
        return None
    code = execution.get("exit_code")
    last = tail.strip().splitlines()[-1].strip() if tail.strip() else ""
    if code in (126, 127):
        return f"exit {code} (the program could not be run): {last or 'no stderr'}"
    if not unchanged or model_calls:
        return None
    if _START_PATTERNS.search(tail):
        return f"exit {code} before doing anything: {last}"
    if model_calls == 0:
        return (f"exit {code} before its first model call, with the workspace unchanged: "
                f"{last or 'no stderr'}")
    return None


def upstream_failed(row: dict[str, Any]) -> bool:
    """A ledger row of a call the upstream did not answer usefully."""
    if row.get("upstream_unreachable"):
        return True
    status = row.get("upstream_status")
    if status is None:  # the gateway's own answer: forwarded but cut off, or refused
        return bool(row.get("forwarded")) and bool(row.get("error"))
    return status >= 500 or status in _UNFIXABLE_4XX


def model_unavailable(ledger: Path) -> str | None:
    """When the upstream failed every forwarded call of the attempt: what it said, else None."""
    try:
        lines = ledger.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    rows = []
    for line in lines:
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # a torn last line: the rows before it decide
    calls = [r for r in rows if r.get("forwarded")]
    if not calls or not all(upstream_failed(r) for r in calls):
        return None
    statuses: dict[str, int] = {}
    for r in calls:
        key = ("unreachable" if r.get("upstream_unreachable") or r.get("upstream_status") is None
               else f"HTTP {r['upstream_status']}")
        statuses[key] = statuses.get(key, 0) + 1
    shown = ", ".join(f"{k} x{n}" for k, n in statuses.items())
    first = next((r.get("error") for r in calls if r.get("error")), None)
    return (f"the model's upstream failed all {len(calls)} calls ({shown})"
            + (f"; first error: {first}" if first else ""))


def infra_code(error: str | None) -> TrialFailureCode:
    """The code of an infrastructure-class attempt from its recorded error."""
    head = (error or "").split(":", 1)[0].strip()
    for code in INFRA_CODES:
        if head == code:
            return code
    return "infra_error"
