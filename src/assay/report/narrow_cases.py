"""The cases a narrow run got wrong, as a person fixing the prompt or the suite reads them: the
input, the expected value, every repeat's raw answers, what the scorer read and the reason
(the wrong label, the fields that differ, the difference against the tolerance, the normalised
texts).

Built from the run directory alone: the answers from ``raw_predictions.jsonl`` (the row standing
for each case and repeat), the inputs from the run's copy of its cases (``suite/cases.jsonl``,
used only when its sha256 is the manifest's; otherwise the inputs are unknown, never guessed
from a suite that may have changed since). The figures pass (``report.narrow``) keeps a few
small fields per row; this second pass reads the rows file again for the listed cases only and
spills each listed case to disk as it is built (``report.spilled``), so a report over 100,000
rows never holds every answer text, nor every listed case.

Cases are ordered so the most informative come first: a case the model gets wrong the same way
every time is a clear lesson, a flaky one is noise on top of it, and an endpoint error says
nothing about the model (see :data:`PATTERNS`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any, get_args

from assay.records.layout import CASES_SNAPSHOT, RAW_PREDICTIONS, narrow_key
from assay.records.narrow import NarrowRow
from assay.records.report_cases import NarrowPattern, NarrowVerdict
from assay.report.spilled import SpilledList

#: characters of each raw answer kept in report.json (the rows file keeps all of it)
RAW_KEPT = 2000
#: the order cases are listed in, most informative first
PATTERNS: tuple[NarrowPattern, ...] = get_args(NarrowPattern)
#: each pattern as the views say it
PATTERN_WORDS: dict[str, str] = {
    "consistent_wrong": "the same wrong label every time",
    "consistent_invalid": "no valid label, every time",
    "always_wrong": "never right, the answers differ",
    "flaky": "right in some repeats only",
    "format_retry": "right, but only after the format retry",
    "endpoint_error": "no wrong answer; endpoint errors",
}


#: the patterns that speak of "every time", as said of a case answered once
ONCE_WORDS: dict[str, str] = {
    "consistent_wrong": "a wrong label (answered once)",
    "consistent_invalid": "no valid label (answered once)",
}


def pattern_words(pattern: str, by_label: bool = True,
                  case: Mapping[str, Any] | None = None) -> str:
    """A pattern as the views say it: of labels for a run scored by label, of answers
    otherwise; of one answer when ``case`` (a listed case) was answered once, where "every
    time" would claim a repetition that never happened."""
    text = PATTERN_WORDS.get(pattern, pattern)  # read back from a report file: any string
    if case is not None and pattern in ONCE_WORDS and sum(
            int(case.get(k) or 0) for k in ("right", "wrong", "invalid")) == 1:
        text = ONCE_WORDS[pattern]
    return text if by_label else text.replace("label", "answer")


def short_answer(answer: dict[str, Any], keep: int = 80) -> str:
    """One repeat in a table cell: the wrong fields of a json_fields answer, else what was
    read (cut), else the verdict."""
    fields = (answer.get("score_detail") or {}).get("fields")
    if fields and answer.get("verdict") == "wrong":
        return "wrong: " + ", ".join(p for p, f in fields.items()
                                     if not f.get("correct") and "." not in p)
    parsed = answer.get("parsed")
    if not parsed:
        return str(answer.get("verdict"))
    return parsed if len(parsed) <= keep else parsed[:keep - 1] + "…"


def cut(text: str | None, keep: int) -> dict[str, Any]:
    """A :class:`CutText` dict: the first ``keep`` characters and the whole length."""
    if text is None:
        return {"text": None, "chars": None, "cut": False}
    return {"text": text[:keep], "chars": len(text), "cut": len(text) > keep}


def is_listed(row: Mapping[str, Any]) -> bool:
    """A repeat that puts its case on the list: answered, and not right first time. An infra
    error says nothing about the model: it is counted apart, never listed as a wrong answer."""
    if row.get("error"):
        return False
    return not row.get("correct") or (row.get("attempts") or 1) > 1


