"""``assay judge pairwise``: a pinned judge's preference between two arms, task by task.

Two sides, each an arm of an experiment run directory: ``RUN --a ARM --b ARM`` (two arms of one
run) or ``RUN_A RUN_B`` (an arm of each; ``--a``/``--b`` name them when a run has several).
Trials are paired by task and repetition; a pair needs a graded trial on both sides, started
from the same tree (fixture digest), else it is listed as skipped with the reason. Each
candidate's material is rebuilt from its frozen artifact and its recorded trajectory
(``grading/verify/judge_material.py``), scrubbed of every arm, model, agent, experiment and run
directory name of both runs, and shown under an opaque id; each pair is asked in both orders.

The output directory keeps the plan (frozen before the first call, so a resume shows the same
ids: running the same command again only asks for the orders not yet recorded), one
append-only row per order, and the summary ``pairwise.json`` that ``exp compare --preference``
reads.

As an experiment check (``pairwise:`` in experiment.yaml), :func:`pairwise_check` runs the same
judging into ``<run>/pairwise/`` once the trials are done; the experiment report and
``exp compare`` pick that directory up. When it cannot run (no judge endpoint, a judge that
cannot be reached, a plan made by another judge), the reason is written beside the plan as
``pairwise_error.json`` so the report, built from disk alone, can say why the section is
missing.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assay.errors import InputError, NotComparable, RecordError, RunConflict

if TYPE_CHECKING:
    from assay.records.pairwise import PairAttempt, PairwisePlan, PlannedPair, SkippedPair

PathLike = str | os.PathLike[str]
SUMMARY_SCHEMA = "assay.pairwise.summary/1"


def _side(run: Path, arm: str | None, flag: str) -> tuple[Any, str]:
    from assay.report.sources import load_outcomes

    data = load_outcomes(run)
    if data.kind != "run":
        raise InputError(f"{run}: pairwise judging needs an experiment run directory (it reads "
                         "each trial's frozen artifact and trajectory)")
    if arm is None:
        if len(data.arms) != 1:
            raise InputError(f"{run}: {len(data.arms)} arms ({', '.join(data.arms)}): name one "
                             f"with {flag}")
        arm = data.arms[0]
    if arm not in data.arms:
        raise InputError(f"{run}: {flag} {arm!r} is not an arm here (arms: "
                         f"{', '.join(data.arms)})")
    return data, arm


def _identifying(data: Any) -> set[str]:
    """Every name that could tell the judge which arm a candidate came from."""
    m = data.manifest or {}
    # the run directory as an absolute path only: a relative one ("run") is a common word
    names = {str(Path(data.source).resolve()), str(m.get("name") or "")}
    for arm_name, arm in (m.get("arms") or {}).items():
        names.add(arm_name)
        for key in ("agent", "model"):
            if arm.get(key):
                names.add(str(arm[key]))
    names.update(data.arms)
    return {n for n in names if n}


def _graded(data: Any, arm: str) -> dict[tuple[str, int], Any]:
    return {(t.outcome.task, t.outcome.rep): t for t in data.arm_trials(arm)}


def _attempt_info(run: Path, trial: Any) -> PairAttempt | None:
    from assay.records.pairwise import PairAttempt
    from assay.records.trial import read_trial

    link = getattr(trial.outcome, "link", None)
    if trial.state != "graded" or not link:
        return None
    attempt = (run / link).resolve()
    rec = read_trial(attempt)
    return PairAttempt(dir=str(attempt), bundle=rec.task.path,
                       fixture_digest=rec.task.fixture_digest)


def plan_pairs(data_a: Any, arm_a: str, data_b: Any, arm_b: str,
               seed: int) -> tuple[list[PlannedPair], list[SkippedPair]]:
    """Every (task, rep) both sides planned: a pair when both have a graded trial from the same
    starting tree, else a skipped entry with the reason."""
    from assay.grading.judge.pairwise import opaque_ids
    from assay.records.pairwise import PlannedPair, SkippedPair

    ta, tb = _graded(data_a, arm_a), _graded(data_b, arm_b)
    pairs, skipped = [], []
    for key in sorted(set(ta) & set(tb)):
        task, rep = key
        ia = _attempt_info(Path(data_a.source), ta[key])
        ib = _attempt_info(Path(data_b.source), tb[key])
        if ia is None or ib is None:
            missing = [s for s, i in (("a", ia), ("b", ib)) if i is None]
            skipped.append(SkippedPair(task=task, rep=rep, why="no graded trial on side "
                                       + " and ".join(missing)))
            continue
        if ia.fixture_digest != ib.fixture_digest:
            skipped.append(SkippedPair(task=task, rep=rep,
                                       why="the two trials started from different trees"))
            continue
        id_a, id_b = opaque_ids(seed, task, rep)
        pairs.append(PlannedPair(task=task, rep=rep, ids={"a": id_a, "b": id_b}, a=ia, b=ib))
    for key in sorted(set(ta) ^ set(tb)):
        skipped.append(SkippedPair(task=key[0], rep=key[1], why="planned on one side only"))
    return pairs, skipped


def _written(plan: PairwisePlan) -> dict[str, Any]:
    return plan.model_dump(mode="json", by_alias=True)


def _open_plan(out: Path, plan: PairwisePlan) -> PairwisePlan:
    """The plan frozen in ``out``, created from ``plan`` on the first call. A later call with
    the same sides, judge, parts and seed may add pairs graded since (their ids come from the
    same seed); a pair already planned must still point at the same attempts."""
    from assay.records.io import atomic_write_json, read_json_file
    from assay.records.pairwise import PLAN_FILE, PairwisePlan

    path = out / PLAN_FILE
    if not path.exists():
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, _written(plan))
        return plan
    data = read_json_file(path)
    PairwisePlan.check_schema_id(data.get("schema"), path)
    old = PairwisePlan.read(data, path)
    for key in ("a", "b", "judge_revision", "show", "seed"):
        if getattr(old, key) != getattr(plan, key):
            raise RunConflict(f"{out}: holds a pairwise comparison with another {key} "
                              f"({data.get(key)!r}, now {_written(plan)[key]!r}); use a new "
                              "--out")
    known = {(p.task, p.rep): p for p in old.pairs}
    for p in plan.pairs:
        was = known.get((p.task, p.rep))
        if was is not None and (was.a.dir, was.b.dir) != (p.a.dir, p.b.dir):
            raise RunConflict(f"{out}: pair {p.task}/{p.rep} was planned on other "
                              "attempts than the runs now hold; use a new --out")
    added = [p for p in plan.pairs if (p.task, p.rep) not in known]
    if added:
        old.pairs = old.pairs + added
        now = {(p.task, p.rep) for p in old.pairs}
        old.skipped = [s for s in plan.skipped if (s.task, s.rep) not in now]
        atomic_write_json(path, _written(old))
    return old


def _material(pair_side: PairAttempt, show: tuple[str, ...],
              names: set[str]) -> tuple[Any, int, str]:
    from assay.grading.verify.judge_material import scrub, scrub_text, to_material, trial_parts
    from assay.suites.bundle import load_bundle

    try:
        bundle = load_bundle(Path(pair_side.bundle))
    except InputError as exc:
        raise InputError(f"{pair_side.dir}: the task bundle it ran cannot be loaded "
                         f"({exc}); the pristine tree is needed to rebuild the artifact") from None
    attempt = Path(pair_side.dir)
    parts = trial_parts(bundle, attempt, show, expect_digest=pair_side.fixture_digest)
    names = names | {str(attempt), str(attempt.parent.parent)}
    count = scrub(parts, names)
    # the task's instruction is the same for both sides, but a name in it is still a name
    context, _ = scrub_text(bundle.instruction_path.read_text(encoding="utf-8"), names)
    return to_material(parts), count, context


async def _judge_all(judge: Any, plan: PairwisePlan, done: set[tuple[str, str]],
                     names: set[str], writer: Any, jobs: int) -> int:
    from assay.grading.judge.endpoint import judge_client
    from assay.grading.judge.pairwise import judge_order

    if all((f"{p.task}/{p.rep}", o) in done for p in plan.pairs for o in ("ab", "ba")):
        return 0  # nothing to ask: no endpoint needed (a finished run re-run without one)
    client = judge_client(judge, max_tries=3, backoff_base_s=0.2)
    sem = asyncio.Semaphore(max(1, jobs))
    show = tuple(plan.show)
    asked = 0

    async def one(pair: PlannedPair) -> None:
        nonlocal asked
        key = f"{pair.task}/{pair.rep}"
        orders = [o for o in ("ab", "ba") if (key, o) not in done]
        if not orders:
            return
        async with sem:
            (ma, ca, ctx), (mb, cb, _) = await asyncio.gather(
                asyncio.to_thread(_material, pair.a, show, names),
                asyncio.to_thread(_material, pair.b, show, names))
            rows = await asyncio.gather(*(
                judge_order(client, judge, pair=pair, order=o, materials={"a": ma, "b": mb},
                            context=ctx, scrubbed={"a": ca, "b": cb}) for o in orders))
        for row in rows:
            writer.append(row.model_dump(mode="json"))
            asked += 1

    try:
        await asyncio.gather(*(one(p) for p in plan.pairs))
    finally:
        await client.aclose()
    return asked


def _rows(out: Path, revision: str) -> list[dict[str, Any]]:
    from assay.records.io import iter_jsonl
    from assay.records.pairwise import JUDGEMENTS_FILE

    path = out / JUDGEMENTS_FILE
    if not path.is_file():
        return []
    return [r for r in iter_jsonl(path) if r.get("judge_revision") == revision]


def calibration_of(judge: Any) -> dict[str, Any] | str:
    """The judge's calibration record, or the word ``uncalibrated``."""
    from assay.grading.verify.judge_check import calibration_status

    return calibration_status(judge)


