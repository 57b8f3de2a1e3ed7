"""``assay history``'s decisions: groups, series, what changed, and drift.

Rows (``report/history.py``) are grouped by kind, suite or experiment and model or arm, and put
in time order. Within a group a new *series* starts when two runs cannot be paired (other
cases, labels or scorer for a narrow suite; another task file or task set otherwise): the same
rule ``compare`` refuses by, so a series never draws one line through two measurements.

Between consecutive runs of a series the drift test is the paired comparison ``assay compare``
and ``exp compare`` make (``compare_runs``, ``compare_coding_runs``, ``build_comparison``), on
the cases or tasks both answered. A pair is flagged when the 95% interval of the difference
excludes zero by more than the threshold the user set beforehand: ``lo > t`` or ``hi < -t``.
A changed served model id or system fingerprint under the same requested name is reported on
its own, whatever the scores did: the same name no longer names the same model. (Where such a
change coincides with a new series it is shown on the row, marked ``new_series``, but not
counted: a new series is a new baseline, and its reason is already said. A built-in model's
fingerprint is derived from the suite's files, so it changes with them.)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

from assay.errors import AssayError
from assay.report.history import (
    FINGERPRINTS,
    Drift,
    HistoryRow,
    PairFigures,
    ServedChange,
    collect,
)

SCHEMA = "assay.history/1"
SEED = 0


class Series(TypedDict):
    """Runs of a group that can be compared one after the other."""

    index: int
    started_because: str | None
    runs: list[HistoryRow]


class Group(TypedDict):
    """Runs of one kind, suite and model or arm, in time order."""

    kind: str
    suite: str
    who: str
    model: str | None
    arm: str | None
    runs: int
    series: list[Series]


class DriftFlag(TypedDict):
    """A flagged pair, listed at the top."""

    group: list[str]
    dir: str
    delta: float | None
    ci: list[float] | None


class History(TypedDict):
    """The whole history object (``assay history --json``), keys in the order printed."""

    schema: str
    roots: list[str]
    drift_threshold: float
    drift_rule: str
    groups: list[Group]
    unreadable: list[HistoryRow]
    #: runs with no answer (a dead endpoint, a run stopped before its first): not a point
    without_answers: list[HistoryRow]
    drift_flags: list[DriftFlag]
    #: each a :class:`ServedChange` with the ``group`` and ``dir`` it was seen in first
    served_model_changes: list[dict[str, Any]]
    latest_alarms: list[str]


def _group_key(row: HistoryRow) -> tuple[str, str, str]:
    """Kind, suite (with its tier: a smoke run and a full one are two lines, not one line
    broken at every other night) and arm or model."""
    who = row.get("arm") or row.get("model") or "?"
    suite = str(row.get("suite")) + (f" [tier {row['tier']}]" if row.get("tier") else "")
    return str(row.get("kind")), suite, str(who)


def _order(row: HistoryRow) -> tuple[str, str]:
    return str(row.get("started_at") or ""), str(row.get("dir"))


def _why_new_series(prev: HistoryRow, cur: HistoryRow) -> str:
    a, b = prev.get("comparable_parts") or {}, cur.get("comparable_parts") or {}
    names = {"cases": "other cases (another suite revision)", "labels": "other labels",
             "scorer": "another scorer or scorer options",
             "tasks": "another task set (another suite revision)"}
    parts = [names.get(k, k) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    return "not comparable with the run before: " + (", ".join(parts) or "other fingerprint")


def _changed(prev: HistoryRow, cur: HistoryRow) -> list[str]:
    fa, fb = prev.get("fingerprints") or {}, cur.get("fingerprints") or {}
    return [k for k in FINGERPRINTS if fa.get(k) != fb.get(k)]


def served_change(prev: HistoryRow, cur: HistoryRow) -> ServedChange | None:
    """The served model id or system fingerprint changed under the same requested name."""
    if prev.get("model") != cur.get("model") or prev.get("model") is None:
        return None
    out = ServedChange(requested=cur.get("model"))
    if models := _before_after(prev.get("served_models"), cur.get("served_models")):
        out["served_models"] = models
    if prints := _before_after(prev.get("system_fingerprints"), cur.get("system_fingerprints")):
        out["system_fingerprints"] = prints
    return out if len(out) > 1 else None


def _before_after(a: list[str] | None, b: list[str] | None) -> dict[str, list[str]] | None:
    return {"before": a, "after": b} if a and b and a != b else None


def _narrow_pair(prev: HistoryRow, cur: HistoryRow) -> PairFigures:
    from assay.report.compare_narrow import compare_runs

    c = compare_runs(Path(prev["dir"]), Path(cur["dir"]), seed=SEED)
    return {"delta": c["accuracy_diff_b_minus_a"], "ci": c["diff_ci95"], "paired": c["paired"],
            "unit": "case", "method": "paired bootstrap by case (assay compare)",
            "mcnemar_p": c["mcnemar_p"], "warnings": c["warnings"]}


def _coding_pair(prev: HistoryRow, cur: HistoryRow) -> PairFigures:
    from assay.report.compare_coding import compare_coding_runs

    c = compare_coding_runs(Path(prev["dir"]), Path(cur["dir"]), seed=SEED)
    return {"delta": c["pass_at_1_diff_b_minus_a"], "ci": c["diff_ci95"], "paired": c["tasks"],
            "unit": "task", "method": "paired bootstrap by task (assay compare)",
            "warnings": c["warnings"]}


def _experiment_pair(prev: HistoryRow, cur: HistoryRow) -> PairFigures:
    """One arm in two experiment runs, as two arms of one table: ``exp compare``'s statistics
    over the tasks both runs planned."""
    from assay.report.abcompare import build_comparison
    from assay.report.outcomes import OutcomeSet, load_run_outcomes

    before, after = "before", "after"
    sides = []
    for row, name in ((prev, before), (cur, after)):
        data = load_run_outcomes(Path(row["dir"]))
        sides.append((data, [t for t in data.arm_trials(row.get("arm") or "")], name))
    shared = [t for t in sides[0][0].tasks if t in set(sides[1][0].tasks)]
    trials = []
    for _data, ts, name in sides:
        for t in ts:
            if t.outcome.task in shared:
                t2 = type(t)(outcome=t.outcome.model_copy(update={"arm": name}),
                             attempts=t.attempts, state=t.state)
                trials.append(t2)
    table = OutcomeSet(source=Path(cur["dir"]), kind="file", trials=trials, tasks=shared,
                       arms=[before, after], weights=sides[1][0].weights)
    c = build_comparison(table, a=before, b=after, seed=SEED)
    return {"delta": c["delta"], "ci": c["ci"], "paired": c["n_tasks"], "unit": "task",
            "method": f"{c['method']} over tasks (exp compare)", "warnings": c["notes"]}


PAIRS: dict[str, Callable[[HistoryRow, HistoryRow], PairFigures]] = {
    "narrow": _narrow_pair, "coding": _coding_pair, "experiment": _experiment_pair}


def drift(prev: HistoryRow, cur: HistoryRow, threshold: float) -> Drift:
    """The paired comparison of ``cur`` against ``prev`` and whether it is flagged."""
    base: Drift = {"from": prev["dir"], "to": cur["dir"], "threshold": threshold}
    try:
        res = PAIRS[str(cur["kind"])](prev, cur)
    except AssayError as exc:
        return {**base, "flagged": False, "delta": None, "ci": None,
                "error": str(exc).splitlines()[0]}
    except (OSError, ValueError, KeyError, TypeError) as exc:  # a run torn since it was read
        return {**base, "flagged": False, "delta": None, "ci": None,
                "error": f"cannot be paired: {type(exc).__name__}: {exc}"}
    ci = res.get("ci")
    flagged, direction = False, None
    if ci:
        flagged = ci[0] > threshold or ci[1] < -threshold
        direction = None if not flagged else ("up" if ci[0] > threshold else "down")
    return {**base, **res, "flagged": flagged, "direction": direction}


def answered(row: HistoryRow) -> bool:
    """Whether a run's headline rests on anything: a run with no answer at all (every case an
    infra error, or none asked) is no measurement, and a point for it would draw one."""
    headline = row.get("headline")
    return bool(headline and headline.get("n"))


def build_history(roots: list[Path], *, threshold: float = 0.0) -> History:
    """The whole history object (``assay history --json``)."""
    rows = collect(roots)
    unreadable = sorted((r for r in rows if r.get("problem")), key=_order)
    empty = sorted((r for r in rows if not r.get("problem") and not answered(r)), key=_order)
    groups: dict[tuple[str, str, str], list[HistoryRow]] = {}
    for row in rows:
        if not row.get("problem") and answered(row):
            groups.setdefault(_group_key(row), []).append(row)
    out_groups: list[Group] = []
    drifted: list[DriftFlag] = []
    served: list[dict[str, Any]] = []
    for key in sorted(groups):
        runs = sorted(groups[key], key=_order)
        series: list[Series] = []
        prev: HistoryRow | None = None
        for row in runs:
            row["changed"] = _changed(prev, row) if prev else []
            row["served_change"] = served_change(prev, row) if prev else None
            row["drift"] = None
            if prev is None or prev.get("comparable") != row.get("comparable"):
                why = None if prev is None else _why_new_series(prev, row)
                series.append({"index": len(series), "started_because": why, "runs": []})
                if row["served_change"]:  # shown, but a new series is a new baseline anyway
                    row["served_change"]["new_series"] = True
            else:
                row["drift"] = drift(prev, row, threshold)
            series[-1]["runs"].append(row)
            row["latest"] = False
            if row["drift"] and row["drift"]["flagged"]:
                drifted.append({"group": list(key), "dir": row["dir"], "delta": row["drift"]
                                ["delta"], "ci": row["drift"]["ci"]})
            if row["served_change"] and not row["served_change"].get("new_series"):
                served.append({"group": list(key), "dir": row["dir"], **row["served_change"]})
            prev = row
        runs[-1]["latest"] = True
        kind, suite, who = key
        out_groups.append({"kind": kind, "suite": suite, "who": who,
                           "model": runs[-1].get("model"), "arm": runs[-1].get("arm"),
                           "runs": len(runs), "series": series})
    latest = [r for g in out_groups for s in g["series"] for r in s["runs"] if r["latest"]]
    alarm = [r["dir"] for r in latest
             if (r["drift"] and r["drift"]["flagged"])
             or (r["served_change"] and not r["served_change"].get("new_series"))]
    return {"schema": SCHEMA, "roots": [str(r) for r in roots], "drift_threshold": threshold,
            "drift_rule": "flagged when the paired 95% interval of the difference excludes "
                          "zero by more than drift_threshold (lo > t or hi < -t)",
            "groups": out_groups, "unreadable": unreadable,
            "without_answers": [{"dir": r["dir"], "kind": r.get("kind"),
                                 "started_at": r.get("started_at")} for r in empty],
            "drift_flags": drifted, "served_model_changes": served,
            "latest_alarms": alarm}
