"""The holdout gate of ``assay exp run``: every run over holdout tasks is written down before
its first trial, and a run past the allowance is refused unless the person asks for it.

A holdout split is only an honest estimate for as long as nothing chose a candidate by its
results. The runner cannot know what people did with a result, but it can make every look
visible where the team keeps its tasks (``records/holdout.py``), refuse a new look past
``max_looks`` (``suites/holdout.py`` says why the allowance lives beside the bundles) with an
``HoldoutExhausted`` naming the earlier looks, and warn when a look is by a different candidate
than the ones that looked before. Resuming a run is the same look, so it is never refused.

The decision is taken twice: once before the run directory is created (a refused run leaves
nothing behind) and again under the ledgers' locks right before the row is appended (two runs
started at once cannot both take the last allowed look).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.errors import HoldoutExhausted, RecordError
from assay.records.holdout import (
    HoldoutLook,
    Look,
    append_look,
    arm_look,
    has_torn_tail,
    ledger_path,
    locked,
    looks_at,
    read_looks,
    who,
)
from assay.records.io import read_json_file
from assay.records.manifest import utc_now
from assay.suites.experiment import Experiment
from assay.suites.holdout import holdout_folders, max_looks, policy_path

#: The key of ``manifest.json`` that says the run included holdout tasks and where its looks
#: are written; the report and :func:`record_shown` find the ledgers through it.
MANIFEST_KEY = "holdout"


@dataclass(frozen=True)
class HoldoutDecision:
    """What the ledgers said when this session started."""

    look: int
    """This run's look number (1-based) among the distinct runs over these holdout tasks."""
    earlier: list[Look]
    """The other runs that looked, in order."""
    resumed: bool
    """The run was already in a ledger: a resume, not a new look."""
    allowed: int
    """The allowance (``max_looks``)."""
    new_arms: list[str]
    """This run's arms whose identity no earlier look had (non-empty: a different candidate)."""


def describe(look: Look, number: int) -> str:
    row = look.first
    shown = "results shown" if look.shown else "results not shown yet"
    return (f"look {number} on {row.when} by {row.user or '?'}@{row.host}: experiment "
            f"{row.experiment} (arms {', '.join(sorted(row.arms))}), run {row.run_dir}; {shown}")


def _tasks(tasks: list[str]) -> str:
    return f"{len(tasks)} holdout task" + ("" if len(tasks) == 1 else "s")


class HoldoutGate:
    """The holdout side of one ``exp run`` session."""

    def __init__(self, exp: Experiment, run_dir: Path, *, reuse: bool,
                 note: Callable[[str], None]) -> None:
        self.exp = exp
        self.reuse = reuse
        self.note = note
        self.folders = holdout_folders(exp.bundles.values())
        self.tasks = sorted(t for ids in self.folders.values() for t in ids)
        self.ledgers = [ledger_path(f) for f in self.folders]
        self.run_dir = str(Path(run_dir).resolve())
        self.identity_sha256 = exp.identity_sha256
        self.arms = {name: arm_look(ident) for name, ident in exp.identity["arms"].items()}

    def decide(self) -> HoldoutDecision:
        rows = [r for p in self.ledgers for r in read_looks(p)]
        looks = looks_at(rows, self.tasks)
        key = (self.run_dir, self.identity_sha256)
        mine = [i for i, lk in enumerate(looks) if lk.key == key]
        earlier = [lk for lk in looks if lk.key != key]
        number = mine[0] + 1 if mine else len(looks) + 1
        before = looks[:number - 1]
        seen = {sha for lk in before for sha in lk.arm_shas}
        new_arms = sorted(n for n, a in self.arms.items() if before and a.sha256 not in seen)
        return HoldoutDecision(number, earlier, bool(mine), max_looks(self.folders), new_arms)

    def _refuse_if_over(self, d: HoldoutDecision) -> None:
        if d.resumed or d.look <= d.allowed or self.reuse:
            return
        where = ", ".join(str(policy_path(f)) + ("" if policy_path(f).is_file() else
                                                  ", absent: the default")
                          for f in self.folders)
        earlier = "; ".join(describe(lk, i) for i, lk in enumerate(d.earlier, 1))
        raise HoldoutExhausted(
            f"holdout: this run would be look {d.look} at the holdout tasks "
            f"{', '.join(self.tasks)}, and the allowance is {d.allowed} (max_looks in {where}). "
            f"Earlier: {earlier}. Ledger: {', '.join(map(str, self.ledgers))}. To look again "
            "anyway, pass --holdout-reuse: the set is then reported as reused.")

    def preflight(self) -> HoldoutDecision:
        """Refuse before anything is written (read-only; the ledgers may not exist yet)."""
        decision = self.decide()
        self._refuse_if_over(decision)
        return decision

    def record(self) -> dict[str, Any]:
        """Decide again under the locks, append this session's ``run`` row to every ledger, say
        what the person must know, and return the manifest's ``holdout`` entry."""
        torn = [p for p in self.ledgers if has_torn_tail(p)]
        with locked(self.ledgers):
            d = self.decide()
            self._refuse_if_over(d)
            row = self.run_row()
            for path in self.ledgers:
                append_look(path, row)
        for path in torn:
            self.note(f"holdout: {path} ended in a torn line (a write cut short); it was "
                      "skipped and cut off")
        self._tell(d)
        return {"tasks": self.tasks, "ledgers": [str(p) for p in self.ledgers],
                "run_dir": self.run_dir, "identity_sha256": self.identity_sha256}

    def run_row(self) -> HoldoutLook:
        """This session's ``run`` row, stamped now."""
        user, host = who()
        return HoldoutLook(
            schema=HoldoutLook.schema_id(), when=utc_now(), user=user, host=host, event="run",
            shown=False, command="exp run", experiment=self.exp.spec.name,
            experiment_identity_sha256=self.identity_sha256, run_dir=self.run_dir,
            arms=self.arms, tasks=self.tasks, holdout_reuse=self.reuse)

    def _tell(self, d: HoldoutDecision) -> None:
        ledgers = ", ".join(map(str, self.ledgers))
        if d.resumed:
            self.note(f"holdout: resuming look {d.look} at {_tasks(self.tasks)} (not a new "
                      f"look; ledger {ledgers})")
            return
        self.note(f"holdout: look {d.look} (allowance {d.allowed}) at {_tasks(self.tasks)}, "
                  f"recorded in {ledgers}")
        if d.look > d.allowed:
            self.note(f"warning: holdout: past the allowance of {d.allowed} (--holdout-reuse); "
                      "this set is now reported as reused")
        if d.new_arms:
            earlier = "; ".join(describe(lk, i) for i, lk in enumerate(d.earlier, 1))
            self.note(f"warning: holdout: a different candidate is looking at a holdout that "
                      f"was already looked at (arm {', '.join(d.new_arms)}: an identity not "
                      f"seen on it before); earlier: {earlier}. This set is now reported as "
                      "reused.")


