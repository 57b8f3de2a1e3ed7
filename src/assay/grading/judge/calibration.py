"""How far a judge can be trusted: its agreement with people, computed once per revision.

A judge's scores mean little until they are set beside human grades of the same material, so
``assay judge calibrate`` runs the judge on every graded item and writes, per criterion, exact
agreement, Cohen's kappa with an interval and the confusion table, into
``calibration-<revision>.json``. Every report that uses a judge looks that file up by the
judge's revision (:func:`calibration_for`) and shows its figures, or the word "uncalibrated".

Invalid judgements are counted apart (``invalid``), never as agreement or disagreement. Every
judgement is appended to ``calibration-<revision>.judgements.jsonl`` as it arrives; a rerun
reuses the judgements already there for the same revision and material (a crashed calibration
resumes without paying twice), and the calibration file is written once: the same figures again
leave it as it is, different ones are refused (``NeverOverwrite``), never written over.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.errors import NeverOverwrite, RecordError
from assay.grading.judge.human import HumanGrades, HumanItem
from assay.grading.judge.reply import Material, judge_material
from assay.models.client import ChatClient
from assay.records.io import JsonlAppender, read_json_file, write_new_text
from assay.records.judgement import (
    CriterionAgreement,
    JudgeCalibration,
    Judgement,
    iter_judgements,
)
from assay.records.manifest import utc_now
from assay.stats.agreement import agreement
from assay.suites.judge_spec import LoadedJudge

UNCALIBRATED = "uncalibrated"

Judge = Callable[[Material, dict[str, Any]], Awaitable[Judgement]]


def calibration_path(judge: LoadedJudge, where: Path | None = None) -> Path:
    return Path(where or judge.path.parent) / f"calibration-{judge.revision}.json"


def judgements_path(judge: LoadedJudge, where: Path | None = None) -> Path:
    return Path(where or judge.path.parent) / f"calibration-{judge.revision}.judgements.jsonl"


def calibration_for(judge: LoadedJudge, where: Path | None = None) -> dict[str, Any] | None:
    """The calibration of exactly this judge revision (beside its judge.yaml unless
    ``where``), or None: the judge is uncalibrated."""
    path = calibration_path(judge, where)
    if not path.is_file():
        return None
    data = read_json_file(path)
    JudgeCalibration.check_schema_id(data.get("schema"), path)
    record = JudgeCalibration.read(data, path)
    if record.judge_revision != judge.revision:
        raise RecordError(f"{path}: holds revision {record.judge_revision}, not "
                          f"{judge.revision}")
    return record.model_dump(mode="json", by_alias=True)


def calibration_label(calibration: dict[str, Any] | None) -> str:
    """One line for a report: per criterion exact agreement and kappa with its interval, or
    ``uncalibrated``."""
    if calibration is None:
        return UNCALIBRATED
    parts = []
    for cid, a in calibration["criteria"].items():
        exact = "n/a" if a["exact"] is None else f"{a['exact']:.0%}"
        kappa = "n/a" if a["kappa"] is None else f"{a['kappa']:.2f}"
        ci = a.get("kappa_ci")
        ci_text = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""
        parts.append(f"{cid}: exact {exact}, kappa {kappa}{ci_text} (n={a['n']}"
                     + (f", {a['invalid']} invalid" if a["invalid"] else "") + ")")
    return "; ".join(parts) or UNCALIBRATED


@dataclass(frozen=True)
class Calibrated:
    """What a calibration produced: the record, its file, and whether an identical one was
    already there."""

    record: dict[str, Any]
    path: Path
    unchanged: bool
    judged: int  # judgements asked of the model this time (the rest were reused)
    #: why the invalid judgements are invalid: each one's first problem, with its count
    why_invalid: dict[str, int] = field(default_factory=dict)


def _previous(path: Path, judge: LoadedJudge) -> dict[tuple[str, str], Judgement]:
    out: dict[tuple[str, str], Judgement] = {}
    if not path.exists():
        return out
    for j in iter_judgements(path):
        item = j.subject.get("item")
        if j.judge_revision == judge.revision and isinstance(item, str) and j.material_sha256:
            out[(item, j.material_sha256)] = j
    return out


def _figures(record: dict[str, Any]) -> dict[str, Any]:
    """What makes two calibrations the same: everything but when it was made and how the
    grades file was spelt on the command line (relative, absolute, from another folder: its
    sha256 says whether it is the same file)."""
    out = {k: v for k, v in record.items() if k != "at"}
    if isinstance(out.get("human"), dict):
        out["human"] = {k: v for k, v in out["human"].items() if k != "path"}
    return out


def summarise(judge: LoadedJudge, human: HumanGrades, judgements: dict[str, Judgement], *,
              judgements_file: str, seed: int = 0) -> JudgeCalibration:
    """The calibration record from each item's judgement (``judgements[item id]``)."""
    criteria: dict[str, CriterionAgreement] = {}
    graded_ids = {cid for item in human.items for cid in item.grades}
    for c in judge.criteria:
        if c.id not in graded_ids:
            continue
        pairs: list[tuple[str | int, str | int]] = []
        invalid = 0
        graded = 0
        for item in human.items:
            if c.id not in item.grades:
                continue
            graded += 1
            j = judgements[item.id]
            if j.status != "valid" or j.scores is None:
                invalid += 1
                continue
            pairs.append((j.scores[c.id], item.grades[c.id]))
        scale = c.allowed()
        a = agreement([p[0] for p in pairs], [p[1] for p in pairs], labels=scale, seed=seed)
        weighted = None
        if c.is_range and pairs:
            weighted = agreement([p[0] for p in pairs], [p[1] for p in pairs], labels=scale,
                                 weights="linear", seed=seed, resamples=1).kappa
        criteria[c.id] = CriterionAgreement(
            scale=scale, graded=graded, n=a.n, invalid=invalid, exact=a.exact, kappa=a.kappa,
            kappa_ci=a.kappa_ci, method=a.method, confidence=a.confidence,
            weighted_kappa=weighted, confusion=a.confusion)
    return JudgeCalibration(
        schema_=JudgeCalibration.schema_id(), judge_revision=judge.revision, pin=judge.pin(),
        human=human.describe(), items=len(human.items),
        invalid=sum(1 for i in human.items if judgements[i.id].status != "valid"),
        criteria=criteria, ungraded=[c.id for c in judge.criteria if c.id not in graded_ids],
        unmapped=list(human.unmapped),
        served_models=sorted({j.served_model for j in judgements.values() if j.served_model}),
        judgements=judgements_file, at=utc_now())


