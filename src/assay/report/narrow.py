"""Figures for a narrow-task run, computed from the raw rows and the manifest alone.

Nothing here calls a model: ``assay report RUN_DIR`` rebuilds every number from disk, which is
what lets a reader check any figure against the rows behind it.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from assay.grading.answers.scorers import describe
from assay.records.io import torn_tail
from assay.records.layout import RAW_PREDICTIONS, narrow_key, standing_rows
from assay.records.narrow import iter_narrow_rows, read_narrow_manifest
from assay.records.report import NarrowReport
from assay.report.latency import latency_figures
from assay.report.narrow_cases import answered_value, is_listed, wrong_cases
from assay.stats import clustered_wilson

INVALID_COLUMN = "(invalid)"


# What the figures need from a row; the answer texts and per-try records stay on disk, so a
# report over 100,000 rows holds a few small fields per row, not the rows.
_REPORT_FIELDS = ("id", "repeat", "expected", "label", "correct", "attempts", "invalid_reason",
                  "first_invalid_reason", "latency_ms", "usage", "served_model", "error",
                  "answer", "score_detail")
# (the answer texts of the cases listed as wrong are read in a second pass: report.narrow_cases)
# the fields whose texts repeat across rows
_SHARED = frozenset({"expected", "label", "invalid_reason", "first_invalid_reason",
                     "served_model", "error"})


class SlimRow(Mapping[str, Any]):
    """The fields of a row that the figures use (:data:`_REPORT_FIELDS`, a missing one read as
    None), in slots rather than a dict: about a fifth of the memory, which is what lets a
    report over 100,000 rows stay small. Repeated strings (labels, reasons, the served model)
    are shared, and ``usage`` is kept as a flat tuple and read back as the dict it was."""

    __slots__ = _REPORT_FIELDS

    def __init__(self, row: Mapping[str, Any], shared: dict[str, str]) -> None:
        for name in _REPORT_FIELDS:
            value = row.get(name)
            if name in _SHARED and isinstance(value, str):
                value = shared.setdefault(value, value)
            elif name == "usage" and isinstance(value, dict):
                value = tuple(x for kv in value.items() for x in kv)
            object.__setattr__(self, name, value)

    def __getitem__(self, key: str) -> Any:
        if key not in _REPORT_FIELDS:
            raise KeyError(key)
        value = getattr(self, key)
        if key == "usage" and isinstance(value, tuple):
            return dict(zip(value[::2], value[1::2], strict=True))
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(_REPORT_FIELDS)

    def __len__(self) -> int:
        return len(_REPORT_FIELDS)


def slim(row: Mapping[str, Any], shared: dict[str, str] | None = None) -> SlimRow:
    return SlimRow(row, {} if shared is None else shared)


def final_rows(rows: Iterable[dict[str, Any]]) -> dict[tuple[str, int], SlimRow]:
    """The row standing for each (case, repeat), reduced to what the figures use."""
    shared: dict[str, str] = {}
    return standing_rows((slim(r, shared) for r in rows), narrow_key)


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def case_interval(rows: Iterable[Mapping[str, Any]],
                  hit: Callable[[Mapping[str, Any]], bool]) -> list[float] | None:
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


def _equals(name: str, value: Any) -> Callable[[Mapping[str, Any]], bool]:
    return lambda r: bool(r[name] == value)


def _field_right(path: str) -> Callable[[Mapping[str, Any]], bool]:
    """Whether a row's ``json_fields`` verdict has ``path`` right."""
    return lambda r: bool(
        ((r.get("score_detail") or {}).get("fields") or {}).get(path, {}).get("correct"))


def per_label(answered: Sequence[Mapping[str, Any]],
              labels: list[str]) -> dict[str, dict[str, Any]]:
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
                                            _equals("expected", label)),
            "recall_ci95": case_interval((r for r in answered if r["expected"] == label),
                                         _equals("label", label))}
    return out


def _answer_key(row: Mapping[str, Any]) -> str:
    """What two repeats must share to agree: the label, or the JSON of what was read."""
    value = answered_value(row)
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def agreement(answered: Sequence[Mapping[str, Any]], repeats: int) -> dict[str, Any] | None:
    """How often repeats of a case agree, over their valid answers only.

    Only cases with every repeat answered count, and within them only the valid answers: an
    invalid answer carries no label to agree on, and two invalid answers with different texts
    are not "the same answer" (nor is an invalid one a disagreement with a valid one). A case
    needs two valid answers to be compared at all; how many answers were invalid is said beside
    the rate, so a run whose every answer was invalid reads "no case compared", never 100%."""
    if repeats <= 1:
        return None
    by_case: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
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


def per_field(answered: Sequence[Mapping[str, Any]],
              scorer: dict[str, Any] | None) -> dict[str, dict[str, Any]] | None:
    """Accuracy of every field a ``json_fields`` scorer lists (nested ones as ``a.b``), over
    the answered rows: an invalid answer counts as wrong in every field, as in the accuracy."""
    if not scorer or scorer.get("type") != "json_fields":
        return None
    out: dict[str, dict[str, Any]] = {}
    n = len(answered)
    for path in _paths(scorer.get("fields") or {}):
        is_right = _field_right(path)
        right = sum(1 for r in answered if is_right(r))
        interval = case_interval(answered, is_right)
        out[path] = {"n": n, "correct": right, "accuracy": _ratio(right, n),
                     "accuracy_ci95": interval}
    return out


def usage_totals(answered: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
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
    report: dict[str, Any] = {
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
        "wrong_cases": None,  # filled in below, once the rows above are let go
        "inputs_source": None,
        "scorer": {"type": (scorer or {}).get("type", "label"), "config": scorer,
                   "description": describe(scorer),
                   "output_field": manifest["suite"].get("output_field")},
        "per_field": per_field(answered, scorer),
    }
    listed_ids = {r["id"] for r in finals.values() if is_listed(r)}
    del finals, answered, errors  # the listed cases are built one at a time, without them
    report["wrong_cases"], report["inputs_source"] = wrong_cases(run_dir, manifest, listed_ids)
    return NarrowReport.checked(report, run_dir / NarrowReport.file)
