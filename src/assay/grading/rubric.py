"""Blind human grading of rubric answers in coding runs.

A grader sees one answer at a time with its task prompt and rubric, never which model or run
wrote it: answers from every given run are pooled, shuffled with a recorded seed and shown under
an opaque id. Only the extracted code is shown (the raw answer may say who wrote it), and any
model name, run id or run path that still appears in a shown text is redacted.

Grades are verdicts, so they are never overwritten: every interactive session and every CSV
import writes a new revision beside the older ones, in the run the answer came from::

    RUN_DIR/grades/rubric/<UTC-stamp>-<grader>.jsonl      one row per grade, append-only
    RUN_DIR/grades/rubric/<UTC-stamp>-<grader>.meta.json  who, when, seed, source (written once)
    RUN_DIR/grades/exports/<export_id>.json              opaque answer id -> (task, sample)

The report unblinds with :func:`latest_grades`: the newest grade of every answer.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import json
import random
import re
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

from assay.errors import GradingError, NeverOverwrite
from assay.records.io import JsonlAppender, atomic_write_text, scan_jsonl, write_new_text
from assay.records.manifest import read_manifest, tool_identity, utc_now

SAMPLES = "samples.jsonl"
TASKS_SNAPSHOT = "suite/tasks.jsonl"
GRADES_DIR = "grades/rubric"
EXPORTS_DIR = "grades/exports"
REVISION_SCHEMA = "assay.rubric.revision/1"
EXPORT_SCHEMA = "assay.rubric.export/1"
SCORES = (0, 1, 2, 3)
CSV_COLUMNS = ("export_id", "answer_id", "task", "score", "note", "prompt", "rubric", "answer")
REDACTED = "[redacted]"
_SYNTAX_LANGUAGES = {"python": "python", "javascript": "javascript"}
_MIN_REDACT_LEN = 4  # shorter names ("gpt") would blank out ordinary code


@dataclass(frozen=True)
class BlindAnswer:
    answer_id: str
    run_dir: Path
    task_id: str
    sample: int
    prompt: str
    rubric: str
    language: str | None
    text: str


# --------------------------------------------------------------------------- reading runs


@dataclass(frozen=True)
class _Run:
    run_dir: Path
    run_id: str
    secrets: tuple[str, ...]  # names that would unblind the answer if shown


def _open_run(run_dir: Path) -> tuple[_Run, dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """The run, its rubric tasks by id and its sample rows; GradingError if not a coding run."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise GradingError(f"{run_dir}: no such run directory")
    try:
        manifest = read_manifest(run_dir)
    except FileNotFoundError:
        raise GradingError(f"{run_dir}: no manifest.json: not an assay run directory") from None
    except ValueError as exc:
        raise GradingError(f"{run_dir}/manifest.json: unreadable ({exc})") from None
    kind = manifest.get("kind") if isinstance(manifest, dict) else None
    if kind != "coding":
        raise GradingError(f"{run_dir}: a {kind or 'narrow-task'} run, not a coding run: rubric "
                           "grading needs the run directory of a coding suite")
    tasks_path = run_dir / TASKS_SNAPSHOT
    if not tasks_path.is_file():
        raise GradingError(f"{tasks_path}: missing: this coding run has no suite snapshot")
    tasks: dict[str, dict[str, Any]] = {}
    for lineno, raw in enumerate(tasks_path.read_text(encoding="utf-8-sig").splitlines(), 1):
        if not raw.strip():
            continue
        try:
            obj = _loads_object(raw)
        except ValueError as exc:
            raise GradingError(f"{tasks_path}:{lineno}: {exc}") from None
        if isinstance(obj.get("id"), str):
            tasks[obj["id"]] = obj
    try:
        rows = scan_jsonl(run_dir / SAMPLES).rows
    except ValueError as exc:
        raise GradingError(str(exc)) from None
    model = manifest.get("model") or {}
    names = {str(manifest.get("run_id") or ""), str(run_dir), str(run_dir.resolve()),
             str(model.get("requested") or "")}
    if len(run_dir.name) >= 8:  # a short directory name would be an ordinary word
        names.add(run_dir.name)
    names.update(str(m) for m in model.get("served_models") or [] if m)
    names.update(str(r["served_model"]) for r in rows if r.get("served_model"))
    run = _Run(run_dir=run_dir, run_id=str(manifest.get("run_id") or run_dir.name),
               secrets=tuple(sorted(n for n in names if len(n) >= _MIN_REDACT_LEN)))
    return run, tasks, rows


