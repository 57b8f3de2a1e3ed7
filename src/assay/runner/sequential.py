"""A sequential bar during a run: which tasks may start, when a look is taken, what it decided.

The plan (``suites.experiment.plan``) puts the tasks in an order drawn from the seed and cuts
it at the looks; this object keeps the scheduler inside the current stretch (every trial of
the tasks before a look ends before any trial after it starts), and once every trial of the
stretch is final it takes the look: the graded trials of the tasks so far, compared by
``stats.abtest.compare_arms`` at the look's level (``stats.sequential.look_levels``), decided
by ``stats.sequential.look_verdict`` (the function the bench measures) and the bar's hard
requirements that can be read from the state database (integrity violations, newly failing
tasks; cost is read from the ledgers by ``exp verdict``). The look is committed to
``state.sqlite`` before its decision takes effect, and ``sequential.json`` (the record the
report reads) is rewritten atomically after it: a kill between the two is repaired by the next
session, which rewrites the file from the database.

A look that accepts or rejects stops the run: nothing new starts (no trial is in flight then,
since a look waits for its stretch). ``run_to_end`` (``exp run --run-to-end``, recorded in the
session and in ``sequential.json``) runs a stopped run's remaining trials on purpose; no look
is taken after that, and ``exp verdict`` analyses it as the fixed design it became.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from assay.records.experiment import SequentialRecord
from assay.records.io import atomic_write_json
from assay.records.statuses import INTEGRITY_CODES, TRIAL_FINAL
from assay.runner.state import StateDB
from assay.suites.experiment import Experiment, TrialKey, sequential_looks, task_order

SEQUENTIAL_JSON = "sequential.json"
SCHEMA = "assay.experiment.sequential/1"


def sequential_manifest(exp: Experiment) -> dict[str, Any] | None:
    """``manifest.json``'s ``sequential``: the task order, the looks and their levels, frozen
    before the first trial (``None`` without a sequential bar)."""
    bar = exp.spec.bar
    if bar is None or bar.sequential is None:
        return None
    from assay.stats.sequential import look_levels  # numpy: only for a sequential bar

    order = task_order(exp)
    looks = sequential_looks(bar.sequential, len(order))
    return {"spending": bar.sequential.spending, "alpha": 0.05, "looks": looks,
            "levels": look_levels(looks, len(order), spending=bar.sequential.spending),
            "task_order": order}


class SequentialLooks:
    """The looks of one run (see the module docstring)."""

    def __init__(self, exp: Experiment, out: Path, frozen: dict[str, Any], *,
                 run_to_end: bool = False, show_interim: bool = False) -> None:
        bar = exp.spec.bar
        assert bar is not None and bar.sequential is not None
        self.exp, self.out, self.bar = exp, out, bar
        self.order: list[str] = list(frozen["task_order"])
        self.looks: list[int] = list(frozen["looks"])
        self.levels: list[float] = list(frozen["levels"])
        arms = [a for a in exp.spec.arms if not a.endswith("~aa")]
        self.a = bar.baseline or arms[0]
        self.b = bar.candidate or arms[1]
        self.run_to_end = run_to_end
        self.show_interim = show_interim
        self.taken: list[dict[str, Any]] = []

    # -- where the run stands ----------------------------------------------------------

    def resume(self, state: StateDB) -> None:
        """Read the looks earlier sessions took, and rewrite ``sequential.json`` from them."""
        self.taken = state.looks()
        self.run_to_end = self.run_to_end or _was_run_to_end(self.out)
        self._write(state)

    @property
    def stopped_at(self) -> dict[str, Any] | None:
        """The look that accepted or rejected, if one did."""
        return next((lk for lk in self.taken if lk["decision"] in ("accept", "reject")), None)

    @property
    def holding(self) -> bool:
        """Whether the run stops here: a look decided and the run is not taken to the end."""
        return self.stopped_at is not None and not self.run_to_end

    def allowed(self) -> set[str] | None:
        """The tasks whose trials may start now (``None``: any, once the looks are over)."""
        if self.stopped_at is not None or len(self.taken) >= len(self.looks):
            return None if self.run_to_end or self.stopped_at is None else set()
        return set(self.order[:self.looks[len(self.taken)]])

    def due(self, state: StateDB) -> bool:
        """Whether the next look can be taken: not stopped, and every trial of its tasks is
        final (graded, or out of infrastructure retries)."""
        if self.stopped_at is not None or len(self.taken) >= len(self.looks):
            return False
        tasks = set(self.order[:self.looks[len(self.taken)]])
        return all(v.state in TRIAL_FINAL for v in state.trials() if v.key.task in tasks)

    # -- a look --------------------------------------------------------------------------

    def take(self, state: StateDB) -> dict[str, Any]:
        """Take the next look, commit it, then return it (its ``decision`` is ``continue``,
        ``accept``, ``reject`` or, at the last look, ``inconclusive``)."""
        # numpy, imported only by a run with a sequential bar (exp status never needs it)
        from assay.stats.abtest import compare_arms
        from assay.stats.sequential import DECIDED, look_verdict

        k = len(self.taken)
        n_tasks = self.looks[k]
        tasks = self.order[:n_tasks]
        level = self.levels[k]
        last = k == len(self.looks) - 1
        keep = set(tasks)
        rows = [v for v in state.trials() if v.key.task in keep]
        outcomes = [(v.key.task, v.key.arm, v.key.rep,
                     None if v.state != "done" else v.accepted) for v in rows]
        look: dict[str, Any] = {"index": k, "tasks": n_tasks, "planned_tasks": len(self.order),
                                "level": level, "last": last,
                                "trials_done": sum(1 for v in rows if v.state == "done")}
        reasons: list[str] = []
        integrity = sum(1 for v in rows if v.key.arm == self.b and v.state == "done"
                        and v.failure_code in INTEGRITY_CODES)
        try:
            # tasks as clusters, as exp compare and exp verdict read the bar by default
            res = compare_arms(outcomes, a=self.a, b=self.b, tasks=tasks, level=level)
        except Exception as exc:  # noqa: BLE001 - no graded pair yet: the look cannot decide
            res = None
            reasons.append(f"no comparison: {exc}")
        ci = None if res is None else res.ci
        look.update(delta=None if res is None else res.delta,
                    ci=None if ci is None else [ci[0], ci[1]],
                    n_compared=0 if res is None else res.n_tasks)
        decision = "inconclusive" if last else "continue"
        if integrity > self.bar.integrity_violations:
            decision = "reject"
            reasons.append(f"hard requirement integrity failed: {integrity} violation(s) in "
                           f"{self.b}, at most {self.bar.integrity_violations} allowed")
        newly = None if res is None else sum(len(v) for v in res.new_failures.values())
        if (self.bar.max_new_failures is not None and newly is not None
                and newly > self.bar.max_new_failures):
            decision = "reject"
            reasons.append(f"hard requirement new_failures failed: {newly} task(s) newly "
                           f"failing, at most {self.bar.max_new_failures} allowed")
        if decision != "reject" and res is not None and ci is not None:
            code = int(look_verdict(res.delta, ci[0], ci[1],
                                    hoped=self.bar.hoped_improvement,
                                    max_regression=self.bar.max_regression, last=last))
            decision = DECIDED[code]
        look.update(decision=decision, reasons=reasons)
        state.record_look(look)  # committed before the decision takes effect
        self.taken.append(look)
        self._write(state)
        return look

    def shown(self, look: dict[str, Any]) -> str:
        """The progress note of a look: its decision, never the interim Δ unless asked."""
        head = (f"look {look['index'] + 1} of {len(self.looks)} at {look['tasks']} of "
                f"{look['planned_tasks']} tasks (level {100 * look['level']:.2f}%): "
                f"{look['decision']}")
        if self.show_interim and look.get("delta") is not None:
            ci = look.get("ci")
            head += (f"; Δ = {100 * look['delta']:+.1f} pts" + ("" if ci is None else
                     f" [{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]") + " (shown: --show-interim)")
        return head

    def not_run(self, state: StateDB) -> list[TrialKey]:
        """The planned trials that never started (after a stop)."""
        return [v.key for v in state.trials() if v.state == "pending" and not v.attempts]

    def _write(self, state: StateDB) -> None:
        stop = self.stopped_at
        record = {
            "schema": SCHEMA, "spending": self.bar.sequential.spending
            if self.bar.sequential else None,
            "baseline": self.a, "candidate": self.b,
            "hoped_improvement": self.bar.hoped_improvement,
            "max_regression": self.bar.max_regression,
            "planned_tasks": len(self.order), "looks_planned": self.looks,
            "levels": self.levels, "looks": self.taken,
            "stopped_at_look": None if stop is None else stop["index"],
            "decision": None if stop is None else stop["decision"],
            "run_to_end": self.run_to_end}
        SequentialRecord.read(record, self.out / SEQUENTIAL_JSON)  # the record's shape
        atomic_write_json(self.out / SEQUENTIAL_JSON, record)


def _was_run_to_end(out: Path) -> bool:
    """Whether an earlier session already ran this run to the end on purpose."""
    from assay.records.io import read_json_file

    path = out / SEQUENTIAL_JSON
    if not path.is_file():
        return False
    try:
        return bool(read_json_file(path).get("run_to_end"))
    except Exception:  # noqa: BLE001 - a damaged file is rewritten from the database
        return False


__all__ = ["SEQUENTIAL_JSON", "SequentialLooks", "sequential_manifest"]
