"""Asking a judge model about one piece of material, so that the material cannot talk back.

What is judged (a candidate's answer, artifact or trajectory) was written by the thing under
test, so it is data, never instruction. It reaches the judge only inside a quoted block whose
delimiter lines carry a random nonce drawn for this call; the rules sit in the system message
and say that nothing inside the block can change them. Inside the block every line is prefixed
(a file line by its number, ``  12| ``; a context or event line by ``| ``), so no material line
can ever start where a delimiter would, and every ``<<<`` / ``>>>`` of the material is shown as
``‹‹‹`` / ``›››`` (:func:`escape`), so even a correct guess of the nonce gives no closing line.
That escaping is the only change made to the material's text.

The judge answers by the reply contract ``assay.judge.reply/1``::

    {"criteria": {"<id>": {"score": <in the scale>, "citations": ["path:12", "path:3-5",
                  "event:0"], "reason": "<short>"}}}

Every criterion needs a score in its scale and at least one citation, and every citation must
exist in the material shown (a file and line range that were quoted, an event index that was).
A reply that breaks any of this gets one retry that says what was wrong, like the narrow format
retry; a second bad reply makes the judgement ``invalid``, recorded and never counted as a
score. Transport trouble is the client's (retried there, raised as ``TransportError``); the
model's answer never raises.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from assay.grading.model_text import outer_object, strip_reasoning
from assay.models.client import ChatClient, Completion
from assay.records.judgement import RAW_REPLY_LIMIT, Judgement
from assay.records.manifest import utc_now
from assay.suites.judge_spec import LoadedJudge, fill_template

#: What a judge is shown: a model's answer, an agent's delivered tree, or its trajectory.
MaterialKind = Literal["answer", "artifact", "trajectory"]

_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)
_CITATION = re.compile(r"^(?P<path>.+):(?P<a>\d+)(?:-(?P<b>\d+))?$")
_LABEL = re.compile(r"^[A-Z][A-Z0-9_]*$")


@dataclass(frozen=True)
class Material:
    """What is judged: data, never instruction. ``files`` maps a path to its text (an answer
    is ``{"answer.txt": text}``); ``events`` are a trajectory's steps as text; ``context`` is
    the task's question or instruction, quoted too."""

    kind: MaterialKind
    files: Mapping[str, str] = field(default_factory=dict)
    events: tuple[str, ...] = ()
    context: str | None = None

    @classmethod
    def answer(cls, text: str, *, context: str | None = None) -> Material:
        return cls(kind="answer", files={"answer.txt": text}, context=context)

    def sha256(self) -> str:
        """Ties a judgement to the exact material judged."""
        ident = json.dumps({"kind": self.kind, "files": dict(self.files),
                            "events": list(self.events), "context": self.context},
                           sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(ident.encode("utf-8")).hexdigest()


def file_lines(text: str) -> list[str]:
    """A file's lines as numbered for the judge and for citations: split on ``\\n`` only (a
    trailing newline ends the last line, it does not start another)."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def escape(text: str) -> str:
    """The material's text as quoted: ``<<<`` shown as ``‹‹‹`` and ``>>>`` as ``›››``, so no
    delimiter (real, guessed or half-remembered) can be spelt inside the block."""
    return text.replace("<<<", "‹‹‹").replace(">>>", "›››")


def _shown_path(path: str) -> str:
    return escape(path).replace("\r", "\\r").replace("\n", "\\n")


def delimiters(nonce: str, label: str = "MATERIAL") -> tuple[str, str]:
    """The opening and closing line of a quoted block."""
    return f"<<<{label} {nonce} BEGIN>>>", f"<<<{label} {nonce} END>>>"


def numbered(text: str) -> list[str]:
    """A file's lines as shown: escaped and numbered (``  12| text``)."""
    lines = file_lines(text)
    width = max(4, len(str(len(lines))))
    return [f"{n:>{width}}| {escape(line)}" for n, line in enumerate(lines, 1)]


def _bar(text: str) -> list[str]:
    return ["| " + escape(line) for line in text.split("\n")]


def quote_material(material: Material, *, label: str = "MATERIAL",
                   nonce: str | None = None) -> tuple[str, str]:
    """(the quoted block, its nonce). The nonce is fresh per call unless given (tests)."""
    if not _LABEL.match(label):
        raise ValueError(f"label {label!r}: capital letters, digits and _ only")
    nonce = nonce or secrets.token_hex(8)
    begin, end = delimiters(nonce, label)
    out = [begin]
    if material.context is not None:
        out += ["[context]", *_bar(material.context)]
    for path, text in material.files.items():
        lines = file_lines(text)
        out.append(f"[file {_shown_path(path)} ({len(lines)} lines)]")
        out += numbered(text)
    for i, event in enumerate(material.events):
        out += [f"[event {i}]", *_bar(event)]
    out.append(end)
    return "\n".join(out), nonce


def render_criteria(judge: LoadedJudge) -> str:
    return "\n".join(f'- "{c.id}": {c.question.strip()} Scale: {c.describe_scale()}.'
                     for c in judge.criteria)


def reply_format(judge: LoadedJudge) -> str:
    def score(c: Any) -> str:
        if c.is_range:
            return f"<integer {c.scale[0]}-{c.scale[1]}>"
        return "<one of " + " | ".join(json.dumps(v) for v in c.scale) + ">"

    inner = ", ".join(f'"{c.id}": {{"score": {score(c)}, "citations": ["PATH:LINE", '
                      f'"PATH:START-END", "event:N"], "reason": "<one sentence>"}}'
                      for c in judge.criteria)
    return f'{{"criteria": {{{inner}}}}}'


def system_prompt(judge: LoadedJudge, begin: str, end: str) -> str:
    """The judge's rules: the template with this call's delimiter lines, the rubric and the
    reply's shape filled in."""
    return fill_template(judge.template_text, {"begin": begin, "end": end,
                                               "criteria": render_criteria(judge),
                                               "reply_format": reply_format(judge)})


def judge_messages(judge: LoadedJudge, material: Material, *,
                   nonce: str | None = None) -> tuple[list[dict[str, str]], str]:
    """(the chat messages, the nonce): the rules as the system message, the quoted material as
    the only user message."""
    block, nonce = quote_material(material, nonce=nonce)
    begin, end = delimiters(nonce)
    return [{"role": "system", "content": system_prompt(judge, begin, end)},
            {"role": "user", "content": block}], nonce


def check_citations(citations: list[str], material: Material) -> list[str]:
    """What is wrong with ``citations`` against ``material``; [] when every one exists. A
    path is cited as the judge was shown it (``‹‹‹`` for ``<<<``, ``\\n`` for a newline:
    :func:`_shown_path`) or as the file is named."""
    problems = []
    shown = {_shown_path(p): p for p in material.files}
    for cite in citations:
        if not isinstance(cite, str):
            problems.append(f"citation {cite!r} is not a string")
            continue
        m = _CITATION.match(cite.strip())
        if not m:
            problems.append(f"citation {cite!r} is not of the form PATH:LINE, PATH:START-END "
                            "or event:N")
            continue
        path, a = m.group("path"), int(m.group("a"))
        b = int(m.group("b")) if m.group("b") else a
        if path == "event" and "event" not in material.files:
            n = len(material.events)
            if not n:
                problems.append(f"citation {cite!r}: the material has no events")
            elif not 0 <= a <= b < n:
                problems.append(f"citation {cite!r}: the trajectory has {n} events "
                                f"(event:0 to event:{n - 1})")
            continue
        path = shown.get(path, path)  # cited as shown (escaped), or as the file is named
        if path not in material.files:
            problems.append(f"citation {cite!r}: no file {path!r} in the material")
            continue
        lines = len(file_lines(material.files[path]))
        if not 1 <= a <= b <= lines:
            problems.append(f"citation {cite!r}: {path} has {lines} lines" +
                            ("" if a <= b else f" and {a}-{b} is no range"))
    return problems


@dataclass(frozen=True)
class JudgeReply:
    """A reply that keeps the contract."""

    scores: dict[str, str | int]
    citations: dict[str, list[str]]
    reasons: dict[str, str]


def parse_reply(content: str | None, judge: LoadedJudge, material: Material, *,
                refusal: str | None = None) -> tuple[JudgeReply | None, list[str]]:
    """The verdict in ``content`` by ``assay.judge.reply/1``, or every problem found."""
    if refusal:
        return None, [f"the judge refused: {refusal[:200]}"]
    if content is None or not content.strip():
        return None, ["the reply is empty"]
    body = strip_reasoning(content)
    fence = _FENCE.search(body)
    if fence:
        body = fence.group(1).strip()
    reply, problem = outer_object(body)
    if reply is None:
        return None, [problem or "the reply has no JSON object"]
    crit = reply.get("criteria")
    if not isinstance(crit, dict):
        return None, ['the reply has no "criteria" object']
    problems: list[str] = []
    scores: dict[str, str | int] = {}
    cites: dict[str, list[str]] = {}
    reasons: dict[str, str] = {}
    for c in judge.criteria:
        entry = crit.get(c.id)
        if not isinstance(entry, dict):
            problems.append(f"criterion {c.id!r} is missing" if entry is None
                            else f"criterion {c.id!r} is not an object")
            continue
        score = c.normalise(entry.get("score"))
        if score is None:
            problems.append(f"criterion {c.id!r}: score {json.dumps(entry.get('score'))} is "
                            f"not in its scale ({c.describe_scale()})")
        else:
            scores[c.id] = score
        given = entry.get("citations")
        if not isinstance(given, list):
            problems.append(f"criterion {c.id!r}: no citations list")
        elif not given:
            problems.append(f"criterion {c.id!r}: no citation (at least one is required)")
        else:
            bad = check_citations(given, material)
            problems += [f"criterion {c.id!r}: {p}" for p in bad]
            cites[c.id] = [str(x).strip() for x in given]
        reason = entry.get("reason")
        if isinstance(reason, str):
            reasons[c.id] = reason
    extra = sorted(k for k in crit if judge.criterion(k) is None)
    problems += [f"criterion {k!r} is not in the rubric" for k in extra]
    if problems:
        return None, problems
    return JudgeReply(scores, cites, reasons), []


def retry_message(problems: list[str]) -> str:
    """The one retry: what was wrong, and what to send instead."""
    listed = "\n".join(f"- {p}" for p in problems[:20])
    return ("Your previous reply could not be used:\n" + listed + "\nReply again with only one "
            "JSON object of the form given in the rules: every criterion of the rubric, each "
            "with a score from its scale, at least one citation and a reason. Cite only files, "
            "lines and events shown in the material.")


def _sum_usage(completions: list[Completion]) -> dict[str, Any] | None:
    usages = [c.usage for c in completions if c.usage]
    if not usages:
        return None
    total: dict[str, Any] = {}
    for u in usages:
        for k, v in u.items():
            if isinstance(v, int | float) and not isinstance(v, bool):
                total[k] = total.get(k, 0) + v
    if len(usages) < len(completions):
        total["incomplete"] = True
    return total


async def judge_material(client: ChatClient, judge: LoadedJudge, material: Material, *,
                         subject: dict[str, Any]) -> Judgement:
    """One judgement of ``material``: valid, or invalid after one retry. Raises only
    ``TransportError`` (the endpoint gave no usable answer)."""
    if client.model != judge.spec.model:
        raise ValueError(f"the client asks {client.model!r}, the judge is {judge.spec.model!r}")
    messages, _ = judge_messages(judge, material)
    completions: list[Completion] = []
    first_problems: list[str] = []
    verdict: JudgeReply | None = None
    problems: list[str] = []
    for attempt in (1, 2):
        done = await client.complete(messages, temperature=judge.spec.temperature,
                                     max_tokens=judge.spec.max_tokens)
        completions.append(done)
        verdict, problems = parse_reply(done.content, judge, material, refusal=done.refusal)
        if verdict is not None:
            break
        if attempt == 1:
            first_problems = problems
            messages = messages + [{"role": "assistant", "content": done.content or ""},
                                   {"role": "user", "content": retry_message(problems)}]
    last = completions[-1]
    raw = last.content if last.content is None else last.content[:RAW_REPLY_LIMIT]
    return Judgement(
        judge_revision=judge.revision, pin=judge.pin(), subject=dict(subject),
        material_sha256=material.sha256(),
        status="valid" if verdict else "invalid",
        scores=verdict.scores if verdict else None,
        citations=verdict.citations if verdict else None,
        reasons=verdict.reasons if verdict else None,
        problems=[] if verdict else problems,
        first_problems=first_problems if len(completions) > 1 else [],
        tries=len(completions), served_model=last.served_model, raw_reply=raw,
        usage=_sum_usage(completions), at=utc_now())
