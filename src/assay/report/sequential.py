"""A sequential bar in the report: the looks, where the run stopped, what it did not spend.

Read from ``sequential.json`` (written by ``runner/sequential.py`` after each look, which is
committed to ``state.sqlite`` first). The verdict of a run a look stopped is that look's
decision (``exp verdict`` says at which look, at which level, and on how many tasks); a hard
requirement the look could not read (cost, from the ledgers) still rejects. A run that went
through every look gets its last look's decision, read at the level the spending left for it.
A run resumed past its deciding look on purpose (``--run-to-end``) is analysed as the fixed
design it became, and the verdict says so. Kept apart from ``report/experiment.py`` so the
comparison's own sections stay as they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from assay.errors import EXIT_BELOW_BAR, EXIT_INCONCLUSIVE, EXIT_OK
from assay.records.experiment import SequentialRecord
from assay.records.io import read_json_file
from assay.report.ci_outputs import md
from assay.report.render.numbers import pts

SEQUENTIAL_JSON = "sequential.json"
_EXIT = {"accept": EXIT_OK, "reject": EXIT_BELOW_BAR, "inconclusive": EXIT_INCONCLUSIVE}

# the look plot, in px
PLOT_W, ROW_H, LABEL_W, TOP = 460, 24, 150, 36


def sequential_section(run_dir: Path, manifest: dict[str, Any],
                       arms: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The looks as the report shows them; ``None`` for a run without a sequential bar."""
    path = Path(run_dir) / SEQUENTIAL_JSON
    if not path.is_file():
        return None
    seq = read_json_file(path)
    SequentialRecord.read(seq, path)  # a damaged file is named, file and field
    looks = list(seq.get("looks") or [])
    planned = int(seq.get("planned_tasks") or 0)
    stop = seq.get("stopped_at_look")
    reps = int(manifest.get("repetitions") or 1)
    out: dict[str, Any] = {
        "spending": seq.get("spending"), "planned_tasks": planned,
        "looks_planned": seq.get("looks_planned"), "levels": seq.get("levels"),
        "looks": looks, "stopped_at_look": stop, "decision": seq.get("decision"),
        "run_to_end": bool(seq.get("run_to_end")),
        "hoped_improvement": seq.get("hoped_improvement"),
        "max_regression": seq.get("max_regression")}
    if stop is not None:
        ran = int(looks[stop]["tasks"])
        per_arm = (planned - ran) * reps
        out["tasks_not_run"] = planned - ran
        out["trials_not_run"] = 0 if out["run_to_end"] else per_arm * len(arms)
        out["cost_not_spent_usd"] = None if out["run_to_end"] else _unspent(arms, per_arm)
    return out


def _unspent(arms: dict[str, dict[str, Any]], per_arm: int) -> float | None:
    """What the trials not run would have cost at each arm's observed cost per graded trial;
    unknown (None) when an arm's cost is unknown or it graded nothing."""
    if not arms:
        return None
    total = 0.0
    for row in arms.values():
        cost, graded = row.get("cost_usd"), row.get("graded") or 0
        if cost is None or not graded or not row.get("cost_complete"):
            return None
        total += float(cost) / graded * per_arm
    return round(total, 6)


