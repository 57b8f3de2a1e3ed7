"""Rubric grading in a spreadsheet: a blind CSV out, the same CSV with scores back in.

Some graders would rather work in a spreadsheet than a terminal, and a team may split the
answers between people. The CSV carries only what the grader may see (shuffled, under opaque
ids, redacted like a terminal session); the map from opaque id back to (task, sample) never
leaves the runs::

    RUN_DIR/grades/exports/<export_id>.json              opaque answer id -> (task, sample)

An import is all or nothing: every line is checked before a grade is written, because a
half-imported sheet would leave the grader unsure which of their scores count. A cell that a
spreadsheet would run as a formula is quoted, since model output is untrusted.
"""

from __future__ import annotations

import csv
import hashlib
import io
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from assay.errors import GradingError
from assay.grading.rubric.pool import (
    build_pool,
    fresh_seed,
    loads_object,
    open_run,
    shuffle_answers,
)
from assay.grading.rubric.revisions import (
    REVISION_SCHEMA,
    SCORES,
    RevisionWriter,
    dumps,
    grade_row,
    new_revision_name,
    safe_grader,
    stamp,
)
from assay.records.io import atomic_write_text, write_new_text
from assay.records.manifest import tool_identity, utc_now

EXPORTS_DIR = "grades/exports"
EXPORT_SCHEMA = "assay.rubric.export/1"
CSV_COLUMNS = ("export_id", "answer_id", "task", "score", "note", "prompt", "rubric", "answer")