def holdout_gate(exp: Experiment, run_dir: Path, *, reuse: bool = False,
                 note: Callable[[str], None] = lambda _m: None) -> HoldoutGate | None:
    """The gate for a run whose selected tasks include holdout ones, else None. A new run past
    the allowance is refused at once, before its directory is created; an existing one is
    decided by :meth:`HoldoutGate.record` once the resume checks passed (a resume with a changed
    file must be refused for what changed, not counted as a look)."""
    if not any(b.spec.split == "holdout" for b in exp.bundles.values()):
        return None
    gate = HoldoutGate(exp, run_dir, reuse=reuse, note=note)
    if not (Path(run_dir) / "manifest.json").exists():
        gate.preflight()
    return gate


def record_shown(run_dir: Path, *, command: str | None = None) -> bool:
    """Append a ``shown`` row to every ledger of a run that included holdout tasks, before its
    results reach a person (``exp report``, ``exp compare``, ``exp verdict``, and ``exp run``,
    whose progress lines carry each trial's verdict). False for a run without holdout tasks,
    or a path that is not a run directory.

    A ledger that cannot be written is a ``RecordError``: results of a holdout run are only
    shown where the showing can be recorded."""
    path = Path(run_dir) / "manifest.json"
    if not path.is_file():
        return False  # not a run directory (an outcomes file, say): no holdout look to record
    manifest = read_json_file(path)
    entry = manifest.get(MANIFEST_KEY)
    if not entry or not entry.get("tasks"):
        return False
    ledgers = [Path(p) for p in entry["ledgers"]]
    for p in ledgers:
        if not p.parent.parent.is_dir():
            raise RecordError(f"{run_dir}: its holdout ledger's folder {p.parent.parent} is "
                              "gone; holdout results are only shown where the look can be "
                              "recorded")
    user, host = who()
    row = HoldoutLook(
        schema=HoldoutLook.schema_id(), when=utc_now(), user=user, host=host, event="shown",
        shown=True, command=command, experiment=str(manifest.get("name")),
        experiment_identity_sha256=entry["identity_sha256"], run_dir=entry["run_dir"],
        arms={n: arm_look(i) for n, i in manifest["identity"]["arms"].items()},
        tasks=list(entry["tasks"]))
    with locked(ledgers):
        for p in ledgers:
            append_look(p, row)
    return True


__all__ = ["MANIFEST_KEY", "HoldoutDecision", "HoldoutGate", "holdout_gate", "record_shown"]
