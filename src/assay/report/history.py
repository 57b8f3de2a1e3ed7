"""``assay history``'s rows: every run found under some directories, one row per run and arm.

A scheduled job leaves a pile of run directories behind; this module turns each into the few
figures a reader follows over time (the headline with its interval, the invalid and infra
rates, cost, the model as asked and as served) and the fingerprints that say what was measured
(suite, prompt, scorer, tasks, agent files, image). Everything is read through the records'
own readers and the report builders, so a figure here is the figure of that run's report.

A directory that cannot be read (no manifest, a torn or corrupt one, a newer schema, rows that
do not parse) becomes a row with its reason: one bad run in a nightly pile must not hide the
others, and must not pass unnoticed either.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from assay.errors import AssayError
from assay.records.layout import MANIFEST
from assay.records.manifest import read_manifest

#: how deep under a given directory runs are looked for, and how many directories at most:
#: a history is pointed at a runs folder, not at a home directory
MAX_DEPTH = 6
MAX_DIRS = 20000
#: the fingerprints a row may carry, in the order columns show them
FINGERPRINTS = ("suite", "prompt", "scorer", "tasks", "agent_files", "image")


class Headline(TypedDict):
    """The figure a row follows over time, with its interval."""

    name: str  # accuracy, pass@1, pass rate
    value: float | None
    ci: list[float] | None
    n: int | None
    interval: str  # how the interval was made


class PairFigures(TypedDict, total=False):
    """The paired comparison of two consecutive runs, as its ``compare`` made it."""

    delta: float | None
    ci: list[float] | None
    paired: int
    unit: str  # case or task
    method: str
    mcnemar_p: float | None  # narrow runs only
    warnings: list[str]


#: ``drift`` of a row against the run before it: ``from``, ``to``, ``threshold``, then the
#: pair's figures, ``flagged`` and ``direction`` (or ``error`` when they could not be paired).
Drift = TypedDict("Drift", {
    "from": str, "to": str, "threshold": float, "flagged": bool, "delta": float | None,
    "ci": list[float] | None, "error": str, "paired": int, "unit": str, "method": str,
    "mcnemar_p": float | None, "warnings": list[str], "direction": str | None}, total=False)


class ServedChange(TypedDict, total=False):
    """The served model id or system fingerprint changed under the same requested name:
    ``before`` and ``after`` of each that changed."""

    requested: str | None
    served_models: dict[str, list[str]]
    system_fingerprints: dict[str, list[str]]
    new_series: bool  # shown, not counted: a new series is a new baseline anyway


class HistoryRow(TypedDict, total=False):
    """One run (one arm of an experiment) in ``assay history``, keys in the order printed. An
    unreadable run has only ``dir``, ``kind``, ``problem``, ``started_at``, ``suite``, ``arm``
    and ``model``; ``report/history_series.py`` adds the last four keys."""

    dir: str
    kind: str | None
    problem: str | None
    started_at: str | None
    warnings: list[str]
    model: str | None
    served_models: list[str]
    system_fingerprints: list[str]
    suite: str | None
    tier: str | None
    arm: str | None
    headline: Headline
    invalid_rate: float | None
    infra_rate: float | None
    cost_usd: float | None
    cost_note: str | None
    tokens: int | None
    #: short digests by :data:`FINGERPRINTS` name (None: not known for this kind of run)
    fingerprints: dict[str, str | None]
    #: the digest two runs must share to be compared, and its parts (named in a new series)
    comparable: str | None
    comparable_parts: dict[str, str | None]
    changed: list[str]
    served_change: ServedChange | None
    drift: Drift | None
    latest: bool


def _digest(value: Any) -> str | None:
    """A short, stable digest of a JSON value (None stays None: unknown is not a value)."""
    if value is None:
        return None
    blob = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _short(sha: str | None) -> str | None:
    return sha[:12] if isinstance(sha, str) else None


@dataclass
class Found:
    """A run directory found on disk, with the reason it cannot be read (if any)."""

    path: Path
    problem: str | None = None


def find_runs(roots: Iterable[Path]) -> list[Found]:
    """Every directory holding a ``manifest.json`` under ``roots`` (a run is not searched
    inside: an experiment's trial folders are not runs of their own). Symbolic links are not
    followed, depth and count are bounded."""
    found: list[Found] = []
    seen: set[Path] = set()
    budget = [MAX_DIRS]
    for root in roots:
        root = Path(root)
        if not root.is_dir():
            found.append(Found(root, "not a directory"))
            continue
        for path in _walk(root, 0, budget):
            real = path.resolve()
            if real not in seen:
                seen.add(real)
                found.append(Found(path))
    return found


def _walk(path: Path, depth: int, budget: list[int]) -> Iterator[Path]:
    budget[0] -= 1
    if budget[0] < 0:
        return
    if (path / MANIFEST).is_symlink() or (path / MANIFEST).is_file():
        yield path  # a symlinked manifest is found, then refused (run_rows)
        return
    if depth >= MAX_DEPTH:
        return
    try:
        children = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError:
        return
    for entry in children:
        if entry.is_dir(follow_symlinks=False) and not entry.name.startswith("."):
            yield from _walk(Path(entry.path), depth + 1, budget)


def _base(path: Path, manifest: dict[str, Any]) -> HistoryRow:
    return {"dir": str(path), "kind": manifest.get("kind"), "problem": None,
            "started_at": manifest.get("started_at") or manifest.get("created_at"),
            "warnings": list(manifest.get("warnings") or [])}


def _model(manifest: dict[str, Any]) -> HistoryRow:
    model = manifest.get("model") or {}
    return {"model": model.get("requested"), "served_models": list(model.get("served_models")
                                                                   or []),
            "system_fingerprints": list(model.get("system_fingerprints") or [])}


def narrow_rows(path: Path) -> list[HistoryRow]:
    """One row: accuracy with its Wilson interval, from the run's own report builder."""
    from assay.report.narrow import build_report

    rep = build_report(path)
    manifest = read_manifest(path)
    suite = manifest["suite"]
    label = {"type": "label", "reads": "json"}
    scorer = suite.get("scorer") or label
    expected = rep["expected_rows"] or 0
    usage = rep.get("usage") or {}
    return [{
        **_base(path, manifest), **_model(manifest),
        "suite": suite["name"], "tier": suite.get("tier"), "arm": None,
        "headline": {"name": "accuracy", "value": rep["accuracy"], "ci": rep["accuracy_ci95"],
                     "n": rep["n"], "interval": "wilson"},
        "invalid_rate": rep["invalid_remaining"] / rep["n"] if rep["n"] else None,
        "infra_rate": (rep["infra_errors"] + rep["missing_rows"]) / expected
        if expected else None,
        "cost_usd": None, "cost_note": "no prices for model runs",
        "tokens": None if usage.get("incomplete") else usage.get("total_tokens"),
        "fingerprints": {"suite": _digest([suite["cases_sha256"], suite["labels"],
                                           suite.get("split")]),
                         "prompt": _short(suite.get("prompt_sha256")),
                         "scorer": _digest(scorer), "tasks": _short(suite["cases_sha256"]),
                         "agent_files": None, "image": None},
        # what compare refuses to pair: other cases, labels or scorer
        "comparable": _digest([suite["cases_sha256"], suite["labels"], scorer]),
        "comparable_parts": {"cases": _short(suite["cases_sha256"]),
                             "labels": _digest(suite["labels"]), "scorer": _digest(scorer)},
    }]


def coding_rows(path: Path) -> list[HistoryRow]:
    """One row: pass@1 over tasks with its bootstrap interval, from the coding report."""
    from assay.records.coding import CodingManifest
    from assay.records.manifest import read_run_manifest
    from assay.report.coding import build_coding_report

    manifest = read_run_manifest(path, CodingManifest)
    rep = build_coding_report(path)
    suite = manifest["suite"]
    p1 = rep.get("pass_at_1") or {}
    expected = rep.get("expected_rows") or 0
    return [{
        **_base(path, manifest), **_model(manifest),
        "suite": suite["name"], "arm": None,
        "headline": {"name": "pass@1", "value": p1.get("mean"), "ci": p1.get("ci95"),
                     "n": p1.get("tasks"), "interval": "bootstrap over tasks"},
        "invalid_rate": None,
        "infra_rate": (rep.get("infra_errors", 0) + rep.get("missing_rows", 0)) / expected
        if expected else None,
        "cost_usd": None, "cost_note": "no prices for model runs", "tokens": None,
        "fingerprints": {"suite": _short(suite["tasks_sha256"]), "prompt": None,
                         "scorer": _short(rep.get("grade_revision")),
                         "tasks": _short(suite["tasks_sha256"]), "agent_files": None,
                         "image": None},
        "comparable": _short(suite["tasks_sha256"]),
        "comparable_parts": {"tasks": _short(suite["tasks_sha256"])},
    }]


def experiment_rows(path: Path) -> list[HistoryRow]:
    """One row per arm: the arm's task-weighted pass rate with its cluster t interval (the
    figure ``exp compare`` shows per arm), infra rate and the cost of every attempt."""
    from assay.report.abcompare import arm_cost, arm_pass_rate
    from assay.report.outcomes import load_run_outcomes

    data = load_run_outcomes(path)
    manifest = data.manifest or {}
    identity = manifest.get("identity") or {}
    tasks = identity.get("tasks") or {}
    settings = identity.get("settings") or {}
    images = {t: fp.get("image") for t, fp in tasks.items() if isinstance(fp, dict)}
    rows: list[HistoryRow] = []
    for arm in data.arms:
        trials = data.arm_trials(arm)
        info = (manifest.get("arms") or {}).get(arm) or {}
        rate = arm_pass_rate(data, arm, None)
        cost = arm_cost(trials)
        infra = sum(1 for t in trials if t.outcome.passed is None)
        agent = {k: info.get(k) for k in ("agent", "agent_identity", "script_sha256", "params")}
        rows.append({
            **_base(path, manifest), "started_at": manifest.get("created_at"),
            "model": info.get("model"), "served_models": arm_served_models(path, arm),
            "system_fingerprints": [],
            "suite": manifest.get("name"), "tier": settings.get("tier"), "arm": arm,
            "headline": {"name": "pass rate", "value": rate["pass_rate"], "ci": rate["ci"],
                         "n": rate["n_tasks"], "interval": "cluster t over tasks"},
            "invalid_rate": None,
            "infra_rate": infra / len(trials) if trials else None,
            "cost_usd": cost.get("total_usd"),
            "cost_note": None if cost.get("complete") else "lower bound or unknown",
            "tokens": None,
            # the file's settings but the arms (each arm's own are its agent_files)
            "fingerprints": {"suite": _digest({k: v for k, v in settings.items()
                                               if k != "arms"}), "prompt": None,
                             "scorer": None,  # the verifier: in each task's fingerprint
                             "tasks": _digest(tasks), "agent_files": _digest(agent),
                             "image": _digest(images) if any(images.values()) else None},
            "comparable": _digest(tasks),
            "comparable_parts": {"tasks": _digest(tasks)},
        })
    return rows


def arm_served_models(path: Path, arm: str) -> list[str]:
    """The model ids the upstream said it served to an arm's attempts, in order of first call
    (from each attempt's gateway ledger, ``model_calls.jsonl``)."""
    from assay.records.io import iter_rows
    from assay.records.ledger import ModelCall

    first: dict[str, str] = {}
    for ledger in sorted((path / "trials").glob(f"*/{arm}/*/*/{ModelCall.file}")):
        for row in iter_rows(ledger):
            served, when = row.get("model_served"), str(row.get("time") or "")
            if isinstance(served, str) and served and (served not in first
                                                        or when < first[served]):
                first[served] = when
    return sorted(first, key=lambda m: first[m])


READERS = {"narrow": narrow_rows, "coding": coding_rows, "experiment": experiment_rows}


def run_rows(found: Found) -> list[HistoryRow]:
    """The rows of one run directory; an unreadable one is one row that says why."""
    path = found.path
    broken: HistoryRow = {"dir": str(path), "kind": None, "problem": found.problem,
                          "started_at": None, "suite": None, "arm": None, "model": None}
    if found.problem:
        return [broken]
    if (path / MANIFEST).is_symlink():  # a run directory's records are files, never links out
        broken["problem"] = f"{MANIFEST} is a symbolic link: not read"
        return [broken]
    try:
        manifest = read_manifest(path)
        broken["kind"] = manifest.get("kind")
        broken["started_at"] = manifest.get("started_at") or manifest.get("created_at")
        reader = READERS.get(str(manifest.get("kind")))
        if reader is None:
            broken["problem"] = f"unknown kind of run {manifest.get('kind')!r}"
            return [broken]
        return reader(path)
    except AssayError as exc:
        broken["problem"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        # a torn file, a hand-edited manifest: said, never a traceback over the whole pile
        broken["problem"] = f"cannot be read: {type(exc).__name__}: {exc}"
    return [broken]


def collect(roots: Iterable[Path]) -> list[HistoryRow]:
    """Every row of every run under ``roots``, unreadable runs included."""
    return [row for found in find_runs(roots) for row in run_rows(found)]
