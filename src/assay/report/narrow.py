"""Figures for a narrow-task run, computed from the raw rows and the manifest alone.

Nothing here calls a model: ``assay report RUN_DIR`` rebuilds every number from disk, which is
what lets a reader check any figure against the rows behind it.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from assay.grading.scorers import describe
from assay.records.io import torn_tail
from assay.records.layout import RAW_PREDICTIONS, narrow_key, standing_rows
from assay.records.narrow import iter_narrow_rows, read_narrow_manifest
from assay.records.report import NarrowReport
from assay.report.latency import latency_figures
from assay.report.narrow_cases import answered_value, wrong_cases
from assay.stats import clustered_wilson

INVALID_COLUMN = "(invalid)"


# What the figures need from a row; the answer texts and per-try records stay on disk, so a
# report over 100,000 rows holds a few small fields per row, not the rows.
_REPORT_FIELDS = ("id", "repeat", "expected", "label", "correct", "attempts", "invalid_reason",
                  "first_invalid_reason", "latency_ms", "usage", "served_model", "error",
                  "answer", "score_detail")
# (the answer texts of the cases listed as wrong are read in a second pass: report.narrow_cases)


def slim(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row.get(k) for k in _REPORT_FIELDS}


def final_rows(rows: Iterable[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """The row standing for each (case, repeat), reduced to what the figures use."""
    return standing_rows((slim(r) for r in rows), narrow_key)


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def case_interval(rows: Iterable[dict[str, Any]],
                  hit: Callable[[dict[str, Any]], bool]) -> list[float] | None:
    """95% interval of the share of ``rows`` that ``hit``, clustered by case: each case counts
    once with its rate over its repeats (``stats.moderated.clustered_wilson``), so five repeats
    of the same answers give the interval of one, not of five times as many cases. None when
    there are no rows."""
    by_case: dict[str, list[int]] = {}
    for r in rows:
        cell = by_case.setdefault(r["id"], [0, 0])
        cell[0] += 1
        cell[1] += int(bool(hit(r)))
    if not by_case:
        return None
    cells = list(by_case.values())
    _, lo, hi, _ = clustered_wilson([k / n for n, k in cells], [n for n, _ in cells])
    return [lo, hi]


def per_label(answered: list[dict[str, Any]], labels: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for label in labels:
        tp = sum(1 for r in answered if r["expected"] == label and r["label"] == label)
        predicted = sum(1 for r in answered if r["label"] == label)
        support = sum(1 for r in answered if r["expected"] == label)
        precision = _ratio(tp, predicted)
        recall = _ratio(tp, support)
        f1 = (2 * precision * recall / (precision + recall)
              if precision is not None and recall is not None and precision + recall > 0
              else (0.0 if precision == 0 or recall == 0 else None))
        out[label] = {
            "precision": precision, "recall": recall, "f1": f1, "support": support,
            "predicted": predicted,
            "precision_ci95": case_interval((r for r in answered if r["label"] == label),
                                            lambda r, lab=label: r["expected"] == lab),
            "recall_ci95": case_interval((r for r in answered if r["expected"] == label),
                                         lambda r, lab=label: r["label"] == lab)}
    return out


def _answer_key(row: dict[str, Any]) -> str:
    """What two repeats must share to agree: the label, or the JSON of what was read."""
    value = answered_value(row)
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def agreement(answered: list[dict[str, Any]], repeats: int) -> dict[str, Any] | None:
    """How often repeats of a case agree, over their valid answers only.

    Only cases with every repeat answered count, and within them only the valid answers: an
    invalid answer carries no label to agree on, and two invalid answers with different texts
    are not "the same answer" (nor is an invalid one a disagreement with a valid one). A case
    needs two valid answers to be compared at all; how many answers were invalid is said beside
    the rate, so a run whose every answer was invalid reads "no case compared", never 100%."""
    if repeats <= 1:
        return None
    by_case: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in answered:
        by_case[r["id"]].append(r)
    full = {cid: rows for cid, rows in by_case.items() if len(rows) == repeats}
    valid = {cid: [_answer_key(r) for r in rows if not r.get("invalid_reason")]
             for cid, rows in full.items()}
    compared = {cid: keys for cid, keys in valid.items() if len(keys) >= 2}
    consistent = sorted(cid for cid, keys in compared.items() if len(set(keys)) == 1)
    unstable = sorted(cid for cid in compared if cid not in set(consistent))
    return {
        "cases_with_all_repeats": len(full),
        "cases_compared": len(compared),
        "consistent_cases": len(consistent),
        "rate": _ratio(len(consistent), len(compared)),
        "unstable_cases": unstable,
        "answers": sum(len(rows) for rows in full.values()),
        "invalid_answers": sum(len(rows) - len(valid[cid]) for cid, rows in full.items()),
    }


def _paths(fields: dict[str, Any], prefix: str = "") -> list[str]:
    out: list[str] = []
    for name, rule in fields.items():
        out.append(prefix + name)
        out += _paths(rule.get("fields") or {}, f"{prefix}{name}.")
    return out


def per_field(answered: list[dict[str, Any]],
              scorer: dict[str, Any] | None) -> dict[str, dict[str, Any]] | None:
    """Accuracy of every field a ``json_fields`` scorer lists (nested ones as ``a.b``), over
    the answered rows: an invalid answer counts as wrong in every field, as in the accuracy."""
    if not scorer or scorer.get("type") != "json_fields":
        return None
    out: dict[str, dict[str, Any]] = {}
    n = len(answered)
    for path in _paths(scorer.get("fields") or {}):
        right = sum(1 for r in answered
                    if ((r.get("score_detail") or {}).get("fields") or {}).get(path, {})
                    .get("correct"))
        interval = case_interval(answered, lambda r, path=path: bool(
            ((r.get("score_detail") or {}).get("fields") or {}).get(path, {}).get("correct")))
        out[path] = {"n": n, "correct": right, "accuracy": _ratio(right, n),
                     "accuracy_ci95": interval}
    return out


def usage_totals(answered: list[dict[str, Any]]) -> dict[str, Any]:
    """Token totals that admit what they do not know: ``incomplete`` is true as soon as one
    answer lacked usage, and a total no answer reported is ``None``, never 0."""
    totals: dict[str, Any] = {}
    incomplete = False
    rows_without = 0
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        values = []
        for r in answered:
            u = r.get("usage")
            v = u.get(key) if isinstance(u, dict) else None
            if v is None:
                incomplete = True
            else:
                values.append(v)
        totals[key] = sum(values) if values else None
    for r in answered:
        u = r.get("usage")
        if not isinstance(u, dict) or u.get("incomplete"):
            rows_without += 1
            incomplete = True
    totals["incomplete"] = incomplete
    totals["rows_missing_usage"] = rows_without
    return totals


def build_report(run_dir: Path) -> dict[str, Any]:
    """The ``report.json`` of a narrow run, checked against :class:`NarrowReport`."""
    manifest = read_narrow_manifest(run_dir)
    rows_path = run_dir / RAW_PREDICTIONS
    labels: list[str] = manifest["suite"]["labels"]
    scorer = manifest["suite"].get("scorer")
    by_label = scorer is None or scorer.get("type") == "label"
    repeats: int = manifest["parameters"]["repeats"]
    expected_total = manifest["suite"]["n_cases"] * repeats
    finals = final_rows(iter_narrow_rows(run_dir, manifest))
    answered = [r for r in finals.values() if not r.get("error")]
    errors = [r for r in finals.values() if r.get("error")]
    n = len(answered)
    correct = sum(1 for r in answered if r.get("correct"))
    latencies = [r["latency_ms"] for r in answered if r.get("latency_ms") is not None]
    confusion: dict[str, dict[str, int]] = {
        e: {p: 0 for p in [*labels, INVALID_COLUMN]} for e in labels}
    for r in answered if by_label else ():
        predicted = r["label"] or INVALID_COLUMN
        confusion.setdefault(r["expected"], {}).setdefault(predicted, 0)
        confusion[r["expected"]][predicted] += 1
    served = Counter(r.get("served_model") or "(not reported)" for r in answered)
    interval = case_interval(answered, lambda r: bool(r.get("correct")))
    listed, inputs_source = wrong_cases(run_dir, manifest, finals.values())
    return NarrowReport.checked({
        "schema": NarrowReport.schema_id(),
        "run_id": manifest["run_id"],
        "suite": manifest["suite"]["name"],
        "model": manifest["model"]["requested"],
        "served_models": dict(served),
        "system_fingerprints": manifest["model"]["system_fingerprints"],
        "isolation_note": None,
        "expected_rows": expected_total,
        "n": n,
        "correct": correct,
        "accuracy": _ratio(correct, n),
        "accuracy_ci95": interval,
        "invalid_remaining": sum(1 for r in answered if r.get("invalid_reason")),
        "invalid_first_try": sum(1 for r in answered if r.get("first_invalid_reason")),
        "retried": sum(1 for r in answered if r.get("attempts", 1) > 1),
        "invalid_reasons": dict(Counter(r["invalid_reason"] for r in answered
                                        if r.get("invalid_reason"))),
        "infra_errors": len(errors),
        "infra_error_ids": sorted({r["id"] for r in errors}),
        "missing_rows": expected_total - len(finals),
        "latency_ms": latency_figures(latencies),
        "confusion": confusion,
        "per_label": per_label(answered, labels) if by_label else {},
        "agreement": agreement(answered, repeats),
        "usage": usage_totals(answered),
        "torn_tail_bytes": len(torn_tail(rows_path)[1]),
        "warnings": manifest.get("warnings", []),
        "labels": labels,
        "labels_source": manifest["suite"].get("labels_source"),
        "parameters": manifest["parameters"],
        "started_at": manifest.get("started_at"),
        "ended_at": manifest.get("ended_at"),
        "wrong_cases": listed,
        "inputs_source": inputs_source,
        "scorer": {"type": (scorer or {}).get("type", "label"), "config": scorer,
                   "description": describe(scorer)},
        "per_field": per_field(answered, scorer),
    }, run_dir / NarrowReport.file)
