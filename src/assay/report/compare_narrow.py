"""Comparing two narrow runs of the same suite, case by case.

Accuracy of two runs on the same cases is a paired measurement: the McNemar test and the paired
interval (``stats.paired_diff_interval``, clustered by case) use that pairing, where two
independent intervals would throw it away and overstate the uncertainty. The unit is the case:
a case's repeats are one measurement (its rate), not new cases, so runs with different
repetition counts compare every answer of both (a 1-repeat run against a 3-repeat run is not
repeat 0 against repeat 0 with the rest thrown away), and a run repeated five times is not five
times the evidence. Only cases answered in both runs are compared, and only runs scored by the
same scorer with the same options (a run from before scorers was scored by ``label``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from assay.errors import NotComparable
from assay.records.manifest import read_manifest
from assay.records.narrow import iter_narrow_rows, read_narrow_manifest
from assay.records.report import NarrowComparison
from assay.report.methods import method_footnote
from assay.report.narrow import SlimRow, final_rows
from assay.stats import mcnemar_exact, paired_bootstrap_diff


def _answered(run_dir: Path, manifest: dict[str, Any]) -> dict[tuple[str, int], SlimRow]:
    rows = final_rows(iter_narrow_rows(run_dir, manifest))
    return {k: r for k, r in rows.items() if not r.get("error")}


def _by_case(rows: dict[tuple[str, int], SlimRow]) -> dict[str, list[int]]:
    """Each case's answers as 1 (right) or 0 (wrong or invalid), every repeat kept."""
    out: dict[str, list[int]] = {}
    for (case, _rep), row in rows.items():
        out.setdefault(case, []).append(int(bool(row.get("correct"))))
    return out


def compare_runs(run_a: Path, run_b: Path, *, seed: int = 0,
                 n_boot: int = 10000) -> dict[str, Any]:
    ma, mb = read_manifest(run_a), read_manifest(run_b)
    for m, d in ((ma, run_a), (mb, run_b)):
        if m.get("kind") != "narrow":
            raise NotComparable(f"{d}: not a narrow-task run")
    ma, mb = read_narrow_manifest(run_a), read_narrow_manifest(run_b)
    sa, sb = ma["suite"], mb["suite"]
    if sa["cases_sha256"] != sb["cases_sha256"] or sa["labels"] != sb["labels"]:
        raise NotComparable(
            "the runs are not of the same suite (cases fingerprint or labels differ): "
            f"{sa['cases_sha256'][:12]} vs {sb['cases_sha256'][:12]}")
    label = {"type": "label", "reads": "json"}
    if (sa.get("scorer") or label) != (sb.get("scorer") or label):
        raise NotComparable("the runs are scored differently (a verdict of one scorer is not "
                            f"a verdict of the other): {sa.get('scorer') or label} vs "
                            f"{sb.get('scorer') or label}")
    warnings = []
    if sa["prompt_sha256"] != sb["prompt_sha256"]:
        warnings.append("the system prompts differ: the comparison measures prompt and model "
                        "together")
    if ma["parameters"] != mb["parameters"]:
        warnings.append(f"parameters differ: {ma['parameters']} vs {mb['parameters']}")
    a, b = _by_case(_answered(run_a, ma)), _by_case(_answered(run_b, mb))
    cases = sorted(set(a) & set(b))
    if not cases:
        raise NotComparable("no case is answered in both runs")
    ka, kb = ma["parameters"]["repeats"], mb["parameters"]["repeats"]
    if ka != kb:
        warnings.append(f"repetitions differ ({ka} in A, {kb} in B): cases are compared on "
                        "their per-case rates, each case counted once")
    table = {"both_right": 0, "only_a": 0, "only_b": 0, "both_wrong": 0, "same_partial": 0}
    a_not_b: list[str] = []
    b_not_a: list[str] = []
    xa = [sum(a[c]) / len(a[c]) for c in cases]
    xb = [sum(b[c]) / len(b[c]) for c in cases]
    for case, ra, rb in zip(cases, xa, xb, strict=True):
        if ra > rb:
            table["only_a"] += 1
            a_not_b.append(case)
        elif rb > ra:
            table["only_b"] += 1
            b_not_a.append(case)
        else:
            table["both_right" if ra == 1.0 else "both_wrong" if ra == 0.0
                  else "same_partial"] += 1
    diff, lo, hi = paired_bootstrap_diff(xa, xb, cases, n_boot=n_boot, seed=seed)
    return NarrowComparison.checked({
        "schema": NarrowComparison.schema_id(),
        "run_a": {"dir": str(run_a), "model": ma["model"]["requested"],
                  "accuracy": sum(xa) / len(xa)},
        "run_b": {"dir": str(run_b), "model": mb["model"]["requested"],
                  "accuracy": sum(xb) / len(xb)},
        "paired": len(cases),
        "only_in_one_run": len(set(a) ^ set(b)),
        "table": table,
        "mcnemar_p": mcnemar_exact(table["only_a"], table["only_b"]),
        "accuracy_diff_b_minus_a": diff,
        "diff_ci95": [lo, hi],
        "interval": {"method": "wilson_mover", "clustered_by": "case id"},
        "a_right_b_wrong": a_not_b,
        "b_right_a_wrong": b_not_a,
        "repeats": {"a": ka, "b": kb},
        "answers": {"a": sum(len(a[c]) for c in cases), "b": sum(len(b[c]) for c in cases)},
        "warnings": warnings,
    }, f"comparison of {run_a} and {run_b}")


def compare_markdown(c: dict[str, Any]) -> str:
    t = c["table"]
    lo, hi = c["diff_ci95"]
    reps = c.get("repeats") or {"a": 1, "b": 1}
    once = reps["a"] == reps["b"] == 1
    if once:
        table = ["| | B right | B wrong |", "|---|---:|---:|",
                 f"| **A right** | {t['both_right']} | {t['only_a']} |",
                 f"| **A wrong** | {t['only_b']} | {t['both_wrong']} |"]
    else:
        table = ["| cases (per-case rates) | count |", "|---|---:|",
                 f"| both always right | {t['both_right']} |",
                 f"| A right more often | {t['only_a']} |",
                 f"| B right more often | {t['only_b']} |",
                 f"| same rate, in between | {t.get('same_partial', 0)} |",
                 f"| both always wrong | {t['both_wrong']} |"]
    answers = c.get("answers")
    used = (f"; answers used A {answers['a']}, B {answers['b']} ({reps['a']} and {reps['b']} "
            "repeat(s) a case)" if answers and not once else "")
    lines = [
        f"# assay compare: A = {c['run_a']['model']}, B = {c['run_b']['model']}", "",
        *[f"> **Warning:** {w}" for w in c["warnings"]],
        "",
        *table, "",
        f"- paired cases: {c['paired']} (answered in only one run: {c['only_in_one_run']})"
        + used,
        f"- accuracy A {100 * c['run_a']['accuracy']:.1f}%, B {100 * c['run_b']['accuracy']:.1f}%"
        + ("" if once else " (mean of per-case rates)"),
        f"- difference B − A: {100 * c['accuracy_diff_b_minus_a']:+.1f} points, 95% paired "
        f"interval by case [{100 * lo:+.1f}, {100 * hi:+.1f}]¹",
        f"- exact McNemar p = {c['mcnemar_p']:.4g}"
        + ("" if once else " (sign test over cases whose rates differ)"), "",
        "## A right, B wrong" if once else "## A right more often than B", "",
        (", ".join(f"`{x}`" for x in c["a_right_b_wrong"]) or "none"), "",
        method_footnote(c["interval"]["method"]), "",
    ]
    return "\n".join(lines)
