"""An ATIF trajectory a ``command:`` agent writes itself, kept and checked.

The agent is told where to write it: ``ASSAY_ATIF_PATH`` (``/assay/home/trajectory.atif.json``,
in its fresh HOME). HOME is thrown away with the trial, so once the agent has ended the file is
copied, bounded and without following links, into the attempt's ``agent/trajectory.atif.json``
and validated against ATIF (``records/atif.py``). A valid one becomes the trial's step source
(the trial view, the ATIF export); an invalid one is kept as evidence and is an evidence gap
with its reason (``execution.agent_atif``, ``execution.anomalies``), never a failed trial. What
the agent wrote is data: it is read as JSON into closed models and nothing in it is acted on.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from assay.agents.base import AGENT_HOME, AgentContext, AgentRun
from assay.records.atif import ATIF_FILE, MAX_ATIF_BYTES, read_atif

#: Where the agent writes its trajectory, inside its sandbox.
ATIF_PATH = f"{AGENT_HOME}/{ATIF_FILE}"
ATIF_ENV = {"ASSAY_ATIF_PATH": ATIF_PATH}


def collect_agent_atif(ctx: AgentContext, run: AgentRun) -> AgentRun:
    """Keep and check the agent's own trajectory, if it wrote one: ``run.extra`` gains
    ``agent_atif`` (``valid`` or ``invalid`` with the reason) and, when invalid, the evidence
    gap. Nothing written: nothing added (an agent need not write one)."""
    src = ctx.home / ATIF_FILE
    found = _copy(src, ctx.record_dir / ATIF_FILE)
    if found is None:
        return run
    if isinstance(found, str):
        return _gap(run, found)
    doc, why = read_atif(ctx.record_dir / ATIF_FILE)
    if doc is None:
        return _gap(run, str(why).replace(str(ctx.record_dir / ATIF_FILE),
                                          f"agent/{ATIF_FILE}"))
    run.extra["agent_atif"] = {"status": "valid", "file": f"agent/{ATIF_FILE}",
                               "schema_version": doc.schema_version, "steps": len(doc.steps)}
    return run


def _gap(run: AgentRun, reason: str) -> AgentRun:
    run.extra["agent_atif"] = {"status": "invalid", "reason": reason}
    anomalies: list[Any] = list(run.extra.get("anomalies") or [])
    anomalies.append(f"agent_atif_invalid: {reason}")
    run.extra.update(anomalies=anomalies, evidence_gap=True)
    return run


def _copy(src: Path, dst: Path) -> None | str | Path:
    """Copy the agent's file without following a link: None when there is none, a reason when
    it cannot be taken (a link, not a regular file, too big), else the copy."""
    try:
        st = src.lstat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{ATIF_PATH}: cannot be read ({exc.strerror or exc})"
    if not stat.S_ISREG(st.st_mode):
        return f"{ATIF_PATH}: not a regular file (a link or a folder is not read)"
    if st.st_size > MAX_ATIF_BYTES:
        return f"{ATIF_PATH}: {st.st_size} bytes, over the {MAX_ATIF_BYTES} kept"
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(MAX_ATIF_BYTES + 1)
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(data[:MAX_ATIF_BYTES])
    except OSError as exc:
        return f"{ATIF_PATH}: cannot be copied ({exc.strerror or exc})"
    return dst