def _loads_object(line: str) -> dict[str, Any]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    return obj


def _final_rows(rows: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """The row that counts for each (task, sample): the last one without ``error``. A key with
    only infra-error rows has no answer yet."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        if row.get("error") or "id" not in row or "sample" not in row:
            continue
        out[(str(row["id"]), int(row["sample"]))] = row
    return out


def _shown_text(row: dict[str, Any]) -> str:
    """The extracted code; the raw answer only when extraction found nothing."""
    code = row.get("code")
    if isinstance(code, str) and code.strip():
        return code
    raw = row.get("raw")
    return raw if isinstance(raw, str) else ""


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class _Pool:
    """Every ungraded (or, with regrade, every) rubric answer of the given runs, unshuffled."""

    runs: tuple[_Run, ...]
    answers: tuple[BlindAnswer, ...]
    hashes: dict[tuple[Path, str, int], str]  # answer text sha256 by (run_dir, task, sample)

    def redact(self, text: str) -> str:
        names = sorted({n for r in self.runs for n in r.secrets}, key=len, reverse=True)
        for name in names:
            text = re.sub(re.escape(name), REDACTED, text, flags=re.IGNORECASE)
        return text


def _pool(run_dirs: Sequence[Path], *, regrade: bool) -> _Pool:
    if not run_dirs:
        raise GradingError("no run directory given")
    seen: set[Path] = set()
    runs: list[_Run] = []
    found: list[tuple[_Run, dict[str, Any], dict[str, Any]]] = []
    for given in run_dirs:
        run, tasks, rows = _open_run(Path(given))
        key = run.run_dir.resolve()
        if key in seen:
            continue
        seen.add(key)
        runs.append(run)
        try:
            graded = set() if regrade else set(latest_grades(run.run_dir))
        except ValueError as exc:
            raise GradingError(str(exc)) from None
        for (tid, sample), row in _final_rows(rows).items():
            task = tasks.get(tid)
            kind = row.get("type") or (task or {}).get("type")
            if kind != "rubric":
                continue
            if task is None:
                raise GradingError(f"{run.run_dir / SAMPLES}: rubric answer for task {tid!r}, "
                                   f"which is not in {TASKS_SNAPSHOT}")
            if (tid, sample) in graded:
                continue
            found.append((run, task, row))
    # A deterministic order before any shuffle, so the same seed gives the same order whatever
    # order the run directories were named in.
    found.sort(key=lambda f: (f[0].run_id, str(f[0].run_dir.resolve()), str(f[2]["id"]),
                              int(f[2]["sample"])))
    ids: set[str] = set()
    answers: list[BlindAnswer] = []
    hashes: dict[tuple[Path, str, int], str] = {}
    for run, task, row in found:
        answer_id = secrets.token_hex(4)
        while answer_id in ids:
            answer_id = secrets.token_hex(4)
        ids.add(answer_id)
        language = row.get("language") or task.get("language")
        if language is None:
            from assay.suites.coding import infer_language

            language = infer_language(task["id"], None)
        text = _shown_text(row)
        tid, sample = str(row["id"]), int(row["sample"])
        hashes[(run.run_dir, tid, sample)] = _sha256(text)
        answers.append(BlindAnswer(answer_id=answer_id, run_dir=run.run_dir, task_id=tid,
                                   sample=sample, prompt=str(task.get("prompt") or ""),
                                   rubric=str(task.get("rubric") or ""), language=language,
                                   text=text))
    return _Pool(tuple(runs), tuple(answers), hashes)


def collect_answers(run_dirs: Sequence[Path], *, regrade: bool = False) -> list[BlindAnswer]:
    """The rubric answers of the given coding runs that have no grade yet (all of them with
    ``regrade``), in a deterministic unshuffled order, each under a fresh opaque id.

    The answer of a (task, sample) is its last sample row without ``error``; unit and diff rows
    are ignored. Raises :class:`GradingError` for a directory that is not a coding run."""
    return list(_pool(run_dirs, regrade=regrade).answers)


def shuffle_answers(answers: Sequence[BlindAnswer], seed: int) -> list[BlindAnswer]:
    """``answers`` in the order a grader sees them for ``seed``: sorted deterministically, then
    shuffled, so runs are interleaved and the order can be reproduced from the recorded seed."""
    ordered = sorted(answers, key=lambda a: (str(a.run_dir.resolve()), a.task_id, a.sample))
    random.Random(seed).shuffle(ordered)
    return ordered


def _fresh_seed() -> int:
    return secrets.randbelow(2**31)


# --------------------------------------------------------------------------- revisions


def _stamp(millis: bool = True) -> str:
    now = dt.datetime.now(dt.UTC)
    if millis:
        return now.strftime("%Y%m%dT%H%M%S") + f".{now.microsecond // 1000:03d}Z"
    return now.strftime("%Y%m%dT%H%M%SZ")


def _safe_grader(grader: str) -> str:
    if not grader or not grader.strip():
        raise GradingError("a grader name is needed (--grader NAME)")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", grader.strip()).strip("._")
    return safe[:40] or "grader"


def _new_revision_name(run_dirs: Sequence[Path], grader: str) -> str:
    """``<UTC-stamp>-<grader>``, with a counter when that name is already taken in any run."""
    base = f"{_stamp()}-{_safe_grader(grader)}"
    name, n = base, 1
    while any((Path(d) / GRADES_DIR / f"{name}{ext}").exists()
              for d in run_dirs for ext in (".jsonl", ".meta.json")):
        n += 1
        name = f"{base}-{n}"
    return name


class _RevisionWriter:
    """One revision across runs: each run's files are created on its first grade, so a run
    receives only the grades of its own answers and an empty session leaves nothing behind."""

    def __init__(self, name: str, meta: dict[str, Any], per_run: dict[Path, dict[str, Any]]):
        self.name = name
        self.meta = meta
        self.per_run = per_run
        self._open: dict[Path, JsonlAppender] = {}

    def append(self, run_dir: Path, row: dict[str, Any]) -> None:
        appender = self._open.get(run_dir)
        if appender is None:
            directory = run_dir / GRADES_DIR
            meta = {**self.meta, **self.per_run.get(run_dir, {})}
            try:
                write_new_text(directory / f"{self.name}.meta.json", _dumps(meta))
            except NeverOverwrite:
                raise GradingError(f"grade revision {self.name} already exists; "
                                   "start the session again") from None
            appender = self._open[run_dir] = JsonlAppender(directory / f"{self.name}.jsonl",
                                                           sync_every=1)
        appender.append(row)

    @property
    def written(self) -> bool:
        return bool(self._open)

    def close(self) -> None:
        for appender in self._open.values():
            appender.close()


def _dumps(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _grade_row(answer: BlindAnswer, *, score: int, note: str, grader: str, revision: str,
               seed: int | None, source: str, answer_sha256: str,
               graded_at: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": answer.task_id, "sample": answer.sample, "score": score, "note": note,
            "grader": grader, "graded_at": graded_at or utc_now(), "revision": revision,
            "seed": seed, "answer_id": answer.answer_id, "source": source,
            "answer_sha256": answer_sha256, **extra}


def latest_grades(run_dir: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """(task id, sample) -> the newest grade row of that answer across all revisions of the run
    (newest by ``graded_at``, then by revision name, then by position in the file). Older
    revisions stay on disk untouched; rows without a valid 0-3 score are ignored."""
    directory = Path(run_dir) / GRADES_DIR
    if not directory.is_dir():
        return {}
    best: dict[tuple[str, int], tuple[tuple[str, str, int], dict[str, Any]]] = {}
    for path in sorted(directory.glob("*.jsonl")):
        revision = path.name[: -len(".jsonl")]
        for index, row in enumerate(scan_jsonl(path).rows):
            score = row.get("score")
            if type(score) is not int or score not in SCORES:
                continue
            try:
                key = (str(row["id"]), int(row["sample"]))
            except (KeyError, TypeError, ValueError):
                continue
            order = (str(row.get("graded_at") or ""), str(row.get("revision") or revision),
                     index)
            if key not in best or order >= best[key][0]:
                best[key] = (order, row)
    return {key: row for key, (_, row) in best.items()}


# --------------------------------------------------------------------------- interactive


def _show(console: Console, pool: _Pool, answer: BlindAnswer, index: int, total: int) -> None:
    console.rule()
    console.print(Text(f"answer {index} of {total} · task {answer.task_id} · "
                       f"blind id {answer.answer_id}", style="bold"))
    console.print(Panel(Text(pool.redact(answer.prompt)), title="prompt", title_align="left"))
    console.print(Panel(Text(pool.redact(answer.rubric)), title="rubric", title_align="left"))
    text = pool.redact(answer.text)
    body: Text | Syntax
    if not text.strip():
        body = Text("(empty answer)", style="italic")
    elif answer.language in _SYNTAX_LANGUAGES:
        body = Syntax(text, _SYNTAX_LANGUAGES[answer.language], word_wrap=True,
                      line_numbers=True, background_color="default")
    else:
        body = Text(text)
    console.print(Panel(body, title="answer", title_align="left"))


def _ask(ask: Callable[[str], str], prompt: str) -> str | None:
    """One line of input; None when the grader ended input (EOF) or pressed Ctrl-C."""
    try:
        return ask(prompt)
    except (EOFError, KeyboardInterrupt):
        return None


def interactive_session(run_dirs: Sequence[Path], *, grader: str, seed: int | None = None,
                        regrade: bool = False, console: Console,
                        ask: Callable[[str], str] = input) -> dict[str, Any]:
    """Grade rubric answers one at a time, blind, in a seeded shuffled order.

    Each score is saved the moment its note is entered, into a new revision of the run the
    answer came from. ``q``, Ctrl-C or end of input stop the session; what was graded is kept
    and the next session skips it (unless ``regrade``). A score typed before input ends at the
    note prompt is kept with an empty note."""
    safe = _safe_grader(grader)
    pool = _pool(run_dirs, regrade=regrade)
    seed = _fresh_seed() if seed is None else int(seed)
    queue = shuffle_answers(pool.answers, seed)
    total = len(queue)
    summary: dict[str, Any] = {"graded": 0, "skipped": 0, "remaining": total, "seed": seed,
                               "revision": None, "answers": total, "stopped": False}
    if not queue:
        console.print("nothing to grade: every rubric answer already has a grade "
                      "(use regrade to grade them again)", highlight=False)
        return summary
    name = _new_revision_name([r.run_dir for r in pool.runs], safe)
    counts: dict[Path, int] = {}
    for a in queue:
        counts[a.run_dir] = counts.get(a.run_dir, 0) + 1
    meta = {"schema": REVISION_SCHEMA, "revision": name, "kind": "rubric", "scale": "0-3",
            "source": "interactive", "grader": grader, "seed": seed, "regrade": regrade,
            "started_at": utc_now(), "answers_in_session": total,
            "runs_in_session": sorted(r.run_id for r in pool.runs), "assay": tool_identity()}
    writer = _RevisionWriter(name, meta, {d: {"answers_from_this_run": n}
                                          for d, n in counts.items()})
    console.print(f"{total} answers to grade, shuffled across {len(pool.runs)} run(s) "
                  f"(seed {seed}). Score 0-3; s skips, q quits; you can resume later.",
                  highlight=False)
    try:
        for index, answer in enumerate(queue, 1):
            _show(console, pool, answer, index, total)
            score: int | None = None
            while True:
                reply = _ask(ask, "score 0-3, s skip, q quit: ")
                choice = None if reply is None else reply.strip().lower()
                if choice is None or choice in ("q", "quit"):
                    summary["stopped"] = True
                    break
                if choice in ("s", "skip"):
                    break
                if choice in {str(s) for s in SCORES}:
                    score = int(choice)
                    break
                console.print(Text(f"{reply.strip()!r} is not a score: type 0, 1, 2 or 3 "
                                   "(s to skip, q to quit)", style="yellow"))
            if summary["stopped"]:
                break
            summary["remaining"] -= 1
            if score is None:
                summary["skipped"] += 1
                continue
            note = _ask(ask, "note (optional): ")
            writer.append(answer.run_dir, _grade_row(
                answer, score=score, note=(note or "").strip(), grader=grader, revision=name,
                seed=seed, source="interactive",
                answer_sha256=pool.hashes[(answer.run_dir, answer.task_id, answer.sample)]))
            summary["graded"] += 1
            if note is None:
                summary["stopped"] = True
                break
    except KeyboardInterrupt:  # Ctrl-C outside a prompt: stop the same way, keep the grades
        summary["stopped"] = True
    finally:
        writer.close()
    if summary["stopped"]:
        console.print("stopped: the grades so far are saved; run the same command again to "
                      "grade the rest.", highlight=False)
    summary["revision"] = name if writer.written else None
    return summary


# --------------------------------------------------------------------------- CSV


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
    pool = _pool(run_dirs, regrade=regrade)
    seed = _fresh_seed() if seed is None else int(seed)
    queue = shuffle_answers(pool.answers, seed)
    if not queue:
        return {"answers": 0, "export_id": None, "seed": seed, "path": None}
    export_id = f"{_stamp(millis=False)}-{secrets.token_hex(3)}"
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
                                      "answer_sha256": pool.hashes[(a.run_dir, a.task_id,
                                                                    a.sample)]}
                        for a in mine},
        }
        write_new_text(run.run_dir / EXPORTS_DIR / f"{export_id}.json", _dumps(mapping))
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
                data = _loads_object(file.read_text(encoding="utf-8"))
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


def import_csv(run_dirs: Sequence[Path], path: Path, *, grader: str) -> dict[str, Any]:
    """Read scores from a CSV made by :func:`export_csv` and store them as a new revision in
    each run that has graded answers. Every line is checked first; on any bad line (unknown
    export or answer id, score not 0-3, answer changed since export) nothing is written and the
    error names each bad line. Blank scores are skipped."""
    path = Path(path)
    safe = _safe_grader(grader)
    dirs: list[Path] = []
    for given in run_dirs:
        run, _, _ = _open_run(Path(given))
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
    pool = _pool(dirs, regrade=True)  # current answers, to refuse grades for changed ones
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
    graded: list[tuple[Path, BlindAnswer, int, str, int | None, str, str]] = []
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
        answer = BlindAnswer(answer_id=answer_id, run_dir=run_dir, task_id=tid, sample=sample,
                             prompt="", rubric="", language=None, text="")
        graded.append((run_dir, answer, score, cell("note").strip(), export["seed"], export_id,
                       current))
    if errors:
        shown = errors[:20]
        more = f"\n… and {len(errors) - 20} more" if len(errors) > 20 else ""
        raise GradingError(f"{len(errors)} bad line(s) in {path}; nothing was imported:\n"
                           + "\n".join(shown) + more)
    if not graded:
        return {"graded": 0, "blank": blank, "revision": None}
    name = _new_revision_name(dirs, safe)
    graded_at = utc_now()
    meta = {"schema": REVISION_SCHEMA, "revision": name, "kind": "rubric", "scale": "0-3",
            "source": "csv", "grader": grader, "imported_at": graded_at,
            "csv_name": path.name, "csv_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "export_ids": sorted({g[5] for g in graded}),
            "seeds": sorted({g[4] for g in graded if g[4] is not None}),
            "assay": tool_identity()}
    seeds = meta["seeds"]
    meta["seed"] = seeds[0] if len(seeds) == 1 else None
    writer = _RevisionWriter(name, meta, {})
    try:
        for run_dir, answer, score, note, seed, export_id, sha in graded:
            writer.append(run_dir, _grade_row(
                answer, score=score, note=note, grader=grader, revision=name, seed=seed,
                source="csv", answer_sha256=sha, graded_at=graded_at, export_id=export_id))
    finally:
        writer.close()
    return {"graded": len(graded), "blank": blank, "revision": name}