def show_value(value: Any) -> str:
    """An expected value or an answer as one line of text: a label or text as it is, a number
    or an object as its JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return "(none)"
    return json.dumps(value, ensure_ascii=False)


def answered_value(row: Mapping[str, Any]) -> Any:
    """What the scorer read from the answer used: the label, or the ``answer`` of a row scored
    otherwise; None when nothing was read."""
    if row.get("label"):
        return row["label"]
    return row.get("answer")


def verdict(row: Mapping[str, Any]) -> NarrowVerdict:
    if row.get("error"):
        return "infra_error"
    if row.get("correct"):
        return "right"
    return "invalid" if row.get("invalid_reason") or answered_value(row) is None else "wrong"


def why_wrong(row: dict[str, Any]) -> str:
    """What the scorer found, for a readable answer that is wrong."""
    detail = row.get("score_detail") or {}
    answered, expected = show_value(answered_value(row)), show_value(row.get("expected"))
    if row.get("label"):
        return f"wrong label: answered {row.get('label')!r}, expected {row.get('expected')!r}"
    if "criterion" in detail:
        need = detail.get("pass") or {}
        rule = (f"at least {need['at_least']!r}" if "at_least" in need
                else f"one of {need.get('one_of')!r}")
        return (f"judged wrong: {detail['criterion']} scored {detail.get('score')!r}, needs "
                f"{rule}" + (f" ({str(detail['reason'])[:200]})" if detail.get("reason") else ""))
    if "fields" in detail:
        bad = [f"{path} ({f.get('why') or 'wrong'})" for path, f in detail["fields"].items()
               if not f.get("correct") and "." not in path]
        return "wrong fields: " + "; ".join(bad)
    if "tolerance" in detail:
        return (f"wrong number: answered {detail.get('answer')}, expected "
                f"{detail.get('expected')}, |difference| {detail.get('abs_diff'):.6g} > "
                f"tolerance {detail.get('tolerance'):.6g}")
    if "answer" in detail and "expected" in detail:
        return (f"wrong text: normalised {str(detail['answer'])[:200]!r}, expected "
                f"{str(detail['expected'])[:200]!r}")
    return f"wrong: answered {answered[:200]!r}, expected {expected[:200]!r}"


def reason(row: dict[str, Any]) -> str:
    """The sentence a person reads for one repeat."""
    kind = verdict(row)
    if kind == "infra_error":
        return f"endpoint error: {row.get('error')}"
    retried = (row.get("attempts") or 1) > 1
    first = row.get("first_invalid_reason") or "unusable"
    after = f" after the format retry (first answer: {first})" if retried else ""
    if kind == "right":
        return f"right{after}"
    if kind == "wrong":
        return why_wrong(row) + after
    text = f"invalid: {row.get('invalid_reason') or 'no label'}"
    if retried:
        text += f", also after the format retry (first answer: {first})"
    if row.get("finish_reason") == "length":
        text += "; the answer was cut off at max_tokens"
    return text


def repeat_answer(row: dict[str, Any]) -> dict[str, Any]:
    """A :class:`NarrowRepeatAnswer` dict from a standing row."""
    raws = row.get("raws") or ([row["raw"]] if row.get("raw") is not None else [])
    return {
        "repeat": int(row["repeat"]),
        "verdict": verdict(row),
        "reason": reason(row),
        "parsed": None if answered_value(row) is None else show_value(answered_value(row)),
        "answers": [cut(r, RAW_KEPT) for r in raws],
        "format_retry": (row.get("attempts") or 1) > 1,
        "invalid_reason": row.get("invalid_reason"),
        "first_invalid_reason": row.get("first_invalid_reason"),
        "error": row.get("error"),
        "finish_reason": row.get("finish_reason"),
        "latency_ms": row.get("latency_ms"),
        "score_detail": row.get("score_detail"),
    }


def pattern(answers: list[dict[str, Any]]) -> NarrowPattern:
    """Which of :data:`PATTERNS` a case's repeats show."""
    counts = {k: sum(1 for a in answers if a["verdict"] == k)
              for k in ("right", "wrong", "invalid", "infra_error")}
    answered = counts["right"] + counts["wrong"] + counts["invalid"]
    failed = counts["wrong"] + counts["invalid"]
    if answered and failed == answered:
        if counts["wrong"] == answered and len({a["parsed"] for a in answers
                                                if a["verdict"] == "wrong"}) == 1:
            return "consistent_wrong"
        return "consistent_invalid" if counts["invalid"] == answered else "always_wrong"
    if failed:
        return "flaky"
    if any(a["format_retry"] for a in answers if a["verdict"] == "right"):
        return "format_retry"
    return "endpoint_error"


def order_key(case: dict[str, Any]) -> tuple[int, int, int, str]:
    """Pattern first, then the most failed repeats, the fewest right, then the id."""
    return (PATTERNS.index(case["pattern"]), -(case["wrong"] + case["invalid"]), case["right"],
            case["id"])


def read_inputs(run_dir: Path, manifest: dict[str, Any],
                ids: set[str]) -> tuple[dict[str, str], str | None]:
    """The inputs of ``ids`` from the run's copy of its cases, and where they came from; no
    inputs and None when the copy is missing or is not the file the manifest names. Read line
    by line, hashed on the way (the copy of a big suite is as big as its rows)."""
    path = run_dir / CASES_SNAPSHOT
    digest = hashlib.sha256()
    inputs: dict[str, str] = {}
    try:
        with open(path, "rb") as fh:
            for raw in fh:
                digest.update(raw)
                if ids:
                    _collect_input(raw, ids, inputs)
    except OSError:
        return {}, None
    if digest.hexdigest() != manifest["suite"].get("cases_sha256"):
        return {}, None
    return inputs, CASES_SNAPSHOT


