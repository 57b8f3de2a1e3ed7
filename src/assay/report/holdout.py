"""The holdout line of an experiment report: how often this run's holdout has been looked at,
by what, and whether the set still counts as unused.

Rebuilt from the run directory (``manifest.json`` names the holdout tasks and their ledgers)
and the ledgers on disk, never from the runner, so a report rebuilt later counts the looks
taken since: the first run's report says "reused" once a second candidate has looked.

The set is **reused** when it has been looked at more often than its allowance, or when any
look after the first was by a candidate (an arm identity) no earlier look had: from then on a
result on it may have steered which candidate is measured on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from assay.records.holdout import HoldoutLook, Look, arm_look, looks_at, read_looks
from assay.records.io import read_json_file
from assay.suites.holdout import max_looks


def holdout_summary(run_dir: Path) -> dict[str, Any] | None:
    """``{"tasks", "looks", "max_looks", "reused", "ledger", "by"}`` for a run that included
    holdout tasks (``ledger``: the ledger paths, comma-separated; ``by``: one entry per look,
    ``{"when", "who", "experiment", "arms"}`` with ``arms`` the arm identities' sha256 by
    name); None for a run without holdout tasks."""
    manifest = read_json_file(Path(run_dir) / "manifest.json")
    entry = manifest.get("holdout")
    if not entry or not entry.get("tasks"):
        return None
    ledgers = [Path(p) for p in entry["ledgers"]]
    looks = looks_at([r for p in ledgers for r in read_looks(p)], entry["tasks"])
    key = (entry["run_dir"], entry["identity_sha256"])
    if not any(lk.key == key for lk in looks):
        looks.append(_this_run(manifest, entry))  # the ledger lost it; the manifest knows
    limit = max_looks(p.parent.parent for p in ledgers)
    reused = len(looks) > limit or any(lk.new_candidate for lk in looks)
    return {
        "tasks": len(entry["tasks"]), "looks": len(looks), "max_looks": limit, "reused": reused,
        "ledger": ", ".join(map(str, ledgers)),
        "by": [{"when": lk.first.when,
                "who": f"{lk.first.user or '?'}@{lk.first.host}" if lk.first.host else None,
                "experiment": lk.first.experiment,
                "arms": {n: a.sha256 for n, a in sorted(lk.first.arms.items())}}
               for lk in looks],
    }


def _this_run(manifest: dict[str, Any], entry: dict[str, Any]) -> Look:
    arms = {n: arm_look(i) for n, i in manifest["identity"]["arms"].items()}
    row = HoldoutLook(schema=HoldoutLook.schema_id(), when=str(manifest.get("created_at")),
                      user=None, host="", event="run", shown=False,
                      experiment=str(manifest.get("name")),
                      experiment_identity_sha256=entry["identity_sha256"],
                      run_dir=entry["run_dir"], arms=arms, tasks=list(entry["tasks"]))
    return Look(first=row, sessions=1, arm_shas={a.sha256 for a in arms.values()})


def holdout_line(summary: dict[str, Any]) -> str:
    """One Markdown line: ``holdout: 3 tasks looked at 2 times (by …); reused``."""
    n = summary["looks"]
    by = "; ".join(f"{b['who'] or 'unknown'} on {b['when'][:10]} in {b['experiment']} "
                   f"[{', '.join(b['arms'])}]" for b in summary["by"])
    state = ("**reused**" if summary["reused"]
             else f"not reused (allowance {summary['max_looks']})")
    tasks = f"{summary['tasks']} task" + ("s" if summary["tasks"] != 1 else "")
    return (f"holdout: {tasks} looked at {n} time{'s' if n != 1 else ''} "
            f"(by {by}); {state}; ledger {summary['ledger']}")


def reused_banner(summary: dict[str, Any] | None) -> str | None:
    """The first line of every verdict, comparison and report that rests on a reused holdout
    (None otherwise): said first, in words a skimming reader cannot miss, because such a
    number is no longer an unbiased estimate."""
    if not summary or not summary.get("reused"):
        return None
    n = summary["looks"]
    return (f"HOLDOUT REUSED: this rests on a holdout looked at {n} time{'s' if n != 1 else ''} "
            f"(allowance {summary['max_looks']}); earlier results on it may have steered which "
            "candidate is measured here, so it is not an unbiased estimate")


__all__ = ["holdout_line", "holdout_summary", "reused_banner"]