def summarize(out: Path, plan: PairwisePlan, *, clusters: dict[str, str] | None = None,
              weights: dict[str, float] | None = None, level: float = 0.95,
              calibration: dict[str, Any] | str = "uncalibrated") -> dict[str, Any]:
    """The summary of every recorded order of this plan's judge revision."""
    from assay.stats.preference import PairOutcome, preference

    by_pair: dict[tuple[str, int], dict[str, Any]] = {}
    for row in _rows(out, plan.judge_revision):
        cell = by_pair.setdefault((row["task"], int(row["rep"])), {})
        cell.setdefault(row["order"], row)  # the first recorded row of an order counts
    outcomes = []
    pending = 0
    for p in plan.pairs:
        cell = by_pair.get((p.task, p.rep), {})
        if "ab" not in cell or "ba" not in cell:
            pending += 1
            continue
        outcomes.append(PairOutcome(p.task, p.rep, cell["ab"].get("preferred"),
                                    cell["ba"].get("preferred")))
    res = preference(outcomes, clusters=clusters, weights=weights, level=level)
    rows = [r for c in by_pair.values() for r in c.values()]
    invalid_orders = sum(1 for r in rows if r["status"] == "invalid")
    result = res.to_dict()
    written = _written(plan)  # the summary repeats the plan as its file holds it
    return {"schema": SUMMARY_SCHEMA, "a": written["a"], "b": written["b"],
            "judge": {**written["judge"], "revision": plan.judge_revision,
                      "calibration": calibration},
            "show": written["show"], "seed": plan.seed, "pairs_planned": len(plan.pairs),
            "pairs_pending": pending, "orders_recorded": len(rows),
            "invalid_orders": invalid_orders, "skipped": written["skipped"], **result}