def _csv_cell(text: str) -> str:
    """Spreadsheets run a cell that starts with = + - @ as a formula; model output is
    untrusted, so such cells get a leading apostrophe (shown as plain text, never run)."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def export_csv(run_dirs: Sequence[Path], path: Path, *, seed: int | None = None,
               regrade: bool = False) -> dict[str, Any]:
    """Write the ungraded rubric answers (all with ``regrade``) to a CSV for grading in a
    spreadsheet: shuffled, under opaque ids, with no model name, run id or path in it. The map
    from answer id to (task, sample) stays in each run: ``grades/exports/<export_id>.json``."""
    path = Path(path)
    if path.exists():
        raise GradingError(f"{path}: already exists; choose another file name (an export "
                           "never replaces a file that may already hold grades)")
    pool = build_pool(run_dirs, regrade=regrade)
    seed = fresh_seed() if seed is None else int(seed)
    queue = shuffle_answers(pool.answers, seed)
    if not queue:
        return {"answers": 0, "export_id": None, "seed": seed, "path": None}
    export_id = f"{stamp(millis=False)}-{secrets.token_hex(3)}"
    created = utc_now()
    for run in pool.runs:
        mine = [a for a in queue if a.run_dir == run.run_dir]
        if not mine:
            continue
        mapping = {
            "schema": EXPORT_SCHEMA, "export_id": export_id, "created_at": created,
            "seed": seed, "regrade": regrade, "csv_name": path.name,
            "answers_in_export": len(queue),
            "runs_in_export": sorted(r.run_id for r in pool.runs),
            "answers": {a.answer_id: {"id": a.task_id, "sample": a.sample,
                                      "answer_sha256": pool.sha_of(a)}
                        for a in mine},
        }
        write_new_text(run.run_dir / EXPORTS_DIR / f"{export_id}.json", dumps(mapping))
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    for a in queue:
        writer.writerow([export_id, a.answer_id, a.task_id, "", "",
                         _csv_cell(pool.redact(a.prompt)), _csv_cell(pool.redact(a.rubric)),
                         _csv_cell(pool.redact(a.text))])
    atomic_write_text(path, "\ufeff" + buf.getvalue())  # BOM: spreadsheets then read UTF-8
    return {"answers": len(queue), "export_id": export_id, "seed": seed, "path": str(path)}


def _load_exports(run_dirs: Sequence[Path]) -> dict[str, dict[str, Any]]:
    """export_id -> {"seed", "answers": {answer_id: (run_dir, task, sample, sha256)}}."""
    out: dict[str, dict[str, Any]] = {}
    for run_dir in run_dirs:
        directory = Path(run_dir) / EXPORTS_DIR
        if not directory.is_dir():
            continue
        for file in sorted(directory.glob("*.json")):
            try:
                data = loads_object(file.read_text(encoding="utf-8"))
            except ValueError as exc:
                raise GradingError(f"{file}: {exc}") from None
            entry = out.setdefault(str(data.get("export_id") or file.stem),
                                   {"seed": data.get("seed"), "answers": {},
                                    "expected": data.get("answers_in_export")})
            for answer_id, target in (data.get("answers") or {}).items():
                entry["answers"][answer_id] = (Path(run_dir), str(target["id"]),
                                               int(target["sample"]), target.get("answer_sha256"))
    return out


def _parse_score(cell: str) -> int | None | str:
    """An int 0-3, None for blank, or an error message."""
    text = cell.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        return f"score {text!r} is not a number: use 0, 1, 2 or 3 (blank = not graded)"
    if not value.is_integer() or int(value) not in SCORES:
        return f"score {text!r} is not one of 0, 1, 2, 3 (blank = not graded)"
    return int(value)


class _Graded(NamedTuple):
    """A checked line of the sheet, held back until every line has been checked."""

    run_dir: Path
    task_id: str
    sample: int
    answer_id: str
    score: int
    note: str
    seed: int | None
    export_id: str
    sha: str


def import_csv(run_dirs: Sequence[Path], path: Path, *, grader: str) -> dict[str, Any]:
    """Read scores from a CSV made by :func:`export_csv` and store them as a new revision in
    each run that has graded answers. Every line is checked first; on any bad line (unknown
    export or answer id, score not 0-3, answer changed since export) nothing is written and the
    error names each bad line. Blank scores are skipped."""
    path = Path(path)
    safe = safe_grader(grader)
    dirs: list[Path] = []
    for given in run_dirs:
        run, _, _ = open_run(Path(given))
        if run.run_dir.resolve() not in {d.resolve() for d in dirs}:
            dirs.append(run.run_dir)
    if not dirs:
        raise GradingError("no run directory given")
    try:
        data = path.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        raise GradingError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise GradingError(f"{path}: not UTF-8; save the spreadsheet as CSV (UTF-8)") from None
    exports = _load_exports(dirs)
    pool = build_pool(dirs, regrade=True)  # current answers, to refuse grades for changed ones
    reader = csv.reader(io.StringIO(data, newline=""))
    errors: list[str] = []
    try:
        header = next(reader)
    except StopIteration:
        raise GradingError(f"{path}: empty file") from None
    except csv.Error as exc:
        raise GradingError(f"{path}:1: {exc}") from None
    cols = {name.strip().lower(): i for i, name in enumerate(header)}
    missing = [c for c in ("export_id", "answer_id", "score") if c not in cols]
    if missing:
        raise GradingError(f"{path}:1: header lacks column(s) {', '.join(missing)}; import the "
                           "CSV written by --export (the other columns may be removed)")
    graded: list[_Graded] = []
    seen: dict[str, int] = {}
    blank = 0
    line_end = reader.line_num
    record = 1
    while True:
        start = line_end + 1
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            errors.append(f"{path}:{start}: {exc}")
            break
        line_end = reader.line_num
        record += 1
        if not any(c.strip() for c in cells):
            continue
        where = f"{path}:{start} (spreadsheet row {record})"

        def cell(name: str, cells: list[str] = cells) -> str:
            i = cols.get(name)
            return cells[i] if i is not None and i < len(cells) else ""

        score = _parse_score(cell("score"))
        if score is None:
            blank += 1
            continue
        if isinstance(score, str):
            errors.append(f"{where}: {score}")
            continue
        export_id, answer_id = cell("export_id").strip(), cell("answer_id").strip()
        export = exports.get(export_id)
        if export is None:
            errors.append(f"{where}: unknown export id {export_id!r}: none of the given run "
                          "directories holds it (import with the run directories you exported)")
            continue
        target = export["answers"].get(answer_id)
        if target is None:
            hint = ""
            expected = export.get("expected")
            if isinstance(expected, int) and expected > len(export["answers"]):
                hint = (f" (the export has {expected} answers, the given run directories "
                        f"hold {len(export['answers'])} of them: give every run directory "
                        "that was exported)")
            errors.append(f"{where}: unknown answer id {answer_id!r} in export {export_id}"
                          + hint)
            continue
        if answer_id in seen:
            errors.append(f"{where}: answer id {answer_id} is graded twice (also on line "
                          f"{seen[answer_id]})")
            continue
        seen[answer_id] = start
        run_dir, tid, sample, sha = target
        current = pool.hashes.get((run_dir, tid, sample))
        if current is None or (sha is not None and sha != current):
            errors.append(f"{where}: answer {answer_id} changed or disappeared since export "
                          f"{export_id}; export again")
            continue
        graded.append(_Graded(run_dir=run_dir, task_id=tid, sample=sample,
                              answer_id=answer_id, score=score, note=cell("note").strip(),
                              seed=export["seed"], export_id=export_id, sha=current))
    if errors:
        shown = errors[:20]
        more = f"\n… and {len(errors) - 20} more" if len(errors) > 20 else ""
        raise GradingError(f"{len(errors)} bad line(s) in {path}; nothing was imported:\n"
                           + "\n".join(shown) + more)
    if not graded:
        return {"graded": 0, "blank": blank, "revision": None}
    name = new_revision_name(dirs, safe)
    graded_at = utc_now()
    meta: dict[str, Any] = {
            "schema": REVISION_SCHEMA, "revision": name, "kind": "rubric", "scale": "0-3",
            "source": "csv", "grader": grader, "imported_at": graded_at,
            "csv_name": path.name, "csv_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "export_ids": sorted({g.export_id for g in graded}),
            "seeds": sorted({g.seed for g in graded if g.seed is not None}),
            "assay": tool_identity()}
    seeds = meta["seeds"]
    meta["seed"] = seeds[0] if len(seeds) == 1 else None
    writer = RevisionWriter(name, meta, {})
    try:
        for g in graded:
            writer.append(g.run_dir, grade_row(
                task_id=g.task_id, sample=g.sample, answer_id=g.answer_id, score=g.score,
                note=g.note, grader=grader, revision=name, seed=g.seed, source="csv",
                answer_sha256=g.sha, graded_at=graded_at, export_id=g.export_id))
    finally:
        writer.close()
    return {"graded": len(graded), "blank": blank, "revision": name}