def compare_arms_rows(cmp: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each compared arm's cost and graded trials, from an ``exp compare`` result, in the
    shape :func:`sequential_section` reads (``cost_usd``, ``graded``, ``cost_complete``)."""
    graded = {cmp["a"]: sum(r["n_a"] for r in cmp["per_task"]),
              cmp["b"]: sum(r["n_b"] for r in cmp["per_task"])}
    return {arm: {"cost_usd": cmp["cost"][arm]["total_usd"], "graded": graded[arm],
                  "cost_complete": cmp["cost"][arm]["complete"]} for arm in graded}


def apply_looks(verdict: dict[str, Any], seq: dict[str, Any]) -> dict[str, Any]:
    """The verdict of a run with a sequential bar (see the module docstring)."""
    looks = seq["looks"]
    if not looks:
        verdict["reasons"].insert(0, "no look taken yet: this is an interim reading at 95%, "
                                  "not the sequential bar's verdict")
        return verdict
    if seq["run_to_end"] and seq["stopped_at_look"] is not None:
        verdict["reasons"].insert(0, (
            f"analysed as the fixed design: look {seq['stopped_at_look'] + 1} decided "
            f"{seq['decision']}, and the run was resumed past it to the end on purpose "
            "(--run-to-end); its looks are shown, the verdict is the 95% interval's"))
        return verdict
    chosen = looks[seq["stopped_at_look"]] if seq["stopped_at_look"] is not None else looks[-1]
    if seq["stopped_at_look"] is None and not chosen.get("last"):
        verdict["reasons"].insert(0, f"{len(looks)} of {len(seq['looks_planned'])} looks "
                                  "taken: an interim reading at 95%, not the bar's verdict")
        return verdict
    hard = [c for c in verdict["checks"] if c["hard"] and c["ok"] is False]
    decision = "reject" if hard else chosen["decision"]
    ci = chosen.get("ci")
    head = (f"{'stopped at' if not chosen.get('last') else 'decided at the last,'} look "
            f"{chosen['index'] + 1} of {len(seq['looks_planned'])} ({chosen['tasks']} of "
            f"{seq['planned_tasks']} tasks), its interval read at "
            f"{100 * chosen['level']:.2f}% ({seq['spending']} spending): Δ = "
            + ("n/a" if chosen.get("delta") is None else pts(chosen["delta"]))
            + ("" if ci is None else f" [{pts(ci[0])}, {pts(ci[1])}]") + f": {decision}")
    reasons = [head, *chosen.get("reasons", [])]
    if hard:
        reasons += [r for r in verdict["reasons"] if r.startswith("hard requirement")]
    if seq.get("trials_not_run"):
        cost = seq.get("cost_not_spent_usd")
        reasons.append(f"{seq['trials_not_run']} planned trials ({seq['tasks_not_run']} tasks) "
                       "not run" + ("" if cost is None else
                                    f", about ${cost:.4f} at the observed cost per trial"))
    verdict.update(decision=decision, reasons=reasons, exit_code=_EXIT[decision],
                   tasks_to_settle=None if decision != "inconclusive" else
                   verdict.get("tasks_to_settle"))
    return verdict


def looks_markdown(seq: dict[str, Any]) -> list[str]:
    """The looks as a table, for report.md."""
    n = len(seq["looks_planned"] or [])
    out = ["## Sequential bar: the looks", "",
           f"{seq['spending']} spending over {n} looks at "
           + ", ".join(str(k) for k in seq["looks_planned"] or []) + f" of "
           f"{seq['planned_tasks']} tasks (task order drawn from the seed, in the manifest).", "",
           "| look | tasks | level | Δ | interval | decision |", "|---|---:|---:|---:|---|---|"]
    for lk in seq["looks"]:
        ci = lk.get("ci")
        out.append(f"| look {lk['index'] + 1} of {n} | {lk['tasks']} | "
                   f"{100 * lk['level']:.2f}% | "
                   + ("n/a" if lk.get("delta") is None else pts(lk["delta"])) + " | "
                   + ("n/a" if ci is None else f"[{pts(ci[0])}, {pts(ci[1])}]")
                   + f" | {md(lk['decision'])} |")
    if seq.get("stopped_at_look") is not None:
        cost = seq.get("cost_not_spent_usd")
        out += ["", f"The run stopped at look {seq['stopped_at_look'] + 1}: "
                + ("resumed to the end on purpose (--run-to-end), analysed as the fixed design."
                   if seq["run_to_end"] else
                   f"{seq['trials_not_run']} planned trials not run ("
                   + ("their cost unknown" if cost is None else f"about ${cost:.4f} at the "
                      "observed cost per trial") + ").")]
    return [*out, ""]


def looks_plot(seq: dict[str, Any]) -> dict[str, Any] | None:
    """The interval of each look as a horizontal bar, narrowing look by look, with the bar's
    lines (0, the hoped improvement, −max_regression); coordinates for the page's SVG."""
    looks = [lk for lk in seq["looks"] if lk.get("ci") is not None]
    if not looks:
        return None
    hoped = float(seq.get("hoped_improvement") or 0.0)
    reg = -float(seq.get("max_regression") or 0.0)
    lo = min(min(lk["ci"][0] for lk in looks), reg, 0.0)
    hi = max(max(lk["ci"][1] for lk in looks), hoped, 0.0)
    span = (hi - lo) or 1.0

    def x(v: float) -> float:
        return round(LABEL_W + (v - lo) / span * PLOT_W, 1)

    rows = []
    for i, lk in enumerate(looks):
        y = TOP + i * ROW_H + ROW_H / 2
        rows.append({"y": round(y, 1), "x_lo": x(lk["ci"][0]), "x_hi": x(lk["ci"][1]),
                     "x_mid": x(lk["delta"]), "label": f"look {lk['index'] + 1}: "
                     f"{lk['tasks']} tasks", "title": f"{lk['tasks']} tasks, level "
                     f"{100 * lk['level']:.2f}%: Δ {pts(lk['delta'])} [{pts(lk['ci'][0])}, "
                     f"{pts(lk['ci'][1])}], {lk['decision']}"})
    bottom = TOP + len(looks) * ROW_H
    # labels on two rows, so that lines close together keep legible labels
    lines = [{"x": x(v), "label": label, "ty": TOP - 10 - 10 * (i % 2)} for i, (v, label) in
             enumerate(sorted([(0.0, "0"), (hoped, f"hoped {pts(hoped)}"),
                               (reg, f"−max_regression {pts(reg)}")]))]
    return {"w": LABEL_W + PLOT_W + 20, "h": bottom + 10, "top": TOP - 6, "bottom": bottom,
            "rows": rows, "lines": lines}


__all__ = ["SEQUENTIAL_JSON", "apply_looks", "compare_arms_rows", "looks_markdown", "looks_plot",
           "sequential_section"]