def judge_pairwise(run_a: PathLike, run_b: PathLike | None = None, *, judge: PathLike,
                   out: PathLike, a: str | None = None, b: str | None = None,
                   show: Sequence[str] | None = None, seed: int = 0,
                   jobs: int = 2, cluster: str = "task", level: float = 0.95) -> dict[str, Any]:
    """Judge every pair of arm ``a`` against arm ``b`` (see the module docstring) into
    ``out``; returns the summary (also written to ``out/pairwise.json``)."""
    from assay.grading.judge.pairwise import pairwise_pin, pairwise_revision
    from assay.grading.verify.judge_material import DEFAULT_SHOW, PARTS
    from assay.records.io import JsonlAppender, atomic_write_json
    from assay.records.manifest import utc_now
    from assay.records.pairwise import JUDGEMENTS_FILE, PLAN_FILE, SUMMARY_FILE, PairwisePlan
    from assay.suites.judge_spec import load_judge

    show_t = tuple(show or DEFAULT_SHOW)
    bad = [s for s in show_t if s not in PARTS]
    if bad or not show_t:
        raise InputError(f"--show: choose from {', '.join(PARTS)} (got {', '.join(bad)})")
    loaded = load_judge(Path(judge))
    path_a = Path(run_a)
    path_b = Path(run_b) if run_b is not None else path_a
    if run_b is None and (a is None or b is None or a == b):
        raise InputError("one run: name two different arms with --a ARM --b ARM")
    data_a, arm_a = _side(path_a, a, "--a")
    data_b, arm_b = (_side(path_a, b, "--b") if run_b is None else _side(path_b, b, "--b"))
    pairs, skipped = plan_pairs(data_a, arm_a, data_b, arm_b, seed)
    if not pairs:
        raise NotComparable(f"no task and repetition has a graded trial on both sides "
                            f"({len(skipped)} skipped)")
    outp = Path(out)
    revision = pairwise_revision(loaded)
    plan = _open_plan(outp, PairwisePlan.read({
        "schema": PairwisePlan.schema_id(),
        "a": {"run": str(path_a.resolve()), "arm": arm_a},
        "b": {"run": str(path_b.resolve()), "arm": arm_b},
        "judge": {"path": str(Path(judge).resolve()), "pin": pairwise_pin(loaded)},
        "judge_revision": revision, "show": list(show_t), "seed": seed, "pairs": pairs,
        "skipped": skipped, "created_at": utc_now()}, outp / PLAN_FILE))
    names = _identifying(data_a) | _identifying(data_b)
    done = {(r["pair"], r["order"]) for r in _rows(outp, revision)}
    with JsonlAppender(outp / JUDGEMENTS_FILE) as writer:
        asked = asyncio.run(_judge_all(loaded, plan, done, names, writer, jobs))
    clusters = data_a.cluster_map(cluster)
    summary = summarize(outp, plan, clusters=clusters, weights=data_a.weights, level=level,
                        calibration=calibration_of(loaded))
    summary["asked_this_session"] = asked
    atomic_write_json(outp / SUMMARY_FILE, summary)
    return summary


