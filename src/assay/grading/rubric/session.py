"""One sitting of blind rubric grading, apart from how it is drawn on a screen.

The rules of a sitting are grading, not presentation: which replies count as a score, that a
score is saved the moment its note is entered (a crash or Ctrl-C loses nothing typed), that
stopping keeps what was graded and the next sitting skips it. So they live here, and the
terminal sits behind two small seams: :class:`GraderScreen` (what the grader sees, already
redacted) and ``ask`` (one line typed by the grader). The CLI draws them with rich; a test
drives them with a script, no TTY needed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from assay.grading.rubric.pool import build_pool, fresh_seed, shuffle_answers
from assay.grading.rubric.revisions import (
    REVISION_SCHEMA,
    SCORES,
    RevisionWriter,
    grade_row,
    new_revision_name,
    safe_grader,
)
from assay.records.manifest import tool_identity, utc_now

SCORE_PROMPT = "score 0-3, s skip, q quit: "
NOTE_PROMPT = "note (optional): "

Ask = Callable[[str], str]
"""One line from the grader; EOFError or KeyboardInterrupt mean the grader stopped."""


@dataclass(frozen=True)
class ShownAnswer:
    """What the grader may see of one answer: every text already redacted, no run named."""

    index: int
    total: int
    task_id: str
    answer_id: str
    prompt: str
    rubric: str
    language: str | None
    text: str


class GraderScreen(Protocol):
    """Where a sitting shows its answers and messages (a terminal in the CLI)."""

    def show(self, answer: ShownAnswer) -> None:
        """Draw one answer with its prompt and rubric."""

    def tell(self, message: str) -> None:
        """A plain message: how many answers, that the sitting stopped."""

    def warn(self, message: str) -> None:
        """A reply that was not understood; the same answer is asked again."""


def _ask(ask: Ask, prompt: str) -> str | None:
    """One line of input; None when the grader ended input (EOF) or pressed Ctrl-C."""
    try:
        return ask(prompt)
    except (EOFError, KeyboardInterrupt):
        return None


def grade_session(run_dirs: Sequence[Path], *, grader: str, screen: GraderScreen, ask: Ask,
                  seed: int | None = None, regrade: bool = False) -> dict[str, Any]:
    """Grade rubric answers one at a time, blind, in a seeded shuffled order.

    Each score is saved the moment its note is entered, into a new revision of the run the
    answer came from. ``q``, Ctrl-C or end of input stop the session; what was graded is kept
    and the next session skips it (unless ``regrade``). A score typed before input ends at the
    note prompt is kept with an empty note."""
    safe = safe_grader(grader)
    pool = build_pool(run_dirs, regrade=regrade)
    seed = fresh_seed() if seed is None else int(seed)
    queue = shuffle_answers(pool.answers, seed)
    total = len(queue)
    summary: dict[str, Any] = {"graded": 0, "skipped": 0, "remaining": total, "seed": seed,
                               "revision": None, "answers": total, "stopped": False}
    if not queue:
        screen.tell("nothing to grade: every rubric answer already has a grade "
                    "(use regrade to grade them again)")
        return summary
    name = new_revision_name([r.run_dir for r in pool.runs], safe)
    counts: dict[Path, int] = {}
    for a in queue:
        counts[a.run_dir] = counts.get(a.run_dir, 0) + 1
    meta = {"schema": REVISION_SCHEMA, "revision": name, "kind": "rubric", "scale": "0-3",
            "source": "interactive", "grader": grader, "seed": seed, "regrade": regrade,
            "started_at": utc_now(), "answers_in_session": total,
            "runs_in_session": sorted(r.run_id for r in pool.runs), "assay": tool_identity()}
    writer = RevisionWriter(name, meta, {d: {"answers_from_this_run": n}
                                         for d, n in counts.items()})
    screen.tell(f"{total} answers to grade, shuffled across {len(pool.runs)} run(s) "
                f"(seed {seed}). Score 0-3; s skips, q quits; you can resume later.")
    try:
        for index, answer in enumerate(queue, 1):
            screen.show(ShownAnswer(index=index, total=total, task_id=answer.task_id,
                                    answer_id=answer.answer_id,
                                    prompt=pool.redact(answer.prompt),
                                    rubric=pool.redact(answer.rubric),
                                    language=answer.language, text=pool.redact(answer.text)))
            score: int | None = None
            while True:
                reply = _ask(ask, SCORE_PROMPT)
                choice = None if reply is None else reply.strip().lower()
                if reply is None or choice in ("q", "quit"):
                    summary["stopped"] = True
                    break
                if choice in ("s", "skip"):
                    break
                if choice in {str(s) for s in SCORES}:
                    score = int(choice)
                    break
                screen.warn(f"{reply.strip()!r} is not a score: type 0, 1, 2 or 3 "
                            "(s to skip, q to quit)")
            if summary["stopped"]:
                break
            summary["remaining"] -= 1
            if score is None:
                summary["skipped"] += 1
                continue
            note = _ask(ask, NOTE_PROMPT)
            writer.append(answer.run_dir, grade_row(
                task_id=answer.task_id, sample=answer.sample, answer_id=answer.answer_id,
                score=score, note=(note or "").strip(), grader=grader, revision=name,
                seed=seed, source="interactive", answer_sha256=pool.sha_of(answer)))
            summary["graded"] += 1
            if note is None:
                summary["stopped"] = True
                break
    except KeyboardInterrupt:  # Ctrl-C outside a prompt: stop the same way, keep the grades
        summary["stopped"] = True
    finally:
        writer.close()
    if summary["stopped"]:
        screen.tell("stopped: the grades so far are saved; run the same command again to "
                    "grade the rest.")
    summary["revision"] = name if writer.written else None
    return summary