def _collect_input(raw: bytes, ids: set[str], inputs: dict[str, str]) -> None:
    for line in raw.decode("utf-8", errors="replace").splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue  # blank or comment lines: the suite loader validated the file
        if isinstance(obj, dict) and obj.get("id") in ids and isinstance(obj.get("input"), str):
            inputs[obj["id"]] = obj["input"]


_ID_PREFIX = b'{"id":'
#: how much of a line the fast path decodes to read the id (a longer id: the line parsed whole)
_ID_BYTES = 512
_DECODER = json.JSONDecoder()


def _id_of(line: bytes) -> str | None:
    """The id of a row as the runner writes it (``{"id":"...",`` first, ``records.io``'s
    compact form; a space after the colon is read too), read without parsing the rest of the
    line: what a whole parse would say, or None when that is not certain (the line is then
    parsed whole). Certain means the id is a string and no second key of the line can be
    ``id``, since a whole parse keeps the last of two equal keys: the bytes ``"id"`` occur
    once (a quote inside a string is escaped, so they are this key) and no ``\\u`` escape
    could spell the key another way."""
    if not line.startswith(_ID_PREFIX) or line.count(b'"id"') != 1 or b"\\u" in line:
        return None
    try:  # the id is near the start: only its bytes are decoded (a cut character: parse all)
        text = line[:_ID_BYTES].decode("utf-8")
        start = len(_ID_PREFIX)
        while text[start:start + 1] in (" ", "\t"):
            start += 1
        value, _ = _DECODER.raw_decode(text, start)
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def _standing_lines(path: Path, ids: set[str],
                    id_of: Callable[[bytes], str | None] = _id_of) -> dict[str, list[int]]:
    """Where the standing row of each repeat of ``ids`` starts in the rows file, by case, in
    repeat order; each row validated. The figures' pass has read the whole file already (a
    corrupt line in the middle would have stopped it), so here the other cases' lines are
    skipped on their id alone (``id_of``; a function that always says None parses every
    line), and a torn last line is skipped as there. Only offsets are kept: the rows are read
    again one case at a time."""
    standing: dict[tuple[str, int], tuple[int, bool]] = {}
    offset = 0
    with open(path, "rb") as fh:
        for line in fh:
            start, offset = offset, offset + len(line)
            rid = id_of(line)
            if rid is not None and rid not in ids:
                continue
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and row.get("id") in ids and line.endswith(b"\n"):
                NarrowRow.read(row, path)
                key, error = narrow_key(row), bool(row.get("error"))
                prev = standing.get(key)  # as records.layout.standing_rows chooses
                if prev is None or not error or prev[1]:
                    standing[key] = (start, error)
    by_case: dict[str, list[int]] = {}
    for key in sorted(standing):
        by_case.setdefault(key[0], []).append(standing[key][0])
    return by_case


def _read_at(fh: IO[bytes], offset: int) -> dict[str, Any]:
    fh.seek(offset)
    row: dict[str, Any] = json.loads(fh.readline())
    return row


def wrong_cases(run_dir: Path, manifest: dict[str, Any],
                ids: set[str]) -> tuple[SpilledList, str | None]:
    """(every listed case, ordered, as :class:`NarrowWrongCase` dicts; the inputs' source).

    ``ids`` are the cases the figures' standing rows list (:func:`is_listed`); their answer
    texts are read again from the rows file, one case at a time, and
    each case goes to a :class:`SpilledList` (a big suite may list tens of thousands), with
    only its sort key in memory until the order is known."""
    listed = SpilledList()
    if not ids:
        listed.order(())
        return listed, read_inputs(run_dir, manifest, set())[1]
    rows_path = run_dir / RAW_PREDICTIONS
    by_case = _standing_lines(rows_path, ids)
    inputs, source = read_inputs(run_dir, manifest, ids)
    keys: list[tuple[tuple[int, int, int, str], int]] = []
    with open(rows_path, "rb") as fh:
        for cid, offsets in by_case.items():
            case_rows = [_read_at(fh, at) for at in offsets]
            answers = [repeat_answer(r) for r in case_rows]
            count = {k: sum(1 for a in answers if a["verdict"] == k)
                     for k in ("right", "wrong", "invalid", "infra_error")}
            case = {
                "id": cid, "input": cut(inputs.get(cid), len(inputs.get(cid) or "")),
                "expected": show_value(case_rows[0]["expected"]), "pattern": pattern(answers),
                "repeats": len(answers), "right": count["right"], "wrong": count["wrong"],
                "invalid": count["invalid"], "infra_errors": count["infra_error"],
                "answers": answers,
            }
            keys.append((order_key(case), listed.add(case)))
    keys.sort()
    listed.order(i for _, i in keys)
    return listed, source