CHECK_DIR = "pairwise"
ERROR_FILE = "pairwise_error.json"


def pairwise_check(run_dir: PathLike, *, jobs: int = 2) -> dict[str, Any] | None:
    """The experiment's ``pairwise:`` check on a run whose trials are done: None when the
    experiment has no such block; else the summary, or ``{"error": why, "exit_code": n}``
    (also written to ``<run>/pairwise/pairwise_error.json``) when the judging could not be
    done. Never raises for the judge's trouble: the trials are done and must be reported."""
    from assay.errors import AssayError
    from assay.records.io import atomic_write_json, read_json_file
    from assay.records.manifest import utc_now
    from assay.suites.experiment import ExperimentSpec, pairwise_arms
    from assay.suites.experiment_pairwise import pairwise_judge_path

    run = Path(run_dir)
    manifest = read_json_file(run / "manifest.json")
    settings = (manifest.get("identity") or {}).get("settings") or {}
    if settings.get("pairwise") is None:
        return None
    spec = ExperimentSpec.model_validate(settings)
    pw = spec.pairwise
    assert pw is not None  # checked just above; for the type checker
    arms = pairwise_arms(spec)
    out = run / CHECK_DIR
    try:
        if arms is None:  # refused when the file was loaded; a hand-edited manifest only
            raise InputError(f"{run}: the pairwise block names no two arms")
        summary = judge_pairwise(run, judge=pairwise_judge_path(
            Path(manifest["experiment_file"]), pw.judge), out=out, a=arms[0], b=arms[1],
            show=pw.show, seed=pw.seed, jobs=jobs)
    except AssayError as exc:
        # exit 3 whatever the class: the trials are done and recorded, the check asked for is
        # missing; exit 2 would promise that nothing ran
        why = f"{type(exc).__name__}: {exc}"
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(out / ERROR_FILE, {"error": why, "at": utc_now()})
        return {"error": why, "exit_code": 3}
    (out / ERROR_FILE).unlink(missing_ok=True)
    return summary


def read_preference(pairwise_dir: PathLike) -> dict[str, Any]:
    """The summary a ``judge pairwise`` wrote, for ``exp compare --preference``."""
    from assay.records.io import read_json_file
    from assay.records.pairwise import SUMMARY_FILE

    path = Path(pairwise_dir)
    if path.is_dir():
        path = path / SUMMARY_FILE
    if not path.is_file():
        raise InputError(f"{pairwise_dir}: no {SUMMARY_FILE}: not a `judge pairwise --out` "
                         "directory")
    data = read_json_file(path)
    if data.get("schema") != SUMMARY_SCHEMA:
        raise RecordError(f"{path}: not a pairwise summary ({data.get('schema')!r})")
    return data


__all__ = ["CHECK_DIR", "ERROR_FILE", "judge_pairwise", "pairwise_check", "plan_pairs",
           "read_preference", "summarize"]
