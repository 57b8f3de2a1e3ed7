"""Comparing two narrow runs of the same suite, case by case.

Accuracy of two runs on the same cases is a paired measurement: the McNemar test and the
paired interval (``stats.paired_diff_interval``, clustered by case: a case's repeats count
once) use that pairing, where two independent intervals would throw it away and overstate the
uncertainty. Only (case, repeat) pairs answered in both runs are compared, and only runs
scored by the same scorer with the same options (a run from before scorers was scored by
``label``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from assay.errors import NotComparable
from assay.records.manifest import read_manifest
from assay.records.narrow import iter_narrow_rows, read_narrow_manifest
from assay.records.report import NarrowComparison
from assay.report.narrow import final_rows
from assay.stats import mcnemar_exact, paired_bootstrap_diff


def _answered(run_dir: Path, manifest: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    rows = final_rows(iter_narrow_rows(run_dir, manifest))
    return {k: r for k, r in rows.items() if not r.get("error")}


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
    a, b = _answered(run_a, ma), _answered(run_b, mb)
    keys = sorted(set(a) & set(b))
    if not keys:
        raise NotComparable("no case is answered in both runs")
    both = only_a = only_b = neither = 0
    a_not_b: list[str] = []
    b_not_a: list[str] = []
    xa: list[float] = []
    xb: list[float] = []
    for key in keys:
        ca, cb = bool(a[key].get("correct")), bool(b[key].get("correct"))
        xa.append(float(ca))
        xb.append(float(cb))
        name = key[0] if ma["parameters"]["repeats"] == 1 else f"{key[0]}#{key[1]}"
        if ca and cb:
            both += 1
        elif ca:
            only_a += 1
            a_not_b.append(name)
        elif cb:
            only_b += 1
            b_not_a.append(name)
        else:
            neither += 1
    diff, lo, hi = paired_bootstrap_diff(xa, xb, [k[0] for k in keys], n_boot=n_boot, seed=seed)
    return NarrowComparison.checked({
        "schema": NarrowComparison.schema_id(),
        "run_a": {"dir": str(run_a), "model": ma["model"]["requested"],
                  "accuracy": sum(xa) / len(xa)},
        "run_b": {"dir": str(run_b), "model": mb["model"]["requested"],
                  "accuracy": sum(xb) / len(xb)},
        "paired": len(keys),
        "only_in_one_run": len(set(a) ^ set(b)),
        "table": {"both_right": both, "only_a": only_a, "only_b": only_b, "both_wrong": neither},
        "mcnemar_p": mcnemar_exact(only_a, only_b),
        "accuracy_diff_b_minus_a": diff,
        "diff_ci95": [lo, hi],
        "interval": {"method": "wilson_mover", "clustered_by": "case id"},
        "a_right_b_wrong": a_not_b,
        "b_right_a_wrong": b_not_a,
        "warnings": warnings,
    }, f"comparison of {run_a} and {run_b}")


def compare_markdown(c: dict[str, Any]) -> str:
    t = c["table"]
    lo, hi = c["diff_ci95"]
    lines = [
        f"# assay compare: A = {c['run_a']['model']}, B = {c['run_b']['model']}", "",
        *[f"> **Warning:** {w}" for w in c["warnings"]],
        "",
        "| | B right | B wrong |", "|---|---:|---:|",
        f"| **A right** | {t['both_right']} | {t['only_a']} |",
        f"| **A wrong** | {t['only_b']} | {t['both_wrong']} |", "",
        f"- paired cases: {c['paired']} (answered in only one run: {c['only_in_one_run']})",
        f"- accuracy A {100 * c['run_a']['accuracy']:.1f}%, B {100 * c['run_b']['accuracy']:.1f}%",
        f"- difference B − A: {100 * c['accuracy_diff_b_minus_a']:+.1f} points, 95% paired "
        f"CI by case [{100 * lo:+.1f}, {100 * hi:+.1f}] ({c['interval']['method']})",
        f"- exact McNemar p = {c['mcnemar_p']:.4g}", "",
        "## A right, B wrong", "",
        (", ".join(f"`{x}`" for x in c["a_right_b_wrong"]) or "none"), "",
    ]
    return "\n".join(lines)