async def calibrate(client: ChatClient, judge: LoadedJudge, human: HumanGrades, *,
                    where: Path | None = None, concurrency: int = 4) -> Calibrated:
    """Judge every item (reusing judgements already on disk for this revision and material),
    append each new one, and write ``calibration-<revision>.json`` once."""
    out_path = calibration_path(judge, where)
    log_path = judgements_path(judge, where)
    if out_path.exists():
        existing = read_json_file(out_path)
        old_sha = (existing.get("human") or {}).get("sha256")
        if old_sha != human.sha256:
            raise NeverOverwrite(f"{out_path} exists for other human grades (sha256 "
                                 f"{str(old_sha)[:12]}, these are {human.sha256[:12]}) and is "
                                 "never overwritten; pass --out DIR to calibrate elsewhere")
    done = _previous(log_path, judge)
    results: dict[str, Judgement] = {}
    todo: list[HumanItem] = []
    for item in human.items:
        previous = done.get((item.id, item.material.sha256()))
        if previous is not None:
            results[item.id] = previous
        else:
            todo.append(item)
    gate = asyncio.Semaphore(max(1, concurrency))
    with JsonlAppender(log_path, sync_every=1) as log:

        async def one(item: HumanItem) -> None:
            async with gate:
                j = await judge_material(client, judge, item.material,
                                         subject={"calibration": human.sha256[:12],
                                                  "item": item.id})
            log.append(j.to_json())
            results[item.id] = j

        # Every item runs to its end before a failure is raised, so each judgement paid for
        # is on disk and a rerun resumes after it.
        failures = [r for r in await asyncio.gather(*(one(item) for item in todo),
                                                    return_exceptions=True)
                    if isinstance(r, BaseException)]
    if failures:
        raise failures[0]
    record = summarise(judge, human, results, judgements_file=log_path.name)
    data = record.model_dump(mode="json", by_alias=True)
    why = dict(Counter((j.problems or ["no reason recorded"])[0] for j in results.values()
                       if j.status != "valid"))
    if out_path.exists():
        existing = read_json_file(out_path)
        if _figures(existing) == _figures(data):
            return Calibrated(existing, out_path, True, len(todo), why)
        raise NeverOverwrite(f"{out_path} exists with other figures and is never overwritten; "
                             f"the new judgements are kept in {log_path}")
    write_new_text(out_path, json.dumps(data, indent=2, ensure_ascii=False,
                                        allow_nan=False) + "\n")
    return Calibrated(data, out_path, False, len(todo), why)
