"""Records made comparable across runs: what varies by machine, clock or draw is masked, the
rest (every key, its order, every value that the inputs decide) is kept.

A golden test writes records from a small real run, masks them with :func:`normalize` and
compares the text with the committed file under ``tests/golden/``. The writer's own format
(indentation, key order, a final newline) is checked on the raw bytes first
(:func:`writer_format_holds`), so a masked comparison still stands for a byte-identical one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: values decided by the clock, the machine or the process: masked wherever the key appears
VOLATILE_KEYS = frozenset({
    "seconds", "wall_seconds", "queued_seconds", "pristine_seconds", "limit_seconds",
    "memory_peak_bytes", "disk_peak_bytes", "pids_peak", "cpu_throttled_periods",
    "cpu_throttled_ms", "pid",
    "python", "derived_seed", "expected_ids_cache", "stdout_tail",
    "stderr_tail", "tar_sha256", "hostname", "host", "uid", "kernel", "bwrap", "platform",
    "p50", "p90", "max", "mean", "min", "duration_s", "latency_s", "entries", "verify_jobs",
    # orphans_swept: what killed processes of this machine (other tests, other runs) left
    "cgroups", "processes_ended",
})
#: known only in a git checkout (null from an installed package): masked whatever the value
CHECKOUT_KEYS = frozenset({"git_commit", "git_dirty"})
#: whole subtrees drawn at random per verification (derived canaries and what they caught), or
#: decided by the host (which cgroup version applied a limit, and how it says so)
DRAWN_KEYS = frozenset({"canaries", "failed_ids", "stdout_counts", "passed_ids",
                        "derived_pool", "canary_counts", "canaries_planted", "latency",
                        "seconds_by_stage", "limits_applied", "canary_summary",
                        "check_lines"})


def _mask(value: Any) -> Any:
    if isinstance(value, bool):
        return "<bool>"
    if isinstance(value, int | float):
        return "<number>"
    if isinstance(value, str):
        return "<text>"
    return value if value is None else "<value>"


def normalize(data: Any, root: str) -> Any:
    """``data`` with the run's root directory as ``<ROOT>``, times as ``<TIME>``, volatile
    values and drawn subtrees masked; keys and their order unchanged."""
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            if k in DRAWN_KEYS:
                out[k] = "<drawn>"
            elif k in CHECKOUT_KEYS:
                out[k] = "<checkout>"
            elif k.endswith("_at") and isinstance(v, str):
                out[k] = "<TIME>"
            elif k in VOLATILE_KEYS and not isinstance(v, dict | list):
                out[k] = _mask(v)
            else:
                out[k] = normalize(v, root)
        return out
    if isinstance(data, list):
        return [normalize(v, root) for v in data]
    if isinstance(data, str):
        return data.replace(root, "<ROOT>")
    return data


def writer_format_holds(path: Path, indent: int) -> bool:
    """The file is exactly what ``json.dumps(indent=...)`` plus a newline makes of its own
    content: the writer's format, checked on the raw bytes."""
    raw = path.read_text(encoding="utf-8")
    return raw == json.dumps(json.loads(raw), indent=indent, ensure_ascii=False) + "\n"


def golden_text(path: Path, root: Path, indent: int) -> str:
    data = normalize(json.loads(path.read_text(encoding="utf-8")), str(root))
    return json.dumps(data, indent=indent, ensure_ascii=False) + "\n"
